"""Tokenization (§5.1): spaCy tokenizers, detokenize, word vocabularies, BPE, text encoders, encoded
pairs and token batches. (The vocabulary file and the cache of encoded corpora, machinery, have
tests/test_vocabulary_files.py and tests/test_corpus_cache.py.)

No test needs the network or Multi30k: the data is the built-in corpus and small hand-made texts.
"""

import os
import random
import subprocess
import sys

import pytest
import torch
from helpers import one_line

import annotated_transformer.helpers.files as files
from annotated_transformer.batching import BOS, EOS, PAD, UNK, Batch
from annotated_transformer.companions.vocabulary_files import _bpe_from_json, _bpe_to_json
from annotated_transformer.data import builtin_corpus
from annotated_transformer.tokenization import (
    BPE,
    END_OF_WORD,
    SPECIALS,
    BatchSequence,
    EncodedPairs,
    SpacyTokenizer,
    TextEncoder,
    Vocab,
    Vocabularies,
    VocabularyError,
    build_vocab_from_iterator,
    build_vocabularies,
    detokenize,
    encode_pairs,
    token_batches,
)

PAIRS = [("Ein Hund läuft.", "A dog runs."), ("Eine Katze schläft.", "A cat sleeps."),
         ("Zwei Hunde laufen.", "Two dogs run.")]


@pytest.fixture(scope="module")
def train() -> list[tuple[str, str]]:
    return builtin_corpus("train")


@pytest.fixture(scope="module")
def bpe_vocabs(train) -> Vocabularies:
    return build_vocabularies(train, "bpe", vocab_size=400)


@pytest.fixture(scope="module")
def word_vocabs(train) -> Vocabularies:
    return build_vocabularies(train, "word")


@pytest.fixture(scope="module")
def tiny() -> Vocabularies:
    return build_vocabularies(PAIRS, "word", min_freq=1)


@pytest.fixture(scope="module")
def encoded(bpe_vocabs) -> EncodedPairs:
    return encode_pairs(builtin_corpus("val"), bpe_vocabs)


# --- Vocab and build_vocab_from_iterator ---------------------------------------------------------

def test_vocab_specials_unknown_and_lookups():
    vocab = Vocab([*SPECIALS, "a", "b"])
    assert [vocab[s] for s in SPECIALS] == [PAD, BOS, EOS, UNK] == [0, 1, 2, 3]
    assert len(vocab) == 6 and "a" in vocab and "zzz" not in vocab
    assert vocab["zzz"] == UNK and vocab.lookup_indices(["b", "zzz", "a"]) == [5, UNK, 4]
    assert vocab.lookup_tokens(vocab.lookup_indices(["a", "b"])) == ["a", "b"]
    assert vocab.lookup_tokens(torch.tensor([4, 5])) == ["a", "b"]
    assert vocab.get_stoi() == {t: i for i, t in enumerate(vocab.get_itos())}
    with pytest.raises(IndexError, match="outside the vocabulary"):
        vocab.lookup_token(6)
    with pytest.raises(IndexError):
        vocab.lookup_token(-1)


@pytest.mark.parametrize("tokens, message", [
    (["a", "b"], "must start with the specials"),
    (list(reversed(SPECIALS)), "must start with the specials"),
    ([*SPECIALS, "a", "b", "a"], "repeated: \\['a'\\]"),
    ([*SPECIALS, "<unk>"], "repeated"),
])
def test_vocab_rejects_bad_token_lists(tokens, message):
    with pytest.raises(VocabularyError, match=message):
        Vocab(tokens)


