"""Promises of decoding at values where a bug shows (issue 50): a `Translator`'s beam size and length
penalty α reach beam search, whether they come from the constructor, a call or a run's recipe.

The model is a tiny random one whose end-of-sentence logit carries a bias (`eos_biased_model`), so
that hypotheses end at many lengths and the length penalty decides between them: with the defaults
(beam 4, α = 0.6), with greedy decoding, with beams of 3 or 4 or with another α, its translations of
the test sentences differ from those of beam 2 and α = 2.0 (checked in each test, so that a change
of the model that makes them agree fails loudly instead of letting the test pass vacuously).

Then the promises of chapter 11 (§6.1) at their deciding values: beam search's defaults (beam 4,
α = 0.6), its stopping rules at their boundaries, its agreement with brute force when its beam holds
every prefix, the key/value cache and the inputs' device used by default, and checkpoint averaging
(the last 5 by step, exact means of hand-made parameters, errors that name the files)."""

import math
import re

import pytest
import torch

from annotated_transformer.batching import BOS, EOS, PAD
from annotated_transformer.checkpoints import CheckpointError, read_checkpoint, save_checkpoint
from annotated_transformer.companions.vocabulary_files import write_vocabularies
from annotated_transformer.data import builtin_corpus
from annotated_transformer.decoding import (
    _keep_in_place,
    _search_done,
    average_checkpoints,
    average_last_checkpoints,
    beam_search,
    beam_search_hypotheses,
    greedy_decode,
    length_penalty,
)
from annotated_transformer.model import Transformer, TransformerConfig, make_model
from annotated_transformer.tokenization import Vocabularies
from annotated_transformer.translator import Translator

BEAM, ALPHA = 2, 2.0  # neither the paper's (4, 0.6) nor greedy: a dropped setting shows
EOS_BIAS = 3.0  # how much likelier EOS is made: with 0 no hypothesis ends, with 5 all end at once
WRONG = [(1, 0.6), (2, 0.6), (2, 1.0), (3, ALPHA), (4, ALPHA)]  # what a lost setting would decode with


def eos_biased_model(vocabs: Vocabularies, seed: int = 0, bias: float | None = None) -> Transformer:
    """A random one-layer model (d_model 32) whose EOS logit has a bias (`EOS_BIAS` unless `bias` is
    given): the decoder's output dimension 0 is made a constant 1 (its last LayerNorm: γ_0 = 0,
    β_0 = 1), and only EOS's row of the tied output matrix reads it. A plain Transformer still, so that
    it saves and loads."""
    torch.manual_seed(seed)
    config = TransformerConfig(
        src_vocab_size=len(vocabs.source), tgt_vocab_size=len(vocabs.target), n_layers=1, d_model=32,
        d_ff=64, n_heads=2, dropout=0.0, max_len=64, share_embeddings=vocabs.shared,
    )
    model = make_model(config).eval()
    with torch.no_grad():
        norm = model.decoder.layers[-1].sublayers[2].norm
        norm.weight[0], norm.bias[0] = 0.0, 1.0
        weight = model.generator.proj.weight
        weight[:, 0] = 0.0
        weight[EOS, 0] = EOS_BIAS if bias is None else bias
    return model


def sources(vocabs: Vocabularies) -> list[list[int]]:
    return vocabs.source.encode_batch([de for de, _ in builtin_corpus("test")[:8]])


def decoded(model: Transformer, ids: list[list[int]], beam_size: int, alpha: float) -> list[list[int]]:
    """Each sentence decoded alone by `beam_search` (or greedily, beam 1), without BOS, EOS and padding."""
    outputs = []
    for row in ids:
        src = torch.tensor([row])
        if beam_size == 1:
            out = greedy_decode(model, src)[0].tolist()
        else:
            out = beam_search(model, src, beam_size=beam_size, alpha=alpha)[0]
        outputs.append([t for t in out if t > EOS])
    return outputs


