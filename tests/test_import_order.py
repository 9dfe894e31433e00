"""The package's layers, and the order of the chapters within them.

From the bottom up:

1. `helpers/`: leaf helpers, which import nothing of the package.
2. The paper: the chapters' modules (generated from book/, at the package's top level) and their
   companions (`companions/`, hand-written modules that sit beside one chapter). A module imports only
   the modules of its own chapter or of earlier ones, so that a reader who has read up to a chapter has
   met everything its code uses. The same order holds in the layers above: a module of the run layer or
   the command line belongs to a chapter too (`HAND_WRITTEN_CHAPTERS`; its docstring says which) and
   imports no module of a later chapter.
3. `runs/`: the run layer (run directories, a session of a long run, the runs of chapters 14 and 18,
   the shipped translators), above the chapters whose code it runs.
4. `cli/` and `__main__`: the command line, on top.

No module imports from a layer above its own, and no imports go round in a circle. (`__init__`,
chapter 1's map of the public API, gathers the layers and is the one exception; an import of a name
through it, `from annotated_transformer import train_translation`, counts as an import of the module
that defines the name.)
"""

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "annotated_transformer"
PACKAGE_FACE = {"__init__", "_modidx"}  # the public API's re-exports, and nbdev's index
LAYERS = ("helpers", "paper", "runs", "cli")
# The chapter each companion sits beside (its docstring says so too).
COMPANION_CHAPTERS = {
    "companions.chunked_loss": 8,
    "companions.seed_noise": 8,
    "companions.schedule_explorer": 7,
    "companions.training_checks": 9,
    "companions.hardware": 9,
    "companions.decoding_checks": 11,
    "companions.multi30k_files": 12,
    "companions.corpus_cache": 13,
    "companions.batch_sequence": 13,
    "companions.vocabulary_figures": 13,
    "companions.recipe_settings": 14,
    "companions.translation_checks": 14,
    "companions.trained_models": 14,
    "companions.attention_explorer": 14,
    "companions.distributed_check": 15,
    "companions.layer_comparison": 17,
    "companions.run_directory": 10,
    "companions.checkpoint_upgrades": 10,
    "companions.checkpoint_checks": 10,
    "companions.vocabulary_files": 13,
    "companions.layer_norm_figures": 19,
}
# The chapter each hand-written module of the run layer and the command line belongs to (the chapter
# that first uses it; its docstring names it). Modules a notebook exports take their chapter from it.
HAND_WRITTEN_CHAPTERS = {
    "runs.run_files": 10,
    "runs.long_run": 10,
    "runs.fingerprints": 14,
    "runs.bookkeeping": 14,
    "runs.translation_files": 14,
    "runs.pretrained": 14,
    "runs.variant_runs": 18,
    "cli.commands": 16,
    "cli.command_files": 16,
    "cli.recipe_options": 16,
    "cli.experiment_command": 18,
    "__main__": 19,
}


