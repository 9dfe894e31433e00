"""What the searches of chapter 11 and its checkpoint averaging are given, checked before any work
(companion of chapter 11):

- `check_beam_settings`: a beam size that is a whole number >= 1 and a finite alpha >= 0 (§6.1 uses
  4 and 0.6); a beam of 0 must not quietly mean greedy.
- `check_source`: a batch of source sentences (a (batch, src_len) tensor no longer than the model's
  positional table, no sentence all padding) and its mask; returns the mask and the real lengths.
- `check_max_len`: a `max_len` the model's positional table allows.
- `same_model`, `same_run`: two checkpoints to average hold one model (configuration and parameter
  shapes) and, where they record them, the fingerprints of one run (`run_identity`).
- `check_enough_checkpoints`: a folder holds at least the k checkpoints to average.
"""

import math
import numbers
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from annotated_transformer.attention import padding_mask
from annotated_transformer.checkpoints import CheckpointError, state_differences

__all__ = ["check_beam_settings", "check_enough_checkpoints", "check_max_len", "check_source", "run_identity",
           "same_model", "same_run"]


def check_beam_settings(beam_size: Any, alpha: Any) -> None:
    """Refuse a beam size that is not a whole number >= 1 and an alpha that is not a finite number
    >= 0 (§6.1 uses 4 and 0.6), naming the value: a beam of 0 must not quietly mean greedy."""
    if isinstance(beam_size, bool) or not isinstance(beam_size, numbers.Integral):
        raise ValueError(f"beam_size must be a whole number (1: greedy; the paper uses 4), got {beam_size!r}")
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1 (1: greedy; the paper uses 4), got {beam_size}")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or math.isnan(alpha):
        raise ValueError(f"alpha must be a number (0: no length penalty; the paper uses 0.6), got {alpha!r}")
    if not 0 <= alpha < math.inf:
        raise ValueError(f"alpha must be 0 or more, and finite (0: no length penalty; the paper uses 0.6), "
                         f"got {alpha}")


def _table_length(model: Any) -> int | None:
    """The model's positional table's length (`config.max_len`), or None for a model without one."""
    return getattr(getattr(model, "config", None), "max_len", None)


def check_source(model: Any, src: Tensor, src_mask: Tensor | None, pad: int) -> tuple[Tensor, Tensor]:
    """Check a batch of source sentences; return its mask and every sentence's real length."""
    if not isinstance(src, Tensor) or src.dim() != 2:
        got = tuple(src.shape) if isinstance(src, Tensor) else type(src).__name__
        raise ValueError(f"src must be a (batch, src_len) tensor of token ids, got {got}")
    if src.size(0) == 0:
        raise ValueError("empty batch: src holds no sentence; pass at least one sentence to decode")
    if src.size(1) == 0:
        raise ValueError("zero-length source: src has no positions; every sentence needs at least one token")
    limit = _table_length(model)
    if limit is not None and src.size(1) > limit:
        raise ValueError(
            f"the source has {src.size(1)} positions but the model's positional table covers only "
            f"max_len={limit}; split or shorten the sentence, or use a model built with a larger max_len"
        )
    if src_mask is None:
        src_mask = padding_mask(src, pad)
    if src_mask.dtype != torch.bool or tuple(src_mask.shape) != (src.size(0), 1, src.size(1)):
        raise ValueError(
            f"src_mask must be a bool tensor of shape (batch, 1, src_len) = {(src.size(0), 1, src.size(1))}, "
            f"got {src_mask.dtype} {tuple(src_mask.shape)}; build it with padding_mask(src, pad)"
        )
    lengths = src_mask[:, 0].sum(dim=-1)
    empty = (lengths == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(
            f"zero-length source: sentence(s) {empty} of the batch are all padding; drop empty "
            f"sentences before decoding (the encoder needs at least one token to attend to)"
        )
    return src_mask, lengths


def check_max_len(model: Any, max_len: int) -> None:
    """Refuse a `max_len` (the most tokens to generate) below 1 or beyond the model's positional table."""
    limit = _table_length(model)
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1 (the most tokens to generate), got {max_len}")
    if limit is not None and max_len > limit:
        raise ValueError(
            f"max_len={max_len} is more than the model can generate: its decoder reads at most "
            f"{limit} positions (the positional table), so use max_len <= {limit}"
        )


def same_model(path_a: Path, a: dict, path_b: Path, b: dict) -> None:
    """Raise a clear error unless two checkpoints hold the same configuration and parameter shapes."""
    problems = []
    for kind, name, value_a, value_b in state_differences(a["config"], a["state"]["model"], b["config"],
                                                               b["state"]["model"]):
        if kind == "config":
            problems.append(f"config {name}: {value_a!r} in {path_a.name}, {value_b!r} in {path_b.name}")
        elif kind == "key":
            problems.append(f"parameter {name} only in {path_a.name if value_a else path_b.name}")
        else:
            problems.append(f"parameter {name}: shape {value_a} in {path_a.name}, {value_b} in {path_b.name}")
    if len(problems) > 8:
        problems = [*problems[:8], f"... and {len(problems) - 8} more differences"]
    if problems:
        raise CheckpointError(
            f"cannot average {path_a} and {path_b}: they hold different models\n  " + "\n  ".join(problems)
            + "\naverage only checkpoints of one training run"
        )


RUN_KEYS = ("vocab_sha256", "config_sha256", "recipe")  # what a translation run records (chapter 14)


def run_identity(checkpoint: dict) -> dict:
    """The entries of a checkpoint's `extra` that say which training run wrote it: the fingerprints
    of its vocabulary and model configuration, and its recipe (those it has; chapter 14)."""
    extra = checkpoint.get("extra") or {}
    return {key: extra[key] for key in RUN_KEYS if key in extra}


def same_run(path_a: Path, a: dict, path_b: Path, b: dict) -> None:
    """Raise unless two checkpoints that both record a fingerprint record the same one."""
    for key, what in (("vocab_sha256", "vocabularies"), ("config_sha256", "model configurations")):
        value_a, value_b = run_identity(a).get(key), run_identity(b).get(key)
        if value_a is not None and value_b is not None and value_a != value_b:
            raise CheckpointError(
                f"cannot average {path_a} and {path_b}: they come from different training runs (their "
                f"{what} differ); average only checkpoints of one run"
            )


def check_enough_checkpoints(directory: str | Path, paths: list[Path], k: int) -> None:
    """Refuse a k below 1, or more than the checkpoints `paths` found in `directory`."""
    if k < 1:
        raise ValueError(f"k must be at least 1 (the number of checkpoints to average), got {k}")
    if len(paths) < k:
        raise ValueError(
            f"{directory} holds {len(paths)} checkpoint(s) (step_*.pt), fewer than the k={k} to "
            f"average; pass a smaller k, or train longer with checkpoints"
        )
