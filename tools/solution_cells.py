"""Run a chapter from the top and keep the outputs of its exercises' solutions, and only those.

    python tools/solution_cells.py book/12_data.ipynb            # as the book runs it
    python tools/solution_cells.py book/14_translation.ipynb --quick   # ANNOTATED_TRANSFORMER_QUICK=1

A solution (a code cell tagged `solution`, under its exercise: tests/test_exercises.py) needs what
the chapter computed before it, so the whole chapter runs, in a fresh kernel with book/ as its
working directory, as tools/execute_notebooks.py runs it. But only the solution cells take their new
outputs and execution counts; every other cell keeps the outputs committed (a chapter that trains
for half an hour keeps its full run's outputs even when its solutions are run in quick mode, which
then says so in the solution's first line). Prints each solution's seconds, and records them in the
cell's metadata (`solution_run`: seconds, quick mode or not, the machine's CPUs). A cell that raises
leaves the notebook as it was and exits non-zero.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

TAG = "solution"


def is_solution(cell) -> bool:
    return cell.cell_type == "code" and TAG in cell.get("metadata", {}).get("tags", [])


def seconds(cell) -> float | None:
    """How long a cell ran, from the timing nbclient records in its metadata."""
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return None
    parse = lambda text: datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (parse(end) - parse(start)).total_seconds()


def run(path: Path, quick: bool, timeout: int) -> dict[str, float | None]:
    """Run the notebook at `path`; write its solutions' outputs back; {cell id: seconds}."""
    notebook = nbformat.read(path, as_version=4)
    ran = copy.deepcopy(notebook)
    previous = os.environ.get("ANNOTATED_TRANSFORMER_QUICK")
    os.environ["ANNOTATED_TRANSFORMER_QUICK"] = "1" if quick else "0"
    try:
        NotebookClient(ran, timeout=timeout, kernel_name="python3", record_timing=True,
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        if previous is None:
            os.environ.pop("ANNOTATED_TRANSFORMER_QUICK", None)
        else:
            os.environ["ANNOTATED_TRANSFORMER_QUICK"] = previous
    timings = {}
    for cell, fresh in zip(notebook.cells, ran.cells, strict=True):
        if is_solution(cell):
            cell.outputs = fresh.outputs
            cell.execution_count = fresh.execution_count
            timings[cell.get("id")] = took = seconds(fresh)
            # What the reader's run of it costs, as measured here (the conclusion quotes the longest).
            cell.metadata["solution_run"] = {"seconds": None if took is None else round(took, 1),
                                             "quick": quick, "cpus": os.cpu_count()}
    nbformat.write(notebook, path)
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--quick", action="store_true", help="run the chapter in quick mode")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds allowed per cell (default 1800)")
    args = parser.parse_args()
    failed = 0
    for path in args.notebooks:
        start = time.perf_counter()
        try:
            timings = run(path, args.quick, args.timeout)
        except CellExecutionError as error:
            failed += 1
            print(f"FAILED {path}:\n{error}", file=sys.stderr)
            continue
        print(f"ran {path} in {time.perf_counter() - start:.1f} s; solutions' seconds:")
        for cell_id, took in timings.items():
            print(f"  {cell_id}: {'?' if took is None else f'{took:.1f}'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
