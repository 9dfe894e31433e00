"""Packaging checks: the notebooks, the generated package, the wheel and the environment files agree.

- annotated_transformer/ is exactly what `nbdev-export` makes from book/*.ipynb;
- environment.yml's pip requirements are pyproject.toml's dependencies plus the [dev] extra;
- `import annotated_transformer` has no side effects, and the public API is at the package root;
- every committed notebook is executed, error-free, starts as the book expects, and is in the book;
- a wheel builds and works when installed on its own, away from this checkout.
"""

import ast
import importlib.util
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest itself depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
PACKAGE = ROOT / "annotated_transformer"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
BIN = Path(sys.executable).parent

# What the root API must offer (chapter 1's `_all_` is the list itself; the tests below keep it
# small and used): the model and attention, training, decoding and averaging, and the translation
# pipeline with the types it returns.
ESSENTIAL_API = {"Transformer", "TransformerConfig", "make_model", "attention", "MultiHeadAttention",
                 "Trainer", "TrainConfig", "greedy_decode", "beam_search", "average_checkpoints", "corpus",
                 "Recipe", "get_recipe", "train_translation", "TrainingRun", "Translator", "evaluate_bleu",
                 "Evaluation"}
# At most this many names at the root: the rest of the package is imported from its modules.
API_LIMIT = 40


