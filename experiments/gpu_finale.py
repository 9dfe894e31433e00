"""The book's last chapter, on one GPU: stages that each fit one command of a few minutes, and write
small result files under annotated_transformer/results/gpu/ (package data, so that the chapter
that shows them runs wherever the package is installed; never model weights).

    python experiments/gpu_finale.py search --data-dir DIR  # candidates side by side; the choice, on test
    python experiments/gpu_finale.py final --data-dir DIR   # the search's choice trained again, alone
    python experiments/gpu_finale.py bench --data-dir DIR   # benchmarks/gpu_training.py alone on the GPU
    python experiments/gpu_finale.py bench --only missing   # just the rows bench.json lists as left out
    python experiments/gpu_finale.py tests                  # the GPU test suite (pytest -m gpu), its report
    python experiments/gpu_finale.py table3 --data-dir DIR  # Table 3 at --scale medium, side by side
    python experiments/gpu_finale.py profile --data-dir DIR # torch.profiler of the base model's bf16 step
    python experiments/gpu_finale.py ablation --data-dir DIR  # the step's levers, each alone
    python experiments/gpu_finale.py recipe --data-dir DIR  # experiments/gpu_fast_recipe.py search
    python experiments/gpu_finale.py seeds --data-dir DIR   # experiments/gpu_fast_recipe.py seeds
    python experiments/gpu_finale.py colab --part 1 --data-dir DIR  # experiments/colab_chapters.py run
    python experiments/gpu_finale.py all --data-dir DIR --copy-to "$OUT" --deadline 570
                                                      # tests and a compile warm-up beside the search,
                                                      # then bench in the time left; results tarred
    python experiments/gpu_finale.py search --tiny          # a stage on the CPU in seconds (CI)

**search.** Candidate recipes, changes of `--config multi30k-gpu`, train side by side on one GPU,
each for the same minutes (`--minutes`, the recipe's `max_minutes`: the cooldown fitted to the
clock), with the validation set scored as they train (`Validator`: cross-entropy and greedy BLEU).
Each is then scored on the validation set with beam 4 from the average of its last checkpoints.
The best is chosen on the validation set; for it alone, the number of checkpoints averaged and the
length penalty α are chosen on the validation set too; then, and only then, it is scored on
test_2016_flickr. The chosen run is the final one: its history, validation curve, test scores and
translations, and the attention weights of a few test sentences are what chapter 20 shows.

**final.** The search's choice (search.json's `chosen`) trained again, alone on the GPU, for the same
minutes, and scored as the search scores its choice (decoding chosen on validation, then test once).
It writes final.json and the files beside it, not search.json: the chapter then shows a run that had
the GPU to itself, and the search that chose its recipe.

**table3.** Chapter 18's rows of the paper's Table 3 (and with `--experiments table3 layer-norm`,
chapter 19's post-/pre-LN runs) at `--scale` (medium: a scale for one GPU), `--workers` runs side by
side, the base also with the seeds 1 and 2 (their spread is the yardstick of chapter 18's
`check_claims`), and the base run again for twice the steps: the rows are read as converged only
where the base's validation BLEU moved by less than a point with twice the training. Rows still training at
`--wait-minutes` are stopped and named in table3.json's `left_out`.

**profile.** `benchmarks/gpu_profile.py` on the base model's bf16 step, compiled and eager: where
the step's time goes (profile_compiled.json, profile_eager.json).

**ablation, recipe, seeds, colab.** Each runs one script alone on the GPU, its result file in
`--out`: `benchmarks/gpu_ablation.py` (ablation.json: each lever of the step toward a higher MFU,
alone), `experiments/gpu_fast_recipe.py search` and `seeds` (fast_search.json, fast_seeds.json: the
recipe at the compiled speed, three seeds of it) and `experiments/colab_chapters.py run` (colab.json:
the chapters as Colab runs them). `--bench-minutes` bounds the ablation as it bounds bench; `--only`,
`--candidates` and `--part` are passed on. Every stage ends by tarring the results into `--copy-to`.

Files (in `--out`): search.json (every candidate, the decoding choice, the choice), final.json (the
chosen run: recipe, hardware, speed, the BLEU table), history.json and validation.json (its curves),
translations.json (the 1,000 test sentences), attention.pt (weights of three test sentences),
bench.json (stage bench), gpu_tests.txt (stage tests), table3.json, profile_*.json, ablation.json,
fast_search.json, fast_seeds.json, colab.json.
"""

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import warnings
from pathlib import Path

