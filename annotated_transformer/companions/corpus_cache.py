"""Companion of chapter 13. A cache of encoded corpora: chapter 13's `encode_pairs`, computed once per text and vocabulary.

Tokenizing a training split takes seconds to minutes, and its ids never change while the text and
the vocabulary stay the same. `cached_encode_pairs` keeps them in a file of a cache folder (a run
directory's `cache/`), `encoded-<key>.pt`, whose `key` (`corpus_key`) is a SHA-256 of the
vocabularies' fingerprint and of every pair's text: change a sentence or the vocabulary, and the
key changes, so a stale file is never read.

The file holds each side's ids as two flat tensors (`pack`: the lengths of the rows and their ids
end to end), written atomically and loaded with `weights_only=True`. A damaged or foreign file is
not trusted: the corpus is encoded again and the file replaced.

With BPE-dropout (chapter 13's `sample_merges`, the recipe's `bpe_dropout`) the training pairs'
ids do change: every epoch samples a new segmentation of every word. `_dropout_epochs` tokenizes the
pairs once (spaCy) and returns `epoch -> EncodedPairs`, each epoch's sample drawn from a generator
seeded by the run's seed and the epoch, so that a resumed or distributed run (every rank) draws the
same; `training_batches` gives `Trainer.fit` the token batches of each epoch's sample, or, at
dropout 0, exactly chapter 13's `token_batches` of the cached encoding. Only training batches are
built so: the vocabulary, validation and test keep plain BPE.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from annotated_transformer.helpers.files import atomic_save
from annotated_transformer.helpers.processes import is_main_process
from annotated_transformer.tokenization import (BPE, BatchSequence, EncodedPairs, Vocabularies, sample_merges,
                                                encode_pairs, token_batches)

from annotated_transformer.helpers.input_checks import check_pairs
from annotated_transformer.companions.vocabulary_files import vocabularies_sha256

__all__ = ["cached_encode_pairs", "corpus_key", "pack", "training_batches", "unpack"]


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
    digest = hashlib.sha256(vocabularies_sha256(vocabs).encode())
    for source, target in pairs:
        digest.update(source.encode("utf-8") + b"\x00" + target.encode("utf-8") + b"\x01")
    return digest.hexdigest()


def cached_encode_pairs(
    pairs: Sequence[tuple[str, str]], vocabs: Vocabularies, cache_dir: str | Path | None
) -> EncodedPairs:
    """`encode_pairs(pairs, vocabs)`, read from `cache_dir/encoded-<key>.pt` when that exists and is
    sound, otherwise computed and written there by the main process (`cache_dir=None`: no cache)."""
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
    if is_main_process():  # the other ranks of a distributed run encode the same pairs and write nothing
        atomic_save({"key": key, "source": pack(encoded.source), "target": pack(encoded.target)}, path)
    return encoded


def _sample_ids(bpe: BPE, sentences: Sequence[Sequence[str]], dropout: float, rng: random.Random) -> list[list[int]]:
    """`bpe.encode_batch(sentences)` with BPE-dropout: every word's segmentation sampled with `rng`
    (chapter 13's `sample_merges`); `dropout=0` gives `encode_batch`'s ids."""
    ranks = {pair: rank for rank, pair in enumerate(bpe.merges)}
    lookup = bpe.vocab.lookup_indices
    return [lookup([piece for word in words for part in word.split()
                    for piece in sample_merges(part, ranks, dropout, rng)]) for words in sentences]


def _dropout_epochs(
    pairs: Sequence[tuple[str, str]], vocabs: Vocabularies, dropout: float, seed: int = 0
) -> Callable[[int], EncodedPairs]:
    """`epoch -> EncodedPairs`: the pairs as `encode_pairs` encodes them (the same pairs kept), but
    every word segmented with BPE-dropout `dropout`, a new sample each epoch, the same for the same
    `seed` and epoch. The pairs are tokenized (spaCy) once, here."""
    pairs = check_pairs(pairs)
    if vocabs.kind != "bpe":
        raise ValueError(f"BPE-dropout needs a BPE vocabulary, not {vocabs.kind!r}")
    source = vocabs.source.tokenizer.pipe(s for s, _ in pairs)
    target = vocabs.target.tokenizer.pipe(t for _, t in pairs)
    kept = [i for i, words in enumerate(source) if any(word.split() for word in words)]  # as encode_pairs
    source, target = [source[i] for i in kept], [target[i] for i in kept]

    def epoch_pairs(epoch: int) -> EncodedPairs:
        rng = random.Random(f"bpe-dropout {seed} {epoch}")
        return EncodedPairs(_sample_ids(vocabs.source.bpe, source, dropout, rng),
                            _sample_ids(vocabs.target.bpe, target, dropout, rng))

    return epoch_pairs


def training_batches(
    pairs: Sequence[tuple[str, str]],
    encoded: EncodedPairs,
    vocabs: Vocabularies,
    dropout: float,
    max_tokens: int,
    **options,
) -> Callable[[int], BatchSequence]:
    """The training run's `epoch -> BatchSequence`: `token_batches(encoded, max_tokens, **options)`
    at `dropout=0` or with word vocabularies (which have no merges to drop); otherwise each epoch's batches of `_dropout_epochs(pairs, ...)(epoch)`, the
    epoch's own sample, batched and shuffled as `token_batches` does (`options`: its seed, rank...)."""
    if dropout == 0 or vocabs.kind != "bpe":
        return token_batches(encoded, max_tokens, **options)
    sample = _dropout_epochs(pairs, vocabs, dropout, options.get("seed", 0))
    return lambda epoch: token_batches(sample(epoch), max_tokens, **options)(epoch)