def test_build_vocab_min_freq_order_and_max_tokens():
    sentences = [["b", "a", "c"], ["a", "b"], ["a", "d"], ["<unk>", "<pad>"]]
    vocab = build_vocab_from_iterator(sentences)
    assert vocab.get_itos() == [*SPECIALS, "a", "b", "c", "d"]  # by count, ties alphabetical, specials once
    assert build_vocab_from_iterator(sentences, min_freq=2).get_itos() == [*SPECIALS, "a", "b"]
    assert build_vocab_from_iterator(sentences, min_freq=4).get_itos() == list(SPECIALS)
    assert build_vocab_from_iterator(sentences, max_tokens=5).get_itos() == [*SPECIALS, "a"]
    assert build_vocab_from_iterator(sentences, max_tokens=2).get_itos() == list(SPECIALS)
    shuffled = [list(reversed(s)) for s in reversed(sentences)]
    assert build_vocab_from_iterator(shuffled) == vocab
    with pytest.raises(ValueError, match="min_freq"):
        build_vocab_from_iterator(sentences, min_freq=0)


# --- spaCy and detokenize -----------------------------------------------------------------------

@pytest.mark.parametrize("language, text, tokens", [
    ("en", "The dog's ball isn't red.", ["The", "dog", "'s", "ball", "is", "n't", "red", "."]),
    ("en", "A man (left) in a T-shirt.", ["A", "man", "(", "left", ")", "in", "a", "T", "-", "shirt", "."]),
    ("en", "  Two   dogs run!  ", ["Two", "dogs", "run", "!"]),
    ("de", "Ein Mann im T-Shirt geht's an.", ["Ein", "Mann", "im", "T-Shirt", "geht's", "an", "."]),
    ("de", "Sie sagt: „Hallo!“", ["Sie", "sagt", ":", "„", "Hallo", "!", "“"]),
    ("de", "Z.B. kostet es 3,50 €.", ["Z.B.", "kostet", "es", "3,50", "€", "."]),
])
def test_spacy_tokenizer(language, text, tokens):
    tokenizer = SpacyTokenizer(language)
    assert tokenizer(text) == tokens
    assert tokenizer.pipe([text, "", text]) == [tokens, [], tokens]


def test_spacy_tokenizer_unknown_language():
    with pytest.raises(VocabularyError, match="no tokenizer for language 'zz'"):
        SpacyTokenizer("zz")


@pytest.mark.parametrize("tokens, text", [
    (["A", "dog", "runs", "."], "A dog runs."),
    (["Yes", ",", "no", ";", "maybe", ":", "50", "%", "!", "?"], "Yes, no; maybe: 50%!?"),
    (["The", "dog", "'s", "ball", "is", "n't", "red"], "The dog's ball isn't red"),
    (["They", "'re", "here", ",", "I", "'m", "sure", ",", "we", "'ll", "go"],
     "They're here, I'm sure, we'll go"),
    (["The", "players", "'", "ball"], "The players' ball"),
    (["He", "said", '"', "hi", '"', "and", '"', "bye", '"', "."], 'He said "hi" and "bye".'),
    (["A", "sign", "'", "Grand", "Opening", "'", "."], "A sign 'Grand Opening'."),
    (["Jackson", "'s", "'", "Thriller", "'", "video"], "Jackson's 'Thriller' video"),
    (["Sie", "sagt", ":", "„", "Hallo", "!", "“", "und", "geht"], "Sie sagt: „Hallo!“ und geht"),
    (["an", "“", "English", "”", "quote"], "an “English” quote"),
    (["a", "(", "big", ")", "dog", "[", "1", "]"], "a (big) dog [1]"),
    (["costs", "$", "5", "and", "#", "8"], "costs $5 and #8"),
    (["a", "3", "-", "year", "-", "old", "in", "mid", "-", "air"], "a 3-year-old in mid-air"),
    (["and", "/", "or"], "and/or"),
    ([], ""),
])
def test_detokenize(tokens, text):
    assert detokenize(tokens) == text


def test_detokenize_round_trips_builtin_english(train):
    english = [en for _, en in train[:500]]
    assert [detokenize(tokens) for tokens in SpacyTokenizer("en").pipe(english)] == english


# --- BPE ----------------------------------------------------------------------------------------

