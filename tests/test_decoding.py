"""Incremental decoding (the key/value cache of chapters 3-5), greedy decoding, beam search (§6.1)
and checkpoint averaging (§6.1).

Random models are made "opinionated" (a large random output projection) so that their outputs
vary and end at different steps; stub models with hand-set next-token probabilities check what
beam search must find."""

import math
from types import SimpleNamespace

import pytest
import torch
from helpers import set_fused, small_config
from torch import nn

from annotated_transformer.attention import padding_mask, subsequent_mask
from annotated_transformer.batching import BOS, EOS, PAD
from annotated_transformer.checkpoints import (
    CheckpointError,
    checkpoint_paths,
    checkpoint_sha256,
    model_from_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from annotated_transformer.decoding import (
    average_checkpoints,
    average_last_checkpoints,
    beam_search,
    beam_search_hypotheses,
    greedy_decode,
    length_penalty,
    save_average,
)
from annotated_transformer.layers import LearnedPositionalEmbedding, PositionalEncoding
from annotated_transformer.model import DecoderCache, make_model
from annotated_transformer.multi_head_attention import KVCache, MultiHeadAttention

VOCAB = 12
SRC_LENGTHS = [7, 5, 2, 1, 6]  # real lengths of the test batch: padding of different lengths


def plain_model(seed: int, **overrides) -> nn.Module:
    torch.manual_seed(seed)
    return make_model(small_config(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, max_len=64, **overrides))


def random_model(seed: int, **overrides) -> nn.Module:
    """A small random model in eval mode whose next-token distributions are far from uniform."""
    torch.manual_seed(seed)
    fields = {"src_vocab_size": VOCAB, "tgt_vocab_size": VOCAB, "max_len": 64, **overrides}
    model = make_model(small_config(**fields)).eval()
    # Untie and enlarge the output projection: sharp, varied distributions, EOS at varied steps.
    model.generator.proj.weight = nn.Parameter(torch.randn(VOCAB, model.config.d_model) * 0.5)
    return model


def source_batch(seed: int, lengths=SRC_LENGTHS) -> torch.Tensor:
    """(len(lengths), max(lengths)) ids in [3, VOCAB) (never PAD, BOS or EOS), right-padded."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(3, VOCAB, (len(lengths), max(lengths)), generator=generator)
    for row, length in enumerate(lengths):
        src[row, length:] = PAD
    return src


def rows_as_lists(output: torch.Tensor) -> list[list[int]]:
    """Greedy output rows cut after their first EOS (or their padding)."""
    rows = []
    for row in output.tolist():
        rows.append(row[: row.index(EOS) + 1] if EOS in row else [t for t in row if t != PAD])
    return rows


MODELS = [
    pytest.param({}, id="post-LN"),
    pytest.param({"norm_position": "pre"}, id="pre-LN"),
    pytest.param({"positional": "learned"}, id="learned-positions"),
    pytest.param({"share_embeddings": False, "n_layers": 3}, id="untied-3-layers"),
]


# --- positional encodings with an offset (chapter 4) ----------------------------------------------


@pytest.mark.parametrize("module", [PositionalEncoding, LearnedPositionalEmbedding])
def test_positional_offset_adds_the_rows_of_those_positions(module):
    torch.manual_seed(0)
    positions = module(d_model=8, max_len=10).eval()
    x = torch.randn(2, 10, 8)
    torch.testing.assert_close(positions(x[:, 3:5], offset=3), positions(x)[:, 3:5])
    assert torch.equal(positions(x[:, :4], offset=0), positions(x[:, :4]))
    with pytest.raises(ValueError, match="starting at position 8 is longer than the positional"):
        positions(x[:, :3], offset=8)
    with pytest.raises(ValueError, match="offset must be 0 or more"):
        positions(x[:, :3], offset=-1)


# --- the key/value cache of multi-head attention (chapter 3) -----------------------------------


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_self_attention_step_by_step_equals_causal_attention(fused):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, fused=fused).eval()
    x = torch.randn(3, 40, 16)  # 40 steps: the cache grows past its first capacity (16) twice
    with torch.no_grad():
        full = layer(x, x, x, subsequent_mask(40))
        cache = KVCache()
        steps = [layer(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache) for t in range(40)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert len(cache) == 40 and cache.k.shape == (3, 4, 40, 4) and cache.v.shape == (3, 4, 40, 4)


def test_static_cache_projects_the_memory_once():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4).eval()
    memory, queries = torch.randn(2, 5, 16), torch.randn(2, 3, 16)
    mask = padding_mask(torch.tensor([[5, 5, 5, 5, 5], [5, 5, 0, 0, 0]]), PAD)
    cache = KVCache(static=True)
    with torch.no_grad():
        full = layer(queries, memory, memory, mask)
        first = layer(queries[:, :1], memory, memory, mask, cache)
        k = cache.k.clone()
        # Later calls do not look at the memory argument at all.
        rest = layer(queries[:, 1:], torch.zeros_like(memory), torch.zeros_like(memory), mask, cache)
    assert torch.equal(cache.k, k) and len(cache) == 5
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-6, rtol=1e-6)


def test_cache_reorder_in_place_equals_select():
    torch.manual_seed(0)
    cache = KVCache()
    cache.store(torch.randn(4, 2, 3, 5), torch.randn(4, 2, 3, 5))
    indices = torch.tensor([2, 2, 0, 3])  # rows may repeat and swap
    expected = cache.select(indices)
    assert expected.k.shape == (4, 2, 3, 5)
    cache.reorder_(indices)
    assert torch.equal(cache.k, expected.k) and torch.equal(cache.v, expected.v)
    smaller = cache.select(torch.tensor([1]))
    assert smaller.k.shape == (1, 2, 3, 5) and len(smaller) == 3
    assert len(KVCache().select(indices)) == 0


def test_decoder_cache_reorder_leaves_the_memory():
    model = random_model(0)
    src = source_batch(0, [3, 3])
    src_mask = padding_mask(src, PAD)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        cache = model.init_cache()
        model.decode_step(memory, src_mask, torch.tensor([[BOS], [BOS]]), cache)
    memory_k = cache.src_attn[0].k.clone()
    self_k = cache.self_attn[0].k.clone()
    cache.reorder_(torch.tensor([1, 0]))
    assert torch.equal(cache.src_attn[0].k, memory_k)
    assert torch.equal(cache.self_attn[0].k, self_k[[1, 0]])
    assert cache.length == 1 and DecoderCache.empty(3).length == 0


# --- Transformer.decode_step (chapter 5) ---------------------------------------------------------


@pytest.mark.parametrize("overrides", MODELS)
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_decode_step_with_cache_equals_full_decoder(overrides, fused):
    model = random_model(1, **overrides)
    set_fused(model, fused)
    src = source_batch(1, [6, 3, 1])
    src_mask = padding_mask(src, PAD)
    tgt = torch.cat([torch.full((3, 1), BOS), torch.randint(3, VOCAB, (3, 9))], dim=1)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.generator(model.decode(memory, src_mask, tgt, subsequent_mask(10)))
        cache = model.init_cache()
        # Positions fed in chunks of 3, 1, 4, 1, 1: several new positions at once get a causal mask.
        for end in (3, 4, 8, 9, 10):
            step = model.decode_step(memory, src_mask, tgt[:, :end], cache)
            torch.testing.assert_close(step, full[:, end - 1], atol=1e-5, rtol=1e-5)
            uncached = model.decode_step(memory, src_mask, tgt[:, :end])
            torch.testing.assert_close(uncached, step, atol=1e-5, rtol=1e-5)
    assert cache.length == 10


def test_decode_step_refuses_a_prefix_the_cache_already_holds():
    model = random_model(0)
    src = source_batch(0, [3])
    src_mask = padding_mask(src, PAD)
    with torch.no_grad():
        memory, cache = model.encode(src, src_mask), model.init_cache()
        model.decode_step(memory, src_mask, torch.tensor([[BOS, 5]]), cache)
        with pytest.raises(ValueError, match="already holds all 2 positions"):
            model.decode_step(memory, src_mask, torch.tensor([[BOS, 5]]), cache)


# --- greedy decoding ------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", MODELS)
@pytest.mark.parametrize("seed", range(3))
def test_greedy_with_cache_equals_recomputing_the_prefix(overrides, seed):
    model = random_model(seed, **overrides)
    src = source_batch(seed)
    cached = greedy_decode(model, src, max_len=20)
    uncached = greedy_decode(model, src, max_len=20, use_cache=False)
    assert torch.equal(cached, uncached)


def test_greedy_stops_each_sentence_at_its_eos():
    stops = set()
    for seed in range(6):
        model = random_model(seed)
        output = greedy_decode(model, source_batch(seed), max_len=20)
        assert output.shape[0] == len(SRC_LENGTHS) and output.shape[1] <= 20
        ends = []
        for row in output.tolist():
            if EOS in row:
                end = row.index(EOS)
                assert all(t == PAD for t in row[end + 1 :]), "padded after EOS"
                assert PAD not in row[:end], "the padding token is never generated"
                stops.add(end)
                ends.append(end)
            else:
                assert PAD not in row
        if len(ends) == len(SRC_LENGTHS):
            assert output.shape[1] == max(ends) + 1  # the loop ends with the last sentence
        else:
            assert output.shape[1] == 20
    assert len(stops) >= 3, f"the random models should stop at varied steps, got {stops}"


def test_greedy_result_does_not_depend_on_the_rest_of_the_batch():
    for seed in range(3):
        model = random_model(seed)
        src = source_batch(seed)
        together = rows_as_lists(greedy_decode(model, src, max_len=20))
        alone = [
            rows_as_lists(greedy_decode(model, src[i : i + 1, :length], max_len=20))[0]
            for i, length in enumerate(SRC_LENGTHS)
        ]
        assert together == alone


class BigramStub:
    """A 'model' for the decoding functions whose next-token log-probabilities depend only on the
    previous token: log_table[previous]. It counts its decoder steps."""

    def __init__(self, probs: dict[int, dict[int, float]], vocab_size: int = 6, max_len: int | None = None):
        table = torch.full((vocab_size, vocab_size), 1e-12)
        for previous, row in probs.items():
            for token, p in row.items():
                table[previous, token] = p
        self.log_table = table.log()
        self.steps = 0
        self.batch_sizes = []
        if max_len is not None:
            self.config = SimpleNamespace(max_len=max_len)

    def encode(self, src, src_mask):
        return torch.zeros(src.size(0), src.size(1), 1)

    def init_cache(self):
        return None

    def decode_step(self, memory, src_mask, tgt, cache=None):
        self.steps += 1
        self.batch_sizes.append(tgt.size(0))
        assert memory.size(0) == tgt.size(0) == src_mask.size(0)
        return self.log_table[tgt[:, -1]]


A, B = 4, 5
NEVER_ENDS = {BOS: {A: 0.7, B: 0.3}, A: {A: 0.6, B: 0.4}, B: {A: 0.5, B: 0.5}}


def test_default_maximum_length_is_the_source_length_plus_50():
    """§6.1: at most input length + 50 tokens, per sentence, without its padding."""
    src = source_batch(0, [7, 2, 4])
    output = greedy_decode(BigramStub(NEVER_ENDS), src)
    assert output.shape == (3, 57)
    assert [len(row) for row in rows_as_lists(output)] == [57, 52, 54]
    hypotheses = beam_search_hypotheses(BigramStub(NEVER_ENDS), src, beam_size=2)
    assert [len(found[0].tokens) for found in hypotheses] == [57, 52, 54]
    # ... but never beyond the model's positional table.
    assert greedy_decode(BigramStub(NEVER_ENDS, max_len=30), src).shape == (3, 30)


def test_decoding_switches_to_evaluation_mode_and_back():
    model = random_model(0, dropout=0.5)
    model.train()
    src = source_batch(0)
    first = greedy_decode(model, src, max_len=10)
    assert model.training
    assert torch.equal(first, greedy_decode(model, src, max_len=10)), "no dropout while decoding"
    beam_search(model, src, max_len=10)
    assert model.training


# --- beam search ----------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", MODELS[:2])
@pytest.mark.parametrize("seed", range(4))
def test_beam_size_one_is_greedy(overrides, seed):
    model = random_model(seed, **overrides)
    src = source_batch(seed)
    greedy = rows_as_lists(greedy_decode(model, src, max_len=20))
    assert beam_search(model, src, beam_size=1, max_len=20) == greedy
    assert beam_search(model, src, beam_size=1, alpha=0.0, max_len=20) == greedy


@pytest.mark.parametrize("seed", range(4))
def test_beam_search_with_cache_equals_recomputing_the_prefix(seed):
    model = random_model(seed)
    src = source_batch(seed)
    cached = beam_search_hypotheses(model, src, max_len=12)
    uncached = beam_search_hypotheses(model, src, max_len=12, use_cache=False)
    tokens = [[h.tokens for h in found] for found in cached]
    assert tokens == [[h.tokens for h in found] for found in uncached]
    for found, found_again in zip(cached, uncached, strict=True):
        for h, h_again in zip(found, found_again, strict=True):
            assert h.score == pytest.approx(h_again.score, abs=1e-4)


@pytest.mark.parametrize("beam_size", [2, 4])
def test_beam_search_does_not_depend_on_the_rest_of_the_batch(beam_size):
    for seed in range(3):
        model = random_model(seed)
        src = source_batch(seed)
        together = beam_search_hypotheses(model, src, beam_size=beam_size, max_len=15)
        for i, length in enumerate(SRC_LENGTHS):
            alone = beam_search_hypotheses(model, src[i : i + 1, :length], beam_size=beam_size, max_len=15)[0]
            assert [h.tokens for h in alone] == [h.tokens for h in together[i]]
            assert [h.score for h in alone] == pytest.approx([h.score for h in together[i]], abs=1e-4)


def test_hypotheses_are_ranked_and_scored_by_the_length_penalty():
    for seed in range(3):
        model = random_model(seed)
        src = source_batch(seed)
        for found in beam_search_hypotheses(model, src, beam_size=4, alpha=0.6, max_len=15):
            assert 1 <= len(found) <= 4
            scores = [h.score for h in found]
            assert scores == sorted(scores, reverse=True)
            for h in found:
                assert h.score == pytest.approx(h.log_prob / ((5 + len(h.tokens)) / 6) ** 0.6)
                assert EOS not in h.tokens[:-1], "a finished hypothesis is never extended"
                assert PAD not in h.tokens
                assert h.tokens[-1] == EOS or len(h.tokens) == 15


def test_log_probabilities_are_those_of_the_model():
    stub = BigramStub({BOS: {A: 0.6, B: 0.4}, A: {EOS: 0.5, B: 0.5}, B: {EOS: 0.8, A: 0.2}})
    found = beam_search_hypotheses(stub, torch.tensor([[A]]), beam_size=3, alpha=0.0, max_len=4)[0]
    # After two steps nothing live can beat B EOS (0.32): the prefix A B has 0.3 < 0.32 (alpha = 0).
    assert {tuple(h.tokens): round(math.exp(h.log_prob), 6) for h in found} == {(B, EOS): 0.32, (A, EOS): 0.3}
    for h in found:
        previous = [BOS, *h.tokens[:-1]]
        expected = sum(stub.log_table[p, t].item() for p, t in zip(previous, h.tokens, strict=True))
        assert h.log_prob == pytest.approx(expected)


def test_beam_search_finds_what_greedy_misses():
    # Greedy: A (0.6), then EOS (0.35) -> P = 0.21. Beam: B (0.4), then EOS (0.9) -> P = 0.36.
    stub = BigramStub({BOS: {A: 0.6, B: 0.4}, A: {EOS: 0.35, A: 0.33, B: 0.32}, B: {EOS: 0.9, A: 0.1}})
    src = torch.tensor([[A, A]])
    assert rows_as_lists(greedy_decode(stub, src, max_len=5)) == [[A, EOS]]
    assert beam_search(stub, src, beam_size=1, max_len=5) == [[A, EOS]]
    assert beam_search(stub, src, beam_size=2, max_len=5) == [[B, EOS]]
    assert beam_search(stub, src, beam_size=4, max_len=5) == [[B, EOS]]


@pytest.mark.parametrize("max_len", [3, 6])
def test_a_hypothesis_that_ends_early_is_kept_while_the_others_go_on(max_len):
    # EOS at once has probability 0.45; A is more likely (0.5) but never ends, and every longer
    # prefix is less likely, also after the length penalty.
    stub = BigramStub({BOS: {EOS: 0.45, A: 0.5, B: 0.05}, A: {A: 0.8, B: 0.2}, B: {A: 0.5, B: 0.5}})
    found = beam_search_hypotheses(stub, torch.tensor([[A, B]]), beam_size=2, alpha=0.6, max_len=max_len)[0]
    assert found[0].tokens == [EOS]
    assert found[0].log_prob == pytest.approx(math.log(0.45))
    assert stub.steps >= 3  # the other beam went on after the early EOS ...
    assert all(EOS not in h.tokens[:-1] for h in found)  # ... and the finished one was not extended
    if max_len == 3:  # the live beams reached the maximum length and finished there, below [EOS]
        assert len(found) == 2 and len(found[1].tokens) == 3 and found[1].score < found[0].score


def test_length_penalty_can_prefer_the_longer_hypothesis():
    # [EOS] has P = 0.3; [A, A, EOS] has P = 0.7 * 0.5 * 0.6 = 0.21 but is longer.
    stub = BigramStub({BOS: {EOS: 0.3, A: 0.7}, A: {A: 0.5, EOS: 0.3, B: 0.2}, B: {EOS: 1.0}})
    src = torch.tensor([[A]])
    short = beam_search(stub, src, beam_size=4, alpha=0.0, max_len=4)[0]
    long = beam_search(stub, src, beam_size=4, alpha=2.0, max_len=4)[0]
    assert short == [EOS]
    assert len(long) > 1
    assert length_penalty(1) == 1.0
    assert length_penalty(torch.tensor([1.0, 15.0]), 0.5).tolist() == pytest.approx([1.0, math.sqrt(20 / 6)])


def test_search_terminates_early_when_nothing_can_beat_the_best():
    certain = {BOS: {A: 0.999, B: 0.001}, A: {EOS: 0.999, A: 0.001}, B: {B: 1.0}}
    stub = BigramStub(certain)
    assert beam_search(stub, torch.tensor([[A, A, A]]), beam_size=4)[0] == [A, EOS]
    # With up to 53 tokens allowed, a bound on what the live beams can still reach stops it early.
    assert stub.steps <= 3


def test_finished_sentences_leave_the_batch():
    src = source_batch(0, [1, 3, 2])  # maximum lengths 51, 53, 52: the rows finish one by one
    stub = BigramStub(NEVER_ENDS)
    greedy_decode(stub, src)
    assert stub.batch_sizes == [3] * 51 + [2] + [1]
    stub = BigramStub(NEVER_ENDS)
    beam_search(stub, src, beam_size=2)
    assert stub.batch_sizes == [3] + [6] * 50 + [4] + [2]  # the first step has one beam per sentence


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("decode", [greedy_decode, beam_search], ids=["greedy", "beam"])
def test_clear_errors(decode):
    model = random_model(0)
    src = source_batch(0)
    with pytest.raises(ValueError, match="max_len must be at least 1"):
        decode(model, src, max_len=0)
    with pytest.raises(ValueError, match="empty batch"):
        decode(model, torch.zeros(0, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="zero-length source"):
        decode(model, torch.zeros(2, 0, dtype=torch.long))
    all_padding = src.clone()
    all_padding[1] = PAD
    with pytest.raises(ValueError, match=r"sentence\(s\) \[1\] of the batch are all padding"):
        decode(model, all_padding)
    with pytest.raises(ValueError, match="max_len=64; split or shorten the sentence"):
        decode(model, torch.full((1, 65), 5))
    with pytest.raises(ValueError, match="use max_len <= 64"):
        decode(model, src, max_len=65)
    with pytest.raises(ValueError, match=r"src must be a \(batch, src_len\) tensor"):
        decode(model, src[0])
    with pytest.raises(ValueError, match="src_mask must be a bool tensor"):
        decode(model, src, padding_mask(src, PAD).long())


def test_beam_search_argument_errors():
    model = random_model(0)
    src = source_batch(0)
    with pytest.raises(ValueError, match="beam_size must be at least 1"):
        beam_search(model, src, beam_size=0)
    with pytest.raises(ValueError, match="alpha must be 0 or more"):
        beam_search(model, src, alpha=-0.5)


# --- checkpoint averaging (§6.1) -----------------------------------------------------------------


def write_checkpoints(directory, models_by_step) -> list:
    return [
        save_checkpoint(directory / f"step_{step:08d}.pt", model, step=step)
        for step, model in models_by_step.items()
    ]


def test_averaging_copies_of_one_checkpoint_returns_it_exactly(tmp_path):
    model = plain_model(0)
    (path,) = write_checkpoints(tmp_path, {100: model})
    average = average_checkpoints([path] * 5)
    original = read_checkpoint(path)["state"]["model"]
    assert average.keys() == original.keys()
    for name, tensor in average.items():
        assert tensor.dtype == original[name].dtype
        assert torch.equal(tensor, original[name]), name


def test_average_of_two_checkpoints_is_their_mean(tmp_path):
    first, second = plain_model(0), plain_model(1)
    paths = write_checkpoints(tmp_path, {1: first, 2: second})
    average = average_checkpoints(paths)
    a, b = read_checkpoint(paths[0])["state"]["model"], read_checkpoint(paths[1])["state"]["model"]
    for name, tensor in average.items():
        assert torch.equal(tensor, ((a[name].double() + b[name].double()) / 2).float()), name
    assert not torch.equal(average["generator.proj.weight"], a["generator.proj.weight"])
    loaded = plain_model(2)
    loaded.load_state_dict(average)  # a state dict the model accepts as it is


def test_averaging_refuses_checkpoints_of_different_models(tmp_path):
    small = plain_model(0)
    wider = plain_model(0, d_ff=128)
    paths = write_checkpoints(tmp_path, {1: small, 2: wider})
    expected = r"(?s)different models.*config d_ff: 64 in step_00000001\.pt, 128"
    with pytest.raises(CheckpointError, match=expected):
        average_checkpoints(paths)
    with pytest.raises(ValueError, match="at least one checkpoint"):
        average_checkpoints([])


def test_averaging_refuses_different_parameter_names(tmp_path):
    model = plain_model(0)
    (path,) = write_checkpoints(tmp_path, {1: model})
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["state"]["model"]["extra.weight"] = torch.zeros(2)
    checkpoint["sha256"] = checkpoint_sha256(checkpoint)
    torch.save(checkpoint, tmp_path / "renamed.pt")
    with pytest.raises(CheckpointError, match=r"parameter extra\.weight only in renamed\.pt"):
        average_checkpoints([path, tmp_path / "renamed.pt"])


def test_average_last_checkpoints_writes_a_loadable_checkpoint(tmp_path):
    models = {step: plain_model(step) for step in (10, 20, 30, 40)}
    write_checkpoints(tmp_path, models)
    output = average_last_checkpoints(tmp_path, k=3)
    assert output == tmp_path / "averaged_last_3.pt"
    assert [p.name for p in checkpoint_paths(tmp_path)] == [f"step_{s:08d}.pt" for s in (10, 20, 30, 40)]
    averaged = read_checkpoint(output)
    assert averaged["state"]["step"] == 40
    names = ["step_00000020.pt", "step_00000030.pt", "step_00000040.pt"]
    assert averaged["extra"]["averaged_checkpoints"] == names
    expected = average_checkpoints(checkpoint_paths(tmp_path)[-3:])
    for name, tensor in averaged["state"]["model"].items():
        assert torch.equal(tensor, expected[name]), name
    model = model_from_checkpoint(output)
    assert model.generator.proj.weight is model.tgt_embed.lut.weight  # still tied after loading
    custom = average_last_checkpoints(tmp_path, k=4, output=tmp_path / "elsewhere" / "avg.pt")
    assert custom == tmp_path / "elsewhere" / "avg.pt" and custom.is_file()


def test_average_last_checkpoints_errors(tmp_path):
    write_checkpoints(tmp_path, {1: plain_model(0), 2: plain_model(1)})
    with pytest.raises(ValueError, match="holds 2 checkpoint"):
        average_last_checkpoints(tmp_path, k=5)
    with pytest.raises(ValueError, match="k must be at least 1"):
        average_last_checkpoints(tmp_path, k=0)
    with pytest.raises(FileNotFoundError):
        average_last_checkpoints(tmp_path / "missing")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"beam_size": 2.5}, "beam_size must be a whole number"),
        ({"beam_size": True}, "beam_size must be a whole number"),
        ({"beam_size": -1}, "beam_size must be at least 1"),
        ({"alpha": float("nan")}, "alpha must be a number"),
        ({"alpha": float("inf")}, "alpha must be 0 or more, and finite"),
        ({"alpha": "0.6"}, "alpha must be a number"),
    ],
)
def test_beam_settings_that_would_decode_something_else_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        beam_search(random_model(0), source_batch(0), **settings)


def test_averaging_refuses_checkpoints_of_runs_with_different_vocabularies(tmp_path):
    model = plain_model(0)
    for name, fingerprint in (("a.pt", "1" * 64), ("b.pt", "2" * 64)):
        save_checkpoint(tmp_path / name, model, extra={"vocab_sha256": fingerprint})
    with pytest.raises(CheckpointError, match=r"different training runs \(their vocabularies differ\)"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])
    save_checkpoint(tmp_path / "c.pt", model)  # no fingerprint (not written by a run): accepted
    average_checkpoints([tmp_path / "a.pt", tmp_path / "c.pt"])


def test_an_average_keeps_the_fingerprints_of_its_run(tmp_path):
    identity = {"vocab_sha256": "1" * 64, "config_sha256": "2" * 64, "recipe": {"name": "tiny"}}
    paths = [save_checkpoint(tmp_path / f"step_{step:08d}.pt", plain_model(step), step=step,
                             extra={**identity, "epoch": 0}) for step in (1, 2)]
    steps = save_average(paths, tmp_path / "avg.pt", {"note": "x"})
    extra = read_checkpoint(tmp_path / "avg.pt")["extra"]
    assert steps == [1, 2] and extra == {**identity, "averaged_steps": [1, 2], "note": "x"}
    assert read_checkpoint(average_last_checkpoints(tmp_path, k=2))["extra"]["vocab_sha256"] == "1" * 64


def test_averaging_refuses_a_checkpoint_with_non_finite_weights(tmp_path):
    model = plain_model(0)
    good = save_checkpoint(tmp_path / "good.pt", model)
    with torch.no_grad():
        model.generator.proj.weight[0, 0] = float("nan")
    checkpoint = torch.load(good, weights_only=True)
    checkpoint["state"]["model"] = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    checkpoint["sha256"] = checkpoint_sha256(checkpoint)  # a sound file, with NaN in it
    torch.save(checkpoint, tmp_path / "nan.pt")
    with pytest.raises(CheckpointError, match="NaN or infinite parameters"):
        average_checkpoints([good, tmp_path / "nan.pt"])
