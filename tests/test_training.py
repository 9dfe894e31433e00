"""The training loop (chapter 9): gradient accumulation, the schedule, mixed precision,
compilation, checkpoints (atomic, validated, exactly resumable) and the copy task."""

import os
from pathlib import Path

import pytest
import torch
from helpers import small_config

from annotated_transformer.batching import EOS, PAD, Batch, batch_by_tokens, copy_task, make_batch
from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.model import make_model
from annotated_transformer.optimizer import rate
from annotated_transformer.training import (
    CheckpointError,
    TrainConfig,
    Trainer,
    autocast_context,
    checkpoint_paths,
    evaluate,
    load_checkpoint,
    model_from_checkpoint,
    quick_mode,
    read_checkpoint,
    save_checkpoint,
    train_copy_task,
)


def model(seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return make_model(small_config(**overrides))


def trainer(model_seed: int = 0, model_overrides: dict | None = None, **config) -> Trainer:
    config = {"warmup": 10, "progress": False, "log_every": 0, **config}
    return Trainer(model(model_seed, **(model_overrides or {})), TrainConfig(**config), device="cpu")


PAIRS = copy_task(300, vocab_size=23, min_len=2, max_len=12, seed=5)
LENGTHS = [(len(s), len(t)) for s, t in PAIRS]


def epoch_batches(epoch: int) -> list[Batch]:
    order = batch_by_tokens(LENGTHS, max_tokens=200, seed=0, epoch=epoch)
    return [make_batch([PAIRS[i] for i in indices]) for indices in order]


def parameters(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()]


def max_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


# --- quick mode and configuration ------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("true", True), ("YES", True), ("0", False),
                                                 ("", False), ("no", False)])
def test_quick_mode_reads_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv("ANNOTATED_TRANSFORMER_QUICK", value)
    assert quick_mode() is expected


def test_quick_mode_off_when_unset(monkeypatch):
    monkeypatch.delenv("ANNOTATED_TRANSFORMER_QUICK", raising=False)
    assert quick_mode() is False


def test_train_config_defaults_are_the_papers():
    config = TrainConfig()
    assert (config.max_steps, config.warmup, config.label_smoothing) == (100_000, 4000, 0.1)
    assert config.clip_grad_norm is None and config.precision == "fp32" and not config.compile


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_steps": 0}, "max_steps"),
        ({"accumulate": 0}, "accumulate"),
        ({"warmup": 0}, "warmup"),
        ({"label_smoothing": 1.0}, "label_smoothing"),
        ({"lr_factor": 0.0}, "lr_factor"),
        ({"clip_grad_norm": -1.0}, "clip_grad_norm"),
        ({"precision": "fp8"}, "precision"),
        ({"checkpoint_every": 10}, "checkpoint_dir"),
    ],
)
def test_train_config_rejects_bad_values(fields, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**fields)


# --- one step, gradient accumulation, the schedule -------------------------------------------


def test_accumulated_micro_batches_give_the_gradient_of_the_whole_batch():
    pairs = copy_task(7, vocab_size=23, min_len=1, max_len=15, seed=1)
    whole, split = trainer(), trainer()
    whole.train_step([make_batch(pairs)])
    split.train_step([make_batch(pairs[:2]), make_batch(pairs[2:5]), make_batch(pairs[5:])])
    grads_whole = [p.grad for p in whole.model.parameters()]
    grads_split = [p.grad for p in split.model.parameters()]
    assert max_difference(grads_whole, grads_split) < 1e-6
    # (Not the parameters: Adam's first update is about lr · sign(gradient), so a gradient that is
    # zero up to rounding may step either way.)


def test_per_micro_batch_means_would_give_another_gradient():
    # The control for the test above: normalizing each micro-batch by its own token count (a
    # common mistake) changes the gradient when the micro-batches hold different token counts.
    pairs = copy_task(7, vocab_size=23, min_len=1, max_len=15, seed=1)
    reference = trainer()
    reference.train_step([make_batch(pairs)])
    wrong = trainer()
    wrong.model.zero_grad()
    for part in (pairs[:2], pairs[2:5], pairs[5:]):
        batch = make_batch(part)
        logits = wrong.model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        (wrong.criterion(logits, batch.tgt_out) / batch.n_tokens / 3).backward()
    grads = [p.grad for p in wrong.model.parameters()]
    assert max_difference(grads, [p.grad for p in reference.model.parameters()]) > 1e-4


def test_schedule_advances_once_per_optimizer_step():
    t = trainer(accumulate=3)
    stats = [t.train_step(epoch_batches(0)[i : i + 3]) for i in (0, 3)]
    assert t.scheduler.last_epoch == 2 and t.step == 2
    assert [s.lr for s in stats] == [rate(1, 32, warmup=10), rate(2, 32, warmup=10)]
    assert t.optimizer.param_groups[0]["lr"] == rate(3, 32, warmup=10)


def test_step_stats_report_tokens_loss_and_cross_entropy():
    t = trainer(label_smoothing=0.0)
    batches = epoch_batches(0)[:2]
    stats = t.train_step(batches)
    assert stats.n_tokens == sum(b.n_tokens for b in batches)
    # Without smoothing the minimized loss is the cross-entropy itself.
    assert stats.loss == pytest.approx(stats.nll, rel=1e-5)
    assert stats.grad_norm is None