@pytest.fixture(scope="module")
def setting(word_vocabs):
    """The model, the source ids, and their translations with beam 2 and α = 2.0, which each of the
    `WRONG` settings would change."""
    model, ids = eos_biased_model(word_vocabs), sources(word_vocabs)
    expected = decoded(model, ids, BEAM, ALPHA)
    for beam_size, alpha in WRONG:
        assert decoded(model, ids, beam_size, alpha) != expected, (beam_size, alpha)
    return model, ids, expected


def test_a_translators_beam_of_two_and_its_alpha_reach_beam_search(word_vocabs, setting):
    """Translator(beam_size=2, alpha=2.0) decodes as beam_search(beam_size=2, alpha=2.0) does: not as
    the default beam 4 or α = 0.6, nor greedily (a beam of 2 is a beam)."""
    model, ids, expected = setting
    translator = Translator(model, word_vocabs, "cpu", beam_size=BEAM, alpha=ALPHA)
    assert translator.translate_ids(ids) == expected


def test_a_beam_size_given_to_a_call_keeps_the_translators_alpha(word_vocabs, setting):
    """translate_ids(beam_size=2) of a translator made with beam 4 and α = 2.0: the call's beam, the
    translator's α (not the default 0.6)."""
    model, ids, expected = setting
    translator = Translator(model, word_vocabs, "cpu", beam_size=4, alpha=ALPHA)
    assert translator.translate_ids(ids, beam_size=BEAM) == expected


def test_a_loaded_translator_decodes_with_its_runs_beam_and_alpha(word_vocabs, setting, tmp_path):
    """Translator.load takes beam 2 and α = 2.0 from the recipe a checkpoint recorded."""
    model, ids, expected = setting
    recipe = {"beam_size": BEAM, "alpha": ALPHA}
    path = save_checkpoint(tmp_path / "model.pt", model, extra={"recipe": recipe})
    write_vocabularies(word_vocabs, tmp_path / "vocab.json")
    translator = Translator.load(path, device="cpu")
    assert (translator.beam_size, translator.alpha) == (BEAM, ALPHA)
    assert translator.translate_ids(ids) == expected


# --- beam search's rules and defaults, at values where they decide -------------------------------
#
# Stub "models" with hand-set next-token probabilities that depend only on the previous token make
# the ranking known; `_search_done` and `_keep_in_place` are checked at the boundary values of the
# rules their docstrings state.

INF = math.inf


class PreviousTokenStub:
    """A decoding 'model' whose next-token probabilities depend only on the previous token
    (`probs[previous][token]`, about 1e-12 where not given)."""

    def __init__(self, probs: dict[int, dict[int, float]], vocab_size: int = 9):
        table = torch.full((vocab_size, vocab_size), 1e-12)
        for previous, row in probs.items():
            for token, p in row.items():
                table[previous, token] = p
        self.log_table = table.log()

    def encode(self, src, src_mask):
        return torch.zeros(src.size(0), src.size(1), 1)

    def init_cache(self):
        return None

    def decode_step(self, memory, src_mask, tgt, cache=None):
        return self.log_table[tgt[:, -1]]


# Beam 4 keeps the four likeliest first tokens 3-6 and never sees 7, whose only continuation is a
# sure EOS: beam 5 finds [7, EOS] (P = 0.17, score -1.62); beam 4 ends with [3, 8, EOS] (P = 0.099,
# score -1.95 at α = 0.6).
FIFTH_FIRST = {BOS: {3: 0.22, 4: 0.21, 5: 0.2, 6: 0.19, 7: 0.17, 8: 0.01},
               **{t: {EOS: 0.1, 8: 0.9} for t in (3, 4, 5, 6)}, 7: {EOS: 1.0}, 8: {8: 0.5, EOS: 0.5}}
# [EOS] (P = 0.4, score -0.92) against [3, EOS] (P = 0.342): score -0.98 at α = 0.6, -0.84 at α = 1.6.
SHORT_OR_LONG = {BOS: {EOS: 0.4, 3: 0.6}, 3: {EOS: 0.57, 4: 0.43}, 4: {EOS: 1.0}}
ONE_SOURCE = torch.tensor([[3, 4, 5]])


