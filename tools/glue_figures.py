"""Write the figures that a chapter's glue cells compute into the chapter's prose.

    python tools/glue_figures.py                    # every notebook in book/
    python tools/glue_figures.py book/14_*.ipynb    # some
    python tools/glue_figures.py --check            # report stale figures, change nothing (exit 1)

A glue cell (a code cell tagged `glue` and `remove-cell`) reads result files the package ships and
hands each figure, formatted as text, to `annotated_transformer.helpers.book_figures.glue(name,
text)`; it needs nothing else the chapter computed. The prose holds the figure itself, as plain text
between two HTML comments that name it:

    the run took <!--fig:cpu_minutes-->20.8<!--/fig--> minutes

so that it reads the same in the online book, in Jupyter, on GitHub and in Colab (which show an HTML
comment as nothing, and would show a MyST role as raw markup). This tool runs a notebook's glue cells
in order, in one namespace, without re-running the chapter (whose training may take half an hour),
and writes each figure's text between its markers; tests/test_figures.py fails when a marker's text
is not what the glue cells give from today's result files.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from unittest import mock

import nbformat

from annotated_transformer.helpers import book_figures as figures

BOOK = Path(__file__).resolve().parent.parent / "book"
TAG = "glue"
# A figure's place in the prose: <!--fig:NAME-->TEXT<!--/fig-->, TEXT on one line.
MARKER = re.compile(r"<!--fig:([A-Za-z0-9_-]+)-->([^\n]*?)<!--/fig-->")


def marker(name: str, text: str) -> str:
    """The prose's text for the figure `name` whose value is `text`."""
    return f"<!--fig:{name}-->{text}<!--/fig-->"


def glue_cells(notebook) -> list:
    return [cell for cell in notebook.cells
            if cell.cell_type == "code" and TAG in cell.get("metadata", {}).get("tags", [])]


def glued_values(notebook) -> dict[str, str]:
    """What each figure the glue cells of `notebook` glue reads as now: {name: text}. Refuses a name
    glued twice (the prose could show only one of the two)."""
    values: dict[str, str] = {}

    def record(name, value) -> None:
        text = figures.glue_text(name, value)
        if name in values:
            raise ValueError(f"the glue cells glue {name!r} twice")
        values[name] = text

    namespace: dict = {"__name__": "__glue__"}
    with mock.patch.object(figures, "glue", record):
        for cell in glue_cells(notebook):
            exec(compile(cell.source, f"<glue cell {cell.get('id')}>", "exec"), namespace)
    return values


def pasted(notebook) -> list[tuple[str, str]]:
    """(name, text) of every figure marker in the notebook's Markdown, in order."""
    return [found.groups() for cell in notebook.cells if cell.cell_type == "markdown"
            for found in MARKER.finditer(cell.source)]


def stale_figures(notebook) -> list[str]:
    """The names whose text in the prose is not what the glue cells give now (or that no glue cell
    glues), each once."""
    values = glued_values(notebook)
    stale = [name for name, text in pasted(notebook) if values.get(name) != text]
    return list(dict.fromkeys(stale))


def refresh(path: Path) -> int:
    """Write today's figures into the prose of the notebook at `path` (glue cells keep no outputs);
    the number of figures changed. Refuses a marker that no glue cell glues."""
    notebook = nbformat.read(path, as_version=4)
    values = glued_values(notebook)
    unknown = sorted({name for name, _ in pasted(notebook)} - set(values))
    if unknown:
        raise SystemExit(f"{path}: the prose marks {unknown}, which no glue cell glues: glue them there")
    changed = 0
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            new = MARKER.sub(lambda found: marker(found[1], values[found[1]]), cell.source)
            old_texts, new_texts = MARKER.findall(cell.source), MARKER.findall(new)
            changed += sum(a != b for a, b in zip(old_texts, new_texts, strict=True))
            cell.source = new
    outputs = False
    for cell in glue_cells(notebook):
        outputs = outputs or bool(cell.get("outputs"))
        cell.outputs = []
        cell.execution_count = cell.execution_count or 1
    if changed or outputs:
        nbformat.write(notebook, path)
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks (default: book/*.ipynb)")
    parser.add_argument("--check", action="store_true", help="report the stale figures, change nothing")
    args = parser.parse_args()
    stale = 0
    for path in args.notebooks or sorted(BOOK.glob("*.ipynb")):
        if args.check:
            names = stale_figures(nbformat.read(path, as_version=4))
            stale += len(names)
            if names:
                print(f"{path}: stale figures {names}")
        elif count := refresh(path):
            print(f"{path}: {count} figures written")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
