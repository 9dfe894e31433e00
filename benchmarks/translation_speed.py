"""Translating a test set: the book's `Translator` (sentences sorted by length, batched, with the
key/value cache) against decoding one sentence at a time without a cache, both with the paper's
beam search (beam 4, α = 0.6), on the same trained model and machine.

    python benchmarks/translation_speed.py                        # the run of chapter 14
    python benchmarks/translation_speed.py RUN_DIR --limit 200    # another run, fewer sentences

The one-at-a-time baseline is slow; `--baseline-limit` times it on the first sentences only and
scales its time to the whole set (it is linear in the number of sentences).
"""

import argparse
import time
from pathlib import Path

import torch

from annotated_transformer.data import corpus
from annotated_transformer.decoding import beam_search
from annotated_transformer.translator import Translator


def run(
    run_dir: str | Path = "book/runs/multi30k",
    limit: int = 1000,
    baseline_limit: int = 1000,
    threads: int | None = None,
    corpus_options: dict | None = None,
) -> dict:
    if threads:
        torch.set_num_threads(threads)
    translator = Translator.load(run_dir, device="cpu")
    recipe_corpus = "multi30k" if "multi30k" in str(run_dir) else "builtin"
    pairs = corpus(recipe_corpus, "test", **(corpus_options or {}))[:limit]
    sources = translator.vocabs.source.encode_batch([s for s, _ in pairs])
    translator.translate_ids(sources[:50])  # warm-up: first calls allocate and start threads
    start = time.perf_counter()
    batched = translator.translate_ids(sources)
    batched_seconds = time.perf_counter() - start
    n_baseline = min(baseline_limit, len(sources))
    start = time.perf_counter()
    agree = 0
    with torch.no_grad():
        for i in range(n_baseline):
            src = torch.tensor([sources[i]])
            out = beam_search(
                translator.model, src, beam_size=translator.beam_size, alpha=translator.alpha, use_cache=False
            )[0]
            agree += [t for t in out if t > 2] == batched[i]
    baseline_seconds = (time.perf_counter() - start) * len(sources) / n_baseline
    return {
        "sentences": len(sources),
        "batched_s": batched_seconds,
        "one_at_a_time_s": baseline_seconds,
        "speedup": baseline_seconds / batched_seconds,
        "baseline_measured": n_baseline,
        "agreement": agree / n_baseline,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "run_dir", nargs="?", default="book/runs/multi30k", help="a run directory (chapter 14)"
    )
    parser.add_argument("--limit", type=int, default=1000, help="test sentences to translate (default 1000)")
    parser.add_argument(
        "--baseline-limit",
        type=int,
        default=1000,
        help="time the one-at-a-time baseline on this many sentences and scale (default 1000)",
    )
    parser.add_argument("--data-dir", default=None, help="a local folder with the Multi30k raw files")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    options = {"root": args.data_dir} if args.data_dir else {}
    r = run(args.run_dir, args.limit, args.baseline_limit, args.threads, options)
    print(f"{r['sentences']} sentences, beam 4")
    print(f"batched, cached:              {r['batched_s']:.1f} s")
    print(
        f"one at a time, no cache:      {r['one_at_a_time_s']:.1f} s "
        f"(measured on {r['baseline_measured']} sentences)"
    )
    print(f"speed-up: {r['speedup']:.1f}x (goal >= 10); same output on {r['agreement']:.1%} of the sentences")


if __name__ == "__main__":
    main()
