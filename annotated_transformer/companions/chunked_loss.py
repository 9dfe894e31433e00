"""Companion of chapter 8: the output layer and the label-smoothed loss in chunks of rows, so that the
(rows, V) logits and log-probabilities of a large vocabulary never exist at once.

`projected_smoothed_loss(hidden, weight, target)` is what `LabelSmoothingLoss.loss_and_nll` computes
on `F.linear(hidden, weight)`, the output layer of §3.4 followed by §5.4's loss, with the same
arithmetic; only the memory differs. Each chunk's gradient, p − q, is taken back through the
projection at once, so that no chunk's probabilities outlive it. The `Trainer` keeps the plain path
(the decoding chapters need its logits); `benchmarks/gpu_ablation.py` measures this one on a GPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from annotated_transformer.batching import PAD
from annotated_transformer.helpers.tensor_checks import check_smoothing, check_target_dtype, check_vocab
from annotated_transformer.regularization import n_smoothed_classes, p_minus_q, smoothed_terms, upcast_logits

__all__ = ["projected_smoothed_loss"]


class _ProjectedSmoothedCrossEntropy(torch.autograd.Function):
    """The output projection and the smoothed loss, `chunk_rows` rows at a time. The forward pass
    also computes each chunk's gradients, (p − q) W for its rows and (p − q)ᵀ h for the weight, so
    that no chunk's probabilities are kept; the backward pass scales them by the loss's gradient."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, target: Tensor, smoothing: float, pad: int | None,
                k: int, pad_gets_share: bool, chunk_rows: int) -> tuple[Tensor, Tensor]:
        settings = (smoothing, pad, k, pad_gets_share)
        grad_hidden = torch.zeros_like(hidden) if ctx.needs_input_grad[0] else None
        # the weight's gradient summed over the chunks in float32 at least
        summed = torch.promote_types(weight.dtype, torch.float32)
        grad_weight = torch.zeros_like(weight, dtype=summed) if ctx.needs_input_grad[1] else None
        loss = nll = torch.zeros((), device=hidden.device)
        for start in range(0, hidden.size(0), chunk_rows):
            rows = slice(start, start + chunk_rows)
            logits = F.linear(hidden[rows], weight)  # under autocast, in bf16 as the model's own layer
            log_probs = F.log_softmax(upcast_logits(logits), dim=-1)
            chunk_loss, chunk_nll = smoothed_terms(log_probs, target[rows], *settings)
            loss, nll = loss + chunk_loss.sum(), nll + chunk_nll.sum()
            if grad_hidden is None and grad_weight is None:
                continue
            grad = p_minus_q(log_probs.exp_(), target[rows], *settings).to(logits.dtype)
            if grad_hidden is not None:
                grad_hidden[rows] = grad @ weight.to(grad.dtype)
            if grad_weight is not None:
                grad_weight += grad.T @ hidden[rows].to(grad.dtype)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        if grad_hidden is not None:
            grad_hidden = grad_hidden * grad_loss
        if grad_weight is not None:
            grad_weight = (grad_weight * grad_loss).to(ctx.weight_dtype)
        return grad_hidden, grad_weight, None, None, None, None, None, None


def projected_smoothed_loss(
    hidden: Tensor, weight: Tensor, target: Tensor, smoothing: float = 0.1, pad: int | None = PAD,
    smooth_pad: bool = False, chunk_rows: int = 4096,
) -> tuple[Tensor, Tensor]:
    """`LabelSmoothingLoss(V, smoothing, pad, smooth_pad).loss_and_nll(F.linear(hidden, weight),
    target)`, the summed smoothed loss and the summed cross-entropy, without the (rows, V) logits
    or log-probabilities: `chunk_rows` rows at a time (§3.4's output layer, §5.4's loss).

    hidden: (..., d_model), the decoder's output; weight: (V, d_model), the output layer's (tied:
    the embedding matrix); target: (...) class ids. Rows whose target is `pad` contribute nothing:
    pass only the real ones and the padding costs nothing either.
    """
    check_smoothing(smoothing)
    check_vocab(weight.size(0), pad, smooth_pad)
    check_target_dtype(target)
    if hidden.shape[:-1] != target.shape or weight.dim() != 2 or weight.size(1) != hidden.size(-1):
        raise ValueError(
            f"hidden (..., d_model), weight (V, d_model) and target (...) do not match: hidden "
            f"{tuple(hidden.shape)}, weight {tuple(weight.shape)}, target {tuple(target.shape)}"
        )
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be at least 1, got {chunk_rows}")
    k = n_smoothed_classes(weight.size(0), pad, smooth_pad)
    return _ProjectedSmoothedCrossEntropy.apply(
        hidden.reshape(-1, hidden.size(-1)), weight, target.reshape(-1), smoothing, pad, k,
        pad is None or smooth_pad, chunk_rows,
    )
