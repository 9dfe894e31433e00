"""Promises of the input checks at their boundaries (issue 50): each check accepts the value exactly at
its boundary and refuses the value one step past it, so that a `<` written for `<=` (or the reverse),
a bound moved by one, or a forgotten NaN or infinity shows.

The checks: the counts of `check_count` (helpers), the training configuration (`TrainConfig`, whose
checks are companions/training_checks.py), the model's (`TransformerConfig`), a recipe's own fields
(`Recipe`), decoding's beam settings and lengths, `Trainer.end_schedule_at`, and the translation
checks (companions/translation_checks.py: batches of one sentence, unreadable and too long sentences,
scored texts, vocabulary sizes)."""

import math

import pytest
import torch
from helpers import small_config, small_model, tiny_trainer

from annotated_transformer.companions.translation_checks import (
    _UNREADABLE_SHARE,
    InputWarning,
    TrainingWarning,
    TranslationInfo,
    batch_warning,
    check_scored_texts,
    check_source_lengths,
    check_vocabulary_sizes,
    input_warning,
)
from annotated_transformer.data import builtin_corpus
from annotated_transformer.decoding import beam_search, check_beam_settings, greedy_decode
from annotated_transformer.helpers.errors import FieldError
from annotated_transformer.helpers.input_checks import check_count
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.recipes import get_recipe
from annotated_transformer.tokenization import SPECIALS, VocabularyError
from annotated_transformer.training import TrainConfig
from annotated_transformer.translator import Translator

INF, NAN = math.inf, math.nan
BELOW_ONE = 1 - 1e-9  # the largest share tested below 1
TINY = 1e-300  # the smallest positive value tested


def cases(boundaries: list[tuple[str, list, list]]) -> list:
    """pytest parameters (field, value, accepted) from (field, accepted values, refused values)."""
    return [pytest.param(field, value, ok, id=f"{field}={value!r}-{'ok' if ok else 'refused'}")
            for field, accepted, refused in boundaries
            for ok, values in ((True, accepted), (False, refused)) for value in values]


def assert_field_check(make, field: str, value, accepted: bool) -> None:
    """`make(**{field: value})` builds when `accepted`, else raises the FieldError naming `field`."""
    if accepted:
        make(**{field: value})
        return
    with pytest.raises(FieldError) as error:
        make(**{field: value})
    assert error.value.field == field


# --- check_count ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("at_least", "value", "accepted"), [
    (1, 1, True), (1, 0, False), (0, 0, True), (0, -1, False), (5, 5, True), (5, 4, False)])
def test_a_count_is_accepted_at_its_least_and_refused_one_below(at_least, value, accepted):
    """check_count(value, at_least): `at_least` itself passes (a `>` for `>=` would refuse it), one less
    is refused (a bound of at_least - 1 would pass it); for the default 1, 0 is refused."""
    if accepted:
        assert check_count(value, "count", at_least) == value
    else:
        message = f"count must be a whole number, at least {at_least}, got {value}"
        with pytest.raises(ValueError, match=message):
            check_count(value, "count", at_least)


# --- TrainConfig --------------------------------------------------------------------------------------

TRAIN_BOUNDARIES = [
    ("max_steps", [1], [0]),
    ("accumulate", [1], [0]),
    ("warmup", [1], [0]),
    ("log_every", [0], [-1]),  # 0: only at checkpoints and at the end
    ("checkpoint_every", [0], [-1]),  # 0: never
    ("cooldown", [0.0, 1.0], [-1e-9, 1 + 1e-9, NAN]),  # a share of the steps, both ends included
    ("label_smoothing", [0.0, BELOW_ONE], [-1e-9, 1.0, NAN]),  # 1 would leave no target at all
    ("rdrop_alpha", [0.0, 1e300], [-1e-9, INF, NAN]),
    ("lr_factor", [TINY, 1e300], [0.0, -1e-9, INF, NAN]),
    ("clip_grad_norm", [None, TINY, 1e300], [0.0, -1e-9, INF, NAN]),
]


@pytest.mark.parametrize(("field", "value", "accepted"), cases(TRAIN_BOUNDARIES))
def test_train_config_boundaries(field, value, accepted):
    """Every checked field of a TrainConfig at its boundary (accepted) and one step past it (refused,
    naming the field)."""
    assert_field_check(TrainConfig, field, value, accepted)


