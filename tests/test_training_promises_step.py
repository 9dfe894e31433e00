"""Promises of chapter 9's training step and loop (the methods the chapter adds to the Trainer cell by
cell): the token count of a step and its sum over the ranks, where the batches are sent, which
micro-batches of a distributed step communicate, the log points, the progress display, stopping,
the seeds, resuming, divergence, and `evaluate`'s scores."""

import contextlib
import io
import math
import random
import sys
import threading

import pytest
import torch
import torch.nn.functional as F
from helpers import copy_batches, tiny_trainer
from tqdm import tqdm

from annotated_transformer.batching import EOS, PAD, Batch, make_batch
from annotated_transformer.training import TrainingDiverged, evaluate

# --- helpers -------------------------------------------------------------------------------------


class MovesRecorded(Batch):
    """A batch given on the host that notes every `to(device, non_blocking)` asked of it."""

    def to(self, device, non_blocking: bool = False) -> Batch:
        self.moves.append((torch.device(device) if device is not None else None, non_blocking))
        return super().to(device, non_blocking=non_blocking)


def recording(batch: Batch, moves: list) -> MovesRecorded:
    copy = MovesRecorded(*batch.tensors(), pad=batch.pad, n_tokens=batch.n_tokens)
    copy.moves = moves
    return copy


class TwoIdenticalRanks:
    """What DistributedDataParallel does in a step, seen from one of two ranks that hold the same
    data: it runs the model, and it averages the two ranks' (equal) gradients, which leaves them as
    they are. It notes, at each forward pass, whether the pass is inside `no_sync()`."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.module = model
        self.syncing = True
        self.passes: list[bool] = []  # True: this micro-batch's backward communicates

    def __call__(self, *inputs):
        self.passes.append(self.syncing)
        return self.module(*inputs)

    @contextlib.contextmanager
    def no_sync(self):
        self.syncing = False
        try:
            yield
        finally:
            self.syncing = True


def two_ranks(trainer, monkeypatch) -> TwoIdenticalRanks:
    """Make `trainer` one of two ranks holding the same batches: all_reduce doubles what it sums."""
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda tensor, *args, **kwargs: tensor.mul_(2))
    trainer.ddp, trainer.world_size = TwoIdenticalRanks(trainer.model), 2
    return trainer.ddp


def gradients(trainer) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in trainer.model.parameters()]


def poisoned_gradient(trainer) -> None:
    """From now on the first parameter's gradient is infinite (the loss stays finite)."""
    next(trainer.model.parameters()).register_hook(lambda grad: torch.full_like(grad, math.inf))


# --- the token count of a step --------------------------------------------------------------------


def test_a_step_of_one_target_token_trains_and_one_of_none_is_refused_by_name():
    t = tiny_trainer()
    one = make_batch([([5, 6], [])])  # an empty target: only eos to predict
    assert one.n_tokens == 1
    stats = t.train_step([one])
    assert stats.n_tokens == 1 and math.isfinite(stats.loss) and t.step == 1
    only_padding = Batch(one.src, one.tgt_in, torch.full_like(one.tgt_out, PAD), one.src_mask, one.tgt_mask)
    assert only_padding.n_tokens == 0
    with pytest.raises(ValueError) as caught:
        t.train_step([only_padding])
    assert str(caught.value) == "empty batch: the micro-batches hold no target tokens (only padding)"
    assert t.step == 1  # nothing was trained


def test_an_empty_step_is_refused_with_its_message():
    with pytest.raises(ValueError) as caught:
        tiny_trainer().train_step_async([])
    assert str(caught.value) == "empty batch: train_step needs at least one micro-batch"


def test_under_ddp_the_token_count_is_summed_over_the_ranks_on_the_trainers_device(monkeypatch):
    t = tiny_trainer()
    two_ranks(t, monkeypatch)
    batches = copy_batches(0)[:3]
    with torch.device("meta"):  # another default device: the count must still lie on the trainer's
        total = t._global_tokens(batches)
    assert isinstance(total, torch.Tensor) and total.shape == () and total.device == t.device
    assert total.item() == 2 * sum(b.n_tokens for b in batches)


