"""The headline figures of the README and the results page are those of the result files the
package ships (annotated_transformer/results/), so that a new run cannot leave them stale."""

import json
from importlib.resources import files
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = files("annotated_transformer") / "results"
PAGES = {"README.md": ROOT / "README.md", "results page": ROOT / "book" / "results.md"}


def result(name: str):
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def figures() -> dict[str, str]:
    """Each headline figure, formatted as the pages print it, from the result files."""
    cpu, gpu = result("multi30k_cpu.json"), result("gpu/final.json")
    return {
        "CPU run's test BLEU": f"{cpu['test']['average of the last 3 / beam 4']:.2f}",
        "CPU run's steps": f"{cpu['steps']:,}",
        "CPU run's minutes": f"{cpu['minutes']:.1f} min",
        "GPU run's test BLEU": f"{gpu['test'][0]['bleu']:.2f}",
        "GPU run's steps": f"{gpu['train']['steps']:,}",
    }


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("figure", figures())
def test_the_headline_figures_are_the_result_files(page, figure):
    text = PAGES[page].read_text(encoding="utf-8")
    value = figures()[figure]
    if figure == "CPU run's minutes" and page == "results page":
        value = value.replace(" min", " minutes")
    assert value in text, f"{page} does not show the {figure}, {value}, of the committed results"


def test_the_results_page_tables_are_the_result_files():
    text = PAGES["results page"].read_text(encoding="utf-8")
    cpu, gpu = result("multi30k_cpu.json"), result("gpu/final.json")
    for score in cpu["test"].values():
        assert f"{score:.2f}" in text
    for row in gpu["test"]:
        assert f"{row['bleu']:.2f}" in text and f"{row['bleu_lowercase']:.2f}" in text
    for row in result("gpu/bench.json")["base"]:
        assert f"{row['tokens_per_s']:,.0f}" in text, row



def test_the_conclusion_gives_each_run_its_own_test_bleu():
    text = (ROOT / "book" / "conclusion.md").read_text(encoding="utf-8")
    cpu, gpu = result("multi30k_cpu.json"), result("gpu/final.json")
    scores = {"CPU": cpu["test"]["average of the last 3 / beam 4"], "GPU": gpu["test"][0]["bleu"]}
    for run, score in scores.items():
        assert f"{score:.2f} cased BLEU" in text or f"at {score:.2f}" in text, f"the {run} run's {score:.2f}"
