"""The training loop (chapter 9): gradient accumulation, the schedule, mixed precision,
compilation, the trainer's state (exactly resumable, in memory), divergence and the copy task.
Checkpoint files are chapter 10's (test_checkpoints.py)."""

import contextlib
import copy
import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import (
    OLD_RECIPE_JSON,
    assert_identical,
    copy_batches,
    max_difference,
    parameters,
    small_config,
    tiny_model,
    tiny_trainer,
)

from annotated_transformer.acceleration import (
    autocast_context,
    compile_forward_loss,
    configure_process,
    resolve_precision,
)
from annotated_transformer.batching import EOS, PAD, batch_by_tokens, copy_task, make_batch
from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.helpers.torch_support import reuse_freed_memory
from annotated_transformer.model import make_model
from annotated_transformer.optimizer import cooldown_factor, rate
from annotated_transformer.training import (
    TrainConfig,
    Trainer,
    TrainingDiverged,
    evaluate,
    quick_mode,
    read_steps,
    train_copy_task,
)

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
    assert config.clip_grad_norm is None and config.precision == "auto" and not config.compile


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
        ({"checkpoint_every": -1}, "checkpoint_every must be >= 0"),
        ({"cooldown": 1.2}, r"cooldown must lie in \[0, 1\]"),
        ({"cooldown": -0.5}, r"cooldown must lie in \[0, 1\]"),
        ({"rdrop_alpha": -0.5}, r"^rdrop_alpha must be >= 0 and finite \(0: no R-Drop\), got -0.5$"),
        ({"rdrop_alpha": float("inf")}, r"^rdrop_alpha must be >= 0 and finite"),
    ],
)
def test_train_config_rejects_bad_values(fields, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**fields)


# --- one step, gradient accumulation, the schedule -------------------------------------------


def test_accumulated_micro_batches_give_the_gradient_of_the_whole_batch():
    pairs = copy_task(7, vocab_size=23, min_len=1, max_len=15, seed=1)
    whole, split = tiny_trainer(), tiny_trainer()
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
    reference = tiny_trainer()
    reference.train_step([make_batch(pairs)])
    wrong = tiny_trainer()
    wrong.model.zero_grad()
    for part in (pairs[:2], pairs[2:5], pairs[5:]):
        batch = make_batch(part)
        logits = wrong.model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        (wrong.criterion(logits, batch.tgt_out) / batch.n_tokens / 3).backward()
    grads = [p.grad for p in wrong.model.parameters()]
    assert max_difference(grads, [p.grad for p in reference.model.parameters()]) > 1e-4


def test_an_rdrop_step_trains_two_dropout_passes_and_alpha_zero_is_todays_step():
    batches = copy_batches(0)[:2]

    def step(old_step: bool = False, **config):
        trainer = tiny_trainer(model_overrides={"dropout": 0.1}, **config)
        if old_step:  # the step before R-Drop: one pass, the smoothed loss of its logits
            trainer.forward_loss = lambda src, tgt_in, tgt_out, src_mask, tgt_mask: (
                trainer.criterion.loss_and_nll(trainer.model(src, tgt_in, src_mask, tgt_mask), tgt_out))
        torch.manual_seed(3)
        return trainer, trainer.train_step(batches)

    today, today_stats = step(old_step=True)
    zero, zero_stats = step(rdrop_alpha=0.0)
    assert (zero_stats.loss, zero_stats.nll) == (today_stats.loss, today_stats.nll)  # bit for bit
    assert_identical(parameters(zero), parameters(today))
    rdrop, rdrop_stats = step(rdrop_alpha=1.0)
    assert rdrop.model.training and all(p.grad is not None for p in rdrop.model.parameters())
    assert math.isfinite(rdrop_stats.loss) and rdrop_stats.loss != zero_stats.loss
    assert rdrop_stats.n_tokens == zero_stats.n_tokens
    assert max_difference(parameters(rdrop), parameters(zero)) > 0


def test_a_recipe_json_without_rdrop_alpha_trains_without_r_drop():
    from annotated_transformer.recipes import Recipe

    assert "rdrop_alpha" not in OLD_RECIPE_JSON
    recipe = Recipe.from_dict(OLD_RECIPE_JSON)
    assert recipe.train.rdrop_alpha == 0.0 and recipe.to_dict()["rdrop_alpha"] == 0.0
    assert recipe.replace(rdrop_alpha=0.5).train.rdrop_alpha == 0.5