def _tool(name: str):
    """A module of tools/ (not a package), imported from its file."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The first code cell of every chapter is the Colab set-up cell that tools/colab_cell.py writes
# (`python tools/colab_cell.py`): colab_cell.setup_cell(chapter) is its expected source.
colab_cell = _tool("colab_cell")

EXPORT_HINT = "edit the notebook in book/, then run `make export` (never edit annotated_transformer/ by hand)"


def run(
    args: list[str], cwd: Path, env: dict | None = None, timeout: int = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def tool(name: str) -> str:
    """A console script of this environment (next to its python), else the one on PATH."""
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found next to {sys.executable} nor on PATH: run `make setup`")
    return found


def normalized(requirement: str) -> str:
    req = Requirement(requirement)
    specifier = ",".join(sorted(str(s) for s in req.specifier))
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    marker = f"; {req.marker}" if req.marker else ""
    return f"{canonicalize_name(req.name)}{extras}{specifier}{marker}"


NOT_EXPORTED = ("results", "machinery", "pretrained")  # folders of the package no notebook exports


def package_files(directory: Path, data: bool = True) -> dict[str, bytes]:
    """The package's files and their contents; with data=False, the generated modules only: not
    results/ (the runs' result files, which ship with the package) nor machinery/ (modules written by
    hand), which no notebook exports."""
    return {
        path.relative_to(directory).as_posix(): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
        and (data or path.relative_to(directory).parts[0] not in NOT_EXPORTED)
    }


def code_cells(notebook: dict) -> list[dict]:
    return [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]


def source(cell: dict) -> str:
    text = cell["source"]
    return "".join(text) if isinstance(text, list) else text


def load_notebook(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        pytest.fail(f"{path.relative_to(ROOT)} is not valid JSON: {error}")


# --- environment files ---------------------------------------------------------------------------


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    expected = [*project["dependencies"], *project["optional-dependencies"]["dev"]]

    environment = yaml.safe_load((ROOT / "environment.yml").read_text(encoding="utf-8"))
    assert "conda-forge" in environment["channels"]
    conda = [dep for dep in environment["dependencies"] if isinstance(dep, str)]
    assert "pip" in conda and any(dep.replace(" ", "").startswith("python>=3.10") for dep in conda), conda
    pip_sections = [
        dep["pip"] for dep in environment["dependencies"] if isinstance(dep, dict) and "pip" in dep
    ]
    assert len(pip_sections) == 1, "environment.yml needs exactly one `pip:` list"
    # Lines starting with "-" are pip options (`-e .` installs this package), not requirements.
    pip = [line for line in pip_sections[0] if not line.startswith("-")]

    ours, theirs = sorted(map(normalized, pip)), sorted(map(normalized, expected))
    assert ours == theirs, (
        "environment.yml's pip requirements must be pyproject.toml's [project] dependencies plus the "
        f"[dev] extra.\n  only in environment.yml: {sorted(set(ours) - set(theirs))}\n"
        f"  only in pyproject.toml:  {sorted(set(theirs) - set(ours))}"
    )
    assert len(pip) == len(set(ours)), "environment.yml lists a requirement twice"


# --- the package is generated from the notebooks ------------------------------------------------


def test_package_is_in_sync_with_notebooks(tmp_path):
    shutil.copytree(BOOK, tmp_path / "book", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    # Export into an empty package folder, so that a module no notebook exports any more shows up.
    (tmp_path / "annotated_transformer").mkdir()
    # nbdev imports the export processor that pyproject.toml names (tools/nbdev_modules.py): `make export`.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    # Twice: a module of `#| export NAME` cells is written afresh each time, not appended to.
    for _ in range(2):
        result = run([tool("nbdev-export")], cwd=tmp_path, env=env, timeout=120)
        assert result.returncode == 0, f"nbdev-export failed:\n{result.stdout}\n{result.stderr}"

    committed = package_files(PACKAGE, data=False)
    exported = package_files(tmp_path / "annotated_transformer")
    differ = sorted(name for name in committed.keys() & exported.keys() if committed[name] != exported[name])
    missing = sorted(exported.keys() - committed.keys())
    stale = sorted(committed.keys() - exported.keys())
    problems = []
    if differ:
        problems.append(f"differ from the notebooks' export: {differ}")
    if missing:
        problems.append(f"exported by a notebook but missing from annotated_transformer/: {missing}")
    if stale:
        problems.append(f"in annotated_transformer/ but exported by no notebook (delete them?): {stale}")
    assert not problems, "annotated_transformer/ is out of step with book/:\n  " + "\n  ".join(
        [*problems, f"hint: {EXPORT_HINT}"]
    )


# --- the package's import and public API --------------------------------------------------------


def test_import_has_no_side_effects(tmp_path):
    # A fresh interpreter, outside the repository: the import prints nothing and pulls in no plotting.
    code = "import sys, annotated_transformer\nsys.exit(3 if 'matplotlib' in sys.modules else 0)"
    result = run([sys.executable, "-c", code], cwd=tmp_path, timeout=120)
    assert result.returncode != 3, (
        "`import annotated_transformer` imports matplotlib: keep plotting in the notebooks"
    )
    assert result.returncode == 0, f"`import annotated_transformer` failed:\n{result.stderr}"
    assert result.stdout == "", f"`import annotated_transformer` printed to stdout:\n{result.stdout}"
    assert result.stderr == "", f"`import annotated_transformer` printed to stderr:\n{result.stderr}"


def test_public_api_at_package_root():
    import annotated_transformer

    missing = sorted(name for name in ESSENTIAL_API if not hasattr(annotated_transformer, name))
    assert not missing, f"not importable from annotated_transformer: {missing}"
    unlisted = sorted(ESSENTIAL_API - set(annotated_transformer.__all__))
    assert not unlisted, f"missing from annotated_transformer.__all__: {unlisted}"
    assert len(set(annotated_transformer.__all__)) == len(annotated_transformer.__all__), "a name twice"
    undefined = [name for name in annotated_transformer.__all__ if not hasattr(annotated_transformer, name)]
    assert not undefined, f"in __all__ but not defined: {undefined}"
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", annotated_transformer.__version__)


def root_imports(code: str) -> set[str]:
    """The names that Python code takes from the package root: `from annotated_transformer import
    NAME`, and `ALIAS.NAME` after `import annotated_transformer as ALIAS`. IPython's `%` and `!`
    lines are skipped."""
    lines = [line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))]
    tree = ast.parse("\n".join(lines))
    names, aliases = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "annotated_transformer" and not node.level:
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            aliases.update(alias.asname or alias.name for alias in node.names
                           if alias.name == "annotated_transformer")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            names.add(node.attr)
    return names


def names_in_markdown_code(text: str) -> set[str]:
    """The identifiers in a Markdown text's code: fenced blocks and `inline code`."""
    fenced = re.findall(r"^```.*?$(.*?)^```", text, flags=re.M | re.S)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))
    return set(re.findall(r"[A-Za-z_]\w*", "\n".join(fenced + inline)))


