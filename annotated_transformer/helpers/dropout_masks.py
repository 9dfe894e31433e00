"""Dropout's random mask drawn from a quarter of the random numbers on a CPU (chapter 4's `Dropout`).

`nn.Dropout` draws one 32-bit number from the CPU's generator per component. A mask needs far fewer
bits: `dropout_keep_mask` reads 16 random bits per component, four components from each 64-bit
number, and drops a component when its 16-bit lane falls among the first round(p · 2^16) of the
65,536 values it can take. So the drop probability is p rounded to a multiple of 2^-16.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["MASK_BITS", "dropout_keep_mask", "dropped_values"]

MASK_BITS = 16  # random bits per dropout mask entry: P_drop is rounded to a multiple of 2^-16


def dropped_values(p: float) -> int:
    """How many of the 2^16 values a mask entry can take mean "drop": round(p · 2^16)."""
    return round(p * 2**MASK_BITS)


def dropout_keep_mask(shape: torch.Size, p: float) -> Tensor:
    """A bool mask of `shape`, True (keep) with probability 1 - round(p · 2^16) / 2^16: 16 random
    bits per entry, four entries to each 64-bit number of the CPU generator."""
    count = math.prod(shape)
    words = torch.empty(-(-count // 4), dtype=torch.int64)
    words.random_(torch.iinfo(torch.int64).min, None)  # all 64 bits random
    bits = words.view(torch.int16)[:count].view(shape)  # each uniform on the 65,536 int16 values
    return bits >= torch.iinfo(torch.int16).min + dropped_values(p)
