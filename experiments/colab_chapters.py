"""Every chapter as a Colab user runs it, on the GPU: the package installed from its wheel into a
fresh virtual environment, each chapter executed alone (a process of its own, in a folder that
holds only the notebooks, its code cells in order) outside quick mode; the minutes each took, or
how it failed, in colab.json.

    python experiments/colab_chapters.py plan                       # the parts: chapters per command
    python experiments/colab_chapters.py run --part 1 --data-dir DIR  # one part's chapters (minutes)
    python experiments/colab_chapters.py run --tiny --chapters 02_attention
                                                                    # quick mode, seconds (CI)

The chapters are split into parts that each fit one command (`--budget` minutes): in the book's
order, by the minutes colab.json measured, or by `GUESSED_MINUTES` until a chapter is measured. A
chapter still running when its part's time is up is stopped and recorded as such: one that needs a
GPU-sized setting. Multi30k comes from `--data-dir` through the package's own cache folder
(ANNOTATED_TRANSFORMER_CACHE), as a Colab runtime that has downloaded it would find it. The
chapters' cells run as a script, not in an IPython kernel: no chapter uses IPython's magics or
display (`script_of` refuses a cell that does), so the difference is the kernel's start.
"""

import argparse
import datetime
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

# Run as a script, Python puts only this script's folder (experiments/) on the path; the command line
# of a result row is written by benchmarks/gpu_training.py, which this script shares.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gpu_training import command_line

from annotated_transformer.helpers.files import atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
OUT = ROOT / "annotated_transformer" / "results" / "gpu"
RESULT_FILE = "colab.json"
WHERE = "import annotated_transformer; print(annotated_transformer.__file__)"  # the package they import
PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"  # where a wheel's files go
# Minutes on one GPU, guessed (none measured yet) from what each chapter trains; colab.json's
# measured minutes replace them. Every other chapter: GUESS.
GUESS = 0.5
GUESSED_MINUTES = {
    "09_training": 1.5, "10_long_runs": 2.0, "11_decoding": 1.0, "12_data": 1.0,
    "13_tokenization": 1.5,
    "14_translation": 30.0,  # the multi30k recipe's time limit, when its run is missing
    "15_distributed": 2.0, "16_command_line": 2.0, "17_why_self_attention": 3.0,
    "18_variations": 60.0, "19_layer_norm": 60.0,  # Table 3's runs and the post-/pre-LN runs
    "20_gpu": 6.0,
}


def chapters() -> list[str]:
    """Every notebook of the book, in its order (the appendix last)."""
    return sorted(path.stem for path in BOOK.glob("*.ipynb"))


def plan(budget: float, measured: dict[str, dict]) -> list[list[str]]:
    """The chapters, in order, packed into parts of at most `budget` minutes each; a chapter longer
    than the budget alone in its part."""
    parts: list[list[str]] = [[]]
    used = 0.0
    for chapter in chapters():
        minutes = expected_minutes(chapter, measured.get(chapter))
        if parts[-1] and used + minutes > budget:
            parts.append([])
            used = 0.0
        parts[-1].append(chapter)
        used += minutes
    return parts


def expected_minutes(chapter: str, row: dict | None) -> float:
    """A chapter's measured minutes where it ran to the end outside quick mode; else at least the guess."""
    guess = GUESSED_MINUTES.get(chapter, GUESS)
    if row is None or row.get("quick_mode") or "minutes" not in row:
        return guess
    return row["minutes"] if row["status"] in ("passed", "failed") else max(row["minutes"], guess)


