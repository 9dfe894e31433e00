"""The GPU benchmark script runs end to end on the CPU in its tiny mode (a smoke test, not a
timing: speed figures come from running the script on the machine they describe)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import gpu_training


def test_the_gpu_benchmark_runs_every_row_in_tiny_mode(capsys, tmp_path):
    out_file = tmp_path / "bench.json"
    options = ["--tiny", "--device", "cpu", "--compile-backend", "eager", "--out", str(out_file)]
    results = gpu_training.main(options)
    base, recipe = results["base"], results["recipe"]
    combinations = {(r["implementation"], r["precision"], r["compiled"]) for r in base}
    assert len(combinations) == len(base) == 8  # ours and torch.nn.Transformer × fp32, bf16 × eager, compiled
    assert [r["precision"] for r in base] == ["bf16"] * 4 + ["fp32"] * 4  # the GPU's precision first
    assert all(r["tokens_per_s"] > 0 and r["flops_per_s"] > 0 and r["mfu"] is None for r in base)
    assert [(r["recipe"], r["compiled"]) for r in recipe] == [
        ("multi30k", False), ("multi30k-gpu", False), ("multi30k", True), ("multi30k-gpu", True)
    ]
    assert all(r["steps"] == 3 for r in recipe) and results["left_out"] == []
    assert json.loads(out_file.read_text())["base"] == json.loads(json.dumps(base))
    out = capsys.readouterr().out
    assert "compiled / eager" in out and "fastest of ours" in out


def test_the_gpu_benchmark_leaves_out_the_rows_past_its_time(tmp_path):
    out = tmp_path / "bench.json"
    results = gpu_training.main(["--tiny", "--device", "cpu", "--only", "base", "--minutes", "0",
                                 "--out", str(out)])
    assert results["base"] == [] and results["recipe"] == []
    assert results["left_out"][0] == ["base", "bf16", False, "ours"] and len(results["left_out"]) == 8
    assert json.loads(out.read_text())["left_out"] == results["left_out"]  # the file says so too


def test_mfu_uses_the_named_peak():
    import torch

    assert gpu_training.peak_tflops(torch.device("cpu"), "bf16", None) is None
    assert gpu_training.peak_tflops(torch.device("cpu"), "bf16", 100.0) == 100.0


def test_the_dropout_benchmark_times_every_variant(capsys):
    import dropout_share

    (result,) = dropout_share.main(["--max-tokens", "200", "--pairs", "20", "--rounds", "1"])
    assert set(result["step_s"]) == set(dropout_share.VARIANTS)
    assert all(t > 0 for t in result["step_s"].values())
    assert all(share < 1 for share in result["share"].values())
    assert "dropout's share" in capsys.readouterr().out


def test_the_dropout_benchmark_replaces_every_positive_dropout():
    import dropout_share
    from torch import nn

    from annotated_transformer.layers import Dropout
    from annotated_transformer.model import TransformerConfig, make_model

    config = TransformerConfig(
        src_vocab_size=20, tgt_vocab_size=20, n_layers=1, d_model=16, d_ff=32, n_heads=2
    )
    model = dropout_share.with_dropouts(make_model(config), "nn.Dropout")
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout) and m.p > 0]
    assert dropouts and not any(isinstance(m, Dropout) for m in dropouts)
    model = dropout_share.with_dropouts(model, "no dropout")
    assert not any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules())