import torch

# Run as a script, Python puts only this script's folder (experiments/) on the path; the command line
# of a result row is written by benchmarks/gpu_training.py, which this script shares.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from gpu_training import command_line

from annotated_transformer.acceleration import configure_process
from annotated_transformer.attention_plots import attention_maps
from annotated_transformer.checkpoints import read_checkpoint
from annotated_transformer.companions.corpus_cache import cached_encode_pairs
from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.companions.vocabulary_files import read_vocabularies
from annotated_transformer.data import corpus
from annotated_transformer.decoding import average_checkpoints
from annotated_transformer.helpers.files import atomic_save, atomic_write, atomic_write_text
from annotated_transformer.layer_norm import layer_norm_variants
from annotated_transformer.model import Transformer, TransformerConfig, count_parameters
from annotated_transformer.recipes import Recipe, get_recipe
from annotated_transformer.runs.run_files import read_history
from annotated_transformer.runs.translation import train_translation
from annotated_transformer.runs.variant_runs import run_variants
from annotated_transformer.translator import InputWarning, Translator, Validator, evaluate_bleu
from annotated_transformer.variations import SCALES, Variant, table3_variants, with_seeds

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "annotated_transformer" / "results" / "gpu"
BASE = "multi30k-gpu"
# name: the recipe fields a candidate changes, from the search's starting point: 4 layers of d_model
# 256, d_ff 1,024, dropout 0.3, batches of 6,000 tokens, warmup 2,000 at the paper's rate, BPE 4,000
# (what `multi30k-gpu` was before the search chose dropout 0.2). Then its seed (noise), depth,
# width, dropout, label smoothing, batch size and vocabulary.
START = {"dropout": 0.3, "average_last": 5, "alpha": 1.0}
CANDIDATES: dict[str, dict] = {
    "recipe": {},
    "seed1": {"seed": 1},
    "L3": {"n_layers": 3},
    "L6": {"n_layers": 6},
    "d384": {"d_model": 384, "d_ff": 1536, "n_heads": 6},
    "d512": {"d_model": 512, "d_ff": 2048, "n_heads": 8},
    "p0.2": {"dropout": 0.2},
    "p0.4": {"dropout": 0.4},
    "ls0.2": {"label_smoothing": 0.2},
    "tokens12000": {"max_tokens": 12000, "warmup": 1000, "checkpoint_every": 100},
    "bpe8000": {"vocab_size": 8000},
}
AVERAGED = (1, 3, 5)  # checkpoints averaged (1: the last alone), tried for the chosen run on val
ALPHAS = (0.6, 1.0, 1.4)  # length penalties tried likewise (§6.1 chose 0.6 on its development set)
ATTENTION_SENTENCES = 3  # test sentences whose attention weights are kept
HISTORY_POINTS = 1500  # at most this many training-step records in the committed history


# --- the candidates' recipes ------------------------------------------------------------------------


def candidate_recipe(name: str, args: argparse.Namespace) -> Recipe:
    """The recipe candidate `name` trains: `multi30k-gpu` changed by CANDIDATES[name]; with --tiny,
    a small model on the built-in corpus that trains a fixed number of steps on a CPU."""
    if args.tiny:
        tiny = dict(corpus="builtin", vocab_size=600, n_layers=1, d_model=32, d_ff=64, max_tokens=600,
                    max_steps=30, warmup=10, checkpoint_every=10, average_last=3, max_minutes=None)
        changes = {k: v for k, v in CANDIDATES[name].items() if k in ("seed", "dropout", "label_smoothing")}
        return get_recipe(BASE, **{**START, **tiny, **changes})
    return get_recipe(BASE, **{**START, **CANDIDATES[name]}, max_minutes=args.minutes)


def corpus_options(args: argparse.Namespace) -> dict:
    return {"root": args.data_dir, "download": False} if args.data_dir else {}


def pairs(recipe: Recipe, split: str, args: argparse.Namespace, limit: bool = True) -> list[tuple[str, str]]:
    """The split's sentence pairs; with --limit (a smoke test), the first ones only."""
    found = corpus(recipe.corpus, split, **corpus_options(args))
    return found[: args.limit] if args.limit and limit else found


