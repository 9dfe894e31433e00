"""Encoder and decoder layers and stacks (§3.1) against PyTorch's reference layers, the full
model's masking guarantees, configuration checks, determinism and parameter counts (Table 3)."""

import copy
import dataclasses

import pytest
import torch
from helpers import (
    TOL,
    copy_decoder_layer,
    copy_encoder_layer,
    copy_layer_norm,
    set_fused,
    small_config,
    small_model,
    torch_causal,
    torch_decoder_layer,
    torch_encoder_layer,
    torch_key_padding,
)
from torch import nn

from annotated_transformer.attention import padding_mask, target_mask
from annotated_transformer.layers import Embeddings, PositionalEncoding
from annotated_transformer.model import (
    TABLE3_ROWS,
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    TransformerConfig,
    config_parameter_count,
    config_sha256,
    count_parameters,
    make_model,
)

PAD = 0
BATCH, SRC_LEN, TGT_LEN = 2, 7, 6
NORMS = pytest.mark.parametrize("norm_position", ["post", "pre"])
MODES = pytest.mark.parametrize("mode", ["eval", "train"])
FUSED = pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])


def tokens(length: int, n_pad: int, seed: int, vocab: int = 23) -> torch.Tensor:
    """(BATCH, length) ids in [1, vocab); the first sequence ends in `n_pad` padding tokens."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (BATCH, length), generator=generator)
    if n_pad:
        ids[0, -n_pad:] = PAD
    return ids


def states(length: int, d_model: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, length, d_model, generator=generator)


def set_mode(mode: str, *modules: nn.Module) -> None:
    for module in modules:
        module.train(mode == "train")


# --- §3.1 layers against torch.nn.TransformerEncoderLayer / TransformerDecoderLayer --------------


def encoder_layer_pair(norm_position: str) -> tuple[EncoderLayer, nn.TransformerEncoderLayer]:
    torch.manual_seed(0)
    config = small_config(norm_position=norm_position)
    ours = EncoderLayer(config)
    theirs = torch_encoder_layer(config)
    copy_encoder_layer(ours, theirs)
    return ours, theirs


def decoder_layer_pair(norm_position: str) -> tuple[DecoderLayer, nn.TransformerDecoderLayer]:
    torch.manual_seed(0)
    config = small_config(norm_position=norm_position)
    ours = DecoderLayer(config)
    theirs = torch_decoder_layer(config)
    copy_decoder_layer(ours, theirs)
    return ours, theirs


@NORMS
@MODES
def test_encoder_layer_without_mask_matches_torch(norm_position, mode):
    ours, theirs = encoder_layer_pair(norm_position)
    set_mode(mode, ours, theirs)
    x = states(SRC_LEN, 32, seed=1)
    # no_grad lets nn.TransformerEncoderLayer take its fused "fast path" in eval mode.
    with torch.no_grad():
        torch.testing.assert_close(ours(x, None), theirs(x), **TOL)


@NORMS
@MODES
def test_encoder_layer_with_padding_mask_matches_torch(norm_position, mode):
    ours, theirs = encoder_layer_pair(norm_position)
    set_mode(mode, ours, theirs)
    x = states(SRC_LEN, 32, seed=1)
    mask = padding_mask(tokens(SRC_LEN, n_pad=3, seed=2), PAD)
    with torch.no_grad():
        expected = theirs(x, src_key_padding_mask=torch_key_padding(mask))
        torch.testing.assert_close(ours(x, mask), expected, **TOL)


@NORMS
@MODES
def test_decoder_layer_with_all_masks_matches_torch(norm_position, mode):
    """Target causal + target padding in self-attention, source padding in encoder–decoder attention."""
    ours, theirs = decoder_layer_pair(norm_position)
    set_mode(mode, ours, theirs)
    x = states(TGT_LEN, 32, seed=1)
    memory = states(SRC_LEN, 32, seed=2)
    tgt = tokens(TGT_LEN, n_pad=2, seed=3)
    src_mask = padding_mask(tokens(SRC_LEN, n_pad=3, seed=4), PAD)
    with torch.no_grad():
        expected = theirs(
            x,
            memory,
            tgt_mask=torch_causal(TGT_LEN),
            tgt_key_padding_mask=torch_key_padding(padding_mask(tgt, PAD)),
            memory_key_padding_mask=torch_key_padding(src_mask),
        )
        torch.testing.assert_close(ours(x, memory, src_mask, target_mask(tgt, PAD)), expected, **TOL)


@NORMS
@MODES
def test_decoder_layer_without_masks_matches_torch(norm_position, mode):
    ours, theirs = decoder_layer_pair(norm_position)
    set_mode(mode, ours, theirs)
    x = states(TGT_LEN, 32, seed=1)
    memory = states(SRC_LEN, 32, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(ours(x, memory, None, None), theirs(x, memory), **TOL)


@NORMS
def test_layers_match_torch_with_gradients_enabled(norm_position):
    """With autograd on, PyTorch skips its fast path; outputs and input gradients must still agree."""
    encoder, torch_encoder = encoder_layer_pair(norm_position)
    x = states(SRC_LEN, 32, seed=1).requires_grad_()
    x_theirs = x.detach().clone().requires_grad_()
    mask = padding_mask(tokens(SRC_LEN, n_pad=3, seed=2), PAD)
    out = encoder(x, mask)
    expected = torch_encoder(x_theirs, src_key_padding_mask=torch_key_padding(mask))
    torch.testing.assert_close(out, expected, **TOL)
    out.square().sum().backward()
    expected.square().sum().backward()
    torch.testing.assert_close(x.grad, x_theirs.grad, atol=1e-4, rtol=1e-4)


# --- stacks against torch.nn.TransformerEncoder / TransformerDecoder ----------------------------


def torch_final_norm(config: TransformerConfig, ours: nn.Module) -> nn.LayerNorm | None:
    if config.norm_position == "post":
        return None
    norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
    copy_layer_norm(ours, norm)
    return norm


@NORMS
@MODES
def test_encoder_stack_matches_torch(norm_position, mode):
    torch.manual_seed(0)
    config = small_config(norm_position=norm_position, n_layers=3)
    ours = Encoder(config)
    theirs = nn.TransformerEncoder(
        torch_encoder_layer(config),
        config.n_layers,
        norm=torch_final_norm(config, ours.norm),
        enable_nested_tensor=False,
    )
    for our_layer, their_layer in zip(ours.layers, theirs.layers, strict=True):
        copy_encoder_layer(our_layer, their_layer)
    set_mode(mode, ours, theirs)
    x = states(SRC_LEN, config.d_model, seed=1)
    mask = padding_mask(tokens(SRC_LEN, n_pad=3, seed=2), PAD)
    with torch.no_grad():
        expected = theirs(x, src_key_padding_mask=torch_key_padding(mask))
        torch.testing.assert_close(ours(x, mask), expected, **TOL)


@NORMS
@MODES
def test_decoder_stack_matches_torch(norm_position, mode):
    torch.manual_seed(0)
    config = small_config(norm_position=norm_position, n_layers=3)
    ours = Decoder(config)
    theirs = nn.TransformerDecoder(
        torch_decoder_layer(config), config.n_layers, norm=torch_final_norm(config, ours.norm)
    )
    for our_layer, their_layer in zip(ours.layers, theirs.layers, strict=True):
        copy_decoder_layer(our_layer, their_layer)
    set_mode(mode, ours, theirs)
    x = states(TGT_LEN, config.d_model, seed=1)
    memory = states(SRC_LEN, config.d_model, seed=2)
    tgt = tokens(TGT_LEN, n_pad=2, seed=3)
    src_mask = padding_mask(tokens(SRC_LEN, n_pad=3, seed=4), PAD)
    with torch.no_grad():
        expected = theirs(
            x,
            memory,
            tgt_mask=torch_causal(TGT_LEN),
            tgt_key_padding_mask=torch_key_padding(padding_mask(tgt, PAD)),
            memory_key_padding_mask=torch_key_padding(src_mask),
        )
        torch.testing.assert_close(ours(x, memory, src_mask, target_mask(tgt, PAD)), expected, **TOL)


def test_post_ln_stacks_have_no_final_norm():
    model = make_model(small_config(norm_position="post"))
    assert isinstance(model.encoder.norm, nn.Identity)
    assert isinstance(model.decoder.norm, nn.Identity)


def test_pre_ln_stacks_end_in_a_layer_norm():
    config = small_config(norm_position="pre", layer_norm_eps=1e-5)
    model = make_model(config)
    for norm in (model.encoder.norm, model.decoder.norm):
        assert isinstance(norm, nn.LayerNorm)
        assert norm.normalized_shape == (config.d_model,)
        assert norm.eps == config.layer_norm_eps


# --- the full model: causal masking and padding ----------------------------------------------


def run(model, src, tgt):
    return model(src, tgt, padding_mask(src, PAD), target_mask(tgt, PAD))


def test_forward_output_shape():
    model = small_model(share_embeddings=False, src_vocab_size=19, tgt_vocab_size=29)
    src, tgt = tokens(SRC_LEN, 2, seed=1, vocab=19), tokens(TGT_LEN, 1, seed=2, vocab=29)
    assert run(model, src, tgt).shape == (BATCH, TGT_LEN, 29)


@NORMS
@FUSED
def test_logits_do_not_depend_on_later_target_tokens(norm_position, fused):
    model = small_model(norm_position=norm_position)
    set_fused(model, fused)
    src, tgt = tokens(SRC_LEN, 2, seed=1), tokens(TGT_LEN, 0, seed=2)
    with torch.no_grad():
        logits = run(model, src, tgt)
        for i in range(TGT_LEN - 1):
            changed = tgt.clone()
            changed[:, i + 1 :] = (changed[:, i + 1 :] + 5) % 22 + 1  # other real tokens
            new_logits = run(model, src, changed)
            torch.testing.assert_close(new_logits[:, : i + 1], logits[:, : i + 1], atol=1e-6, rtol=0)
            # Control: the changed positions themselves do see the change.
            assert not torch.allclose(new_logits[:, i + 1 :], logits[:, i + 1 :])


@NORMS
@FUSED
def test_decoder_output_has_zero_gradient_wrt_later_positions(norm_position, fused):
    model = small_model(norm_position=norm_position)
    set_fused(model, fused)
    src, tgt = tokens(SRC_LEN, 2, seed=1), tokens(TGT_LEN, 0, seed=2)
    src_mask = padding_mask(src, PAD)
    memory = model.encode(src, src_mask).detach()
    embedded = model.tgt_pos(model.tgt_embed(tgt)).detach().requires_grad_()
    out = model.decoder(embedded, memory, src_mask, target_mask(tgt, PAD))
    # A random projection of output i (a plain sum would be constant after a LayerNorm).
    projection = torch.randn(model.config.d_model, generator=torch.Generator().manual_seed(3))
    for i in range(TGT_LEN):
        (grad,) = torch.autograd.grad(out[:, i] @ projection, embedded, torch.ones(BATCH), retain_graph=True)
        assert torch.all(grad[:, i + 1 :] == 0), f"output {i} depends on later positions"
        assert torch.all(grad[:, : i + 1].abs().sum(-1) > 0), f"output {i} ignores earlier positions"


@NORMS
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-5), (torch.float64, 1e-10)], ids=["f32", "f64"])
def test_source_padding_does_not_change_real_positions(norm_position, dtype, atol):
    model = small_model(norm_position=norm_position).to(dtype)
    src, tgt = tokens(SRC_LEN, 0, seed=1), tokens(TGT_LEN, 0, seed=2)
    padded = torch.cat([src, torch.full((BATCH, 4), PAD)], dim=1)
    with torch.no_grad():
        memory = model.encode(src, padding_mask(src, PAD))
        padded_memory = model.encode(padded, padding_mask(padded, PAD))
        torch.testing.assert_close(padded_memory[:, :SRC_LEN], memory, atol=atol, rtol=atol)
        torch.testing.assert_close(run(model, padded, tgt), run(model, src, tgt), atol=atol, rtol=atol)


@NORMS
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-5), (torch.float64, 1e-10)], ids=["f32", "f64"])
def test_target_padding_does_not_change_real_positions(norm_position, dtype, atol):
    model = small_model(norm_position=norm_position).to(dtype)
    src, tgt = tokens(SRC_LEN, 2, seed=1), tokens(TGT_LEN, 0, seed=2)
    padded = torch.cat([tgt, torch.full((BATCH, 3), PAD)], dim=1)
    with torch.no_grad():
        expected = run(model, src, tgt)
        torch.testing.assert_close(run(model, src, padded)[:, :TGT_LEN], expected, atol=atol, rtol=atol)


def test_source_padding_without_a_mask_does_change_outputs():
    """Control for the padding tests: they would fail if the mask were ignored."""
    model = small_model()
    src = tokens(SRC_LEN, 0, seed=1)
    padded = torch.cat([src, torch.full((BATCH, 4), PAD)], dim=1)
    with torch.no_grad():
        memory = model.encode(src, None)
        padded_memory = model.encode(padded, None)
    assert (padded_memory[:, :SRC_LEN] - memory).abs().max() > 1e-3


@NORMS
@FUSED
@MODES
def test_all_padding_source_gives_no_nan(norm_position, fused, mode):
    """A batch element whose source is all padding: every source key is masked, yet no NaN appears."""
    torch.manual_seed(0)
    model = make_model(small_config(norm_position=norm_position, dropout=0.1, attention_dropout=0.1))
    set_fused(model, fused)
    model.train(mode == "train")
    src, tgt = tokens(SRC_LEN, 0, seed=1), tokens(TGT_LEN, 0, seed=2)
    src[1] = PAD
    logits = run(model, src, tgt)
    assert torch.isfinite(logits).all()
    logits.logsumexp(-1).sum().backward()
    for name, parameter in model.named_parameters():
        assert torch.isfinite(parameter.grad).all(), name


# --- permutation equivariance and positions (§3.5) --------------------------------------------


def test_encoder_layer_without_positions_is_permutation_equivariant():
    torch.manual_seed(0)
    layer = EncoderLayer(small_config()).eval()
    x = states(SRC_LEN, 32, seed=1)
    mask = padding_mask(tokens(SRC_LEN, 2, seed=2), PAD)
    perm = torch.tensor([4, 0, 6, 2, 1, 5, 3])
    with torch.no_grad():
        out = layer(x, mask)
        out_permuted = layer(x[:, perm], mask[..., perm])
    torch.testing.assert_close(out_permuted, out[:, perm], **TOL)


def test_positional_encoding_breaks_permutation_equivariance():
    """Embeddings + sinusoids + an encoder layer: permuting the tokens no longer permutes the output."""
    torch.manual_seed(0)
    config = small_config()
    embed, positions = Embeddings(config.src_vocab_size, config.d_model), PositionalEncoding(config.d_model)
    layer = EncoderLayer(config).eval()
    src = torch.tensor([[3, 8, 1, 15, 7, 22, 4]])
    perm = torch.tensor([4, 0, 6, 2, 1, 5, 3])
    with torch.no_grad():
        out = layer(positions(embed(src)), None)
        out_permuted = layer(positions(embed(src[:, perm])), None)
        # Without the positions the same check passes, so the difference comes from them.
        torch.testing.assert_close(layer(embed(src[:, perm]), None), layer(embed(src), None)[:, perm], **TOL)
    assert (out_permuted - out[:, perm]).abs().max() > 0.1


# --- §3.4 weight sharing ----------------------------------------------------------------------


def test_generator_weight_is_the_target_embedding_weight():
    for share in (True, False):
        model = make_model(small_config(share_embeddings=share))
        assert model.generator.proj.weight is model.tgt_embed.lut.weight
        assert model.generator.proj.weight.data_ptr() == model.tgt_embed.lut.weight.data_ptr()


def test_shared_embeddings_are_one_module():
    model = make_model(small_config(share_embeddings=True))
    assert model.src_embed is model.tgt_embed


def test_unshared_embeddings_are_separate_modules():
    model = make_model(small_config(share_embeddings=False, src_vocab_size=19, tgt_vocab_size=29))
    assert model.src_embed is not model.tgt_embed
    assert model.src_embed.lut.weight.shape == (19, 32)
    assert model.tgt_embed.lut.weight.shape == (29, 32)


def test_tied_weight_gets_gradients_from_every_use():
    """The tied matrix's gradient is the sum of its gradients as source embedding, target embedding
    and pre-softmax projection: compare with a copy whose projection is untied."""
    model = small_model(share_embeddings=True)
    untied = copy.deepcopy(model)
    untied.generator.proj.weight = nn.Parameter(untied.generator.proj.weight.detach().clone())
    src, tgt = tokens(SRC_LEN, 2, seed=1), tokens(TGT_LEN, 1, seed=2)
    for m in (model, untied):
        run(m, src, tgt).log_softmax(-1)[..., 5].sum().backward()
    embedding_grad = untied.src_embed.lut.weight.grad
    projection_grad = untied.generator.proj.weight.grad
    assert embedding_grad.abs().sum() > 0 and projection_grad.abs().sum() > 0
    torch.testing.assert_close(model.src_embed.lut.weight.grad, embedding_grad + projection_grad, **TOL)


# --- configuration checks ---------------------------------------------------------------------


def test_config_defaults_are_the_base_model():
    config = TransformerConfig()
    assert (config.n_layers, config.d_model, config.d_ff, config.n_heads) == (6, 512, 2048, 8)
    assert config.dropout == 0.1 and config.norm_position == "post" and config.share_embeddings
    big = TransformerConfig.big()
    assert (big.d_model, big.d_ff, big.n_heads, big.dropout) == (1024, 4096, 16, 0.3)


def test_config_rejects_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match=r"d_model=30 is not divisible by n_heads=4"):
        small_config(d_model=30, n_heads=4)


def test_config_accepts_explicit_head_sizes_for_any_d_model():
    config = small_config(d_model=30, n_heads=4, d_k=8, d_v=8)
    model = make_model(config)
    assert count_parameters(model) == config_parameter_count(config)


def test_config_rejects_share_embeddings_with_different_vocabularies():
    with pytest.raises(ValueError, match=r"share_embeddings.*src_vocab_size=19.*tgt_vocab_size=29"):
        small_config(src_vocab_size=19, tgt_vocab_size=29, share_embeddings=True)


@pytest.mark.parametrize("field", ["dropout", "attention_dropout", "ffn_dropout"])
@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5])
def test_config_rejects_bad_dropout(field, value):
    with pytest.raises(ValueError, match=rf"{field} must lie in \[0, 1\)"):
        small_config(**{field: value})


@pytest.mark.parametrize("value", ["Post", "middle", ""])
def test_config_rejects_bad_norm_position(value):
    with pytest.raises(ValueError, match="norm_position must be 'post' or 'pre'"):
        small_config(norm_position=value)


@pytest.mark.parametrize("value", ["sinusoid", "rotary", ""])
def test_config_rejects_bad_positional(value):
    with pytest.raises(ValueError, match="positional must be 'sinusoidal' or 'learned'"):
        small_config(positional=value)


@pytest.mark.parametrize("field", ["n_layers", "d_model", "d_ff", "n_heads", "max_len", "src_vocab_size"])
def test_config_rejects_non_positive_sizes(field):
    with pytest.raises(ValueError, match=rf"{field} must be a positive integer"):
        small_config(**{field: 0})


def test_make_model_overrides_are_validated():
    with pytest.raises(ValueError, match="norm_position"):
        make_model(small_config(), norm_position="sideways")


def test_model_rejects_sequence_longer_than_max_len():
    model = small_model(max_len=8)
    src, tgt = torch.ones(1, 9, dtype=torch.long), torch.ones(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"longer than the positional encoding table \(max_len=8\)"):
        model(src, tgt, None, None)


@pytest.mark.parametrize("bad_id", [-1, 23])
def test_model_rejects_token_ids_outside_the_vocabulary(bad_id):
    model = small_model()
    src = torch.tensor([[1, 2, bad_id]])
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 23\)"):
        model(src, src.clamp(0, 22), None, None)


def test_model_rejects_float_token_ids():
    model = small_model()
    with pytest.raises(TypeError, match="integer tensor"):
        model(torch.ones(1, 3), torch.ones(1, 3, dtype=torch.long), None, None)


# --- determinism ------------------------------------------------------------------------------

DROPOUTS = {"dropout": 0.1, "attention_dropout": 0.1, "ffn_dropout": 0.1}


def test_same_seed_gives_identical_weights():
    config = small_config(**DROPOUTS)
    torch.manual_seed(7)
    first = make_model(config).state_dict()
    torch.manual_seed(7)
    second = make_model(config).state_dict()
    assert first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name


def test_different_seed_gives_different_weights():
    config = small_config()
    torch.manual_seed(7)
    first = make_model(config).state_dict()
    torch.manual_seed(8)
    second = make_model(config).state_dict()
    assert not torch.equal(first["src_embed.lut.weight"], second["src_embed.lut.weight"])
    assert not torch.equal(
        first["encoder.layers.0.self_attn.w_q.weight"], second["encoder.layers.0.self_attn.w_q.weight"]
    )


@FUSED
def test_train_mode_forward_is_reproducible_given_a_seed(fused):
    torch.manual_seed(0)
    model = make_model(small_config(**DROPOUTS)).train()
    set_fused(model, fused)
    src, tgt = tokens(SRC_LEN, 2, seed=1), tokens(TGT_LEN, 1, seed=2)
    outputs = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        outputs.append(run(model, src, tgt))
    assert torch.equal(outputs[0], outputs[1])
    assert not torch.allclose(outputs[0], outputs[2])  # dropout really is on


# --- parameter counts (§3.1–3.5, Table 3) -----------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"n_layers": 1},
        {"n_layers": 3},
        {"d_k": 4, "d_v": 12},
        {"n_heads": 2, "d_k": 16, "d_v": 8},
        {"share_embeddings": False, "src_vocab_size": 19, "tgt_vocab_size": 29},
        {"positional": "learned"},
        {"norm_position": "pre"},
        {"norm_position": "pre", "positional": "learned", "share_embeddings": False, "n_layers": 3},
        {"n_layers": 3, "n_decoder_layers": 1},
    ],
    ids=["small", "N=1", "N=3", "d_k!=d_v", "h=2", "unshared", "learned", "pre_ln", "mixed", "3-1"],
)
def test_count_parameters_matches_the_formula(overrides):
    config = small_config(**overrides)
    assert count_parameters(make_model(config)) == config_parameter_count(config)


def test_a_decoder_of_its_own_depth_decodes_with_a_cache_as_without():
    """n_decoder_layers (not in the paper): 3 encoder layers, 1 decoder layer, one cache entry per
    decoder layer, and the cached step gives the logits of the full pass."""
    torch.manual_seed(0)
    model = make_model(small_config(n_layers=3, n_decoder_layers=1)).eval()
    assert (len(model.encoder.layers), len(model.decoder.layers)) == (3, 1)
    src, tgt = torch.randint(4, 23, (2, 7)), torch.randint(4, 23, (2, 5))
    memory = model.encode(src, None)
    cache = model.init_cache()
    assert len(cache.self_attn) == 1
    for t in range(1, tgt.size(1) + 1):
        cached = model.decode_step(memory, None, tgt[:, :t], cache)
    torch.testing.assert_close(cached, model.decode_step(memory, None, tgt))


def test_a_later_field_at_its_default_leaves_the_fingerprint_as_it_was():
    """Checkpoints saved before n_decoder_layers existed keep their config_sha256."""
    config = small_config()
    before = {k: v for k, v in dataclasses.asdict(config).items() if k != "n_decoder_layers"}
    assert config_sha256(config) == config_sha256(before)
    assert config_sha256(dataclasses.replace(config, n_decoder_layers=1)) != config_sha256(config)
    with pytest.raises(ValueError, match="n_decoder_layers"):
        small_config(n_decoder_layers=0)


def test_count_parameters_counts_tied_weights_once():
    model = make_model(small_config())
    every_use = sum(p.numel() for p in model.state_dict().values())
    # state_dict lists the tied matrix under src_embed, tgt_embed and generator: twice too many.
    assert every_use - count_parameters(model) == 2 * 23 * 32


def _millions(overrides: dict) -> float:
    return config_parameter_count(TransformerConfig(**overrides)) / 1e6


@pytest.mark.parametrize(
    "row",
    [name for name in TABLE3_ROWS if name.startswith(("(B)", "(C) N=", "(C) d_ff"))],
)
def test_table3_differences_from_base_match_the_paper(row):
    """Rows that change only non-embedding sizes: our change from base is the paper's, to its
    rounding (each count is rounded to the nearest million, so differences agree within 1M)."""
    overrides, paper = TABLE3_ROWS[row]
    base_overrides, paper_base = TABLE3_ROWS["base"]
    ours = _millions(overrides) - _millions(base_overrides)
    assert abs(ours - (paper - paper_base)) <= 1.0, (row, ours, paper - paper_base)


@pytest.mark.parametrize("row", [name for name in TABLE3_ROWS if name.startswith("(A)")])
def test_table3_rows_a_have_exactly_the_base_count(row):
    overrides, _ = TABLE3_ROWS[row]
    assert config_parameter_count(TransformerConfig(**overrides)) == config_parameter_count(
        TransformerConfig()
    )


# --- the Harvard notebook's make_model(src_vocab, tgt_vocab, N=...) ----------------------------------


def test_harvard_form_with_different_vocabulary_sizes_builds_separate_embeddings():
    model = make_model(11, 13, N=2, d_model=32, d_ff=64, h=4, dropout=0.0)
    config = model.config
    assert (config.src_vocab_size, config.tgt_vocab_size, config.n_layers, config.n_heads) == (11, 13, 2, 4)
    assert (config.d_model, config.d_ff, config.dropout, config.share_embeddings) == (32, 64, 0.0, False)
    assert model.src_embed is not model.tgt_embed
    assert model.generator.proj.weight is model.tgt_embed.lut.weight  # §3.4's tie on the target side
    src, tgt = torch.randint(1, 11, (2, 5)), torch.randint(1, 13, (2, 4))
    assert model(src, tgt, None, None).shape == (2, 4, 13)


def test_harvard_form_by_position_and_with_one_vocabulary():
    model = make_model(11, 11, 1, 32, 64, 4, 0.0)  # N, d_model, d_ff, h, dropout in the Harvard order
    config = model.config
    sizes = (config.n_layers, config.d_model, config.d_ff, config.n_heads, config.dropout)
    assert sizes == (1, 32, 64, 4, 0.0)
    assert config.share_embeddings and model.src_embed is model.tgt_embed
    assert make_model(src_vocab_size=11, tgt_vocab_size=11, N=1, h=4, d_model=32).config.n_layers == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: make_model(1000), r"needs the target vocabulary size too.*make_model\(src_vocab_size="),
        (lambda: make_model(11, 11, heads=2), r"unknown argument 'heads'.*the keyword form is make_model\("),
        (lambda: make_model(N=2, n_layers=3), "got both 'N' and 'n_layers'"),
        (lambda: make_model(11, 11, 2, N=3), "got N twice"),
        (lambda: make_model("base"), r"a TransformerConfig or two vocabulary sizes first, got 'base'"),
        (lambda: make_model(11, 11, 1, 32, 64, 4, 0.0, 7), "at most 7 positional arguments"),
    ],
)
def test_make_model_calls_it_cannot_read_show_the_keyword_form(call, message):
    with pytest.raises(TypeError, match=message):
        call()


def test_a_config_error_names_its_field_apart_from_the_text():
    """A command line names its own option in a config's message (chapter 16), so the error must
    carry the field, not only a sentence that begins with it."""
    import pickle

    from annotated_transformer.helpers.errors import FieldError, Setting

    with pytest.raises(FieldError) as info:
        TransformerConfig(norm_position="middle")
    error = info.value
    assert str(error) == "norm_position must be 'post' or 'pre', got 'middle'"
    assert error.field == "norm_position" and isinstance(error, ValueError)
    as_option = error.spelled(lambda setting: "--" + setting.name.replace("_", "-"))
    assert as_option.startswith("--norm-position must")
    with pytest.raises(FieldError) as info:
        TransformerConfig(n_decoder_layers=0)
    assert info.value.settings == [Setting("n_decoder_layers"), Setting("n_decoder_layers", None)]
    assert str(info.value).endswith("; n_decoder_layers=None means N, as many as the encoder")
    assert str(pickle.loads(pickle.dumps(info.value))) == str(info.value)  # e.g. from a worker process


@pytest.mark.parametrize("share", [True, False])
def test_tied_embeddings_keep_the_embedding_init_at_a_real_vocabulary_size(share):
    """§3.4's shared matrix is initialized as an embedding, N(0, d_model^-1/2), then tied to the
    pre-softmax projection. Tied first, Xavier's init of the projection would overwrite it with
    std (2 / (d_model + V))^1/2: 0.0073 at the paper's 37,000 pieces and d_model 512, six times less
    than 512^-1/2 = 0.0442. The tests' tiny vocabularies hide that (0.18 against 0.19 at V = 23), so
    this one builds a real one. Its 19 million entries put a sample's std within 0.1% of the true
    one for any seed: a 5% tolerance is about 300 standard errors."""
    config = small_config(src_vocab_size=37_000, tgt_vocab_size=37_000 if share else 36_000, d_model=512,
                          n_heads=8, n_layers=1, d_ff=64, share_embeddings=share)
    model = make_model(config)
    assert model.generator.proj.weight is model.tgt_embed.lut.weight
    for embedding in (model.src_embed, model.tgt_embed):
        assert embedding.lut.weight.std().item() == pytest.approx(512**-0.5, rel=0.05)
    assert model.generator.proj.weight.std().item() == pytest.approx(512**-0.5, rel=0.05)


# --- incremental decoding, the decoder cache, configuration errors and Table 3 (mutation survivors) ---


def _float64_model(**overrides):
    """A tiny float64 model (d_model 16, 2 layers, no dropout) and a padded two-sentence source."""
    torch.manual_seed(3)
    config = TransformerConfig(src_vocab_size=19, tgt_vocab_size=19, n_layers=2, d_model=16, d_ff=32,
                               n_heads=2, dropout=0.0, max_len=30, **overrides)
    model = make_model(config).double().eval()
    src = torch.tensor([[5, 6, 7, 8, 9, 3], [4, 7, 2, PAD, PAD, PAD]])
    return model, src, padding_mask(src, PAD)


@pytest.mark.parametrize("padded", [True, False], ids=["padded-source", "no-mask"])
def test_decode_step_with_cache_equals_the_full_decoder_at_every_step(padded):
    """Cached incremental decoding, fed in chunks (3, 1, 1, 2, 1 new positions), gives the full
    causal decoder's logits at the last position, and so does the uncached path, in float64."""
    from annotated_transformer.attention import subsequent_mask

    model, src, src_mask = _float64_model()
    if not padded:
        src, src_mask = src[:1], None
    tgt = torch.tensor([[1, 4, 9, 2, 11, 5, 7, 3], [1, 8, 3, 3, 6, 10, 2, 4]])[: src.size(0)]
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.generator(model.decode(memory, src_mask, tgt, subsequent_mask(tgt.size(1))))
        cache = model.init_cache()
        for end in (3, 4, 5, 7, 8):
            step = model.decode_step(memory, src_mask, tgt[:, :end], cache)
            torch.testing.assert_close(step, full[:, end - 1], atol=1e-10, rtol=1e-10)
            uncached = model.decode_step(memory, src_mask, tgt[:, :end])
            torch.testing.assert_close(uncached, full[:, end - 1], atol=1e-10, rtol=1e-10)
            assert cache.length == end
            # The memory's keys and values are projected once and never grow.
            assert all(len(layer) == src.size(1) for layer in cache.src_attn)


