"""The file of a translation direction's vocabularies (annotated_transformer.companions.vocabulary_files):
what `Vocabularies.save` writes and `Vocabularies.load` reads back or refuses, and the fingerprint
`sha256` that checkpoints and the cache of encoded corpora record.

No test needs the network or Multi30k: the data is the built-in corpus and small hand-made texts.
"""

import copy
import json

import pytest

from annotated_transformer.companions.vocabulary_files import (
    _FORMAT,
    _VERSION,
    _bpe_from_json,
    _bpe_to_json,
    _vocabularies_to_dict,
    read_vocabularies,
    vocabularies_sha256,
    write_vocabularies,
)
from annotated_transformer.data import builtin_corpus
from annotated_transformer.tokenization import (
    BPE,
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


def test_the_file_is_the_vocabularies_dict(tmp_path, tiny):
    path = write_vocabularies(tiny, tmp_path / "vocab.json")
    assert json.loads(path.read_text(encoding="utf-8")) == _vocabularies_to_dict(tiny)
    assert vocabularies_sha256(read_vocabularies(path)) == vocabularies_sha256(tiny)


def test_the_file_names_its_format_version_kind_and_languages(word_vocabs, bpe_vocabs):
    data = _vocabularies_to_dict(word_vocabs)
    assert (data["format"], data["version"], data["kind"]) == (_FORMAT, _VERSION, "word")
    assert (data["source_language"], data["target_language"]) == ("de", "en")
    assert data["source_tokens"] == word_vocabs.source.vocab.get_itos()
    assert data["target_tokens"] == word_vocabs.target.vocab.get_itos()
    data = _vocabularies_to_dict(bpe_vocabs)
    assert data["kind"] == "bpe" and "source_tokens" not in data
    assert data["bpe"] == json.loads(_bpe_to_json(bpe_vocabs.source.bpe))  # the Hugging Face model, whole


def test_bpe_json_round_trip(bpe_vocabs):
    bpe = bpe_vocabs.source.bpe
    restored = _bpe_from_json(_bpe_to_json(bpe))
    assert isinstance(restored, BPE) and restored.vocab == bpe.vocab and restored.merges == bpe.merges
    assert _bpe_to_json(restored) == _bpe_to_json(bpe)


def test_vocabularies_save_load_round_trip(tmp_path, word_vocabs, bpe_vocabs):
    texts = [de for de, _ in builtin_corpus("val")[:50]]
    for vocabs in (word_vocabs, bpe_vocabs):
        path = write_vocabularies(vocabs, tmp_path / vocabs.kind / "vocab.json")
        assert sorted(p.name for p in path.parent.iterdir()) == ["vocab.json"]  # no temporary file left
        loaded = read_vocabularies(path)
        assert loaded.kind == vocabs.kind and loaded.shared == vocabs.shared
        assert vocabularies_sha256(loaded) == vocabularies_sha256(vocabs)
        assert loaded.source.vocab == vocabs.source.vocab
        assert loaded.target.vocab == vocabs.target.vocab
        assert loaded.source.encode_batch(texts) == vocabs.source.encode_batch(texts)


def with_vocab(encoder: TextEncoder, vocab: Vocab | None = None, bpe: BPE | None = None) -> TextEncoder:
    """A copy of `encoder` (and of its spaCy tokenizer, slow to build) with another vocabulary."""
    changed = copy.copy(encoder)
    changed.bpe, changed.vocab = bpe, bpe.vocab if bpe is not None else vocab
    return changed


def test_sha256_changes_with_the_vocabulary(tiny, bpe_vocabs):
    assert vocabularies_sha256(Vocabularies(tiny.source, tiny.target)) == vocabularies_sha256(tiny)
    more = with_vocab(tiny.target, Vocab([*tiny.target.vocab.get_itos(), "bird"]))
    assert vocabularies_sha256(Vocabularies(tiny.source, more)) != vocabularies_sha256(tiny)
    swapped = Vocabularies(tiny.target, tiny.source)  # same token lists, other languages
    assert vocabularies_sha256(swapped) != vocabularies_sha256(tiny)
    other = BPE.train([["a", "b", "ab", "ab"]], vocab_size=10)
    encoder = with_vocab(bpe_vocabs.source, bpe=other)
    assert vocabularies_sha256(Vocabularies(encoder, encoder)) != vocabularies_sha256(bpe_vocabs)


def test_vocabularies_load_errors(tmp_path, tiny):
    path = write_vocabularies(tiny, tmp_path / "vocab.json")
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
            read_vocabularies(bad)
        assert str(bad) in str(error.value), name
    with pytest.raises(FileNotFoundError, match=r"no vocabulary file at .*nothing\.json"):
        read_vocabularies(tmp_path / "nothing.json")
    with pytest.raises(FileNotFoundError):
        read_vocabularies(tmp_path)  # a folder is not a file