# --- one candidate, in its own process --------------------------------------------------------------


def train_one(args: argparse.Namespace) -> int:
    """Train candidate `args.name` with the validation set watched, then score it on validation."""
    recipe = candidate_recipe(args.name, args)
    run_dir = args.run_root / args.name
    val_pairs = pairs(recipe, "val", args)
    configure_process(args.device)  # the process-wide settings of a program that trains (chapter 9)
    run = train_translation(
        recipe, run_dir, corpus_options=corpus_options(args), device=args.device, progress=False,
        validator=Validator(val_pairs, every=args.validate_every),
    )
    tokens = sum(record["tokens"] for record in run.history)
    train_pairs = pairs(recipe, "train", args, limit=False)
    train = cached_encode_pairs(train_pairs, run.vocabs, RunDirectory(run_dir).cache)
    epoch_tokens = sum(len(target) + 1 for target in train.target)  # what a Batch counts: words and EOS
    result = {
        "name": args.name,
        "changes": CANDIDATES[args.name],
        "parameters": count_parameters(run.model),
        "steps": run.steps,
        "minutes": round(run.minutes, 3),
        "steps_per_s": round(run.steps / (60 * run.minutes), 2),
        "target_tokens_per_s": round(tokens / (60 * run.minutes)),
        "epochs": round(tokens / epoch_tokens, 1),
        "fitted_last_step": run.fitted_last_step,
    }
    translator = Translator(run.model, run.vocabs, args.device, recipe.beam_size, recipe.alpha)
    result["val_beam"] = round(quiet_bleu(translator, val_pairs, recipe.beam_size).bleu, 2)
    atomic_write_text(run_dir / "candidate.json", json.dumps(result, indent=1) + "\n")
    return 0


def quiet_bleu(translator: Translator, sentence_pairs, beam_size: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InputWarning)
        return evaluate_bleu(translator, sentence_pairs, beam_size=beam_size)


# --- the search: candidates side by side, the choice on val, then test once -------------------------


def spawn(argv: list[str], log_path: Path, threads: int = 1, session: bool = False) -> subprocess.Popen:
    # Inductor compiles its kernels in a pool of processes, as many as the cores: two at most here,
    # so that a compilation beside the search does not take the candidates' cores.
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1",
           "TORCHINDUCTOR_COMPILE_THREADS": str(threads), "RAYON_NUM_THREADS": str(threads)}
    with open(log_path, "w") as log:  # the child keeps its own copy of the file
        return subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=session)  # a session: stopped with its children


def common_options(args: argparse.Namespace) -> list[str]:
    options = ["--run-root", str(args.run_root), "--device", args.device, "--minutes", str(args.minutes),
               "--validate-every", str(args.validate_every)]
    options += ["--data-dir", args.data_dir] if args.data_dir else []
    options += ["--limit", str(args.limit)] if args.limit else []
    return options + (["--tiny"] if args.tiny else [])


def train_candidates(args: argparse.Namespace) -> dict[str, int | None]:
    """Every candidate in its own process, all at once; each one's exit status (None: stopped at the
    deadline)."""
    args.run_root.mkdir(parents=True, exist_ok=True)
    processes = {
        name: spawn([sys.executable, __file__, "train-one", name, *common_options(args)],
                    args.run_root / f"{name}.log")
        for name in args.candidates
    }
    deadline = time.monotonic() + 60 * args.wait_minutes
    while any(p.poll() is None for p in processes.values()) and time.monotonic() < deadline:
        time.sleep(2)
    status = {}
    for name, process in processes.items():
        status[name] = process.poll()
        if status[name] is None:
            process.kill()
            process.wait()
        print(f"{name}: exit status {status[name]}", flush=True)
    return status


def candidate_results(args: argparse.Namespace, status: dict) -> dict[str, dict]:
    results = {}
    for name in args.candidates:
        run_dir = args.run_root / name
        path = run_dir / "candidate.json"
        result = {"name": name, "changes": CANDIDATES[name]}
        if path.exists():
            result = json.loads(path.read_text())
        validation = RunDirectory(run_dir).validation
        result["validation"] = json.loads(validation.read_text()) if validation.exists() else []
        result["exit_status"] = status.get(name)
        results[name] = result
    return results


