"""Paper §5.2: runs of 12 hours and 3.5 days. One session of such a run (`LongRun`): resumed from its
newest sound checkpoint (chapter 10's `CheckpointDirectory`), trained to `max_steps` or a time limit,
whichever comes first, with its checkpoints and history; not in the paper, a cooldown fitted to the
clock (`ClockFit`). Chapter 10 shows a run resumed, refused and fitted to its clock; chapter 14 trains
a translator with it."""

__all__ = ["ClockFit", "LongRun"]

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed

from annotated_transformer.batching import Batch
from annotated_transformer.checkpoints import CheckpointDirectory, CheckpointError
from annotated_transformer.helpers.processes import is_main_process
from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.runs.run_files import (
    RunHistory,
    note,
    peek_extra,
    record_hardware,
)
from annotated_transformer.training import StepStats, Trainer


class ClockFit:
    """Not in the paper: a cooldown (chapter 7) that ends when a run's time runs out.

    A cooldown is a share of `max_steps`, but a time limit (`max_minutes`) stops a run on a slow
    machine before it gets there: it would end mid-schedule, never cooled down. So once (1 -
    cooldown) of the minutes have passed with the cooldown not yet begun, the speed so far predicts
    the last step the clock allows, and the schedule is made to end there (`Trainer.end_schedule_at`):
    the cooldown takes the same share of the time as it would of the steps. A fast machine, whose
    cooldown begins before that moment, trains to max_steps as planned. The decision is kept in
    the checkpoints' `extra`, so that a resumed run follows it exactly.
    """

    KEY = "fitted_schedule"  # in checkpoint `extra`: {"last_step": ..., "max_minutes": ...}

    def __init__(self, trainer: Trainer, max_minutes: float | None, extra: dict) -> None:
        """`extra`: what the run's checkpoints add (`CheckpointDirectory.save`), where the decision goes."""
        self.trainer, self.max_minutes, self.extra = trainer, max_minutes, extra

    def last_step(self, minutes: float) -> int | None:
        """The step at which to end the schedule, if now is the moment to decide it; else None."""
        config, step, limit = self.trainer.config, self.trainer.step, self.max_minutes
        if limit is None or config.cooldown == 0 or self.KEY in self.extra:
            return None
        cooldown_start = config.max_steps - config.cooldown_steps  # as planned in steps
        if step == 0 or step >= cooldown_start or minutes < (1 - config.cooldown) * limit:
            return None
        allowed = round(step * limit / minutes)  # at the speed so far
        return min(config.max_steps, max(step, allowed))

    def apply(self, last_step: int, minutes: float | None = None) -> None:
        self.trainer.end_schedule_at(last_step)
        config = self.trainer.config
        self.extra[self.KEY] = {"last_step": last_step, "max_minutes": self.max_minutes}
        if minutes is not None:
            note(f"after {minutes:.1f} of {self.max_minutes:g} minutes, at step {self.trainer.step:,}: the "
                 f"time allows about {last_step:,} of {config.max_steps:,} steps, so the cooldown (the last "
                 f"{config.cooldown:.0%}) ends at step {last_step:,}")

    def restore(self, resumed_extra: dict) -> None:
        """Follow the decision of the run's checkpoint, if it made one under the same time limit."""
        saved = resumed_extra.get(self.KEY)
        if isinstance(saved, dict) and saved.get("max_minutes") == self.max_minutes:
            self.apply(min(int(saved["last_step"]), self.trainer.config.max_steps))


def _resume_run(trainer: Trainer, checkpoints: CheckpointDirectory) -> dict:
    """Resume `trainer` from the newest sound checkpoint, if any, noting each one passed over;
    returns its `extra` ({} for a new run). A run none of whose checkpoints can be resumed is
    refused: training from step 0 would overwrite them."""
    resumed, passed_over = checkpoints.resume_newest(trainer)
    if resumed is None and passed_over:
        reason = passed_over[0].removesuffix("; resuming from the checkpoint before it")
        raise CheckpointError(f"no checkpoint in {checkpoints.directory} can be resumed, and training "
                              f"from step 0 would overwrite them; move them away to start again. The newest: "
                              f"{reason}")
    for message in passed_over:
        note(message)
    return peek_extra(resumed) if resumed is not None else {}


