"""The checks of what a function is given (annotated_transformer.helpers.input_checks): sentences, pairs
and counts come back as lists and ints, or are refused in one line that names the argument, what it
must be and what came. (tests/test_tokenization.py and tests/test_translation.py check that the
functions that take text use them.)"""

import itertools
from pathlib import Path

import pytest
from helpers import one_line

from annotated_transformer.helpers.input_checks import (
    _check_list,
    _is_pair,
    check_count,
    check_pairs,
    check_text,
    check_texts,
    shown,
)


def test_shown_is_short_on_one_line_and_names_types_its_repr_hides():
    assert shown(None) == "None" and shown("A dog") == "'A dog'" and shown(3) == "3"
    assert shown([1, 2]) == "[1, 2]" and shown(True) == "True"
    assert shown(Path("a")).endswith("(PosixPath)") or shown(Path("a")).endswith("(WindowsPath)")
    long = shown("Ein Hund läuft. " * 50)
    assert len(long) < 70 and "\n" not in long and "..." in long
    assert shown(list(range(1000))) == "[0, 1, 2, 3, ...]"


def test_check_list_keeps_what_a_generator_gave():
    numbers = _check_list((i for i in range(3)), "numbers", "ints", lambda i: isinstance(i, int), None)
    assert numbers == [0, 1, 2]
    assert _check_list([], "numbers", "a list of ints", lambda i: True, None) == []
    with pytest.raises(ValueError, match="must hold at least one number, got an empty tuple") as info:
        _check_list((), "numbers", "a list of ints", lambda i: True, "one number")
    one_line(info)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: check_text(None), TypeError, "text must be a string, got None"),
        (lambda: check_text(b"A dog", "source"), TypeError, "source must be a string, got b'A dog'"),
        (lambda: check_texts(["A dog.", None]), TypeError,
         "texts must be a list of strings; item 2 of 2 is None"),
        (lambda: check_texts("A dog"), TypeError, "texts must be a list of strings, got 'A dog'$"),
        (lambda: check_texts({"A dog"}), TypeError, "got {'A dog'}"),
        (lambda: check_texts(42), TypeError, "got 42$"),
        (lambda: check_texts([], "hypotheses", one="one sentence"), ValueError,
         "hypotheses must hold at least one sentence, got an empty list"),
        (lambda: check_pairs([("Ein Hund", "A dog"), ("Ein Hund",)]), TypeError,
         r"pairs must be a list of \(source, target\) pairs of strings; item 2 of 2 is \('Ein Hund',\)"),
        (lambda: check_pairs({"Ein Hund": "A dog"}), TypeError, "got {'Ein Hund': 'A dog'}"),
        (lambda: check_pairs([("a", 1)], roles="(source, reference)"), TypeError,
         r"a list of \(source, reference\) pairs of strings; item 1 of 1 is \('a', 1\)"),
        (lambda: check_count("8000", "vocab_size", 5), ValueError,
         "vocab_size must be a whole number, at least 5, got '8000'"),
        (lambda: check_count(0, "min_freq"), ValueError,
         "min_freq must be a whole number, at least 1, got 0"),
        (lambda: check_count(True, "every"), ValueError,
         "every must be a whole number, at least 1, got True"),
        (lambda: check_count(2.0, "every"), ValueError, "got 2.0"),
    ],
)
def test_bad_values_are_refused_in_one_line(call, error, message):
    with pytest.raises(error, match=message) as info:
        call()
    one_line(info)


def test_good_values_come_back_as_lists_and_ints():
    assert check_text("A dog.") == "A dog."
    assert check_texts(iter(["A dog.", "A cat."])) == ["A dog.", "A cat."]
    pairs = check_pairs(pair for pair in [("Ein Hund.", "A dog."), ["Eine Katze.", "A cat."]])
    assert pairs == [("Ein Hund.", "A dog."), ["Eine Katze.", "A cat."]]
    assert check_count(8000, "vocab_size", 5) == 8000 and type(check_count(True + 1, "n")) is int
    assert [_is_pair(p) for p in [("a", "b"), ["a", "b"], ("a",), ("a", "b", "c"), ("a", 1), "ab"]] == [
        True, True, False, False, False, False]


def test_a_long_bad_list_is_shown_short():
    sentences = ["Ein Hund läuft." * 50] * 999 + [None]
    with pytest.raises(TypeError) as info:
        check_texts(sentences)
    assert one_line(info).endswith("item 1000 of 1000 is None")
    with pytest.raises(TypeError) as info:
        check_texts(itertools.repeat(3, 5))
    assert one_line(info) == "texts must be a list of strings; item 1 of 5 is 3"
    with pytest.raises(TypeError) as info:
        check_texts(sentences[0])
    assert len(one_line(info)) < 120