def module_names() -> list[str]:
    """Every module of the package, dotted from the package (`runs.translation`), subpackages'
    `__init__` included (as `runs`), nbdev's index and the package's `__init__` left out."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and parts[-1] not in PACKAGE_FACE and "__pycache__" not in parts:
            names.append(".".join(parts))
    return names


def module_path(name: str) -> Path:
    path = PACKAGE.joinpath(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def layer_of(name: str) -> str:
    top = name.split(".")[0]
    if top in ("helpers", "runs", "cli"):
        return top
    return "cli" if name == "__main__" else "paper"


def chapter_of_modules() -> dict[str, int]:
    """Each module the notebooks export, with the number of the chapter that exports it
    (`#| default_exp NAME` for the chapter's main module, `#| export NAME` for a cell's own)."""
    chapters: dict[str, int] = {}
    for notebook in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        number = int(notebook.name[:2])
        for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
            for line in cell["source"] if cell["cell_type"] == "code" else []:
                found = re.match(r"#\|\s*(?:default_exp|export)\s+([A-Za-z_][\w.]*)\s*$", line)
                if found:
                    chapters.setdefault(found.group(1), number)
    hand_written = {name: number for name, number in HAND_WRITTEN_CHAPTERS.items() if name not in chapters}
    return {**hand_written, **chapters, **COMPANION_CHAPTERS}


def root_exports() -> dict[str, str]:
    """Each name the package's `__init__` re-exports, with the module that defines it
    (`train_translation`: `runs.translation`)."""
    exports = {}
    for node in ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            exports.update({alias.asname or alias.name: node.module for alias in node.names})
    return exports


def imported_modules(
    path: Path, name: str, known: set[str], exports: dict[str, str] | None = None
) -> set[str]:
    """The package's modules that module `name` (at `path`) imports, at the top or inside a
    function: relative imports resolved from the module's own package, `from X import Y` counted as
    module X.Y where that is a module, else as X; a name imported from the package's root counted as
    the module that defines it (`exports`, default `root_exports()`)."""
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    exports = root_exports() if exports is None else exports
    found = set()

    def add(dotted: str, names: list[str]) -> None:
        for alias in names:
            child = f"{dotted}.{alias}" if dotted else alias
            if child in known:
                found.add(child)
            elif dotted in known:
                found.add(dotted)
            elif not dotted and alias in exports:  # through the root's re-exports
                found.add(exports[alias])

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                dotted = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and (node.module + ".").startswith("annotated_transformer."):
                dotted = node.module.removeprefix("annotated_transformer").removeprefix(".")
            else:
                continue
            add(dotted, [alias.name for alias in node.names])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("annotated_transformer."):
                    dotted = alias.name.removeprefix("annotated_transformer.")
                    found.add(dotted if dotted in known else dotted.split(".")[0])
    return found - {name}


def import_graph() -> dict[str, set[str]]:
    names, exports = module_names(), root_exports()
    known = set(names)
    return {name: imported_modules(module_path(name), name, known, exports) for name in names}


def test_every_module_has_a_layer_and_every_paper_module_a_chapter():
    chapters = chapter_of_modules()
    paper = [name for name in module_names() if layer_of(name) == "paper" and name != "companions"]
    assert not [name for name in paper if name not in chapters], "paper modules of no chapter"
    companions = {name for name in paper if name.startswith("companions.")}
    assert companions == set(COMPANION_CHAPTERS), "companions/ and COMPANION_CHAPTERS differ"
    for name, number in COMPANION_CHAPTERS.items():
        assert f"chapter {number}" in ast.get_docstring(ast.parse(module_path(name).read_text())), name


def test_no_module_imports_from_a_layer_above_its_own():
    upward = [f"{name} ({layer_of(name)}) imports {other} ({layer_of(other)})"
              for name, imports in import_graph().items() for other in sorted(imports)
              if LAYERS.index(layer_of(other)) > LAYERS.index(layer_of(name))]
    assert not upward, "imports from a higher layer: " + "; ".join(upward)


def test_helpers_import_nothing_of_the_package():
    graph = import_graph()
    leaning = {name: sorted(graph[name]) for name in graph if layer_of(name) == "helpers" and graph[name]}
    assert not leaning, f"helpers that import the package: {leaning}"


def later_chapter_imports(graph: dict[str, set[str]], chapters: dict[str, int]) -> list[str]:
    """The imports, in any layer, of a module of a later chapter than the importer's."""
    return [f"{name} (chapter {chapters[name]}) imports {other} (chapter {chapters[other]})"
            for name, imports in graph.items() if name in chapters
            for other in sorted(imports) if other in chapters and chapters[other] > chapters[name]]


def test_modules_import_only_their_own_and_earlier_chapters():
    later = later_chapter_imports(import_graph(), chapter_of_modules())
    assert not later, "imports of later chapters: " + "; ".join(later)


def test_every_module_above_the_helpers_has_a_chapter_its_docstring_names():
    """Subpackages' `__init__` modules, which only list their modules, excepted."""
    chapters = chapter_of_modules()
    missing = [name for name in module_names() if layer_of(name) != "helpers" and name not in chapters
               and module_path(name).name != "__init__.py"]
    assert not missing, f"modules of no chapter (add them to HAND_WRITTEN_CHAPTERS): {missing}"
    for name, number in HAND_WRITTEN_CHAPTERS.items():
        path = module_path(name)
        if path.exists() and chapters[name] == number:
            docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            assert re.search(rf"[Cc]hapters? (?:[\d, ]+and )?{number}\b", docstring), (
                f"{name}: its docstring does not name chapter {number}")


