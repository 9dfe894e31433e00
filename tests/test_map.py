"""The maps match the package: every `annotated_transformer.…` name and every repository path
(`experiments/…`, `benchmarks/…`, `tools/…`, `tests/…`) that the chapters, the Markdown pages, the
README and CONTRIBUTING give exists (a name imports, a path is a file or folder of the repository).

Chapter outputs are left out: they show what a command printed when it ran, including the commands
of earlier runs kept in result files."""

import importlib
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"\bannotated_transformer(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w./-])((?:experiments|benchmarks|tools|tests)/[\w./*-]*\w)")


def texts() -> dict[str, str]:
    """The text of every page a reader or a contributor reads, by its path: the chapters' Markdown
    and code cells (not their outputs), book/*.md, the README and CONTRIBUTING."""
    found = {}
    for notebook in sorted((ROOT / "book").glob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        found[f"book/{notebook.name}"] = "\n".join("".join(cell["source"]) for cell in cells)
    for page in [*sorted((ROOT / "book").glob("*.md")), ROOT / "README.md", ROOT / "CONTRIBUTING.md"]:
        found[page.relative_to(ROOT).as_posix()] = page.read_text(encoding="utf-8")
    return found


def resolves(name: str) -> bool:
    """Whether a dotted name is a module of the package, or a name in one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def exists(path: str) -> bool:
    return any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()


def test_every_name_and_path_the_pages_give_exists():
    missing = []
    for page, text in texts().items():
        missing += [f"{page}: {name}" for name in sorted(set(NAME.findall(text))) if not resolves(name)]
        missing += [f"{page}: {path}" for path in sorted(set(PATH.findall(text))) if not exists(path)]
    assert not missing, "names that do not import and paths that do not exist:\n  " + "\n  ".join(missing)


@pytest.mark.parametrize("name", ["annotated_transformer.companions.run_directory.RunDirectory",
                                  "annotated_transformer.cli.commands"])
def test_a_name_that_exists_resolves(name):
    assert resolves(name)


@pytest.mark.parametrize("name", ["annotated_transformer.machinery.run_directory",
                                  "annotated_transformer.translation.train_translation",
                                  "annotated_transformer.run_directory",
                                  "annotated_transformer.runs.run_directory",
                                  "annotated_transformer.companions.run_layout",
                                  "annotated_transformer.files",
                                  "annotated_transformer.runs.experiments",
                                  "annotated_transformer.cli.experiments"])
def test_a_name_that_moved_does_not(name):
    assert not resolves(name)


def test_the_finders_read_names_and_paths_from_prose():
    text = "See `annotated_transformer.runs.long_run.LongRun`, tests/test_map.py and (experiments/x.py)."
    assert NAME.findall(text) == ["annotated_transformer.runs.long_run.LongRun"]
    assert PATH.findall(text) == ["tests/test_map.py", "experiments/x.py"]
    assert exists("tests/test_map.py") and not exists("experiments/x.py")