def test_bpe_round_trip_specials_and_json(train, bpe_vocabs):
    bpe = bpe_vocabs.source.bpe
    assert bpe.vocab.get_itos()[:4] == list(SPECIALS) and len(bpe) == 400
    for language, side in (("de", 0), ("en", 1)):
        sentences = SpacyTokenizer(language).pipe(pair[side] for pair in train)
        ids = bpe.encode_batch(sentences)
        assert all(bpe.words(row) == words for row, words in zip(ids, sentences, strict=True))
        assert UNK not in {i for row in ids for i in row}
        assert all(piece.endswith(END_OF_WORD) for row in ids for piece in [bpe.pieces(row)[-1]])
    restored = _bpe_from_json(_bpe_to_json(bpe))  # through the vocabulary file's JSON
    sentences = SpacyTokenizer("de").pipe(de for de, _ in builtin_corpus("val"))
    assert restored.encode_batch(sentences) == bpe.encode_batch(sentences)
    assert restored.vocab == bpe.vocab and restored.merges == bpe.merges


def test_bpe_toy_merges_and_unknown_characters():
    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    bpe = BPE.train([[word] * count for word, count in counts.items()], vocab_size=4 + 11 + 3)
    assert bpe.merges == [("e", "s"), ("es", "t</w>"), ("l", "o")]  # ties: alphabetical
    assert bpe.pieces(bpe.encode(["lowest"])) == ["lo", "w", "est</w>"]
    ids = bpe.encode(["flow!"])
    assert ids[0] == UNK and ids[-1] == UNK and bpe.words(ids) == ["low"]
    with pytest.raises(ValueError, match="vocab_size"):
        BPE.train([["a"]], vocab_size=4)


def test_bpe_training_is_deterministic(train):
    """The same words give the same vocabulary, in any order and however often it is trained.
    (Hugging Face's BpeTrainer does not: it numbers symbols in hash-map order, which changes
    from run to run, and breaks ties between equally frequent pairs by those numbers.)"""
    sentences = SpacyTokenizer("en").pipe(en for _, en in train[:1000])
    bpe = BPE.train(sentences, vocab_size=300)
    for seed in range(3):
        shuffled = sentences[:]
        random.Random(seed).shuffle(shuffled)
        assert _bpe_to_json(BPE.train(shuffled, vocab_size=300)) == _bpe_to_json(bpe)


LEARN_BPE = """
from annotated_transformer.companions.vocabulary_files import vocabularies_sha256
from annotated_transformer.data import builtin_corpus
from annotated_transformer.tokenization import build_vocabularies
print(vocabularies_sha256(build_vocabularies(builtin_corpus("train")[:400], "bpe", 300, 2)))
"""


def test_bpe_training_is_deterministic_in_any_process():
    """Python randomizes the hashes of strings per process (PYTHONHASHSEED), and with them the
    order of sets and of dict keys built from sets: the vocabulary must not depend on it."""
    processes = [
        subprocess.Popen([sys.executable, "-c", LEARN_BPE], env={**os.environ, "PYTHONHASHSEED": seed},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for seed in ("1", "2")
    ]
    digests = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        digests.append(out.strip())
    assert len(digests[0]) == 64 and digests[0] == digests[1]


# --- TextEncoder and Vocabularies ---------------------------------------------------------------

def test_text_encoder_decode_stops_at_eos(word_vocabs, bpe_vocabs, tiny):
    for vocabs in (word_vocabs, bpe_vocabs):
        text = builtin_corpus("val")[0][1]
        ids = vocabs.target.encode(text)
        assert vocabs.target.decode(ids) == text
        assert vocabs.target.decode([BOS, *ids, EOS, *ids[:3], PAD]) == text
        assert vocabs.target.decode([EOS, *ids]) == ""
    assert tiny.target.decode(tiny.target.encode("A bird runs.")) == "A <unk> runs."
    with pytest.raises(ValueError, match="either"):
        TextEncoder("en")


def test_vocabularies_kinds_shared_and_describe(word_vocabs, bpe_vocabs):
    assert bpe_vocabs.kind == "bpe" and bpe_vocabs.shared
    assert bpe_vocabs.describe() == "bpe de->en, 400 tokens"
    assert word_vocabs.kind == "word" and not word_vocabs.shared
    assert word_vocabs.describe().startswith("word de->en, ")
    with pytest.raises(ValueError, match="unknown vocabulary kind"):
        build_vocabularies(PAIRS, "chars")
    with pytest.raises(ValueError, match="pairs must hold at least one training pair, got an empty list"):
        build_vocabularies([], "bpe")


def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch):
    path = files.atomic_write_text(tmp_path / "a.json", "old")

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        files.atomic_write_text(path, "new")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


