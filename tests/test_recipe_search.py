"""The recipe searches' helpers (experiments/cpu_recipe_search.py, experiments/gpu_recipe_search.py):
what counts as a run-on translation, and how many steps a candidate gets."""

import argparse

import cpu_recipe_search  # experiments/ is on pytest's pythonpath (pyproject.toml)
import gpu_recipe_search

from annotated_transformer.cli.recipe_options import add_recipe_options


def test_a_translation_runs_on_past_twice_its_reference_and_five_words():
    reference = "a man rides a bike ."  # 6 words: run-on from 18 words
    assert not cpu_recipe_search.is_run_on("a man rides a bike .", reference)
    assert not cpu_recipe_search.is_run_on(" ".join(["word"] * 17), reference)
    assert cpu_recipe_search.is_run_on(" ".join(["word"] * 18), reference)


def test_the_gpu_search_gives_each_candidate_the_steps_of_its_cpu_time():
    """A candidate twice as dear per CPU step gets half the recipe's steps (to the nearest 100);
    every candidate is a valid `train` option list with a measured cost where it changes the shape."""
    search = gpu_recipe_search
    costs = search.CPU_MINUTES_PER_100_STEPS
    assert set(costs) <= set(search.CANDIDATES)
    assert search.steps_for("recipe-seed1", 4900) == 4900
    for name in (name for name in costs if name != "recipe"):
        expected = round(4900 * costs["recipe"] / costs[name] / 100) * 100
        assert search.steps_for(name, 4900) == expected
    cheaper = min(costs, key=costs.get)
    assert search.steps_for(cheaper, 4900) > 4900
    parser = argparse.ArgumentParser()
    add_recipe_options(parser)
    for options in search.CANDIDATES.values():
        parser.parse_args(options)