def model_of(run_dir: Path, averaged: int) -> Transformer:
    """The run's model, its last `averaged` checkpoints averaged (1: the last checkpoint)."""
    paths = RunDirectory(run_dir).checkpoint_paths()[-averaged:]
    if len(paths) < averaged:
        raise ValueError(f"{run_dir} keeps {len(paths)} checkpoints, fewer than {averaged}")
    last = read_checkpoint(paths[-1])
    model = Transformer(TransformerConfig(**last["config"]))
    model.load_state_dict(average_checkpoints(paths) if averaged > 1 else last["state"]["model"])
    return model


def tune_decoding(run_dir: Path, recipe: Recipe, val_pairs, args) -> list[dict]:
    """Validation BLEU (beam 4) for each number of checkpoints averaged and each α."""
    vocabs, rows = read_vocabularies(RunDirectory(run_dir).vocab), []
    # a run the clock stopped early may keep fewer
    kept = len(RunDirectory(run_dir).checkpoint_paths())
    for averaged in (k for k in AVERAGED if k <= min(recipe.average_last, kept)):
        model = model_of(run_dir, averaged)
        for alpha in ALPHAS:
            translator = Translator(model, vocabs, args.device, beam_size=recipe.beam_size, alpha=alpha)
            score = quiet_bleu(translator, val_pairs, recipe.beam_size).bleu
            rows.append({"averaged": averaged, "alpha": alpha, "val_beam": round(score, 2)})
            print(f"  val: average of {averaged}, α {alpha}: {score:.2f}", flush=True)
    return rows


def score_on_test(run_dir: Path, recipe: Recipe, choice: dict, test_pairs, args) -> tuple[list[dict], list]:
    """The BLEU table on test: the chosen average and the last checkpoint, beam search and greedy;
    and the chosen setting's translations."""
    vocabs, rows, chosen = read_vocabularies(RunDirectory(run_dir).vocab), [], None
    for averaged in dict.fromkeys((choice["averaged"], 1)):
        translator = Translator(model_of(run_dir, averaged), vocabs, args.device, alpha=choice["alpha"])
        for beam in (recipe.beam_size, 1):
            evaluation = quiet_bleu(translator, test_pairs, beam)
            rows.append({"averaged": averaged, "beam": beam, "alpha": choice["alpha"] if beam > 1 else None,
                         "bleu": round(evaluation.bleu, 2),
                         "bleu_lowercase": round(evaluation.bleu_lowercase, 2),
                         "signature": evaluation.signature, "seconds": round(evaluation.seconds, 2)})
            print(f"  test: average of {averaged}, beam {beam}: {evaluation.bleu:.2f}", flush=True)
            if chosen is None:
                chosen = evaluation
    translations = [
        {"source": s, "reference": r, "hypothesis": h}
        for s, r, h in zip(chosen.sources, chosen.references, chosen.hypotheses, strict=True)
    ]
    return rows, translations


def keep_attention(run_dir: Path, recipe: Recipe, choice: dict, test_pairs, path: Path, args) -> None:
    """Every head's attention weights (float16) while the chosen model reads a few test sentences
    (the first of 8 to 12 words) and writes its own translation of each (teacher forcing on it)."""
    vocabs = read_vocabularies(RunDirectory(run_dir).vocab)
    translator = Translator(model_of(run_dir, choice["averaged"]), vocabs, args.device, alpha=choice["alpha"])
    kept = []
    for source_text, _ in (pair for pair in test_pairs if 8 <= len(pair[0].split()) <= 12):
        if len(kept) == ATTENTION_SENTENCES:
            break
        source = vocabs.source.encode(source_text)
        target = translator.translate_ids([source], beam_size=recipe.beam_size)[0]
        maps = attention_maps(translator.model, source, target)
        kept.append({"source": source_text, "translation": vocabs.target.decode(target),
                     "source_tokens": vocabs.source.tokens(source),
                     "target_tokens": ["<bos>", *vocabs.target.tokens(target)],
                     **{kind: weights.half() for kind, weights in maps.items()}})
    atomic_save(kept, path)