class LongRun:
    """One session of a training run in its run directory (`RunDirectory`). Made, it has resumed
    `trainer` from the newest sound checkpoint (`_resume_run`), with the minutes of training and the
    clock's decision (`ClockFit`) that checkpoint recorded, and read the run's history and machine.
    `train` then trains until `trainer.config.max_steps` or `max_minutes` of training (every
    session counted), whichever comes first. Every checkpoint (`save`: the newest `keep` are kept)
    holds `extra`, which should hold the run's recipe (`extra["recipe"]`, which restores a damaged
    recipe.json), and the minutes so far. Rank 0 (`is_main_process`) alone writes the files."""

    def __init__(self, run_dir: str | Path, trainer: Trainer, extra: dict, keep: int = 0,
                 max_minutes: float | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.files, self.trainer, self.extra = RunDirectory(run_dir), trainer, extra
        self.max_minutes = max_minutes
        self.checkpoints = CheckpointDirectory(self.files.checkpoints, keep)
        self.hardware = record_hardware(self.files.path, trainer.device, trainer.world_size)
        resumed = _resume_run(trainer, self.checkpoints)
        self.clock_fit = ClockFit(trainer, max_minutes, extra)
        self.clock_fit.restore(resumed)
        self.history = RunHistory(self.files.history, trainer.step, resumed.get("minutes", 0.0), clock)

    def save(self) -> Path:
        """A checkpoint of the trainer's state, with `extra` and the minutes of training so far."""
        self.extra["minutes"] = self.history.minutes()
        return self.checkpoints.save(self.trainer, self.extra)

    def out_of_time(self) -> bool:
        return self.max_minutes is not None and self.history.minutes() >= self.max_minutes

    @property
    def fitted_last_step(self) -> int | None:
        """Where the time limit moved the end of the schedule (`ClockFit`), if it did."""
        return self.extra.get(ClockFit.KEY, {}).get("last_step")

    def train(
        self,
        epoch_batches: Callable[[int], Sequence[Batch]],
        score: Callable[[], dict] | None = None,
        every: int = 0,
    ) -> bool:
        """Train until `max_steps` or `max_minutes`, whichever comes first, with the cooldown fitted to
        the clock, a checkpoint every `checkpoint_every` steps and one at the end; True when the time
        limit ended training. `score()`, given, measures the model on held-out data every `every`
        steps and at the end, into validation.json, and its time is not counted as training time."""
        trainer, history, world_size = self.trainer, self.history, self.trainer.world_size
        checkpoint_every = trainer.config.checkpoint_every
        scores = _ScoreLog(self, score) if score is not None and is_main_process() else None

        def fit_to_clock(last_step: int | None, minutes: float) -> None:
            if last_step is not None:
                self.clock_fit.apply(last_step, minutes)

        def on_step(step: int) -> bool:  # the host's clock only: the step need not have finished
            history.step_done(step)
            if scores is not None and every and step % every == 0:
                scores.score()  # waits for the device, as a log point does
            if world_size > 1:
                return False
            minutes = history.minutes()
            fit_to_clock(self.clock_fit.last_step(minutes), minutes)
            return self.out_of_time()

        def on_log(records: list[StepStats]) -> bool:
            history.add(records)
            if checkpoint_every and trainer.step % checkpoint_every == 0:
                history.save()
            if world_size == 1:
                return False
            # Every rank must stop, and fit its schedule, at the same step: rank 0's clock decides, at
            # the log points.
            minutes = history.minutes()
            last_step = self.clock_fit.last_step(minutes) or 0
            decision = torch.tensor([float(self.out_of_time()), float(last_step)], device=trainer.device)
            torch.distributed.broadcast(decision, src=0)
            stop, last_step = decision.tolist()
            fit_to_clock(int(last_step) or None, minutes)
            return bool(stop)

        history.start()
        stopped = self.out_of_time()
        if trainer.step < trainer.last_step and not stopped:
            trainer.fit(epoch_batches, on_log=on_log, on_step=on_step, on_checkpoint=self.save)
            stopped = trainer.step < trainer.config.max_steps
            if not checkpoint_every or trainer.step % checkpoint_every:  # unless fit has just saved it
                self.save()
        if scores is not None:
            scores.score()  # the model as training left it (once only, if this step was scored)
        history.save()
        return stopped


class _ScoreLog:
    """A run's `validation.json`: what `score()` said of the model at its steps, each record with the
    step and the minutes of training so far. Like `history.json`, it is carried across resumed
    sessions (records after the resumed step are dropped), and the scoring's own time is left out
    of the run's minutes, so that a time limit buys the same training with or without it."""

    def __init__(self, run: "LongRun", score: Callable[[], dict]) -> None:
        self.run, self.score_model = run, score
        self.log = RunHistory(run.files.validation, run.trainer.step)

    def score(self) -> None:
        step, history = self.run.trainer.step, self.run.history
        if self.log.records and self.log.records[-1]["step"] == step:
            return
        started = history.clock()
        scores = self.score_model()
        history.leave_out(history.clock() - started)
        self.log.records.append({"step": step, "minutes": history.minutes(), **scores})
        self.log.save()
