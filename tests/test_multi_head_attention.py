"""Multi-head attention (§3.2.2) against ``torch.nn.MultiheadAttention`` with the same weights."""

import pytest
import torch
import torch.nn.functional as F
from helpers import TOL, copy_attention, torch_causal, torch_key_padding
from torch import nn

from annotated_transformer.attention import attention, padding_mask, subsequent_mask
from annotated_transformer.helpers.errors import FieldError
from annotated_transformer.multi_head_attention import KVCache, MultiHeadAttention, head_dims

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


# --- head sizes: boundaries and the messages a user reads -----------------------------------


def test_one_head_is_accepted_and_gets_the_whole_width():
    """h = 1 is the smallest head count: one head of width d_model (Table 3 row (A)'s first line)."""
    assert head_dims(32, 1) == (32, 32)
    assert MultiHeadAttention(32, 1).w_q.out_features == 32


def test_head_sizes_of_one_are_accepted():
    """d_k = d_v = 1 are the smallest head sizes a user may give."""
    assert head_dims(32, 4, d_k=1, d_v=1) == (1, 1)


def test_default_head_sizes_are_d_model_over_h():
    assert head_dims(32, 4) == (8, 8)
    assert head_dims(32, 4, d_k=5) == (5, 8)
    assert head_dims(32, 4, d_v=3) == (8, 3)


def test_zero_heads_message_names_the_field_and_the_value():
    with pytest.raises(FieldError) as caught:
        head_dims(32, 0)
    assert str(caught.value) == "n_heads must be at least 1, got 0"
    assert caught.value.field == "n_heads"


@pytest.mark.parametrize("name", ["d_k", "d_v"])
@pytest.mark.parametrize("size", [0, -3])
def test_non_positive_head_size_message_says_the_field_the_value_and_what_unset_means(name, size):
    """One line: the field, 'must be a positive integer', the value given, and that None means d_model / h."""
    with pytest.raises(FieldError) as caught:
        head_dims(32, 4, **{name: size})
    assert str(caught.value) == (
        f"{name} must be a positive integer, got {size}; {name}=None means d_model / n_heads"
    )
    assert caught.value.field == name
    with pytest.raises(ValueError, match=rf"^{name} must be a positive integer"):
        MultiHeadAttention(32, 4, **{name: size})


NOT_DIVISIBLE = (
    "d_model=30 is not divisible by n_heads=4: each head gets d_model / n_heads dimensions, so choose "
    "n_heads dividing d_model (or give d_k and d_v explicitly)"
)


def test_d_model_not_divisible_message_is_the_whole_advice():
    """The error says what is wrong, why, and both ways out; the settings are named apart from the text."""
    with pytest.raises(FieldError) as caught:
        head_dims(30, 4)
    assert str(caught.value) == NOT_DIVISIBLE
    named = [s.name for s in caught.value.settings]
    assert named == ["d_model", "n_heads", "n_heads", "d_model", "d_k", "d_v"]


@pytest.mark.parametrize("given", [{"d_k": 8}, {"d_v": 6}], ids=["only-d_k", "only-d_v"])
def test_one_explicit_head_size_does_not_excuse_an_indivisible_d_model(given):
    """The other size still defaults to d_model / h, which must then divide evenly."""
    with pytest.raises(FieldError) as caught:
        head_dims(30, 4, **given)
    assert str(caught.value) == NOT_DIVISIBLE


# --- the layer's settings -------------------------------------------------------------------


def test_layer_defaults_run_the_fused_kernel_and_store_no_weights(monkeypatch):
    """By default (fused=True, store_weights False) the heads run through scaled_dot_product_attention."""
    mha = MultiHeadAttention(D_MODEL, HEADS).eval()
    assert mha.fused is True and mha.store_weights is False and mha.dropout == 0.0
    calls = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs.get("dropout_p"))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    x, _ = inputs()
    mha(x, x, x)
    assert calls == [0.0]
    MultiHeadAttention(D_MODEL, HEADS, fused=False)(x, x, x)
    assert calls == [0.0], "fused=False runs attention(), not the fused kernel"


def test_bias_false_builds_the_four_projections_without_bias():
    mha = MultiHeadAttention(D_MODEL, HEADS, bias=False)
    assert all(linear.bias is None for linear in (mha.w_q, mha.w_k, mha.w_v, mha.w_o))
    assert sum(p.numel() for p in mha.parameters()) == 4 * D_MODEL * D_MODEL
    biased = MultiHeadAttention(D_MODEL, HEADS)
    assert all(linear.bias is not None for linear in (biased.w_q, biased.w_k, biased.w_v, biased.w_o))


