"""Multi-head attention (§3.2.2) against ``torch.nn.MultiheadAttention`` with the same weights."""

import pytest
import torch
from helpers import TOL, copy_attention, torch_causal, torch_key_padding
from torch import nn

from annotated_transformer.attention import attention, padding_mask, subsequent_mask
from annotated_transformer.multi_head_attention import MultiHeadAttention

D_MODEL, HEADS, BATCH, Q_LEN, K_LEN = 32, 4, 2, 5, 7
PAD = 0
FUSED = pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])


def make_pair(fused: bool = True) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    """Our layer with random weights (biases too) and PyTorch's with the same weights, in eval mode."""
    torch.manual_seed(0)
    ours = MultiHeadAttention(D_MODEL, HEADS, fused=fused)
    with torch.no_grad():
        for linear in (ours.w_q, ours.w_k, ours.w_v, ours.w_o):
            linear.bias.normal_()  # nn.Linear's default init is fine, but make the biases matter
    theirs = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True)
    copy_attention(ours, theirs)
    return ours.eval(), theirs.eval()


def inputs(q_len: int = Q_LEN, k_len: int = K_LEN) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, q_len, D_MODEL, generator=generator)
    memory = torch.randn(BATCH, k_len, D_MODEL, generator=generator)
    return x, memory


def key_tokens(length: int) -> torch.Tensor:
    """Right-padded token ids: the first sequence ends in two padding positions."""
    tokens = torch.arange(1, BATCH * length + 1).view(BATCH, length)
    tokens[0, -2:] = PAD
    return tokens


@FUSED
def test_self_attention_matches_torch(fused):
    ours, theirs = make_pair(fused)
    x, _ = inputs()
    expected, _ = theirs(x, x, x, need_weights=False)
    torch.testing.assert_close(ours(x, x, x), expected, **TOL)


@FUSED
def test_self_attention_with_key_padding_mask_matches_torch(fused):
    ours, theirs = make_pair(fused)
    x, _ = inputs()
    mask = padding_mask(key_tokens(Q_LEN), PAD)
    expected, _ = theirs(x, x, x, key_padding_mask=torch_key_padding(mask), need_weights=False)
    torch.testing.assert_close(ours(x, x, x, mask), expected, **TOL)


@FUSED
def test_self_attention_with_causal_mask_matches_torch(fused):
    ours, theirs = make_pair(fused)
    x, _ = inputs()
    expected, _ = theirs(x, x, x, attn_mask=torch_causal(Q_LEN), need_weights=False)
    torch.testing.assert_close(ours(x, x, x, subsequent_mask(Q_LEN)), expected, **TOL)


@FUSED
def test_self_attention_with_causal_and_padding_masks_matches_torch(fused):
    ours, theirs = make_pair(fused)
    x, _ = inputs()
    pad = padding_mask(key_tokens(Q_LEN), PAD)
    expected, _ = theirs(
        x, x, x, key_padding_mask=torch_key_padding(pad), attn_mask=torch_causal(Q_LEN), need_weights=False
    )
    torch.testing.assert_close(ours(x, x, x, pad & subsequent_mask(Q_LEN)), expected, **TOL)


@FUSED
def test_cross_attention_with_different_key_length_matches_torch(fused):
    ours, theirs = make_pair(fused)
    x, memory = inputs()
    assert Q_LEN != K_LEN
    mask = padding_mask(key_tokens(K_LEN), PAD)
    expected, _ = theirs(x, memory, memory, key_padding_mask=torch_key_padding(mask), need_weights=False)
    out = ours(x, memory, memory, mask)
    assert out.shape == (BATCH, Q_LEN, D_MODEL)
    torch.testing.assert_close(out, expected, **TOL)


@FUSED
def test_train_mode_without_dropout_matches_torch(fused):
    ours, theirs = make_pair(fused)
    ours.train()
    theirs.train()
    x, memory = inputs()
    expected, _ = theirs(x, memory, memory, need_weights=False)
    torch.testing.assert_close(ours(x, memory, memory), expected, **TOL)


@FUSED
def test_store_weights_keeps_per_head_weights_equal_to_torch(fused):
    ours, theirs = make_pair(fused)
    ours.store_weights = True
    x, memory = inputs()
    mask = padding_mask(key_tokens(K_LEN), PAD)
    expected_out, expected_weights = theirs(
        x, memory, memory, key_padding_mask=torch_key_padding(mask), average_attn_weights=False
    )
    out = ours(x, memory, memory, mask)
    assert ours.weights is not None
    assert ours.weights.shape == (BATCH, HEADS, Q_LEN, K_LEN)
    assert not ours.weights.requires_grad
    torch.testing.assert_close(ours.weights, expected_weights, **TOL)
    torch.testing.assert_close(out, expected_out, **TOL)


