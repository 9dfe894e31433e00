"""The search behind the `multi30k` recipe (chapter 14): short runs at the budget a 30-minute run on
two CPU cores gets, scored on the validation set only (never on a test set).

    python experiments/cpu_recipe_search.py                # train what is missing, then score every run
    python experiments/cpu_recipe_search.py --score-only   # only score the runs that are there
    python experiments/cpu_recipe_search.py --runs word-p0.3 bpe-p0.1   # some of the candidates
    python experiments/cpu_recipe_search.py --at-step 1000 # every candidate greedily, at the same step
    python experiments/cpu_recipe_search.py --tune-decoding runs/search/word-p0.1   # average_last, alpha
    python experiments/cpu_recipe_search.py --thirty-minutes cooldown-0.32  # a whole 30-minute run, 2 threads
    python experiments/cpu_recipe_search.py --cooldown-stage cooldown-p0.2 cooldown-bpe   # the third stage

Every candidate trains for the same number of optimizer steps (`--steps`, what a 30-minute run of
the recipe reaches on two cores) with the same batches of up to 4,000 padded tokens, one thread per
run and `--parallel` runs side by side (two single-threaded runs do more work on two cores than
one run with two threads, and a fixed number of steps makes the comparison independent of how busy
the machine was). Each run is scored on the 1,014 validation sentences with beam search (4,
α = 0.6) from the average of its last 5 and last 10 checkpoints, and greedily from the last one.
The results go to annotated_transformer/results/multi30k_search.json, which chapter 14 reads; `--at-step` adds
every candidate's greedy validation BLEU at one step (candidates stopped early can be compared
there), `--tune-decoding` a run's scores for each number of checkpoints averaged and each α, and
how many of its translations run on (more than twice their reference's words, and 5 more), and
`--cross-entropy` how much better a finished run fits 1,014 of its training sentences than the
validation sentences.

The second stage changes the schedule, which changes how many steps a run can take, so its
candidates are compared as the recipe is used: `--thirty-minutes NAME` trains the first stage's
recipe with a few options changed, alone on the machine with both cores, for its 30 minutes (or its
`--max-steps`, if it reaches them first), and scores it on the validation set: greedy and beam 4
from the last checkpoint, beam 4 from the average of the last 3. The third stage,
`--cooldown-stage NAME ...`, changes the best of them at equal steps again (one core each, side by
side) and scores each run the same way. The fourth, `--thirty-minutes bpe4000-clock-fitted`, trains
the final recipe for its 30 minutes again, on a CPU too slow for its 2,650 steps, with the cooldown
fitted to the clock. The fifth trains whole 30-minute runs with smaller batches on a slower CPU
again (an AMD EPYC whose float32 kernels are AVX2): `--thirty-minutes bpe4000-16-bit-masks
bpe4000-tokens2000 bpe4000-tokens1000 bpe4000-tokens1000-lr0.35 bpe4000-tokens1000-lr0.25
bpe4000-tokens500-lr0.3 bpe4000-tokens1000-warmup800 bpe4000-tokens1000-warmup1600-lr0.7
bpe4000-tokens1000-warmup2400-lr0.85 bpe4000-tokens1000-warmup3200-lr1.0
bpe4000-tokens1000-warmup4000-lr1.0`, the recipe first, then
batches of 2,000, 1,000 and 500 tokens (a step budget that grows as the batch shrinks, fitted to
the clock) at the recipe's rate, at lower ones, and with longer warmups that keep one peak.
The sixth changes today's recipe once more, on the same machine: `--thirty-minutes
bpe4000-tokens1000-warmup3200-lr1.3 bpe4000-tokens1000-warmup3200-lr1.0-p0.0
bpe4000-tokens1000-warmup3200-lr1.0-p0.2`, a higher peak rate, no dropout and more dropout.
The seventh confirms on the CPU what `experiments/gpu_recipe_search.py` found on a GPU at the steps of
30 CPU minutes: `--thirty-minutes bpe4000-tokens1000-warmup3200-lr1.0-L2`, two layers instead of
three.
Beam scores use the α of the run's recipe (recorded as "alpha").
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
RUNS = ROOT / "runs" / "search"
RESULTS = ROOT / "annotated_transformer" / "results" / "multi30k_search.json"

# The recipe as the first stage found it, whatever `--config multi30k` is today: word vocabularies,
# 3 layers, batches of 4,000 tokens, warmup 400, the §5.3 rate × 0.5, no cooldown. Every candidate
# of every stage starts from it and changes a few options.
WORD_RECIPE = [
    "--config",
    "multi30k",
    "--layers",
    "3",
    "--vocab",
    "word",
    "--max-tokens",
    "4000",
    "--warmup",
    "400",
    "--lr-factor",
    "0.5",
    "--cooldown",
    "0",
    "--checkpoint-every",
    "100",
]

# The first stage: §5.3's schedule, equal steps (`--steps`), one core each; "word-p0.1" is the start.
COMMON = [*WORD_RECIPE, "--average-last", "10", "--max-minutes", "600"]
CANDIDATES = {
    "word-p0.1": ["--dropout", "0.1"],
    "word-p0.3": ["--dropout", "0.3"],
    "word-p0.0": ["--dropout", "0.0"],
    "word-p0.1-lr1": ["--dropout", "0.1", "--lr-factor", "1.0"],
    "bpe-p0.1": ["--vocab", "bpe", "--vocab-size", "8000", "--dropout", "0.1"],
}

# The second stage: whole 30-minute runs on two cores (§5.3's schedule to step 3,000, stopped by the
# clock, against cooldowns). A cooldown (chapter 7, a share of --max-steps) needs a last step that 30
# minutes reach on the machine that runs the search: "cooldown-0.36" was sized for an AMD EPYC, the
# others for a faster Intel Xeon with AVX-512 (each run's steps and minutes: multi30k_search.json,
# "30-minute runs"). "bpe4000-cooldown-0.32" has the options of today's `multi30k` recipe: chapter 14
# trains it in book/runs/multi30k, which can be copied to runs/search/30min-bpe4000-cooldown-0.32 to
# be scored here.
THIRTY_MINUTE_BASE = [*WORD_RECIPE, "--average-last", "3", "--max-minutes", "30"]
BPE4000_RECIPE = ["--vocab", "bpe", "--vocab-size", "4000", "--max-steps", "2650", "--cooldown", "0.32"]
# The winner of the fifth stage (today's recipe), which the sixth changes; a flag given again later
# overrides it.
WARMUP3200_RECIPE = [*BPE4000_RECIPE, "--max-tokens", "1000", "--max-steps", "10600", "--warmup", "3200",
                     "--lr-factor", "1.0"]
THIRTY_MINUTE_CANDIDATES = {
    "paper-schedule": ["--max-steps", "3000"],
    "cooldown-0.36": ["--max-steps", "1650", "--cooldown", "0.3636"],
    "cooldown-0.32": ["--max-steps", "2500", "--cooldown", "0.32"],
    "bpe-cooldown-0.32": [
        "--vocab",
        "bpe",
        "--vocab-size",
        "8000",
        "--max-steps",
        "2250",
        "--cooldown",
        "0.32",
    ],
    # Half the pieces: a cheaper step, so more steps fit in the half hour.
    "bpe4000-cooldown-0.32": BPE4000_RECIPE,
    # The same options, trained since a run fits its cooldown to the clock (chapter 10's ClockFit):
    # on a CPU too slow for its steps in 30 minutes the cooldown ends when the time does, where
    # "bpe4000-cooldown-0.32" (trained before it, on the AMD EPYC) was stopped by the clock early in
    # its cooldown (its steps: multi30k_search.json).
    "bpe4000-clock-fitted": BPE4000_RECIPE,
    # Half the batch, the same rate per step: twice the optimizer steps in the same time.
    "bpe4000-tokens2000": [*BPE4000_RECIPE, "--max-tokens", "2000", "--max-steps", "5300"],
    # The recipe's options again, trained since dropout draws 16-bit masks (chapter 4's Dropout).
    "bpe4000-16-bit-masks": BPE4000_RECIPE,
    # A quarter of the batch, the same rate per step: four times the optimizer steps.
    "bpe4000-tokens1000": [*BPE4000_RECIPE, "--max-tokens", "1000", "--max-steps", "10600"],
    # Smaller batches are noisier: the same batches at a lower rate (√2 lower).
    "bpe4000-tokens1000-lr0.35": [*BPE4000_RECIPE, "--max-tokens", "1000", "--max-steps", "10600",
                                  "--lr-factor", "0.35"],
    "bpe4000-tokens1000-lr0.25": [*BPE4000_RECIPE, "--max-tokens", "1000", "--max-steps", "10600",
                                  "--lr-factor", "0.25"],
    # In §5.3's schedule the warmup sets the peak and the factor the rate after it: the peak of
    # "lr0.35" with the later rates of "bpe4000-tokens1000".
    "bpe4000-tokens1000-warmup800": [*BPE4000_RECIPE, "--max-tokens", "1000", "--max-steps", "10600",
                                     "--warmup", "800"],
    # The same peak again, and later rates √2 higher still: a rate almost flat until the cooldown.
    "bpe4000-tokens1000-warmup1600-lr0.7": [*BPE4000_RECIPE, "--max-tokens", "1000", "--max-steps",
                                            "10600", "--warmup", "1600", "--lr-factor", "0.7"],
    # Further along the line of the last two: the same peak again, reached later, and a rate after
    # it flatter still until the cooldown.
    "bpe4000-tokens1000-warmup2400-lr0.85": [*BPE4000_RECIPE, "--max-tokens", "1000", "--max-steps",
                                             "10600", "--warmup", "2400", "--lr-factor", "0.85"],
    # The same peak reached at the start of the cooldown: a rate that rises, then falls to zero.
    "bpe4000-tokens1000-warmup3200-lr1.0": WARMUP3200_RECIPE,
    # §5.3's schedule as the paper gives it (warmup 4,000, factor 1.0): a peak a tenth lower, which
    # a two-core EPYC reaches only as its cooldown begins.
    "bpe4000-tokens1000-warmup4000-lr1.0": [*BPE4000_RECIPE, "--max-tokens", "1000", "--max-steps",
                                            "10600", "--warmup", "4000", "--lr-factor", "1.0"],
    # The shape of "warmup3200-lr1.0" with a peak 30% higher: the warmup-4,000 run, whose ramp
    # ended lower (the cooldown began before its peak), scored below it, so the peak may still be low.
    "bpe4000-tokens1000-warmup3200-lr1.3": [*WARMUP3200_RECIPE, "--lr-factor", "1.3"],
    # The recipe without dropout: a cheaper step (benchmarks/dropout_share.py measures by how much),
    # and the first stage found dropout 0 level with 0.1 at its shorter runs.
    "bpe4000-tokens1000-warmup3200-lr1.0-p0.0": [*WARMUP3200_RECIPE, "--dropout", "0.0"],
    # Without dropout the run scored two points lower, and the recipe's run already fits its
    # training sentences far better than the validation ones (multi30k_search.json, "cross-entropy"):
    # more dropout, as the paper's big model has (Table 3).
    "bpe4000-tokens1000-warmup3200-lr1.0-p0.2": [*WARMUP3200_RECIPE, "--dropout", "0.2"],
    # The seventh stage: the best of experiments/gpu_recipe_search.py (changes to the recipe at the steps
    # their 30 CPU minutes reach, on a GPU): two layers instead of three.
    "bpe4000-tokens1000-warmup3200-lr1.0-L2": [*WARMUP3200_RECIPE, "--layers", "2"],
    # Half of that batch again, at a rate between the two best at 1,000 tokens.
    "bpe4000-tokens500-lr0.3": [*BPE4000_RECIPE, "--max-tokens", "500", "--max-steps", "21200",
                                "--lr-factor", "0.3"],
}

# The third stage: changes to "cooldown-0.32" (2,500 steps, the last 32% cooling down), compared at
# equal steps like the first stage (one core each, two side by side, no clock).
COOLDOWN_BASE = [
    *WORD_RECIPE,
    "--max-steps",
    "2500",
    "--cooldown",
    "0.32",
    "--average-last",
    "3",
    "--max-minutes",
    "600",
]
COOLDOWN_CANDIDATES = {
    "cooldown-p0.2": ["--dropout", "0.2"],
    "cooldown-bpe": ["--vocab", "bpe", "--vocab-size", "8000"],
}


def train(name: str, steps: int, data_dir: str | None) -> subprocess.Popen:
    return start_training(RUNS / name, [*COMMON, *CANDIDATES[name], "--max-steps", str(steps)], data_dir)


def log_path(run_dir: Path) -> Path:
    return run_dir.parent / f"{run_dir.name}.log"


def start_training(run_dir: Path, options: list[str], data_dir: str | None, threads: int | None = 1):
    """`train` in a child process, with `threads` threads (None: torch's default), logged beside the run."""
    command = [
        sys.executable,
        "-m",
        "annotated_transformer",
        "train",
        "--run-dir",
        str(run_dir),
        *options,
        "--quiet",
    ]
    if data_dir:
        command += ["--data-dir", data_dir, "--no-download"]
    log = open(log_path(run_dir), "a")
    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)


