"""The mutation-testing tool (tools/mutants.py, `make mutants`): which modules and tests it runs, how it
reads mutmut's statuses, names a mutant across runs, leaves out the listed equivalent mutants, and
scores each module. The mutation runs themselves take hours and are not run here."""

import json
from pathlib import Path

import mutants  # tools/ is on pytest's pythonpath (pyproject.toml)
import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent

RESULTS = """\
    annotated_transformer.helpers.verdicts.x_holm__mutmut_1: killed
    annotated_transformer.helpers.verdicts.x_holm__mutmut_2: survived
    annotated_transformer.helpers.verdicts.xǁVerdictǁ__repr____mutmut_3: no tests
    annotated_transformer.helpers.verdicts.x_judge__mutmut_4: timeout
    annotated_transformer.helpers.verdicts.x_judge__mutmut_5: skipped
    annotated_transformer.helpers.verdicts.x_judge__mutmut_6: survived
"""
DIFF = """\
--- annotated_transformer/helpers/verdicts.py
+++ annotated_transformer/helpers/verdicts.py
@@ -1,3 +1,3 @@
 def holm(verdicts):
-    if p < level:
+    if p <= level:
         return 1
"""


def test_every_listed_module_and_test_file_is_in_the_checkout():
    for name, module in mutants.MODULES.items():
        assert (ROOT / module.path).is_file(), name
        assert module.tests and all((ROOT / test).is_file() for test in module.tests), name


def test_the_issues_modules_are_all_listed():
    """The modules that carry the book's promises: attention and the model, the training step and its
    schedule, decoding and the translator, checkpoints, the command line, the verdict rule, the
    vocabulary and BPE, the run directory and the attention explorer's data."""
    paths = {module.path.rsplit("/", 1)[-1] for module in mutants.MODULES.values()}
    assert {"attention.py", "multi_head_attention.py", "model.py", "training.py", "optimizer.py",
            "decoding.py", "translator.py", "checkpoints.py", "commands.py", "verdicts.py", "tokenization.py",
            "run_directory.py", "run_files.py", "attention_explorer.py"} <= paths


def test_mutmut_is_configured_for_one_module_and_its_tests():
    module = mutants.MODULES["verdicts"]
    config = tomllib.loads(mutants.mutmut_config(module))["tool"]["mutmut"]
    assert config["source_paths"] == ["annotated_transformer/helpers/verdicts.py"]
    assert config["pytest_add_cli_args_test_selection"] == ["tests/test_verdicts.py"]
    assert "annotated_transformer" in config["also_copy"]  # the rest of the package, unmutated


def test_results_are_read_name_by_name():
    found = dict(mutants.parse_results(RESULTS))
    assert len(found) == 6
    assert found["annotated_transformer.helpers.verdicts.xǁVerdictǁ__repr____mutmut_3"] == "no tests"
    assert found["annotated_transformer.helpers.verdicts.x_judge__mutmut_4"] == "timeout"


def test_a_mutant_is_named_by_its_function_and_the_lines_it_changes():
    assert mutants.function_of("annotated_transformer.helpers.verdicts.x_holm__mutmut_2") == "holm"
    assert mutants.function_of("annotated_transformer.helpers.verdicts.xǁVerdictǁ__repr____mutmut_3") == (
        "Verdict.__repr__")
    assert mutants.changed_lines(DIFF) == ["- if p < level:", "+ if p <= level:"]


def summary_of(equivalent: dict) -> dict:
    found = dict(mutants.parse_results(RESULTS))
    diffs = {name: DIFF if "holm" in name else "-    a\n+    b\n" for name in found}
    return mutants.summarize("verdicts", found, diffs, equivalent)


def test_the_score_is_killed_and_timed_out_over_mutants_run_and_not_equivalent():
    summary = summary_of({})
    assert summary["mutants"] == 6 and summary["killed"] == 2 and summary["timeout"] == 1
    assert summary["not_run"] == 1 and summary["survived"] == 3 and summary["equivalent"] == 0
    assert summary["score"] == pytest.approx(2 / 5)  # "no tests" counts against the score
    assert [s["function"] for s in summary["survivors"]] == ["holm", "judge", "Verdict.__repr__"]


