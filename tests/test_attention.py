"""Scaled dot-product attention (§3.2.1) and the masks, checked against PyTorch's
``scaled_dot_product_attention`` (whose bool masks share our convention: True = may attend)."""

import math

import pytest
import torch
import torch.nn.functional as F

from annotated_transformer.attention import attention, padding_mask, subsequent_mask, target_mask

BATCH, HEADS, LEN, D_K, D_V = 2, 3, 5, 8, 6
PAD = 0
# Right-padded token ids: the first sequence has two padding positions, the second none.
TOKENS = torch.tensor([[4, 7, 1, PAD, PAD], [3, 9, 2, 5, 8]])


@pytest.fixture
def qkv():
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(BATCH, HEADS, LEN, D_K, generator=generator, dtype=torch.float64)
    k = torch.randn(BATCH, HEADS, LEN, D_K, generator=generator, dtype=torch.float64)
    v = torch.randn(BATCH, HEADS, LEN, D_V, generator=generator, dtype=torch.float64)
    return q, k, v


def _random_mask(*shape: int) -> torch.Tensor:
    """A random bool mask with at least one allowed key in every row (the diagonal)."""
    generator = torch.Generator().manual_seed(1)
    mask = torch.rand(*shape, generator=generator) < 0.5
    return mask | torch.eye(shape[-2], shape[-1], dtype=torch.bool)


MASKS = {
    # (batch, 1, 1, key_len): each sequence's padding, the same for every head and query.
    "padding": padding_mask(TOKENS, PAD).unsqueeze(1),
    # (1, len, len): no peeking ahead, broadcast over batch (and heads).
    "causal": subsequent_mask(LEN),
    # (batch, 1, len, len): padding and causal together.
    "combined": target_mask(TOKENS, PAD).unsqueeze(1),
    # a different mask for every batch element and head.
    "full": _random_mask(BATCH, HEADS, LEN, LEN),
    # (len, len): one mask broadcast over both batch and heads.
    "broadcast_2d": _random_mask(LEN, LEN),
    # (1, heads, len, len): one mask per head, broadcast over the batch.
    "broadcast_batch": _random_mask(1, HEADS, LEN, LEN),
}


def test_matches_sdpa_without_mask(qkv):
    out, _ = attention(*qkv)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(*qkv), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("name", MASKS)
def test_matches_sdpa_with_mask(qkv, name):
    mask = MASKS[name]
    out, _ = attention(*qkv, mask=mask)
    expected = F.scaled_dot_product_attention(*qkv, attn_mask=mask)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)


def test_matches_sdpa_in_float32(qkv):
    q, k, v = (t.float() for t in qkv)
    mask = MASKS["combined"]
    out, _ = attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_weights_are_softmax_of_scaled_scores(qkv):
    """Equation (1): weights = softmax(Q Kᵀ / √d_k), output = weights V."""
    q, k, v = qkv
    out, weights = attention(q, k, v)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(D_K), dim=-1)
    torch.testing.assert_close(weights, expected, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(out, expected @ v, atol=1e-12, rtol=1e-12)


def test_output_and_weight_shapes():
    q = torch.randn(2, 3, 4, D_K)
    k = torch.randn(2, 3, 7, D_K)
    v = torch.randn(2, 3, 7, D_V)
    out, weights = attention(q, k, v)
    assert out.shape == (2, 3, 4, D_V)
    assert weights.shape == (2, 3, 4, 7)


@pytest.mark.parametrize("name", MASKS)
def test_weights_sum_to_one_and_vanish_at_masked_keys(qkv, name):
    mask = MASKS[name]
    _, weights = attention(*qkv, mask=mask)
    mask = mask.expand_as(weights)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1], dtype=weights.dtype))
    assert torch.all(weights[~mask] == 0)
    assert torch.all(weights[mask] > 0)


def _mask_with_fully_masked_row() -> torch.Tensor:
    mask = MASKS["full"].clone()
    mask[0, 1, 2] = False  # query 2 of head 1 in batch element 0 sees no key at all
    return mask


def test_fully_masked_row_gives_zeros_not_nan(qkv):
    mask = _mask_with_fully_masked_row()
    out, weights = attention(*qkv, mask=mask)
    assert not out.isnan().any() and not weights.isnan().any()
    assert torch.all(weights[0, 1, 2] == 0)
    assert torch.all(out[0, 1, 2] == 0)
    # The other rows still sum to one.
    row_sums = weights.sum(-1)
    row_sums[0, 1, 2] = 1.0
    torch.testing.assert_close(row_sums, torch.ones_like(row_sums))


