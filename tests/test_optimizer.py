"""Adam and the learning-rate schedule of §5.3."""

import functools
import re
import types

import helpers
import pytest
import torch
from torch import nn

from annotated_transformer.batching import copy_task, make_batch
from annotated_transformer.optimizer import WarmupSchedule, _Rate, cooldown_factor, make_optimizer, rate
from annotated_transformer.regularization import token_nll


def formula(step, d_model, warmup, factor=1.0):
    """Equation (3) of §5.3, written out independently of the library."""
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize("step", [1, 2, 100, 3999, 4000, 4001, 10_000, 100_000])
def test_rate_equals_the_formula(step):
    assert rate(step) == formula(step, 512, 4000)
    assert rate(step, d_model=1024, warmup=2000, factor=2.0) == formula(step, 1024, 2000, 2.0)


def test_rate_known_values():
    # at the peak, step = warmup: d_model^-0.5 * warmup^-0.5
    assert rate(4000) == pytest.approx(512**-0.5 * 4000**-0.5, rel=1e-12)
    assert rate(4000) == pytest.approx(6.988e-4, abs=1e-7)
    assert rate(1) == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-12)
    # after the warmup the rate falls as 1/sqrt(step): four times the steps, half the rate
    assert rate(16_000) == pytest.approx(rate(4000) / 2, rel=1e-12)


def test_rate_rises_linearly_then_peaks_at_warmup():
    for warmup in (1, 10, 4000):
        steps = range(1, 3 * warmup + 2)
        rates = [rate(s, warmup=warmup) for s in steps]
        assert max(range(len(rates)), key=rates.__getitem__) + 1 == warmup
    assert rate(2000) == pytest.approx(2 * rate(1000), rel=1e-12)  # linear warmup
    assert all(rate(s) < rate(s + 1) for s in range(1, 4000))
    assert all(rate(s) > rate(s + 1) for s in range(4000, 8000))


def test_rate_errors():
    with pytest.raises(ValueError, match="step counts optimizer steps from 1, got 0"):
        rate(0)
    with pytest.raises(ValueError, match="warmup must be at least 1 step, got 0"):
        rate(1, warmup=0)
    with pytest.raises(ValueError, match="d_model must be a positive integer, got 0"):
        rate(1, d_model=0)


# The tests' model: d_model 16, the size their rates are computed for.
small_model = functools.partial(helpers.small_model, d_model=16)


def test_make_optimizer_adam_hyper_parameters():
    model = small_model()
    optimizer, scheduler = make_optimizer(model)
    assert isinstance(optimizer, torch.optim.Adam)
    assert isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR)
    group = optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.98)
    assert group["eps"] == 1e-9
    assert group["weight_decay"] == 0
    # every parameter once: the tied embedding / generator matrix is not listed twice
    params = [p for g in optimizer.param_groups for p in g["params"]]
    assert len(params) == len({id(p) for p in params}) == len(list(model.parameters()))


@pytest.mark.parametrize("warmup,factor", [(5, 1.0), (3, 2.0)])
def test_make_optimizer_lr_of_step_n_is_rate_n(warmup, factor):
    torch.manual_seed(0)
    model = small_model()
    optimizer, scheduler = make_optimizer(model, warmup=warmup, factor=factor)
    used = []
    for _ in range(12):
        used.append(optimizer.param_groups[0]["lr"])  # the rate this optimizer step will use
        model.zero_grad()
        model.generator.proj.weight.sum().backward()
        optimizer.step()
        scheduler.step()
    assert used == [rate(n, d_model=16, warmup=warmup, factor=factor) for n in range(1, 13)]
    assert scheduler.get_last_lr() == [rate(13, d_model=16, warmup=warmup, factor=factor)]


def test_make_optimizer_d_model_from_the_argument_or_the_config():
    model = small_model()
    optimizer, _ = make_optimizer(model, d_model=512, warmup=4000)
    assert optimizer.param_groups[0]["lr"] == rate(1, 512, 4000)
    optimizer, _ = make_optimizer(model, warmup=4000)
    assert optimizer.param_groups[0]["lr"] == rate(1, 16, 4000)
    with pytest.raises(ValueError, match="make_optimizer needs d_model"):
        make_optimizer(nn.Linear(3, 3))
    optimizer, _ = make_optimizer(nn.Linear(3, 3), d_model=3)
    assert optimizer.param_groups[0]["lr"] == rate(1, 3)
    with pytest.raises(ValueError, match="warmup must be at least 1 step"):
        make_optimizer(model, warmup=0)


