"""Build what comes next in a background thread while the current work runs.

Chapter 9's training loop uses it on a GPU: while the device computes a step, a thread builds the
next groups of micro-batches and starts their copies to the device (`Tensor.to(non_blocking=True)`
from pinned memory), so that the data pipeline is never what the device waits for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import TypeVar

__all__ = ["prefetched"]

T = TypeVar("T")


def prefetched(builders: Iterable[Callable[[], T]], ahead: int = 2) -> Iterator[T]:
    """The results of `builders`, in order, each built in one background thread up to `ahead` items
    before it is asked for. An exception raised by a builder is raised where its result is asked for."""
    if ahead < 1:
        raise ValueError(f"ahead must be at least 1, got {ahead}")
    builders = iter(builders)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = [pool.submit(build) for build in islice(builders, ahead)]
        while pending:
            result = pending.pop(0).result()
            following = next(builders, None)
            if following is not None:
                pending.append(pool.submit(following))
            yield result