def test_fully_masked_row_matches_sdpa(qkv):
    """PyTorch's SDPA (torch ≥ 2.5) also returns zeros for a query with no visible key."""
    mask = _mask_with_fully_masked_row()
    out, _ = attention(*qkv, mask=mask)
    expected = F.scaled_dot_product_attention(*qkv, attn_mask=mask)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)


def test_fully_masked_row_has_finite_gradients(qkv):
    q, k, v = (t.clone().requires_grad_() for t in qkv)
    out, _ = attention(q, k, v, mask=_mask_with_fully_masked_row())
    out.sum().backward()
    for tensor in (q, k, v):
        assert torch.isfinite(tensor.grad).all()
    # Nothing flows back into the query that attended to nothing.
    assert torch.all(q.grad[0, 1, 2] == 0)


def test_all_true_mask_changes_nothing(qkv):
    out, weights = attention(*qkv)
    out_masked, weights_masked = attention(*qkv, mask=torch.ones(LEN, LEN, dtype=torch.bool))
    torch.testing.assert_close(out_masked, out, atol=0, rtol=0)
    torch.testing.assert_close(weights_masked, weights, atol=0, rtol=0)


def test_dropout_zeroes_and_rescales_weights(qkv):
    torch.manual_seed(0)
    _, weights = attention(*qkv)
    _, dropped = attention(*qkv, dropout_p=0.5)
    kept = dropped != 0
    assert kept.any() and (~kept).any()
    torch.testing.assert_close(dropped[kept], 2 * weights[kept])


# --- bad masks ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_non_bool_mask_is_rejected(qkv, dtype):
    mask = torch.ones(LEN, LEN, dtype=dtype)
    with pytest.raises(TypeError, match=r"torch\.bool"):
        attention(*qkv, mask=mask)


def test_mask_that_is_not_a_tensor_is_rejected(qkv):
    with pytest.raises(TypeError, match=r"must be a torch\.Tensor"):
        attention(*qkv, mask=[[True] * LEN] * LEN)


@pytest.mark.parametrize(
    "shape",
    [(LEN, LEN + 1), (BATCH, 1, 1, LEN - 1), (BATCH + 1, 1, LEN, LEN), (1, 1, 1, LEN, LEN)],
    ids=["long_keys", "short_keys", "wrong_batch", "too_many_dims"],
)
def test_mask_of_wrong_shape_is_rejected(qkv, shape):
    mask = torch.ones(shape, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"does not broadcast to the attention scores"):
        attention(*qkv, mask=mask)


# --- mask builders --------------------------------------------------------------------------


def test_subsequent_mask_exact():
    expected = torch.tensor(
        [
            [
                [True, False, False, False],
                [True, True, False, False],
                [True, True, True, False],
                [True, True, True, True],
            ]
        ]
    )
    mask = subsequent_mask(4)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, expected)


def test_padding_mask_exact():
    tokens = torch.tensor([[5, 6, 0], [7, 0, 0]])
    expected = torch.tensor([[[True, True, False]], [[True, False, False]]])
    mask = padding_mask(tokens, pad_id=0)
    assert mask.dtype == torch.bool
    assert mask.shape == (2, 1, 3)
    assert torch.equal(mask, expected)


def test_padding_mask_uses_the_given_pad_id():
    tokens = torch.tensor([[0, 1, 2]])
    assert torch.equal(padding_mask(tokens, pad_id=2), torch.tensor([[[True, True, False]]]))


def test_target_mask_exact():
    tokens = torch.tensor([[5, 6, 0], [7, 8, 9]])
    expected = torch.tensor(
        [
            [[True, False, False], [True, True, False], [True, True, False]],
            [[True, False, False], [True, True, False], [True, True, True]],
        ]
    )
    mask = target_mask(tokens, pad_id=0)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, expected)


def test_dropout_uses_the_rate_it_is_given(qkv):
    """p = 0.1 (the paper's P_drop) drops with that rate and rescales by 1/(1 - 0.1): the same mask as
    F.dropout(p=0.1) drawn from the same seed, not dropout at PyTorch's default rate of 0.5."""
    _, weights = attention(*qkv)
    torch.manual_seed(3)
    _, dropped = attention(*qkv, dropout_p=0.1)
    torch.manual_seed(3)
    torch.testing.assert_close(dropped, F.dropout(weights, p=0.1), atol=0, rtol=0)


def test_masks_are_made_on_the_tokens_device():
    """On a GPU the masks must live beside the scores: made on the device asked for (here `meta`, a
    device without data), never on the CPU by default."""
    assert subsequent_mask(4, device="meta").device.type == "meta"
    assert target_mask(TOKENS.to("meta"), PAD).device.type == "meta"
    assert subsequent_mask(4).device.type == "cpu"
