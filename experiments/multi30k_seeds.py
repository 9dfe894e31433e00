"""The seed noise of the `multi30k` recipe (chapter 13): the same recipe trained with other seeds,
each scored on the validation and test sets as the recipe decodes (beam 4, α 1.4, the average of
the last 3 checkpoints), then the mean and standard deviation of the three runs.

    python experiments/multi30k_seeds.py --data-dir DIR              # seeds 1 and 2, then the summary
    python experiments/multi30k_seeds.py --data-dir DIR --seeds 3    # another seed
    python experiments/multi30k_seeds.py --tiny                      # the built-in corpus, seconds

Seed 0 is the committed run of chapter 13 (`multi30k_cpu.json`). Its 30-minute time limit fitted
its cooldown to the clock, ending the schedule at step 9,224; the other seeds train that same
schedule by steps (`--max-steps 9224`, no time limit), so that the runs differ in their seed only,
not in how busy the machine was while they trained. A run directory that is there is resumed (a
finished one only scored again). The summary goes to annotated_transformer/results/multi30k_seeds.json.
"""

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

from annotated_transformer import Translator, corpus, evaluate_bleu, get_recipe, train_translation
from annotated_transformer.files import atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "annotated_transformer" / "results"
COMMITTED_RUN = "multi30k_cpu.json"
COMMITTED_SCORE = "average of the last 3 / beam 4"


def seed_run(seed: int, args: argparse.Namespace) -> dict:
    """Train (or resume) one seed's run, then score its averaged model on val and test."""
    base = get_recipe(args.config)
    recipe = dataclasses.replace(base, seed=seed, max_steps=args.max_steps, max_minutes=None)
    options = {"root": args.data_dir} if args.data_dir else {}
    run = train_translation(recipe, args.runs_dir / f"seed{seed}", corpus_options=options,
                            progress=not args.quiet)
    translator = Translator.load(run.run_dir)
    scores = {split: evaluate_bleu(translator, corpus(recipe.corpus, split, **options))
              for split in ("val", "test")}
    return {
        "seed": seed,
        "steps": run.steps,
        "minutes": round(run.minutes, 1),
        "hardware": run.hardware,
        "val": round(scores["val"].bleu, 2),
        "test": round(scores["test"].bleu, 2),
        "signature": scores["test"].signature,
        "source": f"experiments/multi30k_seeds.py, run directory seed{seed}",
    }


def committed_run() -> dict:
    """Seed 0: the run chapter 13 trained and scored (its result file)."""
    run = json.loads((RESULTS / COMMITTED_RUN).read_text(encoding="utf-8"))
    return {"seed": 0, "steps": run["steps"], "minutes": run["minutes"], "hardware": run["hardware"],
            "val": run["val"], "test": run["test"][COMMITTED_SCORE], "signature": run["signature"],
            "source": f"chapter 13's run ({COMMITTED_RUN})"}


def summary(rows: list[dict]) -> dict:
    """Mean and sample standard deviation (n - 1) of each split's BLEU over the runs."""
    out = {}
    for split in ("val", "test"):
        values = [row[split] for row in rows]
        out[split] = {"mean": round(statistics.mean(values), 2),
                      "std": round(statistics.stdev(values), 2) if len(values) > 1 else 0.0,
                      "min": min(values), "max": max(values)}
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2], help="seeds to train (default 1 2)")
    parser.add_argument("--max-steps", type=int, default=9224,
                        help="the schedule's last step (default 9224: where seed 0's clock ended it)")
    parser.add_argument("--data-dir", type=Path, help="a folder with the Multi30k files (default: the cache)")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "seeds")
    parser.add_argument("--out", type=Path, default=RESULTS / "multi30k_seeds.json")
    parser.add_argument("--tiny", action="store_true",
                        help="the built-in corpus for a few steps, without seed 0 (a smoke test)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    args.config = "builtin" if args.tiny else "multi30k"
    if args.tiny:
        args.max_steps = min(args.max_steps, 20)
    rows = ([] if args.tiny else [committed_run()]) + [seed_run(seed, args) for seed in args.seeds]
    command = "python experiments/multi30k_seeds.py " + " ".join(sys.argv[1:] if argv is None else argv)
    result = {
        "recipe": args.config,
        "schedule": f"{args.max_steps:,} steps (seed 0: fitted by its 30-minute clock; others by steps)",
        "decoding": "beam 4, alpha and checkpoints averaged from the recipe",
        "command": command.strip(),
        "runs": rows,
        "summary": summary(rows),
    }
    atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    return result


if __name__ == "__main__":
    main()
