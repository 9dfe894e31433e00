"""Which process of a run this one is: the one notion that every part of the package asks before it
writes a run's files or prints a note. Under `torchrun` (chapter 15) a run has one process per GPU,
all computing the same model; rank 0 writes the checkpoints, the history and the notes, and the
others only compute. A process outside a distributed run is rank 0 of 1."""

__all__ = ["is_main_process", "rank_and_world_size"]

import torch
import torch.distributed


def rank_and_world_size() -> tuple[int, int]:
    """(rank, number of processes) of the torch.distributed run this process is in; (0, 1) when it
    is in none, or in one of a single process."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main_process() -> bool:
    """True for rank 0, the process that writes a run's files and notes (and for a lone process)."""
    return rank_and_world_size()[0] == 0
