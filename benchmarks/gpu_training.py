"""Training speed on a GPU: the paper's base model, ours against torch.nn.Transformer, eager and
compiled, in float32 (TF32 matrix products) and bfloat16; and a translation recipe trained by the
book's own Trainer on Multi30k, eager and compiled.

    python benchmarks/gpu_training.py --data-dir DIR     # on a CUDA GPU: both tables (minutes)
    python benchmarks/gpu_training.py --data-dir DIR --out bench.json --minutes 3
                                                         # the rows that fit in 3 minutes, as JSON
    python benchmarks/gpu_training.py --only missing --out bench.json
                                                         # the rows bench.json lists as left out
    python benchmarks/gpu_training.py --rederive bench.json
                                                         # MFU on real tokens for rows measured
                                                         # before it was counted (on the CPU)
    python benchmarks/gpu_training.py --tiny --device cpu --compile-backend eager
                                                         # a smoke test of every code path (CI)

**Base model** (N = 6, d_model = 512, h = 8, d_ff = 2048, a shared vocabulary of 37,000, post-LN,
dropout 0.1) on batches of up to `--batch-tokens` padded tokens (25,000 as in §5.1), on the device
before timing, so that this measures the model, the loss and the optimizer (Adam, fused) and
nothing else. Both models share this package's embeddings, positional encodings, tied output
projection and loss, so the comparison is of the encoder–decoder stacks
(`training_throughput.TorchReference`).

**The batches** (`--lengths`) hold random token ids, with the lengths of real sentence pairs:
`corpus` (the default) takes the (source, target) lengths of Multi30k's 29,000 training pairs as
the `multi30k` recipe's BPE of 4,000 pieces encodes them (the built-in corpus's, word by word, in
tiny mode) and groups them with `batch_by_tokens`, exactly as training does (sorted by source,
then target length; epoch after epoch, reshuffled): the padding is the padding training sees, a
third of the target positions at 25,000 tokens. `uniform` is the first version's batches: source
and target lengths drawn independently, 10 to 50, then grouped the same way; the committed rows
measured on them are replayed exactly by `--rederive`.

**Model FLOP utilization** (`mfu`, `mfu.py`): the model FLOPs of the real (non-padding) tokens
per second over the device's dense peak, as PaLM defines it; `mfu_with_padding` beside it counts
every padded position, and `padding` is the share of those FLOPs spent on padding, so that
mfu = mfu_with_padding × (1 − padding). The peak is the GPU model's in `mfu.PEAK_TFLOPS`, dense
bf16, or TF32 for fp32 (an SXM, a PCIe and an NVL card of the same chip have different peaks), and
each row records it (`peak`: the model and its TFLOP/s); a GPU the table does not hold gets no MFU
("unknown peak") unless `--peak-tflops` gives its peak.

**Recipe**: `Trainer.fit` on the recipe's own model and token batches (chapter 14's pipeline,
pinned memory and non-blocking copies on a GPU), statistics read once at the end: optimizer steps
per second and real (non-padding) target tokens per second. The first step, which compiles, is
timed apart: "compile" is its time minus a steady step's.

**The result file** (`--out`): rows run in order of interest (bf16 first, the precision a GPU
trains in, then the recipes, then float32); with `--minutes`, a row that would start after that
time is named in `left_out` instead. Each row records its own command and machine. A file that
exists keeps its rows: a run adds the rows it lacks (and takes them off `left_out`), never
measures one again; `--only missing` runs just the rows the file lists as left out.
"""

import argparse
import datetime
import functools
import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from mfu import UNKNOWN_PEAK, flop_fields, pair_flops, peak_of_gpu, peak_record, step_function
from training_throughput import TorchReference

from annotated_transformer.acceleration import autocast_context, compile_forward_loss, configure_process
from annotated_transformer.batching import Batch, batch_by_tokens, make_batch
from annotated_transformer.data import corpus
from annotated_transformer.helpers.files import atomic_write_text
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.optimizer import make_optimizer
from annotated_transformer.recipes import get_recipe
from annotated_transformer.regularization import LabelSmoothingLoss
from annotated_transformer.tokenization import build_vocabularies, encode_pairs, token_batches
from annotated_transformer.training import TrainConfig, Trainer

ROOT = Path(__file__).resolve().parent.parent
LENGTHS_RECIPE = "multi30k"  # the recipe whose vocabulary gives the corpus lengths (BPE 4,000)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def command_line(script: str, argv: list[str]) -> str:
    """The command as typed from the repository's root (paths inside it relative): the row's record."""
    def relative(word: str) -> str:
        path = Path(word)
        return str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else word

    return shlex.join(["python", script, *(relative(word) for word in argv)])


