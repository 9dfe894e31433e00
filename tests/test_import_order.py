"""The package's imports follow the book: a module imports only the modules of its own chapter or of
earlier ones, so that a reader who has read up to a chapter has met everything its code uses.
(`__init__`, chapter 1's map of the public API, gathers every module and is the exception.)"""

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "annotated_transformer"
EXEMPT = {"__init__", "_modidx"}
# The subpackage of machinery written by hand (no chapter exports it): any chapter may use it.
HAND_WRITTEN = {"machinery"}


def chapter_of_modules() -> dict[str, int]:
    """Each module the notebooks export, with the number of the chapter that exports it
    (`#| default_exp NAME` for the chapter's module, `#| export NAME` for a cell's own)."""
    chapters: dict[str, int] = {}
    for notebook in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        number = int(notebook.name[:2])
        for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
            for line in cell["source"] if cell["cell_type"] == "code" else []:
                found = re.match(r"#\|\s*(?:default_exp|export)\s+([A-Za-z_][\w.]*)\s*$", line)
                if found:
                    chapters.setdefault(found.group(1), number)
    return chapters


def imported_modules(path: Path) -> set[str]:
    """The package's modules that `path` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                found.add(node.module.split(".")[0])
            elif node.level == 1:
                found.update(alias.name for alias in node.names)
            elif node.module and node.module.startswith("annotated_transformer."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            names = (alias.name for alias in node.names)
            found.update(name.split(".")[1] for name in names if name.startswith("annotated_transformer."))
    return found


def test_every_module_belongs_to_a_chapter():
    chapters = chapter_of_modules()
    modules = {path.stem for path in PACKAGE.glob("*.py")} - EXEMPT
    assert modules <= set(chapters), f"modules no chapter exports: {sorted(modules - set(chapters))}"


def test_modules_import_only_their_own_and_earlier_chapters():
    chapters = chapter_of_modules()
    later = []
    for path in sorted(PACKAGE.glob("*.py")):
        if path.stem in EXEMPT:
            continue
        for name in sorted(imported_modules(path) - EXEMPT - HAND_WRITTEN):
            if chapters[name] > chapters[path.stem]:
                importer = f"{path.stem} (chapter {chapters[path.stem]})"
                later.append(f"{importer} imports {name} (chapter {chapters[name]})")
    assert not later, "imports of later chapters: " + "; ".join(later)


def test_the_import_finder_sees_relative_absolute_and_nested_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from .model import Transformer\nfrom . import data\nimport annotated_transformer.batching\n"
        "def f():\n    from annotated_transformer.training import Trainer\n"
    )
    assert imported_modules(source) == {"model", "data", "batching", "training"}


def test_no_library_module_guards_its_imports():
    """A chapter that exports several modules puts each module's imports of the others before their
    definitions (chapters 9, 10, 14, 16), so that no library module needs a notebook's guard."""
    guarded = [path.name for path in sorted(PACKAGE.glob("*.py"))
               if re.search(r"^if __name__ *!= *[\"']__main__[\"']", path.read_text(encoding="utf-8"), re.M)]
    assert not guarded, f"modules that guard imports with `if __name__ != '__main__'`: {guarded}"
