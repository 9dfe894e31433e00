"""Every benchmark of the training and decoding chapters, with the four figures the README reports.

    python benchmarks/run_all.py            # about fifteen minutes on 2 CPU cores
    python benchmarks/run_all.py --device cuda

Speed goals live here, never in the tests: a timing depends on the machine.
"""

import argparse
import os
import platform

import copy_task
import data_pipeline
import decoding_speed
import torch
import training_throughput
import translation_speed

from annotated_transformer.data import DataError


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--run-dir", default="../book/runs/multi30k",
                        help="the trained Multi30k run to time translation with (chapter 14)")
    args = parser.parse_args()
    print(f"machine: {machine()}; device {args.device}")
    train = training_throughput.run(device=args.device, threads=args.threads)
    decode = decoding_speed.run(device=args.device, threads=args.threads)
    copy = copy_task.run(device=args.device, threads=args.threads or 1)
    trained = decoding_speed.run_trained(copy["model"], device=args.device)
    print("\n| Benchmark | Result | Goal |")
    print("|---|---|---|")
    print(f"| Training throughput, ours / `torch.nn.Transformer` ({train['config']}) | "
          f"{train['tokens_per_second']:,.0f} / {train['torch_tokens_per_second']:,.0f} target tokens/s "
          f"= **{train['ratio']:.2f}** | ≥ 1.0 |")
    print(f"| Training step with R-Drop (α {train['rdrop_alpha']:g}) / without, ours (chapter 8) | "
          f"{train['tokens_per_second']:,.0f} / {train['rdrop_tokens_per_second']:,.0f} target tokens/s "
          f"= **{train['rdrop_step_cost']:.2f}×** the cost | ≈ 2× (two passes) |")
    print(f"| Greedy decoding, cached vs uncached ({decode['config']}) | "
          f"{decode['greedy_cached_s'] * 1e3:,.0f} ms vs {decode['greedy_uncached_s'] * 1e3:,.0f} ms "
          f"= **{decode['cache_speedup']:.1f}×** | ≥ 4× |")
    print(f"| Beam search (beam {decode['beam_size']}) / greedy, same inputs | "
          f"{decode['beam_s'] * 1e3:,.0f} ms / {decode['greedy_cached_s'] * 1e3:,.0f} ms "
          f"= **{decode['beam_over_greedy']:.2f}×** | ≤ 2.5× |")
    print(f"| Beam search (beam 4) / greedy, the trained copy-task model ({trained['config']}) | "
          f"{trained['beam_s'] * 1e3:,.0f} ms / {trained['greedy_cached_s'] * 1e3:,.0f} ms "
          f"= **{trained['beam_over_greedy']:.2f}×** | ≤ 2.5× |")
    print(f"| Copy task to 100% held-out exact match ({copy['n_held_out']} sequences) | "
          f"**{copy['seconds']:.1f} s** ({copy['steps']} steps, {copy['threads']} threads) | ≤ 30 s |")
    try:  # the two Multi30k benchmarks need the data (cached or downloadable) and a trained run
        pipeline = data_pipeline.run(threads=args.threads)
        print(f"| Data pipeline on Multi30k, real target tokens/s, token batches vs 32 × 72 padded "
              f"({pipeline['config']}) | {pipeline['ours']:,.0f} / {pipeline['fixed']:,.0f} "
              f"= **{pipeline['ratio']:.1f}×** | ≥ 3× |")
        speed = translation_speed.run(args.run_dir, baseline_limit=200, threads=args.threads)
        print(f"| Translating the {speed['sentences']} test sentences (beam 4): batched and cached vs one at "
              f"a time uncached | {speed['batched_s']:.0f} s vs {speed['one_at_a_time_s']:.0f} s "
              f"= **{speed['speedup']:.1f}×** | ≥ 10× |")
    except (DataError, FileNotFoundError) as error:
        print(f"(Multi30k benchmarks skipped: {error})")


if __name__ == "__main__":
    main()
