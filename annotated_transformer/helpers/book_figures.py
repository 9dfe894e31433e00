"""Figures for the book's prose, computed instead of typed.

A chapter's prose never types a measured figure: a code cell reads it from the result file the
package ships (`result`) and hands it, formatted, to the prose with `glue`; the Markdown cell pastes
it with MyST-NB's role, {glue:text}`name`. The cells that only glue (tagged `glue`) are re-run by
`tools/glue_figures.py` whenever a result file changes, and tests/test_figures.py checks that their
committed outputs are what the result files give now.

`glue` writes the same display output as MyST-NB's own `myst_nb.glue(name, value, display=False)`,
so that a chapter needs no MyST-NB where it runs (Colab).
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

__all__ = ["GLUE_PREFIX", "glue", "glue_output", "result"]

GLUE_PREFIX = "application/papermill.record/"  # the MIME prefix MyST-NB reads glued values from


def result(name: str) -> Any:
    """The contents of a result file the package ships, e.g. `result("multi30k_seeds.json")` or
    `result("gpu/final.json")` (annotated_transformer/results/)."""
    if not isinstance(name, str) or not name.endswith(".json"):
        raise ValueError(f"a result file is named like 'multi30k_seeds.json', got {name!r}")
    path = files("annotated_transformer").joinpath("results", *name.split("/"))
    if not path.is_file():
        raise FileNotFoundError(f"no result file {name!r} in annotated_transformer/results/")
    return json.loads(path.read_text(encoding="utf-8"))


def glue_output(name: str, value: str | int | float) -> dict:
    """The display output (a notebook's `display_data`) that holds `value` under `name`."""
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"a glue name is letters, digits, '_' and '-', got {name!r}")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TypeError(f"glue a figure as text or a number, got {type(value).__name__} for {name!r}")
    return {
        "output_type": "display_data",
        "data": {GLUE_PREFIX + "text/plain": repr(value)},
        "metadata": {"scrapbook": {"name": name, "mime_prefix": GLUE_PREFIX}},
    }


def glue(name: str, value: str | int | float) -> None:
    """Hand `value` to the chapter's prose as `name` ({glue:text}`name` pastes it). Format it here
    (`f"{bleu:.2f}"`): the prose shows the text as it is. Shows nothing in the notebook."""
    from IPython.display import display  # only where a chapter runs: IPython is there

    output = glue_output(name, value)
    display(output["data"], raw=True, metadata=output["metadata"])
