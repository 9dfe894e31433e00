"""The seed noise of the `multi30k` recipe (chapter 14): the same recipe trained with other seeds,
each scored on the validation and test sets as the recipe decodes (beam 4, α 1.4, the average of
the last 3 checkpoints), then the mean and standard deviation of the three runs.

    python experiments/multi30k_seeds.py --data-dir DIR              # seeds 1 and 2, then the summary
    python experiments/multi30k_seeds.py --data-dir DIR --seeds 3    # another seed
    python experiments/multi30k_seeds.py --data-dir DIR --decoding --seeds 0 1 2   # decoding choices
    python experiments/multi30k_seeds.py --tiny                      # the built-in corpus, seconds

Seed 0 is chapter 14's run (`multi30k_cpu.json`). The recipe trains 9,224 steps, with a 30-minute
limit that only a slower machine reaches; the other seeds train the same steps without the limit,
so that the runs differ in their seed only, not in how busy the machine was while they trained. A
run directory that is there is resumed (a finished one only scored again). The summary goes to
annotated_transformer/results/multi30k_seeds.json.

`--decoding` adds, for each trained seed, the validation BLEU of the recipe's two decoding choices
and their alternatives (the average of the last 3 checkpoints or the last one alone; α 1.4 or the
paper's 0.6), so that a choice is judged on several models rather than one.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from annotated_transformer import Translator, corpus, evaluate_bleu, get_recipe, train_translation
from annotated_transformer.acceleration import configure_process
from annotated_transformer.helpers.files import atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "annotated_transformer" / "results"
COMMITTED_RUN = "multi30k_cpu.json"
COMMITTED_SCORE = "average of the last 3 / beam 4"


def seed_run(seed: int, args: argparse.Namespace) -> dict:
    """Train (or resume) one seed's run, then score its averaged model on val and test."""
    base = get_recipe(args.config)
    recipe = base.replace(seed=seed, max_steps=args.max_steps, max_minutes=None)
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


DECODINGS = {  # name: (checkpoint of the run to decode with, alpha)
    "average of the last 3, alpha 1.4": (None, 1.4),
    "average of the last 3, alpha 0.6": (None, 0.6),
    "last checkpoint, alpha 1.4": ("last", 1.4),
    "last checkpoint, alpha 0.6": ("last", 0.6),
}


def decoding_choices(seed: int, args: argparse.Namespace) -> dict:
    """Validation BLEU (beam 4) of a trained seed's run under each of DECODINGS."""
    run_dir = args.seed0_run_dir if seed == 0 else args.runs_dir / f"seed{seed}"
    options = {"root": args.data_dir} if args.data_dir else {}
    pairs = corpus(get_recipe(args.config).corpus, "val", **options)
    last = sorted((run_dir / "checkpoints").glob("step_*.pt"))[-1]
    scores = {}
    for name, (checkpoint, alpha) in DECODINGS.items():
        translator = Translator.load(last if checkpoint == "last" else run_dir, alpha=alpha)
        scores[name] = round(evaluate_bleu(translator, pairs).bleu, 2)
    return {"seed": seed, "val": scores}


def committed_run() -> dict:
    """Seed 0: the run chapter 14 trained and scored (its result file)."""
    run = json.loads((RESULTS / COMMITTED_RUN).read_text(encoding="utf-8"))
    return {"seed": 0, "steps": run["steps"], "minutes": run["minutes"], "hardware": run["hardware"],
            "val": run["val"], "test": run["test"][COMMITTED_SCORE], "signature": run["signature"],
            "source": f"chapter 14's run ({COMMITTED_RUN})"}


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
    parser.add_argument("--max-steps", type=int, help="steps to train (default: the recipe's)")
    parser.add_argument("--data-dir", type=Path, help="a folder with the Multi30k files (default: the cache)")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "seeds")
    parser.add_argument("--seed0-run-dir", type=Path, default=ROOT / "book" / "runs" / "multi30k",
                        help="chapter 14's run, seed 0 of --decoding (default: where the chapter trains it)")
    parser.add_argument("--out", type=Path, default=RESULTS / "multi30k_seeds.json")
    parser.add_argument("--tiny", action="store_true",
                        help="the built-in corpus for a few steps, without seed 0 (a smoke test)")
    parser.add_argument("--decoding", action="store_true",
                        help="score the decoding choices of the trained seeds into the result file")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    args.config = "builtin" if args.tiny else "multi30k"
    args.max_steps = args.max_steps or get_recipe(args.config).train.max_steps
    if args.tiny:
        args.max_steps = min(args.max_steps, 20)
    command = "python experiments/multi30k_seeds.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.decoding:
        result = json.loads(args.out.read_text(encoding="utf-8"))
        result["decoding_choices"] = [decoding_choices(seed, args) for seed in args.seeds]
        result["decoding_command"] = command.strip()
        _write(result, args.out)
        print(json.dumps(result["decoding_choices"], indent=1))
        return result
    configure_process()  # the process-wide settings of a program that trains (chapter 9)
    rows = ([] if args.tiny else [committed_run()]) + [seed_run(seed, args) for seed in args.seeds]
    result = {
        "recipe": args.config,
        "schedule": f"{args.max_steps:,} steps (seed 0 also under the recipe's time limit, the other seeds "
                    "without it; each row's steps are the steps it trained)",
        "scored_with": "beam 4, alpha and checkpoints averaged from the recipe",
        "command": command.strip(),
        "runs": rows,
        "summary": summary(rows),
    }
    if args.out.exists():  # the decoding choices of the same runs, scored before, are kept
        earlier = json.loads(args.out.read_text(encoding="utf-8"))
        kept = ("decoding_choices", "decoding_command")
        result.update((key, earlier[key]) for key in kept if key in earlier)
    _write(result, args.out)
    print(json.dumps(result["summary"], indent=1))
    return result


def _write(result: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