def test_decode_step_chunk_after_the_first_sees_only_earlier_positions():
    """Two new positions after a cached prefix: the first of them must not see the second (the
    causal mask of a chunk is offset by the cached length)."""
    model, src, src_mask = _float64_model()
    tgt = torch.tensor([[1, 4, 9, 2, 11], [1, 8, 3, 3, 6]])
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        cache = model.init_cache()
        model.decode_step(memory, src_mask, tgt[:, :2], cache)
        chunked = model.decode_step(memory, src_mask, tgt[:, :4], cache)
        one_by_one = model.init_cache()
        for end in (1, 2, 3, 4):
            single = model.decode_step(memory, src_mask, tgt[:, :end], one_by_one)
        torch.testing.assert_close(chunked, single, atol=1e-10, rtol=1e-10)
        # And the chunk's keys are right: the next single step agrees with a fresh full run.
        nxt = model.decode_step(memory, src_mask, tgt, cache)
        torch.testing.assert_close(nxt, model.decode_step(memory, src_mask, tgt), atol=1e-10, rtol=1e-10)


def test_decoder_cache_select_and_reorder_move_every_layers_rows():
    """`select` keeps the chosen batch rows (repeats allowed) of every layer's self- and
    source-attention cache; `reorder_` reorders the target rows in place; decoding on from either
    equals decoding the reordered batch from scratch."""
    from annotated_transformer.model import DecoderCache

    model, src, src_mask = _float64_model()
    tgt = torch.tensor([[1, 4, 9, 2], [1, 8, 3, 3]])
    order = torch.tensor([1, 1, 0])
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        cache = model.init_cache()
        model.decode_step(memory, src_mask, tgt[:, :3], cache)
        chosen = cache.select(order)
        assert isinstance(chosen, DecoderCache) and chosen.length == 3
        assert len(chosen.self_attn) == len(chosen.src_attn) == 2
        new_tgt, new_memory, new_mask = tgt[order], memory[order], src_mask[order]
        step = model.decode_step(new_memory, new_mask, new_tgt, chosen)
        torch.testing.assert_close(step, model.decode_step(new_memory, new_mask, new_tgt),
                                   atol=1e-10, rtol=1e-10)
        # reorder_: beams of one source sentence swap their target histories.
        src1, mask1 = src[:1].expand(2, -1), src_mask[:1].expand(2, -1, -1)
        memory1 = model.encode(src1, mask1)
        beams = torch.tensor([[1, 4, 9, 2], [1, 8, 3, 3]])
        cache = model.init_cache()
        model.decode_step(memory1, mask1, beams[:, :3], cache)
        swap = torch.tensor([1, 0])
        cache.reorder_(swap)
        step = model.decode_step(memory1, mask1, beams[swap], cache)
        torch.testing.assert_close(step, model.decode_step(memory1, mask1, beams[swap]),
                                   atol=1e-10, rtol=1e-10)


