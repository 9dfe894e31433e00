"""Companion of chapter 13. `BatchSequence`: the token batches of an encoded corpus, padded on demand.

Chapter 13's `token_batches` plans §5.1's batches of an epoch (`batch_by_tokens`, chapter 6) as
lists of pair indices and hands the plan to a `BatchSequence`, which builds each padded `Batch`
when it is asked for, from the ids already in memory: one `make_batch` call per batch, well under
a millisecond, so no worker processes are needed. Padding waits until a batch is needed because
the same pair is padded to different lengths in different epochs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from annotated_transformer.batching import Batch, make_batch

__all__ = ["BatchSequence"]


class _EncodedCorpus(Protocol):
    """What a `BatchSequence` reads: each pair's source and target ids (chapter 13's `EncodedPairs`)."""

    source: list[list[int]]
    target: list[list[int]]


class BatchSequence(Sequence[Batch]):
    """Token batches of an encoded corpus, padded on demand: `batches[i]` is a `Batch`.

    `pin_memory=True` puts each batch in page-locked memory so that copying it to a GPU can overlap
    with computation (`Batch.to(..., non_blocking=True)`).
    """

    def __init__(self, data: _EncodedCorpus, batches: Sequence[Sequence[int]], pin_memory: bool = False):
        self.data, self.batches, self.pin_memory = data, [list(b) for b in batches], pin_memory

    def __len__(self) -> int:
        return len(self.batches)

    def _make(self, indices: Sequence[int]) -> Batch:
        batch = make_batch([(self.data.source[i], self.data.target[i]) for i in indices])
        return batch.pin_memory() if self.pin_memory else batch

    def __getitem__(self, index):  # an int gives one Batch, a slice a list of them
        if isinstance(index, slice):
            return [self._make(self.batches[i]) for i in range(*index.indices(len(self)))]
        return self._make(self.batches[index])

    def __iter__(self) -> Iterator[Batch]:
        return (self._make(indices) for indices in self.batches)