def test_scheduler_state_round_trip():
    model = small_model()
    optimizer, scheduler = make_optimizer(model, warmup=7)
    for _ in range(5):
        optimizer.step()
        scheduler.step()
    state = scheduler.state_dict()
    assert state["lr_lambdas"] == [
        {"d_model": 16, "warmup": 7, "factor": 1.0, "ramp": True, "cooldown": 0, "total_steps": None}
    ]
    new_optimizer, new_scheduler = make_optimizer(model, warmup=7)
    new_optimizer.load_state_dict(optimizer.state_dict())
    new_scheduler.load_state_dict(state)
    assert new_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"] == rate(6, 16, 7)
    new_optimizer.step()
    new_scheduler.step()
    assert new_optimizer.param_groups[0]["lr"] == rate(7, 16, 7)



def test_a_schedule_saved_before_the_cooldown_existed_loads_as_no_cooldown():
    model = small_model()
    _, scheduler = make_optimizer(model, warmup=7)
    state = scheduler.state_dict()
    state["lr_lambdas"] = [{"d_model": 16, "warmup": 7, "factor": 1.0}]  # as saved before `ramp`, too
    scheduler.load_state_dict(state)
    assert scheduler.lr_lambdas[0](99) == rate(100, 16, 7)


def test_cooldown_factor_falls_linearly_over_the_last_steps():
    # Steps 6..10 of 10 with a cooldown of 4: factors 1 (step 6), then 4/5, 3/5, 2/5, 1/5; after: 1/5.
    assert [round(cooldown_factor(step, 10, 4), 12) for step in range(5, 13)] == [
        1.0, 1.0, 0.8, 0.6, 0.4, 0.2, 0.2, 0.2
    ]
    assert all(cooldown_factor(step, None, 0) == 1.0 for step in (1, 10, 10**6))
    assert cooldown_factor(1, 10, 10) == pytest.approx(10 / 11)  # a cooldown of the whole run


@pytest.mark.parametrize(
    ("total_steps", "cooldown", "message"),
    [(10, -1, "cooldown must be >= 0"), (None, 3, "needs total_steps >= 3"),
     (2, 3, "needs total_steps >= 3")],
)
def test_cooldown_factor_refuses_impossible_settings(total_steps, cooldown, message):
    with pytest.raises(ValueError, match=message):
        cooldown_factor(1, total_steps, cooldown)
    with pytest.raises(ValueError, match=message):
        make_optimizer(small_model(), warmup=3, cooldown=cooldown, total_steps=total_steps)


def test_make_optimizer_with_a_cooldown_uses_rate_times_the_factor():
    torch.manual_seed(0)
    model = small_model()
    optimizer, scheduler = make_optimizer(model, warmup=3, cooldown=4, total_steps=9)
    used = []
    for _ in range(9):
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    expected = [rate(n, d_model=16, warmup=3) * cooldown_factor(n, 9, 4) for n in range(1, 10)]
    assert used == pytest.approx(expected, rel=1e-12)
    assert used[:5] == [rate(n, d_model=16, warmup=3) for n in range(1, 6)]  # no change before the cooldown
    assert used[-1] == pytest.approx(rate(9, d_model=16, warmup=3) / 5)


def test_end_at_moves_the_end_of_the_schedule_and_the_next_rate():
    model = small_model()
    optimizer, scheduler = make_optimizer(model, warmup=3, cooldown=4, total_steps=20)
    used = []
    for n in range(1, 11):
        if n == 5:  # after 4 steps: end at step 10, with a cooldown over its last 5 steps
            scheduler.end_at(10, 5)
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    expected = [rate(n, d_model=16, warmup=3) * cooldown_factor(n, 10, 5) for n in range(1, 11)]
    assert used == pytest.approx(expected, rel=1e-12)
    assert scheduler.state_dict()["lr_lambdas"][0]["total_steps"] == 10  # a checkpoint records it
    before = optimizer.param_groups[0]["lr"]
    scheduler.end_at(10, 5)  # no change: nothing is recomputed
    assert optimizer.param_groups[0]["lr"] == before
    with pytest.raises(ValueError, match="needs total_steps >= 5"):
        scheduler.end_at(4, 5)


