"""Dropout's share of a CPU training step: `torch.nn.Dropout` against chapter 4's 16-bit `Dropout`.

The `multi30k` recipe's model (N=3, d_model 256, d_ff 512, h=4, a joint vocabulary of 4,000, P_drop
0.1) trains on random token batches three times over, rounds alternating: with its dropouts as
`torch.nn.Dropout` (32 random bits per component), as chapter 4's `Dropout` (16 bits), and with
every dropout replaced by the identity. A variant's dropout share is 1 - t(identity) / t(variant),
t the mean time of a training step (forward, loss, backward, Adam) over the batches. The identity
model computes a different function; only its time is used. Other programs on the machine slow
some steps down, never speed one up, so each batch counts with its fastest time over the rounds.

    python benchmarks/dropout_share.py                      # batches of 1,000 and 4,000 tokens
    python benchmarks/dropout_share.py --max-tokens 4000 --threads 2
"""

import argparse
import statistics
import time

import torch
from torch import nn
from training_throughput import make_batches

from annotated_transformer.layers import Dropout
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.optimizer import make_optimizer
from annotated_transformer.regularization import LabelSmoothingLoss

VARIANTS = ("nn.Dropout", "16-bit Dropout", "no dropout")


def with_dropouts(model: nn.Module, variant: str) -> nn.Module:
    """`model` with every dropout of positive P_drop replaced as `variant` says (in place)."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Dropout) and child.p > 0:
                replacement = {"nn.Dropout": nn.Dropout(child.p), "16-bit Dropout": Dropout(child.p),
                               "no dropout": nn.Identity()}[variant]
                setattr(parent, name, replacement)
    return model


def step_seconds(model: nn.Module, batches) -> list[float]:
    """Seconds of one training step on each of the batches, in order."""
    criterion = LabelSmoothingLoss(model.config.tgt_vocab_size, 0.1)
    optimizer, scheduler = make_optimizer(model, model.config.d_model)
    model.train()

    times = []
    for batch in batches:
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        (criterion(logits, batch.tgt_out) / batch.n_tokens).backward()
        optimizer.step()
        scheduler.step()
        times.append(time.perf_counter() - start)
    return times


def run(max_tokens: int = 1000, n_pairs: int = 600, rounds: int = 5, threads: int | None = None) -> dict:
    if threads:
        torch.set_num_threads(threads)
    config = TransformerConfig(src_vocab_size=4000, tgt_vocab_size=4000, n_layers=3, d_model=256,
                               d_ff=512, n_heads=4, dropout=0.1, max_len=256)
    batches = make_batches(config, n_pairs, max_tokens)
    models = {}
    for variant in VARIANTS:
        torch.manual_seed(0)
        models[variant] = with_dropouts(make_model(config), variant)
        step_seconds(models[variant], batches[:3])  # warm-up
    times = {variant: [] for variant in VARIANTS}
    for _ in range(rounds):  # alternate, so that every variant sees the same machine state
        for variant in VARIANTS:
            times[variant].append(step_seconds(models[variant], batches))
    step = {variant: statistics.mean(map(min, zip(*t, strict=True))) for variant, t in times.items()}
    return {
        "config": f"N=3 d_model=256 h=4 d_ff=512 V=4000 P_drop=0.1, {max_tokens}-token batches",
        "threads": torch.get_num_threads(), "batches": len(batches), "step_s": step,
        "share": {v: 1 - step["no dropout"] / step[v] for v in VARIANTS[:2]},
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[1000, 4000])
    parser.add_argument("--pairs", type=int, default=600, help="random sentence pairs batched per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    results = [run(tokens, args.pairs, args.rounds, args.threads) for tokens in args.max_tokens]
    print("| Batches | threads | nn.Dropout | 16-bit Dropout | no dropout | dropout's share: nn / 16-bit |")
    print("|---|---|---|---|---|---|")
    for r in results:
        ms = {v: f"{r['step_s'][v] * 1e3:.1f} ms" for v in VARIANTS}
        print(f"| {r['config']} | {r['threads']} | {ms['nn.Dropout']} | {ms['16-bit Dropout']} | "
              f"{ms['no dropout']} | {r['share']['nn.Dropout']:.1%} / {r['share']['16-bit Dropout']:.1%} |")
    return results


if __name__ == "__main__":
    main()
