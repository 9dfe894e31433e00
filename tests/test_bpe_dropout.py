"""BPE-dropout (Provilkov et al., 2020; chapter 13's `sample_merges`, the recipe's `bpe_dropout`): plain
BPE at 0, characters at 1, a reproducible sample between that spells the same words, the same
distribution as Hugging Face's BPE `dropout`, a new sample of the training pairs every epoch
(companions/corpus_cache.py) and nothing else changed."""

import json
import math
import random
from collections import Counter

import pytest
from helpers import OLD_RECIPE_JSON, fails, one_line

from annotated_transformer.__main__ import main
from annotated_transformer.companions.corpus_cache import _dropout_epochs, _sample_ids, training_batches
from annotated_transformer.companions.vocabulary_files import vocabularies_sha256
from annotated_transformer.data import builtin_corpus
from annotated_transformer.helpers.errors import FieldError
from annotated_transformer.recipes import Recipe, get_recipe
from annotated_transformer.tokenization import (
    BPE,
    END_OF_WORD,
    build_vocabularies,
    encode_pairs,
    sample_merges,
    token_batches,
)


@pytest.fixture(scope="module")
def train() -> list[tuple[str, str]]:
    return builtin_corpus("train")


@pytest.fixture(scope="module")
def vocabs(train):
    return build_vocabularies(train, "bpe", vocab_size=400)


@pytest.fixture(scope="module")
def sentences(vocabs, train) -> list[list[str]]:
    """The words of the training split's source and target sentences."""
    source = vocabs.source.tokenizer.pipe(s for s, _ in train)
    return source + vocabs.target.tokenizer.pipe(t for _, t in train)


def ranks_of(bpe: BPE) -> dict:
    return {pair: rank for rank, pair in enumerate(bpe.merges)}


def toy_bpe() -> BPE:
    """Sennrich et al.'s toy corpus (chapter 13), all 13 merges with min_frequency=2."""
    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    return BPE.train([[word] * n for word, n in counts.items()], vocab_size=100, min_frequency=2)


def hf_with_dropout(bpe: BPE, dropout: float):
    """The BPE's Hugging Face tokenizer with its model's `dropout` set (an unseeded generator)."""
    from tokenizers import Tokenizer

    spec = json.loads(bpe.hf_tokenizer.to_str())
    spec["model"]["dropout"] = dropout
    return Tokenizer.from_str(json.dumps(spec))


def test_dropout_0_segments_as_plain_bpe_on_the_builtin_corpus(vocabs, sentences, train):
    bpe = vocabs.source.bpe
    assert _sample_ids(bpe, sentences, 0.0, random.Random(0)) == bpe.encode_batch(sentences)
    assert _dropout_epochs(train, vocabs, 0.0)(3) == encode_pairs(train, vocabs)
    hf = hf_with_dropout(bpe, 0.0)
    some = sentences[:500]
    assert [e.ids for e in hf.encode_batch(some, is_pretokenized=True)] == bpe.encode_batch(some)


def test_dropout_1_applies_no_merge(vocabs, sentences):
    bpe, ranks = vocabs.source.bpe, ranks_of(vocabs.source.bpe)
    rng = random.Random(0)
    for words in sentences[:500]:
        for word in words:
            assert sample_merges(word, ranks, 1.0, rng) == [*word[:-1], word[-1] + END_OF_WORD]
    ids = _sample_ids(bpe, sentences[:500], 1.0, rng)
    spelled = [[c for w in words for c in [*w[:-1], w[-1] + END_OF_WORD]] for words in sentences[:500]]
    assert ids == [bpe.vocab.lookup_indices(pieces) for pieces in spelled]
    hf = hf_with_dropout(bpe, 1.0)
    assert [e.ids for e in hf.encode_batch(sentences[:500], is_pretokenized=True)] == ids


@pytest.mark.parametrize("dropout", [0.1, 0.5])
def test_samples_vary_with_the_seed_and_spell_the_same_words(vocabs, sentences, dropout):
    bpe = vocabs.source.bpe
    samples = [_sample_ids(bpe, sentences, dropout, random.Random(seed)) for seed in range(3)]
    plain = bpe.encode_batch(sentences)
    assert samples[0] != samples[1] != samples[2] and samples[0] != plain
    for sample in samples:
        assert [bpe.words(ids) for ids in sample] == sentences  # every segmentation decodes to the text
    longer = sum(map(len, samples[0])) / sum(map(len, plain))
    assert longer > 1  # skipped merges leave more, shorter pieces


