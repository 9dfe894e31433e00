"""How much code a reader of each chapter meets (the committed notebooks).

The book holds at most MAX_BOOK_LINES lines of code, the appendix at most MAX_APPENDIX_LINES, and a
chapter at most MAX_CODE_LINES, hidden cells included (the Colab set-up cell, the same in every
chapter, and the exercises' solutions excepted): what teaches nothing about the paper or about
training and using a translator lives in the package's hand-written layers (helpers/, companions/,
runs/, cli/: CONTRIBUTING.md), which a chapter calls in a line, not in a collapsed cell. A reader
meets an output or a figure at least every MAX_SILENT_RUN lines of visible
code (cells not tagged `hide-input`, `hide-cell`, `remove-input` or `remove-cell`); the exercises'
solutions (tagged `solution`) are not counted. And nothing the package exports
is collapsed: a hidden cell may hold imports, plotting, glue and a demonstration's scaffolding, never a
definition the package exports.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
HIDDEN = {"hide-input", "hide-cell", "remove-input", "remove-cell"}
SOLUTION = "solution"  # an exercise's worked solution (tests/test_exercises.py): not the lesson's code
MAX_SILENT_RUN = 200
MAX_CODE_LINES = 700
MAX_BOOK_LINES = 8000
MAX_APPENDIX_LINES = 400
APPENDIX = "appendix_recipes"
FIGURE = re.compile(r"!\[|```\{(figure|image)\}|<img\b")
COLAB_CELL = "ANNOTATED_TRANSFORMER_REPO"  # a line of the set-up cell (tools/colab_cell.py)
EXPORT = re.compile(r"^#\|\s*export\b", re.M)
DEFINITION = re.compile(r"^(?:@.*\n)*(?:async\s+)?(?:def|class)\s+(\w+)", re.M)


def hidden(cell: dict) -> bool:
    return bool(set(cell.get("metadata", {}).get("tags", [])) & HIDDEN)


def code_lines(notebook: dict) -> int:
    """Lines of every code cell, hidden ones included, but the Colab set-up cell and the exercises'
    solutions."""
    return sum(len("".join(cell["source"]).splitlines()) for cell in notebook["cells"]
               if cell["cell_type"] == "code" and COLAB_CELL not in "".join(cell["source"])
               and SOLUTION not in cell.get("metadata", {}).get("tags", []))


def weight(notebook: dict) -> tuple[int, int, int]:
    """(visible code lines, longest silent run, index of the cell that ends it) of a notebook."""
    visible = run = longest = 0
    end = -1
    for index, cell in enumerate(notebook["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and not hidden(cell):
            lines = len(source.splitlines())
            visible, run = visible + lines, run + lines
        shows = (cell["cell_type"] == "code" and bool(cell.get("outputs"))) or (
            cell["cell_type"] == "markdown" and FIGURE.search(source) is not None)
        if shows:
            if run > longest:
                longest, end = run, index
            run = 0
    if run > longest:
        longest, end = run, len(notebook["cells"])
    return visible, longest, end


def collapsed_exports(notebook: dict) -> list[str]:
    """The functions and classes that hidden cells define and the package exports."""
    return [name for cell in notebook["cells"] if cell["cell_type"] == "code" and hidden(cell)
            and EXPORT.search("".join(cell["source"]))
            for name in DEFINITION.findall("".join(cell["source"]))]


def test_weight_counts_visible_lines_and_resets_at_outputs_and_figures():
    def code(lines: int, tags=(), outputs=()):
        return {"cell_type": "code", "source": "x\n" * lines, "metadata": {"tags": list(tags)},
                "outputs": list(outputs)}

    shown = [{"output_type": "stream", "text": "1\n"}]
    figure = {"cell_type": "markdown", "source": "![a curve](curve.png)", "metadata": {}}
    cells = [code(10), code(5, tags=["hide-input"]), code(3, outputs=shown), code(50), figure,
             code(20), {"cell_type": "markdown", "source": "prose", "metadata": {}}, code(30)]
    assert weight({"cells": cells}) == (113, 50, 4)
    colab = {"cell_type": "code", "source": f"import os\n{COLAB_CELL}\n", "metadata": {}, "outputs": []}
    assert code_lines({"cells": [colab, *cells]}) == 118


def test_collapsed_exports_are_found():
    def cell(source: str, tags=("hide-input",)):
        return {"cell_type": "code", "source": source, "metadata": {"tags": list(tags)}, "outputs": []}

    cells = [cell("#| export\n@torch.no_grad()\ndef shown_below(x):\n    pass\n\nclass Hidden:\n    pass\n"),
             cell("#| export\ndef visible():\n    pass\n", tags=()),
             cell("def scaffolding():\n    pass\n")]
    assert collapsed_exports({"cells": cells}) == ["shown_below", "Hidden"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_chapter_is_light(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    _, longest, end = weight(notebook)
    assert longest <= MAX_SILENT_RUN, (
        f"{path.name}: {longest} visible code lines without an output or a figure (up to cell {end}); "
        f"show a result at least every {MAX_SILENT_RUN} lines"
    )
    lines = code_lines(notebook)
    assert lines <= MAX_CODE_LINES, (
        f"{path.name}: {lines} lines of code, hidden cells included, more than {MAX_CODE_LINES}: move "
        f"what teaches neither the paper nor training into the package's hand-written layers"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_nothing_exported_is_collapsed(path):
    collapsed = collapsed_exports(json.loads(path.read_text(encoding="utf-8")))
    assert not collapsed, (
        f"{path.name} hides exported definitions {collapsed}: show them, or move machinery out of the "
        f"book into the package's hand-written layers"
    )


def book_lines(paths: list[Path]) -> dict[str, int]:
    return {path.stem: code_lines(json.loads(path.read_text(encoding="utf-8"))) for path in paths}


def test_the_book_is_light():
    """The whole book's code, and the appendix's, within their caps (the chapters' code counted as
    above: hidden cells included, the Colab set-up cell and the exercises' solutions aside)."""
    lines = book_lines(NOTEBOOKS)
    assert APPENDIX in lines and len(lines) >= 21, sorted(lines)
    total = sum(lines.values())
    ranked = sorted(lines.items(), key=lambda item: -item[1])
    heaviest = ", ".join(f"{name} {count}" for name, count in ranked[:5])
    assert total <= MAX_BOOK_LINES, f"the book holds {total} lines, over {MAX_BOOK_LINES}: {heaviest}"
    assert lines[APPENDIX] <= MAX_APPENDIX_LINES, (
        f"the appendix holds {lines[APPENDIX]} lines of code, more than {MAX_APPENDIX_LINES}")


def test_the_book_count_sees_every_line(tmp_path):
    """A planted cell of 9,000 lines makes the book too heavy: the count reads every notebook."""
    heavy = tmp_path / "99_heavy.ipynb"
    heavy.write_text(json.dumps({"cells": [{"cell_type": "code", "source": "x = 1\n" * 9000, "metadata": {},
                                            "outputs": []}]}), encoding="utf-8")
    assert sum(book_lines([*NOTEBOOKS, heavy]).values()) > MAX_BOOK_LINES