def train_missing(names: list[str], steps: int, parallel: int, data_dir: str | None) -> None:
    RUNS.mkdir(parents=True, exist_ok=True)
    waiting, running = list(names), []
    while waiting or running:
        while waiting and len(running) < parallel:
            name = waiting.pop(0)
            print(f"training {name}", flush=True)
            running.append((name, train(name, steps, data_dir)))
        time.sleep(10)
        for name, process in list(running):
            if process.poll() is not None:
                running.remove((name, process))
                print(f"{name}: exit status {process.returncode}", flush=True)


def multi30k_pairs(split: str, data_dir: str | None) -> list:
    """The Multi30k pairs of `split` (from `data_dir`, else the cache)."""
    from annotated_transformer.data import corpus

    return corpus("multi30k", split, **({"root": data_dir} if data_dir else {}))


def validation_pairs(data_dir: str | None) -> list:
    """The 1,014 Multi30k validation pairs."""
    return multi30k_pairs("val", data_dir)


def score(name: str, data_dir: str | None) -> dict:
    from annotated_transformer.checkpoints import read_checkpoint
    from annotated_transformer.translator import evaluate_bleu

    run_dir = RUNS / name
    val = validation_pairs(data_dir)
    paths = RunDirectory(run_dir).checkpoint_paths()
    history = read_history(run_dir)
    result = {
        "options": CANDIDATES[name],
        "steps": read_checkpoint(paths[-1])["state"]["step"],
        "minutes_one_core": round(history[-1]["minutes"], 1),
    }
    last = averaged_translator(run_dir, paths, 1)
    result["val_greedy_last"] = round(evaluate_bleu(last, val, beam_size=1).bleu, 2)
    for k in (5, 10):
        translator = averaged_translator(run_dir, paths, k)
        result[f"val_beam4_average_{k}"] = round(evaluate_bleu(translator, val, beam_size=4).bleu, 2)
    return result


