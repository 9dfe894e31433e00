"""Model FLOP utilization (MFU) as PaLM defines it, and nanoGPT and llm.c compute it: the model
FLOPs of the real (non-padding) tokens a step trains on, per second, over the device's dense peak.

A sentence pair's model FLOPs are 3 × the FLOPs of its forward pass alone, unpadded (the backward
pass costs twice the forward), as PyTorch's `FlopCounterMode` counts them: every matrix product,
attention's and the output projection's included (the decoder's causal attention counted whole, as
PaLM counts it). `PairFlops` gets them for any lengths from seven counts on meta tensors.
`mfu_with_padding` counts every padded position of the batch instead, what the device computed.
"""

import functools
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode
from training_throughput import TorchReference

from annotated_transformer.batching import Batch, make_batch
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.regularization import LabelSmoothingLoss

PEAK_TFLOPS = {  # dense TFLOP/s per GPU, (bf16 = fp16, tf32): half the figures of NVIDIA's datasheets,
    # which are "with sparsity" (the SXM's 989.4 and 494.7 as NVIDIA's Hopper whitepaper gives them)
    "H100 SXM": (989.4, 494.7),
    "H100 PCIe": (756.5, 378.0),
    "H100 NVL": (835.5, 417.5),
    "H200 SXM": (989.4, 494.7),
    "H200 NVL": (835.5, 417.5),
    "A100 SXM": (312.0, 156.0),
    "A100 PCIe": (312.0, 156.0),
}
UNKNOWN_PEAK = "unknown peak"  # a GPU that PEAK_TFLOPS does not hold: no MFU, rather than a guess


def gpu_model(name: str) -> str | None:
    """The PEAK_TFLOPS model of a device name as `torch.cuda.get_device_name` gives it, or None.

    "NVIDIA H100 80GB HBM3" is the SXM H100 (the PCIe card has HBM2e and says "PCIe"), "NVIDIA
    H200" the SXM H200; "NVL" in a name is the NVL card. A name that does not say which form of an
    H100 it is, a MIG slice, or another GPU altogether (a GH200, an H800, an H20), is not guessed."""
    words = name.upper().replace("-", " ").split()
    if "MIG" in words:  # a slice of the GPU: a share of its peak
        return None
    for chip in ("H100", "H200", "A100"):
        if chip in words:
            break
    else:
        return None
    if "NVL" in words:
        form = "NVL"
    elif "PCIE" in words:
        form = "PCIe"
    elif any(word.startswith("SXM") for word in words) or (chip == "H100" and "HBM3" in words):
        form = "SXM"
    elif chip == "H200":  # the H200 comes as SXM or NVL; the SXM one is called just "NVIDIA H200"
        form = "SXM"
    else:
        return None
    model = f"{chip} {form}"
    return model if model in PEAK_TFLOPS else None


def peak_of_gpu(name: str, precision: str) -> float | None:
    """The dense peak (TFLOP/s) of the GPU called `name` for `precision`, None where unknown:
    bf16 and fp16 run on the same tensor cores, fp32 as TF32 matrix products (chapter 9)."""
    model = gpu_model(name)
    if model is None:
        return None
    bf16, tf32 = PEAK_TFLOPS[model]
    return bf16 if precision in ("bf16", "fp16") else tf32


def peak_record(device: torch.device, precision: str, override: float | None) -> dict:
    """Which peak a row's MFU is over: `source` "PEAK_TFLOPS" (the GPU's `model` there and its
    `tflops`), "--peak-tflops" (the figure given), or UNKNOWN_PEAK (`tflops` None: no MFU)."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    model = gpu_model(gpu) if gpu is not None else None
    if override is not None:
        source, tflops = "--peak-tflops", override
    elif model is not None:
        source, tflops = "PEAK_TFLOPS", peak_of_gpu(gpu, precision)
    else:
        source, tflops = UNKNOWN_PEAK, None
    return {"source": source, "model": model, "tflops": tflops, "precision": precision,
            "device": gpu or str(device)}


def peak_tflops(device: torch.device, precision: str, override: float | None) -> float | None:
    return peak_record(device, precision, override)["tflops"]


def step_function(model, implementation: str, criterion: LabelSmoothingLoss) -> Callable:
    """The loss of one batch: forward pass and label-smoothed loss, summed over the target tokens."""
    if implementation == "ours":

        def loss(src, tgt_in, tgt_out, src_mask, tgt_mask):
            return criterion.loss_and_nll(model(src, tgt_in, src_mask, tgt_mask), tgt_out)[0]
    else:

        def loss(src, tgt_in, tgt_out, src_mask, tgt_mask):
            return criterion.loss_and_nll(model(src, tgt_in), tgt_out)[0]

    return loss


def forward_flops(model, implementation: str, batch: Batch) -> int:
    """The FLOPs of the batch's forward pass and loss, as `FlopCounterMode` counts them."""
    criterion = LabelSmoothingLoss(model.config.tgt_vocab_size, 0.1)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        step_function(model, implementation, criterion)(*batch.tensors())
    return counter.get_total_flops()