def test_an_equivalent_mutant_is_matched_by_function_and_lines_only():
    listed = {"verdicts": [{"function": "holm", "lines": ["- if p < level:", "+ if p <= level:"],
                            "why": "p equals the level only on a set of measure zero"}]}
    summary = summary_of(listed)
    assert summary["equivalent"] == 1 and summary["survived"] == 2
    assert summary["score"] == pytest.approx(2 / 4)
    assert summary["equivalent_mutants"][0]["why"].startswith("p equals")
    other_function = {"verdicts": [{**listed["verdicts"][0], "function": "judge"}]}
    assert summary_of(other_function)["equivalent"] == 0
    other_lines = {"verdicts": [{**listed["verdicts"][0], "lines": ["- if p < level:", "+ if p > level:"]}]}
    assert summary_of(other_lines)["equivalent"] == 0
    assert summary_of({"tokenization": listed["verdicts"]})["equivalent"] == 0  # another module's


def test_an_equivalent_entry_without_a_reason_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "equivalent.json"
    entry = {"function": "holm", "lines": [], "why": " "}
    path.write_text(json.dumps({"verdicts": [entry]}), encoding="utf-8")
    monkeypatch.setattr(mutants, "EQUIVALENT", path)
    with pytest.raises(SystemExit, match="an entry of verdicts lacks function, lines or why"):
        mutants.load_equivalent()


def test_the_committed_equivalents_name_listed_modules_with_reasons():
    for module, rows in mutants.load_equivalent().items():
        assert module in mutants.MODULES, module
        assert all(row["lines"] and len(row["why"]) > 20 for row in rows), module


def test_the_report_has_a_row_per_module_and_lists_each_survivor():
    row = {**summary_of({}), "minutes": 1.5, "commit": "0123456789abcdef"}
    text = mutants.markdown({"modules": {"verdicts": row}})
    assert "| verdicts | 6 | 2 | 1 | 3 | 0 | 1 | 40.0% | 40.0% (0123456) | 1.5 | 0123456789 |" in text
    assert "## verdicts: 3 surviving" in text
    assert "Not yet run: `attention`, `multi_head_attention`, " in text
    assert "`holm` (survived): `- if p < level:`; `+ if p <= level:`" in text


def test_a_new_run_keeps_the_scores_it_replaces_and_the_report_shows_the_first():
    first = {**summary_of({}), "minutes": 1.5, "commit": "aaaaaaaaaa", "date": "2026-12-01"}
    second = {**first, "score": 0.75, "killed": 3, "commit": "bbbbbbbbbb", "history": mutants.history(first)}
    third = {**second, "score": 0.95, "commit": "cccccccccc", "history": mutants.history(second)}
    assert [row["score"] for row in third["history"]] == [pytest.approx(0.4), 0.75]
    assert [row["commit"] for row in third["history"]] == ["aaaaaaaaaa", "bbbbbbbbbb"]
    assert mutants.history(None) == []
    assert "| 95.0% | 40.0% (aaaaaaa) |" in mutants.markdown({"modules": {"verdicts": third}})


def test_an_unknown_module_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit):
        mutants.main(["attn"])
    assert "no module attn in MODULES: choose from attention, " in capsys.readouterr().err


def test_cosmic_ray_is_configured_with_the_modules_tests_and_its_outcomes_counted():
    import mutation_tools  # benchmarks/ is on pytest's pythonpath

    config = tomllib.loads(mutation_tools.cosmic_ray_config(mutants.MODULES["verdicts"]))["cosmic-ray"]
    assert config["module-path"] == "annotated_transformer/helpers/verdicts.py"
    assert config["test-command"].endswith("-m pytest -x -q -p no:cacheprovider tests/test_verdicts.py")
    dump = "\n".join(json.dumps(pair) for pair in (
        [{"job_id": "1"}, {"test_outcome": "killed"}], [{"job_id": "2"}, {"test_outcome": "survived"}],
        [{"job_id": "3"}, {"test_outcome": "killed"}], [{"job_id": "4"}, None]))
    assert mutation_tools.outcomes(dump + "\n") == {"killed": 2, "survived": 1, "not run": 1}


def test_the_report_shows_the_two_tools_compared():
    tools = [{"tool": "mutmut 3", "mutants": 75, "killed": 70, "minutes": 2.0, "cpu_minutes": 3.1},
             {"tool": "cosmic-ray 8", "mutants": 60, "killed": 50, "minutes": 9.5, "cpu_minutes": 8.8}]
    text = mutants.markdown({"modules": {}, "comparison": {
        "module": "attention", "command": "python benchmarks/mutation_tools.py attention",
        "machine": "x86_64, 2 cores, AVX512 kernels", "date": "2026-12-02", "tools": tools}})
    assert "## Two tools on `attention`" in text
    assert "| mutmut 3 | 75 | 70 | 2.0 | 3.1 |" in text and "| cosmic-ray 8 | 60 | 50 | 9.5 | 8.8 |" in text