def averaged_translator(run_dir: Path, paths: list[Path], k: int):
    """A translator with the average of the last `k` checkpoints of `paths` (the last one: k = 1)."""
    import torch

    from annotated_transformer.decoding import average_checkpoints
    from annotated_transformer.translator import Translator

    translator = Translator.load(paths[-1], RunDirectory(run_dir).vocab)
    if k > 1:
        with torch.no_grad():
            translator.model.load_state_dict(average_checkpoints(paths[-k:]))
    return translator


def score_at_step(step: int, data_dir: str | None) -> dict[str, float]:
    """Greedy validation BLEU of every candidate's checkpoint at `step`, where it has one."""
    from annotated_transformer.translator import Translator, evaluate_bleu

    val = validation_pairs(data_dir)
    scores = {}
    for name in CANDIDATES:
        path = RUNS / name / "checkpoints" / f"step_{step:08d}.pt"
        if path.exists():
            translator = Translator.load(path, RunDirectory(RUNS / name).vocab)
            scores[name] = round(evaluate_bleu(translator, val, beam_size=1).bleu, 2)
            print(f"{name} at step {step}: val BLEU {scores[name]} (greedy)", flush=True)
    return scores


def thirty_minute_run(name: str, data_dir: str | None) -> dict:
    """Train the `multi30k` recipe with candidate `name`'s options for its 30 minutes (both cores, no
    other run beside it; a finished run is only scored), then score it on the validation set."""
    run_dir, options = RUNS / f"30min-{name}", THIRTY_MINUTE_CANDIDATES[name]
    if not RunDirectory(run_dir).model.exists():
        print(f"training {name} for 30 minutes", flush=True)
        RUNS.mkdir(parents=True, exist_ok=True)
        if start_training(run_dir, [*THIRTY_MINUTE_BASE, *options], data_dir, threads=None).wait():
            raise SystemExit(f"{name}: training failed, see {log_path(run_dir)}")
    return score_cooldown_run(run_dir, options, data_dir)


