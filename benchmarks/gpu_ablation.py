"""The base model's training step, one lever at a time: what each change of the step that leaves
the model's mathematics as it is does to the MFU on real tokens (bf16, batches of 25,000 tokens
with Multi30k's lengths, `gpu_training.py`'s base model and its measures).

    python benchmarks/gpu_ablation.py --data-dir DIR --out ablation.json --minutes 7
                                                    # on a CUDA GPU: every lever, eager then compiled
    python benchmarks/gpu_ablation.py --data-dir DIR --out ablation.json --levers "real-rows loss"
                                                    # one lever's rows (a file keeps the others)
    python benchmarks/gpu_ablation.py --tiny --device cpu --compile-backend eager
                                                    # a smoke test of every lever (CI)

The levers (`LEVERS`), each alone on top of the step as training runs it (`baseline`: batches
sorted by source length as `batch_by_tokens` makes them, the loss over every padded position,
`torch.compile(dynamic=True)`, separate q, k, v projections, boolean masks):

- `bucketed`: batches sorted by target length first: the decoder and the output layer do most of
  the work per target token, so target padding costs more than source padding.
- `real-rows loss`: chapter 8's `projected_smoothed_loss` over the real target rows alone, in
  chunks: no padding row reaches the output layer, and no (rows, 37,000) table of float32
  log-probabilities is kept for the backward pass. The rows are chosen on the host when the batch
  is made (no step waits for the device).
- `fixed shapes`: a few batch shapes, (25,000 / L sentences, L, L) for L a multiple of 16, the
  sentences bucketed by their longer side; `torch.compile(dynamic=False, mode="reduce-overhead")`
  compiles each shape once and replays it as a CUDA graph (more padding, no launch overhead).
- `fused qkv`: one matrix product for q, k and v of self-attention, one for k and v of the
  encoder–decoder attention, with the three weights side by side.
- `causal attention`: the decoder's self-attention takes the causal flag instead of a boolean mask,
  and the encoder's and the encoder–decoder attention take no mask where the batch's sources have
  one length: the forms FlashAttention can run. The padding no longer hidden from the decoder is
  seen only by padding positions, whose outputs the loss ignores.
- `together`: bucketed, real-rows loss, fused qkv and causal attention at once.

Every lever computes the same loss and gradients as the baseline: tests/test_benchmarks.py checks
each on the CPU, tests/test_gpu.py with bf16 and the GPU's attention kernels. Rows run eager first
(seconds each), then compiled, in the order above; with `--minutes`, as in `gpu_training.py`,
later rows go to `left_out` and a later run adds them.
"""

import argparse
import dataclasses
import random
import sys
from collections.abc import Callable
from pathlib import Path

import gpu_training
import torch
import torch.nn.functional as F
from mfu import PairFlops, flop_fields, pair_flops, peak_record
from torch import Tensor

from annotated_transformer.acceleration import configure_process
from annotated_transformer.attention import padding_mask, target_mask
from annotated_transformer.batching import Batch, batch_by_tokens
from annotated_transformer.companions.chunked_loss import projected_smoothed_loss
from annotated_transformer.model import Transformer, TransformerConfig, make_model
from annotated_transformer.multi_head_attention import MultiHeadAttention
from annotated_transformer.regularization import LabelSmoothingLoss

LEVERS = (
    "baseline", "bucketed", "real-rows loss", "fixed shapes", "fused qkv", "causal attention", "together"
)
TOGETHER = ("bucketed", "real-rows loss", "fused qkv", "causal attention")
SMOOTHING = 0.1


def uses(lever: str, name: str) -> bool:
    return lever == name or (lever == "together" and name in TOGETHER)


# --- the batches --------------------------------------------------------------------------------


@dataclasses.dataclass
class StepBatch:
    """A batch and what the levers need to know about it, found on the host when it is made."""

    batch: Batch
    real_rows: Tensor  # flat indices of the real (non-padding) target positions
    uniform_source: bool  # every source the same length: no source padding to mask
    n_tokens: int

    @classmethod
    def of(cls, batch: Batch) -> "StepBatch":
        real_rows = (batch.tgt_out.flatten() != batch.pad).nonzero().flatten()
        source_lengths = (batch.src != batch.pad).sum(1)
        uniform = bool((source_lengths == batch.src.size(1)).all())
        return cls(batch, real_rows, uniform, batch.n_tokens)

    def to(self, device: torch.device) -> "StepBatch":
        return StepBatch(self.batch.to(device), self.real_rows.to(device), self.uniform_source, self.n_tokens)