def test_weights_are_not_stored_by_default():
    ours, _ = make_pair(fused=False)
    x, _ = inputs()
    ours(x, x, x)
    assert ours.weights is None


def test_fused_and_unfused_agree_with_a_mask():
    fused, _ = make_pair(fused=True)
    unfused, _ = make_pair(fused=False)
    x, memory = inputs()
    mask = padding_mask(key_tokens(K_LEN), PAD)
    torch.testing.assert_close(fused(x, memory, memory, mask), unfused(x, memory, memory, mask), **TOL)


@FUSED
def test_fully_masked_query_gives_no_nan(fused):
    """A query that sees no key gets a zero attention output, so the layer returns w_o's bias."""
    ours, _ = make_pair(fused)
    x, memory = inputs()
    mask = torch.ones(BATCH, Q_LEN, K_LEN, dtype=torch.bool)
    mask[0, 3] = False
    out = ours(x, memory, memory, mask)
    assert not out.isnan().any()
    torch.testing.assert_close(out[0, 3], ours.w_o.bias, **TOL)


def test_explicit_d_k_and_d_v_follow_the_per_head_formula():
    """With d_k ≠ d_v (Table 3 rows (A), (B)): Concat(head_1 … head_h) W^O, head_i from its own slices."""
    torch.manual_seed(0)
    d_k, d_v = 5, 3
    mha = MultiHeadAttention(D_MODEL, HEADS, d_k=d_k, d_v=d_v).eval()
    x, memory = inputs()
    heads = []
    for i in range(HEADS):
        q = x @ mha.w_q.weight[i * d_k : (i + 1) * d_k].T + mha.w_q.bias[i * d_k : (i + 1) * d_k]
        k = memory @ mha.w_k.weight[i * d_k : (i + 1) * d_k].T + mha.w_k.bias[i * d_k : (i + 1) * d_k]
        v = memory @ mha.w_v.weight[i * d_v : (i + 1) * d_v].T + mha.w_v.bias[i * d_v : (i + 1) * d_v]
        heads.append(attention(q, k, v)[0])
    expected = mha.w_o(torch.cat(heads, dim=-1))
    with torch.no_grad():
        torch.testing.assert_close(mha(x, memory, memory), expected, **TOL)


def test_explicit_head_sizes_allow_d_model_not_divisible_by_heads():
    mha = MultiHeadAttention(30, 4, d_k=8, d_v=6)
    x = torch.randn(2, 3, 30)
    assert mha.w_q.out_features == 32 and mha.w_v.out_features == 24 and mha.w_o.in_features == 24
    assert mha(x, x, x).shape == (2, 3, 30)


def test_self_attention_is_permutation_equivariant():
    """Without positions, attention cannot tell token order: permuting the input permutes the output."""
    ours, _ = make_pair()
    x, _ = inputs()
    perm = torch.tensor([3, 0, 4, 1, 2])
    with torch.no_grad():
        out = ours(x, x, x)
        out_permuted = ours(x[:, perm], x[:, perm], x[:, perm])
    torch.testing.assert_close(out_permuted, out[:, perm], **TOL)


# --- bad input ------------------------------------------------------------------------------


def test_d_model_not_divisible_by_heads_is_rejected():
    with pytest.raises(ValueError, match=r"d_model=30 is not divisible by n_heads=4"):
        MultiHeadAttention(30, 4)


def test_zero_heads_is_rejected():
    with pytest.raises(ValueError, match="n_heads must be at least 1"):
        MultiHeadAttention(32, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@FUSED
def test_non_bool_mask_is_rejected(dtype, fused):
    ours, _ = make_pair(fused)
    x, _ = inputs()
    with pytest.raises(TypeError, match=r"dtype torch\.bool"):
        ours(x, x, x, torch.ones(BATCH, 1, Q_LEN, dtype=dtype))


@FUSED
def test_mask_with_wrong_key_length_is_rejected(fused):
    ours, _ = make_pair(fused)
    x, memory = inputs()
    with pytest.raises(ValueError, match="does not broadcast"):
        ours(x, memory, memory, torch.ones(BATCH, 1, Q_LEN, dtype=torch.bool))


@pytest.mark.parametrize("shape", [(Q_LEN, K_LEN), (BATCH, 1, Q_LEN, K_LEN)], ids=["2d", "4d"])
@FUSED
def test_mask_that_is_not_3d_is_rejected(shape, fused):
    ours, _ = make_pair(fused)
    x, memory = inputs()
    with pytest.raises(ValueError, match="must be 3-D"):
        ours(x, memory, memory, torch.ones(shape, dtype=torch.bool))