# --- the batches --------------------------------------------------------------------------------


@functools.cache
def uniform_batches(config: TransformerConfig, batch_tokens: int, n_batches: int) -> list[Batch]:
    """The first version's batches: random sentences 10 to 50 tokens long, source and target
    lengths independent, grouped by length (§5.1). Kept as they were, so that `--rederive` replays
    the batches the committed rows were measured on."""
    generator = torch.Generator().manual_seed(0)
    n_pairs = n_batches * batch_tokens // 25
    lengths = torch.randint(10, 51, (n_pairs, 2), generator=generator).tolist()
    pairs = [
        (
            torch.randint(4, config.src_vocab_size, (s,), generator=generator).tolist(),
            torch.randint(4, config.tgt_vocab_size, (t,), generator=generator).tolist(),
        )
        for s, t in lengths
    ]
    order = batch_by_tokens([(len(s), len(t)) for s, t in pairs], batch_tokens, seed=0)[:n_batches]
    return [make_batch([pairs[i] for i in indices]) for indices in order]


def corpus_batches(
    config: TransformerConfig, lengths: list[tuple[int, int]], batch_tokens: int, n_batches: int
) -> list[Batch]:
    """Random ids with the corpus's (source, target) lengths, batched as training batches them:
    `batch_by_tokens`, one epoch after another (each reshuffled), the first `n_batches`."""
    lengths = fitting(config, lengths)
    groups = epochs(lambda epoch: batch_by_tokens(lengths, batch_tokens, epoch=epoch), n_batches)
    return random_id_batches(config, lengths, groups)


def fitting(config: TransformerConfig, lengths: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (source, target) lengths the model's positional table covers (all of Multi30k's)."""
    return [(s, t) for s, t in lengths if s <= config.max_len and t + 1 <= config.max_len]


def epochs(batches_of_epoch: Callable[[int], list[list[int]]], n_batches: int) -> list[list[int]]:
    """The first `n_batches` groups of pair indices of epoch 0, then epoch 1, and so on."""
    groups: list[list[int]] = []
    for epoch in range(1000):
        groups += batches_of_epoch(epoch)
        if len(groups) >= n_batches:
            break
    return groups[:n_batches]


def random_id_batches(config: TransformerConfig, lengths: list[tuple[int, int]],
                      groups: list[list[int]]) -> list[Batch]:
    """One batch per group of pair indices: random ids (seeded) of each pair's lengths."""
    generator = torch.Generator().manual_seed(0)

    def ids(n: int, vocab_size: int) -> list[int]:
        return torch.randint(4, vocab_size, (n,), generator=generator).tolist()

    return [
        make_batch([(ids(lengths[i][0], config.src_vocab_size), ids(lengths[i][1], config.tgt_vocab_size))
                    for i in group])
        for group in groups
    ]


def corpus_data(args, data: dict, recipe_name: str = LENGTHS_RECIPE):
    """(vocabularies, encoded training pairs) of a recipe's corpus, built once per vocabulary;
    in tiny mode the built-in corpus's first 2,000 pairs, word by word."""
    recipe = get_recipe(recipe_name)
    key = (recipe.corpus, recipe.vocab, recipe.vocab_size, recipe.min_freq)
    if key not in data:
        if args.tiny:
            pairs = corpus("builtin", "train")[:2000]
            vocabs = build_vocabularies(pairs, "word", min_freq=1)
        else:
            options = {"root": args.data_dir, "download": False} if args.data_dir else {}
            pairs = corpus(recipe.corpus, "train", **options)
            vocabs = build_vocabularies(pairs, recipe.vocab, recipe.vocab_size, recipe.min_freq)
        data[key] = vocabs, encode_pairs(pairs, vocabs)
    return data[key]


def lengths_name(args) -> str:
    """What a row's batches are: "uniform", or the corpus whose lengths they have."""
    if args.lengths == "uniform":
        return "uniform"
    return "builtin" if args.tiny else get_recipe(LENGTHS_RECIPE).corpus


def base_batches(args, config: TransformerConfig, lengths: str, batch_tokens: int, data: dict) -> list[Batch]:
    """The first step's batch, the warm-up's and the timed ones, on the CPU."""
    n_batches = 1 + args.warmup + args.base_steps
    if lengths == "uniform":
        return uniform_batches(config, batch_tokens, n_batches)
    return corpus_batches(config, corpus_data(args, data)[1].lengths(), batch_tokens, n_batches)


