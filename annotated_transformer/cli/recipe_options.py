"""The named configurations and the recipe options of `train` (book chapter 16).

`train --config NAME` starts from a recipe of `RECIPES` (chapter 14), and every setting of `Recipe`,
its own fields and those of its model (`TransformerConfig`) and its training (`TrainConfig`), is an
option that changes it. The options are generated from the fields (`recipe_settings`), not typed one
by one, so that a field added to a recipe, a model or a training becomes an option without touching
the command line:

- `option_name`: the option of a setting, its name with dashes (`max_steps` is `--max-steps`), but
  for three that take the names of Table 3's columns or a shorter one (`--layers`, `--heads`,
  `--decoder-layers`);
- `add_recipe_options`: one option per setting, with its type (from the field's default, or its
  annotation for a default of `None`), its choices (the corpora, and the values of a `Literal` type),
  and a line of help that ends with its value in every configuration; a boolean is a pair of flags
  (`--compile`, `--no-compile`); an option not given is `None`, which `get_recipe` reads as "keep the
  configuration's value";
- `recipe_from_args`: the recipe the parsed options describe; the recipe checks every value
  (chapter 14), and a value it refuses is a `FieldError` that names the setting;
- `describe_configuration`: the line of `train --help` for each configuration, its numbers read from
  `RECIPES`, so that the help cannot contradict the recipes.
"""

from __future__ import annotations

import argparse
import dataclasses
import textwrap
import typing

from annotated_transformer.data import CORPORA
from annotated_transformer.recipes import RECIPES, Recipe, get_recipe, recipe_settings

__all__ = ["add_recipe_options", "describe_configuration", "option_name", "recipe_fields", "recipe_from_args"]

# What each configuration is for, in `train --help` (its sizes are read from RECIPES).
_CONFIGURATIONS = {
    "builtin": "the corpus the package generates (chapter 12), offline; a small model that trains on a CPU",
    "multi30k": "Multi30k German→English, downloaded once (chapter 12): chapter 14's recipe for a CPU",
    "multi30k-gpu": "Multi30k German→English on one GPU: chapter 20's recipe",
    "base": "the paper's base model (Table 3) with its batches and steps (§5.1-§5.3), on Multi30k; GPUs",
    "big": "the paper's big model (Table 3), dropout 0.3, the last 20 checkpoints averaged; GPUs",
}


def describe_configuration(name: str) -> str:
    """One line for `train --help`: what the configuration is for, and its size."""
    recipe = RECIPES[name]
    model, steps = recipe.model, recipe.train.max_steps
    return (f"{_CONFIGURATIONS.get(name, f'a configuration on {recipe.corpus}')} [{model.n_layers} layers, "
            f"d_model {model.d_model}, {steps:,} steps of {recipe.max_tokens:,} tokens"
            + (f" or {recipe.max_minutes:g} minutes]" if recipe.max_minutes else "]"))