def cooldown_stage(names: list[str], data_dir: str | None) -> dict:
    """Train (unless finished) the cooldown candidates `names`, one core each, side by side, and
    score each on the validation set."""
    RUNS.mkdir(parents=True, exist_ok=True)
    running = {
        name: start_training(RUNS / name, [*COOLDOWN_BASE, *COOLDOWN_CANDIDATES[name]], data_dir)
        for name in names
        if not RunDirectory(RUNS / name).model.exists()
    }
    print(f"training {', '.join(running) or 'nothing'}", flush=True)
    for name, process in running.items():
        if process.wait():
            raise SystemExit(f"{name}: training failed, see {log_path(RUNS / name)}")
    return {name: score_cooldown_run(RUNS / name, COOLDOWN_CANDIDATES[name], data_dir) for name in names}


def score_cooldown_run(run_dir: Path, options: list[str], data_dir: str | None) -> dict:
    """Validation BLEU of a finished run: greedy and beam 4 (with the α of the run's recipe) from its
    last checkpoint, beam 4 from the average of its last 3."""
    from annotated_transformer.checkpoints import read_checkpoint
    from annotated_transformer.translator import evaluate_bleu

    val = validation_pairs(data_dir)
    files = RunDirectory(run_dir)
    paths, history = files.checkpoint_paths(), read_history(run_dir)
    hardware = json.loads(files.hardware.read_text())
    last, averaged = averaged_translator(run_dir, paths, 1), averaged_translator(run_dir, paths, 3)
    result = {
        "options": options,
        "cpu": hardware["cpu"],
        "cpu_kernels": hardware.get("cpu_kernels"),  # machines of one name differ (AVX2, AVX-512)
        "steps": read_checkpoint(paths[-1])["state"]["step"],
        "minutes": round(history[-1]["minutes"], 1),
        "val_greedy_last": round(evaluate_bleu(last, val, beam_size=1).bleu, 2),
        "val_beam4_last": round(evaluate_bleu(last, val, beam_size=4).bleu, 2),
        "val_beam4_average_3": round(evaluate_bleu(averaged, val, beam_size=4).bleu, 2),
        "alpha": last.alpha,  # the length penalty of the beam scores: the run's recipe's
    }
    print(f"{run_dir.name}: {result}", flush=True)
    return result


