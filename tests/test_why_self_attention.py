"""§4 and Table 1: the layer types, their FLOP formulas (against PyTorch's FlopCounterMode), the
restricted attention implementations, causality of the recurrent layer and the path lengths."""

import math

import pytest
import torch

from annotated_transformer.attention import attention
from annotated_transformer.why_self_attention import (
    LAYER_KINDS,
    PATH_KINDS,
    ConvolutionalLayer,
    RecurrentLayer,
    RestrictedSelfAttentionLayer,
    SeparableConvolutionalLayer,
    band_mask,
    count_flops,
    crossover_length,
    layer_flops,
    local_attention,
    make_layer,
    measure_layer,
    measure_path_length,
    path_length_formula,
    sequential_products,
    table1_term,
)


@pytest.mark.parametrize("kind", LAYER_KINDS)
def test_shapes(kind):
    torch.manual_seed(0)
    x = torch.randn(3, 11, 16)
    assert make_layer(kind, 16, kernel=5, radius=2, n_heads=4)(x).shape == x.shape


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown layer kind"):
        make_layer("lstm", 8)
    with pytest.raises(ValueError, match="unknown layer kind"):
        layer_flops("lstm", 4, 8)
    with pytest.raises(ValueError, match="unknown layer kind"):
        path_length_formula("lstm", 4)


@pytest.mark.parametrize("kind", LAYER_KINDS)
@pytest.mark.parametrize(("batch", "n", "d", "kernel", "radius"), [(1, 7, 8, 3, 2), (2, 20, 12, 5, 3)])
def test_flops_match_flop_counter(kind, batch, n, d, kernel, radius):
    torch.manual_seed(0)
    layer = make_layer(kind, d, kernel, radius)
    counted = count_flops(layer, torch.randn(batch, n, d))
    assert counted == layer_flops(kind, n, d, kernel, radius, batch)


def test_flop_formulas_by_hand():
    n, d, k, r = 10, 6, 3, 2
    assert layer_flops("self-attention", n, d) == 2 * (4 * n * d * d + 2 * n * n * d)
    assert layer_flops("recurrent", n, d) == 2 * (2 * n * d * d)
    assert layer_flops("convolutional", n, d, kernel=k) == 2 * k * n * d * d
    assert layer_flops("separable", n, d, kernel=k) == 2 * (k * n * d + n * d * d)
    assert layer_flops("restricted", n, d, radius=r) == 2 * (4 * n * d * d + 2 * n * (2 * r + 1) * d)
    assert table1_term("self-attention", n, d) == n * n * d
    assert table1_term("recurrent", n, d) == n * d * d
    assert table1_term("convolutional", n, d, kernel=k) == k * n * d * d
    assert table1_term("separable", n, d, kernel=k) == k * n * d + n * d * d
    assert table1_term("restricted", n, d, radius=r) == r * n * d


def test_masked_restricted_attention_costs_full_attention():
    torch.manual_seed(0)
    layer = RestrictedSelfAttentionLayer(8, radius=1, blocked=False)
    assert count_flops(layer, torch.randn(1, 12, 8)) == layer_flops("self-attention", 12, 8)


def test_crossover():
    d = 512
    assert crossover_length(lambda n: table1_term("self-attention", n, d), lambda n: n * d * d) == d + 1

    def sa(n: int) -> int:
        return layer_flops("self-attention", n, d)

    assert crossover_length(sa, lambda n: layer_flops("recurrent", n, d)) == 1
    assert crossover_length(sa, lambda n: 4 * layer_flops("recurrent", n, d)) == 2 * d + 1
    assert crossover_length(lambda n: n, lambda n: 2 * n) is None


def test_band_mask():
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(band_mask(4, 1)[0], expected)
    assert band_mask(4, 1).shape == (1, 4, 4)
    assert band_mask(5, 10).all()