# --- encoding and the cache ---------------------------------------------------------------------

def test_encode_pairs_lengths_unknown_rate_and_empty_sources(tiny):
    encoded = encode_pairs([*PAIRS, ("", "Nothing."), ("Ein Vogel läuft.", "A bird runs.")], tiny)
    assert len(encoded) == 4  # the empty source is dropped
    assert encoded.lengths() == [(4, 4), (4, 4), (4, 4), (4, 4)]
    assert encoded.unknown_rate() == (1 / 16, 1 / 16)  # "Vogel", "bird"
    assert EncodedPairs([], []).unknown_rate() == (0.0, 0.0)


# --- token batches ------------------------------------------------------------------------------

def test_token_batches_cover_every_pair_within_the_budget(encoded):
    epoch_batches = token_batches(encoded, max_tokens=300)
    lengths = encoded.lengths()
    for epoch in range(3):
        plan = epoch_batches(epoch).batches
        assert sorted(i for batch in plan for i in batch) == list(range(len(encoded)))
        for batch in plan:
            assert len(batch) * max(lengths[i][0] for i in batch) <= 300
            assert len(batch) * max(lengths[i][1] + 1 for i in batch) <= 300
    assert epoch_batches(1).batches == token_batches(encoded, max_tokens=300)(1).batches
    assert epoch_batches(0).batches != epoch_batches(1).batches
    assert token_batches(encoded, 300, seed=1)(0).batches != epoch_batches(0).batches


def test_token_batches_shards_are_disjoint_and_equal(encoded):
    everything = token_batches(encoded, max_tokens=200)(3).batches
    shards = [token_batches(encoded, max_tokens=200, rank=r, world_size=3)(3).batches for r in range(3)]
    assert len({len(shard) for shard in shards}) == 1 and len(shards[0]) == len(everything) // 3
    seen = [i for shard in shards for batch in shard for i in batch]
    assert len(seen) == len(set(seen))
    assert all(batch in everything for shard in shards for batch in shard)


def test_batch_sequence_builds_batches(encoded):
    batches = token_batches(encoded, max_tokens=300)(0)
    assert isinstance(batches, BatchSequence) and len(batches) == len(batches.batches)
    first = batches[0]
    assert isinstance(first, Batch) and len(first) == len(batches.batches[0])
    i = batches.batches[0][0]
    row = first.tgt_out[0].tolist()
    assert row[: len(encoded.target[i]) + 1] == [*encoded.target[i], EOS]
    assert first.src[0, : len(encoded.source[i])].tolist() == encoded.source[i]
    sliced = batches[1:4]
    assert isinstance(sliced, list) and len(sliced) == 3 and all(isinstance(b, Batch) for b in sliced)
    assert torch.equal(sliced[0].src, batches[1].src) and batches[-1].src.shape == list(batches)[-1].src.shape
    assert sum(b.n_tokens for b in batches) == sum(len(t) + 1 for t in encoded.target)


def test_bpe_words_never_glue_a_word_ending_in_unk_to_the_next():
    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    bpe = BPE.train([[word] * count for word, count in counts.items()], vocab_size=4 + 11 + 3)
    ids = bpe.encode(["slow!", "low", "new"])  # "!" is unknown: its <unk> replaced the piece with </w>
    assert bpe.pieces(ids)[3] == "<unk>"
    assert bpe.words(ids) == ["slow", "low", "new"]
    ids = bpe.encode(["ne!", "low"])
    assert bpe.words(ids) == ["ne", "low"]