# --- timing -------------------------------------------------------------------------------------


def time_steps(step: Callable[[Batch], None], batches: list[Batch], device: torch.device,
               warmup: int) -> dict:
    """The first step timed alone (it compiles), `warmup` more untimed, the rest timed together."""
    synchronize(device)
    started = time.perf_counter()
    step(batches[0])
    synchronize(device)
    first = time.perf_counter() - started
    for batch in batches[1 : 1 + warmup]:
        step(batch)
    timed = batches[1 + warmup :]
    synchronize(device)
    started = time.perf_counter()
    for batch in timed:
        step(batch)
    synchronize(device)
    seconds = time.perf_counter() - started
    return {
        "steps_per_s": len(timed) / seconds,
        "tokens_per_s": sum(b.n_tokens for b in timed) / seconds,
        "first_step_s": first,
        "step_s": seconds / len(timed),
        "timed_steps": len(timed),
    }


def training_step(model, loss_of: Callable[[Batch], torch.Tensor], device: torch.device,
                  precision: str) -> Callable[[Batch], None]:
    """One optimizer step of the §5.3 schedule on the summed loss `loss_of(batch)`."""
    optimizer, scheduler = make_optimizer(model, model.config.d_model)

    def step(batch: Batch) -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast_context(device, precision):
            loss = loss_of(batch)
        (loss / batch.n_tokens).backward()
        optimizer.step()
        scheduler.step()

    return step


def base_config(args) -> TransformerConfig:
    if args.tiny:
        return TransformerConfig(
            src_vocab_size=300, tgt_vocab_size=300, n_layers=2, d_model=32, d_ff=64, n_heads=4, max_len=64
        )
    return TransformerConfig(src_vocab_size=37000, tgt_vocab_size=37000, max_len=64)


def base_row(args, device: torch.device, spec: dict, batches: list[Batch]) -> dict:
    """One row of the base-model table, printed."""
    implementation, precision = spec["implementation"], spec["precision"]
    config = base_config(args)
    torch.manual_seed(0)
    model = (make_model(config) if implementation == "ours" else TorchReference(config)).to(device).train()
    loss_of = step_function(model, implementation, LabelSmoothingLoss(config.tgt_vocab_size, 0.1))
    if spec["compiled"]:
        torch._dynamo.reset()  # a fresh cache for each row: rows compile the same code
        loss_of = torch.compile(loss_of, backend=args.compile_backend, dynamic=True)
    on_device = [batch.to(device) for batch in batches]
    step = training_step(model, lambda batch: loss_of(*batch.tensors()), device, precision)
    result = time_steps(step, on_device, device, args.warmup)
    peak = peak_record(device, precision, args.peak_tflops)
    row = {**spec, **result, **flop_fields(pair_flops(config, implementation), batches[1 + args.warmup :],
                                           result["tokens_per_s"], peak["tflops"]), "peak": peak}
    print_base_row(row, flush=True)
    return row


def percent(value: float | None) -> str:
    return f"{100 * value:5.1f}%" if value is not None else "    –"


def print_base_row(row: dict, flush: bool = False) -> None:
    mode = "compiled" if row["compiled"] else "eager"
    if row.get("peak", {}).get("source") == UNKNOWN_PEAK:
        mfu = f"MFU unknown peak ({row['peak']['device']})"
    else:
        mfu = f"MFU {percent(row['mfu'])} (with padding {percent(row['mfu_with_padding'])})"
    print(
        f"{row['implementation']:21} {row['precision']:5} {mode:8} {row['tokens_per_s']:>12,.0f} tok/s "
        f"{row['steps_per_s']:7.2f} steps/s  {row['flops_per_s'] / 1e12:7.1f} TFLOP/s  "
        f"{mfu}  first step {row['first_step_s']:6.1f} s",
        flush=flush,
    )


# --- the recipes --------------------------------------------------------------------------------