def test_public_api_is_small_and_used():
    """The root API is what a reader and a user call: at most API_LIMIT names, each one imported from
    the root by a chapter's code or named in the README's code."""
    import annotated_transformer

    api = annotated_transformer.__all__
    assert len(api) <= API_LIMIT, (
        f"annotated_transformer.__all__ has {len(api)} names, more than {API_LIMIT}: keep the root API "
        "small (chapter 1's `_all_`), and import the rest from its module"
    )
    chapters = {
        path.name: root_imports("\n".join(source(cell) for cell in code_cells(load_notebook(path))))
        for path in NOTEBOOKS
    }
    used = set().union(*chapters.values())
    readme = names_in_markdown_code((ROOT / "README.md").read_text(encoding="utf-8"))
    unused = [name for name in api if name not in used and name not in readme]
    assert not unused, (
        f"in annotated_transformer.__all__, but no chapter imports them from the package root and the "
        f"README's code does not name them: {unused}; use them, document them, or leave them in "
        "their module"
    )


def test_chapters_import_the_api_from_the_root():
    """Outside the exported cells (which import from modules, chapter by chapter), a chapter takes
    the public API from the package root and everything else from its module."""
    import annotated_transformer

    api = set(annotated_transformer.__all__)
    wrong = []
    for path in NOTEBOOKS:
        for cell in code_cells(load_notebook(path)):
            text = source(cell)
            if text.startswith("#| export"):
                continue
            for name in sorted(root_imports(text) - api):
                is_module = importlib.util.find_spec(f"annotated_transformer.{name}") is not None
                if not name.startswith("__") and not is_module:  # `__version__`, `__all__`, a module: fine
                    wrong.append(f"{path.name}: {name} is not at the root; import it from its module")
            for line in re.findall(r"^\s*from annotated_transformer\.\w+ import (.*)$", text, flags=re.M):
                names = {name.split(" as ")[0].strip(" ()") for name in line.split(",")}
                wrong += [f"{path.name}: import {name} from the package root" for name in sorted(names & api)]
    assert not wrong, "\n".join(wrong)


# --- the committed notebooks ----------------------------------------------------------------------