# --- what the functions are given -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: SpacyTokenizer("en")(None), TypeError, "text must be a string, got None"),
        (lambda: SpacyTokenizer("en").pipe(["A dog.", None]), TypeError,
         "texts must be a list of strings; item 2 of 2 is None"),
        (lambda: SpacyTokenizer("en").pipe("A dog"), TypeError, "list of strings, got 'A dog'$"),
        (lambda: build_vocabularies([*PAIRS, ("Ein Hund",)], "word"), TypeError,
         r"pairs must be a list of \(source, target\) pairs of strings; item 4 of 4 is \('Ein Hund',\)"),
        (lambda: build_vocabularies([("Ein Hund", None)], "word"), TypeError,
         r"item 1 of 1 is \('Ein Hund', None\)"),
        (lambda: build_vocabularies("Ein Hund", "word"), TypeError, "got 'Ein Hund'"),
        (lambda: build_vocabularies({"Ein Hund": "A dog"}, "word"), TypeError, "got {'Ein Hund': 'A dog'}"),
        (lambda: build_vocabularies(42, "word"), TypeError, "pairs must be a list of .* got 42$"),
        (lambda: build_vocabularies(PAIRS, "bpe", vocab_size="8000"), ValueError,
         "vocab_size must be a whole number, at least 5, got '8000'"),
        (lambda: build_vocabularies(PAIRS, "word", min_freq=0), ValueError,
         "min_freq must be a whole number, at least 1, got 0"),
    ],
)
def test_bad_sentences_pairs_and_settings_are_refused_in_one_line(call, error, message):
    with pytest.raises(error, match=message) as info:
        call()
    one_line(info)


def test_encoders_and_encoded_pairs_check_what_they_are_given(tiny):
    with pytest.raises(TypeError, match="text must be a string, got None") as info:
        tiny.source.encode(None)
    one_line(info)
    with pytest.raises(TypeError, match="texts must be a list of strings; item 1 of 2 is 3") as info:
        tiny.source.encode_batch([3, "Ein Hund."])
    with pytest.raises(TypeError, match=r"pairs must be .* item 2 of 2 is \['a', 'b', 'c'\]"):
        encode_pairs([("Ein Hund.", "A dog."), ["a", "b", "c"]], tiny)
    assert len(encode_pairs([], tiny)) == 0  # no pairs is no error: nothing to encode


def test_pairs_from_a_generator_are_read_once_and_kept():
    """A generator of pairs can be read only once: the checks keep what they read."""
    vocabs = build_vocabularies((pair for pair in PAIRS), "word", min_freq=1)
    encoded = encode_pairs((pair for pair in PAIRS), vocabs)
    assert len(encoded) == len(PAIRS) and encoded.source == encode_pairs(PAIRS, vocabs).source


def test_a_long_bad_value_is_shown_short():
    sentences = ["Ein Hund läuft." * 50] * 999 + [None]
    with pytest.raises(TypeError) as info:
        SpacyTokenizer("de").pipe(sentences)
    assert one_line(info).endswith("item 1000 of 1000 is None")
    with pytest.raises(TypeError) as info:
        SpacyTokenizer("de").pipe(sentences[0])
    assert len(one_line(info)) < 120


# --- promises held at the values where a slip would show ------------------------------------------

import itertools  # noqa: E402

from annotated_transformer.tokenization import _learn_merges, _merge, sample_merges  # noqa: E402


def test_vocab_lookup_token_zero_is_pad():
    """Index 0 is a real entry (the padding token), not outside the vocabulary."""
    assert Vocab([*SPECIALS, "a"]).lookup_token(0) == "<pad>"
    assert Vocab([*SPECIALS, "a"]).lookup_tokens([0, 4]) == ["<pad>", "a"]


