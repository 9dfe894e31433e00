"""Every exercise is code a reader can run, and has a worked solution that runs.

Each chapter ends with its exercises: under the heading `## Exercises`, one Markdown cell per
exercise, opening `**Exercise N.**`, each followed by its solution, one or more code cells tagged
`solution` and `hide-cell` (the book shows them folded; Colab and Jupyter show them as they are). The
solutions run wherever the chapter runs: nbval executes them in CI, in quick mode where they train.
And an exercise's text names only what the package has: each command-line option it names
(`--lr-factor`) is one the command line knows, and each call it writes with keywords
(`Recipe(max_steps=200)`) names parameters the callable takes, so that a renamed field fails here
before a reader meets a TypeError.
"""

import argparse
import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="reads the book's notebooks: a [dev] extra's tool")

import annotated_transformer  # noqa: E402
from annotated_transformer.__main__ import _EXPERIMENTS  # noqa: E402
from annotated_transformer.cli.commands import build_parser  # noqa: E402
from annotated_transformer.cli.experiment_command import add_experiment_command  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
EXERCISE = re.compile(r"^\*\*Exercise (\d+)\.\*\*", re.M)
SOLUTION_TAGS = {"solution", "hide-cell"}
OPTION = re.compile(r"(?<![\w!-])--[a-z][a-z0-9-]*")  # not an HTML comment's <!--fig:
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
CODE_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")  # may run over a line's end, as in CommonMark


def code_in(text: str) -> list[str]:
    """The code an exercise's text shows: its fenced blocks, and its inline spans on one line."""
    blocks = FENCE.findall(text)
    return blocks + [" ".join(span.split()) for span in CODE_SPAN.findall(FENCE.sub(" ", text))]


def exercises(notebook) -> list[tuple[int, int, list]]:
    """(number, index of its Markdown cell, its solution cells) of each exercise of `notebook`."""
    cells = notebook.cells
    heading = re.compile(r"^## Exercises\s*$", re.M)
    start = next((index for index, cell in enumerate(cells)
                  if cell.cell_type == "markdown" and heading.search(cell.source)), None)
    if start is None:
        return []
    found = []
    for index in range(start, len(cells)):
        cell = cells[index]
        if cell.cell_type == "markdown" and index > start and re.search(r"^#{1,2} ", cell.source, re.M):
            break  # the next section (`## What's next`)
        for number in EXERCISE.findall(cell.source) if cell.cell_type == "markdown" else []:
            solutions = []
            for after in cells[index + 1:]:
                if after.cell_type != "code" or "solution" not in after.metadata.get("tags", []):
                    break
                solutions.append(after)
            found.append((int(number), index, solutions))
    return found


def exercise_texts(notebook) -> list[tuple[int, str]]:
    return [(number, notebook.cells[index].source) for number, index, _ in exercises(notebook)]


def command_line_options() -> set[str]:
    """Every option string of the complete command line (chapter 16's commands and chapter 18's
    `experiment`), and of each of its commands."""
    parser = build_parser([lambda commands: add_experiment_command(commands, experiments=_EXPERIMENTS)])
    options: set[str] = set()
    stack = [parser]
    while stack:
        current = stack.pop()
        for action in current._actions:
            options.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
    return options


