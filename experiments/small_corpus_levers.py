"""Regularization for a small corpus against the `multi30k` recipe (chapter 14), on the validation set.

Each lever is the recipe with one setting changed (BPE-dropout, chapter 13; R-Drop, chapter 8),
trained with a seed of the recipe's seed study (`multi30k_seeds.json`, the recipe's own runs), and
compared with the recipe's run of the same seed: paired, as the appendix's rule judges a difference
over seeds (the mean difference beyond twice its standard error, one sign on every seed), or,
with one seed only, against 2·√2 times the recipe's seed standard deviation.

    python experiments/small_corpus_levers.py --data-dir DIR --step-cost        # each lever's step cost
    python experiments/small_corpus_levers.py --data-dir DIR --runs bpe-dropout:0 rdrop:0
    python experiments/small_corpus_levers.py --data-dir DIR --score-only       # the summary again
    python experiments/small_corpus_levers.py --tiny                            # the built-in corpus, seconds

The budget is the recipe's: 30 minutes on two cores. A lever that costs no more per step trains the
recipe's 9,224 steps; one that costs more trains the steps its measured step cost buys in those
30 minutes (`--step-cost` measures the ratio on a quiet machine, both cores, one lever after the
other, and records it). Runs train with a fixed number of steps and no clock, one thread each,
two side by side, so that how busy the machine was changes their speed but not their result. A
run directory that is there is resumed; a finished one is only scored. The summary goes to
annotated_transformer/results/multi30k_levers.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from annotated_transformer import Translator, corpus, evaluate_bleu, get_recipe, train_translation
from annotated_transformer.acceleration import configure_process
from annotated_transformer.files import atomic_write_text
from annotated_transformer.helpers import verdicts
from annotated_transformer.runs.run_directory import RunDirectory

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "annotated_transformer" / "results"
OUT = RESULTS / "multi30k_levers.json"
SEEDS = RESULTS / "multi30k_seeds.json"
BUDGET_MINUTES = 30.0  # the recipe's limit on two cores (chapter 14)

# name: (recipe settings, the CLI options that set them, what the literature used). Chapter 8's R-Drop
# averages the two passes' losses where Liang et al. add them, so its alpha is half theirs.
LEVERS = {
    "bpe-dropout": ({"bpe_dropout": 0.1}, ["--bpe-dropout", "0.1"],
                    "p = 0.1, Provilkov et al. (2020)'s value for most language pairs"),
    "rdrop": ({"rdrop_alpha": 2.5}, ["--rdrop-alpha", "2.5"],
              "alpha = 2.5: Liang et al. (2021)'s 5 for IWSLT translation, on chapter 8's scale"),
    "rdrop-alpha5": ({"rdrop_alpha": 5.0}, ["--rdrop-alpha", "5"],
                     "alpha = 5: twice Liang et al.'s value for IWSLT translation, on chapter 8's scale"),
}


def cost_name(name: str) -> str:
    """The lever whose measured step cost is `name`'s: R-Drop's does not depend on its alpha."""
    return "rdrop" if name.startswith("rdrop") else name


def recipe_steps(config: str) -> int:
    return get_recipe(config).train.max_steps


def lever_steps(name: str, config: str, step_costs: dict) -> int:
    """The steps a lever's run trains: the recipe's, or what 30 minutes buy at its step cost."""
    steps = recipe_steps(config)
    ratio = step_costs.get(cost_name(name), {}).get("ratio", 1.0)
    if ratio <= 1.05:  # within a step cost's noise: the same steps
        return steps
    if config != "multi30k":  # the tiny mode: the same scaling, no committed run to scale from
        return max(10, int(steps / ratio))
    recipe_minutes = committed_seed_runs()[0]["minutes"]  # the recipe's 9,224 steps on two cores
    return int(steps * BUDGET_MINUTES / (recipe_minutes * ratio))


def committed_seed_runs() -> list[dict]:
    return json.loads(SEEDS.read_text(encoding="utf-8"))["runs"]


def measure_step_cost(args: argparse.Namespace) -> dict:
    """Seconds per step of the recipe and of each lever: two lengths, the difference per step (so that
    start-up and vocabulary building cancel), both cores, one after another."""
    short, long = (5, 25) if args.tiny else (50, 250)
    options = {"root": args.data_dir} if args.data_dir else {}
    base = get_recipe(args.config)
    seconds = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, settings in [("recipe", {}), *[(n, LEVERS[n][0]) for n in LEVERS if cost_name(n) == n]]:
            recipe = base.replace(**settings, max_minutes=None, checkpoint_every=10_000)
            times = []
            for steps in (short, long):
                run = train_translation(recipe.replace(max_steps=steps), Path(tmp) / f"{name}-{steps}",
                                        corpus_options=options, progress=False)
                times.append(run.minutes * 60)
            seconds[name] = (times[1] - times[0]) / (long - short)
            print(f"{name}: {seconds[name]:.4f} s/step", flush=True)
    return {name: {"seconds_per_step": round(value, 4), "ratio": round(value / seconds["recipe"], 3)}
            for name, value in seconds.items()}


def start_run(name: str, seed: int, steps: int, args: argparse.Namespace) -> subprocess.Popen:
    run_dir = args.runs_dir / f"{name}-seed{seed}"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "annotated_transformer", "train", "--config", args.config,
               "--run-dir", str(run_dir), "--seed", str(seed), "--max-steps", str(steps),
               "--max-minutes", "inf", *LEVERS[name][1], "--quiet"]
    if args.data_dir:
        command += ["--data-dir", str(args.data_dir), "--no-download"]
    log = open(run_dir.parent / f"{run_dir.name}.log", "a")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    print(f"training {run_dir.name}: {steps:,} steps", flush=True)
    return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)


def train_all(runs: list[tuple[str, int]], args: argparse.Namespace, step_costs: dict) -> None:
    waiting, running = list(runs), []
    while waiting or running:
        while waiting and len(running) < args.parallel:
            name, seed = waiting.pop(0)
            steps = lever_steps(name, args.config, step_costs)
            running.append((name, seed, start_run(name, seed, steps, args)))
        time.sleep(5)
        for entry in list(running):
            if entry[2].poll() is not None:
                running.remove(entry)
                print(f"{entry[0]}-seed{entry[1]}: exit status {entry[2].returncode}", flush=True)
                if entry[2].returncode:
                    raise SystemExit(f"{entry[0]}-seed{entry[1]} failed: see its log in {args.runs_dir}")


def score(run_dir: Path, split: str, args: argparse.Namespace) -> float:
    options = {"root": args.data_dir} if args.data_dir else {}
    pairs = corpus(get_recipe(args.config).corpus, split, **options)
    return round(evaluate_bleu(Translator.load(run_dir), pairs).bleu, 2)


def baseline_val(args: argparse.Namespace) -> dict[int, float]:
    """The recipe's validation BLEU by seed: its committed seed runs (the tiny mode: trained here)."""
    if args.config == "multi30k":
        return {row["seed"]: row["val"] for row in committed_seed_runs()}
    out = {}
    for seed in sorted({seed for _, seed in args.runs}):
        recipe = get_recipe(args.config).replace(seed=seed, max_minutes=None)
        options = {"root": args.data_dir} if args.data_dir else {}
        run = train_translation(recipe, args.runs_dir / f"recipe-seed{seed}", corpus_options=options,
                                progress=False)
        out[seed] = score(run.run_dir, "val", args)
    return out


