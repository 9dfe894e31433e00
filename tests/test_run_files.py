"""The run layer's files, one function at a time (annotated_transformer/runs/run_files.py): a damaged
JSON is set aside and said in one line, the recipe saved with a run is settled against the one asked
for, the lock names its holder, the history accounts minutes per step, hardware and data folder are
kept. Fast: tmp_path only, no training."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.runs import run_files
from annotated_transformer.runs.run_files import (
    RunHistory,
    _changed_fields,
    _check_recipe,
    _in_use,
    _make_run_dir,
    _settle_recipe,
    peek_extra,
    read_history,
    read_recipe,
    record_data_dir,
    record_hardware,
    run_data_dir,
    set_aside,
)
from annotated_transformer.training import StepStats


class Clock:
    """A clock that a test moves by hand (seconds), started far from zero."""

    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def save_model(run_dir, extra):
    """A run directory whose model.pt holds `extra`: a run with training to protect."""
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"extra": extra}, run_dir / "model.pt")


# --- _read_json, read_recipe, set_aside -------------------------------------------------------------


def test_read_recipe_names_a_file_that_holds_no_recipe(tmp_path):
    path = tmp_path / "recipe.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError) as error:
        read_recipe(path)
    assert str(error.value) == f"{path} is damaged (it holds no recipe)"


def test_read_recipe_reads_utf8_whatever_the_locale(tmp_path):
    """A recipe is read as UTF-8 even where the locale's encoding is ASCII."""
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps({"name": "café"}, ensure_ascii=False), encoding="utf-8")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    code = ("import sys, locale; from pathlib import Path\n"
            "from annotated_transformer.runs.run_files import read_recipe\n"
            "print(locale.getpreferredencoding(False), file=sys.stderr)\n"
            "print(read_recipe(Path(sys.argv[1]))['name'].encode('utf-8').hex())\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "café".encode().hex()


def test_set_aside_keeps_the_file_as_damaged_and_accepts_one_already_moved(tmp_path):
    path = tmp_path / "history.json"
    path.write_text("{")
    kept = set_aside(path)
    assert kept == tmp_path / "history.json.damaged" and kept.read_text() == "{" and not path.exists()
    assert set_aside(path) == kept  # another process moved it already: no error


# --- peek_extra -------------------------------------------------------------------------------------


def test_peek_extra_reads_extra_and_is_empty_for_what_holds_none(tmp_path):
    good, listed, odd = tmp_path / "good.pt", tmp_path / "list.pt", tmp_path / "odd.pt"
    torch.save({"extra": {"recipe": {"a": 1}}, "model": {"w": torch.ones(2)}}, good)
    torch.save([1, 2], listed)
    torch.save({"extra": [1, 2]}, odd)
    assert peek_extra(good) == {"recipe": {"a": 1}}
    assert peek_extra(listed) == {}
    assert peek_extra(odd) == {}
    assert peek_extra(tmp_path / "missing.pt") == {}


class Payload:
    """An object that only a full unpickling builds: a checkpoint is never loaded that way."""


def test_peek_extra_does_not_unpickle_arbitrary_objects(tmp_path, monkeypatch):
    """Not even where torch.load's default is a full unpickling (torch 2.5, or this variable set)."""
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    path = tmp_path / "unsafe.pt"
    torch.save({"extra": {"recipe": {"a": 1}}, "payload": Payload()}, path)
    assert peek_extra(path) == {}


# --- recipes: _changed_fields, _check_recipe, _saved_recipe, _settle_recipe -------------------------


def test_changed_fields_without_upgrade_compares_the_saved_recipe_as_it_is():
    assert _changed_fields({"a": 1, "max_steps": 5}, {"a": 2, "max_steps": 9}, None) == {"a": (1, 2)}


def test_check_recipe_names_each_changed_field_old_and_new(tmp_path):
    with pytest.raises(ValueError) as error:
        _check_recipe(tmp_path, {"a": 2, "b": "y", "c": 3}, {"a": 1, "b": "x", "c": 3}, None)
    assert str(error.value) == (f"{tmp_path} holds a run of another configuration (a: 1 -> 2, "
                                f"b: 'x' -> 'y'); train in a new run directory, or with the same settings "
                                f"to resume it")


def test_settle_recipe_refuses_a_changed_setting_of_a_run_with_checkpoints(tmp_path):
    run = tmp_path / "run"
    save_model(run, {"recipe": {"a": 1}})
    (run / "recipe.json").write_text(json.dumps({"a": 1}))
    with pytest.raises(ValueError) as error:
        _settle_recipe(str(run), {"a": 2})
    assert str(error.value).startswith(f"{run} holds a run of another configuration (a: 1 -> 2); ")
    _settle_recipe(str(run), {"a": 1, "max_steps": 7})  # a resumable field may change
    assert (run / "recipe.json").read_text() == json.dumps({"a": 1, "max_steps": 7}, indent=1)


def test_settle_recipe_without_checkpoints_takes_new_settings_and_removes_what_they_built(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.json").write_text(json.dumps({"a": 1, "b": 1}))
    (run / "vocab.json").write_text("{}")
    (run / "cache").mkdir()
    (run / "cache" / "part").write_text("x")
    (run / "history.json").write_text("[]")
    recipe = {"a": 2, "b": 2}
    _settle_recipe(run, recipe, built_from={"vocab": ("a",), "cache": ("b",), "history": ("z",),
                                            "validation": ("a",)})  # validation.json: not there
    assert capsys.readouterr().err == (f"note: {run} holds no checkpoint yet, so it takes the new settings "
                                       f"of a, b\n")
    assert not (run / "vocab.json").exists() and not (run / "cache").exists()
    assert (run / "history.json").exists()  # built from no changed field: kept
    assert (run / "recipe.json").read_text() == json.dumps(recipe, indent=1)


def test_settle_recipe_keeps_files_built_from_fields_that_did_not_change(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.json").write_text(json.dumps({"a": 1, "b": 1}))
    (run / "vocab.json").write_text("{}")
    _settle_recipe(run, {"a": 2, "b": 1}, built_from={"vocab": ("b",)})
    assert (run / "vocab.json").exists()


def test_settle_recipe_without_checkpoints_reads_the_saved_recipe_through_upgrade(tmp_path, capsys):
    """A field added since, with the value the old runs used, is no change: nothing is rebuilt."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.json").write_text(json.dumps({"a": 1}))
    (run / "vocab.json").write_text("{}")
    _settle_recipe(run, {"a": 1, "b": 2}, upgrade=lambda saved: {**saved, "b": 2},
                   built_from={"vocab": ("b",)})
    assert (run / "vocab.json").exists()
    assert capsys.readouterr().err == ""


def test_settle_recipe_takes_new_settings_even_when_a_built_folder_cannot_be_removed(tmp_path, monkeypatch):
    run = tmp_path / "run"
    (run / "cache").mkdir(parents=True)
    (run / "cache" / "stuck").write_text("x")
    (run / "recipe.json").write_text(json.dumps({"a": 1}))
    unlink = os.unlink

    def refuse(path, *args, **kwargs):
        if str(path).endswith("stuck"):
            raise PermissionError(13, "Permission denied", str(path))
        return unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refuse)
    _settle_recipe(run, {"a": 2}, built_from={"cache": ("a",)})
    monkeypatch.undo()
    assert json.loads((run / "recipe.json").read_text()) == {"a": 2}


def test_a_missing_recipe_is_taken_from_the_newest_checkpoint_and_said(tmp_path, capsys):
    run = tmp_path / "run"
    save_model(run, {"recipe": {"a": 1}})
    _settle_recipe(run, {"a": 1})
    assert capsys.readouterr().err == (f"note: {run / 'recipe.json'} is missing: the run's recipe is taken "
                                       f"from {run / 'model.pt'}\n")
    with pytest.raises(ValueError, match=r"\(a: 1 -> 2\)"):
        (run / "recipe.json").unlink()
        _settle_recipe(run, {"a": 2})


def test_a_missing_recipe_of_a_run_without_checkpoints_is_simply_written(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    _settle_recipe(run, {"a": 1})
    assert capsys.readouterr().err == ""
    assert (run / "recipe.json").read_text() == json.dumps({"a": 1}, indent=1)


def test_a_damaged_recipe_without_checkpoints_is_replaced_and_said(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    path = run / "recipe.json"
    path.write_text("[1]")
    _settle_recipe(run, {"a": 1})
    assert capsys.readouterr().err == (f"note: {path} is damaged (it holds no recipe); it is replaced, since "
                                       f"the run holds no checkpoint yet\n")
    assert json.loads(path.read_text()) == {"a": 1}


def test_a_damaged_recipe_is_restored_from_the_checkpoint_and_kept_aside(tmp_path, capsys):
    run = tmp_path / "run"
    copy = {"a": 1, "b": [1, 2]}
    save_model(run, {"recipe": copy})
    path = run / "recipe.json"
    path.write_text("[1]")
    assert run_files._saved_recipe(RunDirectory(run), True) == copy
    assert path.read_text() == json.dumps(copy, indent=1)
    assert (run / "recipe.json.damaged").read_text() == "[1]"
    assert capsys.readouterr().err == (f"note: {path} is damaged (it holds no recipe): restored it "
                                       f"from {run / 'model.pt'}, and kept the damaged file as "
                                       f"recipe.json.damaged\n")


# --- the lock: _make_run_dir, _in_use ---------------------------------------------------------------


def test_make_run_dir_makes_every_missing_folder(tmp_path):
    run = tmp_path / "a" / "b" / "run"
    _make_run_dir(run)
    assert run.is_dir()
    _make_run_dir(run)  # already there: fine


def test_make_run_dir_names_a_file_where_the_run_directory_should_be(tmp_path):
    run = tmp_path / "run"
    run.write_text("")
    with pytest.raises(ValueError) as error:
        _make_run_dir(run)
    assert str(error.value) == (f"the run directory {run} is a file, not a folder: move the file, or train "
                                f"in a new run directory")


def test_make_run_dir_names_a_file_where_a_folder_above_it_should_be(tmp_path):
    above = tmp_path / "above"
    above.write_text("")
    run = above / "x" / "run"
    with pytest.raises(ValueError) as error:
        _make_run_dir(run)
    assert str(error.value) == (f"the run directory {run} cannot be made: {above} is a file, not a folder: "
                                f"move the file, or train in a new run directory")


def in_use_message(files, who):
    return (f"{files.path} is in use: {who} is training in it (it holds {files.lock}), and two trainings "
            f"would overwrite each other's checkpoints; wait for it to end or stop it, or train in a new "
            f"run directory")


@pytest.mark.parametrize("holder, who", [
    ("4242 elsewhere-host\n", "process 4242 on elsewhere-host"),
    ("4242 other host\n", "process 4242 on other host"),
    (f"4242 {socket.gethostname()}\n", "process 4242"),
    ("4242\n", "process 4242"),
    ("x1 elsewhere", "another process on elsewhere"),
    ("", "another process"),
])
def test_in_use_names_the_process_that_holds_the_lock_and_its_host(tmp_path, holder, who):
    files = RunDirectory(tmp_path / "run")
    assert _in_use(files, holder) == in_use_message(files, who)


# --- history ----------------------------------------------------------------------------------------


def records(*steps):
    return [{"step": s, "loss": 1.0, "minutes": float(s * 10)} for s in steps]


def test_read_history_reads_a_run_directory_or_the_file(tmp_path):
    (tmp_path / "history.json").write_text(json.dumps(records(1, 2)))
    assert read_history(tmp_path) == records(1, 2)
    assert read_history(str(tmp_path)) == records(1, 2)
    assert read_history(tmp_path / "history.json") == records(1, 2)


def test_read_history_names_a_missing_file(tmp_path):
    with pytest.raises(ValueError) as error:
        read_history(tmp_path)
    assert str(error.value) == f"{tmp_path / 'history.json'} does not exist: the run has not trained yet"


@pytest.mark.parametrize("content", [
    {"step": 1, "minutes": 1.0},
    [{"step": 1}],
    [{"step": "1", "minutes": 1.0}],
    [{"minutes": 1.0}],
    [[1, 2]],
    [{"step": 1, "minutes": "1"}],
])
def test_read_history_names_a_file_that_holds_no_list_of_step_records(tmp_path, content):
    path = tmp_path / "history.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError) as error:
        read_history(path)
    assert str(error.value) == f"{path} is damaged (it holds no list of step records)"


def test_read_history_accepts_integer_and_float_minutes(tmp_path):
    path = tmp_path / "history.json"
    path.write_text(json.dumps([{"step": 1, "minutes": 1}, {"step": 2, "minutes": 2.5}]))
    assert read_history(path) == [{"step": 1, "minutes": 1}, {"step": 2, "minutes": 2.5}]


def test_history_keeps_the_records_up_to_the_resumed_step_and_its_minutes(tmp_path):
    path = tmp_path / "history.json"
    path.write_text(json.dumps(records(1, 2, 3, 4, 5)))
    clock = Clock()
    history = RunHistory(path, 3, resumed_minutes=99.0, clock=clock)
    assert history.records == records(1, 2, 3)
    assert history.done_minutes == 30.0 and history.minutes_trained() == 30.0 and history.minutes() == 30.0


def test_a_new_history_starts_at_the_resumed_minutes_or_at_zero(tmp_path):
    clock = Clock()
    assert RunHistory(tmp_path / "history.json", 0, clock=clock).minutes() == 0.0
    history = RunHistory(tmp_path / "history.json", 4, resumed_minutes=7.5, clock=clock)
    assert history.minutes() == 7.5 and history.minutes_trained() == 7.5


def test_history_minutes_count_this_session_in_minutes(tmp_path):
    clock = Clock(1000.0)
    history = RunHistory(tmp_path / "history.json", 0, resumed_minutes=2.0, clock=clock)
    clock.now += 120
    assert history.minutes() == pytest.approx(4.0, abs=1e-12)


def test_left_out_seconds_are_not_training_time(tmp_path):
    clock = Clock(1000.0)
    history = RunHistory(tmp_path / "history.json", 0, clock=clock)
    clock.now += 180
    history.leave_out(60)
    assert history.minutes() == pytest.approx(2.0, abs=1e-12)


def test_history_records_each_step_with_the_minutes_at_its_end(tmp_path):
    clock = Clock(1000.0)
    history = RunHistory(tmp_path / "history.json", 0, resumed_minutes=1.0, clock=clock)
    clock.now += 60
    history.step_done(1)
    clock.now += 120
    history.add([StepStats(step=1, loss=2.5, nll=2.0, n_tokens=100, lr=0.001, grad_norm=0.5),
                 StepStats(step=2, loss=2.25, nll=1.75, n_tokens=90, lr=0.002, grad_norm=None)])
    assert history.records == [
        {"step": 1, "loss": 2.5, "nll": 2.0, "lr": 0.001, "tokens": 100, "grad_norm": 0.5, "minutes": 2.0},
        {"step": 2, "loss": 2.25, "nll": 1.75, "lr": 0.002, "tokens": 90, "grad_norm": None, "minutes": 4.0},
    ]
    assert history.step_minutes == {}
    assert history.minutes_trained() == 4.0
    history.save()
    assert history.path.read_text() == json.dumps(history.records)


def test_a_damaged_history_is_set_aside_and_said(tmp_path, capsys):
    path = tmp_path / "history.json"
    path.write_text("{")
    history = RunHistory(path, 6, resumed_minutes=12.25, clock=Clock())
    assert history.records == [] and history.minutes() == 12.25
    assert (tmp_path / "history.json.damaged").read_text() == "{" and not path.exists()
    err = capsys.readouterr().err
    assert err.startswith(f"note: {path} is damaged (") and err.count("\n") == 1
    assert err.endswith("): kept it as history.json.damaged; the history starts again at step 6, after 12.2 "
                        "minutes of training\n")


def test_only_rank_0_sets_a_damaged_history_aside(tmp_path, monkeypatch):
    monkeypatch.setattr(run_files, "is_main_process", lambda: False)
    path = tmp_path / "history.json"
    path.write_text("{")
    assert RunHistory(path, 0, clock=Clock()).records == []
    assert path.read_text() == "{" and not (tmp_path / "history.json.damaged").exists()


# --- run.json and hardware.json ---------------------------------------------------------------------


def test_record_data_dir_keeps_the_resolved_folder_beside_what_run_json_held(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"other": 1}))
    record_data_dir(run, {"root": str(tmp_path / "data" / ".." / "data")})
    info = {"other": 1, "data_dir": str((tmp_path / "data").resolve())}
    assert (run / "run.json").read_text() == json.dumps(info, indent=1)
    assert run_data_dir(run) == (tmp_path / "data").resolve()
    record_data_dir(run, {"root": None})
    assert json.loads((run / "run.json").read_text()) == info


def test_record_data_dir_replaces_a_run_json_that_holds_no_object(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("[1, 2]")
    assert run_data_dir(run) is None
    record_data_dir(run, {"root": str(tmp_path)})
    assert json.loads((run / "run.json").read_text()) == {"data_dir": str(tmp_path.resolve())}


def test_record_hardware_writes_the_first_machine_once(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    info = record_hardware(run, torch.device("cpu"), 3)
    assert info["processes"] == 3 and info["device"] == "cpu"
    path = run / "hardware.json"
    assert path.read_text() == json.dumps(info, indent=1)
    assert record_hardware(run, torch.device("cpu"), 5) == info  # kept: the first session's
    path.write_text("{")
    again = record_hardware(run, torch.device("cpu"), 2)
    assert again["processes"] == 2 and json.loads(path.read_text()) == again
    err = capsys.readouterr().err
    assert err.startswith(f"note: {path} is damaged (")
    assert err.endswith("; written again, for this machine\n") and err.count("\n") == 1



def test_peek_extra_reads_a_checkpoint_saved_on_a_gpu(tmp_path, monkeypatch):
    """A checkpoint whose tensors were saved from CUDA memory is read on any machine (on the CPU)."""
    import torch.serialization

    monkeypatch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
    path = tmp_path / "gpu.pt"
    torch.save({"extra": {"recipe": {"a": 1}}, "model": {"w": torch.ones(2)}}, path)
    monkeypatch.undo()
    assert peek_extra(path) == {"recipe": {"a": 1}}


def test_peek_extra_does_not_load_the_weights(tmp_path):
    """Reading a checkpoint's `extra` leaves its weights on disk: a process that peeks into a 128 MB
    checkpoint grows by far less than 64 MB at its peak (VmHWM: Linux)."""
    if not Path("/proc/self/status").exists():
        pytest.skip("peak memory is read from /proc (Linux)")
    path = tmp_path / "big.pt"
    torch.save({"extra": {"recipe": {"a": 1}}, "model": {"w": torch.ones(16 * 2**20)}}, path)
    code = ("import re, sys; from pathlib import Path\n"
            "from annotated_transformer.runs.run_files import peek_extra\n"
            "def peak():\n"
            "    return int(re.search(r'VmHWM:\\s*(\\d+)', Path('/proc/self/status').read_text())[1])\n"
            "before = peak()\n"
            "extra = peek_extra(Path(sys.argv[1]))\n"
            "print(extra, (peak() - before) // 1024)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    extra, grown_mb = done.stdout.rsplit(" ", 1)
    assert extra == "{'recipe': {'a': 1}}" and int(grown_mb) < 32, done.stdout