def time_recipe(args, device: torch.device, spec: dict, vocabs, encoded) -> dict:
    name = spec["recipe"]
    recipe = get_recipe(name, max_tokens=args.recipe_tokens) if args.recipe_tokens else get_recipe(name)
    if args.tiny:
        recipe = get_recipe("builtin", n_layers=1, d_model=32, d_ff=64, max_tokens=400).replace(name=name)
    epoch_batches = token_batches(encoded, recipe.max_tokens, seed=0, pin_memory=device.type == "cuda")
    torch.manual_seed(0)
    model = make_model(recipe.model_config(vocabs))
    steps = args.recipe_steps
    config = TrainConfig(
        max_steps=1 + args.warmup + steps,
        warmup=recipe.train.warmup,
        lr_factor=recipe.train.lr_factor,
        precision=spec["precision"],
        progress=False,
        log_every=0,
    )
    trainer = Trainer(model, config, device=device)
    if spec["compiled"]:  # the Trainer's own compiled forward pass, with the backend asked for
        trainer.forward_loss = compile_forward_loss(trainer._forward_loss, backend=args.compile_backend)
    synchronize(device)
    started = time.perf_counter()
    trainer.fit(epoch_batches, on_step=lambda step: step == 1)  # the first step: compiles if compiled
    synchronize(device)
    first = time.perf_counter() - started
    trainer.fit(epoch_batches, on_step=lambda step: step == 1 + args.warmup)  # a few more, untimed
    synchronize(device)
    started = time.perf_counter()
    history = trainer.fit(epoch_batches)
    synchronize(device)
    seconds = time.perf_counter() - started
    return {
        **spec,
        "steps": len(history),
        "steps_per_s": len(history) / seconds,
        "tokens_per_s": sum(s.n_tokens for s in history) / seconds,
        "first_step_s": first,
        "compile_s": max(first - seconds / len(history), 0.0),
    }


def recipe_row(args, device: torch.device, spec: dict, data: dict) -> dict:
    """One row of the recipe table, printed; `data` caches each vocabulary's encoded corpus."""
    row = time_recipe(args, device, spec, *corpus_data(args, data, spec["recipe"]))
    mode = "compiled" if row["compiled"] else "eager"
    print(
        f"recipe {row['recipe']:12} {row['precision']:5} {mode:8} {row['steps_per_s']:7.2f} steps/s "
        f"{row['tokens_per_s']:>10,.0f} real target tok/s  compile {row['compile_s']:6.1f} s "
        f"({row['steps']} steps timed)",
        flush=True,
    )
    return row


# --- the rows and the result file ---------------------------------------------------------------

def measured(results: dict, spec: dict) -> bool:
    """Whether the result file has the row `spec` names (a spec's fields are its identity)."""
    return any(all(row.get(k) == v for k, v in spec.items() if k != "table")
               for row in results.get(spec["table"], []))


def planned_rows(args, device: torch.device, results: dict) -> list[dict]:
    """Every row this run measures, in order (bf16 first, then the recipes, then float32), as specs:
    {"table": "base", implementation, precision, compiled, lengths, batch_tokens} or
    {"table": "recipe", recipe, precision, compiled}; rows the result file has already are left out."""
    if args.only == "missing":
        specs = [dict(spec) for spec in results["left_out"]]
    else:
        bf16 = device.type == "cpu" or torch.cuda.is_bf16_supported()
        precisions = ["bf16", "fp32"] if bf16 else ["fp32"]
        base = {
            precision: [
                {"table": "base", "implementation": implementation, "precision": precision,
                 "compiled": compiled, "lengths": lengths_name(args), "batch_tokens": args.batch_tokens}
                for compiled in (False, True)
                for implementation in ("ours", "torch.nn.Transformer")
            ]
            for precision in precisions
        }
        recipe_precision = args.precision or ("bf16" if device.type == "cuda" and bf16 else "fp32")
        recipe = [{"table": "recipe", "recipe": name, "precision": recipe_precision, "compiled": compiled}
                  for compiled in (False, True) for name in args.recipes]
        specs = [*base[precisions[0]], *recipe, *(row for p in precisions[1:] for row in base[p])]
        specs = [spec for spec in specs if args.only in (None, spec["table"])]
    if args.warm_compile:
        return [spec for spec in specs if spec["compiled"]]
    return [spec for spec in specs if not measured(results, spec)]


