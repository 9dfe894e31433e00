"""Every figure the Markdown pages type is the value of the one file and key it comes from.

A chapter pastes a measured figure from a glue cell ({glue:text}, tests/test_figures.py); a Markdown
page (the README, CONTRIBUTING, the book's .md pages) cannot, so each figure it types is listed
here, in FIGURES: the figure exactly as the page types it, the result file it comes from
(annotated_transformer/results/), the key path into that file, and the format the page prints it
in. A test formats the file's value and finds it on the page, so that a new run, which changes the
file, breaks the test until the page says what the file says. A few figures are settings of a
recipe, checked the same way against `get_recipe(name)` ("recipe NAME" as the source).

And every number a page types that looks measured (test_figures.typed_figures: decimals,
percentages, comma-grouped integers, times, ratios; version numbers aside) is either in FIGURES or
in the page's short list NOT_MEASURED, with the reason it is not a measurement of ours: a figure of
the paper, a setting, a fact of a data set, or arithmetic.
"""

import json
import re
from importlib.resources import files
from pathlib import Path

import pytest
from test_figures import typed_figures

from annotated_transformer import get_recipe

ROOT = Path(__file__).resolve().parent.parent
RESULTS = files("annotated_transformer") / "results"
PAGES = ["README.md", "CONTRIBUTING.md", "book/results.md", "book/conclusion.md", "book/deviations.md",
         "book/index.md", "experiments/README.md"]

CPU, SEEDS, GPU, BENCH = "multi30k_cpu.json", "multi30k_seeds.json", "gpu/final.json", "gpu/bench.json"
VALIDATION, SEARCH, CPU_COMPILE = "gpu/validation.json", "gpu/search.json", "cpu_compile.json"
# A dict in a key path picks the one element of a list that has those items.
SEED0, SEED1, SEED2 = {"seed": 0}, {"seed": 1}, {"seed": 2}
LEVERS = "multi30k_levers.json"
COMPILED = {"implementation": "ours", "compiled": True}
EAGER = {"implementation": "ours", "compiled": False}
TORCH_EAGER = {"implementation": "torch.nn.Transformer", "compiled": False}
LAST_GREEDY, LAST_BEAM = {"averaged": 1, "beam": 1}, {"averaged": 1, "beam": 4}
AVERAGE_GREEDY, AVERAGE_BEAM = {"averaged": 5, "beam": 1}, {"averaged": 5, "beam": 4}

# The headline figures, which the README, the results page and the conclusion share.
HEADLINE = [
    ("40.73", CPU, ("test", "average of the last 3 / beam 4"), "{:.2f}"),
    ("41.53", GPU, ("test", AVERAGE_BEAM, "bleu"), "{:.2f}"),
    ("41.12", SEEDS, ("summary", "test", "mean"), "{:.2f}"),
    ("0.37", SEEDS, ("summary", "test", "std"), "{:.2f}"),
    ("41.68", SEEDS, ("summary", "val", "mean"), "{:.2f}"),
    ("0.85", SEEDS, ("summary", "val", "std"), "{:.2f}"),
]
MFU = [
    ("17.6%", BENCH, ("base", COMPILED, "mfu"), "{:.1%}"),
    ("25.0%", BENCH, ("base", COMPILED, "mfu_with_padding"), "{:.1%}"),
]

