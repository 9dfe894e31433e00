"""Feed-forward network (§3.3), embeddings and the pre-softmax projection (§3.4), positional
encodings (§3.5)."""

import math

import pytest
import torch

from annotated_transformer.layers import (
    MASK_BITS,
    Dropout,
    Embeddings,
    Generator,
    LearnedPositionalEmbedding,
    PositionalEncoding,
    PositionwiseFeedForward,
    dropout_keep_mask,
    dropped_values,
    sinusoidal_table,
)

# --- §3.3 position-wise feed-forward network -------------------------------------------------


def test_feed_forward_equals_the_formula():
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, with nn.Linear storing Wᵀ."""
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(d_model=8, d_ff=16)
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    ffn.double()
    w_1, b_1 = ffn.w_1.weight.T, ffn.w_1.bias
    w_2, b_2 = ffn.w_2.weight.T, ffn.w_2.bias
    expected = torch.clamp(x @ w_1 + b_1, min=0) @ w_2 + b_2
    torch.testing.assert_close(ffn(x), expected, atol=1e-12, rtol=1e-12)


def test_feed_forward_acts_on_each_position_separately():
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(d_model=8, d_ff=16)
    x = torch.randn(2, 5, 8)
    out = ffn(x)
    for pos in range(5):
        torch.testing.assert_close(ffn(x[:, pos]), out[:, pos])


def test_feed_forward_shapes():
    ffn = PositionwiseFeedForward(d_model=8, d_ff=16)
    assert ffn.w_1.weight.shape == (16, 8)
    assert ffn.w_2.weight.shape == (8, 16)
    assert ffn(torch.randn(2, 3, 8)).shape == (2, 3, 8)


# --- §3.4 embeddings and softmax -------------------------------------------------------------


def test_embeddings_are_scaled_by_sqrt_d_model():
    torch.manual_seed(0)
    d_model = 16
    embed = Embeddings(vocab_size=10, d_model=d_model)
    tokens = torch.tensor([[1, 5, 9], [0, 0, 3]])
    expected = embed.lut.weight[tokens] * math.sqrt(d_model)
    torch.testing.assert_close(embed(tokens), expected, atol=0, rtol=0)


def test_generator_is_a_bias_free_linear_projection():
    torch.manual_seed(0)
    generator = Generator(d_model=8, vocab_size=11)
    assert generator.proj.bias is None
    x = torch.randn(2, 3, 8)
    out = generator(x)
    assert out.shape == (2, 3, 11)
    torch.testing.assert_close(out, x @ generator.proj.weight.T)


@pytest.mark.parametrize("bad_id", [-1, 10, 1000], ids=["negative", "equal_to_vocab", "far_above_vocab"])
def test_token_id_outside_the_vocabulary_is_rejected(bad_id):
    embed = Embeddings(vocab_size=10, d_model=8)
    tokens = torch.tensor([[1, 2, bad_id]])
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 10\)"):
        embed(tokens)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool])
def test_non_integer_token_ids_are_rejected(dtype):
    embed = Embeddings(vocab_size=10, d_model=8)
    with pytest.raises(TypeError, match="token ids must be an integer tensor"):
        embed(torch.tensor([[1, 0, 1]], dtype=dtype))


def test_largest_valid_token_id_is_accepted():
    embed = Embeddings(vocab_size=10, d_model=8)
    assert embed(torch.tensor([[0, 9]], dtype=torch.int32)).shape == (1, 2, 8)


# --- §3.5 positional encodings ---------------------------------------------------------------


def _pe_by_hand(pos: int, column: int, d_model: int) -> float:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))."""
    two_i = column - column % 2
    angle = pos / 10000 ** (two_i / d_model)
    return math.sin(angle) if column % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize("d_model", [8, 7, 32], ids=["even", "odd", "d32"])
def test_sinusoidal_table_matches_the_formula(d_model):
    max_len = 60
    table = sinusoidal_table(max_len, d_model)
    assert table.shape == (max_len, d_model)
    assert table.dtype == torch.float32
    for pos in (0, 1, 2, 17, 59):
        for column in range(d_model):
            expected = _pe_by_hand(pos, column, d_model)
            assert table[pos, column].item() == pytest.approx(expected, abs=1e-6), (pos, column)


def test_sinusoidal_table_last_column_of_odd_d_model_is_a_sine():
    d_model = 5
    table = sinusoidal_table(10, d_model)
    angles = torch.arange(10, dtype=torch.float64) / 10000 ** (4 / d_model)
    torch.testing.assert_close(table[:, 4], torch.sin(angles).float())


def test_positional_encoding_adds_the_table():
    pe = PositionalEncoding(d_model=8, max_len=20)
    x = torch.randn(2, 6, 8)
    torch.testing.assert_close(pe(x), x + sinusoidal_table(20, 8)[:6], atol=0, rtol=0)


