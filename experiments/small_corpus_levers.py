"""Regularization for a small corpus against the `multi30k` recipe (chapter 14), on the validation set.

Each lever is the recipe with one setting changed (BPE-dropout, chapter 13; R-Drop, chapter 8).
This script trains the recipe itself too, unchanged (the *control*), for the same seeds, with the
same command, the same number of threads and side by side with the levers, and compares each
lever's run with the control's run of the same seed: paired, by the appendix's rule
(`annotated_transformer.helpers.verdicts.judge_against_control`: Student's paired t-test over the
seeds at the 5% level), or, with one seed, as single runs with the CPU recipe's seed noise
(`companions/seed_noise.py`: the recipe's seeds and these runs, pooled). The recipe's committed
runs (`multi30k_seeds.json`) are never the comparison: they were trained on two threads by other
code, and on torch 2.13 one thread and two already differ bit for bit in a backward pass, so their
seed is not this script's seed.

    python experiments/small_corpus_levers.py --data-dir DIR               # everything, 3 to 5 hours
    python experiments/small_corpus_levers.py --data-dir DIR --score-only  # the summary again
    python experiments/small_corpus_levers.py --tiny      # the whole path on the built-in corpus, a minute
    python experiments/small_corpus_levers.py --data-dir DIR --matched     # matched compute, about 2.5 hours

The first command does it all: it measures the step costs (`--step-cost`, done anyway when the
result file holds none for this machine), then trains the control and the levers (default
bpe-dropout, rdrop, rdrop-alpha5; `bpe-dropout-0.05` on request) for `--seeds` (default 0 1 2),
in runs/levers-controlled (`--runs-dir`), two runs side by side (`--parallel`) at one thread each
(`--threads`), then scores them and writes the summary.

The budget is the recipe's: 30 minutes on two cores. `--step-cost` measures the seconds per step of
the control and of each lever the way the recipe trains (one process, `--cost-threads` 2, one
after the other, on a quiet machine), and a lever's steps are what its step buys in those 30
minutes (`budget_steps`): the control's steps if its step costs within 5% of the control's,
else int(30·60 / (control's seconds per step · the lever's cost ratio)); no run trains more than
the recipe's 9,224 steps, and if the control's own step is so dear that 30 minutes buy fewer, the
control trains those (the summary says so). Every run then trains that fixed number of steps, with
no clock, so that how busy the machine was changes its speed but not its result.

`--matched` asks another question, at matched compute: each lever gets the minutes the control's
own steps take, not the recipe's half hour. The control trains the recipe's steps and a dearer lever
int(the control's steps / its cost ratio), the ratio taken from the runs themselves: the seconds per
step of the first command's runs (multi30k_levers.json), when they were trained on this machine with
the same --threads and --parallel, else measured at `--threads` in one process (`--cost-threads`
defaults to `--threads` there; `--step-cost` measures anyway); its runs go to runs/levers-matched and
its summary to multi30k_levers_matched.json, with each arm's minutes from the runs themselves, so that
a reader sees how closely they matched.

Every run records the commit and the command it was made from (`RUN.made_by.json` beside its run
directory, written when it starts): a run reused from other code shows "commit": null, or another.

It takes a while: 3 seeds × (control + BPE-dropout + R-Drop at two α) = 12 runs, each of up to the
recipe's 30-minute budget of steps (measured at two threads; a run at one thread beside another
takes longer), two at a time on two cores: about 3 to 5 hours, plus about 5 minutes of step costs
and the scoring. R-Drop's α is chosen on the validation set among the runs made (the higher mean
over the seeds both α trained). The step costs are kept with the runs (step_costs.json in
--runs-dir), so that the command run again after an interruption resumes each run directory to
the same plan (one trained to other steps or threads is refused); a finished run is only scored
(its score is kept beside it). The test set is scored only for a lever that the rule finds better
than the control on validation, and for the control's runs beside it; with --matched, for every
lever and the control (that question was fixed before its runs). The summary goes to
annotated_transformer/results/multi30k_levers.json, and the appendix and book/results.md take their
numbers from it; the tiny mode writes to its own temporary folder, never there.
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

import torch

from annotated_transformer import Translator, corpus, evaluate_bleu, get_recipe, train_translation
from annotated_transformer.acceleration import configure_process
from annotated_transformer.cli.recipe_options import option_name
from annotated_transformer.companions.hardware import describe_hardware
from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.companions.seed_noise import cpu_recipe_noise
from annotated_transformer.helpers import verdicts
from annotated_transformer.helpers.files import atomic_write_text
from annotated_transformer.runs.run_files import read_history

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "annotated_transformer" / "results"
OUT = RESULTS / "multi30k_levers.json"
MATCHED_OUT = RESULTS / "multi30k_levers_matched.json"
BUDGET_MINUTES = 30.0  # the recipe's limit on two cores (chapter 14)
SAME_COST = 1.05  # a lever within 5% of the control's step cost trains the control's steps
CONTROL = "control"  # the recipe unchanged, trained by this script beside the levers

# name: (recipe settings, what the literature used). Chapter 8's R-Drop averages the two passes'
# losses where Liang et al. add them, so its alpha is half theirs.
LEVERS = {
    "bpe-dropout": ({"bpe_dropout": 0.1}, "p = 0.1, Provilkov et al. (2020)'s value for most language pairs"),
    "bpe-dropout-0.05": ({"bpe_dropout": 0.05}, "p = 0.05, half Provilkov et al.'s value (optional)"),
    "rdrop": ({"rdrop_alpha": 2.5},
              "alpha = 2.5: Liang et al. (2021)'s 5 for IWSLT translation, on chapter 8's scale"),
    "rdrop-alpha5": ({"rdrop_alpha": 5.0},
                     "alpha = 5: twice Liang et al.'s value for IWSLT translation, on chapter 8's scale"),
}
DEFAULT_LEVERS = ("bpe-dropout", "rdrop", "rdrop-alpha5")
RDROP_CANDIDATES = ("rdrop", "rdrop-alpha5")  # R-Drop's alphas, one chosen on validation
COST_LEVERS = ("bpe-dropout", "rdrop")  # the levers whose step cost is measured (`cost_name`)

# The tiny mode: the built-in corpus with a small model, a few steps, and a short validation set
# decoded greedily, so that the whole path runs in seconds. Its budget is TINY_BUDGET_SHARE times
# the control's measured time for its steps, so that a dearer step trains fewer steps there too.
TINY_SETTINGS = {"max_steps": 8, "d_model": 64, "d_ff": 128, "vocab_size": 400, "max_tokens": 400,
                 "checkpoint_every": 2, "average_last": 2}
TINY_COST_STEPS, COST_STEPS = (4, 16), (50, 250)
TINY_BUDGET_SHARE = 1.25
TINY_VAL_SENTENCES = 40


class NotComparable(ValueError):
    """Two runs that the summary will not pair: other hardware, threads or steps."""


def cost_name(name: str) -> str:
    """The lever whose measured step cost is `name`'s: R-Drop's does not depend on its alpha, nor
    BPE-dropout's on its p (a batch holds the same tokens); the control is its own."""
    return next((lever for lever in COST_LEVERS if name.startswith(lever)), name)