def test_accumulated_micro_batches_give_the_gradient_of_one_big_batch():
    """Sum-loss of every micro-batch / tokens of the WHOLE batch: the big batch's gradient exactly;
    the mean over each micro-batch's own tokens is not, when their token counts differ."""
    pairs = copy_task(6, min_len=2, max_len=9, seed=3)
    parts = [pairs[:2], pairs[2:]]
    n_tokens = make_batch(pairs).n_tokens
    assert make_batch(parts[0]).n_tokens != make_batch(parts[1]).n_tokens
    torch.manual_seed(0)
    model = small_model(dropout=0.0).double()
    optimizer, scheduler = make_optimizer(model, warmup=4)

    def summed_nll(batch):
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        return token_nll(logits.double(), batch.tgt_out)

    def gradient(micro_batches, normalize):
        optimizer.zero_grad()
        for part in micro_batches:
            batch = make_batch(part)
            (summed_nll(batch) / normalize(batch)).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    big = gradient([pairs], lambda b: n_tokens)
    accumulated = gradient(parts, lambda b: n_tokens)
    mean_of_means = gradient(parts, lambda b: b.n_tokens * len(parts))
    torch.testing.assert_close(accumulated, big, atol=1e-6, rtol=1e-5)
    assert (mean_of_means - big).abs().max() > 1e-3
    optimizer.step()
    scheduler.step()  # once per optimizer step, not once per micro-batch
    assert optimizer.param_groups[0]["lr"] == rate(2, 16, 4)


# Boundaries, messages and defaults of the schedule, of make_optimizer and of WarmupSchedule.end_at.


def test_rate_accepts_a_d_model_of_one():
    """d_model must be a positive integer: 1 is one, and its d_model^-0.5 is 1."""
    assert rate(1, d_model=1, warmup=4) == pytest.approx(4**-1.5, rel=1e-12)
    assert rate(4, d_model=1, warmup=4) == pytest.approx(4**-0.5, rel=1e-12)


@pytest.mark.parametrize("step", [1, 2, 10, 99, 100, 101, 400])
def test_rate_without_the_ramp_is_the_peak_rate_then_the_same_decay(step):
    """ramp=False: factor * d_model^-0.5 * min(step^-0.5, warmup^-0.5), the peak from the first step."""
    expected = 2.0 * 64**-0.5 * min(step**-0.5, 100**-0.5)
    assert rate(step, d_model=64, warmup=100, factor=2.0, ramp=False) == pytest.approx(expected, rel=1e-12)
    if step >= 100:  # after the warmup the two schedules are the same
        assert rate(step, 64, 100, 2.0, ramp=False) == pytest.approx(rate(step, 64, 100, 2.0), rel=1e-12)
    else:
        assert rate(step, 64, 100, 2.0, ramp=False) > rate(step, 64, 100, 2.0)


def test_cooldown_factor_of_a_single_step():
    """A cooldown of 1 step is allowed: the last step gets 1/2, the ones before it 1."""
    assert [cooldown_factor(step, 5, 1) for step in (1, 4, 5, 6)] == [1.0, 1.0, 0.5, 0.5]
    assert cooldown_factor(1, 1, 1) == 0.5


