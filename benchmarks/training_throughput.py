"""Training throughput: this package's Transformer against torch.nn.Transformer.

Both models have the same configuration (post-LN, ReLU, LayerNorm eps 1e-6, dropout 0.1) and the
same embeddings, positional encodings and tied output projection (this package's modules), so
the comparison is of the encoder–decoder stacks. Both train on the same token-based batches with
the same loss (label smoothing 0.1) and optimizer (Adam, §5.3 schedule), alternating model by
model over several rounds on the same machine in one run. Reported: real (non-pad) target tokens
per second, median over rounds. A third row is this package's model with chapter 8's R-Drop (each
batch through the model twice, `--rdrop-alpha`, default 5), the cost per step of that lever; the other
lever for a small corpus, BPE-dropout, costs nothing per step (it changes the data, once an epoch).

    python benchmarks/training_throughput.py              # the default (CPU-sized) configuration
    python benchmarks/training_throughput.py --d-model 512 --layers 6 --device cuda
"""

import argparse
import statistics
import time

import torch
from torch import Tensor, nn

from annotated_transformer.batching import batch_by_tokens, make_batch
from annotated_transformer.layers import Embeddings, Generator, PositionalEncoding
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.optimizer import make_optimizer
from annotated_transformer.regularization import LabelSmoothingLoss, rdrop_forward_loss


