"""Companion of chapter 13: the file of a translation direction's vocabularies (`Vocabularies`),
`vocab.json`, and their fingerprint.

One JSON object: a `format` name and a `version`, the `kind` ("bpe" or "word"), the source and
target languages, and the vocabulary itself: for BPE the whole Hugging Face `tokenizers` model
(vocabulary and merges) under "bpe", shared by both sides; for words the two token lists,
"source_tokens" and "target_tokens". The file is written atomically, so a crash leaves the old file
or the new one, never half of one.

`read_vocabularies` refuses, with a `VocabularyError` that names the file, whatever it cannot use: text that is
not JSON (a file cut short), another JSON file given by mistake, a version of the format this
package does not read, a vocabulary kind it does not know, and a damaged one (a key missing, a value
of the wrong type, a broken BPE model, the specials missing, a language spaCy has no tokenizer for).
A missing file is a `FileNotFoundError`.

`vocabularies_sha256` is a fingerprint of the contents whatever the order of the keys: checkpoints
record it, and the cache of encoded corpora (`corpus_cache`) keys its files on it.

Chapter 13's `Vocabularies` is the vocabulary itself; this module is its file, written with
`write_vocabularies` and read with `read_vocabularies` (chapter 14's runs keep one in every run
directory).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from annotated_transformer.helpers.files import atomic_write_text
from annotated_transformer.tokenization import BPE, TextEncoder, Vocab, Vocabularies, VocabularyError

__all__ = ["read_vocabularies", "write_vocabularies", "vocabularies_sha256"]

_FORMAT = "annotated-transformer-vocabulary"
_VERSION = 1



def _bpe_to_json(bpe: BPE) -> str:
    """A BPE model as the JSON of its Hugging Face tokenizer: vocabulary, merges and settings."""
    return bpe.hf_tokenizer.to_str()


def _bpe_from_json(text: str) -> BPE:
    """The BPE model whose JSON `_bpe_to_json` wrote."""
    return BPE(Tokenizer.from_str(text))


def _vocabularies_to_dict(vocabs: Vocabularies) -> dict[str, Any]:
    """The contents of the file of `vocabs`, as a JSON object."""
    data: dict[str, Any] = {
        "format": _FORMAT, "version": _VERSION, "kind": vocabs.kind,
        "source_language": vocabs.source.language, "target_language": vocabs.target.language,
    }
    if vocabs.kind == "bpe":
        data["bpe"] = json.loads(_bpe_to_json(vocabs.source.bpe))
    else:
        data["source_tokens"] = vocabs.source.vocab.get_itos()
        data["target_tokens"] = vocabs.target.vocab.get_itos()
    return data


def write_vocabularies(vocabs: Vocabularies, path: str | Path) -> Path:
    """Write the file of `vocabs` to `path`, atomically; the path written."""
    return atomic_write_text(path, json.dumps(_vocabularies_to_dict(vocabs), ensure_ascii=False))


def vocabularies_sha256(vocabs: Vocabularies) -> str:
    """A fingerprint of the contents of `vocabs`, whatever the order of the file's keys."""
    text = json.dumps(_vocabularies_to_dict(vocabs), ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _vocabularies_from_dict(data: dict[str, Any], path: str | Path) -> Vocabularies:
    """The vocabularies a file's contents `data` describe (checked: `_FORMAT` and `_VERSION`); every
    error names the file, `path`."""
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise VocabularyError(f"{path} is not an annotated-transformer vocabulary file")
    if data.get("version") != _VERSION:
        raise VocabularyError(f"{path} has vocabulary format version {data.get('version')}; "
                              f"this package reads version {_VERSION}")
    try:
        source, target = data["source_language"], data["target_language"]
        if data["kind"] == "bpe":
            bpe = _bpe_from_json(json.dumps(data["bpe"]))
            return Vocabularies(TextEncoder(source, bpe=bpe), TextEncoder(target, bpe=bpe))
        if data["kind"] == "word":
            return Vocabularies(TextEncoder(source, vocab=Vocab(data["source_tokens"])),
                                TextEncoder(target, vocab=Vocab(data["target_tokens"])))
    except VocabularyError as error:  # specials missing, a language spaCy does not know, ...
        raise VocabularyError(f"{path}: {error}") from error
    except Exception as error:  # a key missing, a value of the wrong type, a broken BPE model
        raise VocabularyError(f"{path} is a damaged vocabulary file: {error!r}") from error
    raise VocabularyError(f"{path}: unknown vocabulary kind {data['kind']!r} (expected 'bpe' or 'word')")


def read_vocabularies(path: str | Path) -> Vocabularies:
    """The vocabularies `write_vocabularies` wrote to `path`; a missing, damaged or foreign file is refused by name."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no vocabulary file at {path}: train first, or give the path to vocab.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise VocabularyError(f"{path} is not a vocabulary file (not valid JSON: {error})") from error
    return _vocabularies_from_dict(data, path)

