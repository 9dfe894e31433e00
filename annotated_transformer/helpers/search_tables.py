"""The appendix's tables of the CPU recipe search, printed from its result file.

`experiments/cpu_recipe_search.py` wrote `annotated_transformer/results/multi30k_search.json`; the
appendix (book/appendix_recipes.ipynb) reads it and prints its tables with `print_search_tables`
(the candidates trained to the end, the greedy scores at a step, the decodings, the cross-entropies,
and the 30-minute runs grouped by machine), and the scores each choice of the recipe rests on with
`choice_evidence`. Plain formatting of dictionaries: nothing here imports the package.
"""

from __future__ import annotations

__all__ = ["choice_evidence", "machine", "print_search_tables"]

RUN_COLUMNS = [("steps", 6), ("minutes", 9), ("greedy, last", 14), ("beam, last", 12), ("beam, avg 3", 13),
               ("α", 5)]
RECIPE = "bpe4000-tokens1000-warmup3200-lr1.0"  # the final recipe's run, before the depth of stage 7
XEON, AVX2 = "Intel(R) Xeon(R) Processor", "AMD EPYC (AVX2)"


def machine(row: dict) -> str:
    """The CPU's name, and its float32 kernels where they were recorded."""
    return f"{row['cpu']} ({row['cpu_kernels']})" if row.get("cpu_kernels") else row["cpu"]


def _options(row: dict) -> dict[str, str]:  # flag -> value; a flag given twice keeps its last value
    return dict(zip(row["options"][::2], row["options"][1::2], strict=True))


def _print_runs(title: str, runs: dict) -> None:
    """One row per run: the options that differ between the runs, then the scores."""
    names = {name: name.split(" on ")[0] for name in runs}
    flags = {name: _options(row) for name, row in runs.items()}
    first = next(iter(flags.values()))
    common = {k: v for k, v in first.items() if all(f.get(k) == v for f in flags.values())}
    shared = common if len(runs) > 1 else {}
    changes = {name: " ".join(f"{k} {v}" for k, v in f.items() if k not in shared)
               for name, f in flags.items()}
    wide = max(map(len, names.values())) + 2
    print(f"\n{title}")
    if shared:
        print("every run:", " ".join(f"{k} {v}" for k, v in shared.items()))
    header = "".join(f"{name:>{width}}" for name, width in RUN_COLUMNS)
    print(f"{'candidate (its changes below it)':<{wide}}{header}")
    for name, row in runs.items():  # two lines a run, so that the table fits a page's width
        print(f"{names[name]:<{wide}}{row['steps']:>6}{row['minutes']:>9.1f}{row['val_greedy_last']:>14.2f}"
              f"{row['val_beam4_last']:>12.2f}{row['val_beam4_average_3']:>13.2f}{row['alpha']:>5.1f}")
        print(f"  {changes[name]}")


def print_search_tables(search: dict) -> None:
    """Every table of the search's result file, validation BLEU throughout."""
    columns = [("steps", 6), ("greedy, last", 14), ("beam, avg 5", 13), ("beam, avg 10", 14)]
    print(f"{'candidate':<16}{'changes':<34}" + "".join(f"{name:>{width}}" for name, width in columns))
    for name, row in search["finished runs"].items():
        changes = " ".join(row["options"])
        print(f"{name:<16}{changes:<34}{row['steps']:>6}{row['val_greedy_last']:>14.2f}"
              f"{row['val_beam4_average_5']:>13.2f}{row['val_beam4_average_10']:>14.2f}")
    for key, scores in search.items():
        if key.startswith("greedy at step"):
            greedy = ", ".join(f"{name} {score:.2f}" for name, score in scores.items())
            print(f"\nval BLEU, greedy, {key[len('greedy at '):]}: {greedy}")
        if key.startswith("decoding"):
            run = key[len("decoding "):]
            run_ons = search.get(f"run-on translations {run}", {})  # counted for the later runs only
            print(f"\nval BLEU, beam 4, {run} (checkpoints averaged, α):")
            for setting, score in scores.items():
                run_on = f"{run_ons[setting]:>4} run-on" if setting in run_ons else ""
                print(f"  {setting:<24}{score:>6.2f}{run_on}")
        if key == "cross-entropy":  # nats per token, model.pt, no dropout or label smoothing
            print("\ncross-entropy of model.pt on 1,014 training sentences and on the validation set:")
            for run, split in scores.items():
                print(f"  {run:<48}train {split['train']:.3f}  val {split['val']:.3f}")
    for cpu in dict.fromkeys(map(machine, search["30-minute runs"].values())):
        runs = {name: row for name, row in search["30-minute runs"].items() if machine(row) == cpu}
        _print_runs(f"30-minute runs on two cores of an {cpu}, val BLEU:", runs)
    _print_runs("Changes to cooldown-0.32 at its 2,500 steps (one core each, minutes not comparable), val BLEU:",
               search["cooldown stage"])


def choice_evidence(search: dict) -> dict[str, tuple[str, float, str, float]]:
    """What each choice of the `multi30k` recipe rests on, single runs of the search: for each, named
    by its figure in the appendix's prose, (the choice, its val BLEU, the alternative, its val BLEU)."""
    runs = search["30-minute runs"]
    by_layers = {n: search[f"decoding 30min-{RECIPE}{s}"]["average 3, alpha 1.4"] for n, s in ((2, "-L2"), (3, ""))}

    def average_3(name: str, cpu: str = AVX2) -> float:
        return runs[f"{name} on {cpu}"]["val_beam4_average_3"]

    return {
        "ev_l2": ("2 layers", by_layers[2], "3 layers", by_layers[3]),
        "ev_bpe8k": ("BPE 4,000", average_3("bpe4000-cooldown-0.32", XEON),
                     "BPE 8,000", average_3("bpe-cooldown-0.32", XEON)),
        "ev_words": ("BPE 4,000", average_3("bpe4000-cooldown-0.32", XEON), "words", average_3("cooldown-0.32", XEON)),
        "ev_batches": ("batches of 1,000", average_3("bpe4000-tokens1000"), "4,000", average_3("bpe4000-16-bit-masks")),
        "ev_warmup": ("warmup 3,200", average_3(RECIPE), "4,000", average_3("bpe4000-tokens1000-warmup4000-lr1.0")),
        "ev_cooldown": ("a cooldown (last checkpoint)", runs["cooldown-0.36 on AMD EPYC"]["val_beam4_last"],
                        "none", runs["paper-schedule on AMD EPYC"]["val_beam4_last"]),
        "ev_p00": ("dropout 0.1", by_layers[3], "0.0", average_3(f"{RECIPE}-p0.0")),
        "ev_p02": ("dropout 0.1", by_layers[3], "0.2", average_3(f"{RECIPE}-p0.2")),
    }