def judge(differences: list[float], recipe_std: float) -> dict:
    """The appendix's rule (`judging-differences`, `annotated_transformer.helpers.verdicts.judge`) on
    a lever's differences from the recipe: paired over seeds, or one run against 2·√2·s."""
    zeros = [0.0] * len(differences)  # the differences are already ours minus the recipe's
    if len(differences) == 1:
        verdict = verdicts.judge(differences, zeros, noise=recipe_std)
        return {"mean_difference": round(verdict.margin, 2), "margin": round(verdict.threshold, 2),
                "verdict": verdict.word,
                "rule": "one seed: better or worse only beyond 2·√2·s of the recipe's seeds"}
    verdict = verdicts.judge(differences, zeros, paired=True)
    return {"mean_difference": round(verdict.margin, 2), "two_se": round(verdict.threshold, 2),
            "verdict": verdict.word, "rule": verdicts.PAIRED}


def passes_over_the_data(args: argparse.Namespace, runs: dict[str, int]) -> dict:
    """How many times each lever's steps pass over the training data: BPE-dropout's pieces are more
    than plain BPE's, so batches of the same tokens hold fewer sentences (its first epoch's sample)."""
    from annotated_transformer.companions.corpus_cache import training_batches
    from annotated_transformer.companions.vocabulary_files import read_vocabularies
    from annotated_transformer.tokenization import encode_pairs

    options = {"root": args.data_dir} if args.data_dir else {}
    recipe = get_recipe(args.config)
    pairs = corpus(recipe.corpus, "train", **options)
    vocab_file = next(args.runs_dir.glob("*-seed*/vocab.json"))  # every run's: the same data, settings
    vocabs = read_vocabularies(vocab_file)
    encoded = encode_pairs(pairs, vocabs)
    out = {}
    for name, steps in runs.items():
        dropout = LEVERS[name][0].get("bpe_dropout", 0.0) if name in LEVERS else 0.0
        batches = len(training_batches(pairs, encoded, vocabs, dropout, recipe.max_tokens, seed=0)(0))
        out[name] = {"batches_per_epoch": batches, "steps": steps, "epochs": round(steps / batches, 1)}
    return out