def padded_to(batch: Batch, src_len: int, tgt_len: int) -> Batch:
    """The batch padded further, to `src_len` source and `tgt_len` target positions."""
    src = F.pad(batch.src, (0, src_len - batch.src.size(1)), value=batch.pad)
    tgt_in, tgt_out = (F.pad(t, (0, tgt_len - t.size(1)), value=batch.pad)
                       for t in (batch.tgt_in, batch.tgt_out))
    masks = padding_mask(src, batch.pad), target_mask(tgt_in, batch.pad)
    return Batch(src, tgt_in, tgt_out, *masks, batch.pad, batch.n_tokens)


def by_target_first(lengths: list[tuple[int, int]], batch_tokens: int, epoch: int) -> list[list[int]]:
    """`batch_by_tokens` sorted by target length, then source: the same token budget per batch."""
    # (t + 1, s - 1) as (source, target): batch_by_tokens bounds max(first, second + 1) = max(t + 1, s)
    return batch_by_tokens([(t + 1, s - 1) for s, t in lengths], batch_tokens, seed=0, epoch=epoch)


def fixed_shapes(lengths: list[tuple[int, int]], batch_tokens: int, step: int, epoch: int) -> list[list[int]]:
    """Batches of batch_tokens // L sentences whose longer side fits L, for L a multiple of `step`;
    each length bucket's last, partial batch left out (so that every batch has its bucket's shape);
    the first batch of each shape first, so that every shape is compiled before the timing."""
    buckets: dict[int, list[int]] = {}
    for i, (s, t) in enumerate(lengths):
        buckets.setdefault(-(-max(s, t + 1) // step) * step, []).append(i)
    rng = random.Random(f"fixed-shapes/{epoch}")
    shaped = []
    for size, members in sorted(buckets.items()):
        rng.shuffle(members)
        per_batch = max(1, batch_tokens // size)
        starts = range(0, len(members) - per_batch + 1, per_batch)
        shaped += [(size, members[i : i + per_batch]) for i in starts]
    rng.shuffle(shaped)
    firsts = {}
    for size, group in shaped:
        firsts.setdefault(size, group)
    return [*firsts.values(), *(group for size, group in shaped if firsts[size] is not group)]


def lever_batches(args, config: TransformerConfig, lever: str, data: dict) -> list[StepBatch]:
    """The row's batches on the CPU: as training makes them, bucketed by target, or of fixed shapes
    (then a few more, for the warm-up steps that compile each shape)."""
    n_batches = 1 + args.warmup + args.base_steps
    if lever != "fixed shapes" and not uses(lever, "bucketed"):
        lengths_name = gpu_training.lengths_name(args)
        batches = gpu_training.base_batches(args, config, lengths_name, args.batch_tokens, data)
        return [StepBatch.of(batch) for batch in batches]
    lengths = gpu_training.fitting(config, gpu_training.corpus_data(args, data)[1].lengths())
    if lever != "fixed shapes":
        groups = gpu_training.epochs(lambda e: by_target_first(lengths, args.batch_tokens, e), n_batches)
        return [StepBatch.of(batch) for batch in gpu_training.random_id_batches(config, lengths, groups)]
    n_batches += config.max_len // args.shape_step
    groups = gpu_training.epochs(lambda e: fixed_shapes(lengths, args.batch_tokens, args.shape_step, e),
                                 n_batches)
    batches = gpu_training.random_id_batches(config, lengths, groups)
    sizes = [-(-max(b.src.size(1), b.tgt_in.size(1)) // args.shape_step) * args.shape_step for b in batches]
    return [StepBatch.of(padded_to(batch, size, size)) for batch, size in zip(batches, sizes, strict=True)]


# --- the model and the loss ---------------------------------------------------------------------


class LeverAttention(MultiHeadAttention):
    """`MultiHeadAttention` with two levers, the same function: `fuse` projects q, k and v (or k and
    v, from the encoder's output) with one matrix product of the weights side by side; `causal`
    takes no mask, the causal flag alone, where the caller passes none (decoder self-attention)."""

    fuse = False
    causal = False

    def forward(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                cache=None) -> Tensor:
        if cache is not None or not (self.fuse or self.causal):
            return super().forward(query, key, value, mask, cache)
        q_size, v_size = self.n_heads * self.d_k, self.n_heads * self.d_v
        if self.fuse and query is key is value:
            qkv = self.projected(query, (self.w_q, self.w_k, self.w_v))
            q, k, v = qkv.split([q_size, q_size, v_size], -1)
        elif self.fuse and key is value:
            q = self.w_q(query)
            k, v = self.projected(key, (self.w_k, self.w_v)).split([q_size, v_size], -1)
        else:
            q, k, v = self.w_q(query), self.w_k(key), self.w_v(value)
        q, k = self._split_heads(q, self.d_k), self._split_heads(k, self.d_k)
        v = self._split_heads(v, self.d_v)
        dropout_p = self.dropout if self.training else 0.0
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=self.causal)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(1), dropout_p=dropout_p)
        return self.w_o(out.transpose(1, 2).reshape(query.size(0), query.size(1), v_size))

    @staticmethod
    def projected(x: Tensor, layers) -> Tensor:
        weight = torch.cat([layer.weight for layer in layers])
        bias = None if layers[0].bias is None else torch.cat([layer.bias for layer in layers])
        return F.linear(x, weight, bias)


def lever_model(config: TransformerConfig, lever: str) -> Transformer:
    """The base model (seed 0), its attention modules switched to the lever's forms."""
    torch.manual_seed(0)
    model = make_model(config)
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.__class__ = LeverAttention
            module.fuse = uses(lever, "fused qkv")
    if uses(lever, "causal attention"):
        for layer in model.decoder.layers:
            layer.self_attn.causal = True
    return model


def lever_loss(model: Transformer, lever: str, compile_fn: Callable) -> Callable[[StepBatch], Tensor]:
    """The summed label-smoothed loss of a batch, as the lever computes it."""
    causal = uses(lever, "causal attention")

    def inputs(b: StepBatch) -> tuple:
        batch = b.batch
        src_mask = None if causal and b.uniform_source else batch.src_mask
        return batch.src, batch.tgt_in, batch.tgt_out, src_mask, None if causal else batch.tgt_mask

    if uses(lever, "real-rows loss"):

        def real_rows(src, tgt_in, tgt_out, src_mask, tgt_mask, rows):
            hidden = model.decode(model.encode(src, src_mask), src_mask, tgt_in, tgt_mask)
            return hidden.flatten(0, 1).index_select(0, rows), tgt_out.flatten().index_select(0, rows)

        real_rows = compile_fn(real_rows)

        def loss(b: StepBatch) -> Tensor:
            hidden, target = real_rows(*inputs(b), b.real_rows)
            return projected_smoothed_loss(hidden, model.generator.proj.weight, target, SMOOTHING)[0]

        return loss
    criterion = LabelSmoothingLoss(model.config.tgt_vocab_size, SMOOTHING)

    def plain(src, tgt_in, tgt_out, src_mask, tgt_mask):
        return criterion.loss_and_nll(model(src, tgt_in, src_mask, tgt_mask), tgt_out)[0]

    plain = compile_fn(plain)
    if lever != "fixed shapes":
        return lambda b: plain(*inputs(b))

    def replayed(b: StepBatch) -> Tensor:
        torch.compiler.cudagraph_mark_step_begin()  # a new step: the last one's graph outputs are spent
        return plain(*inputs(b))

    return replayed


def compiler(args, lever: str, compiled: bool) -> Callable:
    if not compiled:
        return lambda fn: fn
    torch._dynamo.reset()  # a fresh cache for each row
    if lever != "fixed shapes":
        return lambda fn: torch.compile(fn, backend=args.compile_backend, dynamic=True)
    mode = {"mode": "reduce-overhead"} if args.compile_backend == "inductor" else {}
    return lambda fn: torch.compile(fn, backend=args.compile_backend, dynamic=False, **mode)


# --- the rows -----------------------------------------------------------------------------------


def lever_row(args, device: torch.device, spec: dict, batches: list[StepBatch], flops: PairFlops) -> dict:
    lever, config = spec["lever"], gpu_training.base_config(args)
    model = lever_model(config, lever).to(device).train()
    loss_of = lever_loss(model, lever, compiler(args, lever, spec["compiled"]))
    warmup = args.warmup
    if lever == "fixed shapes":  # every shape compiled before the timing
        warmup = max(warmup, len({b.batch.src.shape for b in batches}) - 1)
    batches = batches[: 1 + warmup + args.base_steps]
    step = gpu_training.training_step(model, loss_of, device, "bf16")
    result = gpu_training.time_steps(step, [b.to(device) for b in batches], device, warmup)
    timed = [b.batch for b in batches[1 + warmup :]]
    peak = peak_record(device, "bf16", args.peak_tflops)
    row = {**spec, **result, **flop_fields(flops, timed, result["tokens_per_s"], peak["tflops"]),
           "peak": peak}
    mode = "compiled" if row["compiled"] else "eager"
    print(f"{lever:18} {mode:8} {row['tokens_per_s']:>12,.0f} tok/s {row['steps_per_s']:7.2f} steps/s  "
          f"MFU {gpu_training.percent(row['mfu'])}  "
          f"padding {100 * row['padding']['flops']:4.1f}% of the FLOPs  "
          f"first step {row['first_step_s']:6.1f} s", flush=True)
    return row


def planned_rows(args, results: dict) -> list[dict]:
    """Eager rows first (seconds each), then compiled ones, each in the order of `LEVERS`."""
    specs = [{"table": "levers", "lever": lever, "compiled": mode == "compiled", "precision": "bf16",
              "lengths": gpu_training.lengths_name(args), "batch_tokens": args.batch_tokens}
             for mode in ("eager", "compiled") if mode in args.modes
             for lever in LEVERS if lever in args.levers]
    return [spec for spec in specs if not gpu_training.measured(results, spec)]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--levers", nargs="+", choices=LEVERS, default=list(LEVERS))
    parser.add_argument("--modes", nargs="+", choices=("eager", "compiled"), default=["eager", "compiled"])
    parser.add_argument("--tiny", action="store_true", help="a tiny model and batches: a smoke test")
    parser.add_argument("--batch-tokens", type=int, default=25000, help="padded tokens per batch")
    parser.add_argument("--base-steps", type=int, default=20, help="timed steps per row")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps after the first")
    parser.add_argument("--shape-step", type=int, default=16, help="fixed shapes: lengths a multiple of this")
    parser.add_argument("--data-dir", default=None, help="a folder with the Multi30k files")
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument("--minutes", type=float, default=None, help="start no row after this many minutes")
    parser.add_argument("--out", type=Path, default=None, help="the JSON result file (kept rows, added rows)")
    args = parser.parse_args(argv)
    args.lengths = "corpus"
    if args.tiny:
        args.batch_tokens, args.base_steps, args.warmup, args.shape_step = 400, 2, 1, 8
    return args


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    device = torch.device(args.device)
    configure_process(device)  # the process-wide settings of a program that trains (chapter 9)
    info = gpu_training.describe_device(device)
    print(", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    results = gpu_training.load_results(args.out, tables=("levers",))
    data, batches = {}, {}
    config = gpu_training.base_config(args)
    flops = pair_flops(config)

    def measure(spec: dict) -> dict:
        lever = spec["lever"]
        kind = "fixed" if lever == "fixed shapes" else "bucketed" if uses(lever, "bucketed") else "training"
        if kind not in batches:
            batches[kind] = lever_batches(args, config, lever, data)
        fields = {k: v for k, v in spec.items() if k != "table"}
        return lever_row(args, device, fields, batches[kind], flops)

    command = gpu_training.command_line("benchmarks/gpu_ablation.py", argv)
    gpu_training.run_rows(planned_rows(args, results), results, measure, args, command, info)
    return results


if __name__ == "__main__":
    main()
