"""Figures in the chapters' prose are computed, not typed.

A chapter's Markdown holds each measured figure between two markers that name it,
`<!--fig:name-->40.73<!--/fig-->`; a glue cell (tagged `glue`) computes it from a result file the
package ships (annotated_transformer.helpers.book_figures), and tools/glue_figures.py writes it
there. These tests check that the prose holds what today's result files give, that every marked
name is glued, and that the prose types no figure of its own: a number that looks measured (decimals,
percentages, thousands, a time, a ratio) or a figure written in words ("about twice as long",
"less than half", "a sixth", "one and a half times") is either pasted or listed in the notebook's
metadata `typed_figures` with the reason it is not a measurement of ours (a figure of the paper, a
setting, a definition's arithmetic).
"""

import re
from pathlib import Path
from unittest import mock

import nbformat
import pytest
from glue_figures import glue_cells, glued_values, marker, pasted, stale_figures

from annotated_transformer.helpers import book_figures as figures

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
# What prose does not count: code, math, pasted figures, links' targets, section and chapter numbers.
NOT_PROSE = re.compile(
    r"```.*?```|`[^`]*`|\$\$.*?\$\$|\$[^$\n]*\$|<!--fig:[^>]*-->.*?<!--/fig-->|\]\([^)]*\)|<[^>]*>|"
    r"(?:§|§§|[Ss]ections?|[Cc]hapters?|[Tt]ables?|[Ff]igures?|[Ee]quations?|arXiv:?)\s*[\d.,–\- and]+",
    re.S,
)
# A figure as prose would type a measurement.
NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
UNIT = r"(?:%|×|x\b|minutes?\b|min\b|seconds?\b|s\b|ms\b|hours?\b|days?\b)"
TYPED_FIGURE = re.compile(
    rf"(?<![\w.])(?:{NUMBER}\s?{UNIT}"  # 23.0 minutes, 32%, 2×, 0.4 s
    r"|\d{1,3}(?:,\d{3})+(?:\.\d+)?"  # 9,224
    r"|\d+\.\d+)"  # 40.73, 0.85
)


# A figure written as words: a multiple or a fraction of something ("about twice as long", "less than
# half the pace", "a sixth of the peak", "one and a half times the steps", "four times wider"), with
# the words that hedge it ("about", "less than", ...). Not figures: a count of events ("trained
# twice", "occurs 5 times,": a multiple followed by punctuation, a line's end or a preposition), a
# part named by its place ("the second half of the chapter"), the recipes' budget and other fixed
# phrases ("half an hour", "the half hour", "half precision"), and "a third" as an ordinal ("a
# third layer": a fraction "third" is followed by "of", "as" or punctuation). "Half-way" counts, as
# on the Markdown pages (tests/test_results.py): where a run's loss was lowest is measured. Whatever
# else is not a measurement of ours (a figure of the paper, a setting, a definition's arithmetic)
# is listed in `typed_figures` like a number, in lower case.
_ = r"\s+"  # words of a phrase may be split by a line's end
NUMBER_WORD = (rf"(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|fifty|"
               rf"(?:(?:a|one){_})?(?:hundred|thousand)|\d+)")
FRACTION = r"(?:half|quarter|fifth|sixth|seventh|eighth|ninth|tenth|hundredth|thousandth)s?"
HEDGE = (rf"(?:(?:about|nearly|almost|roughly|around|only|just|some|well|over|under|up{_}to|at{_}least|"
         rf"at{_}most|(?:(?:a{_}little|far|much|no){_})?(?:less|more|fewer){_}than){_})?")
