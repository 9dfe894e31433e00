"""Companion of chapter 14. What chapter 14's training and translating say about their input before it goes wrong quietly.

- `batch_warning`: batches of `max_tokens` too small to hold more than one sentence pair, so that
  every step would learn from a single sentence (a `TrainingWarning`, naming the setting).
- `TranslationInfo` and `input_warning`: what a model could read of each sentence it translates
  (a sentence in another script is a row of `<unk>` tokens; one much longer than any of the
  training data is often translated only in part), and one `InputWarning` line per call about
  those it could not read well.
- `check_source_lengths`: a sentence longer than the model's positional table is refused by number.
- `check_vocabulary_sizes`: a model is refused the vocabularies of another run, of other sizes.
- `check_scored_texts`, `check_scoring_input`: what BLEU is computed from, refused in one line when
  it is not lists of sentences, one reference per hypothesis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from annotated_transformer.helpers.errors import Setting, SettingsMessage
from annotated_transformer.model import TransformerConfig
from annotated_transformer.helpers.input_checks import check_pairs as _check_pairs
from annotated_transformer.helpers.input_checks import check_texts as _check_texts
from annotated_transformer.helpers.input_checks import shown as _shown
from annotated_transformer.tokenization import Vocabularies, VocabularyError

__all__ = [
    "InputWarning",
    "TrainingWarning",
    "TranslationInfo",
    "batch_warning",
    "check_scored_texts",
    "check_scoring_input",
    "check_source_lengths",
    "check_vocabulary_sizes",
    "input_warning",
]


class TrainingWarning(SettingsMessage, UserWarning):
    """A recipe that trains, but hardly as meant: batches of a single sentence, say. The message
    names the setting to change (`settings`)."""


def batch_warning(lengths: Sequence[tuple[int, int]], max_tokens: int) -> TrainingWarning | None:
    """A warning when most training pairs cannot share a batch of `max_tokens` tokens with another
    pair (`lengths`: source and target lengths), so that each is a batch of its own; else None."""
    sizes = sorted(max(source, target + 1) for source, target in lengths)  # padded, as batches count
    alone = sum(2 * size > max_tokens for size in sizes)
    if alone <= len(sizes) / 2:
        return None
    median = sizes[len(sizes) // 2]
    steps = "every step trains" if alone == len(sizes) else "most steps train"
    return TrainingWarning(
        f"{steps} on a single sentence pair: {alone / len(sizes):.0%} of the training pairs (median length "
        f"{median} tokens) are longer than half the batch size (", Setting("max_tokens"),
        f", now {max_tokens}), so each of them is a batch of its own; raise it to give batches room for "
        f"many sentences, e.g. to {100 * median}")


class InputWarning(UserWarning):
    """Sentences the model cannot read well: mostly unknown tokens, or longer than any it learned."""


_UNREADABLE_SHARE = 0.5  # a sentence with at least this share of <unk> tokens cannot be translated


@dataclass
class TranslationInfo:
    """A translation, and what the model could read of its source (`Translator.translate_with_info`)."""

    text: str  # the translation
    source_tokens: int  # the source sentence's length in tokens
    unknown_tokens: int  # how many of them are <unk>: characters (BPE) or words the vocabulary lacks
    too_long: bool  # longer than the longest source sentence of the training data

    @property
    def unknown_share(self) -> float:
        return self.unknown_tokens / max(self.source_tokens, 1)

    @property
    def unreadable(self) -> bool:
        return self.unknown_share >= _UNREADABLE_SHARE


def input_warning(infos: Sequence[TranslationInfo], longest: int | None) -> str | None:
    """One line about the sentences of one call that the model cannot read well (`longest`: the
    longest source sentence of the training data, in tokens), or None."""
    def examples(indices: list[int], describe) -> str:
        shown = "; ".join(f"sentence {i + 1}: {describe(infos[i])}" for i in indices[:3])
        return shown + ("; …" if len(indices) > 3 else "")

    def unknown(info: TranslationInfo) -> str:
        return f"{info.unknown_share:.0%} of {info.source_tokens} tokens"

    parts, n = [], len(infos)
    unreadable = [i for i, info in enumerate(infos) if info.unreadable]
    if unreadable:
        parts.append(
            f"{len(unreadable)} of {n} sentence(s) are mostly <unk>, words or characters the vocabulary "
            f"lacks ({examples(unreadable, unknown)}): the model cannot read them (another language or "
            f"script?), and their translations mean nothing"
        )
    long = [i for i, info in enumerate(infos) if info.too_long]
    if long:
        parts.append(
            f"{len(long)} of {n} sentence(s) are longer than the longest the model was trained on, "
            f"{longest} tokens ({examples(long, lambda info: f'{info.source_tokens:,} tokens')}): the "
            f"translation may cover only a part; split long text into sentences"
        )
    return "; ".join(parts) or None


def check_source_lengths(sources: Sequence[Sequence[int]], limit: int) -> None:
    """Refuse, naming it, a sentence longer than the model's positional table (max_len)."""
    too_long = [i for i, ids in enumerate(sources) if len(ids) > limit]
    if too_long:
        i = too_long[0]
        raise ValueError(f"sentence {i + 1} has {len(sources[i]):,} tokens, more than the model can read "
                         f"(max_len {limit:,} positions): split it into shorter sentences")


def check_vocabulary_sizes(config: TransformerConfig, vocabs: Vocabularies) -> None:
    """Refuse vocabularies whose sizes are not the model's (`config`): those of another run."""
    if (config.src_vocab_size, config.tgt_vocab_size) != (len(vocabs.source), len(vocabs.target)):
        raise VocabularyError(
            f"the model expects vocabularies of {config.src_vocab_size}/{config.tgt_vocab_size} tokens, "
            f"the vocabulary file has {len(vocabs.source)}/{len(vocabs.target)}: use the vocab.json of "
            f"the run that trained this checkpoint"
        )


def check_scored_texts(hypotheses: Any, references: Any) -> tuple[list[str], list[str]]:
    """Hypotheses and references for BLEU: lists of strings, one reference per hypothesis (any
    iterable of strings, in order, will do), or a one-line error that says what came."""
    hypotheses = _check_texts(hypotheses, "hypotheses", one="one sentence")
    references = _check_texts(references, "references", one="one sentence")
    if len(hypotheses) != len(references):
        raise ValueError(f"references must hold one sentence per hypothesis, got {len(hypotheses)} "
                         f"hypotheses but {len(references)} references")
    return hypotheses, references


def check_scoring_input(translator: Any, pairs: Any) -> list[tuple[str, str]]:
    """What `evaluate_bleu` scores: something that translates, and (source, reference) pairs of
    strings, as a list; or a one-line error that says what came."""
    if isinstance(translator, str) or not callable(getattr(translator, "translate", None)):
        raise TypeError(f"translator must be a Translator (Translator.load(run_dir)), or have its "
                        f"translate(sentences, beam_size), got {_shown(translator)}")
    return _check_pairs(pairs, roles="(source, reference)", one="one (source, reference) pair")