@FUSED
def test_dropout_rate_reaches_the_attention_weights_in_training(fused):
    """dropout=1 drops every attention weight in training, so each position gets only w_o's bias."""
    ours, _ = make_pair(fused)
    ours.dropout = 1.0
    ours.train()
    x, memory = inputs()
    out = ours(x, memory, memory)
    torch.testing.assert_close(out, ours.w_o.bias.expand_as(out), **TOL)


@FUSED
def test_dropout_is_off_in_eval_mode(fused):
    """In eval mode the layer is deterministic and equal to the same layer without dropout."""
    ours, theirs = make_pair(fused)
    ours.dropout = 0.5
    x, memory = inputs()
    expected, _ = theirs(x, memory, memory, need_weights=False)
    torch.testing.assert_close(ours(x, memory, memory), expected, **TOL)


# --- the key/value cache --------------------------------------------------------------------

B, H, D_K, D_V = 2, 3, 5, 7  # batch ≠ heads ≠ head sizes, so that no axis can stand in for another


def kv(length: int, seed: int, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    k = torch.randn(B, H, length, D_K, generator=generator).to(dtype)
    v = torch.randn(B, H, length, D_V, generator=generator).to(dtype)
    return k, v


def filled_cache(chunks=(3, 1, 2)) -> tuple[KVCache, torch.Tensor, torch.Tensor]:
    """A self-attention cache fed `chunks` positions per call; and the keys, values it should hold."""
    cache = KVCache()
    ks, vs = [], []
    for seed, length in enumerate(chunks):
        k, v = kv(length, seed)
        cache.store(k, v)
        ks.append(k)
        vs.append(v)
    return cache, torch.cat(ks, dim=2), torch.cat(vs, dim=2)


def test_new_cache_is_empty_and_not_static():
    cache = KVCache()
    assert cache.static is False
    assert cache.k is None and cache.v is None
    assert len(cache) == 0
    assert KVCache(static=True).static is True


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int64])
def test_store_step_by_step_past_the_capacity_holds_the_concatenation(dtype):
    """Stored one, two, ... positions at a time, well past the first capacity: what the cache holds, and
    what each call returns, is exactly torch.cat of everything stored, with the dtype kept."""
    cache = KVCache()
    ks, vs = [], []
    for seed, length in enumerate([1, 2, 1, 5, 9, 1, 20, 3, 1]):
        k, v = kv(length, seed, dtype)
        all_k, all_v = cache.store(k, v)
        ks.append(k)
        vs.append(v)
        expected_k, expected_v = torch.cat(ks, dim=2), torch.cat(vs, dim=2)
        assert len(cache) == expected_k.size(2)
        assert all_k.dtype == dtype and all_v.dtype == dtype
        assert all_k.shape == expected_k.shape and all_v.shape == expected_v.shape
        assert torch.equal(all_k, expected_k) and torch.equal(all_v, expected_v)
        assert torch.equal(cache.k, expected_k) and torch.equal(cache.v, expected_v)


def test_store_of_many_positions_at_once_fits_them_all():
    """A first call longer than the initial room (a 40-token prompt) is stored whole, and so is a later one
    longer than doubling gives."""
    cache = KVCache()
    k1, v1 = kv(40, 0)
    cache.store(k1, v1)
    k2, v2 = kv(100, 1)
    all_k, all_v = cache.store(k2, v2)
    assert torch.equal(all_k, torch.cat([k1, k2], dim=2)) and torch.equal(all_v, torch.cat([v1, v2], dim=2))
    assert len(cache) == 140


def test_store_of_one_position_at_a_time_with_wide_heads():
    """Head sizes larger than the number of positions change nothing (d_k = 40, d_v = 33)."""
    cache = KVCache()
    ks, vs = [], []
    for _ in range(20):
        k, v = torch.randn(B, H, 1, 40, dtype=torch.float64), torch.randn(B, H, 1, 33, dtype=torch.float64)
        ks.append(k)
        vs.append(v)
        all_k, all_v = cache.store(k, v)
    assert torch.equal(all_k, torch.cat(ks, dim=2)) and torch.equal(all_v, torch.cat(vs, dim=2))


def test_cache_grows_like_a_python_list():
    """Room for 16 positions first, then capacity doubles when full: one position at a time, the buffer
    is reallocated (earlier positions copied) only at the 1st, 17th, 33rd and 65th store, never between."""
    cache = KVCache()
    moved_at = []
    pointer = None
    for step in range(1, 101):
        k, v = kv(1, step)
        cache.store(k, v)
        if cache.k.data_ptr() != pointer:
            moved_at.append(step)
            pointer = cache.k.data_ptr()
        assert cache.v.data_ptr() == cache._v.data_ptr()
    assert moved_at == [1, 17, 33, 65]
    assert cache._k.size(2) == cache._v.size(2) == 128


