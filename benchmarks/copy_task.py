"""The copy task (chapter 9): wall time until every held-out sequence is copied exactly.

    python benchmarks/copy_task.py              # seed 0
    python benchmarks/copy_task.py --seeds 0 1 2
"""

import argparse

import torch

from annotated_transformer.acceleration import configure_process
from annotated_transformer.training import train_copy_task


def run(seed: int = 0, threads: int | None = 1, device: str = "cpu") -> dict:
    # One thread by default: for a model this small, a second thread costs more than it saves.
    if threads:
        torch.set_num_threads(threads)
    model, report = train_copy_task(seed=seed, device=device)
    return {"model": model, "seed": seed,
            "steps": report.steps, "seconds": report.seconds, "exact_match": report.exact_match,
            "n_held_out": report.n_held_out, "threads": torch.get_num_threads(), "device": device}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1, fastest here)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    configure_process(args.device)  # the process-wide settings of a program that trains (chapter 9)
    for seed in args.seeds:
        result = run(seed, args.threads, args.device)
        print(f"seed {seed}: {result['exact_match']:.1%} of {result['n_held_out']} held-out sequences copied "
              f"exactly after {result['steps']} steps, {result['seconds']:.1f} s "
              f"({result['threads']} threads, {result['device']}; goal <= 30 s)")


if __name__ == "__main__":
    main()
