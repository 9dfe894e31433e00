"""The `multi30k-gpu` recipe at the GPU's compiled speed, and its noise measured with three seeds.

The registered recipe was chosen by `gpu_finale.py search` for the ~31 passes over the data that
five minutes bought eleven candidates sharing one GPU, eager; alone it trained for 84, and compiled
a run takes 1.55 times the steps. This stage chooses again, for what a run alone and compiled does:

    python experiments/gpu_fast_recipe.py search --data-dir DIR [--candidates p0.3 bpe8000]
        # candidates side by side, each for the same steps; the choice and its decoding, on validation
    python experiments/gpu_fast_recipe.py seeds --data-dir DIR
        # the choice with three seeds side by side, each scored on validation and test; mean, spread
    python experiments/gpu_fast_recipe.py search --tiny; ... seeds --tiny    # the built-in corpus (CI)

**search.** Each candidate (`CANDIDATES`, changes of `multi30k-gpu`) trains compiled for `--steps`
optimizer steps (default: what a compiled run alone takes in `--minutes`, at the speed `bench.json`
measured, less its compilation), by steps rather than by the clock, so that sharing the GPU changes
how long they take and not what they learn; the cooldown ends the schedule at the last step. Each is
scored on the validation set (beam 4, the average of its last 5 checkpoints, α 1.4); the best is the
choice, and for it alone the number of checkpoints averaged (`AVERAGED`, over a wider span than
§6.1's 5) and the length penalty (`ALPHAS`, beyond 1.4) are chosen on the validation set too. No
candidate meets the test set. A file that exists keeps its candidates: a later command adds others
(`--candidates`) and chooses again among all.

**seeds.** The search's choice, with its decoding, trained with seeds 0, 1 and 2 side by side for the
same steps (seed 0 is the search's own run where its run directory is still there); each scored on
validation and on test_2016_flickr; the mean and the (sample) standard deviation of each in
fast_seeds.json, the run-to-run noise of this recipe on this GPU.

On a GPU lent for minutes, the candidates go three at a time (`--candidates`, CONTRIBUTING's plan of
the stages); the regularizers for a small corpus (BPE-dropout, R-Drop, attention and feed-forward
dropout) are the third such command.
"""

import argparse
import dataclasses
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import gpu_finale
import torch
from gpu_finale import command_line

from annotated_transformer.acceleration import configure_process
from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.companions.vocabulary_files import read_vocabularies
from annotated_transformer.recipes import Recipe, get_recipe
from annotated_transformer.runs.translation import train_translation
from annotated_transformer.translator import Translator, Validator

BASE = "multi30k-gpu"
CANDIDATES: dict[str, dict] = {  # the passes are about 1.7 times the registered run's: more regularization
    "recipe": {},
    "p0.3": {"dropout": 0.3},
    "p0.4": {"dropout": 0.4},
    "ls0.2": {"label_smoothing": 0.2},
    "bpe8000": {"vocab_size": 8000},
    "p0.3-bpe8000": {"dropout": 0.3, "vocab_size": 8000},
    # regularization for a small corpus (the appendix's CPU runs could not reach the data's limit)
    "bpe-dropout": {"bpe_dropout": 0.1},
    "rdrop": {"rdrop_alpha": 2.5},  # Liang et al.'s 5 on chapter 8's scale; a step costs about twice
    "attn-ffn-p0.1": {"attention_dropout": 0.1, "ffn_dropout": 0.1},
}
SCORED_WITH = {"averaged": 5, "alpha": 1.4}  # how a candidate is scored: the registered decoding
AVERAGED = (1, 5, 10)  # checkpoints averaged, tried for the choice on validation
ALPHAS = (1.0, 1.4, 1.8, 2.2)  # length penalties likewise
SEEDS = (0, 1, 2)
TINY = {"corpus": "builtin", "vocab_size": 600, "n_layers": 1, "d_model": 32, "d_ff": 64,
        "max_tokens": 600, "warmup": 10, "checkpoint_every": 5, "compile": False}
SEARCH_FILE, SEEDS_FILE = "fast_search.json", "fast_seeds.json"


def default_steps(minutes: float) -> int:
    """The steps a compiled run of the recipe takes alone in `minutes`, at the speed bench.json
    measured for it, less its compilation: to the nearest 100."""
    bench = json.loads((gpu_finale.OUT / "bench.json").read_text(encoding="utf-8"))
    row = next(r for r in bench["recipe"] if r["recipe"] == BASE and r["compiled"])
    return round(row["steps_per_s"] * (60 * minutes - row["compile_s"]) / 100) * 100


def recipe_of(name: str, args: argparse.Namespace, seed: int = 0) -> Recipe:
    """Candidate `name` as it trains here: compiled, `args.steps` steps, 10 checkpoints kept; with
    --tiny, a small model on the built-in corpus (its changes of dropout and smoothing only)."""
    changes = CANDIDATES[name]
    common = {"max_steps": args.steps, "average_last": max(AVERAGED), "compile": True, "seed": seed}
    if args.tiny:
        common.update(TINY)
        changes = {k: v for k, v in changes.items() if k in ("dropout", "label_smoothing")}
    # by steps, not by the clock (get_recipe takes None for "unchanged", so not through it)
    return dataclasses.replace(get_recipe(BASE, **{**common, **changes}), max_minutes=None)


