"""The headline figures of the README and the results page are those of the result files the
package ships (annotated_transformer/results/), so that a new run cannot leave them stale."""

import json
import re
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
    seeds = result("multi30k_seeds.json")["summary"]
    return {
        **{f"CPU recipe's seed noise ({split})": f"{spread['mean']:.2f} ± {spread['std']:.2f}"
           for split, spread in seeds.items()},
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


@pytest.mark.parametrize("page", ["conclusion.md", "14_translation.ipynb", "20_gpu.ipynb"])
def test_the_chapters_quote_the_measured_seed_noise(page):
    """Where a page weighs a difference against the seed noise, the noise is the measured one."""
    seeds = result("multi30k_seeds.json")["summary"]
    text = (ROOT / "book" / page).read_text(encoding="utf-8")
    quoted = set(re.findall(r"(\d+\.\d\d) ± (\d\.\d\d)", text))
    measured = {(f"{seeds[split]['mean']:.2f}", f"{seeds[split]['std']:.2f}") for split in seeds}
    wrong = sorted(quoted - measured) or "no"
    assert quoted and quoted <= measured, f"{page} quotes {wrong} seed noise; measured: {measured}"


# --- every score typed in prose has a source --------------------------------------------------

BOOK = ROOT / "book"
# Scores as prose types them: two decimals (BLEU, steps/s, ...) and one-decimal percentages (MFU).
TWO_DECIMALS = re.compile(r"(?<![\w.,\-])(\d{1,3}\.\d\d)(?![\d.%]|\w)")
PERCENT = re.compile(r"(?<![\w.\-])(\d{1,3}\.\d)\s?%")
CODE_OR_MATH = re.compile(r"`[^`]*`|\$\$.*?\$\$|\$[^$]*\$", re.S)


def prose_pages() -> dict[str, str]:
    """The text a reader reads: the README, the book's pages, and the chapters' markdown cells."""
    pages = {"README.md": (ROOT / "README.md").read_text(encoding="utf-8")}
    pages.update((path.name, path.read_text(encoding="utf-8")) for path in sorted(BOOK.glob("*.md")))
    for path in sorted(BOOK.glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        pages[path.name] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return {name: CODE_OR_MATH.sub("", text) for name, text in pages.items()}


def sources() -> set[str]:
    """Every number of the result files, as prose would type it (two decimals, one decimal, a
    share as a percentage), and every number the committed notebooks printed."""
    values: set[str] = set()

    def walk(value) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            values.update({f"{value:.2f}", f"{value:.1f}", f"{100 * value:.1f}"})

    for path in Path(str(RESULTS)).rglob("*.json"):
        walk(json.loads(path.read_text(encoding="utf-8")))
    for path in BOOK.glob("*.ipynb"):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for output in cell.get("outputs", []):
                text = "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
                values.update(re.findall(r"\d+\.\d\d?", text))
    return values


def typed_scores(text: str) -> list[str]:
    """The scores a page types: numbers of two decimals from 1 up (below 1 they are settings: Adam's
    0.98, a dropout of 0.10), and percentages of one decimal."""
    return [n for n in TWO_DECIMALS.findall(text) if float(n) >= 1] + PERCENT.findall(text)


def test_typed_scores_are_found():
    text = "BLEU 41.31 and 40.5, MFU 17.6% (`41.99` is code), β 0.98, version 2.6.0, $0.25$"
    assert typed_scores(CODE_OR_MATH.sub("", text)) == ["41.31", "17.6"]


@pytest.mark.parametrize("page", prose_pages())
def test_every_score_in_prose_has_a_source(page):
    """A score typed in prose is one that a result file holds or a notebook printed: never typed
    from memory, and never left behind when a run changes."""
    known = sources()
    unsourced = sorted(set(typed_scores(prose_pages()[page])) - known)
    assert not unsourced, (
        f"{page} types {unsourced}, which no result file holds and no notebook printed: print it "
        f"from its result file in a code cell, or quote the file's value"
    )