# A multiple followed by punctuation, a line's end or one of these words counts events instead.
COUNT = r"\b(?![ \t]*(?:[,.;:!?)\]]|\n|$)|\s+(?:in|at|on|per|with|and|or|through|during|each|every)\b)"
WORD_FIGURE = re.compile(
    rf"(?<![\w.,-]){HEDGE}(?:"
    # four times wider, one and a half times
    rf"(?:{NUMBER_WORD}|one)(?:{_}and{_}a{_}half)?(?:{_}|-)times{COUNT}"
    rf"|{NUMBER_WORD}-fold\b"
    rf"|(?:twice|thrice|doubled?|doubles|halved?|halving){COUNT}(?!-)"  # twice as long (not double-click)
    rf"|(?:a|an|one|two|three|four|five|six|seven|eight|nine){_}{FRACTION}\b"  # a sixth, two fifths
    # a third of, a third or more of; not "a third layer"
    rf"|(?:a|one|two){_}thirds?(?=(?:{_}or{_}(?:more|less|so))?{_}(?:of|as)\b|\s*[,.;:)])"
    rf"|(?<!first )(?<!second )(?<!last )(?<!other )(?<!upper )(?<!lower )(?<!the )"
    rf"half(?:-?way)?\b(?!{_}an{_}hour|{_}hour|{_}precision)"  # half the pace, half-way; not half an hour
    r")",
    re.I,
)


def word_figures(text: str) -> list[str]:
    """The figures a Markdown text writes as words, in lower case ("about twice", "a sixth")."""
    return [re.sub(r"\s+", " ", found.group(0).strip()).lower()
            for found in WORD_FIGURE.finditer(NOT_PROSE.sub(" ", text))]


def markdown(notebook) -> str:
    return "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")


def typed_figures(text: str) -> list[str]:
    """The figures a Markdown text types, as written (a number, with its unit where it has one)."""
    return [re.sub(r"\s+", " ", found.strip()) for found in TYPED_FIGURE.findall(NOT_PROSE.sub(" ", text))]


def prose_figures(path: Path, notebook) -> list[str]:
    """The figures a chapter's Markdown types: numbers as written, and figures in words in lower case."""
    text = markdown(notebook)
    return typed_figures(text) + word_figures(text)


def allowed(notebook) -> dict[str, str]:
    return notebook.metadata.get("typed_figures", {})


def test_typed_figures_are_found():
    text = ("It trained 9,224 steps in 23.0 minutes (32% of them cooling down), 2× faster; "
            "§3.2.2 and chapter 14, `0.1`, $d_k = 64$, <!--fig:cpu_bleu-->40.73 BLEU, 2× faster<!--/fig-->, "
            "[a](x/1.5.html), 6 layers")
    assert typed_figures(text) == ["9,224", "23.0 minutes", "32%", "2×"]


def test_word_figures_are_found():
    figures_in_words = (
        "a step takes about twice as long, so it trains less than half the steps; compiled, about one and "
        "a half times the steps per second, a sixth of the peak (a quarter counting padding), a third or\n"
        "more of the positions empty, four times wider, 150 times fewer, a 150-times smaller corpus, two "
        "thirds of the parameters, up to six times the tokens, doubles its capacity, lowest half-way "
        "through, halve the speed")
    assert word_figures(figures_in_words) == [
        "about twice", "less than half", "about one and a half times", "a sixth", "a quarter", "a third",
        "four times", "150 times", "150-times", "two thirds", "up to six times", "doubles", "half-way",
        "halve"]
    not_figures = (
        "It was trained twice. Put the batch through the model twice, with two masks; the token occurs 5 "
        "times, at positions 0 and 4; seen twice or more; the second half of the chapter, the last half of "
        "its steps; within half an hour, the half hour buys fewer, in half precision; a third layer, the "
        "third column; shift-click, double-click; `twice`, $2 \\times$, <!--fig:half-->half<!--/fig-->, "
        "9,224 steps")
    assert word_figures(not_figures) == []
    assert typed_figures(figures_in_words) == []  # figures in words are counted apart from the numbers


