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


def test_the_profile_of_a_step_groups_its_time_by_kind(tmp_path):
    import gpu_profile

    out = tmp_path / "profile.json"
    result = gpu_profile.main(["--tiny", "--device", "cpu", "--compile-backend", "eager", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["step"]["compiled"] and result["step"]["precision"] == "bf16"
    assert 0 < result["busy_ms"] and 0 < result["busy_share"] <= 1
    assert abs(sum(row["share"] for row in result["kinds"]) - 1) < 1e-6
    kinds = {row["kind"] for row in result["kinds"]}
    assert {"matrix products", "attention"} <= kinds  # the CPU's aten::mm and its attention operators
    assert result["kernels"] == sorted(result["kernels"], key=lambda row: -row["ms"])


def test_gpu_kernels_are_sorted_into_kinds_by_their_names():
    import gpu_profile

    kinds = {  # names of the kernels a bf16 step runs on an H100 (cuBLAS, PyTorch, Triton)
        "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT": "matrix products",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "matrix products",
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)": "attention",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>": "attention",
        "triton_per_fused__to_copy_add_native_layer_norm_0": "fused (Triton)",
        "void at::native::multi_tensor_apply_kernel<at::native::FusedAdamMathFunctor>": "optimizer",
        "Memcpy HtoD (Pageable -> Device)": "copies and fills",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>":
            "copies and fills",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>": "element-wise and reductions",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL": "communication",
        "void some_new_library_kernel<128>": "other",
    }
    assert {name: gpu_profile.kind_of(name) for name in kinds} == kinds
