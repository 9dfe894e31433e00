"""The GPU benchmark scripts run end to end on the CPU in their tiny mode (a smoke test, not a
timing: speed figures come from running the scripts on the machine they describe); their FLOP
counts are exact; the committed GPU rows are what the code derives from them; and every lever of
the step's ablation computes the baseline's loss and gradients."""

import dataclasses
import json
from importlib.resources import files
from pathlib import Path

import gpu_ablation  # benchmarks/ is on pytest's pythonpath (pyproject.toml)
import gpu_training
import mfu
import pytest
import torch
import training_throughput

from annotated_transformer.batching import make_batch

BENCH = files("annotated_transformer") / "results" / "gpu" / "bench.json"
TINY = ["--tiny", "--device", "cpu", "--compile-backend", "eager"]
RECORDS = ("command", "command_written_by_hand", "hardware")  # what a row records of its run


def test_the_gpu_benchmark_runs_every_row_in_tiny_mode_and_adds_the_missing_ones(capsys, tmp_path):
    out_file = tmp_path / "bench.json"
    # the first row alone, the rest left out by the time limit; then just those
    first = gpu_training.main([*TINY, "--out", str(out_file), "--minutes", "0.002"])
    assert len(first["base"]) == 1 and len(first["left_out"]) == 11
    results = gpu_training.main([*TINY, "--only", "missing", "--out", str(out_file)])
    assert results["base"][0] == json.loads(json.dumps(first["base"][0]))  # kept, not measured again
    assert results["left_out"] == [] and json.loads(out_file.read_text()) == json.loads(json.dumps(results))
    again = gpu_training.main([*TINY, "--out", str(out_file)])  # every row there: none measured again
    assert json.loads(json.dumps(again)) == json.loads(json.dumps(results))
    base, recipe = results["base"], results["recipe"]
    combinations = {(r["implementation"], r["precision"], r["compiled"]) for r in base}
    assert len(combinations) == len(base) == 8  # ours and torch.nn.Transformer × fp32, bf16 × eager, compiled
    assert {r["precision"] for r in base[:4]} == {"bf16"}  # the GPU's precision first
    assert all(r["lengths"] == "builtin" and r["tokens_per_s"] > 0 and r["flops_per_s"] > 0 for r in base)
    assert all(r["mfu"] is None and r["mfu_with_padding"] is None for r in base)  # no peak on a CPU
    assert all(r["peak"] == {"source": "unknown peak", "model": None, "tflops": None,
                             "precision": r["precision"], "device": "cpu"} for r in base)
    assert all(r["flops_per_s"] <= r["flops_with_padding_per_s"] for r in base)
    assert [(r["recipe"], r["compiled"]) for r in recipe] == [
        ("multi30k", False), ("multi30k-gpu", False), ("multi30k", True), ("multi30k-gpu", True)
    ]
    assert all(r["steps"] == 3 for r in recipe)
    assert base[0]["command"].endswith("--minutes 0.002") and "--only missing" in base[1]["command"]
    assert all(r["hardware"]["device"] == "cpu" for r in base + recipe)
    out = capsys.readouterr().out
    assert "compiled / eager" in out and "fastest of ours" in out


def test_the_gpu_benchmark_leaves_out_the_rows_past_its_time(tmp_path):
    out = tmp_path / "bench.json"
    results = gpu_training.main(["--tiny", "--device", "cpu", "--only", "base", "--minutes", "0",
                                 "--out", str(out)])
    assert results["base"] == [] and results["recipe"] == []
    assert results["left_out"][0] == {"table": "base", "implementation": "ours", "precision": "bf16",
                                      "compiled": False, "lengths": "builtin", "batch_tokens": 400}
    assert len(results["left_out"]) == 8
    assert json.loads(out.read_text())["left_out"] == results["left_out"]  # the file says so too
    with pytest.raises(SystemExit):
        gpu_training.parse_args(["--only", "missing", "--out", str(tmp_path / "absent.json")])


def test_mfu_uses_the_named_peak():
    assert mfu.peak_tflops(torch.device("cpu"), "bf16", None) is None
    assert mfu.peak_tflops(torch.device("cpu"), "bf16", 100.0) == 100.0
    assert mfu.peak_record(torch.device("cpu"), "bf16", 100.0)["source"] == "--peak-tflops"
    assert mfu.peak_record(torch.device("cpu"), "bf16", None) == {
        "source": "unknown peak", "model": None, "tflops": None, "precision": "bf16", "device": "cpu"}