def package_names() -> dict[str, object]:
    """Every public name the package's modules define, by name (the root's first)."""
    names: dict[str, object] = {}
    for info in pkgutil.walk_packages(annotated_transformer.__path__, "annotated_transformer."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", []):
            names.setdefault(name, getattr(module, name))
    names.update({name: getattr(annotated_transformer, name) for name in annotated_transformer.__all__})
    return names


def parameters(target) -> set[str] | None:
    """The keyword names `target` accepts, or None when it takes any (**kwargs) or cannot be read."""
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return None
    return set(signature.parameters)


def unknown_keywords(code: str, names: dict[str, object]) -> list[str]:
    """`callable(keyword=...)` calls in `code` whose keyword the callable (a package name, or a method
    of one) does not take; `dataclasses.replace(X.y, keyword=...)` is read as the fields of X.y's
    class where X.y resolves."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    wrong = []
    for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call) and node.keywords):
        target = resolve(call.func, names)
        if isinstance(call.func, ast.Attribute | ast.Name) and ast.unparse(call.func).endswith("replace") \
                and call.args:
            instance = resolve(call.args[0], names)
            if dataclasses.is_dataclass(instance):
                fields = {field.name for field in dataclasses.fields(instance)}
                wrong += [f"{ast.unparse(call.func)}(…, {k.arg}=) on a {type(instance).__name__}"
                          for k in call.keywords if k.arg and k.arg not in fields]
            continue
        accepted = parameters(target) if target is not None else None
        if accepted is not None:
            wrong += [f"{ast.unparse(call.func)}({k.arg}=)" for k in call.keywords
                      if k.arg and k.arg not in accepted]
    return wrong


def resolve(node: ast.AST, names: dict[str, object]):
    """The object an expression of names, attributes, constant subscripts and calls of no argument
    stands for in the package, or None."""
    try:
        if isinstance(node, ast.Name):
            return names.get(node.id)
        if isinstance(node, ast.Attribute):
            owner = resolve(node.value, names)
            return getattr(owner, node.attr, None) if owner is not None else None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            owner = resolve(node.value, names)
            return owner[node.slice.value] if owner is not None else None
    except (KeyError, IndexError, TypeError):
        return None
    return None


def test_exercises_are_found_with_their_solutions():
    notebook = nbformat.v4.new_notebook()
    solution = nbformat.v4.new_code_cell("print(1)", metadata={"tags": ["solution", "hide-cell"]})
    notebook.cells = [nbformat.v4.new_markdown_cell("## Summary\n\n- a"),
                      nbformat.v4.new_markdown_cell("## Exercises\n\n**Exercise 1.** Do it."), solution,
                      nbformat.v4.new_markdown_cell("**Exercise 2.** And this."),
                      nbformat.v4.new_markdown_cell("## What's next\n\n**Exercise 3.** not one")]
    found = exercises(notebook)
    assert [(number, len(solutions)) for number, _, solutions in found] == [(1, 1), (2, 0)]


def test_unknown_keywords_and_options_are_found():
    names = package_names()
    assert unknown_keywords("dataclasses.replace(get_recipe('builtin'), lr_factor=0.1)", names) == []
    recipe_names = {**names, "base": annotated_transformer.get_recipe("builtin")}
    assert unknown_keywords("dataclasses.replace(base, lr_factor=0.1)", recipe_names) == [
        "dataclasses.replace(…, lr_factor=) on a Recipe"]
    assert unknown_keywords("TransformerConfig(10, 10, n_layers=2, n_layer=3)", names) == [
        "TransformerConfig(n_layer=)"]
    assert unknown_keywords("TransformerConfig(10, 10, n_layers=2)", names) == []
    assert "--config" in command_line_options() and "--seeds" in command_line_options()
    text = "`--max-steps 200` and a figure <!--fig:steps-->9,224<!--/fig-->"
    assert OPTION.findall(text) == ["--max-steps"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_exercise_has_a_solution_that_runs(path):
    notebook = nbformat.read(path, as_version=4)
    found = exercises(notebook)
    assert found, f"{path.name} has no exercises (## Exercises, then **Exercise 1.** ...)"
    numbers = [number for number, _, _ in found]
    assert numbers == list(range(1, len(found) + 1)), f"{path.name}: exercises numbered {numbers}"
    for number, _, solutions in found:
        assert solutions, f"{path.name}: exercise {number} has no solution cell below it (tagged solution)"
        for cell in solutions:
            tags = set(cell.metadata.get("tags", []))
            assert SOLUTION_TAGS <= tags, (
                f"{path.name}: exercise {number}'s solution is tagged {sorted(tags)}")
            assert not re.search(r"^#\|\s*export", cell.source, re.M), (
                f"{path.name}: exercise {number}'s solution exports to the package")
            assert cell.source.strip() and cell.get("execution_count"), (
                f"{path.name}: exercise {number}'s solution is empty or was not run")


def test_exercises_name_only_options_the_command_line_has():
    known = command_line_options()
    unknown = [(path.name, number, option) for path in NOTEBOOKS
               for number, text in exercise_texts(nbformat.read(path, as_version=4))
               for option in OPTION.findall(text) if option not in known]
    assert not unknown, f"exercises name options the command line lacks: {unknown}"


def test_exercises_call_only_with_keywords_the_package_takes():
    names = package_names()
    wrong = [(path.name, number, problem) for path in NOTEBOOKS
             for number, text in exercise_texts(nbformat.read(path, as_version=4))
             for code in code_in(text)
             for problem in unknown_keywords(code, names)]
    assert not wrong, f"exercises call the package with keywords it does not take: {wrong}"


# The conclusion promises that every exercise runs on a CPU in minutes: each solution's seconds, as
# tools/solution_cells.py measured them (metadata `solution_run`), outside quick mode where the
# chapter runs so in the book, stay under this.
PROMISED_SECONDS = 30 * 60  # minutes, not hours: the longest trains eight small models


def test_the_conclusions_promise_about_exercises_is_measured():
    conclusion = (ROOT / "book" / "conclusion.md").read_text(encoding="utf-8")
    assert "exercises" in conclusion and "in minutes" in conclusion
    runs = [(path.name, number, cell.metadata.get("solution_run")) for path in NOTEBOOKS
            for number, _, solutions in exercises(nbformat.read(path, as_version=4)) for cell in solutions]
    unmeasured = [(name, number) for name, number, run in runs if not run or run.get("seconds") is None]
    assert not unmeasured, f"solutions never timed (python tools/solution_cells.py): {unmeasured}"
    slow = [(name, number, run["seconds"]) for name, number, run in runs if run["seconds"] > PROMISED_SECONDS]
    assert not slow, f"solutions slower than the conclusion's 'in minutes': {slow}"
