"""Companion of chapter 13. The figure that compares word vocabularies with a joint BPE.

`plot_words_against_pieces` draws the two panels of chapter 13's comparison: the share of `<unk>`
tokens on text neither vocabulary has seen (validation and test, each language), and the lengths
of the German training sentences in spaCy words and in BPE pieces. It only draws what the chapter
computed (`EncodedPairs.unknown_rate`, the sentences' lengths).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["plot_words_against_pieces"]


def plot_words_against_pieces(encoded: dict, german_lengths: dict[str, list[int]], corpus_name: str) -> None:
    """encoded: {(kind, split): EncodedPairs} for kind "word" and "bpe", split "val" and "test";
    german_lengths: {label: tokens per training sentence} ("spaCy words", "BPE pieces")."""
    _, (ax_unknown, ax_length) = plt.subplots(1, 2, figsize=(10, 3.5))
    labels = [f"{split} {language}" for split in ("val", "test") for language in ("de", "en")]
    positions = np.arange(len(labels))
    for offset, kind in ((-0.2, "word"), (0.2, "bpe")):
        rates = [100 * encoded[kind, split].unknown_rate()[side] for split in ("val", "test") for side in (0, 1)]
        bars = ax_unknown.bar(positions + offset, rates, width=0.4,
                              label="word vocabularies" if kind == "word" else "joint BPE")
        ax_unknown.bar_label(bars, fmt="%.1f", fontsize=8)
    ax_unknown.set_xticks(positions, labels=labels)
    ax_unknown.set(title="Unknown tokens on unseen text", ylabel="tokens that are <unk> (%)")
    ax_unknown.legend()
    bins = np.arange(0.5, max(max(v) for v in german_lengths.values()) + 1.5)
    for label, values in german_lengths.items():
        ax_length.hist(values, bins=bins, alpha=0.6, label=label)
    ax_length.set(title=f"German sentence lengths ({corpus_name} train)", xlabel="tokens per sentence",
                  ylabel="sentences")
    ax_length.legend()
    plt.tight_layout()
