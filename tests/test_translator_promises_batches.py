"""Promises of chapter 14's `Translator` about its batches and what it says of its input, at values
where a bug shows: sentences are decoded sorted by length, in batches whose padded size (times the
beam) stays within `batch_tokens` and which hold as many sentences as fit, a sentence longer than
`batch_tokens` alone, and the outputs come back in the given order; `translate` passes its
`batch_tokens` on; a sentence is "too long" only when it is longer than the longest of the training
data (not as long); and the warning about unreadable sentences points at the caller of `translate`.

The decoders are the real ones, wrapped to record the shape of each batch they are given. Every test
calls the Translator method whose promise it holds."""

import warnings

import pytest
from test_translator_promises import GERMAN, NINE_TOKENS, RUSSIAN, decoded, eos_biased_model

import annotated_transformer.translator as translator_module
from annotated_transformer.translator import InputWarning, Translator


@pytest.fixture
def batch_shapes(monkeypatch):
    """The (sentences, padded length) of every batch that greedy decoding or beam search is given, in
    the order they are decoded; the decoding itself is the real one."""
    shapes = []
    real_greedy, real_beam = translator_module.greedy_decode, translator_module.beam_search

    def greedy(model, src, *args, **kwargs):
        shapes.append(tuple(src.shape))
        return real_greedy(model, src, *args, **kwargs)

    def beam(model, src, *args, **kwargs):
        shapes.append(tuple(src.shape))
        return real_beam(model, src, *args, **kwargs)

    monkeypatch.setattr(translator_module, "greedy_decode", greedy)
    monkeypatch.setattr(translator_module, "beam_search", beam)
    return shapes


@pytest.fixture(scope="module")
def model(word_vocabs):
    return eos_biased_model(word_vocabs)


def encoded(word_vocabs, sentences):
    return word_vocabs.source.encode_batch(sentences)


def test_a_sentence_longer_than_batch_tokens_is_decoded_alone(word_vocabs, model, batch_shapes):
    """batch_tokens=1: each sentence (17, 7 and 12 tokens) is longer than a batch may be, and is decoded
    in a batch of its own, shortest first; the outputs come back in the given order."""
    ids = encoded(word_vocabs, [GERMAN[0], GERMAN[4], GERMAN[6]])
    assert [len(row) for row in ids] == [17, 7, 12]
    translator = Translator(model, word_vocabs, "cpu", beam_size=1)
    assert translator.translate_ids(ids, batch_tokens=1) == decoded(model, ids, 1, 0.6)
    assert batch_shapes == [(1, 7), (1, 12), (1, 17)]


def test_a_batch_holds_as_many_sentences_as_fit_in_exactly_batch_tokens(word_vocabs, model, batch_shapes):
    """Four sentences of 9 tokens with batch_tokens=18 (beam 1): two sentences fill the 18 tokens
    exactly, so the batches are two of two sentences (not four of one, nor two, one and one)."""
    ids = encoded(word_vocabs, [NINE_TOKENS] * 4)
    assert [len(row) for row in ids] == [9] * 4
    translator = Translator(model, word_vocabs, "cpu", beam_size=1)
    assert translator.translate_ids(ids, batch_tokens=18) == decoded(model, ids, 1, 0.6)
    assert batch_shapes == [(2, 9), (2, 9)]


def test_a_batchs_tokens_count_every_hypothesis_of_the_beam(word_vocabs, model, batch_shapes):
    """With a beam of 2, a sentence of 9 tokens counts 18 tokens: batch_tokens=36 holds two of them per
    batch (the beam multiplies the source tokens, it does not divide them)."""
    ids = encoded(word_vocabs, [NINE_TOKENS] * 4)
    translator = Translator(model, word_vocabs, "cpu", beam_size=2)
    assert translator.translate_ids(ids, batch_tokens=36) == decoded(model, ids, 2, 0.6)
    assert batch_shapes == [(2, 9), (2, 9)]


def test_sentences_are_batched_sorted_by_length_and_come_back_in_the_given_order(
    word_vocabs, model, batch_shapes
):
    """Sentences of 17, 7 and 7 tokens with batch_tokens=17: the two short ones are decoded together
    (padded to 7, 14 tokens), the long one alone, so no batch's padded size passes batch_tokens; the
    translations are in the order of the sentences given."""
    ids = encoded(word_vocabs, [GERMAN[0], GERMAN[4], GERMAN[5]])
    assert [len(row) for row in ids] == [17, 7, 7]
    translator = Translator(model, word_vocabs, "cpu", beam_size=1)
    assert translator.translate_ids(ids, batch_tokens=17) == decoded(model, ids, 1, 0.6)
    assert batch_shapes == [(2, 7), (1, 17)]
    assert all(rows * length <= 17 for rows, length in batch_shapes)


def test_translate_batches_by_the_batch_tokens_it_is_given(word_vocabs, model, batch_shapes):
    """translate(..., batch_tokens=18) batches four sentences of 9 tokens two by two (not all four
    together, as the default 8000 would)."""
    translator = Translator(model, word_vocabs, "cpu", beam_size=1)
    expected = [word_vocabs.target.decode(row)
                for row in decoded(model, encoded(word_vocabs, [NINE_TOKENS] * 4), 1, 0.6)]
    assert translator.translate([NINE_TOKENS] * 4, batch_tokens=18) == expected
    assert batch_shapes == [(2, 9), (2, 9)]


def test_a_sentence_as_long_as_the_longest_of_the_training_data_is_not_too_long(word_vocabs, model):
    """With max_source_tokens=9, a sentence of 9 tokens is not too long (no warning); with 8, it is."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputWarning)
        info, = Translator(model, word_vocabs, "cpu", beam_size=1,
                           max_source_tokens=9).translate_with_info([NINE_TOKENS])
    assert (info.source_tokens, info.too_long) == (9, False)
    with pytest.warns(InputWarning, match="longer than the longest the model was trained on, 8 tokens"):
        info, = Translator(model, word_vocabs, "cpu", beam_size=1,
                           max_source_tokens=8).translate_with_info([NINE_TOKENS])
    assert info.too_long


@pytest.mark.parametrize("method", ["translate", "translate_with_info"])
def test_the_warning_about_unreadable_sentences_points_at_the_caller(word_vocabs, model, method):
    """The InputWarning names the line that called translate (or translate_with_info): this file, not
    the translator's module nor pytest's."""
    translator = Translator(model, word_vocabs, "cpu", beam_size=1)
    with pytest.warns(InputWarning, match="mostly <unk>") as record:
        getattr(translator, method)([RUSSIAN])
    assert [w.filename for w in record if w.category is InputWarning] == [__file__]

