"""What a translation run keeps in its run directory (the run layer of chapter 14): its vocabularies,
read or built once (`load_vocabularies`), and what `train_translation` leaves there, loaded
(`TrainingRun`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from annotated_transformer.companions.vocabulary_files import read_vocabularies, write_vocabularies
from annotated_transformer.helpers.processes import is_main_process
from annotated_transformer.model import Transformer
from annotated_transformer.recipes import Recipe
from annotated_transformer.runs.fingerprints import check_rebuilt_vocabulary
from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.tokenization import Vocabularies, VocabularyError, build_vocabularies

__all__ = ["TrainingRun", "load_vocabularies"]


def load_vocabularies(
    run_dir: str | Path, recipe: Recipe, train_pairs: Sequence[tuple[str, str]]
) -> Vocabularies:
    """The run's vocabularies: read from its `vocab.json`, or built from the training pairs (chapter
    13) and saved by the main process. A damaged `vocab.json` is built again, and kept only if its fingerprint is the one
    the run's checkpoints recorded (`check_rebuilt_vocabulary`)."""
    path = RunDirectory(run_dir).vocab
    damaged = None
    if path.exists():
        try:
            return read_vocabularies(path)
        except VocabularyError as error:
            damaged = error
    vocabs = build_vocabularies(train_pairs, recipe.vocab, recipe.vocab_size, recipe.min_freq)
    writes = is_main_process()  # the other ranks of a distributed run build the same and write nothing
    if damaged is not None:  # built again from the same data, the same vocabulary (chapter 13)
        check_rebuilt_vocabulary(run_dir, vocabs, damaged, set_aside_damaged=writes)
    if writes:
        write_vocabularies(vocabs, path)
    return vocabs


@dataclass
class TrainingRun:
    """What `train_translation` leaves in its run directory, loaded."""

    run_dir: Path
    recipe: Recipe
    vocabs: Vocabularies
    model: Transformer  # the averaged model (§6.1) when there were checkpoints to average
    history: list[dict] = field(default_factory=list)
    minutes: float = 0.0  # wall time of the training steps, summed over resumed sessions
    hardware: dict = field(default_factory=dict)  # where it was trained (`describe_hardware`)
    steps: int = 0  # optimizer steps trained so far (at most recipe.train.max_steps)
    out_of_time: bool = False  # True when recipe.max_minutes ended training before max_steps
    fitted_last_step: int | None = None  # where the time limit moved the end of the schedule
    resumed_step: int = 0  # the step this session resumed from (0: it started the run)
