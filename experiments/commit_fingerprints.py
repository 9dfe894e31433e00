"""Does the code of one commit train what another's trains? A short run of the `multi30k` recipe at
each commit, compared bit for bit.

    python experiments/commit_fingerprints.py --data-dir DIR --steps 300 db13f8c 22252b0 7a4ddd7 HEAD

For each commit: a git worktree of it, `python -m annotated_transformer train --config multi30k
--max-steps STEPS --max-minutes inf` with that worktree's package, on this machine's CPU; then the
SHA-256 of the averaged model's tensors (model.pt), in an order that does not depend on their names.
STEPS = 300 covers the warmup's start, a cooldown (the last 32% of the steps), checkpoints and the
averaging of the last 3. Equal fingerprints: the commits compute the same training, bit for bit.
Writes a JSON report to --out (or prints it).
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from annotated_transformer.companions.run_directory import RunDirectory

ROOT = Path(__file__).resolve().parent.parent


def tensor_digests(value, out: list[str]) -> list[str]:
    if isinstance(value, torch.Tensor):
        data = value.detach().contiguous().view(torch.uint8).numpy().tobytes()
        out.append(hashlib.sha256(data).hexdigest()[:16] if value.numel() else "empty")
    elif isinstance(value, dict):
        for item in value.values():
            tensor_digests(item, out)
    elif isinstance(value, list | tuple):
        for item in value:
            tensor_digests(item, out)
    return out


def fingerprint(model_file: Path) -> str:
    # weights_only=False: a run directory this script itself just wrote, under a commit's code
    digests = tensor_digests(torch.load(model_file, map_location="cpu", weights_only=False), [])
    return hashlib.sha256("".join(sorted(digests)).encode()).hexdigest()[:16]


def commit_run(commit: str, steps: int, data_dir: Path, work: Path) -> dict:
    tree, run_dir = work / commit, work / f"{commit}-run"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree), commit],
                   check=True, capture_output=True)
    try:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        subprocess.run([sys.executable, "-m", "annotated_transformer", "train", "--config", "multi30k",
                        "--data-dir", str(data_dir), "--run-dir", str(run_dir), "--max-steps", str(steps),
                        "--max-minutes", "inf", "--quiet", "--device", "cpu"], cwd=tree, env=env, check=True)
        sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", commit], check=True, capture_output=True,
                             text=True).stdout.strip()
        return {"commit": sha, "fingerprint": fingerprint(RunDirectory(run_dir).model)}
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("commits", nargs="+")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        runs = [commit_run(commit, args.steps, args.data_dir.resolve(), Path(folder))
                for commit in args.commits]
    report = json.dumps({"steps": args.steps, "recipe": "multi30k", "runs": runs}, indent=1)
    if args.out:
        args.out.write_text(report + "\n", encoding="utf-8")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
