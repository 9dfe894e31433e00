"""The run machinery (`annotated_transformer.machinery`) on a run of the copy task, not a translation:
one session of a run (`LongRun`) in its run directory, its recipe settled (`_settle_recipe`), its
history read by one reader (`read_history`), and the cooldown fitted to a clock (`ClockFit`), on a
simulated clock so that every step takes the same time and every decision is exact."""

import itertools
import json
import re
from pathlib import Path

import pytest
from helpers import assert_identical, copy_batches, parameters, tiny_trainer

from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.runs.long_run import ClockFit, LongRun
from annotated_transformer.runs.run_files import (
    RunHistory,
    _settle_recipe,
    open_run,
    peek_extra,
    read_history,
)


def copy_run(run_dir, seconds_per_step: float = 1.0, max_minutes: float | None = None, **config) -> LongRun:
    """Train (or resume) a tiny copy-task run in `run_dir`, as chapter 10's demonstration does."""
    recipe = {"max_steps": 40, "cooldown": 0.0, "max_minutes": max_minutes, **config}
    with open_run(run_dir, recipe):
        trainer = tiny_trainer(max_steps=recipe["max_steps"], cooldown=recipe["cooldown"],
                               checkpoint_every=10)
        run = LongRun(run_dir, trainer, {"recipe": recipe}, keep=2, max_minutes=max_minutes,
                      clock=lambda: seconds_per_step * trainer.step)
        run.train(copy_batches)
    return run


def test_a_run_writes_its_layout_and_a_resumed_session_ends_as_an_uninterrupted_one(tmp_path):
    whole = copy_run(tmp_path / "whole")
    files = RunDirectory(tmp_path / "whole")
    assert [path.name for path in files.checkpoint_paths()] == ["step_00000030.pt", "step_00000040.pt"]
    assert json.loads(files.recipe.read_text())["max_steps"] == 40
    assert [record["step"] for record in read_history(files.path)] == list(range(1, 41))
    assert files.hardware.is_file() and files.lock.is_file()

    first = copy_run(tmp_path / "two", max_steps=20)  # max_steps may change when a run is resumed
    second = copy_run(tmp_path / "two", max_steps=40)
    assert (first.trainer.step, second.trainer.step) == (20, 40)
    assert_identical(parameters(second.trainer), parameters(whole.trainer))
    history = read_history(tmp_path / "two")
    assert [record["step"] for record in history] == list(range(1, 41))
    assert history[-1]["minutes"] == pytest.approx(40 / 60)  # every session's training counted


def test_the_clock_ends_the_cooldown_where_the_time_runs_out_and_a_resumed_run_follows_it(tmp_path, capsys):
    # 6 seconds a step and 2 minutes: 20 of 40 steps fit. At half the time (the cooldown's share),
    # step 10, the speed so far allows 20: the schedule ends there, its cooldown over the last half.
    run = copy_run(tmp_path / "run", seconds_per_step=6.0, max_minutes=2.0, cooldown=0.5)
    assert (run.trainer.step, run.fitted_last_step) == (20, 20)
    assert "at step 10: the time allows about 20 of 40 steps" in capsys.readouterr().err
    lrs = [record["lr"] for record in run.history.records]
    assert all(later < earlier for earlier, later in itertools.pairwise(lrs[10:]))  # cooling down
    newest = RunDirectory(tmp_path / "run").checkpoint_paths()[-1]
    assert peek_extra(newest)[ClockFit.KEY] == {"last_step": 20, "max_minutes": 2.0}

    again = copy_run(tmp_path / "run", seconds_per_step=6.0, max_minutes=2.0, cooldown=0.5)
    assert (again.trainer.step, again.trainer.last_step) == (20, 20)  # the decision, followed


def test_a_fast_machine_trains_its_planned_steps(tmp_path):
    run = copy_run(tmp_path / "run", seconds_per_step=1.0, max_minutes=2.0, cooldown=0.5)
    assert (run.trainer.step, run.fitted_last_step) == (40, None)


def test_a_recipe_is_refused_under_checkpoints_and_taken_before_with_its_built_files_removed(tmp_path):
    run_dir = tmp_path / "run"
    built = {"vocab": ("vocab_size",), "cache": ("vocab_size",)}
    _settle_recipe(run_dir, {"vocab_size": 100, "lr": 1.0})
    files = RunDirectory(run_dir)
    files.vocab.write_text("{}")
    files.cache.mkdir()
    _settle_recipe(run_dir, {"vocab_size": 100, "lr": 2.0}, built_from=built)  # no checkpoint: taken
    assert files.vocab.exists() and files.cache.exists()  # built from a field that did not change
    _settle_recipe(run_dir, {"vocab_size": 200, "lr": 2.0}, built_from=built)
    assert not files.vocab.exists() and not files.cache.exists()
    files.model.write_bytes(b"a finished run")
    with pytest.raises(ValueError, match=r"another configuration \(lr: 2\.0 -> 3\.0\)"):
        _settle_recipe(run_dir, {"vocab_size": 200, "lr": 3.0})
    _settle_recipe(run_dir, {"vocab_size": 200, "lr": 2.0, "max_steps": 9})  # a resumable field
    added_later = {"vocab_size": 200, "lr": 2.0, "new": 1}  # a run saved before "new" existed used 1
    _settle_recipe(run_dir, added_later, upgrade=lambda saved: {"new": 1, **saved})


def test_history_json_has_one_reader(tmp_path):
    # The one reader: no module of the package, and no experiment, reads history.json by itself.
    root = Path(__file__).resolve().parent.parent
    sources = [*(root / "annotated_transformer").rglob("*.py"), *(root / "experiments").glob("*.py")]
    raw = [path.name for path in sources
           if re.search(r"history(\.json\"\))?\.read_text\(", path.read_text(encoding="utf-8"))]
    assert not raw, f"history.json read without read_history in {raw}"
    path = RunDirectory(tmp_path).history
    with pytest.raises(ValueError, match=r"history\.json does not exist"):
        read_history(tmp_path)
    path.write_text('[{"step": 1, "minutes": 0.5}, {"step": "two"}]')
    with pytest.raises(ValueError, match=r"history\.json is damaged"):
        read_history(path)
    history = RunHistory(path, resumed_step=3, resumed_minutes=1.5)
    assert (history.records, history.minutes_trained()) == ([], 1.5)
    assert path.with_name("history.json.damaged").exists() and not path.exists()
