"""tools/version_matrix.py (`make matrix`), without building anything: its environments use exactly
pyproject.toml's floors, it reads pytest's summary line, and it writes VERSIONS.md and VERSIONS.json.
The matrix itself (fresh environments, downloads, the whole suite three times) is `make matrix`."""

import json
from pathlib import Path

import pytest
import version_matrix as matrix  # tools/ is on pytest's pythonpath (pyproject.toml)
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def lower_bound(requirement: str) -> str:
    (bound,) = [spec.version for spec in Requirement(requirement).specifier if spec.operator == ">="]
    return bound


def test_the_minimum_environment_is_every_floor_of_pyproject():
    requirements = [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["test"]]
    expected = {canonicalize_name(Requirement(req).name): lower_bound(req) for req in requirements}
    minimum = matrix.environments(PROJECT)["minimum"]

    pins = {canonicalize_name(Requirement(pin).name): str(Requirement(pin).specifier) for pin in minimum.pins}
    assert Requirement(minimum.torch).name == "torch"
    pins["torch"] = str(Requirement(minimum.torch).specifier)
    assert pins == {name: f"=={version}" for name, version in expected.items()}
    assert minimum.python == PROJECT["requires-python"].removeprefix(">=")


def test_every_tested_requirement_has_one_floor():
    for requirement in [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["test"]]:
        assert matrix.floor(requirement) == lower_bound(requirement)
    with pytest.raises(ValueError, match="floor"):
        matrix.floor("torch")
    assert matrix.requirement_name("Typing_Extensions>=4") == "typing-extensions"


def test_the_test_extra_is_in_the_dev_extra():
    """`make setup` installs [dev] only: it must bring what [test] brings, with the same bounds."""
    dev = set(PROJECT["optional-dependencies"]["dev"])
    assert set(PROJECT["optional-dependencies"]["test"]) - {"pytest>=8"} <= dev
    assert any(canonicalize_name(Requirement(req).name) == "pytest" for req in dev)


def test_the_other_environments():
    environments = matrix.environments(PROJECT)
    assert list(environments) == ["minimum", "colab", "newest"]
    colab, newest = environments["colab"], environments["newest"]
    assert colab.torch == f"torch=={matrix.COLAB['torch']}.*"
    assert f"spacy=={matrix.COLAB['spacy']}" in colab.pins
    assert newest.torch == "torch" and newest.pins == ()
    # No environment pins a version that pyproject.toml does not allow.
    allowed = {canonicalize_name(Requirement(req).name): Requirement(req).specifier
               for req in [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["test"]]}
    for environment in environments.values():
        for pin in environment.pins:
            requirement = Requirement(pin)
            name = canonicalize_name(requirement.name)
            if name in allowed and str(requirement.specifier).startswith("=="):
                version = str(requirement.specifier).removeprefix("==").removesuffix(".*")
                assert allowed[name].contains(version), (environment.name, pin)


@pytest.mark.parametrize(("line", "counts"), [
    ("==== 3 failed, 740 passed, 12 skipped, 2 warnings, 1 error in 431.20s (0:07:11) ====",
     {"passed": 740, "failed": 3, "skipped": 12, "errors": 1}),
    ("755 passed, 4 skipped in 402.11s (0:06:42)", {"passed": 755, "failed": 0, "skipped": 4, "errors": 0}),
    ("2 errors in 3.01s", {"passed": 0, "failed": 0, "skipped": 0, "errors": 2}),
    ("1 passed, 2 deselected, 1 xfailed in 0.50s",
     {"passed": 1, "failed": 0, "skipped": 0, "errors": 0, "deselected": 2, "xfailed": 1}),
])
def test_reads_pytests_summary_line(line, counts):
    output = f"....F.s\nFAILED tests/test_x.py::test_y - 1 passed in a note\n{line}\n"
    assert matrix.parse_summary(output) == counts


def test_reads_the_failed_tests():
    output = ("FAILED tests/test_a.py::test_x[1] - AssertionError: no\n"
              "ERROR tests/test_b.py::test_y - SystemExit\nSKIPPED [1] tests/test_c.py:3: why\n")
    assert matrix.parse_failures(output) == [
        "FAILED tests/test_a.py::test_x[1]", "ERROR tests/test_b.py::test_y"]


def test_no_summary_line():
    assert matrix.parse_summary("ImportError while loading conftest\n") == {}


def test_writes_the_table_and_the_json(tmp_path):
    old = matrix.Result("colab", python="3.13.0", versions={"torch": "2.11.0"},
                        counts={"passed": 1, "failed": 0, "skipped": 0, "errors": 0}, minutes=1.0)
    new = matrix.Result("minimum", python="3.10.13", versions={"torch": "2.5.0", "spacy": "3.8.13"},
                        counts={"passed": 700, "failed": 2, "skipped": 9, "errors": 0}, minutes=12.34,
                        date="2026-12-02 00:30 UTC", command="python tools/version_matrix.py",
                        about="every floor", failures=["FAILED tests/test_a.py::test_x"])
    broken = matrix.Result("newest", note="installing the wheel failed")
    md, js = tmp_path / "VERSIONS.md", tmp_path / "VERSIONS.json"
    matrix.write_results([old, broken, new], ["minimum", "colab", "newest"], md, js)

    rows = [line for line in md.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    head = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert head[:3] == ["environment", "Python", "torch"]
    cells = [dict(zip(head, (cell.strip() for cell in row.strip("|").split("|")), strict=True))
             for row in rows[1:]]
    assert [row["environment"] for row in cells] == ["minimum", "colab", "newest"]
    assert (cells[0]["torch"], cells[0]["spacy"]) == ("2.5.0", "3.8.13")
    assert (cells[0]["passed"], cells[0]["failed"], cells[0]["skipped"], cells[0]["minutes"]) == (
        "700", "2", "9", "12.3")
    assert cells[0]["numpy"] == "–" and cells[2]["passed"] == "–"
    assert "`python tools/version_matrix.py`" in md.read_text(encoding="utf-8")
    assert "installing the wheel failed" in md.read_text(encoding="utf-8")
    assert "  - FAILED tests/test_a.py::test_x" in md.read_text(encoding="utf-8")

    assert [vars(result) for result in matrix.read_results(js)] == [vars(new), vars(old), vars(broken)]
    assert json.loads(js.read_text(encoding="utf-8"))["environments"][0]["counts"]["failed"] == 2


def test_the_committed_record_is_readable():
    """VERSIONS.json, when there is one, is what the script writes, and VERSIONS.md is its table."""
    record = ROOT / "VERSIONS.json"
    if not record.exists():
        pytest.skip("no VERSIONS.json yet: run `make matrix`")
    results = matrix.read_results(record)
    assert {result.name for result in results} <= set(matrix.environments(PROJECT))
    assert (ROOT / "VERSIONS.md").read_text(encoding="utf-8") == matrix.markdown(results)


def test_runs_the_installed_package_not_the_checkout():
    """The script runs each environment's pytest executable (whose sys.path starts at its bin/),
    never `python -m pytest` from the checkout, and conftest.py checks the location it is given."""
    source = (ROOT / "tools" / "version_matrix.py").read_text(encoding="utf-8")
    assert '"bin" / "pytest"' in source and '"-m", "pytest"' not in source
    conftest = (ROOT / "tests" / "conftest.py").read_text(encoding="utf-8")
    variable = "ANNOTATED_TRANSFORMER_EXPECT_PACKAGE_IN"
    assert variable in source and variable in conftest