def test_glue_text_is_one_line_of_text():
    assert figures.glue_text("cpu_bleu", "40.73") == "40.73"
    assert figures.glue_text("cpu-steps", 9224) == "9224"
    assert figures.glue("cpu_bleu", "40.73") is None  # where a chapter runs, glue shows nothing
    with pytest.raises(TypeError, match="as text or a number"):
        figures.glue_text("x", [1, 2])
    with pytest.raises(TypeError, match="as text or a number"):
        figures.glue_text("x", True)
    with pytest.raises(ValueError, match="glue name"):
        figures.glue_text("a b", "1")
    with pytest.raises(ValueError, match="one line"):
        figures.glue_text("x", "40.73\n41.0")
    with pytest.raises(ValueError, match="HTML comments"):
        figures.glue_text("x", "40.73<!--/fig-->")


def test_result_reads_the_shipped_files_and_refuses_others():
    assert figures.result("multi30k_seeds.json")["recipe"] == "multi30k"
    assert "test" in figures.result("gpu/final.json")
    with pytest.raises(FileNotFoundError, match="no result file 'nothing\\.json'"):
        figures.result("nothing.json")
    with pytest.raises(ValueError, match="named like"):
        figures.result("multi30k_seeds")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_the_prose_holds_the_figures_of_the_result_files(path):
    """Change a value in a result file, and the prose's figures that come from it are stale until
    `python tools/glue_figures.py` writes them again."""
    notebook = nbformat.read(path, as_version=4)
    stale = stale_figures(notebook)
    assert not stale, f"{path.name}: the figures {stale} are stale: python tools/glue_figures.py {path}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_marked_figure_is_glued(path):
    notebook = nbformat.read(path, as_version=4)
    glued = glued_values(notebook)  # refuses a name glued twice
    missing = sorted({name for name, _ in pasted(notebook)} - set(glued))
    assert not missing, f"{path.name} marks {missing}, which none of its glue cells glues"
    for cell in glue_cells(notebook):
        assert "remove-cell" in cell.metadata.get("tags", []), (
            f"{path.name}: glue cell {cell.get('id')} is not tagged remove-cell (the prose shows it)")
        assert not cell.get("outputs"), f"{path.name}: glue cell {cell.get('id')} keeps outputs"


def test_a_changed_result_file_or_a_retyped_figure_is_stale():
    """The check bites: a figure typed over in the prose, and a result file whose value changed."""
    path = ROOT / "book" / "14_translation.ipynb"
    notebook = nbformat.read(path, as_version=4)
    name, text = pasted(notebook)[0]
    assert stale_figures(notebook) == []
    retyped = nbformat.read(path, as_version=4)
    cell = next(cell for cell in retyped.cells
                if cell.cell_type == "markdown" and marker(name, text) in cell.source)
    cell.source = cell.source.replace(marker(name, text), marker(name, text + "1"), 1)
    assert stale_figures(retyped) == [name]
    shipped = figures.result("multi30k_cpu.json")
    changed = {**shipped, "minutes": shipped["minutes"] + 1.0}
    real = figures.result
    patched = lambda file: changed if file == "multi30k_cpu.json" else real(file)
    with mock.patch.object(figures, "result", patched):
        assert "cpu_minutes" in stale_figures(notebook)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_the_prose_types_no_figure(path):
    notebook = nbformat.read(path, as_version=4)
    typed = prose_figures(path, notebook)
    unexplained = sorted(set(typed) - set(allowed(notebook)))
    assert not unexplained, (
        f"{path.name} types {unexplained} in its prose: paste a measured figure from a glue cell "
        f"(<!--fig:name-->…<!--/fig-->, tools/glue_figures.py; one written in words too: 'about twice as "
        f"long' is a figure), or list a figure of the "
        f"paper, a setting or a definition's arithmetic in the notebook's metadata 'typed_figures' with the "
        f"reason (a figure in words in lower case)"
    )
    unused = sorted(set(allowed(notebook)) - set(typed))
    assert not unused, f"{path.name}'s metadata 'typed_figures' lists {unused}, which its prose does not type"
    empty = [figure for figure, reason in allowed(notebook).items() if not reason.strip()]
    assert not empty, f"{path.name}: no reason given for {empty}"