def test_the_same_seed_gives_the_same_segmentation(vocabs, sentences, train):
    bpe = vocabs.source.bpe
    assert _sample_ids(bpe, sentences, 0.1, random.Random(7)) == _sample_ids(bpe, sentences, 0.1,
                                                                           random.Random(7))
    assert _dropout_epochs(train, vocabs, 0.1, seed=3)(2) == _dropout_epochs(train, vocabs, 0.1, seed=3)(2)
    assert _dropout_epochs(train, vocabs, 0.1, seed=3)(2) != _dropout_epochs(train, vocabs, 0.1, seed=4)(2)


@pytest.mark.parametrize("word", ["newest", "widest", "lowest", "lower"])
def test_the_distribution_is_hugging_faces(word):
    """Hugging Face's BPE `dropout` draws from an unseeded generator, so the two are compared by the
    frequencies of their segmentations: N samples each, at most 0.03 apart (over 6 standard deviations)."""
    toy, n, dropout = toy_bpe(), 20_000, 0.3
    ranks, rng = ranks_of(toy), random.Random(0)
    ours = Counter(" ".join(sample_merges(word, ranks, dropout, rng)) for _ in range(n))
    theirs = Counter(" ".join(e.tokens) for e in hf_with_dropout(toy, dropout).encode_batch([[word]] * n,
                                                                                              is_pretokenized=True))
    assert len(ours) > 3  # a distribution, not one segmentation
    assert max(abs(ours[s] - theirs[s]) / n for s in set(ours) | set(theirs)) < 0.03, (ours, theirs)


def test_training_batches_resample_every_epoch_and_nothing_else(train, vocabs):
    val = builtin_corpus("val")
    val_before, vocab_before = encode_pairs(val, vocabs), vocabularies_sha256(vocabs)
    encoded = encode_pairs(train, vocabs)
    plain = token_batches(encoded, 800, seed=0)
    assert [b.src.tolist() for b in training_batches(train, encoded, vocabs, 0.0, 800, seed=0)(1)] == \
        [b.src.tolist() for b in plain(1)]  # dropout 0: chapter 13's batches
    epochs = training_batches(train, encoded, vocabs, 0.1, 800, seed=0)
    first, again, second = epochs(0), epochs(0), epochs(1)
    assert [b.src.tolist() for b in first] == [b.src.tolist() for b in again]  # an epoch is reproducible
    assert first.data != second.data  # a new sample every epoch ...
    assert first.data != encoded and len(first.data) == len(encoded)  # ... of the same pairs
    # never affected:
    assert encode_pairs(val, vocabs) == val_before and vocabularies_sha256(vocabs) == vocab_before
    assert json.loads(vocabs.source.bpe.hf_tokenizer.to_str())["model"]["dropout"] is None
    two = [training_batches(train, encoded, vocabs, 0.1, 800, seed=0, rank=rank, world_size=2)(1)
           for rank in (0, 1)]
    assert two[0].data == two[1].data == second.data  # every rank batches the same sample (its share)
    shares = [set(map(tuple, share.batches)) for share in two]
    assert len(two[0]) == len(two[1]) and not shares[0] & shares[1]


def test_a_recipe_without_the_setting_loads_with_0():
    assert "bpe_dropout" not in OLD_RECIPE_JSON  # a recipe.json written before the setting existed
    assert Recipe.from_dict(OLD_RECIPE_JSON).bpe_dropout == 0.0
    assert get_recipe("builtin").bpe_dropout == 0.0
    assert get_recipe("builtin", bpe_dropout=0.1).bpe_dropout == 0.1


@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5, math.nan])
def test_a_rate_outside_0_to_1_is_refused_naming_the_setting(value, capsys):
    with pytest.raises(FieldError) as info:
        get_recipe("builtin", bpe_dropout=value)
    assert info.value.field == "bpe_dropout" and one_line(info).startswith("bpe_dropout must be in [0, 1)")
    error = fails(capsys, main, "train", "--bpe-dropout", value)
    assert error.splitlines()[-1].endswith(f"--bpe-dropout must be in [0, 1), got {float(value)!r}"), error


def test_word_vocabularies_ignore_bpe_dropout(train):
    """Like vocab_size, the setting means nothing to word vocabularies: their batches are the plain ones."""
    words = build_vocabularies(train[:300], "word")
    encoded = encode_pairs(train[:300], words)
    batches = training_batches(train[:300], encoded, words, 0.1, 800, seed=0)
    assert [b.src.tolist() for b in batches(1)] == [b.src.tolist() for b in token_batches(encoded, 800)(1)]
    with pytest.raises(ValueError, match="BPE-dropout needs a BPE vocabulary"):
        _dropout_epochs(train[:300], words, 0.1)