def test_there_are_chapters():
    assert len(NOTEBOOKS) >= 5, [path.name for path in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_is_valid_and_executed(path):
    notebook = load_notebook(path)
    nbformat.validate(nbformat.from_dict(notebook))
    cells = [cell for cell in code_cells(notebook) if source(cell).strip()]
    assert cells, f"{path.name} has no code"

    unexecuted = [i for i, cell in enumerate(cells) if cell.get("execution_count") is None]
    assert not unexecuted, (
        f"{path.name}: code cells {unexecuted} (counting non-empty code cells from 0) have not been "
        "executed: run `make notebooks` (or tools/execute_notebooks.py on this notebook)"
    )
    # Glue cells (tools/glue_figures.py) are re-run on their own when a result file changes.
    counts = [cell["execution_count"] for cell in cells if "glue" not in cell["metadata"].get("tags", [])]
    assert all(a < b for a, b in itertools.pairwise(counts)), (
        f"{path.name}: execution counts {counts} are not increasing: the notebook was run out of "
        "order; re-run it from the top with `make notebooks`"
    )
    errors = [
        (i, output.get("ename"))
        for i, cell in enumerate(cells)
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert not errors, f"{path.name}: code cells with error outputs (index, exception): {errors}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_starts_as_a_chapter(path):
    notebook = load_notebook(path)
    markdown = [cell for cell in notebook["cells"] if cell["cell_type"] == "markdown"]
    assert markdown, f"{path.name} has no markdown cell"
    assert "§" in source(markdown[0]), (
        f"{path.name}: the first markdown cell (title and summary) must cite the paper's section (§...)"
    )
    first = code_cells(notebook)[0]
    assert source(first).strip() == colab_cell.setup_cell(path.stem).strip(), (
        f"{path.name}: the first code cell must be the Colab set-up cell that tools/colab_cell.py writes: "
        f"run `.venv/bin/python tools/colab_cell.py {path.relative_to(ROOT)}`; found:\n{source(first)}"
    )
    assert "hide-input" in first.get("metadata", {}).get("tags", []), (
        f"{path.name}: tag the Colab set-up cell `hide-input`"
    )


def toc_chapters(numbered: bool = True) -> list[str]:
    """The files _toc.yml lists in its numbered parts (the chapters), or in its other parts."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return [chapter["file"] for part in toc.get("parts", []) for chapter in part.get("chapters", [])
            if (part.get("numbered") is True) == numbered]


def test_every_notebook_is_in_the_book_and_readme():
    files = [*toc_chapters(), *toc_chapters(numbered=False)]
    in_toc = [str(Path(file).with_suffix("")) for file in files if (ROOT / f"{file}.ipynb").exists()]
    on_disk = sorted(str(path.relative_to(ROOT).with_suffix("")) for path in NOTEBOOKS)
    assert sorted(in_toc) == on_disk, f"_toc.yml lists the notebooks {in_toc}, book/ has {on_disk}"
    chapters = toc_chapters()
    assert in_toc[: len(chapters)] == sorted(chapters), "the chapters are in the order of their numbers"

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    colab = "https://colab.research.google.com/github/annotated-transformer/annotated-transformer/blob/main/"
    unlinked = [path.name for path in NOTEBOOKS if f"{colab}book/{path.name}" not in readme]
    assert not unlinked, f"README.md has no 'Open in Colab' link for {unlinked}"


# --- the wheel ----------------------------------------------------------------------------------


def test_wheel_builds_and_works_on_its_own(tmp_path):
    # Build from a copy of exactly what the wheel needs, so the checkout gets no build/ or egg-info.
    source_tree = tmp_path / "src"
    source_tree.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source_tree / name)
    shutil.copytree(PACKAGE, source_tree / PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    result = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            ".",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(wheels),
        ],
        cwd=source_tree,
    )
    assert result.returncode == 0, f"building the wheel failed:\n{result.stdout}\n{result.stderr}"
    (wheel,) = wheels.glob("annotated_transformer-*.whl")

    import annotated_transformer

    assert wheel.name.startswith(f"annotated_transformer-{annotated_transformer.__version__}-")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    modules = sorted(name for name in names if not name.split("/")[0].endswith(".dist-info"))
    expected = sorted(f"annotated_transformer/{name}" for name in package_files(PACKAGE))
    assert modules == expected, f"the wheel holds {modules}, the package is {expected}"
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names), names

    target = tmp_path / "site"
    result = run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, f"installing the wheel failed:\n{result.stdout}\n{result.stderr}"

    code = (
        "import annotated_transformer\n"
        "from annotated_transformer import make_model, count_parameters\n"
        "print(annotated_transformer.__file__)\n"
        "print(count_parameters(make_model()))\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = run([sys.executable, "-c", code], cwd=elsewhere, env=env, timeout=120)
    assert result.returncode == 0, f"the installed wheel does not work:\n{result.stderr}"
    location, parameters = result.stdout.split()
    assert Path(location).resolve().is_relative_to(target.resolve()), (
        f"imported {location}, not the wheel installed in {target}"
    )
    assert int(parameters) > 0


def test_chapters_are_numbered_without_a_gap():
    """The sidebar numbers the chapters (every part `numbered`, the numbers running on across parts),
    the file names carry the same numbers, and every "chapter N" the prose cites exists."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    numbered = [part.get("numbered") is True for part in toc["parts"]]
    assert numbered == sorted(numbered, reverse=True), "the unnumbered parts (conclusion, appendix) come last"
    unnumbered = toc_chapters(numbered=False)
    assert all(Path(file).name[0].isalpha() for file in unnumbered), (
        f"the pages of unnumbered parts have names without a chapter number: {unnumbered}")
    numbers = [int(Path(file).name.split("_")[0]) for file in toc_chapters()]
    assert numbers == list(range(1, len(numbers) + 1)), f"chapter numbers in _toc.yml order: {numbers}"
    cited = re.compile(r"\b[Cc]hapters?[ ~]+(\d+(?:\s*(?:,|and|or|–|-|to)\s*\d+)*)")
    texts = {path.name: "".join(source(cell) for cell in load_notebook(path)["cells"]) for path in NOTEBOOKS}
    texts["README.md"] = (ROOT / "README.md").read_text(encoding="utf-8")
    texts.update({path.name: path.read_text(encoding="utf-8") for path in (ROOT / "tests").glob("*.py")})
    wrong = sorted(
        {f"{name}: chapter {n}" for name, text in texts.items() for match in cited.finditer(text)
         for n in map(int, re.findall(r"\d+", match.group(1))) if not 1 <= n <= len(numbers)}
    )
    assert not wrong, f"the prose cites chapters the book does not have: {wrong}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_exported_cells_are_short(path):
    """The package is read in small annotated pieces: no exported cell much over 80 lines (a class
    or function that needs more is split, with prose between its parts)."""
    long = [(i, len(source(cell).splitlines())) for i, cell in enumerate(load_notebook(path)["cells"])
            if cell["cell_type"] == "code" and source(cell).startswith("#| export")
            and len(source(cell).splitlines()) > 90]
    assert not long, f"{path.name}: exported cells (index, lines) over 90 lines: {long}"
