"""A recipe as one flat dict of settings and back, the names of older files and the recipe's own checks
(annotated_transformer.companions.recipe_settings), and a run's fingerprints
(annotated_transformer.runs.fingerprints): chapter 14's `Recipe`."""

import dataclasses
import json

import pytest
from helpers import OLD_RECIPE_JSON, one_line

from annotated_transformer.companions.recipe_settings import (
    _LEFT_TO_RUN,
    check_recipe,
    recipe_from_dict,
    recipe_settings_of,
    recipe_to_dict,
    refuse_unknown,
)
from annotated_transformer.companions.trained_models import _check_path
from annotated_transformer.companions.vocabulary_files import vocabularies_sha256
from annotated_transformer.data import builtin_corpus
from annotated_transformer.model import TransformerConfig, config_sha256
from annotated_transformer.recipes import RECIPES, Recipe, get_recipe, recipe_settings
from annotated_transformer.runs.fingerprints import BUILT_FROM, run_fingerprint
from annotated_transformer.tokenization import build_vocabularies
from annotated_transformer.training import TrainConfig

TINY = {"n_layers": 1, "d_model": 32, "d_ff": 64, "n_heads": 2, "vocab_size": 300, "max_tokens": 600,
        "warmup": 10, "checkpoint_every": 2, "average_last": 2}


def tiny_recipe(**overrides):
    return get_recipe("builtin", **{**TINY, "max_steps": 4, **overrides})


def test_each_setting_is_declared_once_in_the_part_that_uses_it():
    own = {spec.name for spec in dataclasses.fields(Recipe)} - {"model", "train"}
    model = {spec.name for spec in dataclasses.fields(TransformerConfig)}
    train = {spec.name for spec in dataclasses.fields(TrainConfig)}
    assert not own & model and not own & train and not model & train
    settings = list(recipe_settings())
    assert len(settings) == len(set(settings)) and set(settings) == (
        own | model - {"src_vocab_size", "tgt_vocab_size", "share_embeddings"}
        | train - {"progress", "log_every", "track_grad_norm", "prefetch"})
    for recipe in RECIPES.values():
        flat = recipe.to_dict()
        assert list(flat) == settings and json.loads(json.dumps(flat)) == flat  # flat and JSON-ready
        assert Recipe.from_dict(flat) == recipe and recipe.replace() == recipe


def test_get_recipe_routes_each_setting_to_its_part():
    recipe = get_recipe("multi30k", d_model=128, attention_dropout=0.1, max_steps=10, seed=2, alpha=1.0)
    assert (recipe.model.d_model, recipe.model.attention_dropout) == (128, 0.1)
    assert (recipe.train.max_steps, recipe.train.seed, recipe.alpha) == (10, 2, 1.0)
    same = RECIPES["multi30k"]
    assert recipe.model == dataclasses.replace(same.model, d_model=128, attention_dropout=0.1)
    assert recipe.train == dataclasses.replace(same.train, max_steps=10, seed=2)
    assert same.replace(max_minutes=None).max_minutes is None  # replace, unlike get_recipe, can unset
    for unknown in ({"layers": 2}, {"decoder_layers": 2}, {"progress": False}, {"model": same.model}):
        with pytest.raises(ValueError, match=r"^unknown recipe field\(s\) \['\w+'\]: the fields are") as info:
            get_recipe("multi30k", **unknown)
        assert "\n" not in str(info.value)


def test_a_recipe_written_before_the_recipe_held_its_parts_is_read():
    assert Recipe.from_dict(OLD_RECIPE_JSON) == tiny_recipe()
    new = tiny_recipe().to_dict()
    assert set(new) ^ set(OLD_RECIPE_JSON) == {  # the names the two formats differ in
        "decoder_layers", "n_decoder_layers", "attention_dropout", "ffn_dropout", "max_len", "layer_norm_eps",
        "rdrop_alpha", "bpe_dropout"}
    assert all(new[name] == value for name, value in OLD_RECIPE_JSON.items() if name in new)
    assert Recipe.from_dict({**OLD_RECIPE_JSON, "decoder_layers": 1}).model.n_decoder_layers == 1
    with pytest.raises(ValueError, match=r"unknown recipe field\(s\) \['d_hidden'\]"):
        Recipe.from_dict({**OLD_RECIPE_JSON, "d_hidden": 3})


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ({"model": TransformerConfig(src_vocab_size=300, tgt_vocab_size=300)},
         r"a recipe's model leaves src_vocab_size, tgt_vocab_size, share_embeddings to the run, got "
         r"src_vocab_size=300, tgt_vocab_size=300"),
        ({"train": TrainConfig(checkpoint_every=2, log_every=5)}, r"train leaves .* got log_every=5"),
        ({"train": TrainConfig()}, "checkpoint_every must be at least 1, got 0"),
        ({"model": {"d_model": 32}}, "model must be TransformerConfig, got"),
    ],
)
def test_a_recipe_refuses_what_its_run_sets(parts, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(tiny_recipe(), **parts)


def test_the_functions_are_the_recipes_methods():
    recipe = RECIPES["multi30k"]
    assert recipe_settings_of(Recipe) == recipe_settings()
    assert recipe_to_dict(recipe) == recipe.to_dict()
    assert recipe_from_dict(Recipe, recipe.to_dict()) == recipe == Recipe.from_dict(recipe.to_dict())
    assert set(_LEFT_TO_RUN) == {"model", "train"}  # the recipe's two parts
    check_recipe(recipe)  # a named recipe passes its own checks
    refuse_unknown(Recipe, {"d_model": 1, "alpha": 1.0})  # settings of the parts and of the recipe itself
    with pytest.raises(ValueError, match=r"^unknown recipe field\(s\) \['share_embeddings'\]") as info:
        refuse_unknown(Recipe, {"share_embeddings": True})  # the run's to set, not the recipe's
    one_line(info)
    with pytest.raises(ValueError, match="a recipe is a dict of its settings, got list"):
        recipe_from_dict(Recipe, [("name", "x")])


def test_a_run_is_built_again_when_its_vocabulary_settings_change():
    assert set(BUILT_FROM) == {"vocab", "cache"}
    assert all(set(names) == {"corpus", "vocab", "vocab_size", "min_freq"} for names in BUILT_FROM.values())
    assert set(BUILT_FROM["vocab"]) <= set(recipe_settings())


def test_the_run_fingerprint_names_the_recipe_the_vocabulary_and_the_model():
    recipe = tiny_recipe()
    vocabs = build_vocabularies(builtin_corpus("train")[:200], "bpe", 300)
    config = recipe.model_config(vocabs)
    fingerprint = run_fingerprint(recipe, vocabs, config)
    assert fingerprint == {"recipe": recipe.to_dict(), "vocab_sha256": vocabularies_sha256(vocabs),
                           "config_sha256": config_sha256(config)}
    assert json.loads(json.dumps(fingerprint)) == fingerprint  # it goes into every checkpoint as is


def test_check_path_says_what_it_expected(tmp_path):
    assert _check_path(tmp_path, "run", "a run directory") == tmp_path
    assert _check_path(str(tmp_path / "later"), "out", "a file", exists=False) == tmp_path / "later"
    with pytest.raises(TypeError, match=r"^run must be the path of a run directory \(a str or Path\), got 3"):
        _check_path(3, "run", "a run directory")
    with pytest.raises(FileNotFoundError, match=r"no run at .*missing: give the path of a run directory"):
        _check_path(tmp_path / "missing", "run", "a run directory")
