"""Changes to the `multi30k` recipe compared on one GPU at the budget of a 30-minute run on two CPU
cores, scored on the validation set only (never on a test set). Chapter 14's search, on a GPU.

    python experiments/gpu_recipe_search.py --data-dir DIR --base-steps 5000
    python experiments/gpu_recipe_search.py --data-dir DIR --device cpu --base-steps 20 --limit 20 \
        --runs recipe enc5-dec1 --run-root /tmp/smoke --out /tmp/smoke.json   # a smoke test (minutes)

A GPU trains these small models far faster than two CPU cores, but what transfers from it to the
CPU is the number of steps, not the minutes: each candidate trains, on the GPU, the steps that its
30 minutes on two CPU cores would reach. `--base-steps` is that number for the recipe itself, and
a candidate with another model shape gets `--base-steps` × (the recipe's CPU time per step / its
own), from `CPU_MINUTES_PER_100_STEPS` (measured on the CPU that confirms the winner). The cooldown
of every run then ends at its last step, as a 30-minute CPU run's cooldown, fitted to the clock,
ends when the time does. Every run is float32 (TF32 matrix products on the GPU), one CPU thread,
`--parallel` side by side on the one GPU; then each is scored on the 1,014 validation sentences with beam 4
(the recipe's α) from the average of its last 3 checkpoints (model.pt), and greedily from the same.

The winner is not the recipe until a whole 30-minute run on the CPU confirms it on the validation
set (`experiments/cpu_recipe_search.py --thirty-minutes`).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.helpers.files import atomic_write_text
from annotated_transformer.runs.run_files import read_history

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # one CPU thread per run: many runs share the machine

# Minutes per 100 steps of each candidate on a CPU: measured, then smoothed by a least-squares fit
# over the model shapes (experiments/cpu_step_costs.json says how, on which machine, and holds both).
STEP_COSTS = Path(__file__).resolve().parent / "cpu_step_costs.json"
CPU_MINUTES_PER_100_STEPS: dict[str, float] = json.loads(STEP_COSTS.read_text(encoding="utf-8"))[
    "minutes_per_100_steps"]

# The recipe this search changed: `--config multi30k` as it was then (BPE 4,000, 3 layers, d_model
# 256, d_ff 512, 4 heads, dropout 0.1, batches of 1,000 tokens, warmup 3,200, cooldown 32%). The
# search chose 2 layers, so the recipe's depth is given here; a candidate's options come after it.
BASE = ["--config", "multi30k", "--layers", "3"]
# name: the options each candidate adds (a flag given again overrides the base's).
CANDIDATES = {
    "recipe": [],
    # Run-to-run noise: the recipe with other seeds (initialization, batch order, dropout).
    "recipe-seed1": ["--seed", "1"],
    "recipe-seed2": ["--seed", "2"],
    # Other shapes at the same CPU time: wider feed-forward layers, fewer or more layers, a wider
    # model, a deep encoder with a shallow decoder (not in the paper; a decoder layer costs more than
    # an encoder layer, and decoding runs the decoder once per output token).
    "dff1024": ["--d-ff", "1024"],
    "L2": ["--layers", "2"],
    "L4": ["--layers", "4"],
    "L2-dff1024": ["--layers", "2", "--d-ff", "1024"],
    "d320": ["--d-model", "320", "--d-ff", "640"],
    "enc4-dec2": ["--layers", "4", "--decoder-layers", "2"],
    "enc5-dec1": ["--layers", "5", "--decoder-layers", "1"],
    # Smaller and larger joint BPE vocabularies: cheaper or dearer output layers, longer or shorter
    # sequences.
    "v3000": ["--vocab-size", "3000"],
    "v6000": ["--vocab-size", "6000"],
    # More label smoothing (§5.4 uses 0.1): the recipe fits its training sentences far better than
    # the validation ones.
    "ls0.2": ["--label-smoothing", "0.2"],
}


def steps_for(name: str, base_steps: int) -> int:
    """Optimizer steps of candidate `name`: what its 30 CPU minutes reach, to the nearest 100. A
    candidate without a cost of its own costs what the recipe does."""
    costs = CPU_MINUTES_PER_100_STEPS
    ratio = costs["recipe"] / costs.get(name, costs["recipe"])
    return max(1, round(base_steps * ratio / 100) * 100) if base_steps >= 100 else base_steps


def command(name: str, run_dir: Path, steps: int, args: argparse.Namespace) -> list[str]:
    return [
        sys.executable, "-m", "annotated_transformer", "train", *BASE,
        "--run-dir", str(run_dir), *CANDIDATES[name], "--max-steps", str(steps),
        "--max-minutes", "inf", "--precision", "fp32", "--device", args.device,
        "--data-dir", args.data_dir, "--no-download", "--quiet",
    ]


def evaluate(run_dir: Path, beam_size: int, args: argparse.Namespace) -> subprocess.Popen:
    out = run_dir / f"val_beam{beam_size}.json"
    argv = [sys.executable, "-m", "annotated_transformer", "evaluate", str(run_dir), "--split", "val",
            "--beam-size", str(beam_size), "--device", args.device, "--data-dir", args.data_dir,
            "--no-download", "--output", str(out), *(["--limit", str(args.limit)] if args.limit else [])]
    return spawn(argv, run_dir.parent / f"{run_dir.name}.eval{beam_size}.log")


def spawn(command: list[str], log_path: Path) -> subprocess.Popen:
    """`command` in a child process, one CPU thread, its output in `log_path`."""
    with open(log_path, "w") as log:  # the child keeps its own copy of the file
        return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=ENV)


def wait_all(processes: dict, deadline: float) -> dict:
    """Exit status of each process; None for one still running at `deadline` (then killed)."""
    while any(p.poll() is None for p in processes.values()) and time.monotonic() < deadline:
        time.sleep(2)
    status = {name: p.poll() for name, p in processes.items()}
    for name, p in processes.items():
        if status[name] is None:
            p.kill()
            p.wait()
    return status


def train_and_score(args: argparse.Namespace, steps: dict[str, int]) -> tuple[dict, float]:
    """Train the candidates in their order, `--parallel` at a time, and score each as it finishes.
    Returns each run's exit status (None: stopped at the deadline, or never started) and the minutes
    training took."""
    start = time.monotonic()
    waiting, training, scoring, status = list(args.runs), {}, {}, {name: None for name in args.runs}
    while (waiting or training) and time.monotonic() < start + 60 * args.train_minutes:
        while waiting and len(training) < args.parallel:
            name = waiting.pop(0)
            training[name] = spawn(command(name, args.run_root / name, steps[name], args),
                                   args.run_root / f"{name}.log")
        time.sleep(2)
        for name, process in list(training.items()):
            if process.poll() is not None:
                status[name] = process.returncode
                del training[name]
                print(f"{name}: exit status {process.returncode} after "
                      f"{(time.monotonic() - start) / 60:.2f} min", flush=True)
                if process.returncode == 0:
                    for beam in (4, 1):
                        scoring[name, beam] = evaluate(args.run_root / name, beam, args)
    train_minutes = (time.monotonic() - start) / 60
    wait_all(training, 0.0)  # stops what the deadline left unfinished
    wait_all(scoring, time.monotonic() + 60 * args.score_minutes)
    return status, round(train_minutes, 2)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    parser.add_argument("--base-steps", type=int, required=True, help="the recipe's steps in 30 CPU minutes")
    parser.add_argument("--data-dir", required=True, help="a folder with the Multi30k files")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--parallel", type=int, default=8, help="runs training side by side")
    parser.add_argument("--run-root", type=Path, default=ROOT / "runs" / "gpu-search")
    parser.add_argument("--train-minutes", type=float, default=6.0, help="stop unfinished runs then")
    parser.add_argument("--score-minutes", type=float, default=1.5, help="then stop unfinished scoring")
    parser.add_argument("--limit", type=int, help="score N validation sentences only (a smoke test)")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "annotated_transformer" / "results" / "multi30k_gpu_search.json"
    )
    args = parser.parse_args()
    args.run_root.mkdir(parents=True, exist_ok=True)
    steps = {name: steps_for(name, args.base_steps) for name in args.runs}
    status, train_minutes = train_and_score(args, steps)
    results = {name: run_result(name, args.run_root / name, steps[name], status[name]) for name in args.runs}
    report = {"base_steps": args.base_steps, "device": device_name(args.device), "parallel": args.parallel,
              "train_minutes": train_minutes, "runs": results}
    atomic_write_text(args.out, json.dumps(report, indent=1) + "\n")
    return 0


def run_result(name: str, run_dir: Path, steps: int, status: int | None) -> dict:
    """What a candidate's run reached: its steps, its minutes on the GPU, its validation scores."""
    result = {"options": CANDIDATES[name], "steps": steps, "exit_status": status}
    if RunDirectory(run_dir).history.exists():
        records = read_history(run_dir)
        result["steps_done"], result["gpu_minutes"] = records[-1]["step"], round(records[-1]["minutes"], 2)
    for beam, key in ((4, "val_beam4_average_3"), (1, "val_greedy_average_3")):
        scores = run_dir / f"val_beam{beam}.json"
        if scores.exists():
            result[key] = round(json.loads(scores.read_text())["bleu"], 2)
    print(name, result, flush=True)
    return result


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"


if __name__ == "__main__":
    sys.exit(main())
