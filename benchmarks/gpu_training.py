"""Training speed on a GPU: the paper's base model, ours against torch.nn.Transformer, eager and
compiled, in float32 (TF32 matrix products) and bfloat16; and a translation recipe trained by the
book's own Trainer on Multi30k, eager and compiled.

    python benchmarks/gpu_training.py --data-dir DIR     # on a CUDA GPU: both tables (minutes)
    python benchmarks/gpu_training.py --data-dir DIR --out bench.json --minutes 3
                                                         # the rows that fit in 3 minutes, as JSON
    python benchmarks/gpu_training.py --only recipe --device cpu --recipe-steps 40
                                                         # the recipe rows on the CPU
    python benchmarks/gpu_training.py --tiny --device cpu --compile-backend eager
                                                         # a smoke test of every code path (CI)

**Base model** (N = 6, d_model = 512, h = 8, d_ff = 2048, a shared vocabulary of 37,000, post-LN,
dropout 0.1) on batches of up to `--batch-tokens` padded tokens (25,000 as in §5.1) of random
token sequences 10 to 50 long; the batches are on the device before timing, so that this measures
the model, the loss and the optimizer (Adam, fused) and nothing else. Both models share this
package's embeddings, positional encodings, tied output projection and loss, so the comparison is
of the encoder–decoder stacks (`training_throughput.TorchReference`).

**Model FLOP utilization** (MFU) = model FLOPs per second / the device's dense peak. A step's
model FLOPs are 3 × the FLOPs of its forward pass, counted by PyTorch's `FlopCounterMode` on that
very batch (every matrix product, attention's and the output projection's included; the backward
pass costs twice the forward). Padding positions count: they are computed. Peaks: H100 SXM and
H200 989 TFLOP/s bf16 and 495 TFLOP/s TF32 (pass `--peak-tflops` for another device).

**Recipe**: `Trainer.fit` on the recipe's own model and token batches (chapter 14's pipeline,
pinned memory and non-blocking copies on a GPU), statistics read once at the end: optimizer steps
per second and real (non-padding) target tokens per second. The first step, which compiles, is
timed apart: "compile" is its time minus a steady step's.

Rows run in order of interest: bf16 first (the precision a GPU trains in), then the recipes, then
float32; with `--minutes`, a row that would start after that time is left out, and `--out` is
rewritten after every row, so that a run stopped early keeps the rows it finished.
"""

import argparse
import datetime
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_throughput import TorchReference

from annotated_transformer.acceleration import autocast_context, compile_forward_loss, use_fast_cuda_kernels
from annotated_transformer.batching import batch_by_tokens, make_batch
from annotated_transformer.data import corpus
from annotated_transformer.files import atomic_write_text
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.optimizer import make_optimizer
from annotated_transformer.recipes import get_recipe
from annotated_transformer.regularization import LabelSmoothingLoss
from annotated_transformer.tokenization import (
    build_vocabularies,
    encode_pairs,
    token_batches,
)
from annotated_transformer.training import TrainConfig, Trainer

PEAK_TFLOPS = {  # dense, per GPU: (bf16, tf32)
    "H100": (989.4, 494.7),
    "H200": (989.4, 494.7),
    "A100": (312.0, 156.0),
}


def peak_tflops(device: torch.device, precision: str, override: float | None) -> float | None:
    if override is not None:
        return override
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, (bf16, tf32) in PEAK_TFLOPS.items():
        if key in name:
            return bf16 if precision == "bf16" else tf32
    return None


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_batches(config: TransformerConfig, batch_tokens: int, n_batches: int, device: torch.device):
    """Batches of random sentences 10 to 50 tokens long, grouped by length (§5.1), on `device`."""
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
    return [make_batch([pairs[i] for i in indices]).to(device) for indices in order]


def step_function(model, implementation: str, criterion: LabelSmoothingLoss) -> Callable:
    """The loss of one batch: forward pass and label-smoothed loss, summed over the target tokens."""
    if implementation == "ours":

        def loss(src, tgt_in, tgt_out, src_mask, tgt_mask):
            return criterion.loss_and_nll(model(src, tgt_in, src_mask, tgt_mask), tgt_out)[0]
    else:

        def loss(src, tgt_in, tgt_out, src_mask, tgt_mask):
            return criterion.loss_and_nll(model(src, tgt_in), tgt_out)[0]

    return loss