FIGURES: dict[str, list[tuple]] = {
    "README.md": HEADLINE + MFU + [
        ("20.2 min", CPU, ("minutes",), "{:.1f} min"),
        ("9,224", CPU, ("steps",), "{:,}"),
        ("4.9 min", GPU, ("train", "minutes"), "{:.1f} min"),
        ("8,240", GPU, ("train", "steps"), "{:,}"),
        ("455,779", BENCH, ("base", COMPILED, "tokens_per_s"), "{:,.0f}"),
        ("1,024", "recipe multi30k-gpu", ("model", "d_ff"), "{:,}"),
        ("4,000", "recipe multi30k", ("vocab_size",), "{:,}"),
    ],
    "CONTRIBUTING.md": [],
    "book/results.md": HEADLINE + MFU + [
        # The regularizers for a small corpus against the recipe (the appendix).
        ("2.06", LEVERS, ("step_costs", "rdrop", "ratio"), "{:.2f}"),
        ("5,826", LEVERS, ("levers", "rdrop", "steps"), "{:,}"),
        ("-2.34", LEVERS, ("levers", "bpe-dropout", "runs", SEED0, "difference"), "{:+.2f}"),
        ("-1.45", LEVERS, ("levers", "bpe-dropout", "runs", SEED1, "difference"), "{:+.2f}"),
        ("-0.61", LEVERS, ("levers", "bpe-dropout", "runs", SEED2, "difference"), "{:+.2f}"),
        ("-1.47", LEVERS, ("levers", "bpe-dropout", "mean_difference"), "{:+.2f}"),
        ("1.00", LEVERS, ("levers", "bpe-dropout", "two_se"), "{:.2f}"),
        ("-1.15", LEVERS, ("levers", "rdrop", "runs", SEED0, "difference"), "{:+.2f}"),
        ("-2.35", LEVERS, ("levers", "rdrop-alpha5", "runs", SEED0, "difference"), "{:+.2f}"),
        # Chapter 14's run on two CPU cores, and two more seeds of its recipe.
        ("9,224", CPU, ("steps",), "{:,}"),
        ("20.2 minutes", CPU, ("minutes",), "{:.1f} minutes"),
        ("39.15", CPU, ("test", "last checkpoint (step_00009224) / greedy"), "{:.2f}"),
        ("40.84", CPU, ("test", "last checkpoint (step_00009224) / beam 4"), "{:.2f}"),
        ("39.25", CPU, ("test", "average of the last 3 / greedy"), "{:.2f}"),
        ("40.98", CPU, ("test_lowercased",), "{:.2f}"),
        ("42.50", CPU, ("val",), "{:.2f}"),
        ("41.46", SEEDS, ("runs", SEED1, "test"), "{:.2f}"),
        ("41.17", SEEDS, ("runs", SEED2, "test"), "{:.2f}"),
        ("41.72", SEEDS, ("runs", SEED1, "val"), "{:.2f}"),
        ("40.81", SEEDS, ("runs", SEED2, "val"), "{:.2f}"),
        # Chapter 20's run on one GPU, and its search.
        ("8,240", GPU, ("train", "steps"), "{:,}"),
        ("4.89 minutes", GPU, ("train", "minutes"), "{:.2f} minutes"),
        ("28.07", GPU, ("train", "steps_per_s"), "{:.2f}"),
        ("137,753", GPU, ("train", "target_tokens_per_s"), "{:,}"),
        ("84.1", GPU, ("train", "epochs"), "{:.1f}"),
        ("8,396,800", GPU, ("train", "parameters"), "{:,}"),
        ("3,047", SEARCH, ("candidates", {"name": "p0.2"}, "steps"), "{:,}"),
        ("40.85", SEARCH, ("test", {"averaged": 3, "beam": 4}, "bleu"), "{:.2f}"),
        ("41.00", GPU, ("test", LAST_GREEDY, "bleu"), "{:.2f}"),
        ("41.28", GPU, ("test", LAST_GREEDY, "bleu_lowercase"), "{:.2f}"),
        ("41.39", GPU, ("test", LAST_BEAM, "bleu"), "{:.2f}"),
        ("41.68", GPU, ("test", LAST_BEAM, "bleu_lowercase"), "{:.2f}"),
        ("41.08", GPU, ("test", AVERAGE_GREEDY, "bleu"), "{:.2f}"),
        ("41.36", GPU, ("test", AVERAGE_GREEDY, "bleu_lowercase"), "{:.2f}"),
        ("41.80", GPU, ("test", AVERAGE_BEAM, "bleu_lowercase"), "{:.2f}"),
        ("43.15", GPU, ("val_beam",), "{:.2f}"),
        ("1.471", VALIDATION, ({"step": 4000}, "val_nll"), "{:.3f}"),
        # The recipes' settings the page names.
        ("4,000", "recipe multi30k", ("vocab_size",), "{:,}"),
        ("1,024", "recipe multi30k-gpu", ("model", "d_ff"), "{:,}"),
        ("0.2", "recipe multi30k-gpu", ("model", "dropout"), "{:.1f}"),
        ("6,000", "recipe multi30k-gpu", ("max_tokens",), "{:,}"),
        ("1.4", "recipe multi30k", ("alpha",), "{:.1f}"),
        # The paper's base model on the H200, and the recipes through Trainer (bench.json).
        ("989.4", BENCH, ("base", COMPILED, "peak_tflops"), "{:.1f}"),
        ("39%", BENCH, ("base", COMPILED, "padding", "target"), "{:.0%}"),
        ("30%", BENCH, ("base", COMPILED, "padding", "flops"), "{:.0%}"),
        ("261,752", BENCH, ("base", EAGER, "tokens_per_s"), "{:,.0f}"),
        ("17.16", BENCH, ("base", EAGER, "steps_per_s"), "{:.2f}"),
        ("10.1%", BENCH, ("base", EAGER, "mfu"), "{:.1%}"),
        ("14.3%", BENCH, ("base", EAGER, "mfu_with_padding"), "{:.1%}"),
        ("0.5 s", BENCH, ("base", EAGER, "first_step_s"), "{:.1f} s"),
        ("224,988", BENCH, ("base", TORCH_EAGER, "tokens_per_s"), "{:,.0f}"),
        ("14.75", BENCH, ("base", TORCH_EAGER, "steps_per_s"), "{:.2f}"),
        ("8.7%", BENCH, ("base", TORCH_EAGER, "mfu"), "{:.1%}"),
        ("12.3%", BENCH, ("base", TORCH_EAGER, "mfu_with_padding"), "{:.1%}"),
        ("0.1 s", BENCH, ("base", TORCH_EAGER, "first_step_s"), "{:.1f} s"),
        ("455,779", BENCH, ("base", COMPILED, "tokens_per_s"), "{:,.0f}"),
        ("29.88", BENCH, ("base", COMPILED, "steps_per_s"), "{:.2f}"),
        ("71.3 s", BENCH, ("base", COMPILED, "first_step_s"), "{:.1f} s"),
        ("55.21", BENCH, ("recipe", {"recipe": "multi30k", "compiled": False}, "steps_per_s"), "{:.2f}"),
        ("80.07", BENCH, ("recipe", {"recipe": "multi30k", "compiled": True}, "steps_per_s"), "{:.2f}"),
        ("72,077", BENCH, ("recipe", {"recipe": "multi30k", "compiled": True}, "tokens_per_s"), "{:,.0f}"),
        ("30 s", BENCH, ("recipe", {"recipe": "multi30k", "compiled": True}, "compile_s"), "{:.0f} s"),
        ("28.74", BENCH, ("recipe", {"recipe": "multi30k-gpu", "compiled": False}, "steps_per_s"), "{:.2f}"),
        ("44.51", BENCH, ("recipe", {"recipe": "multi30k-gpu", "compiled": True}, "steps_per_s"), "{:.2f}"),
        ("218,994", BENCH, ("recipe", {"recipe": "multi30k-gpu", "compiled": True}, "tokens_per_s"),
         "{:,.0f}"),
        ("47 s", BENCH, ("recipe", {"recipe": "multi30k-gpu", "compiled": True}, "compile_s"), "{:.0f} s"),
        # The multi30k recipe compiled on a CPU (cpu_compile.json).
        ("7.66", CPU_COMPILE, ("recipe", {"compiled": False}, "steps_per_s"), "{:.2f}"),
        ("6,793", CPU_COMPILE, ("recipe", {"compiled": False}, "tokens_per_s"), "{:,.0f}"),
        ("6.12", CPU_COMPILE, ("recipe", {"compiled": True}, "steps_per_s"), "{:.2f}"),
        ("5,423", CPU_COMPILE, ("recipe", {"compiled": True}, "tokens_per_s"), "{:,.0f}"),
        ("36 s", CPU_COMPILE, ("recipe", {"compiled": True}, "compile_s"), "{:.0f} s"),
    ],
    "book/conclusion.md": HEADLINE + MFU + [
        ("20.2 minutes", CPU, ("minutes",), "{:.1f} minutes"),
    ],
    "book/deviations.md": [
        ("1,000", "recipe multi30k", ("max_tokens",), "{:,}"),
        ("9,224", "recipe multi30k", ("train", "max_steps"), "{:,}"),
        ("3,200", "recipe multi30k", ("train", "warmup"), "{:,}"),
        ("4,000", "recipe multi30k", ("vocab_size",), "{:,}"),
        ("1.4", "recipe multi30k", ("alpha",), "{:.1f}"),
        ("1,024", "recipe multi30k-gpu", ("model", "d_ff"), "{:,}"),
        ("0.2", "recipe multi30k-gpu", ("model", "dropout"), "{:.1f}"),
        ("6,000", "recipe multi30k-gpu", ("max_tokens",), "{:,}"),
        ("2,000", "recipe multi30k-gpu", ("train", "warmup"), "{:,}"),
        ("32%", "recipe multi30k", ("train", "cooldown"), "{:.0%}"),
    ],
    "book/index.md": [],
    "experiments/README.md": [],
}