def budget_steps(max_steps: int, control_seconds: float, ratio: float = 1.0,
                 budget_minutes: float = BUDGET_MINUTES) -> int:
    """The steps a run trains in the recipe's budget: `ratio` is its measured step cost over the
    control's (1.0 for the control itself), `control_seconds` the control's measured seconds per step
    on this machine. The control trains the recipe's `max_steps`, or fewer when `budget_minutes` at
    `control_seconds` buy fewer; a lever within 5% of the control's cost trains the control's steps;
    a dearer one int(budget / (control_seconds · ratio)), never more than the control's.

    >>> budget_steps(9224, 0.18, 2.06)    # int(30·60 / (0.18 · 2.06))
    4854
    >>> budget_steps(9224, 0.18, 1.04), budget_steps(9224, 0.25)   # within 5%; the control's 7,200
    (9224, 7200)
    """
    if not (control_seconds > 0 and ratio > 0 and budget_minutes > 0):
        raise ValueError(f"step costs and the budget must be above 0, got {control_seconds} s, "
                         f"ratio {ratio}, {budget_minutes} minutes")
    # 1e-9: a budget made of the control's own steps (--matched) buys them all, not one fewer by rounding
    control = min(max_steps, int(budget_minutes * 60 / control_seconds + 1e-9))
    if ratio <= SAME_COST:
        return control
    return min(control, int(budget_minutes * 60 / (control_seconds * ratio) + 1e-9))


def base_recipe(args: argparse.Namespace):
    """The recipe every run starts from: `multi30k`, or the tiny mode's small built-in one."""
    return get_recipe(args.config, **(TINY_SETTINGS if args.tiny else {}))


def budget_minutes(args: argparse.Namespace, step_costs: dict) -> float:
    """The minutes each run's steps are planned to fill: the recipe's half hour; with --matched, the
    control's own minutes for the recipe's steps (so that a dearer lever trains as long as the
    control); the tiny mode's share of the control's time."""
    if args.matched:
        return base_recipe(args).train.max_steps * step_costs[CONTROL]["seconds_per_step"] / 60
    if not args.tiny:
        return BUDGET_MINUTES
    control = step_costs[CONTROL]["seconds_per_step"]
    return TINY_BUDGET_SHARE * base_recipe(args).train.max_steps * control / 60


def planned_steps(names: list[str], args: argparse.Namespace, step_costs: dict) -> dict[str, int]:
    """Each run's steps (`budget_steps`) from the step costs measured on this machine."""
    max_steps, control = base_recipe(args).train.max_steps, step_costs[CONTROL]["seconds_per_step"]
    budget = budget_minutes(args, step_costs)
    ratios = {name: 1.0 if name == CONTROL else step_costs[cost_name(name)]["ratio"] for name in names}
    return {name: budget_steps(max_steps, control, ratios[name], budget) for name in names}


