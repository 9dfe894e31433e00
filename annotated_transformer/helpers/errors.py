"""Errors that name the settings they are about, keeping each name apart from the text, so that
a Python caller reads `lr_factor` and `root='data'` and chapter 16's command line reads
`--lr-factor` and `--data-dir data` in the same message, with no text reworded.

`Setting` is a name (and the value meant); `SettingsMessage` an error or warning made of text and
`Setting`s; `FieldError` a configuration field with a value it may not have, and `field_error` its
usual message ("`field` must ..., got ..."). Chapter 3's `head_dims` is the first to use them."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    """A setting that a message names (a function's argument, a configuration's field): alone, or
    with the value the message means (`value`; None means "unset", `...` the name alone)."""

    name: str
    value: Any = ...


def python_spelling(setting: Setting) -> str:
    """How Python code says a setting: `lr_factor`, `root='data'`, `clip_grad_norm=None`."""
    return setting.name if setting.value is ... else f"{setting.name}={setting.value!r}"


class SettingsMessage(Exception):
    """An error (or warning) whose message is text and `Setting`s: `str(error)` says the settings
    as Python does, `error.spelled(spelling)` as the caller's `spelling` does."""

    def __init__(self, *parts: str | Setting) -> None:
        self.parts = parts
        super().__init__(self.spelled(python_spelling))

    def spelled(self, spelling: Callable[[Setting], str]) -> str:
        return "".join(part if isinstance(part, str) else spelling(part) for part in self.parts)

    @property
    def settings(self) -> list[Setting]:
        """The settings the message names, in order: the first is the one at fault."""
        return [part for part in self.parts if isinstance(part, Setting)]


class FieldError(SettingsMessage, ValueError):
    """A configuration field with a value it may not have; `field` names it."""

    @property
    def field(self) -> str:
        return self.settings[0].name


def field_error(field: str, requirement: str, value: Any, unset_means: str | None = None) -> FieldError:
    """"`field` must `requirement`, got `value`", and what leaving the field unset (None) means."""
    parts: list[str | Setting] = [Setting(field), f" must {requirement}, got {value!r}"]
    if unset_means is not None:
        parts += ["; ", Setting(field, None), f" means {unset_means}"]
    return FieldError(*parts)
