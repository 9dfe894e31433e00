"""A recipe's files and fingerprints: the bookkeeping behind chapter 14's `Recipe` and its runs.

A recipe (chapter 14) is a dataclass with two parts, the model's `TransformerConfig` (chapter 5)
and the training's `TrainConfig` (chapter 9). On disk (`recipe.json`, and a copy in every
checkpoint) it is one flat dict of its settings by name. This module turns a recipe into that dict
and back (`recipe_to_dict`, `recipe_from_dict`; as methods, `RecipeFile`), reads the names of older files (`OLD_NAMES`),
refuses a setting no part declares (`refuse_unknown`), checks the recipe's own fields
(`check_recipe`), and keeps a run's fingerprints: what every checkpoint records about its run
(`run_fingerprint`), the vocabulary a run's checkpoints were trained with (`check_run_vocabulary`,
`check_rebuilt_vocabulary`), and a trained model read back with the vocabulary and the decoding
settings its run recorded (`read_run_model`).

The functions take the recipe's class as an argument (`recipe_class`) rather than importing it,
so that the chapter's module, which defines `Recipe`, can use them.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from annotated_transformer.checkpoints import read_checkpoint
from annotated_transformer.data import CORPORA
from annotated_transformer.errors import field_error
from annotated_transformer.model import Transformer, TransformerConfig, check_types, config_sha256
from annotated_transformer.runs.run_directory import RunDirectory, note, recorded, set_aside
from annotated_transformer.helpers.input_checks import shown as _shown
from annotated_transformer.tokenization import SPECIALS, Vocabularies, VocabularyError
from annotated_transformer.training import TrainConfig

__all__ = [
    "BUILT_FROM", "LEFT_TO_RUN", "OLD_NAMES", "RecipeFile", "check_path", "check_rebuilt_vocabulary", "check_recipe",
    "check_run_vocabulary", "read_run_model", "recipe_from_dict", "recipe_settings_of", "recipe_to_dict",
    "refuse_unknown", "run_fingerprint",
]

# The fields of the two parts that are not a recipe's settings: the vocabularies give the model its
# vocabulary sizes and shared embeddings, and the run sets the training's display.
LEFT_TO_RUN: dict[str, tuple[type, tuple[str, ...]]] = {
    "model": (TransformerConfig, ("src_vocab_size", "tgt_vocab_size", "share_embeddings")),
    "train": (TrainConfig, ("progress", "log_every", "track_grad_norm", "prefetch")),
}
OLD_NAMES = {"decoder_layers": "n_decoder_layers"}  # recipe.json before the recipe held its parts

# The run's files built from the recipe's data and vocabulary: built again when a run without any
# checkpoint changes one of these settings (chapter 10's `open_run`).
VOCABULARY_SETTINGS = ("corpus", "vocab", "vocab_size", "min_freq")
BUILT_FROM = {"vocab": VOCABULARY_SETTINGS, "cache": VOCABULARY_SETTINGS}


def recipe_settings_of(recipe_class: type) -> dict[str, dataclasses.Field]:
    """Every setting of a recipe by its name, as the field that declares it (in the recipe's class,
    TransformerConfig or TrainConfig), in `recipe_to_dict`'s order: the parts' settings in their place."""
    settings = {}
    for spec in dataclasses.fields(recipe_class):
        if spec.name in LEFT_TO_RUN:
            kind, not_settings = LEFT_TO_RUN[spec.name]
            settings.update((f.name, f) for f in dataclasses.fields(kind) if f.name not in not_settings)
        else:
            settings[spec.name] = spec
    return settings


def recipe_to_dict(recipe: Any) -> dict[str, Any]:
    """Every setting of `recipe` by its name, in one flat dict (`recipe.json`, and every checkpoint's)."""
    settings = {}
    for name in recipe_settings_of(type(recipe)):
        part = next((part for part, (kind, _) in LEFT_TO_RUN.items() if name in kind.__dataclass_fields__),
                    None)
        settings[name] = getattr(recipe if part is None else getattr(recipe, part), name)
    return settings


def recipe_from_dict(recipe_class: type, settings: Mapping[str, Any]) -> Any:
    """The recipe of a flat dict of settings: `recipe_to_dict`'s, or one written by an older version
    (its old names read as today's; a setting it lacks was added later, and the run used its default)."""
    if not isinstance(settings, Mapping):
        raise ValueError(f"a recipe is a dict of its settings, got {type(settings).__name__}")
    own = {OLD_NAMES.get(name, name): value for name, value in settings.items()}
    refuse_unknown(recipe_class, own)
    parts = {part: kind(**{name: own.pop(name) for name in list(own) if name in kind.__dataclass_fields__})
             for part, (kind, _) in LEFT_TO_RUN.items()}
    return recipe_class(**own, **parts)


def refuse_unknown(recipe_class: type, settings: Mapping[str, Any]) -> None:
    """Refuse, in one line that lists the settings, names that are not a recipe's settings."""
    known = recipe_settings_of(recipe_class)
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise ValueError(f"unknown recipe field(s) {unknown}: the fields are {sorted(known)}")


def check_recipe(recipe: Any) -> None:
    """Refuse, naming the field at fault, a recipe whose own fields are wrong: a corpus chapter 12
    lacks, a count below 1, vocabulary pieces no more than the specials, a BPE-dropout outside [0, 1), an
    α that is not finite, a time limit that is not positive, no checkpoints (a run resumes from them),
    or a part that sets what the run sets (`LEFT_TO_RUN`). The parts checked their own fields when they
    were made."""
    check_types(recipe)  # each field's type (a TransformerConfig, a TrainConfig), and `vocab`'s choices
    if recipe.corpus not in CORPORA:
        raise ValueError(f"unknown corpus {recipe.corpus!r}: choose one of {', '.join(CORPORA)}")
    for name in ("vocab_size", "min_freq", "max_tokens", "average_last", "beam_size"):
        if getattr(recipe, name) < 1:
            raise field_error(name, "be at least 1", getattr(recipe, name))
    if recipe.vocab == "bpe" and recipe.vocab_size <= len(SPECIALS):
        raise field_error("vocab_size", f"exceed the {len(SPECIALS)} special tokens", recipe.vocab_size)
    if not 0 <= recipe.bpe_dropout < 1:  # (NaN fails too) 1 would leave every training word in characters
        raise field_error("bpe_dropout", "be in [0, 1)", recipe.bpe_dropout)
    if not (math.isfinite(recipe.alpha) and recipe.alpha >= 0):
        raise field_error("alpha", "be >= 0 and finite", recipe.alpha)
    if recipe.max_minutes is not None and not recipe.max_minutes > 0:
        raise field_error("max_minutes", "be positive", recipe.max_minutes, unset_means="no time limit")
    if recipe.train.checkpoint_every < 1:  # a Trainer's 0 means "never"; a run resumes from them
        raise field_error("checkpoint_every", "be at least 1", recipe.train.checkpoint_every)
    for part, (kind, not_settings) in LEFT_TO_RUN.items():
        config, defaults = getattr(recipe, part), kind.__dataclass_fields__
        given = [f"{name}={getattr(config, name)!r}" for name in not_settings
                 if getattr(config, name) != defaults[name].default]
        if given:
            raise ValueError(f"a recipe's {part} leaves {', '.join(not_settings)} to the run, got "
                             f"{', '.join(given)}: leave them out of its {kind.__name__}")


class RecipeFile:
    """What makes a recipe dataclass (chapter 14's `Recipe`, which inherits it) a file: its fields
    checked when it is made (`check_recipe`), one flat dict of its settings (`to_dict`) and back
    (`from_dict`), and a copy with some settings changed by name, whichever part holds them (`replace`)."""

    def __post_init__(self) -> None:
        check_recipe(self)  # its own fields: the model and the training checked theirs when made

    def to_dict(self) -> dict[str, Any]:
        """Every setting by its name, in one flat dict (`recipe.json`, and a copy in every checkpoint)."""
        return recipe_to_dict(self)

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any]) -> Any:
        """The recipe of a flat dict of settings: `to_dict`'s, or one written by an older version."""
        return recipe_from_dict(cls, settings)

    def replace(self, **settings: Any) -> Any:
        """A copy with some settings changed, by their names, whichever part holds them:
        `recipe.replace(d_model=128, max_steps=10)` changes the model's width and the training's steps."""
        refuse_unknown(type(self), settings)
        return recipe_from_dict(type(self), {**self.to_dict(), **settings})


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
