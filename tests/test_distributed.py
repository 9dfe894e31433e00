"""Training on several processes (chapters 9, 10 and 15): two CPU processes with the Gloo backend take
the optimizer step that one process takes on the union of their batches, rank 0 alone logs and
writes checkpoints, and the batches of an epoch are shared out evenly among the ranks.

The two processes start once for the whole file (the `ranks` fixture) and run every distributed
scenario; the tests then compare what they saved with single-process runs.
"""

import contextlib
import io
import os
from pathlib import Path

import pytest
import torch
from helpers import max_difference, parameters, small_config, tiny_trainer

from annotated_transformer.acceleration import default_device
from annotated_transformer.batching import TokenBatchSampler, batch_by_tokens, copy_task, make_batch
from annotated_transformer.checkpoints import CheckpointDirectory, checkpoint_paths, read_checkpoint
from annotated_transformer.companions.distributed_check import free_port
from annotated_transformer.distributed import (
    TORCHRUN_VARIABLES,
    DistributedTokenBatchSampler,
    init_distributed,
    shard_batches,
    shutdown_distributed,
)
from annotated_transformer.helpers.processes import is_main_process
from annotated_transformer.model import make_model
from annotated_transformer.optimizer import cooldown_factor, rate
from annotated_transformer.training import (
    Trainer,
)

WORLD = 2
PAIRS = copy_task(12, vocab_size=23, min_len=2, max_len=12, seed=3)
# Micro-batches of different sizes, hence different token counts: the loss must be normalized by
# the tokens of all ranks together for the distributed step to equal the single-process one.
MICRO = [PAIRS[0:2], PAIRS[2:7], PAIRS[7:8], PAIRS[8:12]]
# scenario: (what rank 0 trains on, what rank 1 trains on); one process trains on both lists joined
SCENARIOS = {
    "one micro-batch per rank": ([MICRO[0]], [MICRO[1]]),
    "two micro-batches per rank (accumulation)": ([MICRO[0], MICRO[1]], [MICRO[2], MICRO[3]]),
}
FIT_PAIRS = copy_task(120, vocab_size=23, min_len=2, max_len=12, seed=4)
FIT_LENGTHS = [(len(src), len(tgt)) for src, tgt in FIT_PAIRS]
FIT_STEPS = 3


def fit_batches(epoch: int, rank: int = 0, world_size: int = 1) -> list:
    order = shard_batches(batch_by_tokens(FIT_LENGTHS, max_tokens=150, seed=0, epoch=epoch), rank, world_size)
    return [make_batch([FIT_PAIRS[i] for i in indices]) for indices in order]


