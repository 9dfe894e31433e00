"""The GPU benchmark script runs end to end on the CPU in its tiny mode (a smoke test, not a
timing: speed figures come from running the script on the machine they describe)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import gpu_training


def test_the_gpu_benchmark_runs_every_row_in_tiny_mode(capsys):
    results = gpu_training.main(["--tiny", "--device", "cpu", "--compile-backend", "eager"])
    base, recipe = results["base"], results["recipe"]
    combinations = {(r["implementation"], r["precision"], r["compiled"]) for r in base}
    assert len(combinations) == len(base) == 8  # ours and torch.nn.Transformer × fp32, bf16 × eager, compiled
    assert all(r["tokens_per_s"] > 0 and r["flops_per_s"] > 0 and r["mfu"] is None for r in base)
    assert [r["compiled"] for r in recipe] == [False, True] and all(r["steps"] == 3 for r in recipe)
    out = capsys.readouterr().out
    assert "compiled / eager" in out and "fastest of ours" in out


def test_mfu_uses_the_named_peak():
    import torch

    assert gpu_training.peak_tflops(torch.device("cpu"), "bf16", None) is None
    assert gpu_training.peak_tflops(torch.device("cpu"), "bf16", 100.0) == 100.0