@pytest.mark.parametrize(("last_step", "accepted"), [(1, True), (5, True), (0, False), (6, False)])
def test_the_schedule_ends_at_a_step_from_one_to_max_steps(last_step, accepted):
    """Trainer.end_schedule_at(last_step) of a 5-step trainer: 1 and 5 are steps of the run, 0 and 6
    are not."""
    trainer = tiny_trainer(max_steps=5)
    if accepted:
        trainer.end_schedule_at(last_step)
        assert trainer.last_step == last_step
    else:
        with pytest.raises(ValueError, match=r"last_step must lie in \[1, max_steps=5\]"):
            trainer.end_schedule_at(last_step)


# --- TransformerConfig (the model part of a recipe) ----------------------------------------------------

MODEL_BOUNDARIES = [
    ("dropout", [0.0, BELOW_ONE], [-1e-9, 1.0, NAN]),  # 1 would drop everything
    ("attention_dropout", [0.0, BELOW_ONE], [-1e-9, 1.0, NAN]),
    ("ffn_dropout", [0.0, BELOW_ONE], [-1e-9, 1.0, NAN]),
    ("n_layers", [1], [0]),
    ("n_decoder_layers", [None, 1], [0]),
    ("d_ff", [1], [0]),
    ("n_heads", [1], [0]),
    ("max_len", [1], [0]),
    ("src_vocab_size", [1], [0]),
]


@pytest.mark.parametrize(("field", "value", "accepted"), cases(MODEL_BOUNDARIES))
def test_model_config_boundaries(field, value, accepted):
    """The model's regularizers are shares in [0, 1), its sizes positive (vocabularies not shared, so
    that a source vocabulary of 1 is a model of its own)."""
    unshared = lambda **fields: small_config(share_embeddings=False, **fields)
    assert_field_check(unshared, field, value, accepted)


# --- Recipe ----------------------------------------------------------------------------------------------

RECIPE_BOUNDARIES = [
    ("vocab_size", [len(SPECIALS) + 1], [len(SPECIALS)]),  # BPE: more pieces than the special tokens
    ("min_freq", [1], [0]),
    ("max_tokens", [1], [0]),
    ("average_last", [1], [0]),
    ("beam_size", [1], [0]),
    ("checkpoint_every", [1], [0]),  # a Trainer's 0 means never, but a run resumes from checkpoints
    ("bpe_dropout", [0.0, BELOW_ONE], [-1e-9, 1.0, NAN]),  # 1 would leave every word in characters
    ("alpha", [0.0, 1e300], [-1e-9, INF, NAN]),
    ("max_minutes", [None, TINY], [0.0, -1e-9, NAN]),
]


@pytest.mark.parametrize(("field", "value", "accepted"), cases(RECIPE_BOUNDARIES))
def test_recipe_boundaries(field, value, accepted):
    """Every checked field of a recipe (a BPE one: the builtin recipe) at its boundary and one past."""
    assert_field_check(get_recipe("builtin").replace, field, value, accepted)


@pytest.mark.parametrize(("value", "accepted"), [(1, True), (0, False)])
def test_a_word_vocabulary_needs_only_a_positive_size(value, accepted):
    """A word vocabulary ignores vocab_size, but it still counts: 1 is accepted (the BPE bound of the
    specials does not apply), 0 is refused."""
    assert_field_check(get_recipe("builtin", vocab="word").replace, "vocab_size", value, accepted)


# --- decoding ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("beam_size", "alpha", "accepted"), [
    (1, 0.6, True), (0, 0.6, False), (4, 0.0, True), (4, 1e300, True), (4, -1e-9, False), (4, INF, False),
    (4, NAN, False)])
def test_beam_settings_boundaries(beam_size, alpha, accepted):
    """A beam of 1 (greedy) is a beam and 0 is not; α = 0 (no length penalty) is accepted, any negative,
    infinite or NaN α refused."""
    if accepted:
        check_beam_settings(beam_size, alpha)
    else:
        with pytest.raises(ValueError, match="beam_size" if beam_size < 1 else "alpha"):
            check_beam_settings(beam_size, alpha)


@pytest.mark.parametrize(("max_len", "accepted"), [(1, True), (12, True), (0, False), (13, False)])
def test_the_most_tokens_to_generate_lie_between_one_and_the_models_table(max_len, accepted):
    """Beam search's max_len: 1 and the model's max_len (12) are accepted, 0 and 13 refused."""
    model, src = small_model(max_len=12), torch.tensor([[5, 6, 7]])
    if accepted:
        assert len(beam_search(model, src, beam_size=2, max_len=max_len)[0]) <= max_len
    else:
        with pytest.raises(ValueError, match="max_len"):
            beam_search(model, src, beam_size=2, max_len=max_len)