def test_decoder_cache_empty_keeps_the_memory_static():
    """An empty cache has one self-attention cache per layer that grows, and one source-attention
    cache per layer that is static (the memory is projected once)."""
    from annotated_transformer.model import DecoderCache

    cache = DecoderCache.empty(3)
    assert len(cache.self_attn) == len(cache.src_attn) == 3 and cache.length == 0
    assert all(layer.static for layer in cache.src_attn)
    assert not any(layer.static for layer in cache.self_attn)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("n_layers", True, "n_layers must be a whole number, got True"),
    ("n_layers", 2.0, "n_layers must be a whole number, got 2.0"),
    ("d_k", "8", "d_k must be a whole number or None, got '8'"),
    ("dropout", "0.1", "dropout must be a number, got '0.1'"),
    ("share_embeddings", 1, "share_embeddings must be true or false, got 1"),
    ("positional", "rotary", "positional must be 'sinusoidal' or 'learned', got 'rotary'"),
])
def test_config_type_errors_name_the_field_what_it_must_be_and_the_value(field, value, message):
    """A wrongly typed configuration field is refused in one line naming the field, the allowed
    kinds ("a whole number or None") and the value given."""
    with pytest.raises(Exception) as caught:
        TransformerConfig(**{field: value})
    assert str(caught.value) == message


