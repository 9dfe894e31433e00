"""Promises of greedy_decode and beam_search_hypotheses (§6.1), each test calling them itself: the
paper's defaults (beam 4, α = 0.6, the key/value cache), evaluation mode while searching, a greedy
output as wide as its longest sentence, the cache kept for the sentences still decoded, each old
beam's best child kept in its row, and tensors made on the inputs' device.

Stub "models" with hand-set next-token probabilities that depend only on the previous token make
every ranking known."""

import torch
from helpers import small_config

from annotated_transformer.batching import BOS, EOS, PAD
from annotated_transformer.decoding import beam_search_hypotheses, greedy_decode, length_penalty
from annotated_transformer.model import make_model


class RecordingCache:
    """A stand-in key/value cache that records how the search moves its rows."""

    def __init__(self, log: list):
        self.log = log

    def select(self, indices):
        self.log.append(("select", indices.tolist()))
        return RecordingCache(self.log)

    def reorder_(self, indices):
        self.log.append(("reorder", indices.tolist()))


class PreviousTokenStub:
    """A decoding 'model' whose next-token probabilities depend only on the previous token
    (`probs[previous][token]`, about 1e-12 where not given). It records the cache each step gets."""

    def __init__(self, probs: dict[int, dict[int, float]], vocab_size: int = 9):
        table = torch.full((vocab_size, vocab_size), 1e-12, dtype=torch.float64)
        for previous, row in probs.items():
            for token, p in row.items():
                table[previous, token] = p
        self.log_table = table.log()
        self.caches = []  # the cache given to each decode_step call
        self.cache_log = []  # ("select" | "reorder", rows) in order

    def encode(self, src, src_mask):
        return torch.zeros(src.size(0), src.size(1), 1, device=src.device)

    def init_cache(self):
        return RecordingCache(self.cache_log)

    def decode_step(self, memory, src_mask, tgt, cache=None):
        self.caches.append(cache)
        return self.log_table[tgt[:, -1]]


ONE_SOURCE = torch.tensor([[3, 4, 5]])
# Beam 4 keeps the four likeliest first tokens 3-6 and never sees 7, whose only continuation is a
# sure EOS: beam 5 finds [7, EOS]; beam 4 ends with [3, 8, EOS].
FIFTH_FIRST = {BOS: {3: 0.22, 4: 0.21, 5: 0.2, 6: 0.19, 7: 0.17, 8: 0.01},
               **{t: {EOS: 0.1, 8: 0.9} for t in (3, 4, 5, 6)}, 7: {EOS: 1.0}, 8: {8: 0.5, EOS: 0.5}}
# [EOS] (P = 0.4, score -0.92) against [3, EOS] (P = 0.342): score -0.98 at α = 0.6, -0.84 at α = 1.6.
SHORT_OR_LONG = {BOS: {EOS: 0.4, 3: 0.6}, 3: {EOS: 0.57, 4: 0.43}, 4: {EOS: 1.0}}
# Never ends; distinct probabilities everywhere, so no two prefixes tie.
NEVER_ENDS = {BOS: {3: 0.5, 4: 0.3, 5: 0.2}, 3: {3: 0.1, 4: 0.6, 5: 0.3}, 4: {3: 0.45, 4: 0.35, 5: 0.2},
              5: {3: 0.25, 4: 0.15, 5: 0.6}}


def tokens_of(found) -> list[list[list[int]]]:
    return [[h.tokens for h in sentence] for sentence in found]


def test_beam_search_hypotheses_defaults_to_the_papers_beam_of_4():
    """§6.1: without a beam size, at most 4 hypotheses, those a beam of 4 finds (a fifth beam would
    find [7, EOS])."""
    found = beam_search_hypotheses(PreviousTokenStub(FIFTH_FIRST), ONE_SOURCE, max_len=4)
    assert tokens_of(found) == tokens_of(beam_search_hypotheses(PreviousTokenStub(FIFTH_FIRST), ONE_SOURCE,
                                                                beam_size=4, max_len=4))
    assert 1 <= len(found[0]) <= 4
    assert found[0][0].tokens == [3, 8, EOS]
    five = beam_search_hypotheses(PreviousTokenStub(FIFTH_FIRST), ONE_SOURCE, beam_size=5, max_len=4)
    assert five[0][0].tokens == [7, EOS]


