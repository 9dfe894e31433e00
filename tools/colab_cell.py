"""The Colab set-up cell: the first code cell of every chapter, written from one template.

    .venv/bin/python tools/colab_cell.py                  # rewrite the first code cell of book/*.ipynb
    .venv/bin/python tools/colab_cell.py book/13_*.ipynb  # some chapters
    .venv/bin/python tools/colab_cell.py --check          # only report the chapters that differ (exit 1)

On Colab, or anywhere the package is missing, the cell installs it with pip from the repository (with
its `charts` extra, Altair, in the chapters whose interactive charts need it: CHART_CHAPTERS, and
never another torch: the package accepts the torch the runtime has); everywhere else it does nothing,
so the book, nbval and `make notebooks` run it as a no-op. The
repository address is one setting: the environment variable ANNOTATED_TRANSFORMER_REPO, read when the
cell runs, whose default is DEFAULT_REPO below. When pip fails, the cell prints pip's own message and
says what to do instead of showing a traceback. On Colab it also points to quick mode
(ANNOTATED_TRANSFORMER_QUICK=1); in the chapters that train for real on a GPU (GPU_CHAPTERS), it
recommends a GPU runtime when none is attached, and in those whose recipe is made for two CPU cores
(CPU_CHAPTERS), it says that Colab's CPU runtime is enough.

Only the cell's source changes: its id, metadata (the `hide-input` tag is added if missing),
execution count and outputs are kept, so a rewritten notebook still counts as executed.
tests/test_packaging.py checks that every chapter starts with setup_cell(chapter).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

BOOK = Path(__file__).resolve().parent.parent / "book"
REPO_ENV = "ANNOTATED_TRANSFORMER_REPO"
DEFAULT_REPO = "https://github.com/annotated-transformer/annotated-transformer"
# The chapters that train for real on a GPU (chapter 20's recipe; without one it shows the shipped GPU
# run). Chapter 15 trains on CPU processes, and chapters 18 and 19 show shipped runs outside quick mode.
GPU_CHAPTERS = ("20_gpu",)
# The chapters that train for real with a recipe made for two CPU cores, as Colab's CPU runtime has.
CPU_CHAPTERS = ("14_translation",)
# The chapters with interactive charts (cells tagged `chart`), which import Altair: the package's
# `charts` extra.
CHART_CHAPTERS = ("07_optimizer", "14_translation", "17_why_self_attention", "19_layer_norm")
TAG = "hide-input"

TEMPLATE = '''\
# On Colab, or wherever the package is missing, install it from the repository (set
# ANNOTATED_TRANSFORMER_REPO to install from another copy, e.g. a fork). Elsewhere this does nothing.
import importlib.util
import os
import subprocess
import sys

REPO = os.environ.get("{repo_env}", "{default_repo}")
if any(importlib.util.find_spec(name) is None for name in {needs}):
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", f"{requirement}git+{{REPO}}"],
        capture_output=True, text=True,
    )
    if pip.returncode != 0:
        print(pip.stdout[-2000:], pip.stderr[-3000:], sep="\\n", file=sys.stderr)
        raise SystemExit(
            f"pip could not install annotated_transformer from {{REPO}} (exit status {{pip.returncode}}, "
            "pip's message above). Check that the runtime is online and the address is right (set "
            "ANNOTATED_TRANSFORMER_REPO), then run this cell again."
        )
if "google.colab" in sys.modules:
    print("Quick mode, training in seconds: run %env ANNOTATED_TRANSFORMER_QUICK=1 before the next cells.")
'''

GPU_LINES = '''\
    import torch

    if not torch.cuda.is_available():
        print("This chapter trains for real: use a GPU runtime (Runtime > Change runtime type > GPU).")
'''


CPU_LINES = '''\
    print("This chapter trains for up to half an hour: its recipe is made for two CPU cores, as Colab's CPU "
          "runtime has, so it needs no GPU.")
'''


def setup_cell(chapter: str) -> str:
    """The source of the set-up cell for `chapter` (a notebook's name without .ipynb), no final newline."""
    charts = chapter in CHART_CHAPTERS
    text = TEMPLATE.format(
        repo_env=REPO_ENV, default_repo=DEFAULT_REPO,
        needs='("annotated_transformer", "altair")' if charts else '("annotated_transformer",)',
        requirement="annotated-transformer[charts] @ " if charts else "")
    if chapter in GPU_CHAPTERS:
        text += GPU_LINES
    if chapter in CPU_CHAPTERS:
        text += CPU_LINES
    return text.rstrip("\n")


def first_code_cell(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    for cell in notebook.cells:
        if cell.cell_type == "code":
            return cell
    raise ValueError("the notebook has no code cell")


def rewrite(path: Path, check: bool = False) -> bool:
    """Make the first code cell of `path` the set-up cell; True when it was (or, with check, would
    be) changed."""
    notebook = nbformat.read(path, as_version=4)
    cell = first_code_cell(notebook)
    wanted = setup_cell(path.stem)
    tags = cell.metadata.get("tags", [])
    if cell.source == wanted and TAG in tags:
        return False
    if not check:
        cell.source = wanted
        if TAG not in tags:
            cell.metadata["tags"] = [*tags, TAG]
        nbformat.write(notebook, path)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks (default: book/*.ipynb)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a cell differs")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(BOOK.glob("*.ipynb"))
    missing = [name for name in (*GPU_CHAPTERS, *CPU_CHAPTERS, *CHART_CHAPTERS)
               if not (BOOK / f"{name}.ipynb").exists()]
    if missing and not args.notebooks:
        print(f"colab_cell.py: GPU_CHAPTERS, CPU_CHAPTERS or CHART_CHAPTERS names chapters book/ does not "
              f"have: {missing}",
              file=sys.stderr)
        return 2
    changed = [path for path in paths if rewrite(path, check=args.check)]
    verb = "differ" if args.check else "rewritten"
    print(f"colab_cell.py: {len(changed)} of {len(paths)} notebooks {verb}")
    for path in changed:
        print(f"  {path}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
