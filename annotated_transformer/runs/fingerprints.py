"""A run's fingerprints (the run layer above chapter 14's `Recipe`).

What every checkpoint records about its run (`run_fingerprint`), the vocabulary a run's checkpoints
were trained with (`check_run_vocabulary`, `check_rebuilt_vocabulary`), the run files built from the
recipe's data and vocabulary (`BUILT_FROM`). A trained model read back is chapter 14's companion
`companions.trained_models`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from annotated_transformer.companions.trained_models import check_fingerprint
from annotated_transformer.model import TransformerConfig, config_sha256
from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.runs.run_files import note, recorded, set_aside
from annotated_transformer.tokenization import Vocabularies, VocabularyError
from annotated_transformer.companions.vocabulary_files import vocabularies_sha256

__all__ = ["BUILT_FROM", "check_rebuilt_vocabulary", "check_run_vocabulary", "run_fingerprint"]

# The run's files built from the recipe's data and vocabulary: built again when a run without any
# checkpoint changes one of these settings (chapter 10's `open_run`).
_VOCABULARY_SETTINGS = ("corpus", "vocab", "vocab_size", "min_freq")
BUILT_FROM = {"vocab": _VOCABULARY_SETTINGS, "cache": _VOCABULARY_SETTINGS}


def run_fingerprint(recipe: Any, vocabs: Vocabularies, config: TransformerConfig) -> dict:
    """What every checkpoint of a run records about it: the recipe (its flat dict), and the
    fingerprints (SHA-256) of the vocabularies and the model configuration, which every reader of a
    checkpoint compares."""
    return {"recipe": recipe.to_dict(), "vocab_sha256": vocabularies_sha256(vocabs), "config_sha256": config_sha256(config)}


def _check_vocabulary(run_dir: str | Path, vocabs: Vocabularies, problem: str, remedy: str) -> None:
    """Refuse `vocabs` unless their fingerprint is the one the run's checkpoints recorded (any, when
    none did): the one comparison of a run's vocabulary. `problem` and `remedy` start and end the
    message; between them, the file that recorded the fingerprint."""
    expected, source = recorded(run_dir, "vocab_sha256")
    check_fingerprint(vocabs, expected, f"{problem} {source} was trained with (fingerprints differ){remedy}")


def check_run_vocabulary(run_dir: str | Path, vocabs: Vocabularies) -> None:
    """Refuse a vocabulary that the run's checkpoints were not trained with: two vocabularies of the
    same size fit the same model, and only the fingerprint tells them apart."""
    _check_vocabulary(run_dir, vocabs, f"{RunDirectory(run_dir).vocab} is not the vocabulary",
                      ": put the run's own vocab.json back, or train in a new run directory")


def check_rebuilt_vocabulary(run_dir: str | Path, vocabs: Vocabularies, damaged: VocabularyError, *,
                             set_aside_damaged: bool = True) -> None:
    """A run's `vocab.json` was `damaged` and `vocabs` were built again from the training data
    (building is deterministic, chapter 13): refuse them unless their fingerprint is the one the run's
    checkpoints recorded, else say so and keep the damaged file beside them as vocab.json.damaged
    (`set_aside_damaged`: the main process; the others only check)."""
    _check_vocabulary(run_dir, vocabs, f"{damaged}; built again, it is not the vocabulary",
                      ": restore vocab.json from a backup, or train in a new run directory")
    if not set_aside_damaged:
        return
    note(f"{damaged}; built it again from the training data (kept the damaged file as "
         f"{set_aside(RunDirectory(run_dir).vocab).name})")