def test_beam_search_defaults_to_the_papers_beam_of_4():
    """§6.1: beam_search without a beam size searches 4 beams (a fifth would find another output)."""
    stub = PreviousTokenStub(FIFTH_FIRST)
    assert beam_search(stub, ONE_SOURCE, beam_size=5)[0] == [7, EOS]
    assert beam_search(stub, ONE_SOURCE, beam_size=4)[0] == [3, 8, EOS]
    assert beam_search(stub, ONE_SOURCE)[0] == [3, 8, EOS]


def test_beam_search_defaults_to_the_papers_alpha_of_0_6():
    """§6.1: beam_search without α ranks by the length penalty with α = 0.6, not a larger α."""
    stub = PreviousTokenStub(SHORT_OR_LONG)
    assert beam_search(stub, ONE_SOURCE, alpha=1.6)[0] == [3, EOS]
    assert beam_search(stub, ONE_SOURCE, alpha=0.6)[0] == [EOS]
    assert beam_search(stub, ONE_SOURCE)[0] == [EOS]


def test_length_penalty_defaults_to_alpha_0_6():
    """lp(Y) = ((5 + |Y|) / 6)^α with the paper's α = 0.6 unless told: lp(7) = 2^0.6."""
    assert length_penalty(7) == pytest.approx(2**0.6, rel=1e-12)
    assert length_penalty(7, 1.0) == 2.0


@pytest.mark.parametrize("alpha", [0.0, 1.6])
def test_hypothesis_scores_use_the_searchs_alpha(alpha):
    """Every Hypothesis's score is log P / lp(|Y|) with the α the search was given (not 0.6)."""
    found = beam_search_hypotheses(PreviousTokenStub(SHORT_OR_LONG), ONE_SOURCE, alpha=alpha, max_len=4)[0]
    assert len(found) >= 2
    for h in found:
        assert h.score == pytest.approx(h.log_prob / ((5 + len(h.tokens)) / 6) ** alpha, rel=1e-9)
    assert [h.score for h in found] == sorted((h.score for h in found), reverse=True)


def test_search_done_stops_exactly_when_nothing_live_can_win():
    """_search_done's two rules at their boundaries (α = 1, step 7: lp(7) = 2; maximum length 19:
    lp(19) = 4; the best live prefix has log P -4, so the bound on what it can reach is -1 and its
    score as it stands is -2): a tie cannot be beaten, so it stops; k finished hypotheses whose worst
    ties the best live prefix stop it; below either, the search goes on; with nothing finished, it
    never stops early."""
    alive = torch.tensor([[-4.0, -9.0]] * 5 + [[-INF, -INF]])
    fin_score = torch.tensor([
        [-1.0, -INF],  # the best finished ties the bound: nothing live can beat it
        [-1.5, -INF],  # the best live prefix may still beat it, and fewer than k finished
        [-1.5, -3.0],  # k finished, but the live prefix already scores better than the worst
        [-1.5, -2.0],  # k finished, the worst ties the live prefix as it stands
        [-1.5, -2.3],  # k finished, the worst just below the live prefix (-2.0) as it stands
        [-INF, -INF],  # nothing finished, nothing live with a finite log P
    ])
    row_max = torch.full((6,), 19)
    done = _search_done(alive, fin_score, row_max, step=7, alpha=1.0)
    assert done.tolist() == [True, False, False, True, False, False]


def test_keep_in_place_keeps_each_old_beams_best_child_in_its_row():
    """_keep_in_place: the best (first) new beam extending each old beam takes that old beam's row;
    the other new beams fill the free rows in increasing order, in their rank order."""
    parent = torch.tensor([[1, 1, 0, 2], [0, 0, 0, 0], [2, 2, 0, 0]])
    order = _keep_in_place(parent)  # order[:, row] = the new beam placed in that row
    assert order.tolist() == [[2, 0, 3, 1], [0, 1, 2, 3], [2, 1, 0, 3]]


