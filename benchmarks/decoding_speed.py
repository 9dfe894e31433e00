"""Decoding speed: key/value-cached greedy decoding against recomputing the prefix, and beam
search (beam 4, §6.1) against greedy decoding, on the same inputs.

A model with random weights would stop at a random end-of-sentence token, so every sentence is
made to generate exactly `--new-tokens` tokens: the end-of-sentence id is set to one the model
never produces, and the maximum length to the number of new tokens. Times are medians of
`--rounds` runs after one warm-up run.

    python benchmarks/decoding_speed.py
    python benchmarks/decoding_speed.py --d-model 512 --layers 6 --device cuda
"""

import argparse
import statistics
import time

import torch

from annotated_transformer.batching import PAD
from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.model import TransformerConfig, make_model


def median_seconds(function, rounds: int, device: torch.device) -> float:
    function()  # warm-up
    times = []
    for _ in range(rounds):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        function()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(d_model=256, layers=3, heads=4, d_ff=1024, vocab=8000, batch=32, src_len=24, new_tokens=64,
        beam_size=4, rounds=3, device="cpu", threads=None) -> dict:
    if threads:
        torch.set_num_threads(threads)
    device = torch.device(device)
    config = TransformerConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, n_layers=layers,
                               d_model=d_model, d_ff=d_ff, n_heads=heads, max_len=256)
    torch.manual_seed(0)
    model = make_model(config).to(device).eval()
    src = torch.randint(4, vocab, (batch, src_len), device=device)
    src[batch // 2 :, src_len - 4 :] = PAD  # half the sentences are shorter: padding is exercised
    never = vocab  # an id outside the vocabulary: no sentence ends early
    kwargs = {"max_len": new_tokens, "eos": never}

    def greedy(use_cache: bool):
        return lambda: greedy_decode(model, src, use_cache=use_cache, **kwargs)

    cached = median_seconds(greedy(True), rounds, device)
    uncached = median_seconds(greedy(False), rounds, device)
    beam = median_seconds(lambda: beam_search(model, src, beam_size=beam_size, **kwargs), rounds, device)
    out = greedy(True)()
    assert out.shape == (batch, new_tokens), out.shape
    return {
        "config": f"N={layers} d_model={d_model} h={heads} d_ff={d_ff} V={vocab}; batch {batch}, "
                  f"source {src_len} tokens, {new_tokens} new tokens",
        "greedy_cached_s": cached, "greedy_uncached_s": uncached, "cache_speedup": uncached / cached,
        "beam_s": beam, "beam_over_greedy": beam / cached, "beam_size": beam_size,
        "threads": torch.get_num_threads(), "device": str(device),
    }


def run_trained(model, batch: int = 32, rounds: int = 5, device="cpu") -> dict:
    """Greedy against beam search on a trained model, where sentences end at their own EOS."""
    from annotated_transformer.batching import copy_task, make_batch

    device = torch.device(device)
    model = model.to(device).eval()
    vocab = model.config.src_vocab_size
    src = make_batch(copy_task(batch, vocab_size=vocab, max_len=10, seed=123)).src.to(device)
    greedy = median_seconds(lambda: greedy_decode(model, src), rounds, device)
    beam = median_seconds(lambda: beam_search(model, src, beam_size=4), rounds, device)
    return {"config": f"batch {batch}, real end-of-sentence", "greedy_cached_s": greedy, "beam_s": beam,
            "beam_over_greedy": beam / greedy}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-ff", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    result = run(args.d_model, args.layers, args.heads, args.d_ff, args.vocab, args.batch,
                 new_tokens=args.new_tokens, beam_size=args.beam_size, rounds=args.rounds, device=args.device,
                 threads=args.threads)
    print(f"{result['config']}; {result['threads']} threads, {result['device']}")
    print(f"greedy, cached:      {result['greedy_cached_s'] * 1e3:8.0f} ms")
    print(f"greedy, uncached:    {result['greedy_uncached_s'] * 1e3:8.0f} ms   "
          f"cache speed-up {result['cache_speedup']:.1f}x (goal >= 4)")
    print(f"beam search (k={result['beam_size']}):  {result['beam_s'] * 1e3:8.0f} ms   "
          f"beam / greedy {result['beam_over_greedy']:.2f}x (goal <= 2.5)")


if __name__ == "__main__":
    main()
