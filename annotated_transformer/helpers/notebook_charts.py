"""Interactive charts in a chapter (Altair, a dependency of the book, not of the package).

`use_vega_lite_output()` makes Altair's charts Vega-Lite outputs (its "mimetype" renderer), which
JupyterLab, VS Code and the online book draw, the book with its own copy of Vega, offline
(tools/sphinx_ext/vega_charts.py). Colab keeps Altair's default output, which it draws itself.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["altair", "use_vega_lite_output"]


def altair() -> Any:
    """The `altair` module, or an ImportError that says how to get it."""
    try:
        import altair
    except ImportError as error:
        raise ImportError("the book's interactive charts need Altair: pip install 'altair>=5.5,<6'") from error
    return altair


def use_vega_lite_output() -> Any:
    """Switch Altair to Vega-Lite outputs (except on Colab); returns the `altair` module."""
    alt = altair()
    if "google.colab" not in sys.modules:
        alt.renderers.enable("mimetype")
    return alt