def machine(hardware: dict) -> dict:
    """The machine of a hardware description, without what a process chooses (threads, processes)."""
    return {k: v for k, v in hardware.items() if k not in ("torch_threads", "processes")}


def measure_step_cost(args: argparse.Namespace) -> tuple[dict, dict]:
    """Seconds per step of the control and of each lever in COST_LEVERS, as the recipe trains (one
    process, `--cost-threads` threads), one after another: two lengths each, the difference per step,
    so that start-up and vocabulary building cancel. Returns the costs and how they were measured."""
    short, long = TINY_COST_STEPS if args.tiny else COST_STEPS
    options = {"root": args.data_dir} if args.data_dir else {}
    base, threads = base_recipe(args), torch.get_num_threads()
    torch.set_num_threads(args.cost_threads)
    seconds = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in (CONTROL, *COST_LEVERS):
                settings = LEVERS[name][0] if name in LEVERS else {}
                recipe = base.replace(**settings, max_minutes=None, checkpoint_every=10_000)
                times = []
                for steps in (short, long):
                    run = train_translation(recipe.replace(max_steps=steps), Path(tmp) / f"{name}-{steps}",
                                            corpus_options=options, progress=False)
                    times.append(run.minutes * 60)
                # The tiny mode's runs last a second or two, where a busy machine's noise can exceed the
                # difference: it takes the longer run's whole time per step, which is always above 0.
                seconds[name] = times[1] / long if args.tiny else (times[1] - times[0]) / (long - short)
                print(f"step cost of {name}: {seconds[name]:.4f} s/step", flush=True)
                if seconds[name] <= 0:
                    raise SystemExit(f"the step cost of {name} measured {seconds[name]:.4f} s: measure again "
                                     "(--step-cost) on a quieter machine")
        measurement = {"threads": args.cost_threads, "steps": [short, long],
                       "hardware": describe_hardware(torch.device("cpu"))}
    finally:
        torch.set_num_threads(threads)
    costs = {name: {"seconds_per_step": round(value, 4), "ratio": round(value / seconds[CONTROL], 3)}
             for name, value in seconds.items()}
    return costs, measurement


def step_costs_of_runs(summary: dict) -> dict:
    """Seconds per step of the control and of each lever in COST_LEVERS from a result file's runs
    themselves (each run's minutes over its steps, the mean over its seeds), and each one's ratio to
    the control's: the cost as runs side by side at one thread pay it, which one process alone does
    not see (there a dearer step shares the machine with nobody)."""
    arms = {CONTROL: summary["control"]["runs"],
            **{name: lever["runs"] for name, lever in summary["levers"].items() if name in COST_LEVERS}}
    seconds = {name: statistics.fmean(run["seconds_per_step"] for run in runs) for name, runs in arms.items()}
    return {name: {"seconds_per_step": round(value, 4), "ratio": round(value / seconds[CONTROL], 3)}
            for name, value in seconds.items()}


def runs_trained_here(summary: dict, args: argparse.Namespace, here: dict) -> bool:
    """Whether `summary`'s runs were trained the way this command trains: this machine, --threads a
    run, --parallel side by side."""
    return (bool(summary.get("control", {}).get("runs")) and summary.get("threads") == args.threads
            and summary.get("parallel") == args.parallel and machine(summary.get("hardware") or {}) == here)


def run_dir_of(name: str, seed: int, args: argparse.Namespace) -> Path:
    return args.runs_dir / f"{name}-seed{seed}"


def recipe_options(settings: dict) -> list[str]:
    """`train`'s options that set `settings` (recipe fields by name)."""
    return [part for key, value in settings.items() for part in (option_name(key), str(value))]


def train_command(name: str, seed: int, steps: int, args: argparse.Namespace) -> list[str]:
    """The one command every run trains with, the control's and each lever's alike."""
    settings = {**(TINY_SETTINGS if args.tiny else {}), **(LEVERS[name][0] if name in LEVERS else {})}
    settings.pop("max_steps", None)  # set below, from the step costs
    command = [sys.executable, "-m", "annotated_transformer", "train", "--config", args.config,
               "--run-dir", str(run_dir_of(name, seed, args)), "--seed", str(seed), "--max-steps", str(steps),
               "--max-minutes", "inf", *recipe_options(settings), "--quiet"]
    if args.data_dir:
        command += ["--data-dir", str(args.data_dir), "--no-download"]
    return command


def made_by_path(run_dir: Path) -> Path:
    return run_dir.parent / f"{run_dir.name}.made_by.json"