def train_one(args: argparse.Namespace) -> int:
    """Child process: train one candidate (or seed) and score it on validation as SCORED_WITH says."""
    recipe = recipe_of(args.name, args, args.seed)
    run_dir = args.run_root / run_name(args.name, args.seed)
    val_pairs = gpu_finale.pairs(recipe, "val", args)
    configure_process(args.device)  # the process-wide settings of a program that trains (chapter 9)
    run = train_translation(recipe, run_dir, corpus_options=gpu_finale.corpus_options(args),
                            device=args.device, progress=False,
                            validator=Validator(val_pairs, every=args.validate_every))
    result = {"name": args.name, "seed": args.seed, "changes": CANDIDATES[args.name], "steps": run.steps,
              "minutes": round(run.minutes, 3), "steps_per_s": round(run.steps / (60 * run.minutes), 2),
              "val_beam": round(decoded(run_dir, recipe, SCORED_WITH, val_pairs, args), 2)}
    gpu_finale.write_json(run_dir / "candidate.json", result)
    return 0


def run_name(name: str, seed: int) -> str:
    return name if seed == 0 else f"{name}-seed{seed}"


def decoded(run_dir: Path, recipe: Recipe, decoding: dict, sentence_pairs, args) -> float:
    """BLEU (beam 4) of the run's last `decoding["averaged"]` checkpoints (as many as it kept)."""
    kept = len(RunDirectory(run_dir).checkpoint_paths())
    model = gpu_finale.model_of(run_dir, min(decoding["averaged"], kept))
    translator = Translator(model, read_vocabularies(RunDirectory(run_dir).vocab), args.device,
                            beam_size=recipe.beam_size, alpha=decoding["alpha"])
    return gpu_finale.quiet_bleu(translator, sentence_pairs, recipe.beam_size).bleu


def train_side_by_side(args: argparse.Namespace, runs: list[tuple[str, int]]) -> dict[tuple[str, int], dict]:
    """Each (candidate, seed) in its own process, all at once; each one's result (or its exit status).
    A run this run root has already trained for `args.steps` is not trained again: the search's
    run of its choice is the seeds stage's seed 0, where both run on one machine."""
    args.run_root.mkdir(parents=True, exist_ok=True)
    done = {}
    for name, seed in runs:
        path = args.run_root / run_name(name, seed) / "candidate.json"
        if path.exists() and json.loads(path.read_text())["steps"] == args.steps:
            done[name, seed] = json.loads(path.read_text())
    runs = [run for run in runs if run not in done]
    options = ["--run-root", str(args.run_root), "--device", args.device, "--steps", str(args.steps),
               "--validate-every", str(args.validate_every)]
    options += ["--data-dir", args.data_dir] if args.data_dir else []
    options += ["--limit", str(args.limit)] if args.limit else []
    options += ["--tiny"] if args.tiny else []
    processes = {
        (name, seed): gpu_finale.spawn(
            [sys.executable, __file__, "train-one", name, "--seed", str(seed), *options],
            args.run_root / f"{run_name(name, seed)}.log")
        for name, seed in runs
    }
    deadline = time.monotonic() + 60 * args.wait_minutes
    while any(p.poll() is None for p in processes.values()) and time.monotonic() < deadline:
        time.sleep(1)
    results = dict(done)
    for (name, seed), process in processes.items():
        if process.poll() is None:
            process.kill()
            process.wait()
        path = args.run_root / run_name(name, seed) / "candidate.json"
        results[name, seed] = (json.loads(path.read_text()) if path.exists()
                               else {"name": name, "seed": seed, "exit_status": process.returncode})
        print(f"{run_name(name, seed)}: {results[name, seed].get('val_beam', 'not finished')}", flush=True)
    return results


def header(args: argparse.Namespace, stage: str) -> dict:
    hardware = {"device": args.device, "torch": torch.__version__}
    if torch.cuda.is_available() and args.device.startswith("cuda"):
        hardware.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda)
    return {"date": datetime.date.today().isoformat(), "hardware": hardware, "steps": args.steps,
            "command": command_line("experiments/gpu_fast_recipe.py", [stage, *args.argv])}