def test_schedule_advances_once_per_optimizer_step():
    t = tiny_trainer(accumulate=3)
    stats = [t.train_step(copy_batches(0)[i : i + 3]) for i in (0, 3)]
    assert t.scheduler.last_epoch == 2 and t.step == 2
    assert [s.lr for s in stats] == [rate(1, 32, warmup=10), rate(2, 32, warmup=10)]
    assert t.optimizer.param_groups[0]["lr"] == rate(3, 32, warmup=10)


def test_step_stats_report_tokens_loss_and_cross_entropy():
    t = tiny_trainer(label_smoothing=0.0)
    batches = copy_batches(0)[:2]
    stats = t.train_step(batches)
    assert stats.n_tokens == sum(b.n_tokens for b in batches)
    # Without smoothing the minimized loss is the cross-entropy itself.
    assert stats.loss == pytest.approx(stats.nll, rel=1e-5)
    assert stats.grad_norm is None


def test_gradient_clipping_bounds_the_norm():
    t = tiny_trainer(clip_grad_norm=1e-3)
    stats = t.train_step(copy_batches(0)[:1])
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in t.model.parameters()]))
    assert stats.grad_norm > 1e-3
    assert norm.item() == pytest.approx(1e-3, rel=1e-3)


def test_empty_batches_are_refused():
    t = tiny_trainer()
    with pytest.raises(ValueError, match="empty batch"):
        t.train_step([])
    with pytest.raises(ValueError, match="no batches"):
        t.fit(lambda epoch: [])