def summarize(args: argparse.Namespace, step_costs: dict) -> dict:
    baseline = baseline_val(args)
    if args.config == "multi30k":  # the seed noise as the appendix states it (multi30k_seeds.json)
        recipe_std = json.loads(SEEDS.read_text(encoding="utf-8"))["summary"]["val"]["std"]
    else:
        recipe_std = statistics.stdev(baseline.values()) if len(baseline) > 1 else 0.0
    levers = {}
    for name, (settings, options, source) in LEVERS.items():
        rows = []
        for run_dir in sorted(args.runs_dir.glob(f"{name}-seed*")):
            if not run_dir.is_dir() or not RunDirectory(run_dir).model.exists():
                continue
            seed = int(run_dir.name.rsplit("seed", 1)[1])
            val = score(run_dir, "val", args)
            rows.append({"seed": seed, "val": val, "recipe_val": baseline[seed],
                         "difference": round(val - baseline[seed], 2)})
        if rows:
            levers[name] = {"settings": settings, "options": " ".join(options), "chosen_as": source,
                            "steps": lever_steps(name, args.config, step_costs), "runs": rows,
                            **judge([row["difference"] for row in rows], recipe_std)}
    runs = {"recipe": recipe_steps(args.config), **{name: lever["steps"] for name, lever in levers.items()}}
    return {
        "recipe": args.config,
        "what": "validation BLEU (beam 4, the recipe's alpha and averaging) of the recipe with one lever, "
                "against the recipe's run of the same seed",
        "recipe_val_std": round(recipe_std, 2),
        "budget_minutes": BUDGET_MINUTES,
        "step_costs": step_costs,
        "passes_over_the_data": passes_over_the_data(args, runs) if levers else {},
        "command": "python experiments/small_corpus_levers.py " + " ".join(args.argv),
        "levers": levers,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="*", default=[], help="NAME:SEED runs to train, e.g. bpe-dropout:0")
    parser.add_argument("--step-cost", action="store_true", help="measure each lever's cost per step first")
    parser.add_argument("--score-only", action="store_true", help="train nothing; score what is there")
    parser.add_argument("--data-dir", type=Path, help="a folder with the Multi30k files (default: the cache)")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "levers")
    parser.add_argument("--parallel", type=int, default=2, help="runs side by side, one thread each")
    parser.add_argument("--out", type=Path,
                        help=f"the result file (default {OUT.relative_to(ROOT)}; tiny: in --runs-dir)")
    parser.add_argument("--tiny", action="store_true", help="the built-in corpus (a smoke test)")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    args.config = "builtin" if args.tiny else "multi30k"
    args.out = args.out or (args.runs_dir / "levers.json" if args.tiny else OUT)
    args.runs = [(name, int(seed)) for name, seed in (item.split(":") for item in args.runs)]
    unknown = sorted({name for name, _ in args.runs} - set(LEVERS))
    if unknown:
        parser.error(f"unknown lever {', '.join(unknown)}: choose from {', '.join(LEVERS)}")
    configure_process()  # the process-wide settings of a program that trains (chapter 9)
    earlier = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    step_costs = measure_step_cost(args) if args.step_cost else earlier.get("step_costs", {})
    command = "python experiments/small_corpus_levers.py " + " ".join(args.argv)
    costs_command = command if args.step_cost else earlier.get("step_costs_command")
    if not args.score_only:
        train_all(args.runs, args, step_costs)
    result = {**summarize(args, step_costs), "step_costs_command": costs_command}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    print(json.dumps({name: {k: lever[k] for k in ("runs", "mean_difference", "verdict")}
                      for name, lever in result["levers"].items()}, indent=1))
    return result


if __name__ == "__main__":
    main()