# Numbers a page types that are not measurements of ours, with the reason.
PAPER_VOCABULARY = "the paper's shared vocabulary of about 37,000 tokens (§5.1), a figure of the paper"
NOT_MEASURED: dict[str, dict[str, str]] = {
    "README.md": {
        "1,000": "test_2016_flickr's size in sentences, a fact of the data set",
        "29,000": "Multi30k's training pairs, a fact of the data set",
    },
    "CONTRIBUTING.md": {},
    "book/results.md": {
        "1,000": "test_2016_flickr's size, and the multi30k recipe's batches of 1,000 tokens (a setting)",
        "0.1": "a setting: BPE-dropout's p (Provilkov et al.'s value)",
        "2.5": "a setting: R-Drop's alpha (Liang et al.'s 5 on chapter 8's scale)",
        "0.6": "§6.1's length penalty α, one of the settings tried",
        "1.0": "a length penalty α, one of the settings tried",
        "8,000": "the small scale's shared BPE vocabulary (chapter 18), a setting",
        "1,014": "the Multi30k validation set's size in sentences, a fact of the data set",
        "100,000": "the paper's training steps (§5.2), a figure of the paper",
        "0.5": "chapter 18's criterion for 'nearly identical' BLEU, a setting",
        "37,000": PAPER_VOCABULARY,
        "25,000": "the paper's batches of about 25,000 tokens (§5.1), a setting of the benchmark",
        "4×": "a goal of benchmarks/run_all.py, a setting",
        "2.5×": "a goal of benchmarks/run_all.py, a setting",
        "30 seconds": "a goal of benchmarks/run_all.py, a setting",
        "3×": "a goal of benchmarks/run_all.py, a setting",
        "10×": "a goal of benchmarks/run_all.py, a setting",
    },
    "book/conclusion.md": {
        "100,000": "the paper's training steps (§5.2), a figure of the paper",
        "25,000": "the paper's batches of about 25,000 tokens (§5.1), a figure of the paper",
    },
    "book/deviations.md": {
        "0.1": "the paper's dropout P_drop (§5.4), a setting",
        "0.1000061": "0.1 rounded to a multiple of 2⁻¹⁶, arithmetic",
        "36,864": "the base model's attention biases, 18 attention layers × 4 projections × 512: arithmetic",
        "25,000": "the paper's batches of about 25,000 tokens (§5.1), a figure of the paper",
        "29,000": "Multi30k's training pairs, a fact of the data set",
        "4.5": "WMT 2014's 4.5 million pairs (§5.1), a figure of the paper",
        "37,000": PAPER_VOCABULARY,
        "8,000": "a BPE vocabulary of 8,000 pieces: a setting, tried in the search and at the small scale",
        "27.3": "the paper's Table 2: the base model's BLEU on WMT 2014 English-German",
        "28.4": "the paper's Table 2: the big model's BLEU on WMT 2014 English-German",
        "0.6": "§6.1's length penalty α, a setting of the paper",
        "1.0": "a length penalty α tried, a setting",
        "1.8": "a length penalty α tried, a setting",
        "1,014": "the Multi30k validation set's size in sentences, a fact of the data set",
        "0.25": "the small scale's lr_factor (chapter 18), a setting",
        "5,000": "the learned positions' max_len, a setting",
    },
    "book/index.md": {},
    "experiments/README.md": {},
}