def padded(rows: list[list[int]]) -> torch.Tensor:
    """Source rows as one (batch, longest) tensor, right-padded with PAD."""
    return torch.tensor([row + [PAD] * (max(map(len, rows)) - len(row)) for row in rows])


def test_decoding_reuses_the_key_value_cache_by_default(word_vocabs):
    """Greedy decoding and beam search use the cache unless use_cache=False: every step after the
    first gets a cache that already holds all positions of the prefix but the last."""
    model = eos_biased_model(word_vocabs)
    with torch.no_grad():
        model.generator.proj.weight[EOS, 0] = -EOS_BIAS  # EOS unlikely: the searches run several steps
    src = padded(sources(word_vocabs)[:2])
    seen = []
    step = model.decode_step

    def spy(memory, src_mask, tgt, cache=None):
        seen.append(None if cache is None else (cache.length, tgt.size(1)))
        return step(memory, src_mask, tgt, cache)

    model.decode_step = spy
    for decode in (greedy_decode, beam_search):
        seen.clear()
        decode(model, src, max_len=6)
        assert len(seen) >= 2 and None not in seen, decode.__name__
        assert all(held == length - 1 for held, length in seen), decode.__name__
        seen.clear()
        decode(model, src, max_len=6, use_cache=False)
        assert len(seen) >= 2 and set(seen) == {None}, decode.__name__


def test_decoding_makes_its_tensors_on_the_inputs_device_not_the_default_one(word_vocabs):
    """Every tensor the searches make goes to the device of their inputs: with torch's default
    device set elsewhere (the meta device here, as a GPU run with CPU defaults would be), a CPU
    model and source still decode, to the same output."""
    model = eos_biased_model(word_vocabs)
    src = padded(sources(word_vocabs)[:2])
    greedy, beams = greedy_decode(model, src, max_len=8), beam_search(model, src, max_len=8)
    hypotheses = beam_search_hypotheses(model, src, max_len=8)
    with torch.device("meta"):
        assert torch.equal(greedy_decode(model, src, max_len=8), greedy)
        assert beam_search(model, src, max_len=8) == beams
        again = beam_search_hypotheses(model, src, max_len=8)
        order = _keep_in_place(torch.tensor([[1, 1, 0, 2]], device="cpu"))
    assert [[h.tokens for h in found] for found in again] == [[h.tokens for h in f] for f in hypotheses]
    assert order.device.type == "cpu" and order.tolist() == [[2, 0, 3, 1]]


# --- checkpoint averaging (§6.1) on hand-made parameters -------------------------------------------


