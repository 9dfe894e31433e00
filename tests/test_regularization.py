"""Label smoothing (§5.4), the unsmoothed per-token cross-entropy, and R-Drop (Liang et al., 2021)."""

import math

import pytest
import torch
import torch.nn.functional as F

from annotated_transformer.batching import PAD, make_batch
from annotated_transformer.companions.chunked_loss import projected_smoothed_loss
from annotated_transformer.model import make_model
from annotated_transformer.regularization import (
    LabelSmoothingLoss,
    perplexity,
    rdrop_forward_loss,
    rdrop_loss,
    smoothed_distribution,
    smoothed_loss_floor,
    symmetric_kl,
    token_nll,
)


def random_problem(seed: int, vocab_size: int = 13, shape=(4, 9), n_pad: int = 7):
    """Random logits (..., V) and targets (...) with some pad targets (and pad as a real class)."""
    generator = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(*shape, vocab_size, generator=generator)
    target = torch.randint(0, vocab_size, shape, generator=generator)
    flat = target.view(-1)
    flat[torch.randperm(flat.numel(), generator=generator)[:n_pad]] = PAD
    return logits, target


def torch_reference(logits, target, smoothing, pad=PAD):
    v = logits.size(-1)
    return F.cross_entropy(
        logits.reshape(-1, v).float(), target.reshape(-1), label_smoothing=smoothing,
        ignore_index=-100 if pad is None else pad, reduction="sum",
    )


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.4])
def test_smooth_pad_equals_pytorch_cross_entropy(seed, smoothing):
    logits, target = random_problem(seed)
    loss = LabelSmoothingLoss(13, smoothing, pad=PAD, smooth_pad=True)(logits, target)
    torch.testing.assert_close(loss, torch_reference(logits, target, smoothing), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_pad_none_equals_pytorch_cross_entropy_without_ignore_index(seed):
    logits, target = random_problem(seed)
    loss = LabelSmoothingLoss(13, 0.1, pad=None)(logits, target)
    torch.testing.assert_close(loss, torch_reference(logits, target, 0.1, pad=None), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", range(5))
def test_default_spreads_over_the_classes_other_than_pad(seed):
    logits, target = random_problem(seed)
    eps, v = 0.1, 13
    loss = LabelSmoothingLoss(v, eps)(logits, target)
    # by hand: q = (1 - eps) one-hot + eps / (V - 1) on every class except pad
    log_p = logits.double().log_softmax(-1)
    expected = 0.0
    for lp, t in zip(log_p.view(-1, v), target.view(-1).tolist(), strict=True):
        if t == PAD:
            continue
        q = torch.full((v,), eps / (v - 1), dtype=torch.float64)
        q[PAD] = 0.0
        q[t] += 1 - eps
        assert math.isclose(q.sum().item(), 1.0)
        expected -= (q * lp).sum().item()
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    reference = torch_reference(logits, target, eps)
    assert abs(loss.item() - reference.item()) > 1e-3  # not PyTorch's definition


def test_kl_divergence_form():
    """The loss is KL(q || p) + H(q): the cross-entropy to q, whose floor is the entropy of q."""
    logits, target = random_problem(0)
    q = smoothed_distribution(target, 13, 0.1)
    log_p = logits.log_softmax(-1)
    kl = F.kl_div(log_p.view(-1, 13), q.view(-1, 13), reduction="sum")
    entropy = -(q[q > 0] * q[q > 0].log()).sum()
    loss = LabelSmoothingLoss(13, 0.1)(logits, target)
    torch.testing.assert_close(loss, kl + entropy, atol=1e-4, rtol=1e-5)
    n_tokens = int((target != PAD).sum())
    assert entropy.item() == pytest.approx(n_tokens * smoothed_loss_floor(13, 0.1), rel=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_no_smoothing_is_the_plain_cross_entropy(seed):
    logits, target = random_problem(seed)
    reference = torch_reference(logits, target, 0.0)
    for smooth_pad in (False, True):
        loss = LabelSmoothingLoss(13, 0.0, smooth_pad=smooth_pad)(logits, target)
        torch.testing.assert_close(loss, reference, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(token_nll(logits, target), reference, atol=1e-5, rtol=1e-5)


def test_pad_positions_contribute_nothing_and_get_no_gradient():
    logits, target = random_problem(1)
    logits.requires_grad_(True)
    is_pad = target == PAD
    assert is_pad.any() and (~is_pad).any()
    for smooth_pad in (False, True):
        logits.grad = None
        loss = LabelSmoothingLoss(13, 0.1, smooth_pad=smooth_pad)(logits, target)
        loss.backward()
        assert torch.equal(logits.grad[is_pad], torch.zeros_like(logits.grad[is_pad]))
        assert logits.grad[~is_pad].abs().sum() > 0
        changed = logits.detach().clone()
        changed[is_pad] = 100 * torch.randn_like(changed[is_pad])
        assert LabelSmoothingLoss(13, 0.1, smooth_pad=smooth_pad)(changed, target).item() == loss.item()
    assert token_nll(logits, torch.full_like(target, PAD)).item() == 0.0


def test_default_gives_no_gradient_toward_the_pad_class_beyond_softmax():
    """With smooth_pad=False the target puts 0 on pad: d loss / d logit_pad = p_pad (pushes it down)."""
    logits, target = random_problem(2)
    logits.requires_grad_(True)
    LabelSmoothingLoss(13, 0.1)(logits, target).backward()
    real = target != PAD
    p_pad = logits.detach().softmax(-1)[..., PAD][real]
    torch.testing.assert_close(logits.grad[..., PAD][real], p_pad)


def test_gradient_is_p_minus_q():
    logits, target = random_problem(3)
    logits.requires_grad_(True)
    for smooth_pad in (False, True):
        logits.grad = None
        LabelSmoothingLoss(13, 0.2, smooth_pad=smooth_pad)(logits, target).backward()
        q = smoothed_distribution(target, 13, 0.2, smooth_pad=smooth_pad)
        real = (target != PAD).unsqueeze(-1)
        expected = (logits.detach().softmax(-1) - q) * real
        torch.testing.assert_close(logits.grad, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_logits_are_accepted_and_computed_in_float32(dtype):
    logits, target = random_problem(4)
    low = logits.to(dtype)
    for loss_fn in (LabelSmoothingLoss(13, 0.1), lambda x, t: token_nll(x, t)):
        loss = loss_fn(low, target)
        assert loss.dtype == torch.float32
        torch.testing.assert_close(loss, loss_fn(low.float(), target))
    low.requires_grad_(True)
    LabelSmoothingLoss(13, 0.1)(low, target).backward()
    assert low.grad.dtype == dtype


def test_smoothed_distribution():
    target = torch.tensor([[3, 0, 1]])
    q = smoothed_distribution(target, vocab_size=5, smoothing=0.2)
    assert q.shape == (1, 3, 5)
    torch.testing.assert_close(q[0, 0], torch.tensor([0.0, 0.05, 0.05, 0.85, 0.05]))
    torch.testing.assert_close(q[0, 1], torch.zeros(5))  # a pad target: nothing to predict
    q_all = smoothed_distribution(target, vocab_size=5, smoothing=0.2, smooth_pad=True)
    torch.testing.assert_close(q_all[0, 2], torch.tensor([0.04, 0.84, 0.04, 0.04, 0.04]))
    q_none = smoothed_distribution(target, vocab_size=5, smoothing=0.2, pad=None)
    torch.testing.assert_close(q_none[0, 1], torch.tensor([0.84, 0.04, 0.04, 0.04, 0.04]))
    torch.testing.assert_close(q_none.sum(-1), torch.ones(1, 3))


def test_floor_and_perplexity():
    k = 37000 - 1
    p_true, p_other = 0.9 + 0.1 / k, 0.1 / k
    expected = -p_true * math.log(p_true) - (k - 1) * p_other * math.log(p_other)
    assert smoothed_loss_floor(37000, 0.1) == pytest.approx(expected, rel=1e-12)
    assert smoothed_loss_floor(37000, 0.0) == 0.0
    assert smoothed_loss_floor(37000, 0.1) > smoothed_loss_floor(100, 0.1) > 0
    assert perplexity(0.0, 10) == 1.0
    assert perplexity(torch.tensor(20.0), 10) == pytest.approx(math.exp(2.0))
    with pytest.raises(ValueError, match="n_tokens must be at least 1"):
        perplexity(1.0, 0)


def test_the_smoothed_loss_is_minimal_at_q():
    """Over all model distributions, the per-token loss is smallest when p equals q."""
    target = torch.tensor([4])
    loss_fn = LabelSmoothingLoss(6, 0.3)
    q = smoothed_distribution(target, 6, 0.3)
    at_q = loss_fn(torch.where(q > 0, q.log(), torch.tensor(-1e9)), target)
    assert at_q.item() == pytest.approx(smoothed_loss_floor(6, 0.3), rel=1e-6)
    confident = loss_fn(torch.tensor([[0.0, 0, 0, 0, 20, 0]]), target)
    assert confident.item() > at_q.item() + 1


def test_a_pad_log_probability_of_minus_infinity_is_harmless():
    """A model may learn never to predict pad: with smooth_pad=False the loss stays finite."""
    logits, target = random_problem(5)
    logits[..., PAD] = float("-inf")
    logits.requires_grad_(True)
    loss = LabelSmoothingLoss(13, 0.1)(logits, target)
    assert torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(logits.grad).all()
    with torch.no_grad():
        finite = logits.clone()
        finite[..., PAD] = -1e4  # practically the same distribution
    torch.testing.assert_close(loss, LabelSmoothingLoss(13, 0.1)(finite, target))


def test_errors():
    with pytest.raises(ValueError, match=r"smoothing must lie in \[0, 1\), got 1.0"):
        LabelSmoothingLoss(10, smoothing=1.0)
    with pytest.raises(ValueError, match=r"smoothing must lie in \[0, 1\), got -0.1"):
        smoothed_distribution(torch.tensor([1]), 10, -0.1)
    with pytest.raises(ValueError, match=r"pad must be an id in \[0, 10\)"):
        LabelSmoothingLoss(10, pad=10)
    loss_fn = LabelSmoothingLoss(10)
    with pytest.raises(ValueError, match=r"target ids must lie in \[0, 10\), got ids from 1 to 10"):
        loss_fn(torch.randn(2, 10), torch.tensor([1, 10]))
    with pytest.raises(ValueError, match="target ids must lie"):
        token_nll(torch.randn(2, 10), torch.tensor([-1, 3]))
    with pytest.raises(ValueError, match=r"logits .* and target .* do not match"):
        loss_fn(torch.randn(2, 3, 10), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="logits have 7 classes"):
        loss_fn(torch.randn(2, 7), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="target must hold integer class ids"):
        loss_fn(torch.randn(2, 10), torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize(
    "options", [{}, {"smooth_pad": True}, {"pad": None}, {"smoothing": 0.0}, {"pad": 3}, {"smoothing": 0.3}]
)
def test_the_written_out_gradient_is_autograds(options):
    """loss_and_nll's backward pass is p − q, written by hand: it must equal what autograd finds
    through the loss's definition, −Σ q log softmax(logits)."""
    smoothing, pad = options.get("smoothing", 0.1), options.get("pad", PAD)
    smooth_pad = options.get("smooth_pad", False)
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 11, (3, 5))
    if pad is not None:
        target[0, 3:] = pad
    loss, nll = LabelSmoothingLoss(11, smoothing, pad=pad, smooth_pad=smooth_pad).loss_and_nll(logits, target)
    (ours,) = torch.autograd.grad(loss, logits)
    reference_logits = logits.detach().clone().requires_grad_(True)
    q = smoothed_distribution(target, 11, smoothing, pad=pad, smooth_pad=smooth_pad).double()
    reference = -(q * F.log_softmax(reference_logits, dim=-1)).sum()
    (expected,) = torch.autograd.grad(reference, reference_logits)
    assert torch.allclose(loss, reference.detach(), atol=1e-10)
    assert torch.allclose(ours, expected, atol=1e-12)
    assert not nll.requires_grad
    criterion = LabelSmoothingLoss(11, smoothing, pad=pad, smooth_pad=smooth_pad)
    assert torch.autograd.gradcheck(lambda x: criterion.loss_and_nll(x, target)[0], (logits,))


def test_the_gradient_keeps_the_dtype_of_low_precision_logits():
    logits = torch.randn(4, 9).to(torch.bfloat16).requires_grad_(True)
    loss, _ = LabelSmoothingLoss(9, 0.1).loss_and_nll(logits, torch.tensor([1, 2, 0, 8]))
    loss.backward()
    assert loss.dtype == torch.float32 and logits.grad.dtype == torch.bfloat16
    assert torch.isfinite(logits.grad.float()).all()


def test_a_pad_logit_of_minus_infinity_gives_finite_loss_and_gradient():
    logits = torch.randn(2, 6, 7)
    logits[..., PAD] = float("-inf")
    logits.requires_grad_(True)
    loss, _ = LabelSmoothingLoss(7, 0.1).loss_and_nll(logits, torch.randint(1, 7, (2, 6)))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()


# --- the output layer and the loss in chunks (projected_smoothed_loss) ---------------------------


def projected_problem(seed: int, vocab_size: int = 13, dtype=torch.float64):
    """Decoder outputs (4, 9, 6), an output layer (V, 6) and targets with padding, all float64."""
    _, target = random_problem(seed, vocab_size)
    generator = torch.Generator().manual_seed(seed + 100)
    hidden = torch.randn(4, 9, 6, generator=generator, dtype=dtype, requires_grad=True)
    weight = torch.randn(vocab_size, 6, generator=generator, dtype=dtype, requires_grad=True)
    return hidden, weight, target


def loss_and_gradients(loss_and_nll, hidden, weight):
    loss, nll = loss_and_nll()
    return [loss, nll, *torch.autograd.grad(loss, (hidden, weight))]


@pytest.mark.parametrize(
    "smoothing, pad, smooth_pad",
    [(0.1, PAD, False), (0.1, PAD, True), (0.2, None, False), (0.0, PAD, False), (0.1, 5, False)],
)
@pytest.mark.parametrize("chunk_rows", [1, 7, 36, 4096])
def test_the_chunked_output_layer_and_loss_equal_the_plain_path(smoothing, pad, smooth_pad, chunk_rows):
    hidden, weight, target = projected_problem(0)
    plain = loss_and_gradients(
        lambda: LabelSmoothingLoss(13, smoothing, pad, smooth_pad).loss_and_nll(hidden @ weight.T, target),
        hidden, weight)
    chunked = loss_and_gradients(
        lambda: projected_smoothed_loss(hidden, weight, target, smoothing, pad, smooth_pad, chunk_rows),
        hidden, weight)
    for a, b in zip(plain, chunked, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_the_real_rows_alone_give_the_loss_and_gradients_of_every_row():
    hidden, weight, target = projected_problem(1)
    every = loss_and_gradients(lambda: projected_smoothed_loss(hidden, weight, target), hidden, weight)
    real = target != PAD
    alone = loss_and_gradients(
        lambda: projected_smoothed_loss(hidden[real], weight, target[real], chunk_rows=5), hidden, weight)
    for a, b in zip(every, alone, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("autocast", [True, False])
def test_the_chunked_loss_follows_low_precision_as_the_plain_output_layer_does(autocast):
    """Under autocast (float32 weights, bf16 products), or with bf16 tensors: the loss in float32,
    the gradients in the inputs' dtypes, the values those of the plain path to bf16's rounding."""
    hidden, weight, target = projected_problem(2)
    dtype = torch.float32 if autocast else torch.bfloat16
    hidden, weight = (t.detach().to(dtype).requires_grad_(True) for t in (hidden, weight))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        plain = loss_and_gradients(
            lambda: LabelSmoothingLoss(13, 0.1).loss_and_nll(F.linear(hidden, weight), target),
            hidden, weight)
        chunked = loss_and_gradients(lambda: projected_smoothed_loss(hidden, weight, target, chunk_rows=8),
                                     hidden, weight)
    assert [t.dtype for t in chunked] == [t.dtype for t in plain] == [torch.float32] * 2 + [dtype] * 2
    # the same bf16 logits, log-softmax in float32: the same loss; the weight's gradient is summed
    # over the chunks, each product rounded to bf16
    for a, b, rtol in zip(plain, chunked, (1e-5, 1e-5, 1e-5, 2e-2), strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=rtol, atol=rtol)


def test_the_chunked_loss_without_gradients_and_its_errors():
    hidden, weight, target = projected_problem(3)
    with torch.no_grad():
        loss, _ = projected_smoothed_loss(hidden, weight, target)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, LabelSmoothingLoss(13, 0.1)(hidden @ weight.T, target).detach())
    with pytest.raises(ValueError, match="do not match"):
        projected_smoothed_loss(hidden, weight.T, target)
    with pytest.raises(ValueError, match="do not match"):
        projected_smoothed_loss(hidden, weight, target[:, :3])
    with pytest.raises(ValueError, match="chunk_rows"):
        projected_smoothed_loss(hidden, weight, target, chunk_rows=0)
    with pytest.raises(ValueError, match="integer class ids"):
        projected_smoothed_loss(hidden, weight, target.double())


# --- R-Drop ----------------------------------------------------------------------------------


def test_the_symmetric_kl_of_identical_outputs_is_zero():
    logits, target = random_problem(0)
    assert symmetric_kl(logits, logits.clone(), target) == 0
    assert symmetric_kl(logits, logits + 5.0, target) < 1e-4  # the same softmax, shifted logits
    assert symmetric_kl(logits, torch.randn_like(logits), target) > 0.1


def test_the_symmetric_kl_is_kl_div_both_ways_over_the_real_tokens():
    logits_1, target = random_problem(1, vocab_size=6, shape=(2, 5), n_pad=3)
    logits_2 = logits_1 + torch.randn(logits_1.shape, generator=torch.Generator().manual_seed(9))
    log_p1, log_p2 = F.log_softmax(logits_1, dim=-1), F.log_softmax(logits_2, dim=-1)
    # kl_div(input, target) is KL(target ‖ input), with `input` as log-probabilities
    kl_12 = F.kl_div(log_p2, log_p1, log_target=True, reduction="none").sum(-1)  # KL(P1 ‖ P2)
    kl_21 = F.kl_div(log_p1, log_p2, log_target=True, reduction="none").sum(-1)  # KL(P2 ‖ P1)
    real = target != PAD
    assert 0 < int(real.sum()) < target.numel()
    expected = ((kl_12 + kl_21) / 2)[real].sum()
    torch.testing.assert_close(symmetric_kl(logits_1, logits_2, target), expected)
    everything = ((kl_12 + kl_21) / 2).sum()  # padding included: another value
    assert not torch.allclose(everything, expected)
    torch.testing.assert_close(symmetric_kl(logits_1, logits_2, target, pad=None), everything)


def test_rdrop_loss_with_alpha_zero_is_the_mean_of_the_two_passes_losses():
    logits_1, target = random_problem(2)
    logits_2 = torch.randn_like(logits_1)
    criterion = LabelSmoothingLoss(13, 0.1)
    loss, nll = rdrop_loss(logits_1, logits_2, target, criterion, 0.0)
    torch.testing.assert_close(loss, (criterion(logits_1, target) + criterion(logits_2, target)) / 2)
    torch.testing.assert_close(nll, (token_nll(logits_1, target) + token_nll(logits_2, target)) / 2)
    with_kl, _ = rdrop_loss(logits_1, logits_2, target, criterion, 2.0)
    torch.testing.assert_close(with_kl, loss + 2.0 * symmetric_kl(logits_1, logits_2, target))


def rdrop_problem(dropout: float):
    torch.manual_seed(0)
    model = make_model(src_vocab_size=13, tgt_vocab_size=13, n_layers=1, d_model=16, d_ff=32, n_heads=2,
                       dropout=dropout).train()
    batch = make_batch([([4, 5, 6], [7, 8]), ([9, 10], [11, 12, 4, 5])])
    return model, (batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask), batch.tgt_out


def test_without_dropout_the_rdrop_loss_is_the_plain_loss():
    model, inputs, target = rdrop_problem(dropout=0.0)
    criterion = LabelSmoothingLoss(13, 0.1)
    plain, plain_nll = criterion.loss_and_nll(model(*inputs), target)
    loss, nll = rdrop_forward_loss(model, inputs, target, criterion, alpha=1.0)
    torch.testing.assert_close(loss, plain)
    torch.testing.assert_close(nll, plain_nll)


def test_with_dropout_the_two_passes_differ_and_alpha_zero_is_one_plain_pass():
    model, inputs, target = rdrop_problem(dropout=0.3)
    criterion = LabelSmoothingLoss(13, 0.1)
    torch.manual_seed(1)
    plain = criterion.loss_and_nll(model(*inputs), target)
    torch.manual_seed(1)
    one_pass = rdrop_forward_loss(model, inputs, target, criterion, alpha=0.0)
    assert all(torch.equal(a, b) for a, b in zip(plain, one_pass, strict=True))  # bit for bit
    torch.manual_seed(1)
    loss, _ = rdrop_forward_loss(model, inputs, target, criterion, alpha=1.0)
    torch.manual_seed(1)
    logits_1, logits_2 = model(*(torch.cat([x, x]) for x in inputs)).chunk(2)
    kl = symmetric_kl(logits_1, logits_2, target)
    assert kl > 0
    torch.testing.assert_close(loss, rdrop_loss(logits_1, logits_2, target, criterion, 1.0)[0])
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