class PairFlops:
    """The forward FLOPs of one sentence pair, unpadded, as a function of its source length s and
    its decoder length t (target + 1): `pair_flops(s, t)`.

    Every FLOP `FlopCounterMode` counts is a matrix product's, linear in s or t (projections, the
    feed-forward network, the output layer) or a product of two of them (attention: s², t², s·t).
    So six counts, on a model on the meta device (shapes only, no arithmetic: milliseconds), give
    the quadratic's six coefficients as exact integer differences; a seventh count checks them.
    """

    def __init__(self, config: TransformerConfig, implementation: str = "ours", at: int = 8) -> None:
        with torch.device("meta"):
            self.model = make_model(config) if implementation == "ours" else TorchReference(config)
        self.implementation, self.at = implementation, at
        f = {(i, j): self.count(at + i, at + j) for i, j in ((0, 0), (1, 0), (2, 0), (0, 1), (0, 2), (1, 1))}
        self.f00 = f[0, 0]
        self.ds, self.dss = f[1, 0] - f[0, 0], f[2, 0] - 2 * f[1, 0] + f[0, 0]
        self.dt, self.dtt = f[0, 1] - f[0, 0], f[0, 2] - 2 * f[0, 1] + f[0, 0]
        self.dst = f[1, 1] - f[1, 0] - f[0, 1] + f[0, 0]
        s, t = 3 * at, 2 * at + 1
        if self.count(s, t) != self(s, t):
            raise RuntimeError(f"the forward FLOPs of {implementation} are not a quadratic in the lengths")

    def count(self, s: int, t: int) -> int:
        """FlopCounterMode's count for one pair of s source tokens and t decoder positions."""
        batch = make_batch([([4] * s, [4] * (t - 1))]).to("meta")
        return forward_flops(self.model, self.implementation, batch)

    def __call__(self, s: int, t: int) -> int:
        x, y = s - self.at, t - self.at  # Newton's form around (at, at): integers throughout
        return (self.f00 + x * self.ds + x * (x - 1) // 2 * self.dss + y * self.dt
                + y * (y - 1) // 2 * self.dtt + x * y * self.dst)


@functools.cache
def pair_flops(config: TransformerConfig, implementation: str = "ours") -> PairFlops:
    """`PairFlops` of a model, counted once per process."""
    return PairFlops(config, implementation)


def pair_lengths(batch: Batch) -> list[tuple[int, int]]:
    """Each pair's source length and decoder length (its target tokens and EOS), read on the CPU."""
    sources = (batch.src != batch.pad).sum(1).tolist()
    targets = (batch.tgt_out != batch.pad).sum(1).tolist()
    return list(zip(sources, targets, strict=True))


def batch_flops(flops: PairFlops, batch: Batch) -> tuple[int, int]:
    """The model FLOPs (3 × forward) of the batch's real tokens, and of every padded position."""
    real = sum(flops(s, t) for s, t in pair_lengths(batch))
    padded = len(batch) * flops(batch.src.size(1), batch.tgt_in.size(1))
    return 3 * real, 3 * padded


def flop_fields(flops: PairFlops, timed: list[Batch], tokens_per_s: float, peak: float | None) -> dict:
    """A row's FLOP figures: FLOPs per real target token, times the real target tokens per second."""
    real, padded = map(sum, zip(*(batch_flops(flops, batch) for batch in timed), strict=True))
    tokens = sum(batch.n_tokens for batch in timed)
    src_real = sum(s for batch in timed for s, _ in pair_lengths(batch))
    src_padded = sum(batch.src.numel() for batch in timed)
    fields = {
        "flops_per_token": real / tokens,
        "flops_per_s": real / tokens * tokens_per_s,
        "flops_with_padding_per_s": padded / tokens * tokens_per_s,
        "padding": {"flops": 1 - real / padded, "source": 1 - src_real / src_padded,
                    "target": 1 - tokens / sum(batch.tgt_out.numel() for batch in timed)},
        "peak_tflops": peak,
    }
    fields["mfu"] = fields["flops_per_s"] / (peak * 1e12) if peak else None
    fields["mfu_with_padding"] = fields["flops_with_padding_per_s"] / (peak * 1e12) if peak else None
    return fields