def search(args: argparse.Namespace) -> dict:
    """Train the candidates this command names; choose among every candidate the file holds."""
    path = args.out / SEARCH_FILE
    report = json.loads(path.read_text()) if path.exists() else {"candidates": []}
    if report["candidates"] and report["steps"] != args.steps:
        raise SystemExit(f"{path} holds candidates of {report['steps']} steps: pass --steps "
                         f"{report['steps']} to add others, or another --out")
    started, head = time.monotonic(), header(args, "search")
    trained = train_side_by_side(args, [(name, 0) for name in args.candidates])
    kept = [c for c in report["candidates"] if c["name"] not in args.candidates]
    added = [{**result, "command": head["command"]} for result in trained.values()]
    report = {**report, **head, "candidates": kept + added}
    gpu_finale.write_json(path, report)
    scored = [c for c in report["candidates"] if "val_beam" in c]
    if not scored:
        raise SystemExit(f"no candidate finished: see the logs in {args.run_root}")
    best = max(scored, key=lambda c: c["val_beam"])
    recipe, run_dir = recipe_of(best["name"], args), args.run_root / best["name"]
    if run_dir.exists():  # its decoding, chosen on validation (only where its checkpoints are here)
        val_pairs = gpu_finale.pairs(recipe, "val", args)
        settings = [{"averaged": averaged, "alpha": alpha} for averaged in AVERAGED for alpha in ALPHAS]
        report["decoding"] = [
            {**decoding, "val_beam": round(decoded(run_dir, recipe, decoding, val_pairs, args), 2)}
            for decoding in settings
        ]
        decoding = max(report["decoding"], key=lambda row: row["val_beam"])  # of equals, the first
        report["choice"] = {"candidate": best["name"], "averaged": decoding["averaged"],
                            "alpha": decoding["alpha"], "val_beam": decoding["val_beam"]}
    report["wall_minutes"] = round((time.monotonic() - started) / 60, 2)
    gpu_finale.write_json(path, report)
    print(f"chosen on validation: {report.get('choice', best['name'])}", flush=True)
    return report


def seeds(args: argparse.Namespace) -> dict:
    """The search's choice with every seed, side by side; each scored on val and test; mean, spread."""
    search = json.loads((args.out / SEARCH_FILE).read_text())
    if search["steps"] != args.steps:
        raise SystemExit(f"the search trained {search['steps']} steps: pass --steps {search['steps']}")
    choice = search["choice"]
    started = time.monotonic()
    trained = train_side_by_side(args, [(choice["candidate"], seed) for seed in args.seeds])
    rows = []
    for (name, seed), result in trained.items():
        row = {"seed": seed, **{k: result[k] for k in ("steps", "minutes", "steps_per_s") if k in result}}
        if "val_beam" in result:
            recipe, run_dir = recipe_of(name, args, seed), args.run_root / run_name(name, seed)
            for split in ("val", "test"):
                split_pairs = gpu_finale.pairs(recipe, split, args)
                row[split] = round(decoded(run_dir, recipe, choice, split_pairs, args), 2)
        rows.append(row)
    recipe = dataclasses.asdict(recipe_of(choice["candidate"], args))
    report = {**header(args, "seeds"), "choice": choice, "recipe": recipe, "seeds": rows,
              "wall_minutes": round((time.monotonic() - started) / 60, 2)}
    report["summary"] = {split: spread([row[split] for row in rows if split in row])
                         for split in ("val", "test")}
    gpu_finale.write_json(args.out / SEEDS_FILE, report)
    print(f"seeds: {report['summary']}", flush=True)
    return report


def spread(scores: list[float]) -> dict:
    """The mean and the sample standard deviation of the seeds' scores (None for fewer than two)."""
    return {"n": len(scores), "mean": round(statistics.mean(scores), 2) if scores else None,
            "std": round(statistics.stdev(scores), 2) if len(scores) > 1 else None}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("stage", choices=("search", "seeds", "train-one"))
    parser.add_argument("name", nargs="?", help="train-one: the candidate")
    parser.add_argument("--candidates", nargs="+", choices=list(CANDIDATES), default=None)
    parser.add_argument("--seed", type=int, default=0, help="train-one: the seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--minutes", type=float, default=5.0, help="the training a run alone would get")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default: from --minutes)")
    parser.add_argument("--wait-minutes", type=float, default=7.5, help="stop runs still training after this")
    parser.add_argument("--validate-every", type=int, default=1000, help="steps between validations")
    parser.add_argument("--data-dir", help="a folder with the Multi30k files (never downloads)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--limit", type=int, help="use the first N validation and test sentences only")
    parser.add_argument("--run-root", type=Path, default=gpu_finale.ROOT / "runs" / "gpu-fast-recipe")
    parser.add_argument("--out", type=Path, default=gpu_finale.OUT)
    parser.add_argument("--tiny", action="store_true", help="the built-in corpus, a few steps (CI)")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[2:] if argv is None else argv[1:])
    if args.steps is None:
        args.steps = 20 if args.tiny else default_steps(args.minutes)
    if args.tiny:
        args.validate_every, args.limit = min(args.validate_every, 10), args.limit or 12
    if args.candidates is None:
        args.candidates = ["recipe", "p0.3"] if args.tiny else list(CANDIDATES)
    if args.stage == "train-one" and args.name not in CANDIDATES:
        parser.error(f"train-one needs a candidate: one of {', '.join(CANDIDATES)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.stage == "train-one":
        return train_one(args)
    args.out.mkdir(parents=True, exist_ok=True)
    search(args) if args.stage == "search" else seeds(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