def constant_model(value: float) -> Transformer:
    """A tiny model whose every parameter is `value`: their mean is known exactly."""
    config = TransformerConfig(src_vocab_size=8, tgt_vocab_size=8, n_layers=1, d_model=8, d_ff=16,
                               n_heads=2, dropout=0.0, max_len=16)
    model = make_model(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(value)
    return model


def test_average_last_checkpoints_averages_the_last_five_by_default(tmp_path):
    """§6.1 (base model): without k, the last 5 checkpoints by step, whose parameters 2 … 6 average
    to exactly 4, written to averaged_last_5.pt."""
    for step in (1, 2, 3, 4, 5, 6):
        save_checkpoint(tmp_path / f"step_{step:08d}.pt", constant_model(float(step)), step=step)
    output = average_last_checkpoints(tmp_path)
    assert output == tmp_path / "averaged_last_5.pt"
    averaged = read_checkpoint(output)
    assert averaged["state"]["step"] == 6
    assert averaged["extra"]["averaged_steps"] == [2, 3, 4, 5, 6]
    assert averaged["extra"]["averaged_checkpoints"] == [f"step_{s:08d}.pt" for s in (2, 3, 4, 5, 6)]
    for name, tensor in averaged["state"]["model"].items():
        assert torch.equal(tensor, torch.full_like(tensor, 4.0)), name


def test_too_few_checkpoints_error_names_the_folder(tmp_path):
    """Asking for more checkpoints than a folder holds says which folder, and how many it holds."""
    for step in (1, 2):
        save_checkpoint(tmp_path / f"step_{step:08d}.pt", constant_model(float(step)), step=step)
    expected = re.escape(f"{tmp_path} holds 2 checkpoint(s) (step_*.pt), fewer than the k=5 to average")
    with pytest.raises(ValueError, match="^" + expected):
        average_last_checkpoints(tmp_path)


def test_averaging_checkpoints_of_two_runs_names_both_files(tmp_path):
    """The refusal to average checkpoints of different runs names the first file and the odd one."""
    paths = []
    for name, fingerprint in (("a.pt", "1" * 64), ("b.pt", "1" * 64), ("c.pt", "2" * 64)):
        extra = {"config_sha256": fingerprint}
        paths.append(save_checkpoint(tmp_path / name, constant_model(1.0), extra=extra))
    expected = re.escape(f"cannot average {paths[0]} and {paths[2]}: they come from different training runs")
    with pytest.raises(CheckpointError, match="^" + expected):
        average_checkpoints(paths)


def test_averaging_no_checkpoint_says_so():
    """average_checkpoints([]) refuses with a message that says what it needs."""
    expected = r"^average_checkpoints needs at least one checkpoint path, got none$"
    with pytest.raises(ValueError, match=expected):
        average_checkpoints([])


class NaNStub(PreviousTokenStub):
    """A broken 'model' whose every next-token logit is NaN: no hypothesis ever gets a log P."""

    def decode_step(self, memory, src_mask, tgt, cache=None):
        return torch.full((tgt.size(0), self.log_table.size(1)), math.nan)


def test_beam_search_gives_every_sentence_an_output_even_without_a_hypothesis():
    """beam_search returns one output per source sentence: an empty one for a sentence that ended
    with no finished hypothesis (here a model whose outputs are all NaN), not an IndexError."""
    stub = NaNStub({})
    assert beam_search_hypotheses(stub, ONE_SOURCE, max_len=3) == [[]]
    assert beam_search(stub, torch.cat([ONE_SOURCE, ONE_SOURCE]), max_len=3) == [[], []]


def exhaustive_best(log_table: torch.Tensor, max_len: int, alpha: float) -> tuple[list[int], float]:
    """The best output of a previous-token model by brute force: every sequence of non-PAD tokens
    that ends with EOS, or stops at max_len, scored by log P / lp(|Y|)."""
    logp = log_table.index_fill(1, torch.tensor([PAD]), -math.inf).log_softmax(dim=-1).double()
    best, best_score = None, -math.inf
    prefixes = [([], 0.0)]
    for length in range(1, max_len + 1):
        grown = []
        for tokens, total in prefixes:
            previous = tokens[-1] if tokens else BOS
            for token in range(1, log_table.size(1)):
                candidate, value = [*tokens, token], total + logp[previous, token].item()
                if token == EOS or length == max_len:
                    score = value / length_penalty(length, alpha)
                    if score > best_score:
                        best, best_score = candidate, score
                else:
                    grown.append((candidate, value))
        prefixes = grown
    return best, best_score


@pytest.mark.parametrize("seed", range(4))
def test_a_beam_wider_than_every_prefix_finds_the_exhaustive_best(seed):
    """With more beams than there are live prefixes (4^2 = 16 before the last step of 3), beam search
    with its early termination returns the best hypothesis, and its score, that brute force finds."""
    generator = torch.Generator().manual_seed(seed)
    stub = PreviousTokenStub({}, vocab_size=6)
    stub.log_table = torch.randn(6, 6, generator=generator) * 2.0
    tokens, score = exhaustive_best(stub.log_table, max_len=3, alpha=0.6)
    found = beam_search_hypotheses(stub, ONE_SOURCE, beam_size=16, alpha=0.6, max_len=3)[0]
    assert found[0].tokens == tokens
    assert found[0].score == pytest.approx(score, abs=1e-5)