def commit_of_checkout() -> str | None:
    """The commit of the checkout the runs are trained from (with "+changes" when its tracked files
    differ from it), or None outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def record_made_by(run_dir: Path, command: list[str]) -> None:
    """What a run is made from, kept beside it: the commit and the command, one entry per start (a
    resumed run adds one, so that a run trained by two commits shows both)."""
    path = made_by_path(run_dir)
    starts = json.loads(path.read_text(encoding="utf-8"))["starts"] if path.exists() else []
    starts.append({"commit": commit_of_checkout(), "command": " ".join(command[1:]),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    atomic_write_text(path, json.dumps({"starts": starts}, indent=1) + "\n")


def made_by(run_dir: Path) -> dict:
    """A run's commit and command as the summary gives them: its first start's, with every other
    commit it was resumed from; None for a run this script did not start (reused from elsewhere)."""
    path = made_by_path(run_dir)
    if not path.exists():
        return {"commit": None, "command": None}
    starts = json.loads(path.read_text(encoding="utf-8"))["starts"]
    commits = sorted({start["commit"] for start in starts if start["commit"] != starts[0]["commit"]})
    return {"commit": starts[0]["commit"], "command": starts[0]["command"],
            **({"also_commits": commits} if commits else {})}


def existing_run_problem(run_dir: Path, steps: int, threads: int) -> str | None:
    """Why a run directory that is there cannot be resumed as this plan's run, or None."""
    files = RunDirectory(run_dir)
    if files.recipe.exists():
        saved = json.loads(files.recipe.read_text(encoding="utf-8")).get("max_steps")
        if saved != steps and files.work():
            return f"{run_dir} holds a run of {saved} steps, and the plan is {steps}"
    if files.hardware.exists():
        saved = json.loads(files.hardware.read_text(encoding="utf-8")).get("torch_threads")
        if saved != threads:
            return f"{run_dir} was trained with {saved} threads, and --threads is {threads}"
    return None


def finished(run_dir: Path, steps: int) -> bool:
    if not RunDirectory(run_dir).model.exists():
        return False
    try:
        return read_history(run_dir)[-1]["step"] == steps
    except (ValueError, IndexError):
        return False


def train_all(names: list[str], args: argparse.Namespace, steps: dict[str, int]) -> None:
    """Train each name for each seed, seed by seed (the control beside a lever), `--parallel` at a
    time, each in its own process with `--threads` threads."""
    waiting = [(name, seed) for seed in args.seeds for name in names
               if not finished(run_dir_of(name, seed, args), steps[name])]
    for name, seed in waiting:
        problem = existing_run_problem(run_dir_of(name, seed, args), steps[name], args.threads)
        if problem:
            raise SystemExit(f"{problem}: remove it, or train in another --runs-dir")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    running = []
    while waiting or running:
        while waiting and len(running) < args.parallel:
            name, seed = waiting.pop(0)
            run_dir = run_dir_of(name, seed, args)
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            log = open(run_dir.parent / f"{run_dir.name}.log", "a")
            print(f"training {run_dir.name}: {steps[name]:,} steps, {args.threads} thread(s)", flush=True)
            command = train_command(name, seed, steps[name], args)
            record_made_by(run_dir, command)
            process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
            running.append((run_dir.name, process, log))
        time.sleep(0.5 if args.tiny else 5)
        for entry in list(running):
            label, process, log = entry
            if process.poll() is not None:
                running.remove(entry)
                log.close()
                print(f"{label}: exit status {process.returncode}", flush=True)
                if process.returncode:
                    raise SystemExit(f"{label} failed: see {args.runs_dir / label}.log")


SPLITS = {"val": "validation", "test": "test"}  # the test split is test_2016_flickr (data.corpus)


def scoring(args: argparse.Namespace, split: str = "val") -> str:
    if args.tiny:
        return f"greedy, the first {TINY_VAL_SENTENCES} {SPLITS[split]} sentences (tiny)"
    return f"beam 4, the recipe's alpha, the average of its last checkpoints, the {SPLITS[split]} set"


def score(run_dir: Path, args: argparse.Namespace, split: str = "val") -> float:
    """BLEU of a run's averaged model on `split` (the recipe's beam and alpha; tiny: greedy, on the
    first TINY_VAL_SENTENCES), kept beside the run so that the summary scores a model once."""
    model = RunDirectory(run_dir).model.stat()
    scored_with = scoring(args, split)
    key = {"model_bytes": model.st_size, "model_mtime_ns": model.st_mtime_ns, "scored_with": scored_with}
    cache = run_dir.parent / f"{run_dir.name}.{split}.json"
    if cache.exists():
        kept = json.loads(cache.read_text(encoding="utf-8"))
        if {k: kept.get(k) for k in key} == key:
            return kept[split]
    options = {"root": args.data_dir} if args.data_dir else {}
    pairs = corpus(base_recipe(args).corpus, split, **options)
    translator = Translator.load(run_dir, beam_size=1) if args.tiny else Translator.load(run_dir)
    bleu = round(evaluate_bleu(translator, pairs[:TINY_VAL_SENTENCES] if args.tiny else pairs).bleu, 2)
    atomic_write_text(cache, json.dumps({**key, split: bleu}, indent=1) + "\n")
    return bleu


def score_test(levers: dict, control: dict, args: argparse.Namespace) -> list[str]:
    """The test set, scored only for the levers the rule finds better than the control on
    validation (chosen there, never here), and for the control's runs beside them; with --matched,
    for every lever and the control, since that question was fixed before the runs (the lever and
    its setting were chosen on validation by the first runs) and the test set chooses nothing. Each
    run gains "test", each scored side a "test_mean". Returns the names scored."""
    better = [name for name, lever in levers.items() if args.matched or lever["verdict"] == "better"]
    if not better:
        return []
    for side in [control, *(levers[name] for name in better)]:
        for run in side["runs"]:
            run["test"] = score(args.runs_dir / run["run"], args, "test")
        side["test_mean"] = round(statistics.fmean(run["test"] for run in side["runs"]), 2)
    return better


