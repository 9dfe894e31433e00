"""annotated_transformer.companions.translation_checks and attention_grid: what chapter 14's training
and translating say about their input, and the grid that draws attention maps."""

import matplotlib
import pytest
import torch
from helpers import one_line

from annotated_transformer.companions.translation_checks import (
    _UNREADABLE_SHARE,
    TrainingWarning,
    TranslationInfo,
    batch_warning,
    check_scored_texts,
    check_scoring_input,
    check_source_lengths,
    check_vocabulary_sizes,
    input_warning,
)
from annotated_transformer.data import builtin_corpus
from annotated_transformer.helpers.attention_grid import plot_attention
from annotated_transformer.model import TransformerConfig
from annotated_transformer.tokenization import VocabularyError, build_vocabularies


def test_batches_of_single_sentences_are_warned_of_naming_the_setting():
    assert batch_warning([(10, 9)] * 10, 1500) is None
    warning = batch_warning([(10, 9)] * 6 + [(2, 1)] * 4, 15)
    assert isinstance(warning, TrainingWarning) and isinstance(warning, UserWarning)
    assert str(warning).startswith("most steps train on a single sentence pair: 60% of the training pairs")
    assert [setting.name for setting in warning.settings] == ["max_tokens"]
    assert str(batch_warning([(10, 9)] * 4, 3)).startswith("every step trains on a single")


def test_what_the_model_could_not_read_is_said_in_one_line():
    fine = TranslationInfo("A dog.", 4, 0, False)
    unreadable = TranslationInfo("", 10, 8, False)
    long = TranslationInfo("...", 300, 0, True)
    assert not fine.unreadable and unreadable.unreadable and unreadable.unknown_share == 0.8
    assert TranslationInfo("", 2, 1, False).unknown_share == _UNREADABLE_SHARE
    assert input_warning([fine, fine], 100) is None
    message = input_warning([fine, unreadable, long], 100)
    assert "\n" not in message
    assert message.startswith("1 of 3 sentence(s) are mostly <unk>, words or characters the vocabulary lacks "
                              "(sentence 2: 80% of 10 tokens)")
    assert ("1 of 3 sentence(s) are longer than the longest the model was trained on, 100 tokens "
            "(sentence 3: 300 tokens)") in message
    many = input_warning([unreadable] * 5, None)
    assert "sentence 3: 80% of 10 tokens; …" in many


def test_a_sentence_longer_than_the_positional_table_is_refused_by_number():
    check_source_lengths([[1] * 5, [1] * 8], 8)
    with pytest.raises(ValueError, match=r"^sentence 2 has 9 tokens, more than the model can read "
                                         r"\(max_len 8 positions\)") as info:
        check_source_lengths([[1] * 5, [1] * 9], 8)
    one_line(info)


def test_vocabularies_of_other_sizes_are_refused():
    vocabs = build_vocabularies(builtin_corpus("train")[:200], "bpe", 300)
    size = len(vocabs.source)
    check_vocabulary_sizes(TransformerConfig(src_vocab_size=size, tgt_vocab_size=size), vocabs)
    with pytest.raises(VocabularyError, match=rf"expects vocabularies of 99/{size} tokens, the vocabulary "
                                              rf"file has {size}/{size}"):
        other = TransformerConfig(src_vocab_size=99, tgt_vocab_size=size, share_embeddings=False)
        check_vocabulary_sizes(other, vocabs)


def test_what_bleu_scores_is_checked():
    assert check_scored_texts(("A dog.",), iter(["A cat."])) == (["A dog."], ["A cat."])
    with pytest.raises(ValueError, match="one sentence per hypothesis, got 1 hypotheses but 2 references"):
        check_scored_texts(["A dog."], ["A cat.", "A cow."])
    with pytest.raises(TypeError, match=r"translator must be a Translator .*got 'model\.pt'$"):
        check_scoring_input("model.pt", [("Ein Hund.", "A dog.")])

    class Echo:
        def translate(self, sentences, beam_size=None):
            return sentences

    assert check_scoring_input(Echo(), [("Ein Hund.", "A dog.")]) == [("Ein Hund.", "A dog.")]


def test_the_attention_grid_has_a_heatmap_per_layer_and_head():
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    weights = torch.softmax(torch.randn(2, 3, 4, 5), dim=-1)
    figure = plot_attention(weights, list("abcd"), list("vwxyz"), "test")
    assert len(figure.axes) == 6 and figure.axes[0].get_title() == "head 1"
    assert [label.get_text() for label in figure.axes[3].get_xticklabels()] == list("vwxyz")  # last row
    assert not any(label.get_text() for label in figure.axes[0].get_xticklabels())  # only the last row's
    plt.close(figure)
