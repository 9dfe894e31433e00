"""Where a training step of the paper's base model spends its time: `torch.profiler` over a few
steps of the step that `gpu_training.py` times (ours, bf16, 25,000-token batches with the corpus's
lengths as training batches them, compiled unless `--eager`), every kernel's device time grouped by
kind, and the share of the step in which the device was busy at all. A step the device is idle
for part of is held up by the host (Python, kernel launches); a busy one by its kernels, and the
kinds say which.

    python benchmarks/gpu_profile.py --data-dir DIR --out profile.json   # on a GPU: compiled bf16
    python benchmarks/gpu_profile.py --data-dir DIR --eager --out profile.json  # the eager step
    python benchmarks/gpu_profile.py --tiny --device cpu --compile-backend eager
                                                                    # a smoke test (CI): CPU operators

On the CPU there are no kernels: the operators' own CPU time is grouped instead, and "busy" is
their share of the step. The JSON holds the step's wall time (timed without the profiler, whose
bookkeeping slows the host), MFU on real tokens and with padding (`mfu.py`), the time per step of
each kind and the 25 longest kernels.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import gpu_training
import torch
from mfu import flop_fields, pair_flops, peak_record, step_function
from torch.profiler import ProfilerActivity, profile

from annotated_transformer.acceleration import configure_process
from annotated_transformer.helpers.files import atomic_write_text
from annotated_transformer.model import make_model
from annotated_transformer.regularization import LabelSmoothingLoss

# A kernel's kind: the first whose words its name contains (lower case). Names differ by library
# and version (cuBLAS's "nvjet_*" and "sm90_xmma_*", CUTLASS, Triton's "triton_*"), so these are
# words, not exact names; what no kind claims is counted as "other".
KINDS = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("matrix products", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "matmul", "aten::mm", "aten::bmm",
                         "aten::addmm", "aten::linear")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("fused (Triton)", ("triton",)),
    ("copies and fills", ("memcpy", "memset", "copy", "fill")),
    ("communication", ("nccl",)),
    ("element-wise and reductions", ("elementwise", "vectorized", "reduce", "softmax", "norm", "aten::")),
)


def kind_of(name: str) -> str:
    lowered = name.lower()
    return next((kind for kind, words in KINDS if any(word in lowered for word in words)), "other")


def device_events(prof, device: torch.device) -> list[tuple[str, int, float]]:
    """(name, calls, self time in µs) of every kernel (on a GPU) or operator (on the CPU)."""
    events = []
    for event in prof.key_averages():
        if device.type == "cuda":
            if event.device_type != torch.autograd.DeviceType.CUDA:
                continue
            microseconds = event.self_device_time_total
        else:
            microseconds = event.self_cpu_time_total
        if microseconds > 0:
            events.append((event.key, event.count, microseconds))
    return events


def profile_step(args, device: torch.device) -> dict:
    config = gpu_training.base_config(args)
    args.base_steps = 2 * args.steps  # timed, then profiled
    lengths = gpu_training.lengths_name(args)
    cpu_batches = gpu_training.base_batches(args, config, lengths, args.batch_tokens, {})
    batches = [batch.to(device) for batch in cpu_batches]
    torch.manual_seed(0)
    model = make_model(config).to(device).train()
    loss_of = step_function(model, "ours", LabelSmoothingLoss(config.tgt_vocab_size, 0.1))
    if not args.eager:
        loss_of = torch.compile(loss_of, backend=args.compile_backend, dynamic=True)
    step = gpu_training.training_step(model, lambda batch: loss_of(*batch.tensors()), device, args.precision)

    for batch in batches[: 1 + args.warmup]:  # the first compiles
        step(batch)
    timed, profiled = batches[1 + args.warmup : 1 + args.warmup + args.steps], batches[-args.steps :]
    gpu_training.synchronize(device)
    started = time.perf_counter()
    for batch in timed:
        step(batch)
    gpu_training.synchronize(device)
    step_ms = 1000 * (time.perf_counter() - started) / len(timed)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for batch in profiled:
            step(batch)
        gpu_training.synchronize(device)
    tokens_per_s = sum(batch.n_tokens for batch in timed) / (step_ms / 1000 * len(timed))
    peak = peak_record(device, args.precision, args.peak_tflops)
    timed_on_cpu = cpu_batches[1 + args.warmup : 1 + args.warmup + args.steps]
    flops = {**flop_fields(pair_flops(config), timed_on_cpu, tokens_per_s, peak["tflops"]), "peak": peak}
    return summarize(device_events(prof, device), args.steps, step_ms, flops)


def summarize(events, steps: int, step_ms: float, flops: dict, top: int = 25) -> dict:
    """Per step: the device's busy time, each kind's time and share of it, the longest kernels."""
    busy_ms = sum(us for _, _, us in events) / 1000 / steps
    kinds: dict[str, float] = {}
    for name, _, us in events:
        kinds[kind_of(name)] = kinds.get(kind_of(name), 0.0) + us / 1000 / steps
    longest = sorted(events, key=lambda event: -event[2])[:top]
    return {
        "step_ms": step_ms,
        "busy_ms": busy_ms,
        "busy_share": min(busy_ms / step_ms, 1.0),
        "tflops_per_s": flops["flops_per_s"] / 1e12,
        "mfu": flops["mfu"],
        "mfu_with_padding": flops["mfu_with_padding"],
        "padding": flops["padding"],
        "peak": flops["peak"],
        "kinds": [{"kind": kind, "ms": ms, "share": ms / busy_ms}
                  for kind, ms in sorted(kinds.items(), key=lambda item: -item[1])],
        "kernels": [{"name": name[:160], "kind": kind_of(name), "calls": calls / steps,
                     "ms": us / 1000 / steps, "share": us / 1000 / steps / busy_ms}
                    for name, calls, us in longest],
    }


def report(result: dict) -> str:
    lines = [f"step {result['step_ms']:.1f} ms, device busy {result['busy_ms']:.1f} ms "
             f"({100 * result['busy_share']:.0f}%), {result['tflops_per_s']:.1f} TFLOP/s"
             + (f", MFU {100 * result['mfu']:.1f}% on real tokens" if result["mfu"] else "")]
    lines += [f"  {row['kind']:28} {row['ms']:8.2f} ms  {100 * row['share']:5.1f}%"
              for row in result["kinds"]]
    lines += ["longest:"] + [
        f"  {row['ms']:8.2f} ms  {row['calls']:5.1f}×  {row['kind']:20} {row['name'][:90]}"
        for row in result["kernels"][:10]
    ]
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--eager", action="store_true", help="profile the eager step, not the compiled one")
    parser.add_argument("--batch-tokens", type=int, default=25000, help="padded tokens per batch")
    parser.add_argument("--lengths", choices=("corpus", "uniform"), default="corpus",
                        help="the batches' lengths, as in gpu_training.py")
    parser.add_argument("--data-dir", default=None, help="a folder with the Multi30k files")
    parser.add_argument("--steps", type=int, default=5, help="steps timed, then as many profiled")
    parser.add_argument("--warmup", type=int, default=3, help="steps after the first, before timing")
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--tiny", action="store_true", help="a tiny model and batches: a smoke test")
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON")
    args = parser.parse_args(argv)
    if args.tiny:
        args.batch_tokens, args.steps, args.warmup = 400, 2, 1
    return args


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    device = torch.device(args.device)
    configure_process(device)  # the process-wide settings of a program that trains (chapter 9)
    result = {
        "hardware": gpu_training.describe_device(device),
        "command": gpu_training.command_line("benchmarks/gpu_profile.py", argv),
        "step": {"model": "base", "implementation": "ours", "precision": args.precision,
                 "compiled": not args.eager, "batch_tokens": args.batch_tokens,
                 "lengths": gpu_training.lengths_name(args)},
        **profile_step(args, device),
    }
    print(report(result), flush=True)
    if args.out is not None:
        atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