def judge_test(levers: dict, control: dict) -> None:
    """Each lever whose runs and the control's were scored on the test set gains "test_verdict":
    the same paired rule on the test scores of the seeds both have (a test-set figure carries its
    verdict)."""
    control_test = {run["seed"]: run["test"] for run in control["runs"] if "test" in run}
    for lever in levers.values():
        scored = {run["seed"]: run["test"] for run in lever["runs"] if "test" in run}
        if scored and control_test:
            try:
                verdict = verdicts.judge_against_control(scored, control_test)
            except ValueError as error:
                lever["test_verdict"] = f"not judged: {error}"
                continue
            lever.update(test_verdict=verdict.word, test_margin=round(verdict.margin, 2),
                         test_threshold=round(verdict.threshold, 2), test_p=round(verdict.p, 4))


def rejudge(summary: dict, args: argparse.Namespace) -> dict:
    """The summary's verdicts judged again from the scores it records (no run directory needed):
    after the rule changes, its words are the rule's of today."""
    control_runs = summary["control"]["runs"]
    runs = {name: lever["runs"] for name, lever in summary["levers"].items()}
    noise = single_seed_noise(args, control_runs, runs)
    for run in [*control_runs, *(run for rows in runs.values() for run in rows)]:
        run.setdefault("commit", None)  # a run the script recorded no commit for shows it
        run.setdefault("command", None)
    for lever in summary["levers"].values():
        for key in ("margin", "threshold", "p", "dof", "rule", "n"):
            lever.pop(key, None)
        lever.update(lever_verdict(pair_runs(lever["runs"], control_runs), control_runs, noise))
    judge_test(summary["levers"], summary["control"])
    summary["minutes_by_arm"] = minutes_by_arm(control_runs, summary["levers"])
    summary["rdrop_alpha"] = choose_rdrop(summary["levers"])
    summary["rejudged_with"] = "python experiments/small_corpus_levers.py " + " ".join(args.argv)
    return summary


def read_runs(name: str, args: argparse.Namespace) -> list[dict]:
    """The finished runs of `name` in --runs-dir, by seed: the seed, steps and settings from the run's
    own recipe.json, minutes from its history, hardware (threads among it) from its hardware.json."""
    settings = LEVERS[name][0] if name in LEVERS else {key: 0.0 for key in ("bpe_dropout", "rdrop_alpha")}
    rows = []
    for run_dir in sorted(args.runs_dir.glob(f"{name}-seed*")):
        files = RunDirectory(run_dir)
        if not run_dir.is_dir() or not files.model.exists() or run_dir.name.rsplit("-seed", 1)[0] != name:
            continue
        recipe = json.loads(files.recipe.read_text(encoding="utf-8"))
        wrong = {key: recipe.get(key) for key, value in settings.items() if recipe.get(key) != value}
        if wrong:
            raise NotComparable(f"{run_dir} is not a run of {name}: it has {wrong}")
        last = read_history(run_dir)[-1]
        hardware = json.loads(files.hardware.read_text(encoding="utf-8"))
        rows.append({"seed": recipe["seed"], "steps": last["step"], "minutes": round(last["minutes"], 2),
                     "seconds_per_step": round(last["minutes"] * 60 / last["step"], 4),
                     "val": score(run_dir, args), "threads": hardware.get("torch_threads"),
                     "hardware": hardware, "run": run_dir.name, **made_by(run_dir)})
    return sorted(rows, key=lambda row: row["seed"])


def check_same_machine(run: dict, other: dict) -> None:
    """Refuse (NotComparable, one line) two runs trained on other hardware or threads."""
    keys = sorted(set(run["hardware"]) | set(other["hardware"]))
    differ = [f"{key} {run['hardware'].get(key)!r} vs {other['hardware'].get(key)!r}"
              for key in keys if run["hardware"].get(key) != other["hardware"].get(key)]
    if run.get("threads") != other.get("threads"):
        differ.append(f"threads {run.get('threads')!r} vs {other.get('threads')!r}")
    if differ:
        raise NotComparable(f"will not pair {run['run']} with {other['run']}: trained on other hardware or "
                            f"threads ({'; '.join(differ)}); train both with this script, on one machine, "
                            "with the same --threads")


def pair_runs(lever_runs: list[dict], control_runs: list[dict]) -> list[tuple[dict, dict]]:
    """Each lever run with the control's run of the same seed (seeds the control lacks are left
    out), checked to be of the same machine and threads (`check_same_machine`)."""
    control = {run["seed"]: run for run in control_runs}
    pairs = []
    for run in sorted(lever_runs, key=lambda row: row["seed"]):
        if run["seed"] in control:
            check_same_machine(run, control[run["seed"]])
            pairs.append((run, control[run["seed"]]))
    return pairs


