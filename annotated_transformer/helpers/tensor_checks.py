"""Checks of the tensors the model's functions are given: attention masks (chapter 2), token ids and
positions (chapter 4), and a loss's logits, targets and settings (chapter 8).

Each check raises one error that says what was expected and what came instead, and how to fix it,
rather than letting a wrong input fail deep inside a matrix product, or worse, run on silently:

    >>> check_mask(torch.ones(3, 4), (3, 4))
    Traceback (most recent call last):
    ...
    TypeError: attention mask must have dtype torch.bool (True = may attend, False = blocked), ...

The checks that read a tensor's values (`check_token_ids`, `check_target`) make a GPU finish its
queued work first: they belong where ids enter, not in every training step.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["check_length", "check_logits", "check_mask", "check_smoothing", "check_target",
           "check_target_dtype", "check_token_dtype", "check_token_ids", "check_vocab"]


# --- chapter 2: attention masks ---------------------------------------------------------------

def check_mask(mask: Tensor, scores_shape: tuple[int, ...]) -> None:
    """Raise a clear error unless `mask` is a bool mask that broadcasts to `scores_shape`.

    Masks in this package are boolean and say where attention is *allowed*: True means "this query
    may look at this key", False means "blocked", as in `F.scaled_dot_product_attention`.
    (`nn.MultiheadAttention` and `nn.Transformer*` read bool masks the other way round.)
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"attention mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"attention mask must have dtype torch.bool (True = may attend, False = blocked), "
            f"got {mask.dtype}; build it with padding_mask()/subsequent_mask() or convert with "
            f"`mask != 0`"
        )
    scores_shape = tuple(scores_shape)
    try:
        broadcast = tuple(torch.broadcast_shapes(mask.shape, scores_shape))
    except RuntimeError:
        broadcast = None
    if broadcast != scores_shape:
        raise ValueError(
            f"attention mask of shape {tuple(mask.shape)} does not broadcast to the attention "
            f"scores of shape {scores_shape} (..., query_len, key_len)"
        )


# --- chapter 4: token ids and positions -------------------------------------------------------

def check_token_dtype(tokens: Tensor) -> None:
    """Raise a clear error unless `tokens` is an integer tensor (its dtype alone: no data is read)."""
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool or tokens.is_complex():
        raise TypeError(f"token ids must be an integer tensor, got dtype {tokens.dtype}")


def check_token_ids(tokens: Tensor, vocab_size: int) -> None:
    """Raise a clear error unless `tokens` holds integer ids in [0, vocab_size).

    It reads the smallest and largest id back to the host, which makes a GPU finish its queued
    work first: call it where ids enter (encoding text, a user's input), not in every step.
    """
    check_token_dtype(tokens)
    if tokens.numel() == 0:
        return
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"token ids must lie in [0, {vocab_size}) for a vocabulary of {vocab_size} entries, "
            f"got ids from {low} to {high}; encode the text with the vocabulary the model was "
            f"built for, or build the model with a larger vocab_size"
        )


def check_length(length: int, max_len: int, offset: int = 0) -> None:
    """Raise a clear error when positions offset … offset + length - 1 do not fit the table."""
    if offset < 0:
        raise ValueError(f"the position offset must be 0 or more, got {offset}")
    if offset + length > max_len:
        start = f" starting at position {offset}" if offset else ""
        raise ValueError(
            f"sequence of length {length}{start} is longer than the positional encoding table "
            f"(max_len={max_len}); build the model with a larger max_len or shorten the input"
        )


# --- chapter 8: a loss's settings, logits and targets -----------------------------------------

def check_smoothing(smoothing: float) -> None:
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must lie in [0, 1), got {smoothing}")


def check_vocab(vocab_size: int, pad: int | None, smooth_pad: bool) -> None:
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be a positive integer, got {vocab_size}")
    if pad is not None and not 0 <= pad < vocab_size:
        raise ValueError(f"pad must be an id in [0, {vocab_size}) or None, got {pad}")
    if pad is not None and not smooth_pad and vocab_size < 2:
        raise ValueError("with smooth_pad=False the vocabulary needs at least one class besides pad")


def check_target_dtype(target: Tensor) -> None:
    if target.dtype.is_floating_point or target.dtype == torch.bool or target.is_complex():
        raise ValueError(f"target must hold integer class ids, got dtype {target.dtype}")


def check_target(target: Tensor, vocab_size: int) -> None:
    """Also reads the ids' range back to the host: not in a training step (chapter 9)."""
    check_target_dtype(target)
    if target.numel() and (int(target.min()) < 0 or int(target.max()) >= vocab_size):
        raise ValueError(
            f"target ids must lie in [0, {vocab_size}), got ids from {int(target.min())} to "
            f"{int(target.max())}; is vocab_size the size of the model's output layer?"
        )


def check_logits(logits: Tensor, target: Tensor, vocab_size: int | None = None, check_ids: bool = True) -> None:
    """Logits (..., V) that match `target` (...), V = `vocab_size` when given; with `check_ids`,
    the target's ids in [0, V) too (`check_target`)."""
    if logits.shape[:-1] != target.shape:
        raise ValueError(
            f"logits (..., V) and target (...) do not match: logits {tuple(logits.shape)}, target "
            f"{tuple(target.shape)}; logits need one extra last dimension over the vocabulary"
        )
    if vocab_size is not None and logits.size(-1) != vocab_size:
        raise ValueError(
            f"logits have {logits.size(-1)} classes in their last dimension, the loss was built "
            f"for vocab_size={vocab_size}"
        )
    if check_ids:
        check_target(target, logits.size(-1))
    else:
        check_target_dtype(target)
