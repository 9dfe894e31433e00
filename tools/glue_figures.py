"""Re-run the cells that glue figures into a chapter's prose, and only those.

    python tools/glue_figures.py                    # every notebook in book/
    python tools/glue_figures.py book/14_*.ipynb    # some
    python tools/glue_figures.py --check            # report stale cells, change nothing (exit 1)

A glue cell (a code cell tagged `glue` and `remove-cell`) reads result files the package ships and
hands figures to the prose with `annotated_transformer.helpers.book_figures.glue`; it needs nothing
else the chapter computed. So after a result file changes, its chapters' figures are brought up to
date by running their glue cells in order, in one namespace per notebook, without re-running the
chapter (whose training may take half an hour). Each glue cell's outputs become what `glue` displays.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from unittest import mock

import nbformat

from annotated_transformer.helpers import book_figures as figures

BOOK = Path(__file__).resolve().parent.parent / "book"
TAG = "glue"


def glue_cells(notebook) -> list:
    return [cell for cell in notebook.cells
            if cell.cell_type == "code" and TAG in cell.get("metadata", {}).get("tags", [])]


def glued_outputs(notebook) -> list[list[dict]]:
    """The outputs each glue cell of `notebook` gives now, in the cells' order."""
    outputs: list[list[dict]] = []

    def record(name, value) -> None:
        outputs[-1].append(figures.glue_output(name, value))

    namespace: dict = {"__name__": "__glue__"}
    with mock.patch.object(figures, "glue", record):
        for cell in glue_cells(notebook):
            outputs.append([])
            exec(compile(cell.source, f"<glue cell {cell.get('id')}>", "exec"), namespace)
    return outputs


def stale_cells(notebook) -> list[str]:
    """The ids of the glue cells whose committed outputs are not what they give now."""
    return [cell.get("id") for cell, fresh in zip(glue_cells(notebook), glued_outputs(notebook), strict=True)
            if [dict(output) for output in cell.get("outputs", [])] != fresh]


def refresh(path: Path) -> int:
    """Give each glue cell of the notebook at `path` its fresh outputs; the number of cells changed."""
    notebook = nbformat.read(path, as_version=4)
    changed = stale_cells(notebook)
    for cell, fresh in zip(glue_cells(notebook), glued_outputs(notebook), strict=True):
        cell.outputs = [nbformat.from_dict(output) for output in fresh]
        cell.execution_count = cell.execution_count or 1
    if changed:
        nbformat.write(notebook, path)
    return len(changed)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks (default: book/*.ipynb)")
    parser.add_argument("--check", action="store_true", help="report the stale glue cells, change nothing")
    args = parser.parse_args()
    stale = 0
    for path in args.notebooks or sorted(BOOK.glob("*.ipynb")):
        if args.check:
            cells = stale_cells(nbformat.read(path, as_version=4))
            stale += len(cells)
            if cells:
                print(f"{path}: stale glue cells {cells}")
        elif count := refresh(path):
            print(f"{path}: {count} glue cells refreshed")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