def lever_verdict(pairs: list[tuple[dict, dict]], control_runs: list[dict],
                  noise: verdicts.Noise | None = None) -> dict:
    """The appendix's rule on a lever's runs against the control's of the same seeds
    (`verdicts.judge_against_control`: the paired t-test over 2 or more seeds; with one, single runs
    with `noise`, the seed noise of their scale, else the control's own seeds'), or why it cannot
    judge them."""
    seeds = [lever["seed"] for lever, _ in pairs]
    differences = [round(lever["val"] - control["val"], 2) for lever, control in pairs]
    out = {"seeds": seeds, "differences": differences}
    try:
        verdict = verdicts.judge_against_control({lever["seed"]: lever["val"] for lever, _ in pairs},
                                                 {run["seed"]: run["val"] for run in control_runs},
                                                 noise=noise, scale=noise.scale if noise else None)
    except ValueError as error:
        return {**out, "verdict": f"not judged: {error}"}
    return {**out, "verdict": verdict.word, "margin": round(verdict.margin, 2),
            "threshold": round(verdict.threshold, 2), "p": round(verdict.p, 4), "dof": verdict.dof,
            "rule": verdict.rule, "n": list(verdict.n)}


def single_seed_noise(args: argparse.Namespace, control_runs: list[dict], runs: dict[str, list[dict]]):
    """The noise a lever of one seed is judged with: the CPU recipe's (companions/seed_noise.py: the
    recipe's seeds and these runs, pooled), or in the tiny mode these runs' alone; None when no row
    has two seeds."""
    try:
        if args.tiny:
            rows = [[run["val"] for run in group] for group in (control_runs, *runs.values())]
            return verdicts.noise_of(rows, scale="the tiny mode's runs")
        return cpu_recipe_noise({"control": {"runs": control_runs},
                                 "levers": {name: {"runs": rows} for name, rows in runs.items()}})
    except ValueError:
        return None


def choose_rdrop(levers: dict) -> dict | None:
    """R-Drop's alpha, chosen on validation: of RDROP_CANDIDATES, the highest mean validation BLEU over
    the seeds every candidate trained."""
    candidates = [name for name in RDROP_CANDIDATES if name in levers]
    if not candidates:
        return None
    seeds = sorted(set.intersection(*({row["seed"] for row in levers[name]["runs"]} for name in candidates)))
    if not seeds:
        return {"candidates": candidates, "seeds": [], "chosen": None,
                "rule": "no seed that every alpha trained"}
    means = {name: round(statistics.fmean(row["val"] for row in levers[name]["runs"] if row["seed"] in seeds),
                         2) for name in candidates}
    chosen = max(candidates, key=lambda name: means[name])
    return {"mean_val": means, "seeds": seeds, "chosen": chosen,
            "settings": levers[chosen]["settings"], "verdict": levers[chosen]["verdict"],
            "rule": "the highest mean validation BLEU over the seeds every alpha trained; chosen on the "
                    "runs it is judged on, so its verdict is the better of two, a little in its favour"}


def passes_over_the_data(args: argparse.Namespace, steps: dict[str, int]) -> dict:
    """How many times each run's steps pass over the training data: BPE-dropout's pieces are more
    than plain BPE's, so batches of the same tokens hold fewer sentences (its first epoch's sample)."""
    from annotated_transformer.companions.corpus_cache import training_batches
    from annotated_transformer.companions.vocabulary_files import read_vocabularies
    from annotated_transformer.tokenization import encode_pairs

    options = {"root": args.data_dir} if args.data_dir else {}
    recipe = base_recipe(args)
    pairs = corpus(recipe.corpus, "train", **options)
    vocab_file = next(iter(sorted(args.runs_dir.glob("*-seed*/vocab.json"))))  # every run's: the same
    vocabs = read_vocabularies(vocab_file)
    encoded = encode_pairs(pairs, vocabs)
    out = {}
    for name, count in steps.items():
        dropout = LEVERS[name][0].get("bpe_dropout", 0.0) if name in LEVERS else 0.0
        batches = len(training_batches(pairs, encoded, vocabs, dropout, recipe.max_tokens, seed=0)(0))
        out[name] = {"batches_per_epoch": batches, "steps": count, "epochs": round(count / batches, 1)}
    return out


def minutes_by_arm(control_runs: list[dict], levers: dict) -> dict:
    """Each arm's mean minutes and seconds per step over its runs, from the runs' own histories."""
    arms = {CONTROL: control_runs, **{name: lever["runs"] for name, lever in levers.items()}}
    return {name: {"minutes": round(statistics.fmean(run["minutes"] for run in runs), 2),
                   "seconds_per_step": round(statistics.fmean(run["seconds_per_step"] for run in runs), 4)}
            for name, runs in arms.items() if runs}


def one_value(rows: list[dict], key: str, name: str):
    values = {row[key] for row in rows}
    if len(values) > 1:
        raise NotComparable(f"the runs of {name} differ in {key} ({sorted(values)}): "
                            "a treatment trains one way on every seed")
    return values.pop()