def script_of(notebook: Path) -> str:
    """The notebook's code cells, in order, as one Python script."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    code = ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    for source in code:
        if any(line.lstrip().startswith(("%", "!")) for line in source.splitlines()):
            raise SystemExit(f"{notebook.name}: a cell uses IPython's syntax, which a script cannot run:"
                             f"\n{source}")
    return "\n\n".join(f"# --- cell {i}\n{source}" for i, source in enumerate(code))


def environment(work: Path, args: argparse.Namespace) -> Path:
    """A fresh virtual environment with the package installed from a wheel built now; the packages
    it needs (torch, spaCy, ...) are this interpreter's, listed after its own. Its python."""
    wheels, venv = work / "wheel", work / "venv"
    pip = [sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(wheels),
                    str(ROOT)], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", PURELIB],
                             check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", purelib,
                    *map(str, wheels.glob("*.whl"))], check=True)
    # After the environment's own packages: this interpreter's (and its PYTHONPATH's, but the checkout's)
    outer = [*site.getsitepackages(), sysconfig.get_paths()["purelib"],
             *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    outer = [p for p in dict.fromkeys(outer) if p and Path(p).exists() and Path(p).resolve() != ROOT]
    Path(purelib, "outer_packages.pth").write_text("\n".join(outer) + "\n")
    return python


def run_chapter(python: Path, folder: Path, chapter: str, seconds: float, args: argparse.Namespace) -> dict:
    """One chapter, alone, in `folder`; stopped after `seconds`."""
    script = folder / f"{chapter}.py"
    script.write_text(script_of(folder / f"{chapter}.ipynb"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ANNOTATED_TRANSFORMER_QUICK")}
    env.update(MPLBACKEND="Agg", PYTHONUNBUFFERED="1",
               ANNOTATED_TRANSFORMER_CACHE=str(folder.parent / "cache"))
    if args.tiny:
        env["ANNOTATED_TRANSFORMER_QUICK"] = "1"
    started = time.monotonic()
    with open(folder / f"{chapter}.log", "w") as log:
        process = subprocess.Popen([str(python), script.name], cwd=folder, env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
        try:
            status = "passed" if process.wait(timeout=max(seconds, 1)) == 0 else "failed"
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            status = "stopped"
    row = {"minutes": round((time.monotonic() - started) / 60, 2), "status": status}
    if status != "passed":
        row["log_tail"] = (folder / f"{chapter}.log").read_text(errors="replace")[-1500:]
    print(f"{chapter}: {status} in {row['minutes']} min", flush=True)
    return row


def run(args: argparse.Namespace) -> dict:
    path = args.out / RESULT_FILE
    report = json.loads(path.read_text()) if path.exists() else {"chapters": {}}
    names = args.chapters or plan(args.budget, report["chapters"])[args.part - 1]
    deadline = time.monotonic() + 60 * args.budget
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        python = environment(work, args)
        folder = work / "book"
        folder.mkdir()
        for notebook in BOOK.glob("*.ipynb"):
            shutil.copy(notebook, folder)
        if args.data_dir:
            shutil.copytree(args.data_dir, work / "cache" / "multi30k")
        where = subprocess.run([str(python), "-c", WHERE],
                               cwd=folder, check=True, capture_output=True, text=True).stdout.strip()
        if not Path(where).is_relative_to(work / "venv"):
            raise SystemExit(f"the chapters would import the package from {where}, not from its wheel")
        common = {"date": datetime.date.today().isoformat(), "hardware": hardware(),
                  "command": command_line("experiments/colab_chapters.py", args.argv),
                  "quick_mode": args.tiny}
        for chapter in names:
            left = deadline - time.monotonic()
            row = run_chapter(python, folder, chapter, left, args) if left > 0 else {"status": "not started"}
            report["chapters"][chapter] = {**row, **common}
            args.out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(report, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    return report


def hardware() -> dict:
    import torch

    info = {"torch": torch.__version__, "python": sys.version.split()[0]}
    if torch.cuda.is_available():
        info.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda)
    return info


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("stage", choices=("plan", "run"))
    parser.add_argument("--part", type=int, default=1, help="run: which part of the plan (from 1)")
    parser.add_argument("--chapters", nargs="+", help="run: these chapters instead of a part")
    parser.add_argument("--budget", type=float, default=7.5, help="minutes per part (one command)")
    parser.add_argument("--data-dir", help="a folder with the Multi30k files")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--tiny", action="store_true", help="quick mode (ANNOTATED_TRANSFORMER_QUICK=1): CI")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    unknown = sorted(set(args.chapters or ()) - set(chapters()))
    if unknown:
        parser.error(f"no such chapter: {', '.join(unknown)}; the chapters are {', '.join(chapters())}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    measured = {}
    if (args.out / RESULT_FILE).exists():
        measured = json.loads((args.out / RESULT_FILE).read_text())["chapters"]
    parts = plan(args.budget, measured)
    if args.stage == "plan":
        for i, part in enumerate(parts, 1):
            print(f"part {i}: {' '.join(part)}")
        return 0
    if not args.chapters and not 1 <= args.part <= len(parts):
        raise SystemExit(f"--part must lie in 1..{len(parts)}: the plan has {len(parts)} parts")
    report = run(args)
    ran = args.chapters or parts[args.part - 1]
    return 0 if all(report["chapters"][chapter]["status"] == "passed" for chapter in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