def test_beam_search_hypotheses_defaults_to_the_papers_alpha_of_0_6():
    """§6.1: without α, hypotheses are scored log P / lp(|Y|) with α = 0.6, so [EOS] ranks first."""
    found = beam_search_hypotheses(PreviousTokenStub(SHORT_OR_LONG), ONE_SOURCE, max_len=4)[0]
    assert found[0].tokens == [EOS]
    assert len(found) >= 2
    for h in found:
        assert abs(h.score - h.log_prob / length_penalty(len(h.tokens), 0.6)) < 1e-9


def test_searches_reuse_the_cache_by_default_also_after_sentences_finish():
    """use_cache defaults to True, and the sentences still decoded keep their cache (selected, not
    dropped) when others finish: every step gets a cache."""
    src = torch.tensor([[3, PAD, PAD], [3, 4, 5]])  # maximum lengths 51 and 53: rows finish apart
    stub = PreviousTokenStub(NEVER_ENDS)
    assert greedy_decode(stub, src).shape == (2, 53)
    assert len(stub.caches) == 53 and None not in stub.caches
    assert ("select", [1]) in stub.cache_log
    stub = PreviousTokenStub(NEVER_ENDS)
    found = beam_search_hypotheses(stub, src, beam_size=2)
    assert [len(sentence[0].tokens) for sentence in found] == [51, 53]
    assert len(stub.caches) == 53 and None not in stub.caches


def test_greedy_output_is_as_wide_as_its_longest_sentence():
    """Greedy decoding stops once every sentence has its EOS: the output has as many columns as the
    longest sentence, not max_len."""
    stub = PreviousTokenStub({BOS: {3: 0.9, EOS: 0.1}, 3: {EOS: 0.8, 4: 0.2}, 4: {EOS: 1.0}})
    out = greedy_decode(stub, torch.tensor([[3, 4], [5, PAD]]), max_len=10)
    assert out.tolist() == [[3, EOS], [3, EOS]]
    assert len(stub.caches) == 2


def test_beam_search_keeps_each_old_beams_best_child_in_its_row():
    """With as many beams as before, the best extension of each old beam stays in that beam's row, so
    the cache is reordered little: in the rows given to the cache, every old row that is extended
    is continued in its own row."""
    stub = PreviousTokenStub(NEVER_ENDS)
    beam_search_hypotheses(stub, ONE_SOURCE, beam_size=3, max_len=6)
    reorders = [rows for kind, rows in stub.cache_log if kind == "reorder"]
    assert len(reorders) >= 3
    assert any(rows != [0, 1, 2] for rows in reorders)  # beams do move
    for rows in reorders:
        assert all(rows[old] == old for old in set(rows)), rows


def test_beam_search_decodes_in_evaluation_mode_and_restores_training():
    """No dropout while searching (the same hypotheses as in eval mode), and the model's training
    mode is given back."""
    torch.manual_seed(0)
    model = make_model(small_config(src_vocab_size=12, tgt_vocab_size=12, dropout=0.5))
    model.generator.proj.weight = torch.nn.Parameter(torch.randn(12, model.config.d_model))
    src = torch.tensor([[3, 4, 5, 6], [7, 8, PAD, PAD]])
    model.eval()
    expected = beam_search_hypotheses(model, src, beam_size=3, max_len=8)
    model.train()
    for _ in range(3):
        found = beam_search_hypotheses(model, src, beam_size=3, max_len=8)
        assert model.training
        assert tokens_of(found) == tokens_of(expected)
        for sentence, again in zip(found, expected, strict=True):
            assert [h.score for h in sentence] == [h.score for h in again]


def test_beam_search_makes_its_tensors_on_the_sources_device_when_sentences_finish_apart():
    """With torch's default device elsewhere (meta), a CPU search whose sentences finish at
    different steps (and leave the batch) still runs, to the same hypotheses."""
    src = torch.tensor([[3, PAD, PAD], [3, 4, 5]])
    expected = beam_search_hypotheses(PreviousTokenStub(NEVER_ENDS), src, beam_size=2)
    stub = PreviousTokenStub(NEVER_ENDS)
    with torch.device("meta"):
        found = beam_search_hypotheses(stub, src, beam_size=2)
    assert tokens_of(found) == tokens_of(expected)
    assert [len(sentence[0].tokens) for sentence in found] == [51, 53]