GPU_NAMES = {  # names as torch.cuda.get_device_name gives them: the model, its dense bf16 and TF32 peaks
    "NVIDIA H100 80GB HBM3": ("H100 SXM", 989.4, 494.7),
    "NVIDIA H100 PCIe": ("H100 PCIe", 756.5, 378.0),
    "NVIDIA H100 NVL": ("H100 NVL", 835.5, 417.5),
    "NVIDIA H200": ("H200 SXM", 989.4, 494.7),
    "NVIDIA H200 NVL": ("H200 NVL", 835.5, 417.5),
    "NVIDIA A100-SXM4-80GB": ("A100 SXM", 312.0, 156.0),
    "NVIDIA A100-SXM4-40GB": ("A100 SXM", 312.0, 156.0),
    "NVIDIA A100-PCIE-40GB": ("A100 PCIe", 312.0, 156.0),
    "NVIDIA A100 80GB PCIe": ("A100 PCIe", 312.0, 156.0),
}
UNKNOWN_GPUS = [
    "NVIDIA GH200 480GB",  # "H200" inside another name
    "NVIDIA H800", "NVIDIA H20", "NVIDIA L4", "Tesla V100-SXM2-16GB", "NVIDIA GeForce RTX 4090",
    "NVIDIA H100",  # which H100: SXM, PCIe or NVL? not guessed
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb",  # a slice of one
]


@pytest.mark.parametrize("name", GPU_NAMES)
def test_each_gpu_model_has_its_own_peak(name):
    model, bf16, tf32 = GPU_NAMES[name]
    assert mfu.gpu_model(name) == model and mfu.PEAK_TFLOPS[model] == (bf16, tf32)
    assert mfu.peak_of_gpu(name, "bf16") == mfu.peak_of_gpu(name, "fp16") == bf16
    assert mfu.peak_of_gpu(name, "fp32") == tf32  # TF32 matrix products


@pytest.mark.parametrize("name", UNKNOWN_GPUS)
def test_a_gpu_the_table_does_not_hold_gets_no_peak_and_no_mfu(name, monkeypatch, capsys):
    assert mfu.gpu_model(name) is None and mfu.peak_of_gpu(name, "bf16") is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    peak = mfu.peak_record(torch.device("cuda"), "bf16", None)
    assert peak == {"source": "unknown peak", "model": None, "tflops": None, "precision": "bf16",
                    "device": name}
    config = gpu_training.base_config(gpu_training.parse_args(["--tiny"]))
    batches = [make_batch([([5] * 7, [6] * 3)])]
    fields = mfu.flop_fields(mfu.pair_flops(config), batches, 1000.0, peak["tflops"])
    assert fields["mfu"] is None and fields["mfu_with_padding"] is None and fields["flops_per_s"] > 0
    row = {"implementation": "ours", "precision": "bf16", "compiled": False, "tokens_per_s": 1000.0,
           "steps_per_s": 1.0, "first_step_s": 1.0, **fields, "peak": peak}
    gpu_training.print_base_row(row)  # the benchmark's row and summary say so
    gpu_training.summarize({"base": [row], "recipe": [], "left_out": []})
    printed = capsys.readouterr().out.splitlines()
    assert f"MFU unknown peak ({name})" in printed[0] and "%" not in printed[0]
    assert printed[1].endswith("MFU not computed (unknown peak)")


def test_a_known_gpu_is_recorded_with_its_model_and_peak(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")
    assert mfu.peak_record(torch.device("cuda"), "bf16", None) == {
        "source": "PEAK_TFLOPS", "model": "H100 PCIe", "tflops": 756.5, "precision": "bf16",
        "device": "NVIDIA H100 PCIe"}
    given = mfu.peak_record(torch.device("cuda"), "bf16", 700.0)  # --peak-tflops wins over the table
    assert given["source"] == "--peak-tflops" and given["tflops"] == 700.0


def test_the_committed_gpu_rows_used_the_peak_of_their_gpu():
    committed = json.loads(BENCH.read_text(encoding="utf-8"))
    for row in committed["base"]:
        gpu = row["hardware"]["gpu"]
        assert mfu.gpu_model(gpu) == "H200 SXM"
        assert row["peak_tflops"] == mfu.peak_of_gpu(gpu, row["precision"]) == 989.4
        assert row["mfu"] == pytest.approx(row["flops_per_s"] / (row["peak_tflops"] * 1e12), rel=1e-12)


@pytest.mark.parametrize("implementation", ["ours", "torch.nn.Transformer"])
def test_pair_flops_are_flop_counter_modes_counts(implementation):
    config = gpu_training.base_config(gpu_training.parse_args(["--tiny"]))
    flops = mfu.PairFlops(config, implementation)
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 40, (5, 2), generator=generator).tolist()
    for s, t in lengths:  # one unpadded pair: the counter's own count
        assert flops(s, t) == flops.count(s, t)
    batch = make_batch([([5] * s, [6] * (t - 1)) for s, t in lengths])
    real, padded = mfu.batch_flops(flops, batch)
    assert padded == 3 * mfu.forward_flops(flops.model, implementation, batch.to("meta"))  # padded positions
    assert real == 3 * sum(flops(s, t) for s, t in lengths) < padded


