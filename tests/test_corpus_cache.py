"""The cache of encoded corpora (annotated_transformer.companions.corpus_cache): `cached_encode_pairs`
reads a sound file of its key, rebuilds a damaged one, and keys it on the text and the vocabulary.

No test needs the network or Multi30k: the data is the built-in corpus and small hand-made texts.
"""

import pytest
import torch

import annotated_transformer.companions.corpus_cache as corpus_cache
from annotated_transformer.companions.corpus_cache import cached_encode_pairs, corpus_key, pack, unpack
from annotated_transformer.data import builtin_corpus
from annotated_transformer.tokenization import Vocabularies, build_vocabularies, encode_pairs


@pytest.fixture(scope="module")
def tiny() -> Vocabularies:
    return build_vocabularies([("Ein Hund läuft.", "A dog runs."), ("Eine Katze schläft.", "A cat sleeps.")],
                              "word", min_freq=1)


def test_pack_and_unpack_rows():
    rows = [[5, 6, 7], [], [8], [9, 10]]
    packed = pack(rows)
    assert packed["lengths"].tolist() == [3, 0, 1, 2] and packed["ids"].tolist() == [5, 6, 7, 8, 9, 10]
    assert packed["ids"].dtype == torch.int32 and packed["lengths"].dtype == torch.int64
    assert unpack(packed) == rows and unpack(pack([])) == []
    with pytest.raises(ValueError, match="lengths do not add up"):
        unpack({"lengths": torch.tensor([2]), "ids": torch.tensor([1, 2, 3])})


def test_cached_encode_pairs_reads_the_cache(tmp_path, monkeypatch, bpe_vocabs):
    pairs = builtin_corpus("val")[:100]
    first = cached_encode_pairs(pairs, bpe_vocabs, tmp_path)
    assert first == encode_pairs(pairs, bpe_vocabs)
    cache_files = list(tmp_path.glob("encoded-*.pt"))
    assert len(cache_files) == 1 and corpus_key(pairs, bpe_vocabs) in cache_files[0].name

    def fail(*args):
        raise AssertionError("encode_pairs called although the cache holds the result")

    monkeypatch.setattr(corpus_cache, "encode_pairs", fail)
    assert cached_encode_pairs(pairs, bpe_vocabs, tmp_path) == first
    with pytest.raises(AssertionError, match="although the cache"):
        cached_encode_pairs(pairs[:50], bpe_vocabs, tmp_path)  # other text: another key, no file


@pytest.mark.parametrize("damage", ["truncate", "garbage", "other key"])
def test_cached_encode_pairs_rebuilds_a_damaged_file(tmp_path, bpe_vocabs, damage):
    pairs = builtin_corpus("val")[:100]
    expected = cached_encode_pairs(pairs, bpe_vocabs, tmp_path)
    (path,) = tmp_path.glob("encoded-*.pt")
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "garbage":
        path.write_bytes(b"not a torch file")
    else:
        torch.save({"key": "0" * 64, "source": {}, "target": {}}, path)
    assert cached_encode_pairs(pairs, bpe_vocabs, tmp_path) == expected
    assert torch.load(path, weights_only=True)["key"] == corpus_key(pairs, bpe_vocabs)  # rewritten


def test_corpus_key_changes_with_text_and_vocabulary(bpe_vocabs, word_vocabs):
    pairs = builtin_corpus("val")[:20]
    key = corpus_key(pairs, bpe_vocabs)
    assert corpus_key(list(pairs), bpe_vocabs) == key
    assert corpus_key(pairs[:19], bpe_vocabs) != key
    assert corpus_key([(pairs[0][0] + " ", pairs[0][1]), *pairs[1:]], bpe_vocabs) != key
    assert corpus_key([(pairs[0][1], pairs[0][0]), *pairs[1:]], bpe_vocabs) != key
    assert corpus_key(pairs, word_vocabs) != key
    assert cached_encode_pairs(pairs, bpe_vocabs, None) == encode_pairs(pairs, bpe_vocabs)



def test_the_cache_checks_the_pairs_it_is_given(tiny):
    with pytest.raises(TypeError, match="pairs must be a list of"):
        corpus_key([("Ein Hund.", 1)], tiny)
    with pytest.raises(TypeError, match="pairs must be a list of"):
        cached_encode_pairs([("Ein Hund.", 1)], tiny, None)
