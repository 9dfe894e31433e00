"""`make export`: regenerate the package's chapter modules from the notebooks in book/ (nbdev-export).

One change to nbdev's export: the package's docstring is chapter 1's, not a list of modules. nbdev
3 rewrites `annotated_transformer/__init__.py`'s docstring into a "Modules:" list of every module
whose own docstring runs past three lines, which here are the hand-written modules of helpers/,
companions/, runs/ and cli/; run in a checkout (where those exist), a plain `nbdev-export` would
leave `git status` dirty. The processor that lets a chapter export modules of its own
(`tools/nbdev_modules.py`) is named in pyproject.toml and imported by nbdev from the repository,
which is why the repository goes on sys.path.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    sys.path.insert(0, str(ROOT))
    import nbdev.config
    from nbdev.doclinks import nbdev_export

    nbdev.config.update_init_mdoc = lambda *args, **kwargs: None  # chapter 1 writes the docstring
    nbdev_export()


if __name__ == "__main__":
    main()