def test_mfu_is_mfu_with_padding_less_the_share_of_padding():
    config = gpu_training.base_config(gpu_training.parse_args(["--tiny"]))
    batches = [make_batch([([5] * 7, [6] * 3), ([5] * 2, [6] * 9)]), make_batch([([5] * 4, [6] * 4)] * 3)]
    fields = mfu.flop_fields(mfu.PairFlops(config), batches, tokens_per_s=1000.0, peak=1e-6)
    assert fields["mfu"] == pytest.approx(fields["mfu_with_padding"] * (1 - fields["padding"]["flops"]))
    assert fields["padding"]["target"] == pytest.approx(1 - (4 + 10 + 15) / (2 * 10 + 3 * 5))
    assert fields["padding"]["source"] == pytest.approx(1 - (7 + 2 + 12) / (2 * 7 + 3 * 4))
    assert fields["flops_per_s"] == pytest.approx(fields["flops_per_token"] * 1000.0)


def first_version(committed: dict) -> dict:
    """The committed file as the first version of the benchmark wrote it, before MFU counted real
    tokens (its GPU measurements only)."""
    base, recipe = committed["base"], committed["recipe"]
    return {
        "hardware": base[0]["hardware"], "command": base[0]["command"],
        "base": [{**{k: row[k] for k in ("steps_per_s", "tokens_per_s", "first_step_s", "step_s",
                                         "implementation", "precision", "compiled")},
                  "flops_per_s": row["flops_with_padding_per_s"], "mfu": row["mfu_with_padding"]}
                 for row in base if "rederived" in row],
        "recipe": [{k: v for k, v in row.items() if k not in RECORDS}
                   for row in recipe if row.get("command_written_by_hand")],
        "left_out": [["base", spec["precision"], spec["compiled"], spec["implementation"]]
                     for spec in committed["left_out"] if spec["lengths"] == "uniform"],
        "recipe_command": recipe[0]["command"],
    }


def test_the_committed_gpu_rows_carry_the_mfu_the_code_rederives(tmp_path):
    committed = json.loads(BENCH.read_text(encoding="utf-8"))
    rederived = [row for row in committed["base"] if "rederived" in row]
    command = "python benchmarks/gpu_training.py --rederive"
    assert rederived and all(row["rederived"]["command"].startswith(command) for row in rederived)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(first_version(committed)))
    again = gpu_training.main(["--rederive", str(path)])
    assert [{k: v for k, v in row.items() if k != "rederived"} for row in again["base"]] == [
        {k: v for k, v in row.items() if k != "rederived"} for row in rederived]
    assert all(0 < row["mfu"] < row["mfu_with_padding"] for row in rederived)


def test_a_replay_that_is_not_the_measured_batches_is_refused(tmp_path):
    old = first_version(json.loads(BENCH.read_text(encoding="utf-8")))
    old["base"][0]["steps_per_s"] *= 1.01  # 1% more real tokens per step than the replay holds
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(old))
    with pytest.raises(SystemExit, match="not the batches it was measured on"):
        gpu_training.main(["--rederive", str(path)])
    assert json.loads(path.read_text()) == old  # nothing written
    with pytest.raises(SystemExit, match="--rederive"):  # and no new rows are added to such a file
        gpu_training.load_results(path)


def test_the_results_page_and_the_readme_quote_the_mfu_of_bench_json():
    root = Path(__file__).resolve().parent.parent
    page, readme = (root / "book" / "results.md").read_text(), (root / "README.md").read_text()
    committed = json.loads(BENCH.read_text(encoding="utf-8"))
    for row in committed["base"]:
        mfu, with_padding = f"{100 * row['mfu']:.1f}%", f"{100 * row['mfu_with_padding']:.1f}%"
        assert f"| {row['tokens_per_s']:,.0f} | {row['steps_per_s']:.2f} | {mfu} | {with_padding} |" in page
    compiled = next(r for r in committed["base"] if r["implementation"] == "ours" and r["compiled"])
    assert f"an MFU of {100 * compiled['mfu']:.1f}%" in readme
    assert f"({100 * compiled['mfu_with_padding']:.1f}% counting the padding" in readme


# --- the ablation of the step ---------------------------------------------------------------------


