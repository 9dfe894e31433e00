"""The file of a translation direction's vocabularies, which chapter 13's `Vocabularies` owns:
what `Vocabularies.save` writes and `Vocabularies.load` reads back or refuses, and the fingerprint
`sha256` that checkpoints and the cache of encoded corpora record.

No test needs the network or Multi30k: the data is the built-in corpus and small hand-made texts.
"""

import copy
import json

import pytest

from annotated_transformer.data import builtin_corpus
from annotated_transformer.tokenization import (
    BPE,
    VOCABULARY_FORMAT,
    VOCABULARY_VERSION,
    TextEncoder,
    Vocab,
    Vocabularies,
    VocabularyError,
    build_vocabularies,
)

PAIRS = [("Ein Hund läuft.", "A dog runs."), ("Eine Katze schläft.", "A cat sleeps."),
         ("Zwei Hunde laufen.", "Two dogs run.")]


@pytest.fixture(scope="module")
def tiny() -> Vocabularies:
    return build_vocabularies(PAIRS, "word", min_freq=1)


def bpe_to_json(bpe: BPE) -> str:
    """A BPE model as its Hugging Face tokenizer's JSON, as the vocabulary file keeps it."""
    return bpe.hf_tokenizer.to_str()


def test_the_file_is_the_vocabularies_dict(tmp_path, tiny):
    path = tiny.save(tmp_path / "vocab.json")
    assert json.loads(path.read_text(encoding="utf-8")) == tiny.to_dict()
    loaded = Vocabularies.load(path)
    assert Vocabularies.from_dict(tiny.to_dict()).sha256() == loaded.sha256() == tiny.sha256()


def test_the_file_names_its_format_version_kind_and_languages(word_vocabs, bpe_vocabs):
    data = word_vocabs.to_dict()
    assert (data["format"], data["version"], data["kind"]) == (VOCABULARY_FORMAT, VOCABULARY_VERSION, "word")
    assert (data["source_language"], data["target_language"]) == ("de", "en")
    assert data["source_tokens"] == word_vocabs.source.vocab.get_itos()
    assert data["target_tokens"] == word_vocabs.target.vocab.get_itos()
    data = bpe_vocabs.to_dict()
    assert data["kind"] == "bpe" and "source_tokens" not in data
    assert data["bpe"] == json.loads(bpe_to_json(bpe_vocabs.source.bpe))  # the Hugging Face model, whole


def test_bpe_json_round_trip(bpe_vocabs):
    bpe = bpe_vocabs.source.bpe
    restored = Vocabularies.from_dict(bpe_vocabs.to_dict()).source.bpe
    assert isinstance(restored, BPE) and restored.vocab == bpe.vocab and restored.merges == bpe.merges
    assert bpe_to_json(restored) == bpe_to_json(bpe)


def test_vocabularies_save_load_round_trip(tmp_path, word_vocabs, bpe_vocabs):
    texts = [de for de, _ in builtin_corpus("val")[:50]]
    for vocabs in (word_vocabs, bpe_vocabs):
        path = vocabs.save(tmp_path / vocabs.kind / "vocab.json")
        assert sorted(p.name for p in path.parent.iterdir()) == ["vocab.json"]  # no temporary file left
        loaded = Vocabularies.load(path)
        assert loaded.kind == vocabs.kind and loaded.shared == vocabs.shared
        assert loaded.sha256() == vocabs.sha256() and loaded.source.vocab == vocabs.source.vocab
        assert loaded.target.vocab == vocabs.target.vocab
        assert loaded.source.encode_batch(texts) == vocabs.source.encode_batch(texts)


def with_vocab(encoder: TextEncoder, vocab: Vocab | None = None, bpe: BPE | None = None) -> TextEncoder:
    """A copy of `encoder` (and of its spaCy tokenizer, slow to build) with another vocabulary."""
    changed = copy.copy(encoder)
    changed.bpe, changed.vocab = bpe, bpe.vocab if bpe is not None else vocab
    return changed


def test_sha256_changes_with_the_vocabulary(tiny, bpe_vocabs):
    assert Vocabularies(tiny.source, tiny.target).sha256() == tiny.sha256()
    more = with_vocab(tiny.target, Vocab([*tiny.target.vocab.get_itos(), "bird"]))
    assert Vocabularies(tiny.source, more).sha256() != tiny.sha256()
    swapped = Vocabularies(tiny.target, tiny.source)  # same token lists, other languages
    assert swapped.sha256() != tiny.sha256()
    other = BPE.train([["a", "b", "ab", "ab"]], vocab_size=10)
    encoder = with_vocab(bpe_vocabs.source, bpe=other)
    assert Vocabularies(encoder, encoder).sha256() != bpe_vocabs.sha256()


def test_vocabularies_load_errors(tmp_path, tiny):
    path = tiny.save(tmp_path / "vocab.json")
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    cases = {
        "half.json": (text[: len(text) // 2], "not valid JSON"),
        "empty.json": ("", "not valid JSON"),
        "binary.json": (None, "not valid JSON"),
        "foreign.json": (json.dumps({"hello": "world"}), "not an annotated-transformer vocabulary"),
        "list.json": ("[1, 2]", "not an annotated-transformer vocabulary"),
        "version.json": (json.dumps({**data, "version": 99}), "format version 99"),
        "kind.json": (json.dumps({**data, "kind": "chars"}), "unknown vocabulary kind 'chars'"),
        "missing-key.json": (json.dumps({k: v for k, v in data.items() if k != "target_tokens"}), "damaged"),
        "wrong-type.json": (json.dumps({**data, "source_tokens": 5}), "damaged"),
        "specials.json": (json.dumps({**data, "source_tokens": data["source_tokens"][1:]}), "specials"),
        "language.json": (json.dumps({**data, "source_language": "zz"}), "no tokenizer for language"),
        "bpe.json": (json.dumps({**data, "kind": "bpe", "bpe": {"model": 1}}), "damaged"),
    }
    for name, (content, message) in cases.items():
        bad = tmp_path / name
        if content is None:
            bad.write_bytes(b"\xff\xfe\x00garbage")
        else:
            bad.write_text(content, encoding="utf-8")
        with pytest.raises(VocabularyError, match=message) as error:
            Vocabularies.load(bad)
        assert str(bad) in str(error.value), name
    with pytest.raises(FileNotFoundError, match=r"no vocabulary file at .*nothing\.json"):
        Vocabularies.load(tmp_path / "nothing.json")
    with pytest.raises(FileNotFoundError):
        Vocabularies.load(tmp_path)  # a folder is not a file

