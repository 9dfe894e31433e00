"""The recipe search's helpers (tools/cpu_recipe_search.py): what it counts as a run-on translation."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import cpu_recipe_search


def test_a_translation_runs_on_past_twice_its_reference_and_five_words():
    reference = "a man rides a bike ."  # 6 words: run-on from 18 words
    assert not cpu_recipe_search.is_run_on("a man rides a bike .", reference)
    assert not cpu_recipe_search.is_run_on(" ".join(["word"] * 17), reference)
    assert cpu_recipe_search.is_run_on(" ".join(["word"] * 18), reference)

