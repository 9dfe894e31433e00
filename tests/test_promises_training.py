"""Promises of the training path at values where a bug shows (issue 50): gradient accumulation over an
epoch that `accumulate` does not divide, the clock-fitted cooldown (`ClockFit`) deciding at the right
share of the time limit and forgetting a decision of another limit, a resumed run refusing a change
of every recipe field that changes training, and a checkpoint refused for any non-finite parameter.

Each test says which wrong implementation its parameters tell apart from the right one."""

import dataclasses
import json
import math
import shutil
import sys
import typing
from pathlib import Path

import pytest
import torch
from helpers import copy_batches, tiny_trainer

from annotated_transformer.checkpoints import (
    CheckpointDirectory,
    CheckpointError,
    read_checkpoint,
    save_checkpoint,
)
from annotated_transformer.model import TransformerConfig
from annotated_transformer.recipes import Recipe, get_recipe
from annotated_transformer.runs.long_run import ClockFit, LongRun
from annotated_transformer.runs.run_files import open_run
from annotated_transformer.runs.translation import train_translation
from annotated_transformer.training import TrainConfig, TrainingDiverged

# --- gradient accumulation: the last, short group of an epoch ---------------------------------------


@pytest.mark.parametrize("prefetch", [False, True])
def test_the_last_group_of_an_epoch_that_accumulate_does_not_fill_is_a_step(prefetch):
    """7 micro-batches an epoch, 3 per step: the steps take batches 0-2, 3-5, then batch 6 alone (not
    dropped, not merged into the next epoch), then the next epoch's 0-2. Each step's token count
    says which batches it took; with the last group dropped, step 3 would be the next epoch's 0-2.
    With prefetching too, which builds the groups in another thread."""
    batches = copy_batches(0)[:7]
    tokens = [batch.n_tokens for batch in batches]
    assert len(set(tokens)) == 7  # so that a step's token count says which batches it took
    trainer = tiny_trainer(max_steps=4, accumulate=3, prefetch=prefetch)
    history = trainer.fit(lambda epoch: batches)
    assert [record.n_tokens for record in history] == [
        sum(tokens[0:3]), sum(tokens[3:6]), tokens[6], sum(tokens[0:3])]
    assert (trainer.step, trainer.epoch, trainer.position) == (4, 1, 3)


def test_every_token_of_an_epoch_is_trained_on_once():
    """Over one epoch (3 steps of up to 3 of 7 micro-batches) the steps see every token of the epoch
    once: 3 does not divide 7, and a dropped last group would lose batch 6's tokens."""
    batches = copy_batches(1)[:7]
    trainer = tiny_trainer(max_steps=3, accumulate=3)
    history = trainer.fit(lambda epoch: batches)
    assert sum(record.n_tokens for record in history) == sum(batch.n_tokens for batch in batches)
    assert (trainer.epoch, trainer.position) == (1, 0)


# --- ClockFit: the moment of the decision ------------------------------------------------------------


@pytest.mark.parametrize(("cooldown", "moment"), [(0.2, 8.0), (0.3, 7.0)])
def test_the_clock_decides_once_one_minus_the_cooldown_of_the_time_has_passed(cooldown, moment):
    """With a cooldown of 0.2 (0.3) of 100 steps and 10 minutes, the decision comes after 8 (7)
    minutes, 1 - cooldown of the limit, not after 2 (3), the cooldown's share (nor after half the
    time, where the two agree for a cooldown of 0.5). At step 20 the speed so far allows 20 × 10 /
    minutes steps. Just before the moment: no decision."""
    trainer = tiny_trainer(max_steps=100, cooldown=cooldown)
    trainer.step = 20
    fit = ClockFit(trainer, 10.0, {})
    assert fit.last_step(moment - 0.01) is None
    assert fit.last_step(cooldown * 10.0) is None  # the wrong share's moment
    assert fit.last_step(moment + 0.01) == round(20 * 10.0 / (moment + 0.01))


def test_the_clock_decides_only_before_the_planned_cooldown_begins():
    """A cooldown of 0.2 of 100 steps begins at step 80: at step 79 the clock still fits it (the time
    allows round(79 × 10 / 9) = 88 steps), at step 80 the machine was fast enough and the planned
    schedule stays. (A cooldown start taken as cooldown_steps, 20, would never decide here.)"""
    trainer = tiny_trainer(max_steps=100, cooldown=0.2)
    fit = ClockFit(trainer, 10.0, {})
    trainer.step = 79
    assert fit.last_step(9.0) == 88
    trainer.step = 80
    assert fit.last_step(9.0) is None