def test_make_optimizer_message_when_the_model_has_a_config_without_d_model():
    """A model whose .config has no d_model gets the clear message, not an AttributeError."""
    model = nn.Linear(3, 3)
    model.config = types.SimpleNamespace(n_layers=2)
    message = (
        "make_optimizer needs d_model for the learning-rate schedule: pass d_model=..., or a "
        "model with a .config.d_model (as make_model builds)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make_optimizer(model)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make_optimizer(nn.Linear(3, 3))


def test_make_optimizer_accepts_a_factor_below_one():
    """factor scales the rate and may be any positive number, 0.5 included (it is not a warmup)."""
    optimizer, _ = make_optimizer(small_model(), warmup=3, factor=0.5)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(rate(1, 16, 3, 0.5), rel=1e-12)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(rate(1, 16, 3) / 2, rel=1e-12)


def test_make_optimizer_fuses_adam_for_a_cpu_model_but_not_for_meta_parameters():
    """The fused Adam for CPU (and CUDA) parameters; the loop of small operations for other devices."""
    optimizer, _ = make_optimizer(nn.Linear(3, 3), d_model=4)
    assert optimizer.defaults["fused"] is True
    assert optimizer.param_groups[0]["fused"] is True
    optimizer, _ = make_optimizer(nn.Linear(3, 3, device="meta"), d_model=4)
    assert not optimizer.defaults["fused"]


def test_make_optimizer_fuses_adam_for_cuda_parameters(monkeypatch):
    """CUDA parameters get the fused Adam too (checked here without a GPU: the choice Adam is given)."""
    given = []
    real_adam = torch.optim.Adam

    def adam(parameters, **options):
        given.append(([p.device.type for p in parameters], options["fused"]))
        return real_adam([nn.Parameter(torch.zeros(2))], **options)

    class CudaModel:
        config = types.SimpleNamespace(d_model=4)

        def parameters(self):
            return iter([types.SimpleNamespace(device=torch.device("cuda"))] * 2)

    monkeypatch.setattr(torch.optim, "Adam", adam)
    make_optimizer(CudaModel())
    assert given == [(["cuda", "cuda"], True)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_make_optimizer_fuses_adam_on_a_gpu():
    optimizer, _ = make_optimizer(nn.Linear(3, 3, device="cuda"), d_model=4)
    assert optimizer.defaults["fused"] is True


def _two_group_schedule(cooldown, total_steps):
    a, b = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.Adam([{"params": [a]}, {"params": [b], "lr": 2.0}], lr=1.0)
    scheduler = WarmupSchedule(optimizer, _Rate(16, 3, 1.0, cooldown=cooldown, total_steps=total_steps))
    return optimizer, scheduler


def test_end_at_gives_the_next_step_its_new_rate_in_every_param_group():
    """end_at recomputes the rate the next optimizer step uses, in each group, from the group's base rate."""
    optimizer, scheduler = _two_group_schedule(cooldown=2, total_steps=20)
    for _ in range(4):
        optimizer.step()
        scheduler.step()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([rate(5, 16, 3), 2 * rate(5, 16, 3)])
    scheduler.end_at(6, 5)  # step 5 is now the fifth from the end: factor (6 - 5 + 1) / 6
    next_rate = rate(5, 16, 3) * 2 / 6
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([next_rate, 2 * next_rate], rel=1e-12)
    assert next_rate == pytest.approx(rate(5, 16, 3) * cooldown_factor(5, 6, 5), rel=1e-12)
    optimizer.step()
    scheduler.step()
    last = rate(6, 16, 3) * cooldown_factor(6, 6, 5)
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([last, 2 * last], rel=1e-12)


def test_end_at_refuses_param_groups_the_scheduler_does_not_know():
    """A param group added after the scheduler was built has no base rate: an error, not a group skipped."""
    optimizer, scheduler = _two_group_schedule(cooldown=0, total_steps=None)
    optimizer.add_param_group({"params": [nn.Parameter(torch.zeros(1))], "lr": 3.0})
    with pytest.raises(ValueError, match="zip"):
        scheduler.end_at(10, 2)


def test_a_rate_object_made_before_ramp_and_cooldown_existed_uses_their_defaults():
    """An old _Rate (unpickled without ramp, cooldown, total_steps): the ramp on, and no cooldown."""
    schedule = _Rate(16, 7, 1.0, ramp=False, cooldown=3, total_steps=10)
    del schedule.ramp, schedule.cooldown, schedule.total_steps
    assert [schedule(s) for s in (0, 3, 6, 50)] == [rate(s + 1, 16, 7) for s in (0, 3, 6, 50)]
    assert schedule(0) == pytest.approx(16**-0.5 * 7**-1.5, rel=1e-12)  # within the warmup: the ramp


def test_a_rate_object_without_cooldown_settings_has_no_cooldown():
    schedule = _Rate(16, 7, 1.0, ramp=False, cooldown=3, total_steps=10)
    del schedule.cooldown, schedule.total_steps
    assert [schedule(s) for s in (0, 9, 50)] == [rate(s + 1, 16, 7, ramp=False) for s in (0, 9, 50)]


def test_a_rate_object_without_the_ramp_setting_has_the_ramp():
    schedule = _Rate(16, 7, 1.0, ramp=False, cooldown=3, total_steps=10)
    del schedule.ramp
    assert schedule(1) == pytest.approx(rate(2, 16, 7) * cooldown_factor(2, 10, 3), rel=1e-12)
    assert schedule(9) == pytest.approx(rate(10, 16, 7) / 4, rel=1e-12)


def test_a_rate_object_follows_its_ramp_setting():
    """_Rate(..., ramp=False) is rate(..., ramp=False): the peak from the first step."""
    schedule = _Rate(16, 7, 1.0, ramp=False)
    assert [schedule(s) for s in (0, 3, 50)] == [rate(s + 1, 16, 7, ramp=False) for s in (0, 3, 50)]
    assert schedule(0) == pytest.approx(16**-0.5 * 7**-0.5, rel=1e-12)


def test_a_rate_object_defaults_to_the_papers_schedule():
    """_Rate(d_model, warmup, factor): ramp on, no cooldown: rate(s + 1), within the warmup too."""
    schedule = _Rate(16, 7, 2.0)
    assert [schedule(s) for s in (0, 3, 6, 50)] == [rate(s + 1, 16, 7, 2.0) for s in (0, 3, 6, 50)]
    assert schedule(2) == pytest.approx(2.0 * 16**-0.5 * 3 * 7**-1.5, rel=1e-12)
