"""The book's quick mode: `quick_mode()` is True when the environment variable
ANNOTATED_TRANSFORMER_QUICK is 1, true, yes or on (CI sets it), and the chapters that train then
shrink their training to seconds (chapter 9)."""

import os

__all__ = ["quick_mode"]

_QUICK_ENV = "ANNOTATED_TRANSFORMER_QUICK"


def quick_mode() -> bool:
    """True when the environment variable ANNOTATED_TRANSFORMER_QUICK is 1/true/yes/on (CI sets it)."""
    return os.environ.get(_QUICK_ENV, "").strip().lower() in ("1", "true", "yes", "on")