def test_a_step_of_two_identical_ranks_has_one_ranks_gradient_and_statistics(monkeypatch):
    """DDP averages the ranks' gradients; × world_size makes the step's gradient that of the global
    batch's loss per token, which for two ranks holding the same data is one rank's own. The
    statistics are the global batch's: its tokens, and the losses summed over the ranks."""
    batches = copy_batches(0)[:3]
    alone = tiny_trainer(accumulate=3, track_grad_norm=True)
    expected = alone.train_step(batches)
    t = tiny_trainer(accumulate=3, track_grad_norm=True)
    two_ranks(t, monkeypatch)
    stats = t.train_step(batches)
    assert stats.n_tokens == 2 * expected.n_tokens
    assert stats.loss == pytest.approx(expected.loss, rel=1e-5)
    assert stats.nll == pytest.approx(expected.nll, rel=1e-5)
    assert stats.grad_norm == pytest.approx(expected.grad_norm, rel=1e-4)
    for ours, theirs in zip(gradients(t), gradients(alone), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("accumulate", [1, 2, 3])
def test_only_the_last_micro_batch_of_a_ddp_step_communicates(monkeypatch, accumulate):
    t = tiny_trainer(accumulate=accumulate)
    ddp = two_ranks(t, monkeypatch)
    t.train_step(copy_batches(0)[:accumulate])
    assert ddp.passes == [False] * (accumulate - 1) + [True]


# --- where the batches go --------------------------------------------------------------------------


def test_a_step_sends_its_batches_to_the_trainers_device_without_waiting():
    moves: list = []
    t = tiny_trainer()
    t.train_step_async([recording(batch, moves) for batch in copy_batches(0)[:2]])
    assert moves == [(torch.device("cpu"), True)] * 2


@pytest.mark.parametrize("prefetch", [False, True])
def test_fit_sends_the_epochs_batches_to_the_trainers_device(prefetch):
    moves: list = []
    t = tiny_trainer(max_steps=2, accumulate=2, prefetch=prefetch)
    t.fit(lambda epoch: [recording(batch, moves) for batch in copy_batches(epoch)[:4]])
    assert moves == [(torch.device("cpu"), True)] * 4


class ThreadsRecorded(list):
    """An epoch's batches, noting the threads that take groups of them."""

    def __init__(self, batches):
        super().__init__(batches)
        self.threads: set[int] = set()

    def __getitem__(self, index):
        self.threads.add(threading.get_ident())
        return super().__getitem__(index)


@pytest.mark.parametrize("prefetch", [False, True])
def test_prefetch_builds_the_groups_in_a_background_thread(prefetch):
    epochs: list[ThreadsRecorded] = []

    def epoch_batches(epoch):
        epochs.append(ThreadsRecorded(copy_batches(epoch)[:4]))
        return epochs[-1]

    t = tiny_trainer(max_steps=2, accumulate=2, prefetch=prefetch)
    t.fit(epoch_batches)
    main = threading.get_ident()
    if prefetch:
        assert epochs[0].threads and main not in epochs[0].threads
    else:
        assert epochs[0].threads == {main}


# --- log points, stopping, progress ----------------------------------------------------------------


def test_log_every_one_makes_every_step_a_log_point():
    t = tiny_trainer(max_steps=3, log_every=1)
    logged: list = []
    t.fit(copy_batches, on_log=lambda records: logged.append([r.step for r in records]))
    assert logged == [[1], [2], [3]]


def test_on_log_returning_true_stops_training():
    t = tiny_trainer(max_steps=10, log_every=2)
    logged: list = []

    def on_log(records):
        logged.append([r.step for r in records])
        return records[-1].step == 4

    history = t.fit(copy_batches, on_log=on_log)
    assert logged == [[1, 2], [3, 4]] and t.step == 4 and [s.step for s in history] == [1, 2, 3, 4]


def test_end_schedule_at_the_first_step_trains_one_step():
    t = tiny_trainer(max_steps=5)
    t.end_schedule_at(1)
    history = t.fit(copy_batches)
    assert t.last_step == 1 and t.step == 1 and [s.step for s in history] == [1]


def test_progress_off_prints_nothing(capsys):
    t = tiny_trainer(max_steps=3, log_every=1, progress=False)
    t.fit(copy_batches)
    assert capsys.readouterr().out == ""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_bar_counts_the_runs_steps_from_where_it_resumed(monkeypatch):
    first = tiny_trainer(max_steps=5)
    first.fit(copy_batches, on_step=lambda step: step == 3)
    t = tiny_trainer(max_steps=5, progress=True)
    t.load_state_dict(first.state_dict())
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    # tqdm's default lock is a multiprocessing one, shared with every process forked later (mutmut forks
    # one per mutant): a process killed while it holds it would leave the next ones waiting forever.
    # A thread lock and no monitor thread keep this test's bar to this process.
    monkeypatch.setattr(tqdm, "_lock", threading.RLock(), raising=False)
    monkeypatch.setattr(tqdm, "monitor_interval", 0)
    t.fit(copy_batches)
    out = terminal.getvalue()
    assert "3/5" in out and "5/5" in out  # the bar starts at the step resumed from
    assert "0/5" not in out and "2/5" not in out


# --- the seeds -------------------------------------------------------------------------------------


def test_a_fresh_fit_seeds_pythons_random_from_the_config():
    draws: list[float] = []

    def epoch_batches(epoch):
        draws.append(random.random())
        return copy_batches(epoch)[:2]

    random.seed(12345)
    tiny_trainer(max_steps=1, seed=7).fit(epoch_batches)
    random.seed(54321)
    tiny_trainer(max_steps=1, seed=7).fit(epoch_batches)
    random.seed(7)
    assert draws == [random.random()] * 2


# --- divergence ------------------------------------------------------------------------------------


def test_an_infinite_gradient_norm_with_a_finite_loss_is_a_divergence():
    t = tiny_trainer(max_steps=1, track_grad_norm=True)
    poisoned_gradient(t)
    with pytest.raises(TrainingDiverged) as caught:
        t.fit(copy_batches)
    message = str(caught.value)
    assert "training diverged at step 1: the gradient norm is inf; no checkpoint had been taken yet. Try" \
        in message


def test_after_resuming_a_divergence_names_the_step_resumed_from_as_kept():
    first = tiny_trainer(max_steps=4)
    first.fit(copy_batches, on_step=lambda step: step == 2)
    t = tiny_trainer(max_steps=4, track_grad_norm=True)
    t.load_state_dict(first.state_dict())
    poisoned_gradient(t)
    with pytest.raises(TrainingDiverged) as caught:
        t.fit(copy_batches)
    assert "at step 3: the gradient norm is inf; the last checkpoint was taken at step 2, before it" \
        in str(caught.value)


# --- freezing --------------------------------------------------------------------------------------


def test_a_parameter_frozen_between_steps_does_not_move():
    """Each step starts with no gradients at all: a parameter frozen after step 1 has none in step 2,
    so Adam leaves it alone (a zeroed stale gradient would move it by its momentum)."""
    t = tiny_trainer(max_steps=2)
    t.train_step(copy_batches(0)[:1])
    frozen = next(t.model.parameters())
    frozen.requires_grad_(False)
    before = frozen.detach().clone()
    t.train_step(copy_batches(0)[1:2])
    assert torch.equal(frozen, before)


# --- evaluate --------------------------------------------------------------------------------------


class FixedLogits(torch.nn.Module):
    """A 'model' whose logits are given: the arg-max is the target but at the positions `wrong` and
    at the padding, where it is another token; its one parameter lies on `where` (its device)."""

    def __init__(self, tgt_out: torch.Tensor, wrong: set[tuple[int, int]], vocab: int, where="cpu",
                 pad: int = PAD):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros((), device=where))
        self.logits = torch.zeros(*tgt_out.shape, vocab)
        for b, row in enumerate(tgt_out.tolist()):
            for t, token in enumerate(row):
                best = (token + 1) % vocab if (b, t) in wrong or token == pad else token
                self.logits[b, t, best] = 3.0
                self.logits[b, t, (best + 2) % vocab] = 1.0

    def forward(self, src, tgt_in, src_mask, tgt_mask):
        return self.logits.to(tgt_in.device)


