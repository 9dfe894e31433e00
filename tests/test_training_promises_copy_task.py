"""Promises of chapter 9's copy task (`copy_task_config`, `train_copy_task`) at tiny settings, and of
the trainer's construction (`Trainer.__init__`: the device, DDP, the gradient scaler, prefetching, the
padding id), `read_steps`, `_micro_batch_groups` and `_forward_loss`. Every test here runs in well
under a second or two: the full copy task is test_training.py's."""

import threading
import typing
import warnings
from types import SimpleNamespace

import pytest
import torch
from helpers import tiny_model
from torch import nn

from annotated_transformer import training
from annotated_transformer.batching import (
    PAD,
    UNK,
    batch_by_sentences,
    batch_by_tokens,
    copy_task,
    make_batch,
)
from annotated_transformer.model import Transformer, make_model
from annotated_transformer.optimizer import rate
from annotated_transformer.regularization import LabelSmoothingLoss, rdrop_forward_loss
from annotated_transformer.training import (
    PendingStep,
    TrainConfig,
    Trainer,
    _micro_batch_groups,
    copy_task_config,
    evaluate,
    read_steps,
    train_copy_task,
)

TINY = {"n_train": 200, "n_test": 20, "batch_size": 40, "device": "cpu"}


@pytest.fixture
def spy(monkeypatch):
    """What `train_copy_task` builds: its trainer (whose `fit` gets the epochs' batches and the
    `on_step` check) and every `evaluate` call. `seen.perfect_at = k` makes the k-th evaluation report
    every sequence right; a trainer never trains past `seen.cap` steps (a guard for long runs)."""
    seen = SimpleNamespace(trainers=[], epoch_batches=[], on_step=[], evaluated=[], perfect_at=None, cap=50,
                           last_step=None)

    class SpyTrainer(Trainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen.trainers.append(self)
            if self.config.max_steps > seen.cap:
                self.end_schedule_at(seen.cap)

        def fit(self, epoch_batches, on_log=None, on_step=None, on_checkpoint=None):
            seen.epoch_batches.append(epoch_batches)
            seen.on_step.append(on_step)
            if seen.last_step is not None:
                self.end_schedule_at(seen.last_step)
            return super().fit(epoch_batches, on_log=on_log, on_step=on_step, on_checkpoint=on_checkpoint)

    def spy_evaluate(model, batches, *args, **kwargs):
        seen.evaluated.append((model, batches))
        result = evaluate(model, batches, *args, **kwargs)
        if seen.perfect_at == len(seen.evaluated):
            result = {**result, "exact_match": 1.0}
        return result

    monkeypatch.setattr(training, "Trainer", SpyTrainer)
    monkeypatch.setattr(training, "evaluate", spy_evaluate)
    return seen


def sequences(batches) -> list[tuple[int, ...]]:
    """The source sequences of `batches`, row by row, without their padding."""
    return [tuple(t for t in row.tolist() if t != PAD) for batch in batches for row in batch.src]


def same_batches(got, expected) -> bool:
    if len(got) != len(expected):
        return False
    return all(torch.equal(a.src, b.src) and torch.equal(a.tgt_out, b.tgt_out)
               for a, b in zip(got, expected, strict=True))


def no_default_device():
    raise AssertionError("a device was given: the default device must not be asked for")


# --- copy_task_config -----------------------------------------------------------------------------


@pytest.mark.parametrize("vocab_size", [None, 9])
def test_the_copy_task_model_has_2_layers_d_model_64_4_heads_d_ff_256_no_dropout(vocab_size):
    config = copy_task_config() if vocab_size is None else copy_task_config(vocab_size)
    expected_vocab = 12 if vocab_size is None else vocab_size  # 8 symbols and the 4 specials by default
    assert (config.src_vocab_size, config.tgt_vocab_size) == (expected_vocab, expected_vocab)
    assert (config.n_layers, config.d_model, config.d_ff, config.n_heads) == (2, 64, 256, 4)
    assert config.dropout == 0.0
    assert config.max_len == 64


# --- train_copy_task ------------------------------------------------------------------------------


def test_train_copy_task_trains_a_model_of_copy_task_config_on_the_device_given(spy, monkeypatch):
    monkeypatch.setattr(training, "default_device", no_default_device)
    model, report = train_copy_task(vocab_size=9, max_steps=2, eval_every=1, **TINY)
    assert isinstance(model, Transformer)
    config = model.config
    assert (config.src_vocab_size, config.tgt_vocab_size, config.n_layers, config.d_model) == (9, 9, 2, 64)
    assert (config.d_ff, config.n_heads, config.dropout, config.max_len) == (256, 4, 0.0, 64)
    assert len(model.encoder.layers) == 2 and len(model.decoder.layers) == 2
    assert model is spy.trainers[0].model
    assert spy.trainers[0].device == torch.device("cpu")
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert report.steps == 2


def test_held_out_sequences_are_another_seeds_draw_never_trained_on(spy):
    """The held-out set: the first n_test pairs of another seed's draw (seed + 1, four times n_test
    of them) whose sequence the training set does not hold; fewer when too few are new."""
    settings = {"vocab_size": 7, "min_len": 2, "max_len": 3, "n_train": 60, "n_test": 20, "seed": 0}
    _, report = train_copy_task(**settings, max_steps=1, eval_every=5, batch_size=30, device="cpu")
    train = sequences(spy.epoch_batches[0](0))
    held_out = sequences(spy.evaluated[-1][1])
    expected_train = copy_task(60, 7, 2, 3, seed=0)
    assert sorted(train) == sorted(tuple(s) for s, _ in expected_train)
    assert not set(held_out) & set(train)
    candidates = copy_task(80, 7, 2, 3, seed=1)
    expected = [tuple(s) for s, _ in candidates if tuple(s) not in set(train)][:20]
    assert held_out == expected
    assert 0 < report.n_held_out == len(held_out) < 20  # too few new sequences of 2 or 3 symbols
    for batch in spy.evaluated[-1][1]:  # a copy: the target is the source, then EOS
        for src, out in zip(batch.src.tolist(), batch.tgt_out.tolist(), strict=True):
            assert [t for t in out if t != PAD][:-1] == [t for t in src if t != PAD]


def test_held_out_sequences_number_n_test_and_each_is_scored_once(spy):
    _, report = train_copy_task(vocab_size=12, n_train=200, n_test=300, max_steps=1, eval_every=5,
                                batch_size=50, seed=2, device="cpu")
    assert report.n_held_out == 300
    held_out = sequences(spy.evaluated[-1][1])
    assert len(held_out) == 300
    train = set(sequences(spy.epoch_batches[0](0)))
    candidates = [tuple(s) for s, _ in copy_task(1200, 12, 4, 10, seed=3)]
    assert held_out == [s for s in candidates if s not in train][:300]
    assert all(4 <= len(s) <= 10 and all(UNK < t < 12 for t in s) for s in held_out)


def test_batches_of_random_sentences_are_batch_by_sentences_of_the_seed_and_epoch(spy):
    train_copy_task(vocab_size=10, min_len=3, max_len=6, n_train=200, n_test=20, batch_size=30,
                    batching="sentences", max_steps=1, eval_every=5, seed=3, device="cpu")
    pairs = copy_task(200, 10, 3, 6, seed=3)
    epoch_batches = spy.epoch_batches[0]
    for epoch in (0, 1):
        expected = [make_batch([pairs[i] for i in indices])
                    for indices in batch_by_sentences(200, 30, seed=3, epoch=epoch)]
        got = epoch_batches(epoch)
        assert same_batches(got, expected)
        assert [len(b) for b in got] == [30] * 6 + [20]
    assert not same_batches(epoch_batches(0), epoch_batches(1))  # a new order every epoch


def test_batches_by_length_are_batch_by_tokens_of_the_seed_and_epoch(spy):
    train_copy_task(vocab_size=10, min_len=3, max_len=6, n_train=200, n_test=20, batching="tokens",
                    max_tokens=120, max_steps=1, eval_every=5, seed=3, device="cpu")
    pairs = copy_task(200, 10, 3, 6, seed=3)
    lengths = [(len(s), len(t)) for s, t in pairs]
    epoch_batches = spy.epoch_batches[0]
    for epoch in (0, 1):
        expected = [make_batch([pairs[i] for i in indices])
                    for indices in batch_by_tokens(lengths, 120, seed=3, epoch=epoch)]
        got = epoch_batches(epoch)
        assert same_batches(got, expected)
        assert all(b.src.numel() <= 120 and b.tgt_out.numel() <= 120 for b in got)


def test_the_defaults_a_reader_gets(spy, monkeypatch, capsys):
    """train_copy_task(): vocabulary 12, sequences of 4 to 10, 20,000 training pairs in batches of 100
    random sentences, 500 held out, up to 1000 steps, warmup 200, lr_factor 0.25, a check every 25
    steps, seed 0, the default device, silent. (One step is trained; the check is called by hand.)"""
    asked = []
    monkeypatch.setattr(training, "default_device", lambda: asked.append(1) or torch.device("cpu"))
    spy.last_step = 1
    model, report = train_copy_task()
    assert asked and spy.trainers[0].device == torch.device("cpu")
    assert capsys.readouterr().out == ""
    assert model.config.src_vocab_size == 12
    config = spy.trainers[0].config
    assert (config.max_steps, config.warmup, config.lr_factor, config.seed) == (1000, 200, 0.25, 0)
    assert (config.log_every, config.progress) == (0, False)
    assert report.steps == 1 and report.n_held_out == 500 and report.history == []
    batches = spy.epoch_batches[0](0)
    assert [len(b) for b in batches] == [100] * 200
    train = sequences(batches)
    assert min(map(len, train)) == 4 and max(map(len, train)) == 10
    assert {t for s in train for t in s} == set(range(UNK + 1, 12))
    pairs = copy_task(20_000, 12, 4, 10, seed=0)
    expected = [make_batch([pairs[i] for i in indices]) for indices in batch_by_sentences(20_000, 100)[:3]]
    assert same_batches(batches[:3], expected)
    check = spy.on_step[0]
    assert check(24) is False and report.history == []
    check(25)
    assert [h["step"] for h in report.history] == [25]


def test_batches_by_length_hold_at_most_1000_tokens_by_default(spy):
    spy.last_step = 1
    train_copy_task(batching="tokens", device="cpu")
    batches = spy.epoch_batches[0](0)
    sizes = [max(b.src.numel(), b.tgt_out.numel()) for b in batches]
    assert max(sizes) <= 1000 < max(sizes) + 11  # full batches of 10 symbols (+ EOS): 90 x 11 = 990
    assert sum(len(b) for b in batches) == 20_000


def test_the_report_and_a_check_every_eval_every_steps(spy, monkeypatch, capsys):
    monkeypatch.setattr(training, "default_device", no_default_device)
    model, report = train_copy_task(max_steps=5, eval_every=2, progress=True, **TINY)
    assert report.steps == 5 and isinstance(report.steps, int)
    assert [h["step"] for h in report.history] == [2, 4]
    for h in report.history:
        assert set(h) == {"step", "seconds", "nll", "ppl", "exact_match"}
        assert 0 <= h["seconds"] <= report.seconds
        assert 0 <= h["exact_match"] <= 1 and h["nll"] > 0
    assert report.history[0]["seconds"] <= report.history[1]["seconds"]
    assert isinstance(report.seconds, float) and 0 < report.seconds < 60
    assert report.n_held_out == 20
    final = evaluate(model, spy.evaluated[-1][1])
    assert report.exact_match == final["exact_match"]
    assert report.nll == pytest.approx(final["nll"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [["step", "5"]]  # progress: one line, at the end


def test_training_stops_at_the_first_check_that_finds_every_sequence_right(spy):
    spy.perfect_at = 2  # the second check (step 4) reports an exact match of 1.0
    _, report = train_copy_task(max_steps=10, eval_every=2, **TINY)
    assert report.steps == 4
    assert [h["step"] for h in report.history] == [2, 4]
    assert [h["exact_match"] for h in report.history][-1] == 1.0


def test_the_arguments_reach_the_training_config_and_it_is_a_plain_trainer_fit(spy):
    """train_copy_task is Trainer.fit of a copy_task_config model with TrainConfig(max_steps, warmup,
    lr_factor, seed), no log points but the last, on the copy task's batches: a trainer built by
    hand ends with the same parameters."""
    model, report = train_copy_task(vocab_size=9, n_train=120, n_test=10, batch_size=40, max_steps=3,
                                    warmup=7, lr_factor=0.5, eval_every=10, seed=2, device="cpu")
    config = spy.trainers[0].config
    assert (config.max_steps, config.warmup, config.lr_factor, config.seed) == (3, 7, 0.5, 2)
    assert (config.log_every, config.progress) == (0, False)
    torch.manual_seed(2)
    by_hand = make_model(copy_task_config(9))
    pairs = copy_task(120, 9, 4, 10, seed=2)

    def epoch_batches(epoch):
        return [make_batch([pairs[i] for i in ix]) for ix in batch_by_sentences(120, 40, seed=2, epoch=epoch)]

    trainer = Trainer(by_hand, TrainConfig(max_steps=3, warmup=7, lr_factor=0.5, log_every=0, progress=False,
                                           seed=2), device="cpu")
    trainer.fit(epoch_batches)
    for a, b in zip(model.parameters(), by_hand.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert report.steps == trainer.step == 3


def test_a_seed_reproduces_a_run_and_another_seed_gives_another(spy):
    def run(**seed):
        model, report = train_copy_task(max_steps=2, eval_every=1, **TINY, **seed)
        return [p.detach().clone() for p in model.parameters()], report

    first, report_1 = run(seed=0)
    again, report_2 = run()  # the default seed is 0
    other, report_3 = run(seed=1)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert report_1.nll == report_2.nll and report_1.n_held_out == report_2.n_held_out
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))
    assert report_1.nll != report_3.nll


# --- Trainer.__init__ -----------------------------------------------------------------------------


class FakeDDP(nn.Module):
    """Stands for DistributedDataParallel (which needs a process group): records its arguments and
    the calls through it."""

    made: typing.ClassVar[list] = []

    def __init__(self, module=None, device_ids="not given"):
        super().__init__()
        self.wrapped, self.device_ids, self.calls = module, device_ids, 0
        FakeDDP.made.append(self)

    def forward(self, *args):
        self.calls += 1
        return self.wrapped(*args)


def fake_processes(monkeypatch, world_size: int):
    """A run of `world_size` processes with a GPU (index 3 current) that the machine need not have: the
    model's move is recorded, not done, and DDP is FakeDDP."""
    FakeDDP.made = []
    monkeypatch.setattr(training, "rank_and_world_size", lambda: (1 % world_size, world_size))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch.cuda.amp.common, "amp_definitely_not_available", lambda: False)
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", FakeDDP)
    model, moved = tiny_model(), []
    monkeypatch.setattr(model, "to", lambda device: moved.append(device) or model)
    return model, moved


def test_a_device_given_is_used_and_the_default_one_never_asked(monkeypatch):
    monkeypatch.setattr(training, "default_device", no_default_device)
    model = tiny_model()
    real_to, moved = model.to, []
    monkeypatch.setattr(model, "to", lambda device: moved.append(device) or real_to(device))
    trainer = Trainer(model, TrainConfig(progress=False), device="cpu")
    assert trainer.device == torch.device("cpu") and moved == [torch.device("cpu")]


def test_without_a_device_the_trainer_takes_the_default_one(monkeypatch):
    asked = []
    monkeypatch.setattr(training, "default_device", lambda: asked.append(1) or torch.device("cpu"))
    trainer = Trainer(tiny_model(), TrainConfig(progress=False))
    assert asked == [1] and trainer.device == torch.device("cpu")


def test_a_single_process_keeps_the_gpu_it_is_given_and_prefetches_there(monkeypatch):
    model, moved = fake_processes(monkeypatch, world_size=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer = Trainer(model, TrainConfig(precision="fp32", progress=False), device="cuda")
    assert trainer.device == torch.device("cuda") and moved == [torch.device("cuda")]
    assert trainer.ddp is None and FakeDDP.made == []
    assert trainer.prefetch is True  # prefetch=None: on a GPU
    assert not trainer.scaler.is_enabled()  # fp32: no gradient scaler


def test_each_rank_of_a_run_trains_on_its_current_gpu_through_ddp(monkeypatch):
    model, moved = fake_processes(monkeypatch, world_size=2)
    trainer = Trainer(model, TrainConfig(precision="fp32", progress=False), device="cuda")
    assert trainer.device == torch.device("cuda", 3) and moved == [torch.device("cuda", 3)]
    assert len(FakeDDP.made) == 1 and trainer.ddp is FakeDDP.made[0]
    assert trainer.ddp.wrapped is model and trainer.ddp.device_ids == [3]
    assert trainer.model is model
    assert trainer.prefetch is True


def test_a_gpu_with_an_index_is_kept_by_every_rank(monkeypatch):
    model, _ = fake_processes(monkeypatch, world_size=2)
    trainer = Trainer(model, TrainConfig(precision="fp32", progress=False), device="cuda:1")
    assert trainer.device == torch.device("cuda", 1) and trainer.ddp.device_ids == [1]


def test_ranks_on_the_cpu_train_through_ddp_without_device_ids(monkeypatch):
    model, moved = fake_processes(monkeypatch, world_size=2)
    trainer = Trainer(model, TrainConfig(progress=False), device="cpu")
    assert trainer.device == torch.device("cpu") and moved == [torch.device("cpu")]
    assert trainer.ddp.wrapped is model and trainer.ddp.device_ids is None
    assert trainer.prefetch is False
    batch = make_batch(copy_task(3, vocab_size=23, min_len=2, max_len=5, seed=0))
    loss, nll = trainer.forward_loss(*batch.tensors())  # the forward pass goes through DDP
    assert trainer.ddp.calls == 1 and torch.isfinite(loss) and nll > 0


def test_fp16_gets_a_gradient_scaler_and_other_precisions_none(monkeypatch):
    model, _ = fake_processes(monkeypatch, world_size=1)
    def scaler(precision):
        return Trainer(model, TrainConfig(precision=precision, progress=False), device="cuda").scaler

    assert scaler("fp16").is_enabled() and not scaler("fp32").is_enabled()


def test_a_cpu_trainer_builds_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer = Trainer(tiny_model(), TrainConfig(progress=False), device="cpu")
    assert not trainer.scaler.is_enabled()


@pytest.mark.parametrize(("prefetch", "device", "expected"),
                         [(None, "cpu", False), (True, "cpu", True), (False, "cuda", False),
                          (None, "cuda", True)])
def test_prefetch_is_the_configs_or_by_default_on_a_gpu(monkeypatch, prefetch, device, expected):
    model, _ = fake_processes(monkeypatch, world_size=1)
    trainer = Trainer(model, TrainConfig(precision="fp32", prefetch=prefetch, progress=False), device=device)
    assert trainer.prefetch is expected


def test_without_a_warmup_ramp_the_first_step_takes_the_peak_rate():
    trainer = Trainer(tiny_model(), TrainConfig(warmup=10, lr_factor=0.5, warmup_ramp=False, progress=False),
                      device="cpu")
    batch = make_batch(copy_task(4, vocab_size=23, min_len=2, max_len=5, seed=0))
    stats = trainer.train_step([batch])
    peak = 0.5 * 32**-0.5 * 10**-0.5
    assert stats.lr == pytest.approx(rate(1, 32, 10, 0.5, ramp=False)) == pytest.approx(peak)


def test_a_trainers_padding_id_is_ignored_by_its_loss_and_r_drop(monkeypatch):
    """Trainer(pad=5): the smoothed loss and R-Drop's KL leave out the positions whose target is 5."""
    pad = 5
    pairs = [([6, 7, 8, 9], [6, 7, 8, 9]), ([10, 11], [10, 11]), ([12], [12])]
    batch = make_batch(pairs, pad=pad)
    model = tiny_model(dropout=0.3)
    trainer = Trainer(model, TrainConfig(rdrop_alpha=1.0, progress=False), device="cpu", pad=pad)
    assert trainer.pad == pad
    torch.manual_seed(0)
    loss, nll = trainer.forward_loss(*batch.tensors())
    criterion = LabelSmoothingLoss(23, 0.1, pad=pad)
    torch.manual_seed(0)
    inputs = (batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    expected_loss, expected_nll = rdrop_forward_loss(model, inputs, batch.tgt_out, criterion, 1.0, pad)
    torch.testing.assert_close(loss, expected_loss)
    torch.testing.assert_close(nll, expected_nll)


# --- read_steps -----------------------------------------------------------------------------------


def pending(step=1, loss=0.5, nll=6.0, n_tokens=3, grad_norm=None):
    return PendingStep(step, torch.tensor(loss), torch.tensor(nll), n_tokens, 1e-3,
                       None if grad_norm is None else torch.tensor(grad_norm))


def test_a_token_count_on_the_device_is_read_as_an_int():
    [stats] = read_steps([pending(nll=14.0, n_tokens=torch.tensor(7.0))])
    assert stats.n_tokens == 7 and type(stats.n_tokens) is int
    assert stats.nll == pytest.approx(2.0)


def test_a_step_of_one_target_token_reports_its_whole_cross_entropy():
    [stats] = read_steps([pending(nll=3.0, n_tokens=1)])
    assert stats.nll == pytest.approx(3.0) and stats.n_tokens == 1


def test_summed_over_ranks_the_losses_are_the_global_batchs(monkeypatch):
    def all_reduce(tensor):  # two ranks with the same losses
        tensor.mul_(2)

    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    [stats] = read_steps([pending(loss=0.5, nll=6.0, n_tokens=4)], sum_over_ranks=True)
    assert stats.loss == pytest.approx(1.0) and stats.nll == pytest.approx(3.0)


# --- _micro_batch_groups --------------------------------------------------------------------------


class Recorded:
    """A batch whose move to a device is recorded: where to, whether blocking, by which thread."""

    def __init__(self, name, moves):
        self.name, self.moves = name, moves

    def to(self, device, non_blocking=False):
        self.moves.append((self.name, device, non_blocking, threading.current_thread()))
        return self.name


@pytest.mark.parametrize("prefetch", [False, True])
def test_groups_are_moved_to_the_device_without_waiting_in_the_right_thread(prefetch):
    moves = []
    batches = [Recorded(i, moves) for i in range(5)]
    device = torch.device("cpu")
    groups = list(_micro_batch_groups(batches, 1, 2, device, prefetch))
    assert groups == [[1, 2], [3, 4]]
    expected = [(i, device, True) for i in range(1, 5)]  # non_blocking: from pinned memory, no wait
    assert [(name, dev, blocking) for name, dev, blocking, _ in moves] == expected
    in_main = {thread is threading.main_thread() for *_, thread in moves}
    assert in_main == ({False} if prefetch else {True})  # with prefetch, a background thread builds them


@pytest.mark.parametrize("batching", ["token", "SENTENCES", "sentences "])
def test_an_unknown_batching_is_refused_by_name(batching):
    """A typo in `batching` must not train by sentences in silence."""
    with pytest.raises(ValueError, match=f"batching must be 'sentences' or 'tokens', not {batching!r}"):
        train_copy_task(batching=batching, n_train=10, n_test=2, max_steps=1)
