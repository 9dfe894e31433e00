"""How much code a reader of each chapter scrolls through (the committed notebooks).

Visible code: the lines of the code cells a reader sees, that is, not tagged `hide-input` (collapsed,
one click to open), `remove-input` or `remove-cell`. A silent run: the visible code lines a reader
passes, prose between them or not, before the next output or figure. A reader meets an output or a
figure at least every MAX_SILENT_RUN lines, and no lesson is longer than MAX_VISIBLE_LINES (the
translation chapter, the series' climax, is held shorter). The chapter on the engineering of a long
run (chapter 10) has no length cap: it is where the plumbing the lessons leave out is taught.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
HIDDEN = {"hide-input", "remove-input", "remove-cell"}
MAX_SILENT_RUN = 200
MAX_VISIBLE_LINES = 700
LINE_CAPS = {"14_translation": 600, "10_long_runs": None}  # None: no cap
FIGURE = re.compile(r"!\[|```\{(figure|image)\}|<img\b")


def weight(notebook: dict) -> tuple[int, int, int]:
    """(visible code lines, longest silent run, index of the cell that ends it) of a notebook."""
    visible = run = longest = 0
    end = -1
    for index, cell in enumerate(notebook["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and not set(cell.get("metadata", {}).get("tags", [])) & HIDDEN:
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


def test_weight_counts_visible_lines_and_resets_at_outputs_and_figures():
    def code(lines: int, tags=(), outputs=()):
        return {"cell_type": "code", "source": "x\n" * lines, "metadata": {"tags": list(tags)},
                "outputs": list(outputs)}

    shown = [{"output_type": "stream", "text": "1\n"}]
    figure = {"cell_type": "markdown", "source": "![a curve](curve.png)", "metadata": {}}
    cells = [code(10), code(5, tags=["hide-input"]), code(3, outputs=shown), code(50), figure,
             code(20), {"cell_type": "markdown", "source": "prose", "metadata": {}}, code(30)]
    assert weight({"cells": cells}) == (113, 50, 4)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_chapter_is_light(path):
    visible, longest, end = weight(json.loads(path.read_text(encoding="utf-8")))
    assert longest <= MAX_SILENT_RUN, (
        f"{path.name}: {longest} visible code lines without an output or a figure (up to cell {end}); "
        f"show a result at least every {MAX_SILENT_RUN} lines, or collapse engineering (hide-input)"
    )
    cap = LINE_CAPS.get(path.stem, MAX_VISIBLE_LINES)
    assert cap is None or visible <= cap, (
        f"{path.name}: {visible} visible code lines, more than {cap}; move engineering to chapter 10 "
        f"or collapse it (hide-input, with a sentence saying what it does)"
    )
