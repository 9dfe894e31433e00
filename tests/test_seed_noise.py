"""annotated_transformer/companions/seed_noise.py: each scale's noise is pooled from its runs, the
runs named by the scale and no others, and the glued verdicts are the rule's with that noise."""

import math
import statistics

import pytest

from annotated_transformer.companions import seed_noise as noises
from annotated_transformer.companions.seed_noise import CPU_RECIPE, GPU_CANDIDATES, GPU_SHAPES, seed_noise
from annotated_transformer.helpers import book_figures
from annotated_transformer.helpers.book_figures import result
from annotated_transformer.helpers.verdicts import judge


def pooled(groups: list[list[float]]) -> tuple[float, int]:
    dof = sum(len(group) - 1 for group in groups)
    return math.sqrt(sum((len(g) - 1) * statistics.variance(g) for g in groups) / dof), dof


def test_the_cpu_recipe_noise_pools_the_seeds_and_every_levers_row():
    levers = result("multi30k_levers.json")
    groups = [[run["val"] for run in result("multi30k_seeds.json")["runs"]],
              [run["val"] for run in levers["control"]["runs"]],
              *([run["val"] for run in lever["runs"]] for lever in levers["levers"].values())]
    sd, dof = pooled([group for group in groups if len(group) > 1])
    noise = seed_noise(CPU_RECIPE)
    assert (noise.sd, noise.dof, noise.scale) == (pytest.approx(sd), dof, CPU_RECIPE)
    assert noise.runs == sum(len(group) for group in groups if len(group) > 1) == 12  # α = 5's one run: none


def test_the_gpu_noises_come_from_their_recipes_seeds():
    shapes = [row["val_beam4_average_3"] for name, row in result("multi30k_gpu_search.json")["runs"].items()
              if name.startswith("recipe")]
    assert len(shapes) == 3 and seed_noise(GPU_SHAPES).sd == pytest.approx(statistics.stdev(shapes))
    candidates = {row["name"]: row["val_beam"] for row in result("gpu/search.json")["candidates"]}
    noise = seed_noise(GPU_CANDIDATES)
    two_seeds = [candidates["recipe"], candidates["seed1"]]
    assert noise.dof == 1 and noise.sd == pytest.approx(statistics.stdev(two_seeds))


def test_a_changed_run_changes_the_noise_it_is_pooled_into():
    """`read` is the files a test gives: a seed of the recipe 3 BLEU higher widens the noise."""
    def read(name):
        data = result(name)
        if name == "multi30k_seeds.json":
            first = {**data["runs"][0], "val": data["runs"][0]["val"] + 3}
            data = {**data, "runs": [first, *data["runs"][1:]]}
        return data
    assert seed_noise(CPU_RECIPE, read).sd > seed_noise(CPU_RECIPE).sd + 0.3


def test_a_scale_without_seeds_is_refused():
    with pytest.raises(ValueError, match="no runs measure the noise at 'stage 1'"):
        seed_noise("stage 1")


def test_the_glued_words_are_the_rules_at_that_scale(monkeypatch):
    glued = {}
    monkeypatch.setattr(book_figures, "glue", lambda name, value: glued.__setitem__(name, value))
    noise = seed_noise(CPU_RECIPE)
    near, far = 0.9 * noise.sd, 5 * noise.sd
    noises.glue_verdicts({"near": [(40 + near, 40.0)], "far": [(40 + far, 40.0)],
                          "mixed": [(40 + far, 40.0), (40.0, 40.0)]}, CPU_RECIPE)
    assert glued == {"near": "tie", "far": "better", "mixed": "mixed (better, tie)"}
    assert judge([40 + far], [40.0], noise=noise, scale=CPU_RECIPE).word == "better"
