"""Companion of chapter 15: the scaffolding of its check that two processes train as one.

Each rank of the check runs `equivalence_worker`, started by `torch.multiprocessing.spawn`: processes
started with the *spawn* method find the function they run by importing it, and a function defined
in a notebook cannot be imported. The worker trains `equivalence_trainer`'s small model (two layers,
no dropout) on its share of `equivalence_batches` on the CPU with Gloo, meeting the other ranks at a
`free_port` of this machine, and saves its parameters and history for the notebook to compare.
"""

from __future__ import annotations

import os
import socket

import torch

from annotated_transformer.batching import Batch, batch_by_tokens, copy_task, make_batch, shard_batches
from annotated_transformer.distributed import init_distributed, shutdown_distributed
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.training import TrainConfig, Trainer

__all__ = ["equivalence_batches", "equivalence_trainer", "equivalence_worker", "free_port"]


def free_port() -> int:
    """A TCP port that is free on this machine now: the meeting point of a local run."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _equivalence_config() -> TransformerConfig:
    return TransformerConfig(
        src_vocab_size=20, tgt_vocab_size=20, n_layers=2, d_model=32, d_ff=64, n_heads=4, dropout=0.0,
        max_len=64,
    )


def equivalence_trainer(steps: int, accumulate: int = 1) -> Trainer:
    """The chapter's check: a small model without dropout, the same on every rank."""
    torch.manual_seed(0)
    config = TrainConfig(max_steps=steps, accumulate=accumulate, warmup=10, progress=False, log_every=0)
    return Trainer(make_model(_equivalence_config()), config, device="cpu")


def equivalence_batches(epoch: int, rank: int = 0, world_size: int = 1) -> list[Batch]:
    """The chapter's check: one epoch of copy-task batches of about 256 tokens, this rank's share."""
    pairs = copy_task(400, vocab_size=20, min_len=2, max_len=12, seed=0)
    order = batch_by_tokens([(len(src), len(tgt)) for src, tgt in pairs], 256, seed=0, epoch=epoch)
    return [make_batch([pairs[i] for i in batch]) for batch in shard_batches(order, rank, world_size)]


def equivalence_worker(rank: int, world_size: int, port: int, steps: int, out: str) -> None:
    """One rank of the chapter's check (`torch.multiprocessing.spawn` passes `rank`): trains on
    its share on the CPU with Gloo, and saves its parameters and history to `out/rank{rank}.pt`."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # two processes share the cores
    context = init_distributed("gloo", device="cpu")
    try:
        trainer = equivalence_trainer(steps)
        history = trainer.fit(lambda epoch: equivalence_batches(epoch, context.rank, context.world_size))
        result = {"model": trainer.model.state_dict(), "loss": [stats.loss for stats in history],
                  "n_tokens": [stats.n_tokens for stats in history], "epoch": trainer.epoch}
        torch.save(result, os.path.join(out, f"rank{rank}.pt"))
    finally:
        shutdown_distributed()