def forward_flops(model, implementation: str, batch) -> int:
    criterion = LabelSmoothingLoss(model.config.tgt_vocab_size, 0.1)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        step_function(model, implementation, criterion)(*batch.tensors())
    return counter.get_total_flops()


def time_base_model(
    implementation: str,
    precision: str,
    compiled: bool,
    config: TransformerConfig,
    batches,
    device: torch.device,
    warmup: int,
    backend: str,
) -> dict:
    torch.manual_seed(0)
    model = (make_model(config) if implementation == "ours" else TorchReference(config)).to(device).train()
    criterion = LabelSmoothingLoss(config.tgt_vocab_size, 0.1)
    optimizer, scheduler = make_optimizer(model, config.d_model)
    loss_of = step_function(model, implementation, criterion)
    if compiled:
        loss_of = torch.compile(loss_of, backend=backend, dynamic=True)

    def step(batch) -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast_context(device, precision):
            loss = loss_of(*batch.tensors())
        (loss / batch.n_tokens).backward()
        optimizer.step()
        scheduler.step()

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
    flops = sum(3 * forward_flops(model, implementation, batch) for batch in timed)
    return {
        "steps_per_s": len(timed) / seconds,
        "tokens_per_s": sum(b.n_tokens for b in timed) / seconds,
        "flops_per_s": flops / seconds,
        "first_step_s": first,
        "step_s": seconds / len(timed),
    }


def base_config(args) -> TransformerConfig:
    if args.tiny:
        return TransformerConfig(
            src_vocab_size=300, tgt_vocab_size=300, n_layers=2, d_model=32, d_ff=64, n_heads=4, max_len=64
        )
    return TransformerConfig(src_vocab_size=37000, tgt_vocab_size=37000, max_len=64)


def base_row(
    args, device: torch.device, batches, precision: str, compiled: bool, implementation: str
) -> dict:
    """One row of the base-model table, printed."""
    config = base_config(args)
    result = time_base_model(
        implementation, precision, compiled, config, batches, device, args.warmup, args.compile_backend
    )
    peak = peak_tflops(device, precision, args.peak_tflops)
    result.update(
        implementation=implementation,
        precision=precision,
        compiled=compiled,
        mfu=result["flops_per_s"] / (peak * 1e12) if peak else None,
    )
    print_base_row(result, flush=True)
    return result


def print_base_row(row: dict, flush: bool = False) -> None:
    mfu = f"{100 * row['mfu']:5.1f}%" if row["mfu"] is not None else "    –"
    mode = "compiled" if row["compiled"] else "eager"
    print(
        f"{row['implementation']:21} {row['precision']:5} {mode:8} {row['tokens_per_s']:>12,.0f} tok/s "
        f"{row['steps_per_s']:7.2f} steps/s  {row['flops_per_s'] / 1e12:8.1f} TFLOP/s  MFU {mfu}  "
        f"first step {row['first_step_s']:6.1f} s",
        flush=flush,
    )


def recipe_batches(args, recipe):
    if args.tiny:
        pairs = corpus("builtin", "train")[:2000]
        vocabs = build_vocabularies(pairs, "word", min_freq=1)
    else:
        options = {"root": args.data_dir} if args.data_dir else {}
        pairs = corpus(recipe.corpus, "train", **options)
        vocabs = build_vocabularies(pairs, recipe.vocab, recipe.vocab_size, recipe.min_freq)
    return vocabs, encode_pairs(pairs, vocabs)


def time_recipe(args, device: torch.device, compiled: bool, vocabs, encoded, name: str) -> dict:
    recipe = get_recipe(name, max_tokens=args.recipe_tokens) if args.recipe_tokens else get_recipe(name)
    if args.tiny:
        recipe = get_recipe("builtin", n_layers=1, d_model=32, d_ff=64, max_tokens=400).replace(name=name)
    precision = args.precision or (
        "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    )
    epoch_batches = token_batches(encoded, recipe.max_tokens, seed=0, pin_memory=device.type == "cuda")
    torch.manual_seed(0)
    model = make_model(recipe.model_config(vocabs))
    steps = args.recipe_steps

    config = TrainConfig(
        max_steps=1 + args.warmup + steps,
        warmup=recipe.train.warmup,
        lr_factor=recipe.train.lr_factor,
        precision=precision,
        progress=False,
        log_every=0,
    )
    trainer = Trainer(model, config, device=device)
    if compiled:  # the Trainer's own compiled forward pass, with the backend asked for
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
        "recipe": recipe.name,
        "precision": precision,
        "compiled": compiled,
        "steps": len(history),
        "steps_per_s": len(history) / seconds,
        "tokens_per_s": sum(s.n_tokens for s in history) / seconds,
        "first_step_s": first,
        "compile_s": max(first - seconds / len(history), 0.0),
    }


