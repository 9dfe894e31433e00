"""Translators the book trained (a run of chapter 14), shipped with the package: translate German without training.

`annotated_transformer/pretrained/NAME/` is a finished run directory reduced to what translating
needs: `model.pt` (the run's averaged model, §6.1, its weights stored in half precision so that the
package stays small; they are loaded into a float32 model), `vocab.json` and `recipe.json` (its
decoding settings). `NAME.json` beside it is the result file: where the model comes from, the scores
of the shipped weights, a few test sentences with their translations, and the SHA-256 of each file,
checked before any of them is read. `Translator.load`, the command line (`pretrained:NAME` where a run
directory goes) and `load_pretrained` all read the folder the same way.

    from annotated_transformer.runs.pretrained import load_pretrained
    load_pretrained("multi30k").translate("Ein Mann fährt Fahrrad.")
"""

from __future__ import annotations

import hashlib
import json
from importlib.resources import files
from pathlib import Path
from typing import Any

__all__ = ["FILES", "PREFIX", "available", "describe", "load_pretrained", "pretrained_dir", "sha256_of",
           "shipped_root"]

FILES = ("model.pt", "vocab.json", "recipe.json")  # what a shipped translator's folder holds
PREFIX = "pretrained:"  # how the command line names one where a run directory goes


def shipped_root() -> Path:
    """The folder of the shipped translators, annotated_transformer/pretrained/."""
    return Path(str(files("annotated_transformer") / "pretrained"))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def available(root: Path | None = None) -> list[str]:
    """The names of the translators shipped with the package."""
    root = root or shipped_root()
    return sorted(path.stem for path in root.glob("*.json") if (root / path.stem).is_dir())


def describe(name: str, root: Path | None = None) -> dict[str, Any]:
    """The result file of the shipped translator `name`: its source, scores and files' SHA-256."""
    root = root or shipped_root()
    if not isinstance(name, str) or name not in available(root):
        raise ValueError(f"no shipped translator {name!r}: choose one of {', '.join(available(root)) or 'none'}")
    return json.loads((root / f"{name}.json").read_text(encoding="utf-8"))


def pretrained_dir(name: str, root: Path | None = None) -> Path:
    """The folder of the shipped translator `name`, after checking that each file is the one its
    result file names (a damaged or replaced file, or one whose digest the result file lacks, is refused, never read)."""
    root = root or shipped_root()
    expected = describe(name, root)["sha256"]
    folder = root / name
    for file in FILES:
        path = folder / file
        if not path.is_file() or file not in expected or sha256_of(path) != expected[file]:
            raise ValueError(f"the shipped translator {name!r} is damaged ({path} is missing or not the file "
                             f"it was shipped with): reinstall the package")
    return folder


def load_pretrained(name: str = "multi30k", device=None, **settings):
    """The shipped translator `name` as a `Translator` (chapter 14), on `device` (default: the CPU),
    with the decoding settings of its recipe unless given (`beam_size`, `alpha`)."""
    from annotated_transformer.translator import Translator

    return Translator.load(pretrained_dir(name), device=device, **settings)
