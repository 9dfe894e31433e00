"""A cache of encoded corpora: chapter 13's `encode_pairs`, computed once per text and vocabulary.

Tokenizing a training split takes seconds to minutes, and its ids never change while the text and
the vocabulary stay the same. `cached_encode_pairs` keeps them in a file of a cache folder (a run
directory's `cache/`), `encoded-<key>.pt`, whose `key` (`corpus_key`) is a SHA-256 of the
vocabularies' fingerprint and of every pair's text: change a sentence or the vocabulary, and the
key changes, so a stale file is never read.

The file holds each side's ids as two flat tensors (`pack`: the lengths of the rows and their ids
end to end), written atomically and loaded with `weights_only=True`. A damaged or foreign file is
not trusted: the corpus is encoded again and the file replaced.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import torch

from annotated_transformer.files import atomic_save
from annotated_transformer.tokenization import EncodedPairs, Vocabularies, encode_pairs

from .checks import check_pairs

__all__ = ["cached_encode_pairs", "corpus_key", "pack", "unpack"]


def pack(rows: list[list[int]]) -> dict[str, torch.Tensor]:
    """Rows of ids of different lengths as two flat tensors: `lengths` (int64) and `ids` (int32)."""
    lengths = torch.tensor([len(row) for row in rows], dtype=torch.int64)
    flat = torch.tensor([i for row in rows for i in row], dtype=torch.int32)
    return {"lengths": lengths, "ids": flat}


def unpack(packed: dict[str, torch.Tensor]) -> list[list[int]]:
    """The rows `pack` packed; a `ValueError` where the lengths do not add up to the number of ids."""
    flat, lengths = packed["ids"].tolist(), packed["lengths"].tolist()
    rows, start = [], 0
    for length in lengths:
        rows.append(flat[start : start + length])
        start += length
    if start != len(flat):
        raise ValueError("lengths do not add up to the number of ids")
    return rows


def corpus_key(pairs: Sequence[tuple[str, str]], vocabs: Vocabularies) -> str:
    """A SHA-256 of the text and the vocabularies: the cache entry of exactly this encoding."""
    pairs = check_pairs(pairs)
    digest = hashlib.sha256(vocabs.sha256().encode())
    for source, target in pairs:
        digest.update(source.encode("utf-8") + b"\x00" + target.encode("utf-8") + b"\x01")
    return digest.hexdigest()


def cached_encode_pairs(
    pairs: Sequence[tuple[str, str]], vocabs: Vocabularies, cache_dir: str | Path | None
) -> EncodedPairs:
    """`encode_pairs(pairs, vocabs)`, read from `cache_dir/encoded-<key>.pt` when that exists and is
    sound, otherwise computed and written there (`cache_dir=None`: no cache)."""
    if cache_dir is None:
        return encode_pairs(pairs, vocabs)
    key = corpus_key(pairs, vocabs)
    path = Path(cache_dir) / f"encoded-{key}.pt"
    if path.is_file():
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
            if data.get("key") == key:
                return EncodedPairs(unpack(data["source"]), unpack(data["target"]))
        except Exception:  # a truncated or foreign file: fall through and rebuild it
            pass
    encoded = encode_pairs(pairs, vocabs)
    atomic_save({"key": key, "source": pack(encoded.source), "target": pack(encoded.target)}, path)
    return encoded
