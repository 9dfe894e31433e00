"""The seed noise (experiments/multi30k_seeds.py): the committed summary is what the script's own
`summary` makes of the committed runs, a SAMPLE standard deviation (n - 1), the s of the rule for
"better" (the appendix's `judging-differences`)."""

import statistics

import multi30k_seeds  # experiments/ is on pytest's pythonpath (pyproject.toml)

from annotated_transformer.helpers.book_figures import result


def test_the_committed_summary_is_the_scripts_summary_of_the_committed_runs():
    committed = result("multi30k_seeds.json")
    assert multi30k_seeds.summary(committed["runs"]) == committed["summary"]


def test_the_summary_is_a_sample_standard_deviation():
    # Three runs: the sample standard deviation is the population one times sqrt(3 / 2), so the
    # two differ in the second decimal (0.85 and 0.69 on validation): the test above tells them apart.
    runs = result("multi30k_seeds.json")["runs"]
    val = [run["val"] for run in runs]
    assert multi30k_seeds.summary(runs)["val"]["std"] == round(statistics.stdev(val), 2)
    assert round(statistics.stdev(val), 2) != round(statistics.pstdev(val), 2)
    assert multi30k_seeds.summary(runs[:1])["val"]["std"] == 0.0  # one run: no spread to measure