def _worker(rank: int, out: str, port: int) -> None:
    """One of the two ranks: runs every scenario and saves what it got to out/rank{rank}.pt."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    context = init_distributed("gloo", device="cpu")
    try:
        result = {"context": [context.rank, context.world_size, is_main_process(), context.is_distributed]}
        for name, per_rank in SCENARIOS.items():
            trainer = tiny_trainer()
            stats = trainer.train_step([make_batch(pairs) for pairs in per_rank[rank]])
            result[name] = {"parameters": parameters(trainer), "wrapped": trainer.ddp is not None,
                            "stats": [stats.loss, stats.nll, stats.n_tokens]}
        checkpoints = CheckpointDirectory(os.path.join(out, f"checkpoints-rank{rank}"), keep=2)
        trainer = tiny_trainer(max_steps=FIT_STEPS, progress=True, log_every=1, checkpoint_every=1)
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            trainer.fit(lambda epoch: fit_batches(epoch, rank, WORLD),
                        on_checkpoint=lambda: checkpoints.save(trainer))
        result["printed by fit"] = printed.getvalue()
        result["clock fit"] = _clock_fitted_run(out)
        torch.save(result, os.path.join(out, f"rank{rank}.pt"))
    finally:
        shutdown_distributed()


def _clock_fitted_run(out: str) -> dict:
    """A translation run on both ranks whose time limit (1 minute, on a clock of 0.1 minutes a step)
    comes before its cooldown (the last half of 40 steps): rank 0's clock fits the schedule, at a log
    point, for both ranks. The last thing a worker does: it patches the trainer and the clock."""
    from annotated_transformer.recipes import get_recipe
    from annotated_transformer.runs.run_files import RunHistory
    from annotated_transformer.runs.translation import train_translation

    done, step = {"steps": 0}, Trainer.train_step_async

    def counted_step(self, micro_batches):
        done["steps"] = self.step + 1
        return step(self, micro_batches)

    Trainer.train_step_async = counted_step
    RunHistory.minutes = lambda self: 0.1 * done["steps"]
    recipe = get_recipe("builtin", n_layers=1, d_model=32, d_ff=64, n_heads=2, vocab_size=300, max_tokens=600,
                        warmup=10, max_steps=40, cooldown=0.5, max_minutes=1.0, checkpoint_every=2,
                        average_last=1)
    with contextlib.redirect_stderr(io.StringIO()):
        run = train_translation(recipe, Path(out) / "clock-fitted", device="cpu", progress=False)
    return {"steps": run.steps, "fitted": run.fitted_last_step, "lrs": [r["lr"] for r in run.history],
            "parameters": [p.detach().clone() for p in run.model.parameters()]}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("distributed")
    torch.multiprocessing.spawn(_worker, args=(str(out), free_port()), nprocs=WORLD)
    return out, [torch.load(out / f"rank{rank}.pt") for rank in range(WORLD)]


# --- two processes ----------------------------------------------------------------------------


def test_each_rank_knows_its_place(ranks):
    _, results = ranks
    assert [result["context"] for result in results] == [[0, 2, True, True], [1, 2, False, True]]
    assert all(result[name]["wrapped"] for result in results for name in SCENARIOS)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_step_on_two_ranks_is_a_step_on_the_union_of_their_batches(ranks, scenario):
    _, results = ranks
    rank0, rank1 = (result[scenario] for result in results)
    assert max_difference(rank0["parameters"], rank1["parameters"]) == 0.0  # the copies stay identical
    reference = tiny_trainer()
    union = [make_batch(pairs) for per_rank in SCENARIOS[scenario] for pairs in per_rank]
    stats = reference.train_step(union)
    assert max_difference(rank0["parameters"], parameters(reference)) <= 1e-6
    # Both ranks report the global batch: the single process's loss, cross-entropy and token count.
    for result in (rank0, rank1):
        loss, nll, n_tokens = result["stats"]
        assert n_tokens == stats.n_tokens
        assert loss == pytest.approx(stats.loss, rel=1e-6)
        assert nll == pytest.approx(stats.nll, rel=1e-6)


def test_rank_0_alone_logs_and_writes_checkpoints(ranks):
    out, results = ranks
    written = checkpoint_paths(out / "checkpoints-rank0")
    assert [path.name for path in written] == ["step_00000002.pt", "step_00000003.pt"]  # keep=2
    assert not (out / "checkpoints-rank1").exists()
    # Plain parameter names (no DDP "module." prefix): the checkpoint loads into a plain model.
    checkpoint = read_checkpoint(written[-1])
    assert checkpoint["state"]["model"].keys() == make_model(small_config()).state_dict().keys()
    assert "step      3  loss" in results[0]["printed by fit"]
    assert results[1]["printed by fit"] == ""


def test_fit_on_two_ranks_equals_fit_with_accumulation(ranks):
    out, _ = ranks
    single = tiny_trainer(max_steps=FIT_STEPS, accumulate=WORLD)

    def single_batches(epoch: int) -> list:
        batches = fit_batches(epoch)
        return batches[: len(batches) // WORLD * WORLD]  # the tail that shard_batches drops

    single.fit(single_batches)
    checkpoint = read_checkpoint(out / "checkpoints-rank0" / "step_00000003.pt")
    names = list(single.model.state_dict())
    written = [checkpoint["state"]["model"][name] for name in names]
    assert max_difference(written, [single.model.state_dict()[name] for name in names]) <= 1e-6
    state = checkpoint["state"]
    assert (state["epoch"], state["position"]) == (single.epoch, single.position // WORLD)


def test_rank_0s_clock_fits_the_schedule_of_every_rank(ranks):
    _, results = ranks
    rank0, rank1 = (result["clock fit"] for result in results)
    # The first log point past half of the minute is step 6 (checkpoints every 2 steps): its speed
    # allows 4 more steps, and the cooldown becomes the last 5 of 10.
    assert (rank0["steps"], rank0["fitted"]) == (rank1["steps"], rank1["fitted"]) == (10, 10)
    assert max_difference(rank0["parameters"], rank1["parameters"]) == 0.0
    expected = [rate(n, 32, warmup=10, factor=0.5) * cooldown_factor(n, 10, 5) for n in range(7, 11)]
    assert rank0["lrs"][6:] == pytest.approx(expected)
    assert rank0["lrs"][5] == pytest.approx(rate(6, 32, warmup=10, factor=0.5))  # decided after step 6


# --- one process --------------------------------------------------------------------------------


def test_init_distributed_without_torchrun_is_a_single_process(monkeypatch):
    for name in TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for world_size in (None, "1"):
        if world_size is not None:
            monkeypatch.setenv("WORLD_SIZE", world_size)
        context = init_distributed()
        assert (context.rank, context.world_size, context.local_rank) == (0, 1, 0)
        assert is_main_process() and not context.is_distributed
        assert context.device == default_device()
        assert not torch.distributed.is_initialized()
    assert init_distributed(device="cpu").device == torch.device("cpu")
    shutdown_distributed()  # nothing to shut down: no error


@pytest.mark.parametrize(
    "environment, message",
    [
        ({"WORLD_SIZE": "2", "RANK": "0"}, "LOCAL_RANK, MASTER_ADDR, MASTER_PORT are not set"),
        ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"},
         "MASTER_PORT is not set"),
        ({"RANK": "1"}, "RANK is set but WORLD_SIZE is not"),
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not an integer"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE must be at least 1"),
        ({"WORLD_SIZE": "2", "RANK": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
         r"RANK=2 must lie in \[0, WORLD_SIZE=2\)"),
    ],
)
def test_init_distributed_refuses_a_partly_set_environment(monkeypatch, environment, message):
    for name in TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        init_distributed()
    assert not torch.distributed.is_initialized()


@pytest.mark.parametrize("n, world_size", [(10, 3), (9, 3), (7, 2), (5, 5), (4, 1)])
def test_shard_batches_equal_disjoint_and_covering_but_the_tail(n, world_size):
    batches = [f"batch {i}" for i in range(n)]
    shards = [shard_batches(batches, rank, world_size) for rank in range(world_size)]
    assert {len(shard) for shard in shards} == {n // world_size}
    taken = [batch for shard in shards for batch in shard]
    assert len(set(taken)) == len(taken)  # no batch on two ranks
    assert set(batches) - set(taken) == set(batches[n // world_size * world_size :])  # < world_size dropped
    for step in range(n // world_size):  # a step on the ranks = world_size consecutive batches
        assert sorted((shard[step] for shard in shards), key=batches.index) == batches[
            step * world_size : (step + 1) * world_size
        ]


def test_shard_batches_errors():
    assert shard_batches([], 0, 2) == []
    with pytest.raises(ValueError, match="3 batches cannot be shared by 4 ranks"):
        shard_batches([1, 2, 3], 0, 4)
    with pytest.raises(ValueError, match="rank must lie in"):
        shard_batches([1, 2, 3], 2, 2)
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        shard_batches([1, 2, 3], 0, 0)


def test_distributed_token_batch_sampler():
    pairs = copy_task(300, vocab_size=23, min_len=2, max_len=30, seed=1)
    lengths = [(len(src), len(tgt)) for src, tgt in pairs]
    max_tokens, world_size = 120, 3

    def per_rank(epoch: int) -> list[list[list[int]]]:
        result = []
        for rank in range(world_size):
            sampler = DistributedTokenBatchSampler(lengths, max_tokens, seed=4, rank=rank,
                                                   world_size=world_size)
            sampler.set_epoch(epoch)
            batches = list(sampler)
            assert len(batches) == len(sampler)
            result.append(batches)
        return result

    epoch0 = per_rank(0)
    n_batches = len(batch_by_tokens(lengths, max_tokens))
    assert {len(batches) for batches in epoch0} == {n_batches // world_size}
    indices = [i for batches in epoch0 for batch in batches for i in batch]
    assert len(set(indices)) == len(indices)  # disjoint
    for batches in epoch0:
        for batch in batches:
            padded = len(batch) * max(max(lengths[i][0], lengths[i][1] + 1) for i in batch)
            assert padded <= max_tokens
    # The union is the single-process epoch, without its tail.
    whole = batch_by_tokens(lengths, max_tokens, seed=4, epoch=0)
    taken = sorted(batch for batches in epoch0 for batch in batches)
    assert taken == sorted(whole[: n_batches // world_size * world_size])
    assert per_rank(0) == epoch0  # deterministic for an epoch
    assert per_rank(1) != epoch0  # and a new order for another
    # Without a process group: rank 0 of 1, the batches of TokenBatchSampler.
    alone = DistributedTokenBatchSampler(lengths, max_tokens, seed=4)
    assert (alone.rank, alone.world_size) == (0, 1)
    assert list(alone) == list(TokenBatchSampler(lengths, max_tokens, seed=4))
    with pytest.raises(ValueError, match="rank must lie in"):
        DistributedTokenBatchSampler(lengths, max_tokens, rank=3, world_size=3)