def test_vocab_duplicate_message_shows_at_most_five():
    tokens = [*SPECIALS, *"abcdef", *"abcdef"]
    with pytest.raises(VocabularyError) as info:
        Vocab(tokens)
    assert one_line(info) == "a vocabulary holds each token once; repeated: ['a', 'b', 'c', 'd', 'e']"


def test_build_vocab_orders_by_frequency_before_the_alphabet():
    """Most frequent first, even where that is not alphabetical; ties alphabetical."""
    vocab = build_vocab_from_iterator([["b", "b", "c", "a", "z", "z", "z"]])
    assert vocab.get_itos() == [*SPECIALS, "z", "b", "a", "c"]
    with pytest.raises(ValueError, match=r"^min_freq must be a whole number"):
        build_vocab_from_iterator([["a"]], min_freq=0)


def test_spacy_tokenizer_repr_names_its_language():
    assert repr(SpacyTokenizer("de")) == "SpacyTokenizer('de')"


@pytest.mark.parametrize("tokens, text", [
    (["“", "a", "‘", "b", "’", "c", "”"], "“a ‘b’ c”"),  # the inner quotation closes, the outer stays open
    # closing the outer quotation also closes an inner one left open: the next " opens a new one
    (["He", "said", '"', "I", "like", "‘", "cats", '"', "and", '"', "dogs", '"', "."],
     'He said "I like ‘cats" and "dogs".'),
    (["“", "I", "said", "‘", "no", "”", ",", "he", "wrote", "“", "twice", "”", "."],
     "“I said ‘no”, he wrote “twice”."),
    (["Say", "'", "'", "twice"], "Say '' twice"),  # an empty quotation: the ' has its partner next
    (["John", "’s", "dog"], "John’s dog"),  # typographic apostrophes are clitics too
    (["JOHN", "’S", "DOG"], "JOHN’S DOG"),
    (["The", "dog", "is", "n’t", "red", "."], "The dog isn’t red."),
])
def test_detokenize_nested_quotes_and_typographic_apostrophes(tokens, text):
    assert detokenize(tokens) == text


def test_detokenize_round_trips_typographic_apostrophes():
    """spaCy splits "isn’t" into "is", "n’t" as it splits "isn't": both join back."""
    texts = ["The dog isn’t red.", "Don’t go, John’s dog!", "They’re here, I’m sure."]
    assert [detokenize(tokens) for tokens in SpacyTokenizer("en").pipe(texts)] == texts


@pytest.mark.parametrize("symbols, pair, merged", [
    (["a", "b", "a"], ("a", "b"), ["ab", "a"]),
    (["x", "a", "b", "a", "b"], ("a", "b"), ["x", "ab", "ab"]),
    (["a", "b", "x", "a"], ("b", "x"), ["a", "bx", "a"]),
    (["a", "a", "a"], ("a", "a"), ["aa", "a"]),  # left to right, not overlapping
    (["b", "a"], ("a", "b"), ["b", "a"]),
    (["a"], ("a", "b"), ["a"]),
])
def test_merge_joins_every_occurrence_left_to_right(symbols, pair, merged):
    assert _merge(symbols, pair) == merged


def test_learn_merges_stops_below_min_frequency():
    """Training stops at the first pair rarer than `min_frequency`, with the merges so far."""
    assert _learn_merges({"ab": 2, "cd": 1}, 100, 2) == (["a", "b</w>", "c", "d</w>"], [("a", "b</w>")])
    bpe = BPE.train([["ab", "ab", "cd"]], vocab_size=100, min_frequency=2)
    assert bpe.merges == [("a", "b</w>")]


def test_learn_merges_keeps_pairs_seen_once_when_min_frequency_is_1():
    """A pair whose count falls to 1 is still merged when pairs seen once count."""
    assert _learn_merges({"acc": 1}, 100, 1) == (["a", "c", "c</w>"], [("a", "c"), ("ac", "c</w>")])


