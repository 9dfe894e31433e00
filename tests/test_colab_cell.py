"""tools/colab_cell.py: the Colab set-up cell that starts every chapter, and its rewriting.

The cell runs here with its two outside dependencies replaced: whether the package is installed
(importlib.util.find_spec) and pip (subprocess.run), and Colab itself (a google.colab module).
"""

import ast
import shutil
import subprocess
import sys
import types
from pathlib import Path
from unittest import mock

import colab_cell  # tools/ is on pytest's pythonpath (pyproject.toml)
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_cell(chapter: str, installed: bool, pip_status: int = 0, colab: bool = False, cuda: bool = False):
    """Run the set-up cell of `chapter`; returns (pip calls, printed lines, SystemExit or None)."""
    calls, printed = [], []

    def fake_run(args, **kwargs):
        calls.append(args)
        return subprocess.CompletedProcess(args, pip_status, stdout="", stderr="ERROR: no such repository")

    modules = {"torch": types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: cuda))}
    if colab:
        modules["google.colab"] = types.ModuleType("google.colab")
    def find_spec(name):  # `installed`: True, False, or the set of the modules that are
        present = installed if isinstance(installed, bool) else name in installed
        return object() if present else None

    with (
        mock.patch.dict(sys.modules, modules),
        mock.patch("importlib.util.find_spec", find_spec),
        mock.patch("subprocess.run", fake_run),
        mock.patch("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a)))),
    ):
        try:
            exec(compile(colab_cell.setup_cell(chapter), chapter, "exec"), {})
        except SystemExit as error:
            return calls, printed, error
    return calls, printed, None


def test_the_cell_is_python_and_names_the_repository_once():
    for chapter in ("02_attention", "14_translation"):
        text = colab_cell.setup_cell(chapter)
        ast.parse(text)
        assert text.count(colab_cell.DEFAULT_REPO) == 1
        assert f'os.environ.get("{colab_cell.REPO_ENV}", "{colab_cell.DEFAULT_REPO}")' in text
        assert "check=True" not in text  # no CalledProcessError traceback
        assert len(text.splitlines()) <= 30, "keep the cell short"


def test_the_cell_does_nothing_where_the_package_is_installed():
    assert run_cell("14_translation", installed=True) == ([], [], None)


def test_the_cell_installs_from_the_repository_setting(monkeypatch):
    calls, printed, error = run_cell("02_attention", installed=False)
    assert error is None and printed == []
    assert calls[0][-1] == f"git+{colab_cell.DEFAULT_REPO}"
    monkeypatch.setenv("ANNOTATED_TRANSFORMER_REPO", "https://example.org/fork")
    calls, _, _ = run_cell("02_attention", installed=False)
    assert calls[0][-1] == "git+https://example.org/fork"


def test_a_failed_install_says_what_happened_and_what_to_do():
    calls, printed, error = run_cell("02_attention", installed=False, pip_status=1)
    assert len(calls) == 1
    assert any("ERROR: no such repository" in line for line in printed), printed
    message = str(error.code)
    assert colab_cell.DEFAULT_REPO in message and "exit status 1" in message
    assert "ANNOTATED_TRANSFORMER_REPO" in message and "run this cell again" in message


def test_on_colab_quick_mode_and_a_gpu_for_the_chapters_that_train_on_one():
    _, printed, _ = run_cell("02_attention", installed=True, colab=True)
    assert len(printed) == 1 and "ANNOTATED_TRANSFORMER_QUICK=1" in printed[0]
    for chapter in colab_cell.GPU_CHAPTERS:
        _, printed, _ = run_cell(chapter, installed=True, colab=True)
        assert any("GPU runtime" in line for line in printed), (chapter, printed)
        _, printed, _ = run_cell(chapter, installed=True, colab=True, cuda=True)
        assert not any("GPU" in line for line in printed), (chapter, printed)


def test_on_colab_the_chapters_made_for_two_cpu_cores_need_no_gpu():
    for chapter in colab_cell.CPU_CHAPTERS:
        for cuda in (False, True):
            _, printed, _ = run_cell(chapter, installed=True, colab=True, cuda=cuda)
            assert any("two CPU cores" in line and "needs no GPU" in line for line in printed), printed
            assert not any("GPU runtime" in line for line in printed), (chapter, printed)


def test_the_chapters_with_charts_install_altair_with_the_package():
    """Every cell of a chapter runs after its set-up cell: the chart chapters import Altair."""
    charted = {path.stem for path in (ROOT / "book").glob("*.ipynb")
               if any("chart" in cell.metadata.get("tags", []) or "import altair" in cell.source
                      for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code")}
    assert set(colab_cell.CHART_CHAPTERS) == charted
    for chapter in colab_cell.CHART_CHAPTERS:
        calls, _, error = run_cell(chapter, installed=False)
        assert error is None
        assert calls[0][-1] == f"annotated-transformer[charts] @ git+{colab_cell.DEFAULT_REPO}"
        assert "torch" not in " ".join(calls[0])  # the runtime's torch stays
    calls, _, _ = run_cell("02_attention", installed=False)
    assert calls[0][-1] == f"git+{colab_cell.DEFAULT_REPO}"


def test_a_chart_chapter_installs_when_only_altair_is_missing():
    calls, _, _ = run_cell("07_optimizer", installed={"annotated_transformer"})
    assert calls and calls[0][-1].startswith("annotated-transformer[charts] @ git+")
    calls, _, _ = run_cell("02_attention", installed={"annotated_transformer"})
    assert calls == []


def test_gpu_chapters_exist():
    chapters = {path.stem for path in (ROOT / "book").glob("*.ipynb")}
    assert set(colab_cell.GPU_CHAPTERS) | set(colab_cell.CPU_CHAPTERS) <= chapters
    assert colab_cell.GPU_CHAPTERS == ("20_gpu",)  # 15 trains on CPU processes, 18 and 19 show shipped runs
    assert colab_cell.CPU_CHAPTERS == ("14_translation",)  # the multi30k recipe: two CPU cores


def test_rewrite_changes_only_the_first_code_cell(tmp_path):
    original = ROOT / "book" / "14_translation.ipynb"
    path = tmp_path / original.name
    shutil.copy2(original, path)
    notebook = nbformat.read(path, as_version=4)
    colab_cell.first_code_cell(notebook).source = "print('an older set-up cell')"
    nbformat.write(notebook, path)
    before = nbformat.read(path, as_version=4)

    assert colab_cell.main(["--check", str(path)]) == 1
    assert nbformat.read(path, as_version=4) == before  # --check changes nothing
    colab_cell.rewrite(path)
    after = nbformat.read(path, as_version=4)
    assert colab_cell.main(["--check", str(path)]) == 0
    assert colab_cell.rewrite(path) is False  # idempotent

    first = colab_cell.first_code_cell(after)
    assert first.source == colab_cell.setup_cell("14_translation")
    assert "hide-input" in first.metadata["tags"]
    old_first = colab_cell.first_code_cell(before)
    assert (first.id, first.execution_count, first.outputs) == (
        old_first.id, old_first.execution_count, old_first.outputs
    )
    others = [c for c in after.cells if c is not first]
    assert others == [c for c in before.cells if c is not old_first]


@pytest.mark.parametrize("chapter", ["02_attention", "14_translation"])
def test_the_cell_passes_the_linter(tmp_path, chapter):
    ruff = Path(sys.executable).parent / "ruff"
    if not ruff.exists():
        pytest.skip("ruff is not installed next to this Python (make setup)")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(colab_cell.setup_cell(chapter))]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (tmp_path / "book").mkdir()
    nbformat.write(notebook, tmp_path / "book" / f"{chapter}.ipynb")
    result = subprocess.run(
        [str(ruff), "check", "--config", str(ROOT / "pyproject.toml"), "book"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