@pytest.mark.parametrize(("length", "accepted"), [(12, True), (13, False)])
def test_a_source_as_long_as_the_models_table_is_decoded_and_one_longer_refused(length, accepted):
    """A model of max_len 12 reads a source of 12 positions; one of 13 is refused, by decoding and by
    the translator's check (`check_source_lengths`)."""
    model, src = small_model(max_len=12), torch.full((1, length), 5)
    if accepted:
        greedy_decode(model, src, max_len=2)
        check_source_lengths([[5] * length], 12)
    else:
        with pytest.raises(ValueError, match=r"the source has 13 positions .* max_len=12"):
            greedy_decode(model, src, max_len=2)
        with pytest.raises(ValueError, match=r"sentence 1 has 13 tokens.*max_len 12"):
            check_source_lengths([[5] * length], 12)


# --- translation checks ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("lengths", "max_tokens", "warned"), [
    ([(5, 4)] * 4, 10, False),  # padded size 5: two fit in 10 tokens exactly
    ([(5, 4)] * 4, 9, True),  # one step less: each pair a batch of its own
    ([(3, 4)] * 4, 9, True),  # the target's size counts its BOS (4 + 1 = 5), not 4
    ([(5, 4)] * 2 + [(1, 1)] * 2, 9, False),  # half the pairs alone: not most
    ([(5, 4)] * 3 + [(1, 1)], 9, True),  # one more: most
])
def test_batches_of_one_sentence_are_warned_about_from_just_past_the_boundary(lengths, max_tokens, warned):
    """batch_warning: a pair is alone when twice its padded size (max(source, target + 1)) exceeds
    max_tokens, and the warning comes when more than half the pairs are alone."""
    warning = batch_warning(lengths, max_tokens)
    assert isinstance(warning, TrainingWarning) if warned else warning is None


def test_a_sentence_is_unreadable_from_exactly_the_unknown_share():
    """A sentence of 1000 tokens with _UNREADABLE_SHARE of them unknown (500) is unreadable and warned
    about; with one unknown token fewer, it is not."""
    at = round(_UNREADABLE_SHARE * 1000)
    assert at == 500  # the documented share: half
    assert TranslationInfo("", 1000, at, False).unreadable
    assert not TranslationInfo("", 1000, at - 1, False).unreadable
    assert "mostly <unk>" in input_warning([TranslationInfo("", 1000, at, False)], None)
    assert input_warning([TranslationInfo("", 1000, at - 1, False)], None) is None


def test_a_sentence_as_long_as_the_longest_in_training_is_not_too_long_and_one_token_more_is(word_vocabs):
    """Translator(max_source_tokens=L): a sentence of L tokens is not reported, one of L + 1 is."""
    sentence = builtin_corpus("test")[0][0]
    longest = len(word_vocabs.source.encode(sentence))
    torch.manual_seed(0)
    config = TransformerConfig(src_vocab_size=len(word_vocabs.source), tgt_vocab_size=len(word_vocabs.target),
                               n_layers=1, d_model=32, d_ff=64, n_heads=2, max_len=64, share_embeddings=False)
    translator = Translator(make_model(config), word_vocabs, "cpu", beam_size=1, max_source_tokens=longest)
    longer = sentence + " " + sentence.split()[0]
    assert len(word_vocabs.source.encode(longer)) == longest + 1
    with pytest.warns(InputWarning, match="1 of 2 sentence"):
        infos = translator.translate_with_info([sentence, longer])
    assert [info.too_long for info in infos] == [False, True]


@pytest.mark.parametrize(("hypotheses", "references", "accepted"), [
    (["a"], ["a"], True), (["a"], ["a", "b"], False), (["a", "b"], ["a"], False), ([], [], False)])
def test_bleu_needs_one_reference_per_hypothesis_and_at_least_one(hypotheses, references, accepted):
    """check_scored_texts: as many references as hypotheses, one at least."""
    if accepted:
        assert check_scored_texts(hypotheses, references) == (hypotheses, references)
    else:
        with pytest.raises(ValueError):
            check_scored_texts(hypotheses, references)


@pytest.mark.parametrize("extra", [0, 1, -1])
def test_a_model_takes_only_vocabularies_of_its_own_sizes(word_vocabs, extra):
    """check_vocabulary_sizes: the vocabularies' own sizes pass, one more or one fewer target token
    is another run's vocabulary."""
    sizes = {"src_vocab_size": len(word_vocabs.source), "tgt_vocab_size": len(word_vocabs.target) + extra}
    config = TransformerConfig(**sizes, share_embeddings=False)
    if extra == 0:
        check_vocabulary_sizes(config, word_vocabs)
    else:
        with pytest.raises(VocabularyError, match=r"use the vocab\.json of the run"):
            check_vocabulary_sizes(config, word_vocabs)
