"""Checks of what chapter 6's batching is given: sentence pairs, their lengths, a share of the batches,
the copy task's settings.

Each check raises one `ValueError` that names what is wrong and what to do, before any tensor is
built: an empty sentence or a padding id inside one would otherwise give a batch that trains on
nonsense without a word.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["check_copy_task", "check_lengths", "check_pairs", "check_shard"]


def check_pairs(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], pad: int) -> None:
    """At least one (source, target) pair, no source empty, and no padding id inside a sentence."""
    if len(pairs) == 0:
        raise ValueError("empty batch: make_batch needs at least one (source, target) pair")
    for i, (src, tgt) in enumerate(pairs):
        if len(src) == 0:
            raise ValueError(
                f"empty sequence: the source of pair {i} has no tokens; drop empty sentences "
                f"before batching (the encoder needs at least one position to attend to)"
            )
        for ids, what in ((src, f"the source of pair {i}"), (tgt, f"the target of pair {i}")):
            if pad in ids:
                raise ValueError(
                    f"{what} contains the padding id {pad}; pass the ids without padding (make_batch "
                    f"pads), and make sure the vocabulary never maps a real token to {pad}"
                )


def check_lengths(lengths: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """(source length, target length) pairs as ints: a source of at least one token, a target of 0 or more."""
    pairs = [(int(s), int(t)) for s, t in lengths]
    for i, (s, t) in enumerate(pairs):
        if s < 1 or t < 0:
            raise ValueError(
                f"lengths[{i}] = ({s}, {t}): a source needs at least one token and a target length "
                f"cannot be negative (empty sequence); drop such pairs before batching"
            )
    return pairs


def check_shard(n_batches: int, rank: int, world_size: int) -> None:
    """A rank in [0, world_size), and at least one batch for every rank (or none at all)."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must lie in [0, world_size={world_size}), got {rank}")
    if 0 < n_batches < world_size:
        raise ValueError(
            f"{n_batches} batches cannot be shared by {world_size} ranks: every rank needs at least "
            f"one; use a smaller max_tokens or more data"
        )


def check_copy_task(n: int, vocab_size: int, min_len: int, max_len: int, first_id: int) -> None:
    """A number of pairs, a vocabulary with ids past the special ones (`first_id` on), and lengths
    1 <= min_len <= max_len."""
    if n < 0:
        raise ValueError(f"n must be a number of pairs (>= 0), got {n}")
    if vocab_size <= first_id:
        raise ValueError(
            f"vocab_size must be larger than {first_id} (ids 0..{first_id - 1} are special tokens), "
            f"got {vocab_size}"
        )
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
