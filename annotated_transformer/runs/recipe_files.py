"""A run's fingerprints, and a trained model read back (the run layer above chapter 14's `Recipe`).

What every checkpoint records about its run (`run_fingerprint`), the vocabulary a run's checkpoints
were trained with (`check_run_vocabulary`, `check_rebuilt_vocabulary`), the run files built from the
recipe's data and vocabulary (`BUILT_FROM`), and a trained model read back with the vocabulary and
the decoding settings its run recorded (`read_run_model`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from annotated_transformer.checkpoints import read_checkpoint
from annotated_transformer.model import Transformer, TransformerConfig, config_sha256
from annotated_transformer.runs.run_directory import RunDirectory, note, recorded, set_aside
from annotated_transformer.helpers.input_checks import shown as _shown
from annotated_transformer.tokenization import Vocabularies, VocabularyError

__all__ = ["BUILT_FROM", "VOCABULARY_SETTINGS", "check_path", "check_rebuilt_vocabulary", "check_run_vocabulary",
           "read_run_model", "run_fingerprint"]

# The run's files built from the recipe's data and vocabulary: built again when a run without any
# checkpoint changes one of these settings (chapter 10's `open_run`).
VOCABULARY_SETTINGS = ("corpus", "vocab", "vocab_size", "min_freq")
BUILT_FROM = {"vocab": VOCABULARY_SETTINGS, "cache": VOCABULARY_SETTINGS}


def run_fingerprint(recipe: Any, vocabs: Vocabularies, config: TransformerConfig) -> dict:
    """What every checkpoint of a run records about it: the recipe (its flat dict), and the
    fingerprints (SHA-256) of the vocabularies and the model configuration, which every reader of a
    checkpoint compares."""
    return {"recipe": recipe.to_dict(), "vocab_sha256": vocabs.sha256(), "config_sha256": config_sha256(config)}


def check_run_vocabulary(run_dir: Path, vocabs: Vocabularies) -> None:
    """Refuse a vocabulary that the run's checkpoints were not trained with: two vocabularies of the
    same size fit the same model, and only the fingerprint tells them apart."""
    expected, source = recorded(run_dir, "vocab_sha256")
    if expected not in (None, vocabs.sha256()):
        raise VocabularyError(
            f"{RunDirectory(run_dir).vocab} is not the vocabulary {source} was trained with (fingerprints "
            f"differ): put the run's own vocab.json back, or train in a new run directory"
        )


def check_rebuilt_vocabulary(run_dir: Path, vocabs: Vocabularies, damaged: VocabularyError) -> None:
    """A run's `vocab.json` was `damaged` and `vocabs` were built again from the training data
    (building is deterministic, chapter 13): refuse them unless their fingerprint is the one the run's
    checkpoints recorded, else say so and keep the damaged file beside them as vocab.json.damaged."""
    path = RunDirectory(run_dir).vocab
    expected, source = recorded(run_dir, "vocab_sha256")
    if expected is not None and expected != vocabs.sha256():
        raise VocabularyError(f"{damaged}; built again, it is not the vocabulary {source} was trained "
                              f"with: restore vocab.json from a backup, or train in a new run directory")
    note(f"{damaged}; built it again from the training data (kept the damaged file as "
         f"{set_aside(path).name})")


def check_path(path: Any, name: str, expected: str, exists: bool = True) -> Path:
    """`path` as a Path (that exists, unless told otherwise), or a one-line error: what was
    `expected`, and what came."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"{name} must be the path of {expected} (a str or Path), got {_shown(path)}")
    if exists and not Path(path).exists():
        raise FileNotFoundError(f"no {name} at {path}: give the path of {expected} that exists")
    return Path(path)


def read_run_model(
    checkpoint: str | Path, vocab: str | Path | None = None
) -> tuple[Transformer, Vocabularies, dict]:
    """The model of a run directory (its `model.pt`) or of a checkpoint file, its vocabularies
    (`vocab` or the `vocab.json` beside the checkpoint or in the run directory above
    `checkpoints/`), and the decoding settings its recipe recorded (beam size, α, the longest
    training sentence as `max_source_tokens`). The checkpoint is read with `read_checkpoint` (which
    refuses a damaged file or NaN weights) and the vocabulary must have its fingerprint. A path that
    is not one, or does not exist, is refused by name."""
    checkpoint = RunDirectory.model_of(check_path(checkpoint, "checkpoint", "a run directory or a .pt file"))
    if vocab is not None:  # its type here; whether it exists, Vocabularies.load says later
        check_path(vocab, "vocab", "a vocab.json", exists=False)
    if not checkpoint.is_file():  # a directory, but no finished run's
        raise FileNotFoundError(f"no checkpoint at {checkpoint}: a run directory holds model.pt once its "
                                f"training has finished; until then, give one of its checkpoints/*.pt")
    if vocab is None:
        vocab = RunDirectory.vocab_of(checkpoint)
    data = read_checkpoint(checkpoint)
    vocabs = Vocabularies.load(vocab)
    expected = data["extra"].get("vocab_sha256")
    if expected is not None and expected != vocabs.sha256():
        raise VocabularyError(
            f"{vocab} is not the vocabulary {checkpoint} was trained with (fingerprints differ); "
            f"use the vocab.json from the same run directory"
        )
    recipe = data["extra"].get("recipe") or {}
    settings = {name: recipe[name] for name in ("beam_size", "alpha") if name in recipe}
    settings["max_source_tokens"] = data["extra"].get("longest_source")
    model = Transformer(TransformerConfig(**data["config"]))
    model.load_state_dict(data["state"]["model"])
    return model, vocabs, settings