# --- ClockFit: a decision of another time limit -------------------------------------------------------


def test_a_decision_is_followed_under_its_own_limit_and_forgotten_under_another():
    """A checkpoint decided, under 10 minutes, to end the schedule at step 50 (of 100): a session
    resumed under the same limit ends there, one under 20 minutes plans all 100 steps again and may
    decide anew."""
    saved = {ClockFit.KEY: {"last_step": 50, "max_minutes": 10.0}}
    same = tiny_trainer(max_steps=100, cooldown=0.2)
    extra: dict = {}
    ClockFit(same, 10.0, extra).restore(saved)
    assert same.last_step == 50 and extra[ClockFit.KEY]["last_step"] == 50

    other = tiny_trainer(max_steps=100, cooldown=0.2)
    extra = {}
    fit = ClockFit(other, 20.0, extra)
    fit.restore(saved)
    assert other.last_step == 100 and ClockFit.KEY not in extra
    other.step = 20
    assert fit.last_step(16.0) == 25  # a new decision, at 0.8 of the new limit


def copy_run(run_dir, max_minutes: float, seconds_per_step: float = 6.0) -> LongRun:
    """Train (or resume) a tiny copy-task run of 40 steps with a cooldown of half the steps in `run_dir`,
    on a simulated clock of `seconds_per_step` (as tests/test_long_run.py's runs)."""
    recipe = {"max_steps": 40, "cooldown": 0.5, "max_minutes": max_minutes}
    with open_run(run_dir, recipe):
        trainer = tiny_trainer(max_steps=40, cooldown=0.5, checkpoint_every=10)
        run = LongRun(run_dir, trainer, {"recipe": recipe}, keep=2, max_minutes=max_minutes,
                      clock=lambda: seconds_per_step * trainer.step)
        run.train(copy_batches)
    return run


def test_a_run_resumed_under_another_time_limit_does_not_keep_the_old_decision(tmp_path):
    """6 s a step under 2 minutes: after 1 minute (step 10) the clock ends the schedule at step 20, and
    the run stops there. Resumed under 4 minutes, it must not stop at the old step 20: the new limit
    allows all 40 steps, and the cooldown ends at step 40 as planned."""
    first = copy_run(tmp_path / "run", max_minutes=2.0)
    assert (first.trainer.step, first.fitted_last_step) == (20, 20)
    resumed = copy_run(tmp_path / "run", max_minutes=4.0)
    assert (resumed.trainer.step, resumed.trainer.last_step, resumed.fitted_last_step) == (40, 40, None)


# --- a resumed run refuses a change of what it trains ------------------------------------------------

# What may change when a run is resumed: its name, how long it trains, how it computes and how it is
# decoded. Written out here, not read from the package, so that a field the package lets through by
# mistake fails below.
ALLOWED_TO_CHANGE = {"name", "max_steps", "max_minutes", "average_last", "beam_size", "alpha", "compile",
                     "precision"}
# The fields of the recipe's parts that the run sets, not the recipe, and the parts themselves.
SET_BY_THE_RUN = {"model", "train", "src_vocab_size", "tgt_vocab_size", "share_embeddings", "progress",
                  "log_every", "track_grad_norm", "prefetch"}
SETTINGS = {spec.name: spec for kind in (Recipe, TransformerConfig, TrainConfig)
            for spec in dataclasses.fields(kind) if spec.name not in SET_BY_THE_RUN}
# Other values where the generic rule of `another_value` does not give a valid recipe.
OTHER_VALUES = {"corpus": "multi30k", "n_decoder_layers": 2, "d_k": 8, "d_v": 8, "clip_grad_norm": 1.0}