def recipe_row(args, device: torch.device, data: dict, name: str, compiled: bool) -> dict:
    """One row of the recipe table, printed; `data` caches each vocabulary's encoded corpus."""
    recipe = get_recipe(name)
    key = (recipe.corpus, recipe.vocab, recipe.vocab_size, recipe.min_freq)
    if key not in data:
        data[key] = recipe_batches(args, recipe)
    row = time_recipe(args, device, compiled, *data[key], name)
    mode = "compiled" if compiled else "eager"
    print(
        f"recipe {row['recipe']:12} {row['precision']:5} {mode:8} {row['steps_per_s']:7.2f} steps/s "
        f"{row['tokens_per_s']:>10,.0f} real target tok/s  compile {row['compile_s']:6.1f} s "
        f"({row['steps']} steps timed)",
        flush=True,
    )
    return row


def planned_rows(args, device: torch.device) -> list[tuple[str, tuple]]:
    """Every row, in the order they run: ("base", (precision, compiled, implementation)) and
    ("recipe", (name, compiled)); bf16 first, then the recipes, then float32."""
    bf16 = device.type == "cpu" or torch.cuda.is_bf16_supported()
    precisions = ["bf16", "fp32"] if bf16 else ["fp32"]
    base = {
        precision: [
            ("base", (precision, compiled, implementation))
            for compiled in (False, True)
            for implementation in ("ours", "torch.nn.Transformer")
        ]
        for precision in precisions
    }
    recipe = [("recipe", (name, compiled)) for compiled in (False, True) for name in args.recipes]
    rows = [*base[precisions[0]], *recipe, *(row for p in precisions[1:] for row in base[p])]
    rows = [(kind, spec) for kind, spec in rows if args.only in (None, kind)]
    return [(kind, spec) for kind, spec in rows if spec[1]] if args.warm_compile else rows


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", choices=("base", "recipe"), help="one of the two tables")
    parser.add_argument("--tiny", action="store_true", help="tiny models and batches: a smoke test")
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
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON (after every row)")
    parser.add_argument(
        "--warm-compile",
        action="store_true",
        help="only compile every compiled row (a step each, nothing timed or written): fills inductor's "
        "caches on disk, so that a later run's first steps compile from them",
    )
    args = parser.parse_args(argv)
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
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        use_fast_cuda_kernels()  # TF32, and no cuDNN attention kernel, as the Trainer (chapter 9)
    info = describe_device(device)
    print(", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    started = time.perf_counter()
    results: dict = {"hardware": info, "command": " ".join(sys.argv), "base": [], "recipe": []}
    results["left_out"] = []
    base_batches, recipe_data = None, {}
    for kind, spec in planned_rows(args, device):
        if args.minutes is not None and time.perf_counter() - started > 60 * args.minutes:
            results["left_out"].append([kind, *spec])
            continue
        if kind == "base":
            if base_batches is None:
                base_batches = random_batches(
                    base_config(args), args.batch_tokens, args.base_steps + args.warmup + 1, device
                )
            results["base"].append(base_row(args, device, base_batches, *spec))
        else:
            results["recipe"].append(recipe_row(args, device, recipe_data, *spec))
        if args.out is not None:
            atomic_write_text(args.out, json.dumps(results, indent=1) + "\n")
    if args.out is not None and results["left_out"]:  # rows left out after the last one written
        atomic_write_text(args.out, json.dumps(results, indent=1) + "\n")
    summarize(results)
    return results


def summarize(results: dict) -> None:
    ours = [r for r in results["base"] if r["implementation"] == "ours"]
    if ours:
        best = max(ours, key=lambda r: r["tokens_per_s"])
        print(
            f"fastest of ours: {best['precision']} {'compiled' if best['compiled'] else 'eager'}, "
            f"{best['tokens_per_s']:,.0f} tok/s" + (f", MFU {100 * best['mfu']:.1f}%" if best["mfu"] else "")
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


if __name__ == "__main__":
    main()