def load_results(path: Path | None, tables: tuple[str, ...] = ("base", "recipe")) -> dict:
    """The result file's rows, or none; a file this script cannot extend is refused, not overwritten."""
    if path is None or not path.exists():
        return {**{table: [] for table in tables}, "left_out": []}
    results = json.loads(path.read_text(encoding="utf-8"))
    stale = [row for row in results.get("base", []) if "lengths" not in row]
    if stale or "hardware" in results:
        raise SystemExit(f"{path} was written before rows recorded their batches and machine: run "
                         f"`python benchmarks/gpu_training.py --rederive {path}` first")
    return results


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", choices=("base", "recipe", "missing"),
                        help="one of the two tables, or the rows --out's file lists as left out")
    parser.add_argument("--tiny", action="store_true", help="tiny models and batches: a smoke test")
    parser.add_argument("--lengths", choices=("corpus", "uniform"), default="corpus",
                        help="the base batches' lengths: the corpus's, or the first version's 10-50")
    parser.add_argument("--batch-tokens", type=int, default=25000, help="padded tokens per base-model batch")
    parser.add_argument("--base-steps", type=int, default=20, help="timed steps per base-model row")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps after the first")
    parser.add_argument("--recipes", nargs="+", default=["multi30k", "multi30k-gpu"])
    parser.add_argument("--recipe-tokens", type=int, default=None, help="change the recipe's max_tokens")
    parser.add_argument("--recipe-steps", type=int, default=300, help="timed steps of the recipe")
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16", "fp16"),
        default=None,
        help="the recipe's precision (default bf16 on a GPU that has it, else fp32)",
    )
    parser.add_argument("--data-dir", default=None, help="a folder with the Multi30k files")
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--minutes", type=float, default=None, help="start no row after this many minutes")
    parser.add_argument("--out", type=Path, default=None,
                        help="the JSON result file: its rows are kept, the missing ones added after each row")
    parser.add_argument(
        "--warm-compile",
        action="store_true",
        help="only compile every compiled row (a step each, nothing timed or written): fills inductor's "
        "caches on disk, so that a later run's first steps compile from them",
    )
    parser.add_argument("--rederive", type=Path, default=None, metavar="FILE",
                        help="add MFU on real tokens to FILE's rows measured before it was counted (CPU)")
    args = parser.parse_args(argv)
    if args.only == "missing" and (args.out is None or not args.out.exists()):
        parser.error("--only missing runs the rows that --out's file lists as left out: "
                     "give an --out that exists")
    if args.tiny:
        args.batch_tokens, args.base_steps, args.recipe_steps, args.warmup = 400, 2, 3, 1
    if args.warm_compile:
        args.base_steps, args.recipe_steps, args.warmup, args.out = 1, 1, 1, None
    return args