def thinned(history: list[dict], points: int) -> list[dict]:
    """At most `points` records, evenly spaced, the last one always kept."""
    every = max(1, -(-len(history) // points))
    kept = history[::every]
    return kept if not history or kept[-1] is history[-1] else [*kept, history[-1]]


def search(args: argparse.Namespace, report_name: str = "search.json") -> dict:
    """Train the candidates, choose on validation, score the choice on test; each result file is
    written as soon as it is known, so that a failure late in the stage keeps what came before."""
    started = time.monotonic()
    report_path = args.out / report_name
    args.out.mkdir(parents=True, exist_ok=True)
    status = train_candidates(args)
    results = candidate_results(args, status)
    scored = [r for r in results.values() if "val_beam" in r]
    report = {
        "date": datetime.date.today().isoformat(),
        "command": command_line("experiments/gpu_finale.py", args.argv),
        "hardware": None,
        "minutes": args.minutes,
        "side_by_side": len(args.candidates),
        "candidates": list(results.values()),
    }
    write_json(report_path, report)
    if not scored:
        raise SystemExit("no candidate finished: see the logs in " + str(args.run_root))
    best = max(scored, key=lambda r: r["val_beam"])
    recipe, run_dir = candidate_recipe(best["name"], args), args.run_root / best["name"]
    hardware = json.loads(RunDirectory(run_dir).hardware.read_text())
    report["hardware"] = {**hardware, "cuda": torch.version.cuda}
    report["chosen"] = best["name"]
    print(f"chosen on validation: {best['name']} ({best['val_beam']:.2f}); its decoding:", flush=True)
    val_pairs, test_pairs = pairs(recipe, "val", args), pairs(recipe, "test", args)
    report["decoding"] = tune_decoding(run_dir, recipe, val_pairs, args)
    choice = max(report["decoding"], key=lambda row: row["val_beam"])  # of equals, the first: fewer, lower α
    report["choice"] = choice
    write_json(report_path, report)
    history = read_history(run_dir)
    write_json(args.out / "history.json", thinned(history, HISTORY_POINTS), indent=None)
    write_json(args.out / "validation.json", best["validation"])
    test_rows, translations = score_on_test(run_dir, recipe, choice, test_pairs, args)
    report["test"] = test_rows  # the search's own run of its choice, kept when `final` trains it again
    write_json(report_path, report)
    final = {
        "date": report["date"],
        "command": report["command"],
        "hardware": report["hardware"],
        "candidate": best["name"],
        "side_by_side": len(args.candidates),
        "recipe": recipe.replace(average_last=choice["averaged"], alpha=choice["alpha"]).to_dict(),
        "train": {k: best[k] for k in ("parameters", "steps", "minutes", "steps_per_s", "target_tokens_per_s",
                                       "epochs", "fitted_last_step")},
        "val_beam": choice["val_beam"],
        "decoding": report["decoding"],
        "test": test_rows,
    }
    write_json(args.out / "final.json", final)
    write_json(args.out / "translations.json", translations)
    keep_attention(run_dir, recipe, choice, test_pairs, args.out / "attention.pt", args)
    report["wall_minutes"] = round((time.monotonic() - started) / 60, 2)
    write_json(report_path, report)
    print(f"test BLEU of {best['name']} (average of {choice['averaged']}, beam 4, α {choice['alpha']}): "
          f"{test_rows[0]['bleu']:.2f}", flush=True)
    return report


def write_json(path: Path, value, indent: int | None = 1) -> None:
    atomic_write_text(path, json.dumps(value, indent=indent, ensure_ascii=False) + "\n")


# --- the other stages -------------------------------------------------------------------------------


def bench_command(args: argparse.Namespace, *options: str) -> list[str]:
    argv = [sys.executable, str(ROOT / "benchmarks" / "gpu_training.py"), *options]
    argv += ["--data-dir", args.data_dir] if args.data_dir else []
    return argv + (["--tiny", "--device", "cpu", "--compile-backend", "eager"] if args.tiny else [])


def bench(args: argparse.Namespace, minutes: float | None = None) -> int:
    """benchmarks/gpu_training.py alone on the GPU, its rows as they finish in bench.json (which
    keeps the rows it has: `--only missing` measures just those it lists as left out)."""
    args.out.mkdir(parents=True, exist_ok=True)
    return subprocess.call(bench_argv(args, minutes), cwd=ROOT)


def bench_argv(args: argparse.Namespace, minutes: float | None) -> list[str]:
    limit = ["--minutes", f"{minutes:.2f}"] if minutes is not None else []
    only = ["--only", args.only] if args.only else []
    return bench_command(args, "--out", str(args.out / "bench.json"), *only, *limit)


def delegated(args: argparse.Namespace) -> list[str]:
    """The command of stages ablation, recipe, seeds and colab: a script of its own."""
    data = ["--data-dir", args.data_dir] if args.data_dir else []
    if args.stage == "ablation":
        limit = ["--minutes", f"{args.bench_minutes:.2f}"] if args.bench_minutes is not None else []
        tiny = ["--tiny", "--device", "cpu", "--compile-backend", "eager"] if args.tiny else []
        return [str(ROOT / "benchmarks" / "gpu_ablation.py"), "--out", str(args.out / "ablation.json"),
                *data, *limit, *tiny]
    tiny = ["--tiny"] if args.tiny else []
    if args.stage == "colab":
        chapters = ["--part", str(args.part)]
        return [str(ROOT / "experiments" / "colab_chapters.py"), "run", *chapters, "--out", str(args.out),
                *data, *tiny]
    candidates = ["--candidates", *args.candidates] if args.stage == "recipe" and args.fast_candidates else []
    stage = "search" if args.stage == "recipe" else "seeds"
    return [str(ROOT / "experiments" / "gpu_fast_recipe.py"), stage, "--out", str(args.out),
            "--run-root", str(args.run_root / "fast-recipe"), *candidates, *data, *tiny]


def tests_command(args: argparse.Namespace) -> list[str]:
    """pytest on the GPU suite; with pytest-timeout installed, no test may hang for long."""
    import importlib.util

    timeout = ["--timeout", "180"] if importlib.util.find_spec("pytest_timeout") else []
    return [sys.executable, "-m", "pytest", "-m", "gpu", "tests/test_gpu.py", "-q", "-rA",
            "-p", "no:cacheprovider", *timeout]


def run_all(args: argparse.Namespace) -> int:
    """The GPU tests and a compile warm-up (inductor's caches, for bench) beside the search, then
    bench in the time left before `--deadline` seconds; the results tarred into --copy-to after each
    stage, so that a command stopped at its limit still brings back what was done."""
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    tests = spawn(tests_command(args), args.out / "gpu_tests.txt", threads=2)
    args.run_root.mkdir(parents=True, exist_ok=True)
    warm = spawn(bench_command(args, "--warm-compile"), args.run_root / "warm-compile.log", threads=2)
    try:
        search(args)
    finally:
        copy_results(args)
        for name, process in (("tests", tests), ("compile warm-up", warm)):
            try:
                process.wait(timeout=max(0.0, args.deadline - (time.monotonic() - started) - 200))
            except subprocess.TimeoutExpired:
                process.kill()
                print(f"{name}: stopped, out of time", flush=True)
        copy_results(args)
    left = (args.deadline - (time.monotonic() - started)) / 60 - 0.75  # its last row, and the copy
    if left > 0.5:
        bench(args, minutes=left)
    copy_results(args)
    return 0


# --- table3: chapter 18's Table 3 at a scale for one GPU, and a convergence check ----------------------


def table3_plan(args: argparse.Namespace) -> tuple:
    """The scale and the runs of stage table3: the base for twice the steps first (the longest run),
    then the experiments' rows; a run two experiments share (the same recipe) once."""
    scale = SCALES["quick" if args.tiny else args.scale]
    steps, every = scale.base.train.max_steps, scale.base.train.checkpoint_every
    doubled = Variant("base, twice the steps", "base×2",
                      {"max_steps": 2 * steps, "checkpoint_every": 2 * every})
    rows = table3_variants(scale.base)
    # The base three times (seeds 0, 1, 2): the spread of its seeds is check_claims's yardstick.
    variants = [doubled, *rows, *with_seeds(rows[:1], (1, 2))]
    if "layer-norm" in args.experiments:
        variants += layer_norm_variants(scale.base)
    if args.tiny:  # a smoke test: the base, twice the steps, and one row
        variants = [v for v in variants if v.row in ("base×2", "base", "E")]
    unique = {v.slug(scale.base): v for v in reversed(variants)}
    return scale, [v for v in variants if unique[v.slug(scale.base)] is v]


def table3_run(args: argparse.Namespace) -> int:
    """Stage table3's child process: every run, `--workers` at a time (chapter 18's run_variants)."""
    scale, variants = table3_plan(args)
    run_variants(variants, scale, args.run_root / "table3", workers=args.workers, device=args.device,
                 corpus_options=corpus_options(args), results_file="table3-all.json")
    return 0


def table3(args: argparse.Namespace) -> int:
    """Stage table3: the runs in a child process, stopped at `--wait-minutes`; the rows that finished,
    the convergence check and what was left out, in table3.json."""
    scale, variants = table3_plan(args)
    args.run_root.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, __file__, "table3-run", "--scale", scale.name, "--workers", str(args.workers),
            "--experiments", *args.experiments, *common_options(args)]
    started = time.monotonic()
    # run_variants gives each worker its share of the threads
    child = spawn(argv, args.run_root / "table3.log", threads=os.cpu_count() or 1, session=True)
    try:
        status = child.wait(timeout=60 * args.wait_minutes)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # the child and its workers, which hold the GPU
        status = child.wait()
        print(f"table3: stopped after {args.wait_minutes} minutes", flush=True)
    rows, left_out = [], []
    for variant in variants:
        path = args.run_root / "table3" / variant.slug(scale.base) / "result.json"
        if path.exists():
            rows.append({**json.loads(path.read_text()), "row": variant.row, "name": variant.name})
        else:
            left_out.append(variant.name)
    by_row = {row["row"]: row for row in reversed(rows)}  # a row's first run: the base's seed 0
    report = {
        "hardware": rows[0]["hardware"] if rows else None,
        "command": command_line("experiments/gpu_finale.py", args.argv),
        "date": datetime.date.today().isoformat(),
        "scale": {"name": scale.name, "about": scale.about, "recipe": scale.base.to_dict()},
        "workers": args.workers,
        "wall_minutes": round((time.monotonic() - started) / 60, 2),
        "exit_status": status,
        "rows": rows,
        "left_out": left_out,
        "convergence": convergence(by_row.get("base"), by_row.get("base×2")),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "table3.json", json.dumps(report, indent=1) + "\n")
    print(f"table3: {len(rows)} runs finished, {len(left_out)} left out; convergence {report['convergence']}")
    return 0


def convergence(base: dict | None, doubled: dict | None) -> dict | None:
    """The base's validation BLEU and perplexity after its steps and after twice as many: the issue's
    test of a converged scale is a BLEU within 1 point."""
    if base is None or doubled is None:
        return None
    change = doubled["val_bleu"] - base["val_bleu"]
    return {"steps": [base["steps"], doubled["steps"]], "val_bleu": [base["val_bleu"], doubled["val_bleu"]],
            "val_ppl": [base["val_ppl"], doubled["val_ppl"]], "bleu_change": round(change, 2),
            "levelled_off": abs(change) < 1.0}


# --- profile: where the base model's step spends its time ------------------------------------------


def profile(args: argparse.Namespace) -> int:
    """benchmarks/gpu_profile.py on the bf16 step, compiled then eager, alone on the GPU."""
    args.out.mkdir(parents=True, exist_ok=True)
    status = 0
    for mode, options in (("compiled", []), ("eager", ["--eager"])):
        argv = [sys.executable, str(ROOT / "benchmarks" / "gpu_profile.py"), *options,
                "--out", str(args.out / f"profile_{mode}.json")]
        argv += ["--data-dir", args.data_dir] if args.data_dir else []
        argv += ["--tiny", "--device", "cpu", "--compile-backend", "eager"] if args.tiny else []
        status = status or subprocess.call(argv, cwd=ROOT)
    return status


def copy_results(args: argparse.Namespace) -> None:
    if args.copy_to is None:
        return
    args.copy_to.mkdir(parents=True, exist_ok=True)

    def write_archive(file) -> None:
        with tarfile.open(fileobj=file, mode="w:gz") as tar:
            tar.add(args.out, arcname="gpu")
            for log in sorted(args.run_root.rglob("*.log")) if args.run_root.exists() else []:
                tar.add(log, arcname=f"logs/{log.relative_to(args.run_root)}")

    atomic_write(args.copy_to / "gpu_results.tgz", write_archive)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("stage", choices=("search", "final", "bench", "tests", "all", "table3", "profile",
                                          "ablation", "recipe", "seeds", "colab", "train-one", "table3-run"))
    parser.add_argument("name", nargs="?", help="train-one: the candidate")
    parser.add_argument("--data-dir", help="a folder with the Multi30k files (never downloads)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--candidates", nargs="+", default=None,
                        help="search, final: of CANDIDATES; recipe: of gpu_fast_recipe.CANDIDATES")
    parser.add_argument("--minutes", type=float, default=get_recipe(BASE).max_minutes,
                        help="minutes of training per candidate")
    parser.add_argument("--wait-minutes", type=float, default=None,
                        help="stop candidates still running after this long (default: minutes + 2)")
    parser.add_argument("--validate-every", type=int, default=500, help="steps between validations")
    parser.add_argument("--limit", type=int, help="use the first N validation and test sentences only")
    parser.add_argument("--run-root", type=Path, default=ROOT / "runs" / "gpu-finale")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--bench-minutes", type=float, default=None,
                        help="bench, ablation: start no row after this")
    parser.add_argument("--only", choices=("base", "recipe", "missing"), default=None,
                        help="bench: one table, or the rows bench.json lists as left out")
    parser.add_argument("--part", type=int, default=1, help="colab: which part of the chapters")
    parser.add_argument("--copy-to", type=Path, default=None, help="all, bench: tar the results there")
    parser.add_argument("--deadline", type=float, default=570, help="all: seconds for every stage")
    parser.add_argument("--tiny", action="store_true", help="a small CPU run of the stage (seconds)")
    parser.add_argument("--scale", default="medium", choices=list(SCALES), help="table3: the scale")
    parser.add_argument("--workers", type=int, default=8, help="table3: runs side by side")
    parser.add_argument("--experiments", nargs="+", choices=("table3", "layer-norm"), default=["table3"],
                        help="table3: chapter 18's Table 3, and chapter 19's post-/pre-LN runs")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.fast_candidates = args.stage == "recipe" and args.candidates is not None
    if args.stage in ("search", "final", "all") and args.candidates is not None:
        unknown = sorted(set(args.candidates) - set(CANDIDATES))
        if unknown:
            parser.error(f"unknown candidates {', '.join(unknown)}: choose from {', '.join(CANDIDATES)}")
    if args.stage == "final":
        chosen = json.loads((args.out / "search.json").read_text())["chosen"]
        if args.candidates not in (None, [chosen]):
            parser.error(f"final trains the search's choice, {chosen}, alone")
        args.candidates = [chosen]
    if args.candidates is None:
        args.candidates = ["recipe", "p0.2"] if args.tiny else list(CANDIDATES)
    if args.wait_minutes is None:
        args.wait_minutes = args.minutes + 2
    if args.tiny:
        args.validate_every = min(args.validate_every, 10)
        args.workers = min(args.workers, 2)
    if args.stage == "train-one" and args.name not in CANDIDATES:
        parser.error(f"train-one needs a candidate: one of {', '.join(CANDIDATES)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.stage == "train-one":
        return train_one(args)
    if args.stage == "search":
        search(args)
        return 0
    if args.stage == "final":
        try:
            search(args, report_name="final_search.json")
        finally:
            copy_results(args)
        return 0
    if args.stage == "bench":
        status = bench(args, minutes=args.bench_minutes)
        copy_results(args)
        return status
    if args.stage == "table3-run":
        return table3_run(args)
    if args.stage == "table3":
        try:
            return table3(args)
        finally:
            copy_results(args)
    if args.stage == "profile":
        try:
            return profile(args)
        finally:
            copy_results(args)
    if args.stage in ("ablation", "recipe", "seeds", "colab"):
        try:
            return subprocess.call([sys.executable, *delegated(args)], cwd=ROOT)
        finally:
            copy_results(args)
    if args.stage == "tests":
        with open(args.out / "gpu_tests.txt", "w") as report:
            return subprocess.call(tests_command(args), cwd=ROOT, stdout=report, stderr=subprocess.STDOUT)
    return run_all(args)


if __name__ == "__main__":
    sys.exit(main())