def test_fit_counts_steps_and_epochs_and_stops_on_request():
    t = tiny_trainer(max_steps=1000, accumulate=2)
    n_batches = len(copy_batches(0))
    history = t.fit(copy_batches, on_step=lambda step: step == 5)
    assert len(history) == 5 and t.step == 5
    steps_per_epoch = -(-n_batches // 2)
    assert t.epoch == 5 // steps_per_epoch


def test_training_reduces_the_loss():
    t = tiny_trainer(max_steps=40, warmup=10, lr_factor=0.5)
    history = t.fit(copy_batches)
    assert history[-1].nll < history[0].nll - 0.5


# --- mixed precision and compilation --------------------------------------------------------------


def test_bf16_autocast_trains_on_the_cpu():
    t = tiny_trainer(precision="bf16")
    logits_dtypes = []
    t.model.generator.register_forward_hook(lambda module, args, logits: logits_dtypes.append(logits.dtype))
    stats = t.train_step(copy_batches(0)[:1])
    assert logits_dtypes == [torch.bfloat16]  # the step's matrix products ran in bf16
    assert torch.isfinite(torch.tensor(stats.loss))
    assert all(p.dtype == torch.float32 for p in t.model.parameters())  # master weights stay fp32


def test_fp16_needs_cuda():
    with pytest.raises(ValueError, match="CUDA"):
        autocast_context(torch.device("cpu"), "fp16")
    with pytest.raises(ValueError, match="CUDA"):
        tiny_trainer(precision="fp16")


# --- the trainer's state ---------------------------------------------------------------------------


def test_a_state_copied_in_memory_resumes_exactly():
    # Dropout on (the random generators matter), accumulation of 2 (the position in the epoch
    # matters), and the state taken in the middle of the second epoch. `continued` goes on after its
    # state was copied; `resumed`, a trainer of another initialization, loads the copy.
    steps_per_epoch = -(-len(copy_batches(0)) // 2)
    total, cut = steps_per_epoch + 4, steps_per_epoch + 1

    def new_trainer(model_seed: int) -> Trainer:
        return tiny_trainer(model_seed, {"dropout": 0.1}, max_steps=total, accumulate=2, seed=7)

    continued = new_trainer(3)
    continued.fit(copy_batches, on_step=lambda step: step == cut)
    assert continued.epoch == 1 and continued.position > 0
    state = copy.deepcopy(continued.state_dict())
    continued.fit(copy_batches)
    torch.manual_seed(999)  # anything the process does in between must not matter
    resumed = new_trainer(4)
    resumed.load_state_dict(state)
    assert (resumed.step, resumed.epoch, resumed.position) == (cut, 1, state["position"])
    resumed.fit(copy_batches)
    assert resumed.step == continued.step == total
    assert_identical(parameters(continued), parameters(resumed))
    # The control: without the random generators' states, dropout draws other masks and the runs part.
    state["rng"]["torch"] = torch.manual_seed(0).get_state()
    without_rng = new_trainer(4)
    without_rng.load_state_dict(state)
    without_rng.fit(copy_batches)
    assert max_difference(parameters(continued), parameters(without_rng)) > 1e-4


def test_the_state_holds_everything_the_next_step_depends_on():
    t = tiny_trainer(max_steps=5, clip_grad_norm=1.0)
    t.fit(copy_batches)
    state = t.state_dict()
    assert set(state) == {"model", "optimizer", "scheduler", "scaler", "step", "epoch", "position", "rng",
                          "config"}
    assert state["model"].keys() == t.model.state_dict().keys()
    first = next(t.model.parameters())
    assert state["optimizer"]["state"][0]["exp_avg"] is t.optimizer.state[first]["exp_avg"]  # not a copy
    assert state["scheduler"]["last_epoch"] == state["step"] == 5 and state["scaler"] is None  # fp32
    assert (state["epoch"], state["position"]) == (t.epoch, t.position)
    assert state["config"] == dataclasses.asdict(t.config) and state["config"]["clip_grad_norm"] == 1.0
    assert {"python", "torch"} <= set(state["rng"])


def test_a_trainer_of_a_compiled_module_gives_plain_names(monkeypatch):
    # A user's torch.compile(model): its state_dict keys carry "_orig_mod.", which the trainer's state
    # must not, or a plain model could not load it. The same with compile=True.
    compiled = torch.compile(tiny_model(), backend="eager")
    assert all(key.startswith("_orig_mod.") for key in compiled.state_dict())
    t = Trainer(compiled, TrainConfig(warmup=10, progress=False, log_every=0), device="cpu")
    t.train_step(copy_batches(0)[:1])
    plain = tiny_model(seed=1)
    plain.load_state_dict(t.state_dict()["model"])
    assert max_difference(list(plain.parameters()), list(compiled.parameters())) == 0.0
    real_compile = torch.compile

    def compile_eagerly(fn, **options):  # inductor needs a C++ compiler and a minute: the same wiring
        return real_compile(fn, **{**options, "backend": "eager"})

    monkeypatch.setattr(torch, "compile", compile_eagerly)
    t = tiny_trainer(compile=True)
    assert t.forward_loss is not t._forward_loss
    t.train_step(copy_batches(0)[:1])
    assert not any("_orig_mod" in key for key in t.state_dict()["model"])


def test_the_gradient_scalers_state_is_saved_and_loaded():
    # fp16 needs a GPU, but its gradient scaler runs on the CPU too: an enabled one stands in.
    def scale_and_tracker(t: Trainer) -> tuple[float, int]:
        state = t.scaler.state_dict()
        return state["scale"], state["_growth_tracker"]

    def scaled_trainer(init_scale: float) -> Trainer:
        t = tiny_trainer(clip_grad_norm=1.0)  # clipping unscales the gradients first
        t.scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=3)
        assert t.scaler.is_enabled()
        return t

    t = scaled_trainer(2.0**10)
    for batch in copy_batches(0)[:4]:
        t.train_step([batch])
    # 4 finite steps: the scale grew once (after 3), and the growth tracker counts 1 since.
    assert scale_and_tracker(t) == (2.0**11, 1)
    state = copy.deepcopy(t.state_dict())
    assert state["scaler"] == t.scaler.state_dict()
    fresh = scaled_trainer(1.0)
    fresh.load_state_dict(state)
    assert scale_and_tracker(fresh) == (2.0**11, 1)
    for resumed in (t, fresh):  # the two go on alike: two more steps grow the scale again
        resumed.train_step(copy_batches(0)[4:5])
        resumed.train_step(copy_batches(0)[5:6])
    assert scale_and_tracker(fresh) == scale_and_tracker(t) == (2.0**12, 0)
    assert_identical(parameters(t), parameters(fresh))


def test_fit_calls_on_checkpoint_every_checkpoint_every_steps_after_the_log_point():
    t = tiny_trainer(max_steps=7, checkpoint_every=3, log_every=2)
    events = []
    t.fit(copy_batches, on_log=lambda records: events.append(("log", records[-1].step)),
          on_checkpoint=lambda: events.append(("checkpoint", t.step)))
    assert events == [("log", 2), ("log", 3), ("checkpoint", 3), ("log", 4), ("log", 6), ("checkpoint", 6),
                      ("log", 7)]


def test_a_trainer_takes_no_checkpoint_directory():
    with pytest.raises(TypeError, match="checkpoint_dir"):
        TrainConfig(checkpoint_every=10, checkpoint_dir="checkpoints")
    assert "keep_checkpoints" not in {field.name for field in dataclasses.fields(TrainConfig)}


# --- evaluation and the copy task -------------------------------------------------------------


def test_evaluate_reports_per_token_cross_entropy_and_exact_match():
    # A model (dropout on) trained a little on short copies: some held-out sentences right, some
    # wrong. The scores are checked against an independent computation in evaluation mode.
    train_pairs = copy_task(2000, vocab_size=23, min_len=1, max_len=4, seed=3)
    t = tiny_trainer(max_steps=30, lr_factor=0.5, model_overrides={"dropout": 0.1})
    t.fit(lambda epoch: [make_batch(train_pairs[i : i + 50]) for i in range(0, len(train_pairs), 50)])
    m = t.model.train()
    held_out = copy_task(40, vocab_size=23, min_len=1, max_len=6, seed=9)
    batches = [make_batch(held_out[i : i + 20]) for i in (0, 20)]
    assert all((batch.tgt_out == PAD).any() for batch in batches)  # padding to be left out
    result = evaluate(m, batches)
    assert m.training  # the mode is restored
    m.eval()
    nll, tokens, right = 0.0, 0, 0
    with torch.no_grad():
        for batch in batches:
            logits = m(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
            nll += F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch.tgt_out.reshape(-1),
                                   ignore_index=PAD, reduction="sum").item()
            tokens += int((batch.tgt_out != PAD).sum())
            for predicted, target in zip(logits.argmax(-1).tolist(), batch.tgt_out.tolist(), strict=True):
                right += all(p == y for p, y in zip(predicted, target, strict=True) if y != PAD)
    assert result["nll"] == pytest.approx(nll / tokens, rel=1e-5)
    assert result["ppl"] == pytest.approx(math.exp(nll / tokens), rel=1e-5)
    assert 0 < right < len(held_out) and result["exact_match"] == right / len(held_out)
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


# --- a step that never waits for the device ---------------------------------------------------

# Every way of bringing a tensor's value to the host: Python numbers and lists, a copy to the CPU
# (`.cpu()`, then perhaps `.numpy()`), and use as an index (`range(t)`, `list[t]`).
HOST_READS = ("item", "__int__", "__float__", "__bool__", "__index__", "tolist", "cpu", "numpy")


@contextlib.contextmanager
def host_reads_forbidden(monkeypatch):
    """Within the block, every way of reading a tensor's value on the host raises; outside, the
    reads work again. (On a GPU each of these would make the host wait for the device.)"""
    allowed = {"now": False}
    originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def guard(name):
        def read(self, *args, **kwargs):
            if not allowed["now"]:
                raise AssertionError(f"Tensor.{name} was called inside a training step")
            return originals[name](self, *args, **kwargs)
        return read

    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, guard(name))
    try:
        yield allowed
    finally:
        for name in HOST_READS:
            monkeypatch.setattr(torch.Tensor, name, originals[name])