def describe_device(device: torch.device) -> dict:
    info = {"device": str(device), "torch": torch.__version__, "date": datetime.date.today().isoformat()}
    if device.type == "cuda":
        info.update(gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda)
    else:
        info["threads"] = torch.get_num_threads()
    return info


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    command = command_line("benchmarks/gpu_training.py", argv)
    if args.rederive is not None:
        return rederive(args.rederive, command)
    device = torch.device(args.device)
    configure_process(device)  # TF32 and no cuDNN attention kernel on a GPU, as for training (chapter 9)
    info = describe_device(device)
    print(", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    results = load_results(args.out)
    batches, data = {}, {}

    def measure(spec: dict) -> dict:
        fields = {k: v for k, v in spec.items() if k != "table"}
        if spec["table"] == "recipe":
            return recipe_row(args, device, fields, data)
        which = (spec["lengths"], spec["batch_tokens"])
        if which not in batches:
            batches[which] = base_batches(args, base_config(args), *which, data)
        return base_row(args, device, fields, batches[which])

    run_rows(planned_rows(args, device, results), results, measure, args, command, info)
    summarize(results)
    return results


def run_rows(plan: list[dict], results: dict, measure: Callable[[dict], dict], args, command: str,
             info: dict) -> None:
    """Measure each planned row, `measure(spec) -> row`, into `results[spec["table"]]` with the
    command and the machine; a row that would start after `args.minutes` goes to `left_out`.
    `args.out`, if given, is rewritten after every row: a run stopped early keeps what it did."""
    started = time.perf_counter()
    results["left_out"] = [spec for spec in results["left_out"] if spec not in plan]
    for spec in plan:
        if args.minutes is not None and time.perf_counter() - started > 60 * args.minutes:
            results["left_out"].append(spec)
            continue
        results.setdefault(spec["table"], []).append({**measure(spec), "command": command, "hardware": info})
        if args.out is not None:
            write_results(args.out, results)
    if args.out is not None:  # rows left out after the last one written
        write_results(args.out, results)


def write_results(path: Path, results: dict) -> None:
    atomic_write_text(path, json.dumps(results, indent=1, ensure_ascii=False) + "\n")


def summarize(results: dict) -> None:
    ours = [r for r in results["base"] if r["implementation"] == "ours"]
    if ours:
        best = max(ours, key=lambda r: r["tokens_per_s"])
        print(
            f"fastest of ours: {best['precision']} {'compiled' if best['compiled'] else 'eager'}, "
            f"{best['tokens_per_s']:,.0f} tok/s"
            + (f", MFU {100 * best['mfu']:.1f}% on real tokens" if best["mfu"] is not None
               else ", MFU not computed (unknown peak)")
        )
    for name in dict.fromkeys(r["recipe"] for r in results["recipe"]):
        rows = {r["compiled"]: r for r in results["recipe"] if r["recipe"] == name}
        if len(rows) == 2:
            eager, compiled = rows[False], rows[True]
            print(
                f"{name}: compiled / eager: {compiled['steps_per_s'] / eager['steps_per_s']:.2f}× the steps "
                f"per second, after {compiled['compile_s']:.0f} s of compilation"
            )
    if results["left_out"]:
        print(f"left out (out of time): {results['left_out']}")


# --- rows measured before MFU counted real tokens -----------------------------------------------

REDERIVED = ("timed_steps", "flops_per_token", "flops_per_s", "padding", "peak_tflops", "mfu")


def rederive(path: Path, command: str) -> dict:
    """Rows written by the first version (batches of `uniform` lengths, FLOPs of every padded
    position) get MFU on real tokens, exactly, without a GPU: their batches are replayed (the same
    seed and generator), each pair's model FLOPs counted on the CPU (`PairFlops`), and the FLOPs per
    real target token multiplied by the tokens per second the GPU measured. The replay is checked
    against what the GPU recorded (real tokens per step, FLOPs with padding) before anything is
    written. Each such row is labelled `rederived`, with this command."""
    old = json.loads(path.read_text(encoding="utf-8"))
    if "hardware" not in old:
        print(f"{path}: every row already counts real tokens; nothing to re-derive")
        return old
    args = parse_args(["--lengths", "uniform"])
    config = base_config(args)
    batches = uniform_batches(config, args.batch_tokens, 1 + args.warmup + args.base_steps)
    timed = batches[1 + args.warmup :]
    how = ("the FLOPs per real target token counted on the CPU (FlopCounterMode on meta tensors) over a "
           "replay of the GPU run's batches, times the real target tokens per second the GPU measured")
    base = []
    for row in old["base"]:
        implementation = row["implementation"]
        peak = peak_of_gpu(old["hardware"]["gpu"], row["precision"])
        fields = flop_fields(pair_flops(config, implementation), timed, row["tokens_per_s"], peak)
        check_replay(row, timed, fields)
        measured = {k: row[k] for k in ("steps_per_s", "tokens_per_s", "first_step_s", "step_s")}
        base.append({
            "implementation": implementation, "precision": row["precision"], "compiled": row["compiled"],
            "lengths": "uniform", "batch_tokens": args.batch_tokens, **measured, "timed_steps": len(timed),
            **fields, "flops_with_padding_per_s": row["flops_per_s"], "mfu_with_padding": row["mfu"],
            "command": old["command"], "command_written_by_hand": True, "hardware": old["hardware"],
            "rederived": {"fields": list(REDERIVED), "how": how, "command": command},
        })
    recipe = [{**row, "command": old["recipe_command"], "command_written_by_hand": True,
               "hardware": old["hardware"]} for row in old["recipe"]]
    left_out = [
        {"table": "base", "implementation": implementation, "precision": precision, "compiled": compiled,
         "lengths": "uniform", "batch_tokens": args.batch_tokens}
        for _, precision, compiled, implementation in old["left_out"]
    ]
    results = {"base": base, "recipe": recipe, "left_out": left_out}
    write_results(path, results)
    for row in base:
        print_base_row(row)
    return results


def check_replay(row: dict, timed: list[Batch], fields: dict) -> None:
    """Refuse unless the replayed batches are the ones the row was measured on: the same real
    target tokens per step, and the same FLOPs with padding per real token (exact up to rounding)."""
    per_step, replayed = row["tokens_per_s"] / row["steps_per_s"], sum(b.n_tokens for b in timed) / len(timed)
    padded = fields["flops_with_padding_per_s"] / row["flops_per_s"]
    if abs(per_step / replayed - 1) > 1e-9 or abs(padded - 1) > 1e-9:
        raise SystemExit(f"the replayed batches hold {replayed:,.2f} real target tokens per step and "
                         f"{padded:.6f} times the FLOPs with padding of the row ({per_step:,.2f} tokens per "
                         f"step): not the batches it was measured on; nothing written")


if __name__ == "__main__":
    main()
