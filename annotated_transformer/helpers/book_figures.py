"""Figures for the book's prose, computed instead of typed.

A chapter's prose never types a measured figure: a code cell reads it from the result file the
package ships (`result`) and hands it, formatted, to the prose with `glue`. The prose holds the
figure as plain text between two HTML comments that name it, `<!--fig:name-->40.73<!--/fig-->`,
which every notebook viewer (Colab, Jupyter, GitHub) and the online book show as the number alone.
`tools/glue_figures.py` runs the cells that only glue (tagged `glue`) and writes their figures
between the markers whenever a result file changes; tests/test_figures.py checks that the prose
holds what the result files give now.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib.resources import files
from typing import Any

__all__ = ["glue", "glue_all", "glue_text", "result"]


def result(name: str) -> Any:
    """The contents of a result file the package ships, e.g. `result("multi30k_seeds.json")` or
    `result("gpu/final.json")` (annotated_transformer/results/)."""
    if not isinstance(name, str) or not name.endswith(".json"):
        raise ValueError(f"a result file is named like 'multi30k_seeds.json', got {name!r}")
    path = files("annotated_transformer").joinpath("results", *name.split("/"))
    if not path.is_file():
        raise FileNotFoundError(f"no result file {name!r} in annotated_transformer/results/")
    return json.loads(path.read_text(encoding="utf-8"))


def glue_text(name: str, value: str | int | float) -> str:
    """The text the prose shows for the figure `name` whose value is `value` (checked: a name of
    letters, digits, '_' and '-'; a value of text or a number, on one line)."""
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"a glue name is letters, digits, '_' and '-', got {name!r}")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TypeError(f"glue a figure as text or a number, got {type(value).__name__} for {name!r}")
    text = str(value)
    if "\n" in text or "<!--" in text or "-->" in text:
        raise ValueError(f"a glued figure is one line of text without HTML comments, got {text!r} for {name!r}")
    return text


def glue(name: str, value: str | int | float) -> None:
    """Hand `value` to the chapter's prose as the figure `name`. Format it here (`f"{bleu:.2f}"`):
    the prose shows the text as it is. `tools/glue_figures.py` writes it between the prose's markers
    `<!--fig:name-->` and `<!--/fig-->`; where the chapter runs, this only checks the name and value
    and shows nothing."""
    glue_text(name, value)


def glue_all(figures: Mapping[str, str | int | float]) -> None:
    """`glue` each figure of `figures`, name -> value (formatted already)."""
    for name, value in figures.items():
        glue(name, value)