def test_positional_encoding_has_no_parameters_and_no_state():
    pe = PositionalEncoding(d_model=8, max_len=20)
    assert list(pe.parameters()) == []
    assert len(pe.state_dict()) == 0


def test_learned_positional_embedding_adds_its_table():
    torch.manual_seed(0)
    pe = LearnedPositionalEmbedding(d_model=8, max_len=20)
    x = torch.randn(2, 6, 8)
    torch.testing.assert_close(pe(x), x + pe.table.weight[:6], atol=0, rtol=0)
    assert sum(p.numel() for p in pe.parameters()) == 20 * 8


@pytest.mark.parametrize("module", [PositionalEncoding, LearnedPositionalEmbedding])
def test_sequence_longer_than_max_len_is_rejected(module):
    pe = module(d_model=8, max_len=10)
    assert pe(torch.zeros(1, 10, 8)).shape == (1, 10, 8)  # exactly max_len is fine
    with pytest.raises(ValueError, match=r"length 11 is longer than .*max_len=10"):
        pe(torch.zeros(1, 11, 8))


@pytest.mark.parametrize("module", [PositionalEncoding, LearnedPositionalEmbedding])
def test_positional_dropout_is_active_only_in_train_mode(module):
    torch.manual_seed(0)
    pe = module(d_model=8, max_len=10, dropout=0.5)
    x = torch.randn(2, 10, 8)
    assert (pe.train()(x) == 0).any()
    assert not (pe.eval()(x) == 0).any()


# --- §5.4 dropout with 16-bit masks ------------------------------------------------------------


def test_dropped_values_rounds_p_to_a_multiple_of_two_to_the_minus_16():
    assert [dropped_values(p) for p in (0.0, 0.1, 0.5, 1.0)] == [0, 6554, 32768, 65536]


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_dropout_keeps_each_component_with_probability_one_minus_p(p):
    """Over 4 million components the kept share is within 5 standard deviations of 1 - P."""
    torch.manual_seed(0)
    keep = dropout_keep_mask(torch.Size([2000, 2000]), p)
    rounded = round(p * 2**MASK_BITS) / 2**MASK_BITS
    assert abs(rounded - p) <= 2 ** -(MASK_BITS + 1)
    sigma = math.sqrt(rounded * (1 - rounded) / keep.numel())
    assert abs(keep.float().mean().item() - (1 - rounded)) < 5 * sigma


def test_dropout_masks_are_independent_between_neighbours():
    """The four 16-bit lanes of one 64-bit number give independent entries: the chance that two
    neighbours are both dropped is P² (a shared or shifted lane would make it P)."""
    torch.manual_seed(0)
    dropped = ~dropout_keep_mask(torch.Size([4_000_000]), 0.5)
    for lag in (1, 2, 3, 4):
        both = (dropped[:-lag] & dropped[lag:]).float().mean().item()
        assert abs(both - 0.25) < 0.002, lag


def test_dropout_scales_survivors_and_passes_the_gradient_through_the_same_mask():
    torch.manual_seed(0)
    x = torch.randn(64, 33, dtype=torch.float64, requires_grad=True)  # 2,112: not a multiple of 4
    dropout = Dropout(0.1).train()
    y = dropout(x)
    kept = y != 0
    scale = 2**MASK_BITS / (2**MASK_BITS - round(0.1 * 2**MASK_BITS))
    torch.testing.assert_close(y[kept], x[kept] * scale, rtol=0, atol=0)
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, kept.double() * scale, rtol=0, atol=0)


def test_dropout_is_unbiased():
    torch.manual_seed(0)
    x = torch.full((1000, 1000), 2.0)
    assert abs(Dropout(0.3).train()(x).mean().item() - 2.0) < 0.01  # 5 sigma: 0.0065


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_dropout_with_p_zero_or_one_is_nn_dropout(p):
    x = torch.randn(5, 7)
    torch.testing.assert_close(Dropout(p).train()(x), torch.nn.Dropout(p).train()(x))


def test_dropout_is_the_identity_in_evaluation_mode_and_keeps_the_dtype():
    x = torch.randn(3, 4, 5, dtype=torch.bfloat16)
    assert torch.equal(Dropout(0.5).eval()(x), x)
    assert Dropout(0.5).train()(x).dtype == torch.bfloat16


def test_dropout_is_reproducible_from_the_seed():
    x = torch.randn(10, 10)
    torch.manual_seed(3)
    first = Dropout(0.5).train()(x)
    torch.manual_seed(3)
    assert torch.equal(Dropout(0.5).train()(x), first)


def test_dropout_is_an_nn_dropout():
    """Code that looks for nn.Dropout modules (chapter 8 lists them) still finds them."""
    assert isinstance(Dropout(0.1), torch.nn.Dropout)
    assert Dropout(0.1).p == 0.1
