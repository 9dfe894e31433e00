"""The data pipeline: real target tokens per second of training on Multi30k, with the book's
pipeline against one that pads every sentence to a fixed length.

- **ours** (chapter 13): the corpus tokenized and numericalized once (`cached_encode_pairs`),
  then batches of about `--max-tokens` padded tokens of sentences of similar lengths (§5.1);
- **fixed**: the pipeline of many older tutorials: 32 random sentences a batch, each tokenized
  with spaCy and looked up in the vocabulary when its batch is made, padded to 72 tokens.

Both train the same model (the `multi30k` recipe's) with the same optimizer, loss and machine for
`--steps` optimizer steps after one warm-up step; the figure is real (non-padding) target tokens
per second, the tokens a model actually learns from.

    python benchmarks/data_pipeline.py                    # Multi30k from the cache (or downloads)
    python benchmarks/data_pipeline.py --data-dir DIR     # a local folder with the raw files
"""

import argparse
import random
import tempfile
import time

import torch

from annotated_transformer.acceleration import configure_process
from annotated_transformer.attention import padding_mask, target_mask
from annotated_transformer.batching import BOS, EOS, PAD, Batch
from annotated_transformer.companions.corpus_cache import cached_encode_pairs
from annotated_transformer.data import corpus
from annotated_transformer.model import make_model
from annotated_transformer.recipes import get_recipe
from annotated_transformer.tokenization import build_vocabularies, token_batches
from annotated_transformer.training import TrainConfig, Trainer


def fixed_length_batch(texts, vocabs, length: int) -> Batch:
    """Tokenize and look up a batch of (German, English) texts now, and pad every row to `length`."""
    source = vocabs.source.encode_batch([s for s, _ in texts])
    target = vocabs.target.encode_batch([t for _, t in texts])

    def pad(rows):
        return torch.tensor([row[:length] + [PAD] * (length - len(row[:length])) for row in rows])

    src = pad(source)
    tgt_in = pad([[BOS, *row][:length] for row in target])
    tgt_out = pad([[*row, EOS][:length] for row in target])
    return Batch(src, tgt_in, tgt_out, padding_mask(src, PAD), target_mask(tgt_in, PAD), PAD)


def tokens_per_second(trainer: Trainer, make_batches, steps: int) -> tuple[float, float]:
    trainer.train_step([make_batches(0)])  # warm-up
    start, tokens = time.perf_counter(), 0
    for step in range(1, steps + 1):
        tokens += trainer.train_step([make_batches(step)]).n_tokens
    seconds = time.perf_counter() - start
    return tokens / seconds, seconds


def run(
    steps: int = 30,
    max_tokens: int = 2500,
    fixed_length: int = 72,
    sentences: int = 32,
    threads: int | None = None,
    corpus_options: dict | None = None,
    device: str = "cpu",
) -> dict:
    if threads:
        torch.set_num_threads(threads)
    recipe = get_recipe("multi30k")
    pairs = corpus("multi30k", "train", **(corpus_options or {}))
    vocabs = build_vocabularies(pairs, recipe.vocab, recipe.vocab_size, recipe.min_freq)
    with tempfile.TemporaryDirectory() as cache:
        started = time.perf_counter()
        encoded = cached_encode_pairs(pairs, vocabs, cache)
        encode_seconds = time.perf_counter() - started
    config = recipe.model_config(vocabs)
    train_config = TrainConfig(warmup=recipe.train.warmup, lr_factor=recipe.train.lr_factor, progress=False,
                               log_every=0)

    ours = token_batches(encoded, max_tokens, seed=0)(0)
    torch.manual_seed(0)
    ours_rate, _ = tokens_per_second(
        Trainer(make_model(config), train_config, device=device), lambda i: ours[i], steps
    )
    order = list(range(len(pairs)))
    random.Random(0).shuffle(order)

    def fixed(i: int) -> Batch:
        return fixed_length_batch(
            [pairs[j] for j in order[i * sentences : (i + 1) * sentences]], vocabs, fixed_length
        )

    torch.manual_seed(0)
    fixed_rate, _ = tokens_per_second(
        Trainer(make_model(config), train_config, device=device), fixed, steps
    )
    return {
        "ours": ours_rate,
        "fixed": fixed_rate,
        "ratio": ours_rate / fixed_rate,
        "steps": steps,
        "encode_seconds": encode_seconds,
        "config": f"N={config.n_layers}, d_model={config.d_model}, d_ff={config.d_ff}, "
        f"V={config.src_vocab_size}, max_tokens={max_tokens} vs {sentences}×{fixed_length}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--steps", type=int, default=30, help="timed optimizer steps per pipeline (default 30)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=2500, help="our batches' padded size (default 2500)"
    )
    parser.add_argument("--data-dir", default=None, help="a local folder with the Multi30k raw files")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    configure_process(args.device)  # the process-wide settings of a program that trains (chapter 9)
    options = {"root": args.data_dir} if args.data_dir else {}
    result = run(
        args.steps, args.max_tokens, threads=args.threads, corpus_options=options, device=args.device
    )
    print(f"{result['config']}; {result['steps']} steps each")
    print(f"encoding the training set once: {result['encode_seconds']:.1f} s")
    print(f"ours:  {result['ours']:,.0f} real target tokens/s")
    print(f"fixed: {result['fixed']:,.0f} real target tokens/s")
    print(f"ratio: {result['ratio']:.2f}x (goal >= 3)")


if __name__ == "__main__":
    main()