def test_check_types_names_a_type_without_a_plain_name_by_its_class_name():
    """A field of a type with no plain-words name is named by its class name, None as None."""
    from pathlib import Path

    from annotated_transformer.model import check_types

    @dataclasses.dataclass
    class Settings:
        root: Path | None = None

    check_types(Settings(Path("x")))
    check_types(Settings(None))
    with pytest.raises(Exception) as caught:
        check_types(Settings(3))
    assert str(caught.value) == "root must be Path or None, got 3"


def test_check_choice_lists_every_choice_with_or_before_the_last():
    """Three or four choices read "'a', 'b' or 'c'": commas, then "or" before the last only."""
    from typing import Literal

    from annotated_transformer.model import check_choice

    check_choice("mode", "b", Literal["a", "b", "c"])
    with pytest.raises(Exception) as caught:
        check_choice("mode", "z", Literal["a", "b", "c"])
    assert str(caught.value) == "mode must be 'a', 'b' or 'c', got 'z'"
    with pytest.raises(Exception) as caught:
        check_choice("mode", "z", Literal["a", "b", "c", "d"])
    assert str(caught.value) == "mode must be 'a', 'b', 'c' or 'd', got 'z'"


def test_parameter_table_rows_are_table3_with_counts_for_the_given_vocabulary():
    """parameter_table() has one row per Table 3 row: its name, our count for the row's model with
    one shared vocabulary (37000 and max_len 5000 by default) and the paper's count in millions."""
    from annotated_transformer.model import parameter_table

    rows = parameter_table()
    assert [row["row"] for row in rows] == list(TABLE3_ROWS)
    assert all(set(row) == {"row", "ours", "paper_millions"} for row in rows)
    assert [row["paper_millions"] for row in rows] == [paper for _, paper in TABLE3_ROWS.values()]
    by_name = {row["row"]: row["ours"] for row in rows}
    assert by_name["base"] == config_parameter_count(TransformerConfig()) == 63_082_496
    # Learned positions add two max_len × d_model tables to the base model.
    assert by_name["(E) learned positions"] - by_name["base"] == 2 * 5000 * 512
    assert by_name["big"] == config_parameter_count(TransformerConfig.big())
    assert by_name["(C) N=2"] < by_name["(C) N=4"] < by_name["base"] < by_name["(C) N=8"]

    small = {row["row"]: row["ours"] for row in parameter_table(vocab_size=1000, max_len=50)}
    # One shared embedding matrix: 36000 fewer words save 36000 × d_model parameters.
    assert by_name["base"] - small["base"] == 36000 * 512
    assert small["(E) learned positions"] - small["base"] == 2 * 50 * 512
    assert small["big"] == config_parameter_count(TransformerConfig.big(src_vocab_size=1000,
                                                                        tgt_vocab_size=1000))


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_every_dropout_rate_and_layer_norm_eps_reaches_its_module(positional):
    """P_drop goes to the embedding sums and the residual sub-layers, attention_dropout to every
    attention, ffn_dropout inside every feed-forward network, layer_norm_eps to every LayerNorm
    (the final pre-norm ones too)."""
    config = TransformerConfig(src_vocab_size=11, tgt_vocab_size=11, n_layers=1, d_model=8, d_ff=16,
                               n_heads=2, max_len=10, dropout=0.15, attention_dropout=0.25,
                               ffn_dropout=0.35, layer_norm_eps=0.25, positional=positional,
                               norm_position="pre")
    model = make_model(config)
    rates = {name: module.p for name, module in model.named_modules() if isinstance(module, nn.Dropout)}
    assert rates["src_pos.dropout"] == rates["tgt_pos.dropout"] == 0.15
    for name, rate in rates.items():
        assert rate == (0.35 if "feed_forward" in name else 0.15), name
    attentions = [m for m in model.modules() if type(m).__name__ == "MultiHeadAttention"]
    assert len(attentions) == 3 and all(m.dropout == 0.25 for m in attentions)
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert len(norms) == 2 + 3 + 2 and all(m.eps == 0.25 for m in norms)