def test_static_cache_keeps_the_memory_whole():
    """Encoder–decoder attention: the memory's keys and values are stored as given, all of them,
    and len() counts the memory's positions (here more than d_k)."""
    cache = KVCache(static=True)
    k, v = kv(9, 0)
    assert cache.store(k, v) == (k, v)
    assert len(cache) == 9
    assert torch.equal(cache.k, k) and torch.equal(cache.v, v)


def test_select_picks_and_repeats_batch_rows_in_order():
    cache, k, v = filled_cache()
    rows = torch.tensor([1, 1, 0])
    chosen = cache.select(rows)
    assert chosen is not cache and chosen.static is False
    assert len(chosen) == len(cache) == 6
    assert torch.equal(chosen.k, k[rows]) and torch.equal(chosen.v, v[rows])
    more_k, more_v = (t.repeat(2, 1, 1, 1)[:3] for t in kv(20, 9))
    chosen.store(more_k, more_v)  # the new cache is independent of the old one and grows on its own
    assert torch.equal(cache.k, k) and torch.equal(cache.v, v)
    assert torch.equal(chosen.v, torch.cat([v[rows], more_v], dim=2))
    assert torch.equal(chosen.k[:, :, :6], k[rows])


def test_select_keeps_a_static_cache_static():
    cache = KVCache(static=True)
    k, v = kv(4, 0)
    cache.store(k, v)
    chosen = cache.select(torch.tensor([1]))
    assert chosen.static is True and len(chosen) == 4
    assert torch.equal(chosen.k, k[1:]) and torch.equal(chosen.v, v[1:])


def test_select_of_an_empty_cache_is_empty():
    for static in (False, True):
        chosen = KVCache(static).select(torch.tensor([0, 0]))
        assert chosen.k is None and chosen.v is None and len(chosen) == 0 and chosen.static is static


@pytest.mark.parametrize(
    "rows", [[1, 0], [0, 0], [1, 1], [0, 1]], ids=["swap", "copy-first", "copy-second", "identity"]
)
def test_reorder_moves_rows_in_place(rows):
    """Row i becomes old row indices[i], swaps included, without a new buffer."""
    cache, k, v = filled_cache()
    pointers = cache._k.data_ptr(), cache._v.data_ptr()
    cache.reorder_(torch.tensor(rows))
    assert (cache._k.data_ptr(), cache._v.data_ptr()) == pointers
    assert len(cache) == 6
    assert torch.equal(cache.k, k[rows]) and torch.equal(cache.v, v[rows])


def test_reorder_of_an_empty_cache_does_nothing():
    cache = KVCache()
    cache.reorder_(torch.tensor([1, 0]))
    assert cache.k is None and len(cache) == 0


def test_reorder_makes_its_index_on_the_indices_device():
    """On a GPU the beam indices live there: reorder_ compares them with positions made on their own
    device, not on the default one (here the default is `meta`, a device without data)."""
    cache, k, v = filled_cache()
    with torch.device("meta"):
        cache.reorder_(torch.tensor([1, 0], device="cpu"))
    assert torch.equal(cache.k, k[[1, 0]]) and torch.equal(cache.v, v[[1, 0]])


# --- the layer with a cache -----------------------------------------------------------------


@FUSED
def test_self_attention_with_a_cache_equals_the_full_causal_run(fused):
    """Chapter 3: decoding one position per call with a cache gives the rows of one causal call, past the
    cache's first capacity too; the cache then holds every position."""
    ours, _ = make_pair(fused)
    ours.double()
    length = 20
    x = torch.randn(BATCH, length, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = ours(x, x, x, subsequent_mask(length))
        cache = KVCache()
        steps = [ours(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache) for t in range(length)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)
    assert len(cache) == length and cache.k.shape == (BATCH, HEADS, length, D_MODEL // HEADS)


@FUSED
def test_cross_attention_with_a_static_cache_projects_the_memory_once(fused):
    """Encoder–decoder attention: the first call projects the memory; later calls reuse it (even if given
    other keys and values) and agree with the full run."""
    ours, _ = make_pair(fused)
    ours.double()
    x, memory = (t.double() for t in inputs())
    mask = padding_mask(key_tokens(K_LEN), PAD)
    with torch.no_grad():
        full = ours(x, memory, memory, mask)
        cache = KVCache(static=True)
        first = ours(x[:, :1], memory, memory, mask, cache)
        assert len(cache) == K_LEN
        projected = cache.k.clone(), cache.v.clone()
        zeros = torch.zeros_like(memory)
        steps = [first] + [ours(x[:, t : t + 1], zeros, zeros, mask, cache) for t in range(1, Q_LEN)]
    assert torch.equal(cache.k, projected[0]) and torch.equal(cache.v, projected[1])
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)