def test_an_import_through_the_root_counts_as_one_of_the_defining_module(tmp_path):
    """An upward import through the package's root is caught: a paper module of chapter 9 that takes
    `train_translation` from the root imports the run layer, and a later chapter."""
    source = tmp_path / "training.py"
    source.write_text("from annotated_transformer import Trainer, train_translation\n"
                      "def f():\n    from . import get_recipe\n")
    known = set(module_names())
    imports = imported_modules(source, "training", known)
    assert imports == {"runs.translation", "recipes"}  # Trainer is training's own
    graph = {"training": imports}
    assert later_chapter_imports(graph, chapter_of_modules())
    assert LAYERS.index(layer_of("runs.translation")) > LAYERS.index(layer_of("training"))


def test_chapter_order_is_checked_in_the_run_layer():
    graph = {"runs.long_run": {"runs.translation"}, "cli.commands": {"runs.variant_runs"}}
    later = later_chapter_imports(graph, chapter_of_modules())
    assert len(later) == 2, later


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports in `graph` (its modules in order, the first repeated at the end), or None."""
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = "open"
        for other in sorted(graph.get(name, ())):
            if state.get(other) == "open":
                return [*path[path.index(other):], other]
            if other not in state and (circle := visit(other, [*path, other])):
                return circle
        state[name] = "done"
        return None

    for name in sorted(graph):
        if name not in state and (circle := visit(name, [name])):
            return circle
    return None


def test_no_imports_go_round_in_a_circle():
    circle = find_circle(import_graph())
    assert circle is None, "a circle of imports: " + " -> ".join(circle)


def test_the_circle_finder_finds_a_circle_and_none_where_there_is_none():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_import_finder_resolves_relative_absolute_and_nested_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from ..model import Transformer\nfrom . import run_files\nfrom .long_run import LongRun\n"
        "import annotated_transformer.batching\nfrom annotated_transformer.helpers import progress\n"
        "def f():\n    from annotated_transformer.training import Trainer\n"
    )
    known = {"model", "batching", "training", "runs", "runs.run_files", "runs.long_run", "runs.m",
             "helpers", "helpers.progress"}
    assert imported_modules(source, "runs.m", known) == {
        "model", "runs.run_files", "runs.long_run", "batching", "helpers.progress", "training"}


def test_every_layer_is_seen():
    """The finder sees modules in every layer, so that an empty graph cannot pass the tests above."""
    graph = import_graph()
    assert {layer_of(name) for name in graph} == set(LAYERS)
    assert "runs.run_files" in graph["runs.bookkeeping"] and "training" in graph["runs.long_run"]


def test_no_library_module_guards_its_imports():
    """A chapter that exports several modules puts each module's imports of the others before their
    definitions (chapters 9, 10, 14, 16), so that no library module needs a notebook's guard."""
    guarded = [path.name for path in sorted(PACKAGE.rglob("*.py"))
               if re.search(r"^if __name__ *!= *[\"']__main__[\"']", path.read_text(encoding="utf-8"), re.M)]
    assert not guarded, f"modules that guard imports with `if __name__ != '__main__'`: {guarded}"


def private_imports(path: Path) -> list[str]:
    """The private names (`_name`) that the module at `path` imports from another of the package's
    modules: what one module keeps to itself, no other module reaches for."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level or (node.module or "").startswith("annotated_transformer"):
            found += [f"{node.module}.{alias.name}" for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_module_imports_another_modules_private_names(tmp_path):
    reaching = {path.relative_to(PACKAGE).as_posix(): names for path in sorted(PACKAGE.rglob("*.py"))
                if path.name != "_modidx.py" and (names := private_imports(path))}
    assert not reaching, f"private names imported across modules: {reaching}"
    planted = tmp_path / "m.py"
    planted.write_text("from annotated_transformer.tokenization import sample_merges, _merge\n"
                       "from ..regularization import __all__\n")
    assert private_imports(planted) == ["annotated_transformer.tokenization._merge"]
