"""Checks of what a function is given: sentences, sentence pairs and counts.

The functions that take text (chapter 13's tokenizers, vocabularies and encoders, chapter 14's
translator and its BLEU evaluation) check it before they start, and say in one line what they
expected and what they got, instead of failing deep inside spaCy or a tensor with a message that
names neither the argument nor the value:

    >>> check_texts(["A dog.", None])
    Traceback (most recent call last):
    ...
    TypeError: texts must be a list of strings; item 2 of 2 is None

Each check returns what it was given as it will be used: a list (so a generator, read once, is kept),
or an `int`.
"""

from __future__ import annotations

import numbers
import reprlib
from collections.abc import Callable, Iterable, Mapping, Set
from typing import Any

__all__ = ["check_count", "check_pairs", "check_text", "check_texts", "shown"]

_SHORT = reprlib.Repr()  # how a message shows a value: long strings and lists cut short, on one line
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxtuple = 60, 60, 4, 4


def shown(value: Any) -> str:
    """`value` as a one-line message shows it: a short repr, with its type where the repr does not
    say it (`'A dog'` is a string, `<object ...> (Path)` needs the name)."""
    text = _SHORT.repr(value)
    says_its_type = value is None or type(value) in (bool, int, float, str, bytes, list, tuple, dict)
    return text if says_its_type else f"{text} ({type(value).__name__})"


def _check_list(values: Any, name: str, expected: str, fits: Callable[[Any], bool], one: str | None) -> list:
    """`values` (any iterable but a string, a mapping or a set) as a list whose every item `fits`.

    Otherwise a one-line error that names the argument `name`, what was `expected` and what came:
    a `TypeError` for the wrong kind of value or item, a `ValueError` for an empty list where `one`
    names the item that at least one of is needed (None: an empty list will do).
    """
    if isinstance(values, str | bytes | Mapping | Set) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be {expected}, got {shown(values)}")
    kind, values = type(values).__name__, list(values)
    bad = next((i for i, value in enumerate(values) if not fits(value)), None)
    if bad is not None:
        item = f"item {bad + 1} of {len(values)}"
        raise TypeError(f"{name} must be {expected}; {item} is {shown(values[bad])}")
    if one is not None and not values:
        raise ValueError(f"{name} must hold at least {one}, got an empty {kind}")
    return values


def check_texts(texts: Any, name: str = "texts", expected: str = "a list of strings",
                one: str | None = None) -> list[str]:
    """Sentences: a list (or any other iterable, in order) of strings."""
    return _check_list(texts, name, expected, lambda text: isinstance(text, str), one)


def check_text(text: Any, name: str = "text") -> str:
    """One sentence: a string."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a string, got {shown(text)}")
    return text


def _is_pair(pair: Any) -> bool:
    """Whether `pair` is a sentence pair: a tuple or list of two strings."""
    return (isinstance(pair, tuple | list) and len(pair) == 2
            and isinstance(pair[0], str) and isinstance(pair[1], str))


def check_pairs(pairs: Any, name: str = "pairs", roles: str = "(source, target)",
                one: str | None = None) -> list[tuple[str, str]]:
    """Sentence pairs: a list of (source, target) pairs of two strings each; `roles` names the two
    sides in the message, e.g. "(source, reference)"."""
    return _check_list(pairs, name, f"a list of {roles} pairs of strings", _is_pair, one)


def check_count(value: Any, name: str, at_least: int = 1) -> int:
    """A setting that counts something: a whole number (not a bool, not "8000"), at least `at_least`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < at_least:
        raise ValueError(f"{name} must be a whole number, at least {at_least}, got {shown(value)}")
    return int(value)