def test_steps_between_log_points_never_read_a_tensor(monkeypatch):
    import annotated_transformer.training as training

    real_read_steps = training.read_steps
    reads = []
    t = tiny_trainer(max_steps=12, log_every=4, accumulate=2, track_grad_norm=True, clip_grad_norm=5.0)
    batches = [copy_batches(0), copy_batches(1)]  # made outside: building data is not the step
    with host_reads_forbidden(monkeypatch) as allowed:
        def read_at_log_point(pending, **kwargs):
            allowed["now"] = True  # the log point: reading is its job
            try:
                reads.append([p.step for p in pending])
                return real_read_steps(pending, **kwargs)
            finally:
                allowed["now"] = False

        monkeypatch.setattr(training, "read_steps", read_at_log_point)
        history = t.fit(lambda epoch: batches[epoch % 2])
    assert reads == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
    assert [s.step for s in history] == list(range(1, 13))
    assert all(isinstance(s.loss, float) and s.grad_norm is not None for s in history)


def test_an_asynchronous_step_reads_nothing_and_its_statistics_match(monkeypatch):
    a, b = tiny_trainer(track_grad_norm=True), tiny_trainer(track_grad_norm=True)
    batches = copy_batches(0)[:2]
    with host_reads_forbidden(monkeypatch):
        pending = [a.train_step_async(batches[:1]), a.train_step_async(batches[1:])]
    stats = read_steps(pending)
    expected = [b.train_step(batches[:1]), b.train_step(batches[1:])]
    assert [s.step for s in stats] == [1, 2] and stats == expected