def test_gradient_clipping_bounds_the_norm():
    t = trainer(clip_grad_norm=1e-3)
    stats = t.train_step(epoch_batches(0)[:1])
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in t.model.parameters()]))
    assert stats.grad_norm > 1e-3
    assert norm.item() == pytest.approx(1e-3, rel=1e-3)


def test_empty_batches_are_refused():
    t = trainer()
    with pytest.raises(ValueError, match="empty batch"):
        t.train_step([])
    with pytest.raises(ValueError, match="no batches"):
        t.fit(lambda epoch: [])


def test_fit_counts_steps_and_epochs_and_stops_on_request():
    t = trainer(max_steps=1000, accumulate=2)
    n_batches = len(epoch_batches(0))
    history = t.fit(epoch_batches, on_step=lambda stats: stats.step == 5)
    assert len(history) == 5 and t.step == 5
    steps_per_epoch = -(-n_batches // 2)
    assert t.epoch == 5 // steps_per_epoch


def test_training_reduces_the_loss():
    t = trainer(max_steps=40, warmup=10, lr_factor=0.5)
    history = t.fit(epoch_batches)
    assert history[-1].nll < history[0].nll - 0.5


# --- mixed precision and compilation --------------------------------------------------------------


def test_bf16_autocast_trains_on_the_cpu():
    t = trainer(precision="bf16")
    stats = t.train_step(epoch_batches(0)[:1])
    assert torch.isfinite(torch.tensor(stats.loss))
    assert all(p.dtype == torch.float32 for p in t.model.parameters())  # master weights stay fp32


def test_fp16_needs_cuda():
    with pytest.raises(ValueError, match="CUDA"):
        autocast_context(torch.device("cpu"), "fp16")
    with pytest.raises(ValueError, match="CUDA"):
        trainer(precision="fp16")


def test_compiled_model_trains_and_checkpoints_plain_names(monkeypatch, tmp_path):
    real_compile = torch.compile
    # The inductor backend needs a C++ compiler and a minute; "eager" tests the same wiring.
    monkeypatch.setattr(torch, "compile", lambda module: real_compile(module, backend="eager"))
    t = trainer(compile=True)
    assert t.forward is not t.model
    t.train_step(epoch_batches(0)[:1])
    path = t.save_checkpoint(tmp_path / "compiled.pt")
    assert not any("_orig_mod" in key for key in read_checkpoint(path)["model"])


# --- checkpoints -----------------------------------------------------------------------------


def test_checkpoint_round_trip(tmp_path):
    t = trainer()
    t.train_step(epoch_batches(0)[:1])
    path = t.save_checkpoint(tmp_path / "a.pt")
    fresh = trainer(model_seed=1)
    fresh.resume(path)
    assert max_difference(parameters(t), parameters(fresh)) == 0.0
    assert fresh.step == 1 and fresh.scheduler.last_epoch == 1
    moments = [trainer.optimizer.state_dict()["state"][0]["exp_avg"] for trainer in (t, fresh)]
    assert moments[0].equal(moments[1])
    rebuilt = model_from_checkpoint(path)
    assert rebuilt.config == t.model.config
    assert max_difference(list(rebuilt.parameters()), parameters(t)) == 0.0


def test_checkpoints_are_loaded_with_weights_only(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "a.pt", model=model())
    calls = []
    real_load = torch.load
    monkeypatch.setattr(
        torch, "load", lambda *args, **kwargs: calls.append(kwargs) or real_load(*args, **kwargs)
    )
    read_checkpoint(path)
    assert calls and all(call.get("weights_only") is True for call in calls)


def test_resume_equals_an_uninterrupted_run(tmp_path):
    # Dropout on (the RNG states matter), accumulation of 2 (the position in the epoch matters),
    # and the interruption falls in the middle of the second epoch.
    def run(max_steps: int, resume_from: Path | None = None) -> Trainer:
        t = trainer(model_seed=3, model_overrides={"dropout": 0.1}, max_steps=max_steps, accumulate=2, seed=7)
        if resume_from is not None:
            t.resume(resume_from)
        t.fit(epoch_batches)
        return t

    steps_per_epoch = -(-len(epoch_batches(0)) // 2)
    total, cut = steps_per_epoch + 4, steps_per_epoch + 1
    uninterrupted = run(total)
    first = run(cut)
    assert first.epoch == 1 and first.position > 0
    path = first.save_checkpoint(tmp_path / "cut.pt")
    torch.manual_seed(999)  # anything the process does in between must not matter
    resumed = run(total, resume_from=path)
    assert resumed.step == uninterrupted.step == total
    assert max_difference(parameters(uninterrupted), parameters(resumed)) <= 1e-6
    # The control: without the RNG states, dropout draws other masks and the runs part.
    path_without_rng = tmp_path / "no_rng.pt"
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["rng"]["torch"] = torch.manual_seed(0).get_state()
    torch.save(checkpoint, path_without_rng)
    diverged = run(total, resume_from=path_without_rng)
    assert max_difference(parameters(uninterrupted), parameters(diverged)) > 1e-4


def test_periodic_checkpoints_keep_the_newest(tmp_path):
    t = trainer(max_steps=7, checkpoint_every=2, checkpoint_dir=str(tmp_path), keep_checkpoints=2)
    t.fit(epoch_batches)
    assert [p.name for p in checkpoint_paths(tmp_path)] == ["step_00000004.pt", "step_00000006.pt"]


def test_checkpoint_paths_sort_by_step(tmp_path):
    for step in (10, 2, 100):
        save_checkpoint(tmp_path / f"step_{step:08d}.pt", model=model(), step=step)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert [read_checkpoint(p)["step"] for p in checkpoint_paths(tmp_path)] == [2, 10, 100]
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        checkpoint_paths(tmp_path / "missing")


def test_a_crash_while_writing_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "step_00000001.pt", model=model(), step=1)
    before = path.read_bytes()

    def crash(obj, file):
        file.write(b"partial")
        raise KeyboardInterrupt  # even an interrupt, not only an error

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, model=model(seed=1), step=2)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["step_00000001.pt"]


