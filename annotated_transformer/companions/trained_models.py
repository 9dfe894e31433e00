"""A trained model read back with its vocabulary and the decoding settings its run recorded
(companion of chapter 14: `Translator.load`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from annotated_transformer.checkpoints import model_from_checkpoint, read_checkpoint
from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.helpers.input_checks import shown as _shown
from annotated_transformer.model import Transformer
from annotated_transformer.tokenization import Vocabularies, VocabularyError
from annotated_transformer.companions.vocabulary_files import read_vocabularies, vocabularies_sha256

__all__ = ["check_fingerprint", "read_run_model"]


def check_fingerprint(vocabs: Vocabularies, expected: str | None, message: str) -> None:
    """Refuse `vocabs` with a `VocabularyError` saying `message` unless their fingerprint is `expected`
    (what a checkpoint recorded; None when it recorded none): the one comparison of a vocabulary with
    the model it is meant for. Two vocabularies of the same size fit the same model, and only the
    fingerprint tells them apart."""
    if expected is not None and expected != vocabularies_sha256(vocabs):
        raise VocabularyError(message)


def _check_path(path: Any, name: str, expected: str, exists: bool = True) -> Path:
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
    checkpoint = RunDirectory.model_of(_check_path(checkpoint, "checkpoint", "a run directory or a .pt file"))
    if vocab is not None:  # its type here; whether it exists, Vocabularies.load says later
        _check_path(vocab, "vocab", "a vocab.json", exists=False)
    if not checkpoint.is_file():  # a run directory whose training has not finished
        raise FileNotFoundError(f"{checkpoint.parent} holds no model.pt yet: finish training (run the same "
                                f"train command again), or give one of its checkpoints, "
                                f"{checkpoint.parent / 'checkpoints'}/step_*.pt")
    if vocab is None:
        vocab = RunDirectory.vocab_of(checkpoint)
    data = read_checkpoint(checkpoint)
    vocabs = read_vocabularies(vocab)
    check_fingerprint(vocabs, data["extra"].get("vocab_sha256"),
                      f"{vocab} is not the vocabulary {checkpoint} was trained with (fingerprints differ); "
                      f"use the vocab.json from the same run directory")
    recipe = data["extra"].get("recipe") or {}
    settings = {name: recipe[name] for name in ("beam_size", "alpha") if name in recipe}
    settings["max_source_tokens"] = data["extra"].get("longest_source")
    return model_from_checkpoint(data), vocabs, settings