# Version numbers (torch 2.13.0+cpu, CUDA 13.0, PyTorch 2.11) are not figures.
VERSION = re.compile(r"\b\d+\.\d+\.\d+[\w.+]*|\b(?:torch|PyTorch|CUDA|Python|nbdev)\s+\d+(?:\.\d+)*")


def text(page: str) -> str:
    return (ROOT / page).read_text(encoding="utf-8")


def figures_typed(page: str) -> list[str]:
    """The figures a page types, as tests/test_figures.py finds them in a chapter's prose."""
    return typed_figures(VERSION.sub(" ", text(page)))


def lookup(source: str, key: tuple):
    """The value at `key` in a result file, or in a recipe's settings ("recipe NAME")."""
    if source.startswith("recipe "):
        value = get_recipe(source.removeprefix("recipe "))
        for part in key:
            value = getattr(value, part)
        return value
    value = json.loads((RESULTS / source).read_text(encoding="utf-8"))
    for part in key:
        if isinstance(part, dict):
            matches = [item for item in value if all(item.get(k) == v for k, v in part.items())]
            assert len(matches) == 1, f"{source}: {len(matches)} elements match {part}"
            value = matches[0]
        else:
            value = value[part]
    return value


ENTRIES = [(page, *entry) for page, entries in FIGURES.items() for entry in entries]


