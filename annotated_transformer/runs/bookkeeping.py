"""What a training session of chapter 14 keeps besides the training itself (`RunBookkeeping`): the
device, this process's rank and share of the batches, the run directory held for the session (its
lock, its recipe settled), the fingerprints every checkpoint records, the warnings, and the finish:
the averaged model written as `model.pt` (§6.1) and the run read back as a `TrainingRun`.

`train_translation` (chapter 14) shows the training; this object keeps its books, one call away.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

from annotated_transformer.batching import Batch
from annotated_transformer.checkpoints import checkpoint_step, save_checkpoint
from annotated_transformer.companions.hardware import check_device
from annotated_transformer.companions.translation_checks import batch_warning
from annotated_transformer.companions.vocabulary_files import read_vocabularies
from annotated_transformer.helpers.processes import is_main_process, rank_and_world_size
from annotated_transformer.model import Transformer
from annotated_transformer.recipes import Recipe
from annotated_transformer.runs.long_run import LongRun
from annotated_transformer.runs.fingerprints import BUILT_FROM, check_run_vocabulary, run_fingerprint
from annotated_transformer.runs.run_files import Run, open_run, record_data_dir
from annotated_transformer.runs.translation_files import TrainingRun
from annotated_transformer.tokenization import EncodedPairs, Vocabularies
from annotated_transformer.training import Trainer
from annotated_transformer.translator import Validator

__all__ = ["RunBookkeeping"]


def _upgrade(saved: dict) -> dict:
    """A recipe.json that an earlier version wrote, as today's recipes spell it."""
    return Recipe.from_dict(saved).to_dict()


class RunBookkeeping:
    """The books of one training session of `recipe` in a run directory (`open`): where it trains
    (`device`, checked before anything is written), which share of the batches this process trains
    (`shard`: its rank among the world's processes under torchrun, chapter 15), and the run held
    for the session (`run`: locked against a second training, its recipe settled, a full disk said
    with the checkpoint to resume from). `resume` builds the session (chapter 10's `LongRun`) with the
    fingerprints every checkpoint records, `train` trains it, and `finish` writes the averaged model."""

    def __init__(self, recipe: Recipe, run: Run, device: torch.device, corpus_options: dict) -> None:
        self.recipe, self.run, self.device, self.corpus_options = recipe, run, device, corpus_options
        rank, world_size = rank_and_world_size()
        self.shard = {"rank": rank, "world_size": world_size, "pin_memory": device.type == "cuda"}
        self.session: LongRun | None = None
        self.resumed_step, self.stopped = 0, False

    @classmethod
    @contextlib.contextmanager
    def open(cls, recipe: Recipe, run_dir: str | Path, device: torch.device | str | None = None,
             corpus_options: dict | None = None) -> Iterator[RunBookkeeping]:
        """Hold `run_dir` for this session of `recipe` (chapter 10's `open_run`), on `device`."""
        device, corpus_options = check_device(device), corpus_options or {}
        with open_run(Path(run_dir), recipe.to_dict(), _upgrade, BUILT_FROM) as run:
            if is_main_process():
                record_data_dir(run.path, corpus_options)
            yield cls(recipe, run, device, corpus_options)

    def resume(self, trainer: Trainer, vocabs: Vocabularies, encoded: EncodedPairs) -> LongRun:
        """The session of the run: `trainer` resumed from the newest sound checkpoint (`LongRun`), its
        checkpoints recording the run's fingerprints; a vocabulary the run was not trained with is
        refused, and batches too small for more than one sentence pair are warned about."""
        check_run_vocabulary(self.run.path, vocabs)
        extra = {**run_fingerprint(self.recipe, vocabs, trainer.model.config),
                 "longest_source": max(map(len, encoded.source), default=0)}
        self.session = LongRun(self.run.path, trainer, extra, keep=self.recipe.average_last,
                               max_minutes=self.recipe.max_minutes)
        self.resumed_step = trainer.step
        warning = batch_warning(encoded.lengths(), self.recipe.max_tokens)
        if is_main_process() and warning is not None and trainer.step < self.recipe.train.max_steps:
            warnings.warn(warning, stacklevel=3)
        return self.session

    def train(self, epoch_batches: Callable[[int], Sequence[Batch]], vocabs: Vocabularies,
              validator: Validator | None = None) -> None:
        """Train the session to `max_steps` or `max_minutes`; with a `validator`, rank 0 also scores
        the model every `validator.every` steps and at the end, into validation.json."""
        session = self._session()
        score = functools.partial(validator, session.trainer.model, vocabs) if validator is not None else None
        self.stopped = session.train(epoch_batches, score, every=validator.every if validator is not None else 0)

    def finish(self, model: Transformer, averaged: Sequence[Path], vocabs: Vocabularies) -> TrainingRun:
        """Write `model` (the average of the checkpoints `averaged`, §6.1) as the run's model.pt with
        the run's fingerprints, on rank 0, and return the run as a `TrainingRun`."""
        session = self._session()
        if is_main_process():
            fingerprint = run_fingerprint(self.recipe, read_vocabularies(self.run.vocab), model.config)
            extra = {**fingerprint, **session.extra, "averaged": [path.name for path in averaged]}
            extra.pop("minutes", None)  # the minutes of one checkpoint, not of the average
            step = checkpoint_step(averaged[-1]) if averaged else 0
            save_checkpoint(self.run.model, model, step=step, extra=extra)
        return TrainingRun(self.run.path, self.recipe, vocabs, model, session.history.records,
                           session.history.minutes_trained(), session.hardware,
                           steps=session.trainer.step, out_of_time=self.stopped,
                           fitted_last_step=session.fitted_last_step, resumed_step=self.resumed_step)

    def _session(self) -> LongRun:
        if self.session is None:
            raise RuntimeError("the session has not been resumed yet: call `resume` first")
        return self.session