def test_sublayer_connection_defaults_to_the_papers_post_norm_with_eps_1e6():
    """SublayerConnection(d, p) is the paper's LayerNorm(x + Sublayer(x)) with eps 1e-6."""
    from annotated_transformer.model import SublayerConnection

    torch.manual_seed(0)
    block = SublayerConnection(8, 0.0)
    assert block.norm_position == "post" and block.norm.eps == 1e-6
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    block = block.double()
    torch.testing.assert_close(block(x, lambda y: 2 * y), block.norm(3 * x))


def test_config_range_errors_name_the_field_the_rule_and_the_value():
    """Sizes below 1 and dropout rates outside [0, 1) are refused naming field, rule and value."""
    with pytest.raises(Exception) as caught:
        TransformerConfig(n_layers=0)
    assert str(caught.value) == "n_layers must be a positive integer, got 0"
    with pytest.raises(Exception) as caught:
        TransformerConfig(n_decoder_layers=0)
    assert str(caught.value) == ("n_decoder_layers must be a positive integer, got 0; "
                                 "n_decoder_layers=None means N, as many as the encoder")
    with pytest.raises(Exception) as caught:
        TransformerConfig(ffn_dropout=1.0)
    assert str(caught.value) == "ffn_dropout must lie in [0, 1), got 1.0"