def another_value(name: str, value: typing.Any) -> typing.Any:
    """A valid value of setting `name` other than `value`: another choice, the other bool, twice a
    count (or 1 for 0), a share or rate 0.05 higher."""
    if name in OTHER_VALUES:
        return OTHER_VALUES[name]
    kind = SETTINGS[name].type
    if typing.get_origin(kind) is typing.Literal:
        return next(choice for choice in typing.get_args(kind) if choice != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return 2 * value if value else 1
    if isinstance(value, float):
        return value + 0.05
    raise AssertionError(f"no other value of the new setting {name}={value!r}: add one to OTHER_VALUES")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished one-step run of a tiny builtin recipe (a checkpoint to protect, and its recipe.json),
    trained once for the module; each test changes a copy."""
    recipe = get_recipe("builtin", n_layers=1, d_model=32, d_ff=64, n_heads=2, vocab_size=300,
                        max_tokens=600, warmup=10, max_steps=1, checkpoint_every=1, average_last=1)
    run_dir = tmp_path_factory.mktemp("promises") / "run"
    train_translation(recipe, run_dir, device="cpu", progress=False)
    return run_dir


def saved_recipe(run_dir: Path) -> Recipe:
    return Recipe.from_dict(json.loads((run_dir / "recipe.json").read_text()))


def test_the_settings_checked_on_resume_are_every_setting_of_a_recipe(finished_run):
    """The fields derived from the three dataclasses are exactly the recipe's settings on disk."""
    assert set(SETTINGS) == set(saved_recipe(finished_run).to_dict())
    assert ALLOWED_TO_CHANGE <= set(SETTINGS)


@pytest.mark.parametrize("name", sorted(set(SETTINGS) - ALLOWED_TO_CHANGE))
def test_a_resumed_run_refuses_a_change_of_every_setting_that_changes_training(name, finished_run, tmp_path,
                                                                                monkeypatch):
    """A finished tiny run, trained again with one setting changed (the regularizers included:
    dropout, attention and feed-forward dropout, label smoothing, BPE-dropout, R-Drop's α), is refused
    naming it, before its data is read. The list comes from the dataclasses' fields, so that a new
    setting is covered until it is added to ALLOWED_TO_CHANGE."""
    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    saved = saved_recipe(run_dir)
    value = saved.to_dict()[name]
    changed = saved.replace(**{name: another_value(name, value)})
    assert changed.to_dict()[name] != value

    def no_data(*args, **kwargs):
        raise AssertionError(f"a change of {name} was not refused: the run read its data")

    monkeypatch.setattr(sys.modules[train_translation.__module__], "corpus", no_data)
    with pytest.raises(ValueError, match=rf"holds a run of another configuration \({name}: "):
        train_translation(changed, run_dir, device="cpu", progress=False)


# --- non-finite parameters ------------------------------------------------------------------------------

NON_FINITE = [math.inf, -math.inf, math.nan]


def last_parameter(model: torch.nn.Module) -> torch.Tensor:
    """The model's last parameter (the decoder's last LayerNorm bias): a check of the first tensor, or
    of the weights only, would miss it."""
    return list(model.parameters())[-1]


@pytest.mark.parametrize("value", NON_FINITE, ids=["+inf", "-inf", "nan"])
def test_a_checkpoint_of_a_non_finite_parameter_is_refused_when_saved_and_when_read(value, tmp_path):
    """One +inf, -inf or NaN in the last element of the last parameter: a run's checkpoint directory
    refuses to save it (TrainingDiverged), and a file holding it is refused when read. A check for
    NaN only, for +inf only, or of `abs() == inf` only, misses one of the three."""
    trainer = tiny_trainer()
    with torch.no_grad():
        last_parameter(trainer.model).view(-1)[-1] = value
    directory = CheckpointDirectory(tmp_path / "run")
    with pytest.raises(TrainingDiverged, match="parameters are NaN or infinite"):
        directory.save(trainer)
    assert directory.paths() == []
    path = save_checkpoint(tmp_path / "bad.pt", trainer.model)
    with pytest.raises(CheckpointError, match="NaN or infinite parameters"):
        read_checkpoint(path)


def test_the_largest_finite_parameters_are_saved_and_read(tmp_path):
    """The boundary on the other side: float32's largest finite values, either sign, are parameters
    like any other (a check of a magnitude bound instead of finiteness would refuse them)."""
    trainer = tiny_trainer()
    largest = torch.finfo(torch.float32).max
    with torch.no_grad():
        last_parameter(trainer.model).view(-1)[-1] = largest
        last_parameter(trainer.model).view(-1)[0] = -largest
    path = CheckpointDirectory(tmp_path / "run").save(trainer)
    assert read_checkpoint(path)["state"]["model"].keys() == trainer.model.state_dict().keys()