# The settings whose option is not their name with dashes: Table 3's column names, and a shorter one.
_OPTION_NAMES = {"n_layers": "layers", "n_heads": "heads", "n_decoder_layers": "decoder_layers"}
# An option's choices: the corpora of chapter 12, and for a field typed with a Literal, its choices
# (the one place they are written: the recipe's part checks the same type).
_CHOICES = {"corpus": CORPORA} | {
    name: typing.get_args(field.type)
    for name, field in recipe_settings().items()
    if typing.get_origin(field.type) is typing.Literal
}
# A line of help for each option; a setting without one is helped by its name.
_RECIPE_HELP = {
    "corpus": "the training data",
    "vocab": "bpe: one subword vocabulary for both languages (§5.1); word: one word vocabulary each",
    "vocab_size": "subword vocabulary size, the 4 special tokens included (§5.1: about 37000)",
    "min_freq": "a word or subword merge must occur this often in the training data to be kept",
    "bpe_dropout": "BPE-dropout (not in the paper; Provilkov et al., 2020): skip each merge of a training "
                   "word with this probability, a new segmentation every epoch; 0: plain BPE (ignored for word)",
    "n_layers": "N, layers of the encoder and of the decoder (§3.1)",
    "n_decoder_layers": "layers of the decoder, if not N (not in the paper: a deep encoder and a "
                        "shallow decoder)",
    "d_model": "d_model, the width of the model (§3)",
    "d_ff": "d_ff, the inner width of the feed-forward layers (§3.3)",
    "n_heads": "h, attention heads (§3.2.2)",
    "dropout": "P_drop, the dropout rate of sub-layer outputs and embedding sums (§5.4)",
    "attention_dropout": "dropout on the attention weights (not in the paper)",
    "ffn_dropout": "dropout inside the feed-forward layers, after the ReLU (not in the paper)",
    "max_len": "the longest sequence the position encodings cover",
    "layer_norm_eps": "epsilon of layer normalization, added to the variance",
    "max_tokens": "padded source or target tokens per batch, in each process (§5.1: 25000 per step)",
    "accumulate": "batches per optimizer step (gradient accumulation: bigger steps, same memory)",
    "max_steps": "optimizer steps to train for (§5.2)",
    "warmup": "warmup_steps of the learning rate (§5.3)",
    "lr_factor": "multiplies the learning rate of §5.3",
    "cooldown": "lower the rate linearly towards 0 over this last share of the steps, e.g. 0.3 (not in "
                "the paper; chapter 7)",
    "label_smoothing": "epsilon_ls, label smoothing (§5.4)",
    "rdrop_alpha": "R-Drop: each batch through the model twice, plus X times the symmetric KL divergence of "
                   "the two passes' predictions (Liang et al. 2021; not in the paper; chapter 8). 0: off; "
                   "a step costs about twice as much",
    "clip_grad_norm": "clip the gradient norm of each step to X (not in the paper; default: no clipping)",
    "checkpoint_every": "optimizer steps between checkpoints",
    "average_last": "how many of the last checkpoints model.pt averages (§6.1)",
    "beam_size": "beam size that translate and evaluate use by default (§6.1)",
    "alpha": "length penalty alpha of beam search (§6.1)",
    "precision": "floating-point format of the forward and backward passes; auto: bf16 on a GPU that "
                 "has it, fp16 on an older one, fp32 on a CPU (chapter 9)",
    "compile": "compile the model with torch.compile",
    "seed": "random seed: initialization, batch order, dropout",
    "d_k": "d_k, the query and key size of each head (§3.2.2; default d_model / h)",
    "d_v": "d_v, the value size of each head (§3.2.2; default d_model / h)",
    "positional": "sinusoidal position encodings (§3.5) or learned embeddings (Table 3, row E)",
    "norm_position": "post: LayerNorm(x + Sublayer(x)), the paper's (§3.1); pre: x + Sublayer(LayerNorm(x))",
    "warmup_ramp": "rise linearly during the warmup (§5.3); --no-warmup-ramp starts at the peak rate",
    "max_minutes": "stop training after this many minutes of training, all sessions of the run together "
                   "(inf: no limit); a cooldown that would not end in time is fitted to end then",
}


def recipe_fields() -> list[dataclasses.Field]:
    """The settings of a recipe that are options of `train` (all but its name), as their fields."""
    return [field for name, field in recipe_settings().items() if name != "name"]


def option_name(field_name: str) -> str:
    """The command-line option of a recipe setting: n_layers -> --layers, max_steps -> --max-steps."""
    return "--" + _OPTION_NAMES.get(field_name, field_name).replace("_", "-")


def _option_type(field: dataclasses.Field) -> type:
    """int, float or str: the type of a field's default, or, for a default of None ("d_k: int | None"),
    the first type its annotation names."""
    if field.default is not None:
        return type(field.default)
    annotation = str(field.type)
    return next((kind for kind in (int, float, str) if kind.__name__ in annotation), str)


def add_recipe_options(parser: argparse.ArgumentParser) -> None:
    """Add one option per recipe setting to `parser` (`train`'s), in a group of their own, each with its
    type, choices and help, and `None` as its default (keep the configuration's value)."""
    names = ", ".join(RECIPES)
    group = parser.add_argument_group(
        "recipe options",
        textwrap.fill(f"Each changes one setting of the configuration. In brackets: its value in {names}.",
                      96),
    )
    for field in recipe_fields():
        values = [recipe.to_dict()[field.name] for recipe in RECIPES.values()]
        shown = f"all {values[0]}" if len(set(values)) == 1 else ", ".join(map(str, values))
        options = {"dest": field.name, "default": None,
                   "help": f"{_RECIPE_HELP.get(field.name, field.name.replace('_', ' '))} [{shown}]"}
        if isinstance(field.default, bool):
            options["action"] = argparse.BooleanOptionalAction
        else:
            kind = _option_type(field)
            metavar = None if field.name in _CHOICES else {int: "N", float: "X"}.get(kind, "VALUE")
            options.update(type=kind, choices=_CHOICES.get(field.name), metavar=metavar)
        group.add_argument(option_name(field.name), **options)


def recipe_from_args(args: argparse.Namespace) -> Recipe:
    """The recipe of `--config` with the options given. A value it cannot take is a `FieldError` that
    names its setting, which `main` says as the option."""
    return get_recipe(args.config, **{field.name: getattr(args, field.name) for field in recipe_fields()})