def tune_decoding(run_dir: Path, data_dir: str | None) -> tuple[dict, dict]:
    """Validation BLEU of a finished run for each number of checkpoints averaged and each length
    penalty α (beam 4): how the recipe's `average_last` and `alpha` are chosen. Also counts, for each
    setting, the run-on translations (`is_run_on`), which a high α lets through."""
    from annotated_transformer.translator import evaluate_bleu

    val = validation_pairs(data_dir)
    paths = RunDirectory(run_dir).checkpoint_paths()
    scores, run_ons = {}, {}
    for k in (k for k in (1, 3, 5, 10) if k <= len(paths)):  # a run keeps its last `average_last`
        translator = averaged_translator(run_dir, paths, k)
        for alpha in (0.6, 1.0, 1.4, 1.8):
            translator.alpha = alpha
            setting = f"average {k}, alpha {alpha}"
            evaluation = evaluate_bleu(translator, val, beam_size=4)
            scores[setting] = round(evaluation.bleu, 2)
            run_ons[setting] = sum(map(is_run_on, evaluation.hypotheses, evaluation.references))
            print(f"{setting}: val BLEU {scores[setting]}, {run_ons[setting]} run-on", flush=True)
    return scores, run_ons


def is_run_on(hypothesis: str, reference: str) -> bool:
    """A translation that runs on: more than twice its reference's words, and 5 more."""
    return len(hypothesis.split()) > 2 * len(reference.split()) + 5