def test_learn_merges_recounts_pairs_a_merge_made_rarer():
    """A pair that lost occurrences to a merge keeps its remaining count, and the order of learning
    is by that count (ties alphabetical): checked against a plain recount at every step."""
    word_counts = {"aba": 2, "cba": 1, "aaabc": 1}

    def plain(word_counts, min_frequency):  # Sennrich et al.'s loop, recounting every pair each step
        words = {w: [*w[:-1], w[-1] + END_OF_WORD] for w in word_counts}
        merges = []
        while True:
            counts = {}
            for w, symbols in words.items():
                for pair in itertools.pairwise(symbols):
                    counts[pair] = counts.get(pair, 0) + word_counts[w]
            if not counts:
                return merges
            pair = min(counts, key=lambda p: (-counts[p], p))
            if counts[pair] < min_frequency:
                return merges
            merges.append(pair)
            words = {w: _merge(symbols, pair) for w, symbols in words.items()}

    merges = _learn_merges(word_counts, 100, 1)[1]
    assert merges == plain(word_counts, 1)
    assert merges[-2:] == [("b", "a</w>"), ("c", "ba</w>")]


def test_bpe_min_frequency_0_merges_only_pairs_that_occur():
    """A pair that no word holds any more is never merged, whatever `min_frequency` allows."""
    sentences = [["low", "lower", "newest", "widest", "low"]]
    merges = BPE.train(sentences, 100, min_frequency=1).merges
    assert len(merges) > 3 and BPE.train(sentences, 100, min_frequency=0).merges == merges


def test_bpe_smallest_vocab_size_and_messages():
    """vocab_size = specials + 1 is allowed (the alphabet is kept whole anyway)."""
    bpe = BPE.train([["ab", "ab"]], vocab_size=len(SPECIALS) + 1)
    assert bpe.vocab.get_itos() == [*SPECIALS, "a", "b</w>"] and bpe.merges == []
    with pytest.raises(ValueError, match=r"^vocab_size must be a whole number, at least 5, got 4$"):
        BPE.train([["a"]], vocab_size=4)


def test_bpe_default_min_frequency_is_2():
    """By default a pair seen twice is merged, a pair seen once is not."""
    bpe = BPE.train([["ab", "ab", "cd"]], vocab_size=100)
    assert bpe.merges == [("a", "b</w>")]


def test_bpe_splits_words_on_whitespace_when_encoding():
    """Training splits a "word" holding whitespace; encoding splits it the same way."""
    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    bpe = BPE.train([[word] * count for word, count in counts.items()], vocab_size=4 + 11 + 3)
    assert bpe.encode(["low newest"]) == bpe.encode(["low", "newest"])
    assert UNK not in bpe.encode(["low newest"])


def _many_words(n: int = 5000) -> list[str]:
    rng = random.Random(0)
    return sorted({"".join(rng.choice("abcdefghijklmnopqrst") for _ in range(6)) for _ in range(n)})


def test_default_vocab_size_is_8000_with_min_frequency_2():
    """BPE.train and build_vocabularies default to a BPE of 8000 entries, learned from pairs seen at
    least twice (each word here occurs twice: once per side, or twice in the sentences)."""
    words = _many_words()
    bpe = BPE.train([words, words])
    assert len(bpe) == 8000 and bpe.vocab.get_itos()[:4] == list(SPECIALS)
    text = " ".join(words)
    vocabs = build_vocabularies([(text, text)])
    assert vocabs.kind == "bpe" and vocabs.shared and len(vocabs.source.vocab) == 8000
    assert vocabs.source.vocab == bpe.vocab
    assert len(BPE.train([words, words], min_frequency=3)) < 8000  # fewer pairs occur 3 times


def test_build_vocabularies_passes_min_freq_to_bpe():
    words = [*SpacyTokenizer("de").pipe(de for de, _ in PAIRS),
             *SpacyTokenizer("en").pipe(en for _, en in PAIRS)]
    for min_freq in (1, 3):
        vocabs = build_vocabularies(PAIRS, "bpe", vocab_size=200, min_freq=min_freq)
        assert vocabs.source.bpe.merges == BPE.train(words, vocab_size=200, min_frequency=min_freq).merges
    assert len(build_vocabularies(PAIRS, "bpe", 200, 1).source.bpe.merges) > len(
        build_vocabularies(PAIRS, "bpe", 200, 3).source.bpe.merges)