def summarize(args: argparse.Namespace, step_costs: dict, measurement: dict) -> dict:
    control_runs = read_runs(CONTROL, args)
    for run in control_runs[1:]:
        check_same_machine(run, control_runs[0])
    control_vals = [run["val"] for run in control_runs]
    plan = planned_steps([CONTROL, *LEVERS], args, step_costs) if CONTROL in step_costs else {}
    notes = []
    max_steps = base_recipe(args).train.max_steps
    if plan and plan[CONTROL] < max_steps:
        notes.append(f"the control's measured step ({step_costs[CONTROL]['seconds_per_step']} s) buys "
                     f"{plan[CONTROL]:,} steps in {budget_minutes(args, step_costs):.4g} minutes, fewer "
                     f"than the recipe's {max_steps:,}: the control trains {plan[CONTROL]:,}")
    control = {"settings": {}, "runs": control_runs}
    if control_runs:
        control["steps"] = one_value(control_runs, "steps", CONTROL)
        control["val_mean"] = round(statistics.fmean(control_vals), 2)
        control["val_std"] = round(statistics.stdev(control_vals), 2) if len(control_vals) > 1 else None
    levers = {}
    lever_runs = {name: runs for name in LEVERS if (runs := read_runs(name, args))}
    noise = single_seed_noise(args, control_runs, lever_runs)
    for name, (settings, source) in LEVERS.items():
        runs = lever_runs.get(name)
        if not runs:
            continue
        pairs = pair_runs(runs, control_runs)
        control_val = {run["seed"]: run["val"] for _, run in pairs}
        for run in runs:
            if run["seed"] in control_val:
                run["control_val"] = control_val[run["seed"]]
                run["difference"] = round(run["val"] - control_val[run["seed"]], 2)
        cost = step_costs.get(cost_name(name), {})
        levers[name] = {"settings": settings, "options": " ".join(recipe_options(settings)),
                        "chosen_as": source, "steps": one_value(runs, "steps", name),
                        "planned_steps": plan.get(name),
                        "seconds_per_step": cost.get("seconds_per_step"), "ratio": cost.get("ratio"),
                        "runs": runs, **lever_verdict(pairs, control_runs, noise)}
    test_scored = score_test(levers, control, args) if control_runs else []
    judge_test(levers, control)
    for name, lever in levers.items():
        if lever["planned_steps"] is not None and lever["steps"] != lever["planned_steps"]:
            notes.append(f"{name} trained {lever['steps']:,} steps; today's step costs plan "
                         f"{lever['planned_steps']:,}")
    trained = {CONTROL: control["steps"]} if control_runs else {}
    trained.update((name, lever["steps"]) for name, lever in levers.items())
    first = control_runs[0] if control_runs else None
    return {
        "recipe": args.config,
        "what": "validation BLEU of the recipe with one lever, against the control: the recipe unchanged, "
                "trained by this script for the same seeds, with the same command and threads, side by side "
                "with the levers, on the same machine" + (", each lever given the control's minutes"
                                                          if args.matched else ""),
        "matched": args.matched,
        "minutes_by_arm": minutes_by_arm(control_runs, levers),
        "scored_with": scoring(args),
        "test_scored": {"levers": test_scored,
                        "rule": "the test set is scored only for a lever the rule finds better than the "
                                "control on validation, and for the control's runs beside it"
                                + ("; at matched compute, every lever and the control: the question was "
                                   "fixed before the runs" if args.matched else "")},
        "budget_minutes": budget_minutes(args, step_costs) if CONTROL in step_costs else None,
        "steps_rule": "budget_steps: the recipe's max_steps (fewer if the control's measured step buys fewer "
                      "in the budget); a lever within 5% of the control's step cost trains the control's "
                      "steps, a dearer one int(budget seconds / (control's s/step · its cost ratio))",
        "threads": first["threads"] if first else None,
        "parallel": args.parallel,
        "hardware": first["hardware"] if first else None,
        "step_costs": step_costs,
        "step_cost_measurement": measurement,
        "planned_steps": plan,
        "notes": notes,
        "passes_over_the_data": passes_over_the_data(args, trained) if trained else {},
        "command": "python experiments/small_corpus_levers.py " + " ".join(args.argv),
        "control": control,
        "levers": levers,
        "rdrop_alpha": choose_rdrop(levers),
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levers", nargs="+", default=list(DEFAULT_LEVERS), choices=list(LEVERS),
                        metavar="LEVER",
                        help=f"levers to train beside the control (default {' '.join(DEFAULT_LEVERS)}; "
                             f"choose from {', '.join(LEVERS)})")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                        help="seeds of the control and of every lever (default 0 1 2)")
    parser.add_argument("--step-cost", action="store_true",
                        help="measure the step costs again (done anyway when the result file holds none "
                             "of this machine)")
    parser.add_argument("--cost-threads", type=int, default=None,
                        help="threads of the step-cost measurement: the recipe's budget is on two cores "
                             "(default 2; with --matched, --threads: the runs' own way)")
    parser.add_argument("--score-only", action="store_true", help="train nothing; score what is there")
    parser.add_argument("--rejudge", action="store_true",
                        help="train and score nothing: judge the result file's recorded scores again by "
                             "today's rule (no run directory needed)")
    parser.add_argument("--data-dir", type=Path, help="a folder with the Multi30k files (default: the cache)")
    parser.add_argument("--runs-dir", type=Path,
                        help="where the runs go (default runs/levers-controlled; tiny: a new temporary "
                             "folder)")
    parser.add_argument("--threads", type=int, default=1, help="threads of every run (default 1)")
    parser.add_argument("--parallel", type=int, default=2, help="runs side by side (default 2)")
    parser.add_argument("--out", type=Path,
                        help=f"the result file (default {OUT.relative_to(ROOT)}; tiny: levers.json in "
                             "--runs-dir)")
    parser.add_argument("--tiny", action="store_true",
                        help="the built-in corpus, a tiny model, seconds (a smoke test)")
    parser.add_argument("--matched", action="store_true",
                        help="matched compute: each lever trains the control's minutes (runs/levers-matched, "
                             "multi30k_levers_matched.json)")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    args.config = "builtin" if args.tiny else "multi30k"
    if args.cost_threads is None:
        args.cost_threads = args.threads if args.matched else 2
    if args.tiny and args.out is not None and args.out.resolve() in (OUT.resolve(), MATCHED_OUT.resolve()):
        parser.error(f"the tiny mode never writes {OUT.relative_to(ROOT)}: give another --out")
    for option in ("threads", "parallel", "cost_threads"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be at least 1")
    if args.runs_dir is None:
        args.runs_dir = (Path(tempfile.mkdtemp(prefix="levers-tiny-")) if args.tiny
                         else ROOT / "runs" / ("levers-matched" if args.matched else "levers-controlled"))
    default_out = MATCHED_OUT if args.matched else OUT
    args.out = args.out or (args.runs_dir / "levers.json" if args.tiny else default_out)
    args.seeds = sorted(set(args.seeds))
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    if args.rejudge:
        result = rejudge(json.loads(args.out.read_text(encoding="utf-8")), args)
        atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
        print(f"rejudged: {args.out}")
        return result
    configure_process()  # the process-wide settings of a program that trains (chapter 9)
    torch.set_num_threads(args.threads)  # scoring, too, as many threads as a run
    # The step costs the runs were planned with are kept with the runs, so that a run interrupted
    # and started again trains to the same plan; else those of an earlier result file.
    kept = args.runs_dir / "step_costs.json"
    source = next((path for path in (kept, args.out) if path.exists()), None)
    earlier = json.loads(source.read_text(encoding="utf-8")) if source else {}
    step_costs, measurement = earlier.get("step_costs", {}), earlier.get("step_cost_measurement") or {}
    here = machine(describe_hardware(torch.device("cpu")))
    measured_here = CONTROL in step_costs and machine(measurement.get("hardware", {})) == here
    command = "python experiments/small_corpus_levers.py " + " ".join(args.argv)
    unmatched = json.loads(OUT.read_text(encoding="utf-8")) if OUT.exists() and not args.tiny else {}
    if (args.matched and not args.step_cost and not kept.exists() and not args.score_only
            and runs_trained_here(unmatched, args, here)):
        # At matched compute the plan takes its costs from the runs themselves: the first levers'
        # runs, trained on this machine side by side as these will be.
        step_costs = step_costs_of_runs(unmatched)
        measurement = {"from_runs_of": OUT.name, "threads": args.threads, "parallel": args.parallel,
                       "hardware": unmatched["hardware"], "command": command}
        kept.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(kept, json.dumps({"step_costs": step_costs, "step_cost_measurement": measurement},
                                           indent=1) + "\n")
    elif args.step_cost or (not args.score_only and not measured_here):
        step_costs, measurement = measure_step_cost(args)
        measurement["command"] = command
        kept.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(kept, json.dumps({"step_costs": step_costs, "step_cost_measurement": measurement},
                                           indent=1) + "\n")
    if not args.score_only:
        steps = planned_steps([CONTROL, *args.levers], args, step_costs)
        print("steps: " + ", ".join(f"{name} {count:,}" for name, count in steps.items()), flush=True)
        train_all([CONTROL, *args.levers], args, steps)
    try:
        result = summarize(args, step_costs, measurement)
    except NotComparable as error:
        raise SystemExit(f"small_corpus_levers: {error}") from None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    print(f"control: steps {result['control'].get('steps')}, val "
          f"{[run['val'] for run in result['control']['runs']]}")
    for name, lever in result["levers"].items():
        print(f"{name}: steps {lever['steps']}, seeds {lever['seeds']}, differences {lever['differences']}: "
              f"{lever['verdict']}" + (f" (margin {lever['margin']:+.2f}, threshold {lever['threshold']:.2f})"
                                       if "margin" in lever else ""))
    if result["rdrop_alpha"]:
        print(f"R-Drop's alpha chosen on validation: {result['rdrop_alpha']['chosen']}")
    for note in result["notes"]:
        print(f"note: {note}")
    print(f"summary: {args.out}")
    return result


if __name__ == "__main__":
    main()