@pytest.mark.parametrize(("n", "radius"), [(1, 1), (6, 1), (9, 2), (5, 7), (16, 3)])
def test_local_attention_equals_masked_attention(n, radius):
    generator = torch.Generator().manual_seed(n + radius)
    q, k = (torch.randn(2, 3, n, 4, generator=generator, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 3, n, 5, generator=generator, dtype=torch.float64)
    expected, _ = attention(q, k, v, band_mask(n, radius))
    assert torch.allclose(local_attention(q, k, v, radius), expected, atol=1e-12)


def test_restricted_layer_blocked_equals_masked():
    torch.manual_seed(0)
    layer = RestrictedSelfAttentionLayer(12, radius=2, n_heads=3).double()
    x = torch.randn(2, 10, 12, dtype=torch.float64)
    blocked = layer(x)
    layer.blocked = False
    assert torch.allclose(blocked, layer(x), atol=1e-12)


def test_recurrent_layer_matches_torch_rnn():
    torch.manual_seed(0)
    layer = RecurrentLayer(6)
    x = torch.randn(3, 7, 6)
    assert torch.allclose(layer(x), layer.as_torch_rnn()(x)[0], atol=1e-6)


def test_recurrent_layer_is_causal():
    torch.manual_seed(0)
    layer = RecurrentLayer(5).double()
    x = torch.randn(1, 8, 5, dtype=torch.float64, requires_grad=True)
    y = layer(x)
    for t in range(8):
        (grad,) = torch.autograd.grad(y[:, t].sum(), x, retain_graph=True)
        assert (grad[:, t + 1 :] == 0).all()  # nothing after t
        assert (grad[:, : t + 1].abs().sum(dim=-1) > 0).all()  # everything up to t


def test_causal_convolution_is_causal_and_centred_is_not():
    torch.manual_seed(0)
    x = torch.randn(1, 9, 4, dtype=torch.float64)
    for layer_class in (ConvolutionalLayer, SeparableConvolutionalLayer):
        causal = layer_class(4, 3, dilation=2, causal=True).double()
        changed = x.clone()
        changed[:, 5:] += 1.0
        assert torch.equal(causal(x)[:, :5], causal(changed)[:, :5])
        centred = layer_class(4, 3).double()
        assert not torch.equal(centred(x)[:, 4], centred(changed)[:, 4])


def test_separable_convolution_parameters():
    d, k = 16, 5
    separable = SeparableConvolutionalLayer(d, k)
    assert sum(p.numel() for p in separable.parameters()) == (d * k + d) + (d * d + d)
    assert sum(p.numel() for p in ConvolutionalLayer(d, k).parameters()) == k * d * d + d


def test_sequential_products():
    torch.manual_seed(0)
    for n in (3, 17):
        x = torch.randn(1, n, 8)
        assert sequential_products(make_layer("recurrent", 8)(x)) == n
        assert sequential_products(make_layer("self-attention", 8)(x)) == 4
        assert sequential_products(make_layer("restricted", 8, radius=2)(x)) == 4
        assert sequential_products(make_layer("convolutional", 8)(x)) == 1
        assert sequential_products(make_layer("separable", 8)(x)) == 2


def test_path_length_formulas():
    dilated = [path_length_formula("dilated", n, kernel=3) for n in (2, 3, 4, 9, 10, 27, 28)]
    assert dilated == [1, 1, 2, 2, 3, 3, 4]
    assert path_length_formula("convolutional", 9, kernel=3) == 4
    assert path_length_formula("convolutional", 10, kernel=3) == 5
    assert path_length_formula("restricted", 9, radius=4) == 2
    assert path_length_formula("restricted", 10, radius=4) == 3
    assert path_length_formula("recurrent", 10) == 9
    assert path_length_formula("self-attention", 100) == 1


@pytest.mark.parametrize("kind", PATH_KINDS)
@pytest.mark.parametrize(
    ("n", "kernel", "radius"), [(2, 3, 1), (9, 3, 2), (10, 3, 4), (13, 4, 3), (17, 2, 5)]
)
def test_measured_path_lengths_equal_formulas(kind, n, kernel, radius):
    torch.manual_seed(0)
    measured = measure_path_length(kind, n, kernel, radius)
    assert measured == path_length_formula(kind, n, kernel, radius)


def test_measured_path_lengths_grow_as_in_table1():
    torch.manual_seed(0)
    n = 25
    assert measure_path_length("self-attention", n) == 1
    assert measure_path_length("recurrent", n) == n - 1
    assert measure_path_length("convolutional", n, kernel=5) == math.ceil((n - 1) / 4)
    assert measure_path_length("dilated", n, kernel=5) == 2  # 5² = 25 ≥ n
    assert measure_path_length("restricted", n, radius=6) == 4


def test_measure_layer_returns_plain_numbers():
    row = measure_layer("convolutional", 8, 4, batch=2, min_run_time=0.001)
    assert row["flops"] == row["formula"] == layer_flops("convolutional", 8, 4, batch=2)
    assert row["table1"] == 2 * table1_term("convolutional", 8, 4)
    assert isinstance(row["seconds"], float) and row["seconds"] > 0


def test_the_companion_tabulates_and_fits_what_it_is_given(capsys):
    from annotated_transformer.companions.layer_comparison import print_slopes, slope, timing_table

    rows = [{"kind": kind, "n": n, "d": 8, "flops": layer_flops(kind, n, 8),
             "table1": table1_term(kind, n, 8), "seconds": 1e-6 * n**2}
            for kind in LAYER_KINDS for n in (4, 8, 16, 32)]
    assert slope(rows, "self-attention", "n", "seconds") == pytest.approx(2.0)  # time ∝ n²
    assert slope(rows, "recurrent", "n", "table1") == pytest.approx(1.0)  # n·d²
    table = timing_table(rows, "n").splitlines()
    assert len(table) == 5 and table[0].split() == ["n", *LAYER_KINDS]
    assert table[1].split()[:3] == ["4", "0.016", "ms"]
    print_slopes(rows, [{**row, "d": row["n"]} for row in rows])
    assert capsys.readouterr().out.splitlines()[1].split()[:3] == ["self-attention", "2.00", "2.00"]