def test_build_vocabularies_word_min_freq_default_2_and_tokenizer_per_language():
    """Word vocabularies keep tokens seen `min_freq` (default 2) times in their own language, split
    by that language's tokenizer (German keeps "geht's" whole, English splits "'s" off)."""
    vocabs = build_vocabularies(PAIRS, "word")
    assert vocabs.source.vocab.get_itos() == [*SPECIALS, "."]
    assert vocabs.target.vocab.get_itos() == [*SPECIALS, ".", "A"]
    assert build_vocabularies(PAIRS, "word", min_freq=1).source.vocab.get_itos()[4:6] == [".", "Ein"]
    pairs = [("Er geht's.", "He's here."), ("Er geht's.", "He's here.")]
    vocabs = build_vocabularies(pairs, "word")
    assert "geht's" in vocabs.source.vocab and "'s" in vocabs.target.vocab and "'s" not in vocabs.source.vocab
    assert (vocabs.source.language, vocabs.target.language) == ("de", "en")
    assert vocabs.describe() == f"word de->en, {len(vocabs.source.vocab)}/{len(vocabs.target.vocab)} tokens"
    assert vocabs.describe() == "word de->en, 7/8 tokens"


def test_text_encoder_with_bpe_uses_its_vocabulary_and_names_its_language():
    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    bpe = BPE.train([[word] * count for word, count in counts.items()], vocab_size=4 + 11 + 3)
    encoder = TextEncoder("en", bpe=bpe)
    assert encoder.vocab is bpe.vocab and len(encoder) == len(bpe) and encoder.language == "en"
    ids = encoder.encode("lowest")
    assert encoder.tokens(ids) == ["lo", "w", "est</w>"] and encoder.decode(ids) == "lowest"
    with pytest.raises(ValueError) as info:
        TextEncoder("en", vocab=bpe.vocab, bpe=bpe)
    assert one_line(info) == "give either a word vocabulary (vocab=) or a subword one (bpe=), not both"


def test_encoded_pairs_lengths_refuse_sides_of_different_lengths():
    """A corpus whose two sides differ in length is broken: lengths() says so, never truncates."""
    with pytest.raises(ValueError):
        EncodedPairs([[5], [6]], [[5]]).lengths()


def test_unknown_rate_of_a_single_token():
    assert EncodedPairs([[UNK]], [[5]]).unknown_rate() == (1.0, 0.0)


def test_sample_merges_dropout_0_merges_even_at_a_draw_of_0():
    """random() lies in [0, 1): a merge is skipped when the draw is below `dropout`, so with
    dropout 0 no draw, not even 0.0, skips one (dropout 0 is BPE itself)."""

    class Zeros(random.Random):
        def random(self):
            return 0.0

    ranks = {("l", "o"): 0, ("lo", "w</w>"): 1}
    assert sample_merges("low", ranks, 0.0, Zeros()) == ["low</w>"]


def test_token_batches_without_shuffling_keep_the_same_batches_every_epoch(encoded):
    epoch_batches = token_batches(encoded, max_tokens=300, shuffle=False)
    assert epoch_batches(0).batches == epoch_batches(1).batches
    assert sorted(i for batch in epoch_batches(0).batches for i in batch) == list(range(len(encoded)))


def test_token_batches_default_rank_is_0_and_pin_memory_is_passed_on(encoded):
    shards = token_batches(encoded, max_tokens=200, world_size=3)(3).batches
    assert shards == token_batches(encoded, max_tokens=200, rank=0, world_size=3)(3).batches
    assert token_batches(encoded, max_tokens=300, pin_memory=True)(0).pin_memory is True
    assert token_batches(encoded, max_tokens=300)(0).pin_memory is False
