"""The `experiment` command (chapters 18 and 19): the variants of an experiment trained and scored at a
named scale from a shell, `python -m annotated_transformer experiment table3 --scale small`."""

import argparse
import functools
from collections.abc import Callable
from pathlib import Path

from annotated_transformer.cli import commands as cli
from annotated_transformer.companions.hardware import check_device
from annotated_transformer.recipes import Recipe
from annotated_transformer.runs.variant_runs import results_table, run_variants
from annotated_transformer.variations import SCALES, Variant, with_seeds

__all__ = ["add_experiment_command"]


def _run_experiment(
    args: argparse.Namespace, experiments: dict[str, Callable[[Recipe], list[Variant]]]
) -> int:
    """The `experiment` command: train and score the variants of `experiments[args.name]` at a scale."""
    if args.device is not None:
        check_device(args.device, "--device")
    scale = SCALES[args.scale]
    variants = experiments[args.name](scale.base)
    if args.rows:
        wanted = {row.strip() for row in args.rows.split(",")}
        known = {variant.row for variant in variants}
        if not wanted <= known:
            raise ValueError(
                f"unknown row(s) {sorted(wanted - known)}: the rows of {args.name} are {sorted(known)}"
            )
        variants = [variant for variant in variants if variant.row in wanted]
    variants = with_seeds(variants, range(args.seeds))
    out = args.out or Path("runs") / f"experiments-{scale.name}"
    print(f"{args.name} at scale {scale.name!r} ({scale.about}): {len(variants)} runs in {out}")
    results = run_variants(variants, scale, out, workers=args.workers, device=args.device,
                           corpus_options=cli.corpus_options(args), results_file=f"{args.name}.json")
    if args.name == "table3":
        print(results_table(results))
    print(f"results written to {out / (args.name + '.json')}")
    return 0


def add_experiment_command(commands, experiments: dict[str, Callable[[Recipe], list[Variant]]]) -> None:
    """The sub-parser of `experiment`, an extra command of `cli.build_parser`; `experiments` names the
    functions that write out the variants of each experiment it runs."""
    experiment = commands.add_parser(
        "experiment",
        help="retrain the paper's Table 3 rows (§6.2) or the post-LN/pre-LN comparison at a named scale",
        description="Train and score a set of model variations, each in its own resumable run directory, "
        "and write their validation perplexity and BLEU to one JSON file: table3 is the paper's Table 3 "
        "(chapter 18), layer-norm is post-LN against pre-LN with and without warmup at two depths "
        "(chapter 19).",
        epilog="scales:\n" + "\n".join(f"  {name:7} {scale.about}" for name, scale in SCALES.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    experiment.add_argument("name", choices=list(experiments), help="which experiment")
    experiment.add_argument("--scale", default="small", choices=list(SCALES),
                            help="how big each run is (default small; see below)")
    experiment.add_argument("--out", type=Path, metavar="DIR",
                            help="where the runs and the results go (default runs/experiments-SCALE)")
    experiment.add_argument("--rows", metavar="ROWS", help="only these rows, e.g. A,C (default: all)")
    experiment.add_argument("--seeds", type=cli.positive_int, default=1, metavar="N",
                            help="train every run with the seeds 0 … N-1 (default 1): their spread is "
                            "the noise")
    experiment.add_argument("--workers", type=cli.positive_int, default=1,
                            help="runs trained at the same time (CPU: 2 uses two cores best; GPU: 1)")
    experiment.add_argument("--device", type=cli.parse_device,
                            help="cpu, cuda, ... (default: a GPU if there is one)")
    experiment.add_argument("--data-dir", type=Path, metavar="DIR",
                            help="a folder that holds the Multi30k files, instead of the cache")
    experiment.add_argument("--no-download", action="store_true", help="never download the data")
    experiment.set_defaults(handler=functools.partial(_run_experiment, experiments=experiments))
