"""Paper §6.2 as runs (chapter 18): each variant of an experiment trained in its own run directory,
scored, read back, and the results shown as a table and a figure beside the paper's Table 3.

`run_variants(variants, scale, out_dir)` trains and scores every variant (`_run_variant`), `workers` at
a time, and writes the results to one JSON file; `results_table` writes them as a Markdown table,
`plot_variations` as a figure. Chapter 19 runs its own experiment through the same function, and the
command line's `experiment` command (`cli.experiment_command`) runs both from a shell.
"""

import json
import math
import multiprocessing
import shutil
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch

from annotated_transformer.data import corpus
from annotated_transformer.model import count_parameters
from annotated_transformer.helpers.files import atomic_write_text
from annotated_transformer.companions.corpus_cache import cached_encode_pairs
from annotated_transformer.tokenization import encode_pairs, token_batches
from annotated_transformer.training import evaluate
from annotated_transformer.recipes import Recipe
from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.translator import Translator, bleu
from annotated_transformer.runs.translation import train_translation
from annotated_transformer.runs.translation_files import load_vocabularies
from annotated_transformer.variations import Scale, Variant, rows_of

__all__ = ["run_variants", "results_table", "plot_variations"]


def _prepare_vocabulary(base: Recipe, out_dir: Path, corpus_options: dict | None = None) -> None:
    """Build the experiment's vocabulary and encoded training set once, in `out_dir`: every
    variant shares them (none of Table 3's rows changes the vocabulary)."""
    train_pairs = corpus(base.corpus, "train", **(corpus_options or {}))
    vocabs = load_vocabularies(out_dir, base, train_pairs)
    cached_encode_pairs(train_pairs, vocabs, RunDirectory(out_dir).cache)


