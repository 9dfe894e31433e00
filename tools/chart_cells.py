"""Re-run the cells that draw a chapter's interactive charts, and only those.

    python tools/chart_cells.py                    # every notebook in book/ that has chart cells
    python tools/chart_cells.py book/14_*.ipynb    # some
    python tools/chart_cells.py --check            # check the committed chart outputs, run nothing

A chart cell (a code cell tagged `chart`, and `hide-input`: it is plotting scaffolding) draws one
interactive chart with Altair from what the package provides (chapter 14's shipped translator, a
chapter's exported functions), so it needs nothing else the chapter computed. This runs a
notebook's chart cells in order in one fresh kernel (book/ as the working directory, as nbval runs
the chapter), without the rest of the chapter, whose training may take half an hour, and stores
their outputs in the notebook: a Vega-Lite specification with its data, which the book draws
offline (tools/sphinx_ext/vega_charts.py). The notebook is read, changed and written at the end
only, so that edits made to other cells in the meantime are kept. A chart cell keeps the execution
count of its own kernel: like a glue cell, it is left out of the check of a chapter's execution order
(tests/test_packaging.py), since it does not depend on the cells before it.

Each chart cell must give exactly one Vega-Lite output of at most MAX_BYTES as the notebook stores
it (its data included): --check, and tests/test_book.py, fail otherwise.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

BOOK = Path(__file__).resolve().parent.parent / "book"
TAG = "chart"
MIME_TYPE = "application/vnd.vegalite.v5+json"
MAX_BYTES = 300_000  # one chart's output, as the notebook file stores it


def chart_cells(notebook) -> list:
    return [cell for cell in notebook.cells
            if cell.cell_type == "code" and TAG in cell.get("metadata", {}).get("tags", [])]


def output_bytes(output) -> int:
    """The size of one output as nbformat writes it into the notebook file."""
    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [output]
    notebook.cells = [cell]
    return len(nbformat.writes(notebook).encode("utf-8")) - len(nbformat.writes(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("")])).encode("utf-8"))


def problems(notebook) -> list[str]:
    """What is wrong with the chart cells' committed outputs (empty: nothing)."""
    found = []
    for cell in chart_cells(notebook):
        name = f"chart cell {cell.get('id')}"
        if "hide-input" not in cell.metadata.get("tags", []):
            found.append(f"{name} is not tagged hide-input")
        charts = [output for output in cell.get("outputs", []) if MIME_TYPE in output.get("data", {})]
        if len(charts) != 1:
            found.append(f"{name} has {len(charts)} {MIME_TYPE} outputs, not 1 (run tools/chart_cells.py)")
        errors = [output for output in cell.get("outputs", []) if output.get("output_type") == "error"
                  or output.get("name") == "stderr"]
        if errors:
            found.append(f"{name} has an error or stderr output")
        for output in charts:
            size = output_bytes(output)
            if size > MAX_BYTES:
                found.append(f"{name}'s chart takes {size:,} bytes in the notebook (at most {MAX_BYTES:,})")
    return found


def run_charts(path: Path, timeout: int) -> int:
    """Run the chart cells of the notebook at `path`, store their outputs; the number of cells run."""
    original = nbformat.read(path, as_version=4)
    cells = chart_cells(original)
    if not cells:
        return 0
    scratch = copy.deepcopy(original)
    scratch.cells = copy.deepcopy(cells)
    NotebookClient(scratch, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    ran = {cell.id: cell for cell in scratch.cells}

    notebook = nbformat.read(path, as_version=4)  # as it is now: other cells may have changed meanwhile
    for cell in chart_cells(notebook):
        fresh = ran.get(cell.id)
        if fresh is None or fresh.source != cell.source:
            raise SystemExit(f"{path}: chart cell {cell.id} changed while it ran; run this again")
        # Run on their own, as glue cells are (tools/glue_figures.py): the count is their own kernel's,
        # and the test of a chapter's execution order leaves them out.
        cell.outputs, cell.execution_count = fresh.outputs, fresh.execution_count
    nbformat.validate(notebook)
    nbformat.write(notebook, path)
    return len(cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks (default: book/*.ipynb)")
    parser.add_argument("--check", action="store_true", help="check the committed outputs, run nothing")
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell (default 600)")
    args = parser.parse_args(argv)
    found = []
    for path in args.notebooks or sorted(BOOK.glob("*.ipynb")):
        if not args.check:
            start = time.perf_counter()
            if count := run_charts(path, args.timeout):
                print(f"{path}: {count} chart cells run in {time.perf_counter() - start:.1f} s")
        found += [f"{path}: {problem}" for problem in problems(nbformat.read(path, as_version=4))]
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