def test_make_model_refuses_a_config_followed_by_a_vocabulary_size():
    """make_model(config, 23) mixes the two call forms and is refused, not silently ignored."""
    with pytest.raises(TypeError, match="make_model takes a TransformerConfig or two vocabulary sizes"):
        make_model(TransformerConfig(src_vocab_size=11, tgt_vocab_size=11, n_layers=1, d_model=8,
                                     d_ff=16, n_heads=2), 23)


def test_embeddings_start_centred_with_std_d_model_to_the_minus_half():
    """Embedding weights are drawn from N(0, d_model^-1/2) (mean 0, not shifted)."""
    torch.manual_seed(0)
    model = make_model(TransformerConfig(src_vocab_size=4000, tgt_vocab_size=4000, n_layers=1,
                                         d_model=16, d_ff=16, n_heads=2, max_len=10))
    weight = model.src_embed.lut.weight.detach()
    assert abs(weight.mean().item()) < 0.01
    assert abs(weight.std().item() - 16**-0.5) < 0.01


def test_decode_step_refuses_a_prefix_the_cache_already_holds_in_one_line():
    """Calling decode_step again without appending a token is refused, saying what to do."""
    model, src, src_mask = _float64_model()
    tgt = torch.tensor([[1, 4, 9], [1, 8, 3]])
    with torch.no_grad():
        memory, cache = model.encode(src, src_mask), model.init_cache()
        model.decode_step(memory, src_mask, tgt, cache)
        with pytest.raises(ValueError) as caught:
            model.decode_step(memory, src_mask, tgt, cache)
    assert str(caught.value) == ("the cache already holds all 3 positions of tgt: append the next token "
                                 "to tgt before calling decode_step again")


def test_decode_step_builds_its_masks_on_the_targets_device():
    """The causal masks live on tgt's device (here PyTorch's shape-only "meta" device), so that
    decoding runs on an accelerator without a CPU mask in the way."""
    model = make_model(TransformerConfig(src_vocab_size=11, tgt_vocab_size=11, n_layers=1, d_model=8,
                                         d_ff=16, n_heads=2, max_len=10, dropout=0.0)).eval().to("meta")
    src = torch.ones(2, 5, dtype=torch.long, device="meta")
    tgt = torch.ones(2, 4, dtype=torch.long, device="meta")
    with torch.no_grad():
        memory = model.encode(src, None)
        assert model.decode_step(memory, None, tgt).shape == (2, 11)
        cache = model.init_cache()
        model.decode_step(memory, None, tgt[:, :1], cache)
        assert model.decode_step(memory, None, tgt, cache).shape == (2, 11)


def test_a_cache_holds_no_position_before_the_first_step_whatever_its_depth():
    """`length` is the position of the next token: 0 before decoding starts, for a cache of several layers
    and for one of none (the branch that does not look into a first layer)."""
    from annotated_transformer.model import DecoderCache

    assert DecoderCache.empty(0).length == 0
    assert DecoderCache.empty(2).length == 0