def _share_vocabulary(out_dir: Path, run_dir: Path) -> None:
    """Give the run in `run_dir` the experiment's vocabulary and encoded corpus (chapter 14's layout)."""
    shared, run = RunDirectory(out_dir), RunDirectory(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not run.vocab.exists():
        shutil.copyfile(shared.vocab, run.vocab)
    if not run.cache.exists():
        shutil.copytree(shared.cache, run.cache)


def _describe(variant: Variant) -> dict:
    return {
        "name": variant.name,
        "row": variant.row,
        "changes": variant.changes,
        "paper_change": variant.paper_change,
        "paper": variant.paper,
    }


def _run_variant(
    variant: Variant, scale: Scale, out_dir: str | Path, device=None, corpus_options: dict | None = None
) -> dict:
    """Train one variant in `out_dir/<slug>` and score it on the validation set; the result is saved
    as `result.json` there, and a finished run is read back instead of trained again."""
    out_dir = Path(out_dir)
    recipe = variant.recipe(scale.base)
    run_dir = out_dir / variant.slug(scale.base)
    result_path = run_dir / "result.json"
    if result_path.exists():
        try:
            saved = json.loads(result_path.read_text(encoding="utf-8"))
            # A setting the saved recipe lacks was added later: the run used its default.
            if Recipe.from_dict(saved.get("recipe", {})) == recipe:  # another experiment's run of it
                return {**saved, **_describe(variant)}
        except (OSError, ValueError, TypeError):  # json.JSONDecodeError is a ValueError
            pass  # a damaged result is scored again from the run's checkpoints
    _share_vocabulary(out_dir, run_dir)
    run = train_translation(recipe, run_dir, corpus_options=corpus_options, device=device, progress=False)
    val_pairs = corpus(recipe.corpus, "val", **(corpus_options or {}))[: scale.val_sentences]
    last = run.history[-1] if run.history else {}
    result = {
        **_describe(variant),
        "run": run_dir.name,  # the run's directory, in the experiment's folder
        "recipe": recipe.to_dict(),
        "parameters": count_parameters(run.model),
        "steps": last.get("step", 0),
        "minutes": run.minutes,
        "train_loss": last.get("loss"),
        "val_sentences": len(val_pairs),
        **_score_model(run.model, run.vocabs, val_pairs, recipe, device),
        "hardware": run.hardware,
    }
    atomic_write_text(result_path, json.dumps(result, indent=1))
    return result


def _score_model(model, vocabs, pairs: Sequence[tuple[str, str]], recipe: Recipe, device=None) -> dict:
    """Perplexity per target token under teacher forcing (no smoothing) and BLEU of beam search with
    the recipe's beam and α (§6.1: 4 and 0.6), on `pairs`."""
    batches = token_batches(encode_pairs(pairs, vocabs), 4000, shuffle=False)(0)
    nll = evaluate(model, batches, device=device)["nll"]
    translator = Translator(model, vocabs, device=device, beam_size=recipe.beam_size, alpha=recipe.alpha)
    hypotheses = translator.translate([source for source, _ in pairs])
    score, signature = bleu(hypotheses, [target for _, target in pairs])
    return {"val_nll": nll, "val_ppl": math.exp(nll), "val_bleu": score.score, "bleu_signature": signature}


def _run_job(job: tuple) -> dict:
    return _run_variant(*job)


def run_variants(
    variants: Sequence[Variant],
    scale: Scale,
    out_dir: str | Path,
    *,
    workers: int = 1,
    device=None,
    corpus_options: dict | None = None,
    results_file: str = "results.json",
    log: Callable[[str], None] | None = print,
) -> list[dict]:
    """Train and score every variant (finished ones are read back), `workers` at a time, and write
    all results, in the variants' order, to `out_dir/results_file`.

    Several workers are for a CPU: each process gets an equal share of the threads, and small models
    use two single-threaded processes better than one process with two threads. On a GPU use one.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    _prepare_vocabulary(scale.base, out_dir, corpus_options)
    jobs = [(variant, scale, out_dir, device, corpus_options) for variant in variants]
    results: list[dict | None] = [None] * len(jobs)

    def done(index: int, result: dict) -> None:
        results[index] = result
        if log is not None:
            log(
                f"{result['name']:<28} seed {result['recipe']['seed']}  "
                f"ppl {result['val_ppl']:7.2f}  BLEU {result['val_bleu']:5.2f}  "
                f"{result['parameters']:>10,} parameters  {result['minutes']:5.1f} min"
            )

    if workers == 1:
        for index, job in enumerate(jobs):
            done(index, _run_job(job))
    else:
        threads = max(1, torch.get_num_threads() // workers)
        context = multiprocessing.get_context("spawn")  # fresh interpreters: safe with threads and CUDA
        with ProcessPoolExecutor(
            workers, mp_context=context, initializer=torch.set_num_threads, initargs=(threads,)
        ) as pool:
            futures = {pool.submit(_run_job, job): index for index, job in enumerate(jobs)}
            for future in as_completed(futures):
                done(futures[future], future.result())
    atomic_write_text(out_dir / results_file, json.dumps(results, indent=1))
    return results


def _cell(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _mean_sd(values: Sequence[float], spec: str) -> str:
    """A row's seeds as "mean ± standard deviation" (the value alone for one seed)."""
    if len(values) == 1:
        return format(values[0], spec)
    return f"{statistics.fmean(values):{spec}} ± {statistics.stdev(values):{spec}}"


def results_table(results: Sequence[dict]) -> str:
    """A Markdown table beside the paper's Table 3: each row's perplexity and BLEU, mean ± sd of its seeds."""
    lines = [
        "| row | ours: change | ours: params | seeds | ours: PPL | ours: BLEU "
        "| paper: change | paper: PPL | paper: BLEU | paper: params ×10⁶ |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for name, runs in rows_of(results).items():
        r, (ppl, bleu_, params) = runs[0], runs[0]["paper"] or (None, None, None)
        change = name.split(") ", 1)[-1] if r["row"] != "base" else ""
        lines.append(
            f"| {r['row']} | {change} | {r['parameters']:,} | {len(runs)} "
            f"| {_mean_sd([run['val_ppl'] for run in runs], '.2f')} "
            f"| {_mean_sd([run['val_bleu'] for run in runs], '.2f')} "
            f"| {r['paper_change']} | {_cell(ppl, '.2f')} | {_cell(bleu_, '.1f')} | {_cell(params, '.0f')} |"
        )
    return "\n".join(lines)


def plot_variations(results: Sequence[dict], title: str = ""):
    """Each Table 3 row's change in BLEU and in perplexity from the base model, in per cent of the
    base's value (the two scales differ too much for absolute changes): ours as bars (the mean of the
    row's seeds, with their standard deviation), the paper's as dots. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    rows = rows_of(results)
    base = next(runs for runs in rows.values() if runs[0]["row"] == "base")
    others = [runs for runs in rows.values() if runs[0]["row"] != "base"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.32 * len(others) + 1.5), sharey=True)
    y = list(range(len(others)))
    for ax, column, index, label in ((axes[0], "val_bleu", 1, "BLEU"), (axes[1], "val_ppl", 0, "perplexity")):
        base_mean = statistics.fmean(run[column] for run in base)  # 0 for the quick scale's BLEU: no per cent
        scores = [[100 * (run[column] / base_mean - 1) if base_mean else math.nan for run in runs]
                  for runs in others]
        ours = [statistics.fmean(s) for s in scores]
        spread = [statistics.stdev(s) if len(s) > 1 and base_mean else 0.0 for s in scores]
        paper = [100 * (runs[0]["paper"][index] / base[0]["paper"][index] - 1) for runs in others]
        colors = ["tab:green" if (v > 0) == (index == 1) else "tab:red" for v in ours]
        ax.barh(y, ours, xerr=spread, color=colors, alpha=0.7, label="ours (mean ± sd of the seeds)")
        ax.scatter(paper, y, color="black", marker="o", s=18, zorder=3, label="paper")
        ax.axvline(0, color="gray", lw=0.8)
        ax.set_xlabel(f"{label}: change from the base model (%)")
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(f"{label} (base: ours {base_mean:.1f}, paper {base[0]['paper'][index]})")
    axes[0].set_yticks(y, [runs[0]["name"] for runs in others])
    axes[0].invert_yaxis()
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=2)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.05, 1, 1))  # room for the legend below
    return fig
