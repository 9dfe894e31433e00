"""Adam and the learning-rate schedule of §5.3."""

import functools

import helpers
import pytest
import torch
from torch import nn

from annotated_transformer.batching import copy_task, make_batch
from annotated_transformer.optimizer import cooldown_factor, make_optimizer, rate
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
