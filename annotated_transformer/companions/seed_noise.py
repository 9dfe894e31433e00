"""Companion of chapter 8. The seed noise of each scale the book's runs were trained at, measured
from the runs themselves, and the rule's verdicts on single runs handed to the prose.

The rule (helpers/verdicts.py, the appendix's `judging-differences`) judges one run against another
by the seed noise of their setting. That noise is data: each scale's is pooled over the rows of its
result files that trained two seeds or more (`verdicts.noise_of`), and nothing else is. The scales:

- CPU_RECIPE, the `multi30k` recipe's family at its budget on a two-core CPU: the recipe's seeds
  (multi30k_seeds.json, chapter 14) and the control and levers of multi30k_levers.json, trained
  side by side for the same seeds. The appendix's 30-minute search runs (multi30k_search.json) are
  at this scale, one run each.
- GPU_SHAPES, multi30k_gpu_search.json: 5,000-step runs of the recipe's shapes, eight side by side
  on one GPU; the recipe itself with three seeds.
- GPU_CANDIDATES, gpu/search.json: chapter 20's 5-minute candidates on one H200; the recipe with
  two seeds (one degree of freedom, so its t quantile is large and few differences pass it).

Runs of any other scale (the appendix's stage 1 at step 1,000, the GPU's final run against the
CPU's) have no seeds of their own: the book states their scores and no verdict (NOT_JUDGED).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from annotated_transformer.helpers import book_figures
from annotated_transformer.helpers.verdicts import Noise, judge, noise_of

__all__ = ["CPU_RECIPE", "GPU_CANDIDATES", "GPU_SHAPES", "NOT_JUDGED", "cpu_recipe_noise", "glue_verdicts",
           "seed_noise"]

CPU_RECIPE = "the multi30k recipe at its budget on a two-core CPU"
GPU_SHAPES = "multi30k_gpu_search.json: 5,000-step runs, eight side by side on one GPU"
GPU_CANDIDATES = "gpu/search.json: 5-minute candidates on one H200"
NOT_JUDGED = "not judged"  # the word for a comparison whose runs' scale has no seeds


Reader = Callable[[str], Any]  # a result file's contents by its name: `result`, or a test's copy


def _cpu_recipe_rows(read: Reader, levers: Mapping | None = None) -> list[list[float]]:
    levers = read("multi30k_levers.json") if levers is None else levers  # the committed, or a script's
    rows = [[run["val"] for run in read("multi30k_seeds.json")["runs"]],
            [run["val"] for run in levers["control"]["runs"]]]
    return rows + [[run["val"] for run in lever["runs"]] for lever in levers["levers"].values()]


def _gpu_shapes_rows(read: Reader) -> list[list[float]]:
    runs = read("multi30k_gpu_search.json")["runs"]
    return [[row["val_beam4_average_3"] for name, row in runs.items() if name.startswith("recipe")]]


def _gpu_candidates_rows(read: Reader) -> list[list[float]]:
    candidates = read("gpu/search.json")["candidates"]
    return [[row["val_beam"] for row in candidates if row["name"] in ("recipe", "seed1")]]


_ROWS = {CPU_RECIPE: _cpu_recipe_rows, GPU_SHAPES: _gpu_shapes_rows, GPU_CANDIDATES: _gpu_candidates_rows}


def seed_noise(scale: str, read: Reader | None = None) -> Noise:
    """The seed noise of validation BLEU at `scale` (CPU_RECIPE, GPU_SHAPES or GPU_CANDIDATES),
    pooled over its files' rows of two seeds or more, with its degrees of freedom; `read` gives the
    result files (the package's unless a test passes its own)."""
    if scale not in _ROWS:
        raise ValueError(f"no runs measure the noise at {scale!r}: the scales with seeds are {sorted(_ROWS)}")
    return noise_of(_ROWS[scale](read or book_figures.result), scale=scale)


def cpu_recipe_noise(levers: Mapping) -> Noise:
    """CPU_RECIPE's noise with `levers` (a summary of experiments/small_corpus_levers.py, the shape
    of multi30k_levers.json) in the place of the committed levers: the script judges a lever of one
    seed with the noise its own runs and the recipe's seeds measure, as the book does."""
    return noise_of(_cpu_recipe_rows(book_figures.result, levers), scale=CPU_RECIPE)


def _one_word(words: Iterable[str]) -> str:
    """The verdict of several comparisons: their one word when they agree, else each word, as
    "mixed (better, tie)"."""
    distinct = sorted(set(words))
    return distinct[0] if len(distinct) == 1 else f"mixed ({', '.join(distinct)})"


def glue_verdicts(comparisons: Mapping[str, Iterable[tuple[float, float]]], scale: str) -> None:
    """Glue, as the figure of each name, the rule's word on its comparisons of single runs at
    `scale`, each (ours, theirs), judged with the noise of that scale: one word for all."""
    noise = seed_noise(scale)
    for name, pairs in comparisons.items():
        # through the module: tools/glue_figures.py records a chapter's figures by replacing its glue
        book_figures.glue(name, _one_word(judge([ours], [theirs], noise=noise, scale=scale).word for ours, theirs in pairs))