def cross_entropy(run_dir: Path, data_dir: str | None, sentences: int = 1014) -> dict[str, float]:
    """Cross-entropy (nats per target token, no label smoothing, no dropout) of a finished run's
    model.pt on its first `sentences` training pairs and on the validation pairs: how much better
    it fits the sentences it learned from than new ones."""
    from annotated_transformer.batching import make_batch
    from annotated_transformer.tokenization import encode_pairs
    from annotated_transformer.training import evaluate
    from annotated_transformer.translator import Translator

    translator = Translator.load(run_dir)
    train = multi30k_pairs("train", data_dir)[:sentences]
    result = {}
    for split, pairs in (("train", train), ("val", validation_pairs(data_dir))):
        encoded = encode_pairs(pairs, translator.vocabs)
        pairs = list(zip(encoded.source, encoded.target, strict=True))
        batches = [make_batch(pairs[i : i + 64]) for i in range(0, len(pairs), 64)]
        result[split] = round(evaluate(translator.model, batches)["nll"], 3)
    print(f"{run_dir.name}: cross-entropy {result}", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", nargs="*", default=list(CANDIDATES), help="candidates (default: all)")
    parser.add_argument("--steps", type=int, default=1900, help="optimizer steps of every run")
    parser.add_argument("--parallel", type=int, default=2, help="runs side by side, one thread each")
    parser.add_argument("--score-only", action="store_true")
    parser.add_argument("--data-dir", default=None, help="a folder with the Multi30k files")
    parser.add_argument("--at-step", type=int, metavar="STEP", help="only score every candidate at STEP")
    parser.add_argument(
        "--tune-decoding",
        type=Path,
        metavar="RUN_DIR",
        help="only score a finished run's decoding choices (checkpoints averaged, alpha)",
    )
    parser.add_argument(
        "--cross-entropy",
        type=Path,
        nargs="+",
        metavar="RUN_DIR",
        help="only measure finished runs' cross-entropy on training and validation sentences",
    )
    parser.add_argument(
        "--thirty-minutes",
        nargs="+",
        choices=list(THIRTY_MINUTE_CANDIDATES),
        metavar="NAME",
        help=f"train (unless finished) and score whole 30-minute runs: {', '.join(THIRTY_MINUTE_CANDIDATES)}",
    )
    parser.add_argument(
        "--cooldown-stage",
        nargs="+",
        choices=list(COOLDOWN_CANDIDATES),
        metavar="NAME",
        help=f"train (unless finished) and score changes to the cooldown recipe at equal steps: "
        f"{', '.join(COOLDOWN_CANDIDATES)}",
    )
    args = parser.parse_args()
    if args.cooldown_stage:
        update_results("cooldown stage", cooldown_stage(args.cooldown_stage, args.data_dir), merge=True)
        return 0
    if args.tune_decoding:
        scores, run_ons = tune_decoding(args.tune_decoding, args.data_dir)
        update_results(f"decoding {args.tune_decoding.resolve().name}", scores)
        update_results(f"run-on translations {args.tune_decoding.resolve().name}", run_ons)
        return 0
    if args.cross_entropy:
        for run_dir in args.cross_entropy:
            update_results("cross-entropy", {run_dir.resolve().name: cross_entropy(run_dir, args.data_dir)},
                           merge=True)
        return 0
    if args.thirty_minutes:
        for name in args.thirty_minutes:
            result = thirty_minute_run(name, args.data_dir)  # keyed by machine too: minutes are its own
            update_results("30-minute runs", {f"{name} on {machine(result)}": result}, merge=True)
        return 0
    if args.at_step:
        update_results(f"greedy at step {args.at_step}", score_at_step(args.at_step, args.data_dir))
        return 0
    unknown = sorted(set(args.runs) - set(CANDIDATES))
    if unknown:
        parser.error(f"unknown candidates {unknown}; the candidates are {list(CANDIDATES)}")
    if not args.score_only:
        train_missing(args.runs, args.steps, args.parallel, args.data_dir)
    for name in args.runs:
        if not RunDirectory(RUNS / name).history.exists():
            print(f"{name}: no finished run to score", file=sys.stderr)
            continue
        update_results("finished runs", {name: score(name, args.data_dir)}, merge=True)
    return 0


def machine(result: dict) -> str:
    """"AMD EPYC (AVX2)": the CPU's name and, where recorded, its float32 kernel family."""
    return f"{result['cpu']} ({result['cpu_kernels']})" if result.get("cpu_kernels") else result["cpu"]


def update_results(key: str, value: dict, merge: bool = False) -> None:
    """Store `value` under `key` in the results file (merged into what is there with `merge`)."""
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[key] = {**results.get(key, {}), **value} if merge else value
    atomic_write_text(RESULTS, json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