def test_an_out_of_range_id_still_gets_a_clear_error_on_the_cpu():
    m = tiny_model()
    src = torch.tensor([[5, 6, 99]])
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 23\) .*got ids from 5 to 99"):
        m(src, src[:, :2], None, None)
    target = torch.tensor([[3, 30]])
    with pytest.raises(ValueError, match=r"target ids must lie in \[0, 23\)"):
        tiny_trainer().criterion.loss_and_nll(torch.zeros(1, 2, 23), target)


def test_non_interactive_progress_prints_plain_lines(capsys):
    t = tiny_trainer(max_steps=6, log_every=3, progress=True)
    t.fit(copy_batches)
    out = capsys.readouterr().out
    assert "\r" not in out
    assert [line.split()[:2] for line in out.splitlines()] == [["step", "3"], ["step", "6"]]


# --- divergence ----------------------------------------------------------------------------------


def test_divergence_stops_at_a_log_point_before_a_checkpoint_and_names_the_last_one():
    t = tiny_trainer(max_steps=60, warmup=1, lr_factor=1e6, log_every=5, checkpoint_every=1,
                     clip_grad_norm=None, track_grad_norm=True)
    saved = []  # the steps of the checkpoints
    with pytest.raises(TrainingDiverged) as caught:
        t.fit(copy_batches, on_checkpoint=lambda: saved.append(t.step))
    message = str(caught.value)
    step = int(message.split("at step ")[1].split(":")[0])
    assert "is nan" in message or "is inf" in message
    assert "lr_factor, now 1e+06" in message and "warmup" in message and "clip_grad_norm" in message
    assert saved == list(range(1, step))  # none at the step that diverged, nor after
    assert f"the last checkpoint was taken at step {step - 1}, before it" in message


def test_divergence_before_any_checkpoint_says_so():
    t = tiny_trainer(max_steps=60, warmup=1, lr_factor=1e6, log_every=5)
    with pytest.raises(TrainingDiverged, match="no checkpoint had been taken yet"):
        t.fit(copy_batches)


def test_a_non_finite_lr_factor_is_refused():
    for bad in (float("inf"), float("nan"), 0.0, -1.0):
        with pytest.raises(ValueError, match="lr_factor must be a positive finite number"):
            TrainConfig(lr_factor=bad)


# --- torch.compile: no graph breaks, few compilations ------------------------------------------


@pytest.mark.parametrize("rdrop_alpha", [0.0, 1.0])  # one pass, or R-Drop's two
def test_the_training_forward_and_loss_have_no_graph_break(rdrop_alpha):
    t = tiny_trainer(rdrop_alpha=rdrop_alpha)
    explanation = torch._dynamo.explain(t._forward_loss)(*copy_batches(0)[0].tensors())
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons


def test_a_cached_decoding_step_has_no_graph_break():
    m = tiny_model().eval()
    batch = copy_batches(0)[0]
    memory, cache = m.encode(batch.src, batch.src_mask), m.init_cache()
    tgt = torch.full((len(batch), 1), 1)
    with torch.no_grad():
        m.decode_step(memory, batch.src_mask, tgt, cache)  # the first step projects the memory
        tgt = torch.cat([tgt, torch.full((len(batch), 1), 5)], dim=1)
        explanation = torch._dynamo.explain(m.decode_step)(memory, batch.src_mask, tgt, cache)
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons


def test_compilations_over_many_batch_shapes_are_bounded():
    # Trained as users train: the recipes' dropout 0.1, training mode, gradients on, every step a
    # backward pass and an optimizer step through the trainer (as compile=True wires it). One step
    # per batch shape: the shapes of batches by token count at several budgets over 8 epochs.
    from annotated_transformer.data import corpus
    from annotated_transformer.tokenization import BatchSequence, build_vocabularies, encode_pairs

    pairs = corpus("builtin", "train")
    vocabs = build_vocabularies(pairs, "word", min_freq=1)
    encoded = encode_pairs(pairs, vocabs)
    lengths = encoded.lengths()
    by_shape = {}
    for max_tokens in (200, 300, 500, 800, 1500):
        for epoch in range(8):
            for indices in batch_by_tokens(lengths, max_tokens, seed=0, epoch=epoch):
                shape = (len(indices), *(max(lengths[i][side] for i in indices) for side in (0, 1)))
                by_shape.setdefault(shape, indices)
    torch.manual_seed(0)
    config = small_config(src_vocab_size=len(vocabs.source), tgt_vocab_size=len(vocabs.target),
                          share_embeddings=False, max_len=64, dropout=0.1)
    t = Trainer(make_model(config), TrainConfig(warmup=10, progress=False, log_every=0), device="cpu")
    compilations = []

    def counting_backend(graph_module, example_inputs):
        compilations.append(len(graph_module.graph.nodes))
        return graph_module.forward

    t.forward_loss = compile_forward_loss(t._forward_loss, backend=counting_backend)
    first, shapes = parameters(t), set()
    for batch in BatchSequence(encoded, list(by_shape.values())):
        shapes.add((tuple(batch.src.shape), tuple(batch.tgt_in.shape)))
        t.train_step([batch])
    assert t.model.training and t.step == len(shapes)
    assert max_difference(first, parameters(t)) > 0  # the steps trained the model
    assert len(shapes) >= 200  # many shapes ...
    assert len(compilations) <= 2, compilations  # ... few graphs


# --- precision and the data pipeline on a GPU ----------------------------------------------------


def test_auto_precision_is_float32_on_the_cpu():
    assert resolve_precision(torch.device("cpu"), "auto") == "fp32"
    assert tiny_trainer().precision == "fp32"
    with pytest.raises(ValueError, match="'fp16' needs a CUDA GPU"):
        resolve_precision(torch.device("cpu"), "fp16")


def test_a_gpu_without_bfloat16_gets_float16_and_an_explicit_bf16_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "Tesla T4")
    cuda = torch.device("cuda")
    assert resolve_precision(cuda, "auto") == "fp16"
    with pytest.raises(ValueError, match=r"this GPU \(Tesla T4\) has no bfloat16 support; use 'fp16'"):
        resolve_precision(cuda, "bf16")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert resolve_precision(cuda, "auto") == "bf16"


def test_a_gpu_that_only_emulates_bfloat16_gets_float16(monkeypatch):
    # A T4 (before Ampere) answers is_bf16_supported() with True: it holds bfloat16 values and emulates
    # their arithmetic, slowly. "auto" asks for native bfloat16, so such a GPU trains in float16.
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert resolve_precision(torch.device("cuda"), "auto") == "fp16"


def test_a_step_the_gradient_scaler_skips_is_not_a_divergence():
    # float16's gradient scaler skips a step whose scaled gradients overflowed (and lowers its scale):
    # the step's gradient norm is not finite, its loss is, and the model is unchanged. A CPU scaler
    # whose scale is infinite stands in for a GPU's, and skips every step.
    t = tiny_trainer(max_steps=3, log_every=1, track_grad_norm=True)
    t.scaler = torch.amp.GradScaler("cpu", init_scale=math.inf)
    before = [p.detach().clone() for p in t.model.parameters()]
    history = t.fit(copy_batches)  # no TrainingDiverged
    assert [s.step for s in history] == [1, 2, 3]
    assert all(math.isfinite(s.loss) and not math.isfinite(s.grad_norm) for s in history)
    assert all(torch.equal(a, b) for a, b in zip(before, t.model.parameters(), strict=True))


def test_prefetching_the_next_batches_trains_exactly_the_same():
    runs = [tiny_trainer(max_steps=9, accumulate=2, prefetch=prefetch, model_overrides={"dropout": 0.1})
            for prefetch in (True, False)]
    histories = [t.fit(copy_batches) for t in runs]
    assert histories[0] == histories[1]
    assert max_difference(parameters(runs[0]), parameters(runs[1])) == 0.0


