"""The project's main job (`make main`): the paper's Table 3 parameter counts, then one forward pass.

    python tools/main_job.py

1. For every row of Table 3 that changes the model's size, print our parameter count (from the
   configuration, with the paper's shared 37000-token vocabulary) beside the paper's, in millions.
2. Build the base model with `make_model()`, run one forward pass on random tokens, and print the
   shape of the logits and the time it took.
"""

import time

import torch

from annotated_transformer import count_parameters, make_model, padding_mask, target_mask
from annotated_transformer.model import parameter_table


def print_parameter_table() -> None:
    rows = parameter_table()
    width = max(len(row["row"]) for row in rows)
    print("Parameter counts of the paper's Table 3 (shared vocabulary of 37000 tokens)")
    print()
    header = f"{'Table 3 row':<{width}}  {'ours':>12}  {'ours (M)':>8}  {'paper (M)':>9}"
    print(header)
    print("-" * len(header))
    for row in rows:
        paper = "-" if row["paper_millions"] is None else f"{row['paper_millions']:g}"
        ours = row["ours"]
        print(f"{row['row']:<{width}}  {ours:>12,}  {ours / 1e6:>8.1f}  {paper:>9}")
    print("-" * len(header))
    print("paper (M): Table 3's 'params x 10^6' column; '-' where the table leaves it blank.")


def forward_pass(batch: int = 2, src_len: int = 10, tgt_len: int = 9, pad: int = 0) -> None:
    torch.manual_seed(0)
    model = make_model()
    model.eval()
    config = model.config
    print()
    print(
        f"Base model: make_model() -> {count_parameters(model):,} trainable parameters "
        f"(N={config.n_layers}, d_model={config.d_model}, d_ff={config.d_ff}, h={config.n_heads})"
    )
    src = torch.randint(1, config.src_vocab_size, (batch, src_len))
    tgt = torch.randint(1, config.tgt_vocab_size, (batch, tgt_len))
    src[1, -3:] = pad  # the second source sentence is shorter: three padding tokens
    start = time.perf_counter()
    with torch.no_grad():
        logits = model(src, tgt, padding_mask(src, pad), target_mask(tgt, pad))
    elapsed = time.perf_counter() - start
    print(f"Forward pass: src {tuple(src.shape)}, tgt {tuple(tgt.shape)} -> logits {tuple(logits.shape)}")
    print(
        f"  (batch, tgt_len, tgt_vocab_size); all finite: {bool(torch.isfinite(logits).all())}; "
        f"{elapsed * 1000:.0f} ms on {torch.get_num_threads()} CPU thread(s)"
    )


if __name__ == "__main__":
    print_parameter_table()
    forward_pass()
