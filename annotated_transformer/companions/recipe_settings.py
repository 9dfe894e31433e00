"""A recipe's settings (chapter 14's `Recipe`; companion of chapter 14).

A recipe is a dataclass with two parts, the model's `TransformerConfig` (chapter 5) and the
training's `TrainConfig` (chapter 9). On disk (`recipe.json`, and a copy in every checkpoint) it is
one flat dict of its settings by name. This module turns a recipe into that dict and back
(`recipe_to_dict`, `recipe_from_dict`; `Recipe.to_dict` and `Recipe.from_dict` call them), reads the
names of older files (`_OLD_NAMES`), refuses a setting no part declares (`refuse_unknown`) and checks
the recipe's own fields (`check_recipe`).

The functions take the recipe's class as an argument (`recipe_class`) rather than importing it, so
that the chapter's module, which defines `Recipe`, can use them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from annotated_transformer.data import CORPORA
from annotated_transformer.helpers.errors import field_error
from annotated_transformer.model import TransformerConfig, check_types
from annotated_transformer.tokenization import SPECIALS
from annotated_transformer.training import TrainConfig

__all__ = ["check_recipe", "recipe_from_dict", "recipe_settings_of", "recipe_to_dict", "refuse_unknown"]

# The fields of the two parts that are not a recipe's settings: the vocabularies give the model its
# vocabulary sizes and shared embeddings, and the run sets the training's display.
_LEFT_TO_RUN: dict[str, tuple[type, tuple[str, ...]]] = {
    "model": (TransformerConfig, ("src_vocab_size", "tgt_vocab_size", "share_embeddings")),
    "train": (TrainConfig, ("progress", "log_every", "track_grad_norm", "prefetch")),
}
_OLD_NAMES = {"decoder_layers": "n_decoder_layers"}  # recipe.json before the recipe held its parts


def recipe_settings_of(recipe_class: type) -> dict[str, dataclasses.Field]:
    """Every setting of a recipe by its name, as the field that declares it (in the recipe's class,
    TransformerConfig or TrainConfig), in `recipe_to_dict`'s order: the parts' settings in their place."""
    settings = {}
    for spec in dataclasses.fields(recipe_class):
        if spec.name in _LEFT_TO_RUN:
            kind, not_settings = _LEFT_TO_RUN[spec.name]
            settings.update((f.name, f) for f in dataclasses.fields(kind) if f.name not in not_settings)
        else:
            settings[spec.name] = spec
    return settings


def recipe_to_dict(recipe: Any) -> dict[str, Any]:
    """Every setting of `recipe` by its name, in one flat dict (`recipe.json`, and every checkpoint's)."""
    settings = {}
    for name in recipe_settings_of(type(recipe)):
        part = next((part for part, (kind, _) in _LEFT_TO_RUN.items() if name in kind.__dataclass_fields__),
                    None)
        settings[name] = getattr(recipe if part is None else getattr(recipe, part), name)
    return settings


def recipe_from_dict(recipe_class: type, settings: Mapping[str, Any]) -> Any:
    """The recipe of a flat dict of settings: `recipe_to_dict`'s, or one written by an older version
    (its old names read as today's; a setting it lacks was added later, and the run used its default)."""
    if not isinstance(settings, Mapping):
        raise ValueError(f"a recipe is a dict of its settings, got {type(settings).__name__}")
    own = {_OLD_NAMES.get(name, name): value for name, value in settings.items()}
    refuse_unknown(recipe_class, own)
    parts = {part: kind(**{name: own.pop(name) for name in list(own) if name in kind.__dataclass_fields__})
             for part, (kind, _) in _LEFT_TO_RUN.items()}
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
    or a part that sets what the run sets (`_LEFT_TO_RUN`). The parts checked their own fields when they
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
    for part, (kind, not_settings) in _LEFT_TO_RUN.items():
        config, defaults = getattr(recipe, part), kind.__dataclass_fields__
        given = [f"{name}={getattr(config, name)!r}" for name in not_settings
                 if getattr(config, name) != defaults[name].default]
        if given:
            raise ValueError(f"a recipe's {part} leaves {', '.join(not_settings)} to the run, got "
                             f"{', '.join(given)}: leave them out of its {kind.__name__}")