def scored_batch(pad: int = PAD) -> Batch:
    # Row 0 (no padding) gets its second token wrong; rows 1 and 2 are padded and every real token is
    # right, but at their padding the arg-max is another token (padding is never wrong).
    return make_batch([([4, 5], [6, 7, 8]), ([4], [6]), ([5, 6], [7, 8])], pad=pad)


def expected_nll(logits: torch.Tensor, tgt_out: torch.Tensor, pad: int) -> float:
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), ignore_index=pad,
                           reduction="sum").item() / int((tgt_out != pad).sum())


@pytest.mark.parametrize("pad", [PAD, 9])
def test_evaluate_scores_a_padded_batch_leaving_the_padding_out(pad):
    batch = scored_batch(pad)
    assert (batch.tgt_out == pad).any() and batch.tgt_out[0].tolist() == [6, 7, 8, EOS]
    model = FixedLogits(batch.tgt_out, wrong={(0, 1)}, vocab=12, pad=pad)
    assert (model.logits.argmax(-1)[1:][batch.tgt_out[1:] == pad] != pad).all()
    result = evaluate(model, [batch], pad=pad)
    nll = expected_nll(model.logits, batch.tgt_out, pad)
    assert result["nll"] == pytest.approx(nll, rel=1e-6)
    assert result["ppl"] == pytest.approx(math.exp(nll), rel=1e-6)
    assert result["exact_match"] == pytest.approx(2 / 3)


def test_evaluate_sends_the_batches_to_the_models_device_or_the_one_given():
    moves: list = []
    batch = scored_batch()
    model = FixedLogits(batch.tgt_out, wrong=set(), vocab=12)
    assert evaluate(model, [recording(batch, moves)])["exact_match"] == 1.0
    assert moves == [(torch.device("cpu"), False)]
    # A model whose parameters lie elsewhere: the device given is where the batches go.
    moves.clear()
    elsewhere = FixedLogits(batch.tgt_out, wrong=set(), vocab=12, where="meta")
    assert evaluate(elsewhere, [recording(batch, moves)], device="cpu")["exact_match"] == 1.0
    assert moves == [(torch.device("cpu"), False)]


def test_evaluate_refuses_no_batches_with_its_message():
    with pytest.raises(ValueError) as caught:
        evaluate(FixedLogits(scored_batch().tgt_out, set(), 12), [])
    assert str(caught.value) == "evaluate needs at least one batch, got none"
