"""A class written over several notebook cells, with prose between its methods.

`@add_to_class(C)` above a function makes it a method of class `C`, as d2l's `add_to_class` does:
chapter 9's `Trainer`, chapter 10's `LongRun` and chapter 14's `Translator` get their methods so.
The function is returned as it is, so that the module's name for it stays bound to the function
(`training.fit` is `Trainer.fit`), not to None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["add_to_class"]

F = TypeVar("F", bound=Callable)


def add_to_class(cls: type) -> Callable[[F], F]:
    """A decorator that sets the function it decorates as the attribute of `cls` of the same name,
    and returns the function unchanged."""

    def add(function: F) -> F:
        setattr(cls, function.__name__, function)
        return function

    return add