def test_a_deselected_test_is_left_out_of_every_pytest_run_and_exists():
    """A module's long end-to-end tests are left out by node id: each names a test that exists (a
    renamed test would otherwise slip back in unnoticed)."""
    config = tomllib.loads(mutants.mutmut_config(mutants.MODULES["translator"]))["tool"]["mutmut"]
    args = config["pytest_add_cli_args"]
    assert args[args.index("--deselect") + 1] == (
        "tests/test_translation.py::test_the_builtin_recipe_learns_to_translate")
    for name, module in mutants.MODULES.items():
        for test in module.deselect:
            path, function = test.split("::")
            assert path in module.tests and f"def {function}(" in (ROOT / path).read_text(), (name, test)


def test_the_report_takes_equivalents_listed_after_the_run_out_of_the_score():
    row = summary_of({})
    listed = {"verdicts": [{"function": "holm", "lines": ["- if p < level:", "+ if p <= level:"],
                            "why": "p equals the level only on a set of measure zero"}]}
    again = mutants.rescore("verdicts", row, listed)
    assert (again["survived"], again["equivalent"]) == (2, 1)
    assert again["score"] == pytest.approx(2 / 4) and row["score"] == pytest.approx(2 / 5)
    assert mutants.rescore("verdicts", again, listed) == again  # listed once, not twice


DECORATED = '''\
import functools

registry = []


def register(function):
    registry.append(function.__name__)
    return function


def twice(function):
    @functools.wraps(function)
    def wrapped(*args):
        return 2 * function(*args)
    return wrapped


class Box:
    def __init__(self, value):
        self._value = value

    @property
    def value(self):
        return self._value

    @value.setter
    def value(self, new):
        self._value = new

    @classmethod
    def of(cls, value):
        return cls(value)


@register
@twice
def add_one(x):
    return x + 1


def plus(x):
    return x + 1
'''


def run_module_text(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<module>", "exec"), namespace)
    return namespace


def test_undecorate_applies_each_decorator_by_hand_in_the_same_order():
    """mutmut leaves decorated functions unmutated; the rewritten copy it mutates must mean the same:
    decorators applied bottom-up, a property still a property."""
    rewritten = mutants.undecorate(DECORATED)
    assert "@register" not in rewritten and "@twice" not in rewritten and "    @property" not in rewritten
    assert "add_one = register(twice(add_one))\n" in rewritten
    assert "    value = property(value)\n" in rewritten
    before, after = run_module_text(DECORATED), run_module_text(rewritten)
    assert after["add_one"](3) == before["add_one"](3) == 8  # twice applied once, inside register
    assert after["registry"] == before["registry"] == ["add_one"]
    box = after["Box"].of(4)
    box.value = 5
    assert box.value == 5 and isinstance(after["Box"].__dict__["value"], property)
    assert rewritten.count("\n") == DECORATED.count("\n") - 1  # two decorator lines became one line


def test_undecorate_leaves_alone_what_mutmut_handles_and_what_cannot_be_rewritten():
    """@classmethod is mutmut's own case; `@value.setter` names the function it decorates, where
    `value = value.setter(value)` would look up the plain function, not the property."""
    rewritten = mutants.undecorate(DECORATED)
    assert "    @classmethod\n    def of(cls, value):" in rewritten
    assert "    @value.setter\n    def value(self, new):" in rewritten
    assert mutants.undecorate("def plus(x):\n    return x + 1\n") == "def plus(x):\n    return x + 1\n"


def test_the_training_step_is_among_what_mutmut_mutates():
    """The methods chapter 9 adds to the Trainer with @add_to_class carry the step, its accumulation and
    the schedule: the copy mutmut mutates has them as plain functions, and imports the same."""
    source = (ROOT / mutants.MODULES["training"].path).read_text(encoding="utf-8")
    rewritten = mutants.undecorate(source)
    for name in ("_micro_step", "_update", "train_step", "fit", "state_dict", "load_state_dict"):
        assert f"@add_to_class(Trainer)\ndef {name}(" in source
        assert f"\ndef {name}(" in rewritten and f"\n{name} = add_to_class(Trainer)({name})\n" in rewritten
    assert "@add_to_class" not in rewritten and "\n@torch.no_grad()" not in rewritten
    compile(rewritten, "training.py", "exec")


def test_a_score_that_left_decorated_functions_out_is_marked():
    """A run from before `undecorate` scored training without its step: the report must not show that
    score as if it counted them; a module with no decorated function has nothing to mark."""
    row = {"score": 0.5, "commit": "abc"}
    assert mutants.score_cell("training", row) == "50.0% †"
    assert mutants.score_cell("training", {**row, "decorated": True}) == "50.0%"
    assert mutants.score_cell("attention", row) == "50.0%"