def test_the_table_names_every_page_once():
    assert list(FIGURES) == PAGES and list(NOT_MEASURED) == PAGES


@pytest.mark.parametrize(("page", "typed", "source", "key", "form"), ENTRIES,
                         ids=[f"{page}:{typed}" for page, typed, *_ in ENTRIES])
def test_each_typed_figure_is_its_files_value(page, typed, source, key, form):
    """A new run changes the file; the page must then say what the file says."""
    value = form.format(lookup(source, key))
    assert value == typed, (
        f"{page} types {typed!r} for {source} {list(key)}, whose value is now {value!r}: update the page "
        f"and this table")
    assert typed in text(page), f"{page} does not type {typed!r} ({source} {list(key)}) any more"


@pytest.mark.parametrize("page", PAGES)
def test_every_figure_a_page_types_is_accounted_for(page):
    typed = set(figures_typed(page))
    sourced = {entry[0].lstrip("+-") for entry in FIGURES[page]}  # "-1.47" accounts for the 1.47 found
    allowed = NOT_MEASURED[page]
    unexplained = sorted(typed - sourced - set(allowed))
    assert not unexplained, (
        f"{page} types {unexplained}: list a measured figure in FIGURES with the file and key it comes "
        f"from, a figure of the paper or a setting in NOT_MEASURED with the reason, or remove it")
    assert len({repr(entry) for entry in FIGURES[page]}) == len(FIGURES[page]), f"{page}: an entry twice"
    both = sorted(sourced & set(allowed))
    assert not both, f"{page}: {both} both in FIGURES and in NOT_MEASURED"
    unused = sorted(set(allowed) - typed)
    assert not unused, f"{page}: NOT_MEASURED lists {unused}, which the page does not type"
    assert all(reason.strip() for reason in allowed.values())


@pytest.mark.parametrize("page", ["README.md", "book/results.md", "book/conclusion.md"])
def test_the_headline_pages_give_the_headline_figures(page):
    """The runs' test BLEU and the seed noise are on each of these pages, from their files."""
    assert all(entry in FIGURES[page] for entry in HEADLINE + MFU)


def test_typed_figures_are_found_past_version_numbers():
    sample = "torch 2.13.0+cpu, CUDA 13.0 and PyTorch 2.11: 9,224 steps in 23.0 min, 17.6% (`0.1`)"
    assert typed_figures(VERSION.sub(" ", sample)) == ["9,224", "23.0 min", "17.6%"]


def test_lookup_picks_list_elements_by_their_items():
    assert lookup(GPU, ("test", AVERAGE_BEAM, "beam")) == 4
    assert lookup("recipe multi30k-gpu", ("train", "warmup")) == get_recipe("multi30k-gpu").train.warmup
    with pytest.raises(AssertionError, match="2 elements match"):
        lookup(GPU, ("test", {"averaged": 5}))
