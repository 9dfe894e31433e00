"""The recipe searches' helpers (experiments/cpu_recipe_search.py, experiments/gpu_recipe_search.py):
what counts as a run-on translation, and how many steps a candidate gets."""

import argparse

import cpu_recipe_search  # experiments/ is on pytest's pythonpath (pyproject.toml)
import gpu_recipe_search
import small_corpus_levers

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


def test_a_lever_is_judged_by_the_appendixs_rule():
    """Paired over seeds: better only beyond twice the standard error of the mean difference, with one
    sign on every seed; one seed: only beyond 2·√2 times the recipe's seed standard deviation."""
    judge = small_corpus_levers.judge
    assert judge([1.0, 1.2, 0.8], recipe_std=0.85)["verdict"] == "better"  # 2·SE = 0.23
    assert judge([-1.0, -1.2, -0.8], recipe_std=0.85)["verdict"] == "worse"
    assert judge([2.0, 0.1, -0.1], recipe_std=0.85)["verdict"] == "tie"  # not one sign
    assert judge([3.0, 0.1, 0.2], recipe_std=0.85)["verdict"] == "tie"  # mean 1.1 < 2·SE 1.9
    assert judge([2.3], recipe_std=0.85)["verdict"] == "tie"  # within 2.40
    assert judge([2.5], recipe_std=0.85)["verdict"] == "better"


def test_a_lever_dearer_per_step_trains_the_steps_the_recipes_budget_buys():
    recipe = small_corpus_levers.recipe_steps("multi30k")
    minutes = small_corpus_levers.committed_seed_runs()[0]["minutes"]
    costs = {"bpe-dropout": {"ratio": 0.99}, "rdrop": {"ratio": 2.0}}
    assert small_corpus_levers.lever_steps("bpe-dropout", "multi30k", costs) == recipe
    half = int(recipe * 30 / (minutes * 2))  # a step twice as dear: the steps 30 minutes buy
    assert small_corpus_levers.lever_steps("rdrop", "multi30k", costs) == half
    assert small_corpus_levers.lever_steps("rdrop-alpha5", "multi30k", costs) == half  # alpha costs nothing
    assert set(small_corpus_levers.LEVERS) == {"bpe-dropout", "rdrop", "rdrop-alpha5"}
