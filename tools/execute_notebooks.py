"""Execute book notebooks in place, so that their committed outputs are fresh.

    python tools/execute_notebooks.py                 # every chapter in book/
    python tools/execute_notebooks.py book/02_*.ipynb # some chapters

Each notebook runs in a fresh kernel of the current Python environment, with book/ as its working
directory, exactly as the book and nbval run it. A cell that raises stops that notebook and makes
this script exit non-zero; the notebook file is then left as it was. After a notebook ran, its
prose's figures are written again from the result files (tools/glue_figures.py).
"""

import argparse
import sys
import time
from pathlib import Path

import nbformat
from glue_figures import refresh as refresh_figures
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

BOOK = Path(__file__).resolve().parent.parent / "book"


def execute(path: Path, timeout: int) -> None:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    nbformat.write(notebook, path)
    refresh_figures(path)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks to run (default: book/*.ipynb)")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds allowed per cell (default 1800)")
    args = parser.parse_args()
    paths = args.notebooks or sorted(BOOK.glob("*.ipynb"))
    failed = 0
    for path in paths:
        start = time.perf_counter()
        try:
            execute(path, args.timeout)
        except CellExecutionError as error:
            failed += 1
            print(f"FAILED {path}:\n{error}", file=sys.stderr)
            continue
        print(f"ran {path} in {time.perf_counter() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