def lever_problem(uniform_source: bool):
    """A batch (a uniform source length, or not), and the tiny base configuration without dropout."""
    args = gpu_ablation.parse_args(["--tiny", "--device", "cpu"])
    config = dataclasses.replace(gpu_training.base_config(args), dropout=0.0)
    generator = torch.Generator().manual_seed(1)
    sources = [7, 7, 7] if uniform_source else [7, 3, 5]
    pairs = [(torch.randint(4, 300, (s,), generator=generator).tolist(),
              torch.randint(4, 300, (t,), generator=generator).tolist())
             for s, t in zip(sources, [6, 2, 9], strict=True)]
    return config, gpu_ablation.StepBatch.of(make_batch(pairs))


def lever_loss_and_gradients(config, lever: str, batch) -> list[torch.Tensor]:
    model = gpu_ablation.lever_model(config, lever).train()
    loss = gpu_ablation.lever_loss(model, lever, lambda fn: fn)(batch)
    return [loss, *torch.autograd.grad(loss, list(model.parameters()))]


@pytest.mark.parametrize("uniform_source", [True, False])
@pytest.mark.parametrize("lever", ["real-rows loss", "fused qkv", "causal attention", "together"])
def test_every_lever_computes_the_baselines_loss_and_gradients(lever, uniform_source):
    config, batch = lever_problem(uniform_source)
    assert batch.uniform_source == uniform_source
    baseline = lever_loss_and_gradients(config, "baseline", batch)
    for a, b in zip(baseline, lever_loss_and_gradients(config, lever, batch), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_batches_padded_to_a_fixed_shape_give_the_same_loss_and_gradients():
    config, batch = lever_problem(uniform_source=False)
    padded = gpu_ablation.StepBatch.of(gpu_ablation.padded_to(batch.batch, 16, 16))
    assert padded.batch.src.shape == padded.batch.tgt_in.shape == (3, 16)
    assert padded.n_tokens == batch.n_tokens
    for a, b in zip(lever_loss_and_gradients(config, "baseline", batch),
                    lever_loss_and_gradients(config, "baseline", padded), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_fixed_shapes_and_target_first_batches_hold_every_pair_once():
    generator = torch.Generator().manual_seed(0)
    lengths = [tuple(x) for x in torch.randint(1, 30, (500, 2), generator=generator).tolist()]
    groups = gpu_ablation.fixed_shapes(lengths, 400, 16, epoch=0)
    sizes = [max(max(lengths[i][0], lengths[i][1] + 1) for i in group) for group in groups]
    shapes = {(len(group), -(-size // 16) * 16) for group, size in zip(groups, sizes, strict=True)}
    assert shapes == {(25, 16), (12, 32)}  # 400 // 16 and 400 // 32 sentences, one shape per bucket
    assert {len(group) for group in groups[:2]} == {25, 12}  # each shape first, before the timing
    flat = [i for group in groups for i in group]
    assert len(flat) == len(set(flat)) > 450  # each bucket's last, partial batch left out
    by_target = gpu_ablation.by_target_first(lengths, 400, epoch=0)
    assert sorted(i for group in by_target for i in group) == list(range(500))
    assert all(len(g) * max(max(lengths[i][0], lengths[i][1] + 1) for i in g) <= 400 for g in by_target)


def test_the_ablation_runs_every_lever_in_tiny_mode(tmp_path):
    out = tmp_path / "ablation.json"
    eager = gpu_ablation.main([*TINY, "--out", str(out), "--modes", "eager"])["levers"]
    assert [row["lever"] for row in eager] == list(gpu_ablation.LEVERS)
    assert not any(row["compiled"] for row in eager)
    assert all(row["tokens_per_s"] > 0 and row["padding"]["flops"] >= 0 for row in eager)
    # compiled rows added to the file: the fixed shapes' static compilation, and every lever at once
    results = gpu_ablation.main([*TINY, "--out", str(out), "--levers", "fixed shapes", "together"])
    assert results["levers"][: len(eager)] == json.loads(json.dumps(eager))  # kept, not measured again
    assert [(r["lever"], r["compiled"]) for r in results["levers"][len(eager) :]] == [
        ("fixed shapes", True), ("together", True)]
    assert json.loads(out.read_text()) == json.loads(json.dumps(results))


# --- the other benchmarks -----------------------------------------------------------------------


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


def test_the_training_throughput_benchmark_times_r_drop_beside_the_plain_step():
    result = training_throughput.run(d_model=32, layers=1, heads=2, d_ff=64, vocab=60, max_tokens=300,
                                     n_pairs=30, rounds=1, rdrop_alpha=5.0)
    assert result["rdrop_alpha"] == 5.0
    assert result["rdrop_tokens_per_second"] > 0 and result["tokens_per_second"] > 0
    assert result["rdrop_step_cost"] == result["tokens_per_second"] / result["rdrop_tokens_per_second"]
