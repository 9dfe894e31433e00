"""The GPU suite: what the book says of training on a CUDA GPU, checked on one (`pytest -m gpu`).

Skipped where PyTorch finds no CUDA GPU, so CI (CPUs only) skips it; a GPU run executes it first
(`experiments/gpu_finale.py` does) and its report is committed with the GPU results. Setting
ANNOTATED_TRANSFORMER_GPU_TEST_DEVICE=cpu runs the same code on the CPU, with the CUDA-only
checks left out: a way to try the suite before GPU time is spent on it.
"""

import os

# Deterministic cuBLAS workspaces (needed for exact repeats), set before CUDA starts in this process.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import contextlib
import random

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.acceleration import configure_process
from annotated_transformer.attention import attention
from annotated_transformer.checkpoints import CheckpointDirectory, read_checkpoint
from annotated_transformer.layers import Dropout
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.tokenization import EncodedPairs, token_batches
from annotated_transformer.training import TrainConfig, Trainer, read_steps

DEVICE = os.environ.get("ANNOTATED_TRANSFORMER_GPU_TEST_DEVICE", "cuda")
CUDA = DEVICE == "cuda"
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(CUDA and not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
VOCAB = 300


@pytest.fixture(autouse=True, scope="module")
def _process_settings():
    """These tests train as a program does: the process-wide settings first (chapter 9)."""
    configure_process(DEVICE)


def config(dropout: float = 0.1) -> TransformerConfig:
    """A small model with the recipes' dropout: the configuration users train, shrunk."""
    return TransformerConfig(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, n_layers=2, d_model=64, d_ff=128,
                             n_heads=4, dropout=dropout, max_len=128)


def random_pairs(n: int = 400, seed: int = 0) -> EncodedPairs:
    rng = random.Random(seed)

    def sentence() -> list[int]:
        return [rng.randrange(4, VOCAB) for _ in range(rng.randint(3, 40))]

    return EncodedPairs([sentence() for _ in range(n)], [sentence() for _ in range(n)])


def trainer(**changes) -> Trainer:
    torch.manual_seed(0)
    settings = dict(max_steps=40, warmup=10, log_every=0, progress=False, track_grad_norm=True)
    return Trainer(make_model(config()), TrainConfig(**{**settings, **changes}), device=DEVICE)


@contextlib.contextmanager
def sync_is_an_error(on: bool = True):
    """Within the block, an operation that makes the host wait for the GPU raises (CUDA only)."""
    if CUDA and on:
        torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        if CUDA:
            torch.cuda.set_sync_debug_mode("default")


def test_auto_precision_is_bf16_with_tf32_matrix_products():
    t = trainer()
    if CUDA:
        assert t.precision == ("bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16")
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert not torch.backends.cuda.cudnn_sdp_enabled()  # chapter 9's configure_process (the fixture)
        assert t.prefetch
    else:
        assert t.precision == "fp32" and not t.prefetch


def test_batches_are_pinned_and_copied_ahead():
    batches = token_batches(random_pairs(), 600, pin_memory=CUDA)(0)
    assert batches[0].src.is_pinned() == CUDA
    t = trainer()
    from annotated_transformer.training import _micro_batch_groups

    groups = list(_micro_batch_groups(batches, 0, 1, t.device, t.prefetch))  # what fit() iterates
    assert len(groups) == len(batches) and t.prefetch == CUDA
    assert all(b.src.device.type == torch.device(DEVICE).type for group in groups for b in group)


def test_training_steps_between_log_points_never_wait_for_the_gpu():
    """Chapter 9: between two log points, `fit` queues steps and never waits for the device.
    Steps 4 to 39 run with synchronization made an error; the first steps create cuBLAS handles
    and the last one is a log point, which reads the statistics on purpose."""
    t = trainer(max_steps=40)
    batches = token_batches(random_pairs(), 600, pin_memory=CUDA)
    switch = {3: True, 39: False}
    state = {"guard": contextlib.nullcontext()}

    def on_step(step: int) -> None:
        if step in switch:
            if switch[step]:
                state["guard"] = sync_is_an_error()
                state["guard"].__enter__()
            else:
                state["guard"].__exit__(None, None, None)

    try:
        history = t.fit(batches, on_step=on_step)
    finally:
        state["guard"].__exit__(None, None, None)
    assert [s.step for s in history] == list(range(1, 41))
    assert all(torch.isfinite(torch.tensor([s.loss, s.grad_norm])).all() for s in history)


@pytest.fixture
def one_rank_of_nccl():
    """A process group of one rank: enough to run chapter 15's code (all_reduce, the DDP wrapper)."""
    if not CUDA:
        pytest.skip("NCCL needs a CUDA GPU")
    import torch.distributed as dist

    port = random.Random().randrange(20000, 60000)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def ddp_trainer() -> tuple[Trainer, list]:
    """A trainer on the DDP path (`rank_and_world_size` sees one rank, so the wrapper is set by
    hand), and six micro-batches already on the GPU."""
    t = trainer()
    t.ddp = nn.parallel.DistributedDataParallel(t.model, device_ids=[torch.cuda.current_device()])
    batches = list(token_batches(random_pairs(), 600, pin_memory=True)(0))[:6]
    return t, [b.to(DEVICE, non_blocking=True) for b in batches]


def test_the_multi_process_token_count_never_waits_for_the_gpu(one_rank_of_nccl):
    """Under DDP a step's token count is summed over the ranks on the device, without a wait."""
    t, batches = ddp_trainer()
    t._global_tokens(batches[:2])  # warm-up: the NCCL communicator
    torch.cuda.synchronize()
    with sync_is_an_error():
        total = t._global_tokens(batches[2:4])
    assert total.device.type == "cuda" and int(total) == sum(b.n_tokens for b in batches[2:4])


def test_distributed_training_steps_never_wait_for_the_gpu(one_rank_of_nccl):
    """Whole steps on the DDP path (gradient accumulation, the wrapper's all_reduce) without a wait."""
    t, batches = ddp_trainer()
    # Warm-up: handles, the communicator, and DDP's one rebuild of its gradient buckets, which it
    # does (and waits for) at the start of the second step.
    pending = [t.train_step_async(batches[:2]), t.train_step_async(batches[2:4])]
    torch.cuda.synchronize()
    with sync_is_an_error():
        pending += [t.train_step_async(batches[4:6]), t.train_step_async(batches[:2])]
    records = read_steps(pending, sum_over_ranks=True)
    assert [r.n_tokens for r in records[2:]] == [sum(b.n_tokens for b in batches[i : i + 2]) for i in (4, 0)]


def test_dropout_is_torch_dropout_on_the_gpu():
    """Chapter 4's Dropout draws its own 16-bit masks on the CPU only; on a GPU it is nn.Dropout."""
    x = torch.randn(64, 512, device=DEVICE)
    layer = Dropout(0.1).train()
    torch.manual_seed(1)
    ours = layer(x)
    torch.manual_seed(1)
    theirs = nn.functional.dropout(x, 0.1, training=True)
    if CUDA:
        assert torch.equal(ours, theirs)
    kept = (ours != 0).float().mean().item()
    assert 0.88 < kept < 0.92


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fully_masked_rows_give_zeros_not_nan(dtype):
    """A query that may attend to no key gets zeros from chapter 2's `attention` and from the
    kernels of `scaled_dot_product_attention` that MultiHeadAttention runs (math, memory-efficient),
    and never NaN from any kernel. cuDNN's kernel (off in training: `use_fast_cuda_kernels`) gives
    such a row the mean of the values: finite, not zero. The model's own masks never block a
    whole row (every query sees at least one real key), so only direct callers meet this."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not CUDA and dtype == torch.float16:
        pytest.skip("float16 attention is for the GPU")
    q, k, v = (torch.randn(2, 4, 5, 16, device=DEVICE, dtype=dtype) for _ in range(3))
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool, device=DEVICE)
    mask[1, :, 2, :] = False  # sentence 2, query 3 sees nothing
    outputs = {"attention()": attention(q, k, v, mask)[0]}
    fused = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION] if CUDA else []
    for backend in [SDPBackend.MATH, *fused]:
        try:
            with sdpa_kernel(backend):
                outputs[backend.name] = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        except RuntimeError:  # this kernel does not take a boolean mask of this shape, or this dtype
            continue
    assert "MATH" in outputs and ("EFFICIENT_ATTENTION" in outputs or not CUDA), sorted(outputs)
    for name, out in outputs.items():
        assert torch.isfinite(out).all(), name
        if name != "CUDNN_ATTENTION":
            assert torch.equal(out[1, :, 2], torch.zeros_like(out[1, :, 2])), name


def test_fp16_training_resumes_exactly_with_its_gradient_scaler(tmp_path):
    """fp16 needs a gradient scaler; its state (scale, growth tracker) goes into the checkpoint, so
    that a resumed run continues exactly as the uninterrupted one would have."""
    if not CUDA:
        pytest.skip("fp16 training needs a CUDA GPU")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.use_deterministic_algorithms(True, warn_only=True)
    with sdpa_kernel(SDPBackend.MATH):  # the fused kernels' backward passes add in any order
        batches = token_batches(random_pairs(), 600, pin_memory=True)

        def fp16(steps: int) -> Trainer:
            return trainer(max_steps=steps, precision="fp16", checkpoint_every=6)

        whole = fp16(12)
        whole.fit(batches)
        halves, checkpoints = fp16(6), CheckpointDirectory(tmp_path / "halves")
        halves.fit(batches, on_checkpoint=lambda: checkpoints.save(halves))
        assert halves.scaler.is_enabled() and read_checkpoint(checkpoints.paths()[-1])["state"]["scaler"]
        resumed = fp16(12)
        assert checkpoints.resume_newest(resumed)[0].name == "step_00000006.pt"
        assert resumed.scaler.state_dict() == halves.scaler.state_dict()
        resumed.fit(batches)
    torch.use_deterministic_algorithms(False)
    assert resumed.scaler.state_dict() == whole.scaler.state_dict()
    for a, b in zip(whole.model.state_dict().values(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_compiled_training_compiles_at_most_twice_over_many_batch_shapes():
    """Chapter 9: the compiled forward pass and loss mark batch and length dynamic, so batches of
    every shape reuse one graph (a second one at most, when a dimension first differs from 1),
    in training mode with the recipes' dropout and gradients on."""
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    t = trainer(max_steps=200)
    from annotated_transformer.acceleration import compile_forward_loss

    t.forward_loss = compile_forward_loss(t._forward_loss, backend=counting_backend)
    pairs = random_pairs(2000, seed=1)
    shapes = set()
    for epoch in range(10):
        for batch in token_batches(pairs, 300 + 37 * epoch, seed=epoch)(epoch):
            shapes.add((tuple(batch.src.shape), tuple(batch.tgt_in.shape)))
            t.train_step([batch])
            if len(shapes) >= 200:
                break
        if len(shapes) >= 200:
            break
    assert len(shapes) >= 200
    assert 1 <= len(graphs) <= 2, f"{len(graphs)} graphs for {len(shapes)} batch shapes"


@pytest.mark.parametrize("lever", ["real-rows loss", "fused qkv", "causal attention", "together"])
def test_the_step_levers_keep_the_loss_and_gradients_with_the_gpus_kernels(lever):
    """benchmarks/gpu_ablation.py: each lever gives the baseline's loss and gradients also where
    bf16 autocast and the GPU's fused attention kernels (FlashAttention for the causal flag and
    no mask) run, to bf16's precision; the CPU tests (tests/test_benchmarks.py) check it exactly."""
    import dataclasses

    import gpu_ablation  # benchmarks/ is on pytest's pythonpath (pyproject.toml)

    from annotated_transformer.acceleration import autocast_context
    from annotated_transformer.batching import make_batch

    cfg = dataclasses.replace(config(dropout=0.0), n_heads=4, d_model=64)
    generator = torch.Generator().manual_seed(0)
    pairs = [(torch.randint(4, VOCAB, (12,), generator=generator).tolist(),
              torch.randint(4, VOCAB, (t,), generator=generator).tolist()) for t in (5, 11, 8, 3)]
    batch = gpu_ablation.StepBatch.of(make_batch(pairs)).to(torch.device(DEVICE))
    assert batch.uniform_source  # so that "causal attention" drops every mask

    def loss_and_gradient(which: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss, and the gradient of every parameter in one vector (some, such as the keys'
        biases, are zero but for rounding: compared alone, their rounding would be all there is)."""
        model = gpu_ablation.lever_model(cfg, which).to(DEVICE).train()
        with autocast_context(torch.device(DEVICE), "bf16"):
            loss = gpu_ablation.lever_loss(model, which, lambda fn: fn)(batch)
        gradients = torch.autograd.grad(loss, list(model.parameters()))
        return loss.float(), torch.cat([g.float().flatten() for g in gradients])

    (loss, gradient), (lever_loss, lever_gradient) = loss_and_gradient("baseline"), loss_and_gradient(lever)
    assert torch.allclose(loss, lever_loss, rtol=1e-2), (lever, loss.item(), lever_loss.item())
    error = ((gradient - lever_gradient).norm() / gradient.norm()).item()
    assert error < 2e-2, (lever, error)  # bf16 products: equal to bf16's rounding