class TorchReference(nn.Module):
    """torch.nn.Transformer between this package's embeddings and generator."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = Embeddings(config.src_vocab_size, config.d_model)
        self.src_pos = PositionalEncoding(config.d_model, config.max_len, config.dropout)
        self.tgt_pos = PositionalEncoding(config.d_model, config.max_len, config.dropout)
        self.core = nn.Transformer(
            d_model=config.d_model, nhead=config.n_heads, num_encoder_layers=config.n_layers,
            num_decoder_layers=config.n_layers, dim_feedforward=config.d_ff, dropout=config.dropout,
            layer_norm_eps=config.layer_norm_eps, batch_first=True, norm_first=False,
        )
        # nn.Transformer always adds a final LayerNorm to each stack; the paper's post-LN does not.
        self.core.encoder.norm = nn.Identity()
        self.core.decoder.norm = nn.Identity()
        self.generator = Generator(config.d_model, config.tgt_vocab_size)
        self.generator.proj.weight = self.embed.lut.weight

    def forward(self, src: Tensor, tgt: Tensor, pad: int = 0) -> Tensor:
        size = tgt.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(size, device=tgt.device, dtype=torch.bool)
        out = self.core(
            self.src_pos(self.embed(src)), self.tgt_pos(self.embed(tgt)), tgt_mask=causal, tgt_is_causal=True,
            src_key_padding_mask=src == pad, tgt_key_padding_mask=tgt == pad,
            memory_key_padding_mask=src == pad,
        )
        return self.generator(out)


def make_batches(config: TransformerConfig, n_pairs: int, max_tokens: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(8, 40, (n_pairs, 2), generator=generator).tolist()
    pairs = [
        (torch.randint(4, config.src_vocab_size, (s,), generator=generator).tolist(),
         torch.randint(4, config.tgt_vocab_size, (t,), generator=generator).tolist())
        for s, t in lengths
    ]
    order = batch_by_tokens([(len(s), len(t)) for s, t in pairs], max_tokens, seed=seed)
    return [make_batch([pairs[i] for i in indices]) for indices in order]


def train_tokens_per_second(model: nn.Module, loss_of, batches, device: torch.device) -> float:
    """Target tokens per second of Adam steps on `batches`, `loss_of(model, batch, criterion)` the
    summed loss of a batch."""
    criterion = LabelSmoothingLoss(model.config.tgt_vocab_size, 0.1)
    optimizer, scheduler = make_optimizer(model, model.config.d_model)
    model.train()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start, tokens = time.perf_counter(), 0
    for batch in batches:
        batch = batch.to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(model, batch, criterion) / batch.n_tokens
        loss.backward()
        optimizer.step()
        scheduler.step()
        tokens += batch.n_tokens
    if device.type == "cuda":
        torch.cuda.synchronize()
    return tokens / (time.perf_counter() - start)


def ours_loss(model, batch, criterion):
    return criterion(model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask), batch.tgt_out)


def torch_loss(model, batch, criterion):
    return criterion(model(batch.src, batch.tgt_in), batch.tgt_out)


def rdrop_loss_of(alpha: float):
    """Our model's loss with R-Drop (chapter 8): the batch twice, in one call, as the Trainer does."""

    def loss_of(model, batch, criterion):
        inputs = (batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        return rdrop_forward_loss(model, inputs, batch.tgt_out, criterion, alpha)[0]

    return loss_of


def run(d_model=256, layers=3, heads=4, d_ff=1024, vocab=8000, max_tokens=2000, n_pairs=400,
        rounds=3, device="cpu", threads=None, rdrop_alpha=5.0) -> dict:
    if threads:
        torch.set_num_threads(threads)
    device = torch.device(device)
    config = TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, n_layers=layers,
                               d_model=d_model, d_ff=d_ff, n_heads=heads, dropout=0.1, max_len=256)
    torch.manual_seed(0)
    ours = make_model(config).to(device)
    theirs = TorchReference(config).to(device)
    n_ours = sum(p.numel() for p in ours.parameters())
    n_theirs = sum(p.numel() for p in theirs.parameters())
    batches = make_batches(config, n_pairs, max_tokens)
    runs = {"ours": (ours, ours_loss), "torch": (theirs, torch_loss),
            "rdrop": (ours, rdrop_loss_of(rdrop_alpha))}
    for model, loss_of in runs.values():  # warm-up
        train_tokens_per_second(model, loss_of, batches[:3], device)
    results = {name: [] for name in runs}
    for _ in range(rounds):  # alternate, so that all see the same machine state
        for name, (model, loss_of) in runs.items():
            results[name].append(train_tokens_per_second(model, loss_of, batches, device))
    ours_tps, torch_tps = statistics.median(results["ours"]), statistics.median(results["torch"])
    rdrop_tps = statistics.median(results["rdrop"])
    return {
        "config": f"N={layers} d_model={d_model} h={heads} d_ff={d_ff} V={vocab}, {max_tokens}-token batches",
        "parameters": (n_ours, n_theirs), "batches": len(batches),
        "tokens_per_second": ours_tps, "torch_tokens_per_second": torch_tps, "ratio": ours_tps / torch_tps,
        "rdrop_alpha": rdrop_alpha, "rdrop_tokens_per_second": rdrop_tps,
        "rdrop_step_cost": ours_tps / rdrop_tps,
        "threads": torch.get_num_threads(), "device": str(device),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-ff", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--max-tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--rdrop-alpha", type=float, default=5.0,
                        help="R-Drop's alpha for its row (default 5)")
    args = parser.parse_args()
    result = run(args.d_model, args.layers, args.heads, args.d_ff, args.vocab, args.max_tokens,
                 rounds=args.rounds, device=args.device, threads=args.threads, rdrop_alpha=args.rdrop_alpha)
    print(f"{result['config']}; {result['batches']} batches, {result['threads']} threads, {result['device']}")
    print(f"parameters: ours {result['parameters'][0]:,}, torch.nn.Transformer {result['parameters'][1]:,}")
    print(f"ours:                 {result['tokens_per_second']:,.0f} target tokens/s")
    print(f"torch.nn.Transformer: {result['torch_tokens_per_second']:,.0f} target tokens/s")
    print(f"ratio ours / torch:   {result['ratio']:.2f}  (goal >= 1.0)")
    print(f"ours with R-Drop:     {result['rdrop_tokens_per_second']:,.0f} target tokens/s (alpha "
          f"{result['rdrop_alpha']:g}): a step costs {result['rdrop_step_cost']:.2f} times as much")


if __name__ == "__main__":
    main()