def test_freed_memory_is_kept_for_reuse_on_linux():
    import sys

    applied = reuse_freed_memory()
    assert applied == sys.platform.startswith("linux")  # glibc here; elsewhere a harmless no-op
    assert reuse_freed_memory() == applied  # idempotent


def test_a_cooldown_resumes_exactly_and_ends_at_a_new_max_steps():
    def run(max_steps: int, stop_at: int | None = None, state: dict | None = None):
        t = tiny_trainer(3, {"dropout": 0.1}, max_steps=max_steps, cooldown=0.4, seed=7)
        if state is not None:
            t.load_state_dict(copy.deepcopy(state))
        history = t.fit(copy_batches, on_step=lambda step: step == stop_at)
        return t, [s.lr for s in history]

    uninterrupted, lrs = run(10)  # a cooldown over the last 40% of 10 steps: 4 steps
    assert lrs == pytest.approx([rate(n, 32, warmup=10) * cooldown_factor(n, 10, 4) for n in range(1, 11)])
    first, _ = run(10, stop_at=5)
    state = copy.deepcopy(first.state_dict())
    resumed, _ = run(10, state=state)
    assert_identical(parameters(uninterrupted), parameters(resumed))
    # Trained longer than planned: the cooldown moves to the new end (40% of 14 steps: 6); the steps
    # before it are the paper's rate again.
    _, longer = run(14, state=state)
    assert longer == pytest.approx([rate(n, 32, warmup=10) * cooldown_factor(n, 14, 6) for n in range(6, 15)])
    assert longer[:3] == pytest.approx([rate(n, 32, warmup=10) for n in range(6, 9)])


def test_end_schedule_at_stops_fit_and_ends_the_cooldown_there():
    t = tiny_trainer(model_seed=3, max_steps=20, cooldown=0.5, seed=7)
    first = t.fit(copy_batches, on_step=lambda step: step == 4)
    t.end_schedule_at(8)  # the cooldown is now 50% of 8 steps: steps 5-8
    rest = t.fit(copy_batches)
    assert [s.step for s in first + rest] == list(range(1, 9)) and t.step == t.last_step == 8
    expected = [rate(n, 32, warmup=10) * cooldown_factor(n, 8, 4) for n in range(1, 9)]
    assert [s.lr for s in first + rest] == pytest.approx(expected)
    for bad in (0, 21):
        with pytest.raises(ValueError, match=r"last_step must lie in \[1, max_steps=20\]"):
            t.end_schedule_at(bad)


# --- the module's names, and the process-wide settings ---------------------------------------------


def test_methods_added_across_cells_keep_the_modules_names_bound():
    from annotated_transformer import training, translator

    assert training.fit is Trainer.fit and training.train_step is Trainer.train_step
    assert training.state_dict is Trainer.state_dict
    assert translator._translate is translator.Translator._translate


def test_building_a_trainer_changes_no_process_wide_setting(monkeypatch):
    import annotated_transformer.companions.hardware as hardware
    import annotated_transformer.helpers.torch_support as platform

    def refused(*args):
        raise AssertionError("a Trainer made a process-wide setting")

    for module, name in ((hardware, "use_fast_cuda_kernels"), (hardware, "reuse_freed_memory"),
                         (platform, "reuse_freed_memory"), (hardware, "configure_process")):
        monkeypatch.setattr(module, name, refused)
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
              torch.backends.cuda.cudnn_sdp_enabled(), torch.get_num_threads())
    Trainer(tiny_model(), TrainConfig(warmup=10, progress=False), device="cpu")
    assert before == (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                      torch.backends.cuda.cudnn_sdp_enabled(), torch.get_num_threads())


def test_configure_process_says_what_it_set(monkeypatch):
    import sys

    assert configure_process("cpu") == (["freed memory kept for reuse (mallopt)"]
                                        if sys.platform.startswith("linux") else [])
    assert configure_process("meta") == []  # no setting for other devices
    calls = []
    import annotated_transformer.companions.hardware as hardware

    monkeypatch.setattr(hardware, "use_fast_cuda_kernels", lambda: calls.append("cuda"))
    assert configure_process(torch.device("cuda")) == ["TF32 matrix products", "no cuDNN attention kernel"]
    assert calls == ["cuda"]