def test_truncated_checkpoint_is_detected(tmp_path):
    path = save_checkpoint(tmp_path / "a.pt", model=model())
    data = path.read_bytes()
    for size in (0, 10, len(data) // 2, len(data) - 10):
        path.write_bytes(data[:size])
        with pytest.raises(CheckpointError, match="truncated or corrupt"):
            read_checkpoint(path)


def test_corrupted_parameters_are_detected(tmp_path):
    path = save_checkpoint(tmp_path / "a.pt", model=model())
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["model"]["generator.proj.weight"][0, 0] += 1.0
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match="SHA-256"):
        read_checkpoint(path)


def test_flipped_bytes_are_never_silently_loaded(tmp_path):
    path = save_checkpoint(tmp_path / "a.pt", model=model())
    data = bytearray(path.read_bytes())
    reference = read_checkpoint(path)["model"]
    for offset in range(1000, len(data), len(data) // 25):
        damaged = bytearray(data)
        damaged[offset] ^= 0xFF
        path.write_bytes(bytes(damaged))
        try:
            loaded = read_checkpoint(path)["model"]
        except CheckpointError:
            continue
        # A flip that reading survives must have hit bytes that do not matter (metadata padding).
        assert all(loaded[k].equal(reference[k]) for k in reference)


def test_other_files_are_refused_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        read_checkpoint(tmp_path / "missing.pt")
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not an annotated-transformer checkpoint"):
        read_checkpoint(tmp_path / "other.pt")
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        read_checkpoint(tmp_path / "text.pt")


def test_checkpoint_of_another_configuration_names_the_differences(tmp_path):
    path = save_checkpoint(tmp_path / "a.pt", model=model())
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(path, model(n_layers=3, d_ff=48))
    message = str(error.value)
    assert "config n_layers: checkpoint 2, model 3" in message
    assert "missing from the checkpoint: decoder.layers.2" in message  # keys the checkpoint lacks
    assert "feed_forward.w_1.weight: checkpoint (64, 32), model (48, 32)" in message
    assert "TransformerConfig(**read_checkpoint(path)['config'])" in message


def test_a_checkpoint_loads_into_a_model_differing_only_in_dropout(tmp_path):
    path = save_checkpoint(tmp_path / "a.pt", model=model())
    target = model(seed=1, dropout=0.3)
    load_checkpoint(path, target)
    assert max_difference(list(target.parameters()), list(model().parameters())) == 0.0


def test_resuming_needs_the_optimizer_state(tmp_path):
    path = save_checkpoint(tmp_path / "a.pt", model=model())
    with pytest.raises(CheckpointError, match="no optimizer state"):
        trainer().resume(path)


# --- evaluation and the copy task -------------------------------------------------------------


def test_evaluate_reports_per_token_cross_entropy_and_exact_match():
    m = model()
    batches = epoch_batches(0)[:3]
    result = evaluate(m, batches)
    assert result["ppl"] == pytest.approx(torch.tensor(result["nll"]).exp().item())
    assert 0.0 <= result["exact_match"] <= 1.0
    with pytest.raises(ValueError, match="at least one batch"):
        evaluate(m, [])


def test_copy_task_reaches_full_exact_match_and_decodes_it():
    model, report = train_copy_task(device="cpu")
    assert report.exact_match == 1.0
    assert report.history[-1]["exact_match"] == 1.0
    assert report.n_held_out == 500
    # Real decoding agrees with the teacher-forced measure, greedy and beam search alike (a beam
    # search that stopped at the first k finished hypotheses returned truncated copies here).
    sources = [src for src, _ in copy_task(64, vocab_size=12, max_len=10, seed=99)]
    batch = make_batch([(src, src) for src in sources])
    expected = [[*src, EOS] for src in sources]
    greedy = [[t for t in row if t != PAD] for row in greedy_decode(model, batch.src).tolist()]
    assert greedy == expected
    assert beam_search(model, batch.src, beam_size=4, alpha=0.6) == expected
