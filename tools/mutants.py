"""Mutation testing of the modules that carry the book's promises (mutmut 3).

    make mutants                                     # every listed module: hours on two cores
    python tools/mutants.py verdicts attention       # some modules, by their names in MODULES
    python tools/mutants.py --list                   # the modules, their files and their tests
    python tools/mutants.py --report                 # MUTANTS.md again from MUTANTS.json, with the
                                                     # equivalents listed since the last run

A mutant is the module with one small change (a `<` for a `<=`, a `+ 1` for a `- 1`, a constant, an
argument dropped): a test suite that holds the module's promises fails on it, and a mutant that
every test passes *survived*, a place where the code could be wrong and no test would say so.

For each module this script copies the checkout (its tracked and untracked files, not the ignored
ones) to a temporary folder, rewrites the module there so that mutmut mutates its decorated functions
too (`undecorate`), configures mutmut there to mutate that module alone, and runs it with
the module's own test files (`MODULES`): mutmut first runs them once to see which tests reach which
function, then runs, for each mutant, only the tests that reach its function, each mutant under a
limit of time (mutmut's: 15 times the tests' own time, 4 for training, whose fit can loop forever), two
at a time on two cores.
Each mutant ends killed (a test failed), timed out (counted as killed: the mutant made a test
hang), survived, or without a test that reaches it (counted as survived).

Some mutants cannot change what the code does (a default that every caller overrides, a message's
wording nobody reads...): `tools/mutants_equivalent.json` lists each such mutant by its module,
its function and the lines it changes, with the reason; they are left out of the score. The score of
a module is killed / (mutants − equivalent); the goal is at least 90% in every listed module. The
results go to MUTANTS.json (each module's counts and each survivor's diff, so that the next person
can kill it without running the tool again) and MUTANTS.md (the table), both at the repository root.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT_JSON, REPORT_MD = ROOT / "MUTANTS.json", ROOT / "MUTANTS.md"
EQUIVALENT = Path(__file__).resolve().parent / "mutants_equivalent.json"
LOGS = ROOT / "build" / "mutants"  # mutmut's output, a module a file (build/ is not committed)
GOAL = 0.90
CHILDREN = 2  # the machine's two cores


@dataclass(frozen=True)
class Module:
    """A module mutated as one unit: its file, and the test files that hold its promises."""

    path: str
    tests: tuple[str, ...]
    # Tests left out of the mutation run, each a long end-to-end run whose minute a mutant would pay
    # (mutmut runs every test that reaches a mutated function); the module's fast tests hold the promise.
    deselect: tuple[str, ...] = ()
    # mutmut's wall-time limit per mutant is this many times its tests' own time: 15 (mutmut's default)
    # leaves room for a loaded machine, but a mutant that loops forever then costs 15 runs of its tests.
    timeout_multiplier: float = 15.0


# The modules that carry the book's promises, each with the tests that run against its mutants.
MODULES = {
    "attention": Module("annotated_transformer/attention.py",
                        ("tests/test_attention.py", "tests/test_multi_head_attention.py")),
    "multi_head_attention": Module("annotated_transformer/multi_head_attention.py",
                                   ("tests/test_multi_head_attention.py", "tests/test_attention.py",
                                    "tests/test_decoding.py")),
    "model": Module("annotated_transformer/model.py", ("tests/test_model.py", "tests/test_layers.py")),
    "training": Module("annotated_transformer/training.py",
                       ("tests/test_training.py", "tests/test_promises_training.py",
                        "tests/test_training_machinery.py", "tests/test_training_promises_copy_task.py",
                        "tests/test_training_promises_step.py"),
                       deselect=("tests/test_training.py::test_copy_task_reaches_full_exact_match_and_decodes_it",
                                 "tests/test_training.py::test_compilations_over_many_batch_shapes_are_bounded"),
                       # fit's loop conditions make mutants that never end, and fit's tests take ~40 s
                       timeout_multiplier=4.0),
    "optimizer": Module("annotated_transformer/optimizer.py", ("tests/test_optimizer.py",)),
    "decoding": Module("annotated_transformer/decoding.py",
                       ("tests/test_decoding.py", "tests/test_promises_decoding.py",
                        "tests/test_decoding_promises_search.py")),
    "translator": Module("annotated_transformer/translator.py",
                         ("tests/test_translation.py", "tests/test_promises_decoding.py",
                          "tests/test_translator_promises.py", "tests/test_translator_promises_batches.py"),
                         deselect=("tests/test_translation.py::test_the_builtin_recipe_learns_to_translate",)),
    "checkpoints": Module("annotated_transformer/checkpoints.py", ("tests/test_checkpoints.py",)),
    "cli": Module("annotated_transformer/cli/commands.py",
                  ("tests/test_cli.py", "tests/test_cli_promises.py",
                   "tests/test_cli_promises_options.py"),
                  deselect=("tests/test_cli.py::test_experiment_trains_the_rows_asked_for_and_reads_them_back",)),
    "verdicts": Module("annotated_transformer/helpers/verdicts.py", ("tests/test_verdicts.py",)),
    "tokenization": Module("annotated_transformer/tokenization.py",
                           ("tests/test_tokenization.py", "tests/test_bpe_dropout.py")),
    "run_directory": Module("annotated_transformer/companions/run_directory.py",
                            ("tests/test_run_directory.py",)),
    "run_files": Module("annotated_transformer/runs/run_files.py",
                        ("tests/test_run_directory.py", "tests/test_run_files.py",
                         "tests/test_run_files_open_run.py", "tests/test_run_files_lock.py")),
    "attention_explorer": Module("annotated_transformer/companions/attention_explorer.py",
                                 ("tests/test_promises_views.py",)),
}

# mutmut's statuses, as this report counts them.
KILLED = {"killed", "timeout", "caught by type check"}
NOT_RUN = {"skipped", "not checked", "check was interrupted by user"}


def checkout_files() -> list[str]:
    """The checkout's files as a fresh clone plus today's changes would hold them: tracked and
    untracked, not the ignored ones."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout.decode()
    return sorted({name for name in out.split("\0") if name and (ROOT / name).is_file()})


def copy_checkout(dest: Path) -> None:
    for name in checkout_files():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)


def undecorate(source: str) -> str:
    """`source` with each decorated function written as a plain `def` followed by the decorators
    applied by hand (`name = deco(name)`), which Python defines to be the same thing.

    mutmut 3 mutates no decorated function but for @staticmethod and @classmethod (it cannot know what
    a decorator does with the function it is given): a module that adds its methods to a class with
    `@add_to_class`, or decodes under `@torch.inference_mode()`, would keep its training step and
    its decoding out of the run, and their tests untested. The rewritten copy is what mutmut
    mutates; the checkout is not touched. A decorator that names its own function (a property's
    `@name.setter`) is left in place: there the rewrite would not mean the same."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    functions = [node for parent in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]
                 for node in parent.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for function in sorted(functions, key=lambda node: node.lineno, reverse=True):
        decorators = [ast.get_source_segment(source, decorator) for decorator in function.decorator_list]
        if not decorators or decorators in (["staticmethod"], ["classmethod"]):
            continue
        if any(isinstance(name, ast.Name) and name.id == function.name
               for decorator in function.decorator_list for name in ast.walk(decorator)):
            continue
        indent = lines[function.lineno - 1][: function.col_offset]
        applied = function.name
        for decorator in reversed(decorators):  # the decorator nearest the def applies first
            applied = f"{decorator}({applied})"
        lines.insert(function.end_lineno, f"{indent}{function.name} = {applied}\n")
        del lines[function.decorator_list[0].lineno - 1 : function.lineno - 1]
    return "".join(lines)


def mutmut_config(module: Module) -> str:
    """The [tool.mutmut] table that mutates `module` alone and runs its tests."""
    also = ["annotated_transformer", "book", "tools", "experiments", "benchmarks", "_config.yml", "_toc.yml",
            "README.md", "CONTRIBUTING.md", "environment.yml", "VERSIONS.json"]
    return ("\n[tool.mutmut]\n"
            f"source_paths = {json.dumps([module.path])}\n"
            f"also_copy = {json.dumps(also)}\n"
            f"pytest_add_cli_args_test_selection = {json.dumps(list(module.tests))}\n"
            f"pytest_add_cli_args = {json.dumps(['-p', 'no:cacheprovider', '-q', *deselected(module)])}\n"
            f"timeout_multiplier = {module.timeout_multiplier}\ntimeout_constant = 1.0\n"
            "use_git_change_detection = false\n")


def deselected(module: Module) -> list[str]:
    return [arg for test in module.deselect for arg in ("--deselect", test)]


def statuses(work: Path, mutmut: str) -> dict[str, str]:
    """Each mutant's status, from `mutmut results --all true` (lines "    name: status")."""
    out = subprocess.run([mutmut, "results", "--all", "true"], cwd=work, capture_output=True, text=True,
                         check=True).stdout
    return dict(parse_results(out))


def parse_results(text: str) -> list[tuple[str, str]]:
    pattern = re.compile(r"^\s+(\S+): (.+)$")
    return [(found[1], found[2].strip()) for line in text.splitlines() if (found := pattern.match(line))]


def changed_lines(diff: str) -> list[str]:
    """The lines a mutant's diff removes and adds, stripped ("- x < y", "+ x <= y"), without the
    file headers: with its function, what names a mutant across runs (mutmut's numbers move when a
    function changes)."""
    return [f"{line[0]} {line[1:].strip()}" for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def function_of(mutant: str) -> str:
    """`annotated_transformer.attention.x_attention__mutmut_3` -> `attention`; a method's mutant
    `...xǁClassǁmethod__mutmut_2` -> `Class.method`."""
    name = mutant.rsplit("__mutmut_", 1)[0].rsplit(".", 1)[-1]
    if name.startswith("xǁ"):
        return ".".join(part for part in name[2:].split("ǁ") if part)
    return name[2:] if name.startswith("x_") else name


def load_equivalent() -> dict[str, list[dict]]:
    if not EQUIVALENT.exists():
        return {}
    data = json.loads(EQUIVALENT.read_text(encoding="utf-8"))
    for module, rows in data.items():
        for row in rows:
            if not {"function", "lines", "why"} <= set(row) or not row["why"].strip():
                raise SystemExit(f"{EQUIVALENT.name}: an entry of {module} lacks function, lines or why: "
                                 f"{row}")
    return data


def is_equivalent(module: str, survivor: dict, equivalent: dict[str, list[dict]]) -> str | None:
    """The reason `survivor` is listed as equivalent, or None."""
    for row in equivalent.get(module, []):
        if row["function"] == survivor["function"] and row["lines"] == survivor["lines"]:
            return row["why"]
    return None


def summarize(module: str, found: dict[str, str], diffs: dict[str, str],
              equivalent: dict[str, list[dict]]) -> dict:
    """A module's counts, score and survivors (each with its function, changed lines and diff)."""
    counts: dict[str, int] = {}
    for status in found.values():
        counts[status] = counts.get(status, 0) + 1
    survivors, listed = [], []
    for name, status in sorted(found.items()):
        if status in KILLED or status in NOT_RUN:
            continue
        row = {"mutant": name, "status": status, "function": function_of(name),
               "lines": changed_lines(diffs.get(name, "")), "diff": diffs.get(name, "")}
        why = is_equivalent(module, row, equivalent)
        (listed if why else survivors).append({**row, "why": why} if why else row)
    killed = sum(count for status, count in counts.items() if status in KILLED)
    not_run = sum(count for status, count in counts.items() if status in NOT_RUN)
    judged = len(found) - not_run - len(listed)
    return {"mutants": len(found), "killed": killed, "timeout": counts.get("timeout", 0),
            "survived": len(survivors), "not_run": not_run, "equivalent": len(listed),
            "score": round(killed / judged, 4) if judged else None, "counts": counts,
            "survivors": survivors, "equivalent_mutants": listed}


def rescore(name: str, row: dict, equivalent: dict[str, list[dict]]) -> dict:
    """A module's row with the survivors now listed as equivalent moved out of its score, without
    running the mutants again (`--report`)."""
    survivors, listed = [], list(row["equivalent_mutants"])
    for survivor in row["survivors"]:
        why = is_equivalent(name, survivor, equivalent)
        (listed if why else survivors).append({**survivor, "why": why} if why else survivor)
    judged = row["mutants"] - row["not_run"] - len(listed)
    return {**row, "survived": len(survivors), "equivalent": len(listed), "survivors": survivors,
            "equivalent_mutants": listed, "score": round(row["killed"] / judged, 4) if judged else None}


def run_module(name: str, module: Module, mutmut: str, children: int, keep: Path | None) -> dict:
    """Mutate one module in a copy of the checkout and summarize its mutants."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutants-{name}-") as tmp:
        work = keep / name if keep else Path(tmp)
        if keep:
            shutil.rmtree(work, ignore_errors=True)
        copy_checkout(work)
        mutated = work / module.path
        mutated.write_text(undecorate(mutated.read_text(encoding="utf-8")), encoding="utf-8")
        with open(work / "pyproject.toml", "a", encoding="utf-8") as pyproject:
            pyproject.write(mutmut_config(module))
        # mutmut puts its copy of the package first on sys.path itself; a PYTHONPATH that names
        # another copy would hide the mutants from the tests.
        env = {**{key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
               "OMP_NUM_THREADS": "1"}
        LOGS.mkdir(parents=True, exist_ok=True)
        with open(LOGS / f"{name}.log", "w", encoding="utf-8") as out:
            out.write(f"\n== {name}: {module.path}\n")
            out.flush()
            ran = subprocess.run([mutmut, "run", "--max-children", str(children)], cwd=work, env=env,
                                 stdout=out, stderr=subprocess.STDOUT, check=False)
        if ran.returncode:
            raise SystemExit(f"mutmut stopped on {name} (exit status {ran.returncode}): "
                             f"see {LOGS / name}.log")
        found = statuses(work, mutmut)
        diffs = {mutant: subprocess.run([mutmut, "show", mutant], cwd=work, capture_output=True, text=True,
                                        check=False).stdout
                 for mutant, status in found.items() if status not in KILLED | NOT_RUN}
    summary = summarize(name, found, diffs, load_equivalent())
    minutes = round((time.monotonic() - start) / 60, 1)
    return {"path": module.path, "tests": list(module.tests), "minutes": minutes, "decorated": True,
            **summary}


HISTORY_FIELDS = ("commit", "date", "mutants", "killed", "survived", "equivalent", "score", "decorated")


def history(previous: dict | None) -> list[dict]:
    """A module's earlier runs, oldest first, each in brief: a new run keeps the scores it replaces, so
    the report shows where each module started."""
    if previous is None:
        return []
    return [*previous.get("history", []), {field: previous.get(field) for field in HISTORY_FIELDS}]


def commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def machine() -> str:
    import torch  # the kernels' family names the machine as the book's benchmarks do

    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, " \
           f"{torch.backends.cpu.get_cpu_capability()} kernels"


def percent(score: float | None) -> str:
    return "-" if score is None else f"{score:.1%}"


def without_decorated(name: str, row: dict) -> bool:
    """Whether `row` is a run that left the module's decorated functions unmutated (before `undecorate`)."""
    if row.get("decorated") or name not in MODULES:
        return False
    source = (ROOT / MODULES[name].path).read_text(encoding="utf-8")
    return undecorate(source) != source


def score_cell(name: str, row: dict) -> str:
    return percent(row["score"]) + (" †" if without_decorated(name, row) else "")


def markdown(report: dict) -> str:
    """MUTANTS.md: the table, then each module's survivors by function."""
    lines = ["# Mutation testing", "",
             "Made by `make mutants` (`tools/mutants.py`, mutmut); each module with its own tests. "
             "Score: mutants killed (timeouts included) over mutants that are not equivalent "
             f"(`tools/mutants_equivalent.json`); the goal is {GOAL:.0%} in every module. "
             "† a run that left the module's decorated functions out (mutmut 3 skips them; the tool has "
             "mutated them since, see CONTRIBUTING): its score counts the other functions only.", "",
             "| module | mutants | killed | of which timed out | survived | equivalent | not run | score "
             "| first score | minutes | commit |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, row in sorted(report["modules"].items()):
        first = (row.get("history") or [row])[0]
        lines.append(f"| {name} | {row['mutants']} | {row['killed']} | {row['timeout']} | {row['survived']} "
                     f"| {row['equivalent']} | {row['not_run']} | {score_cell(name, row)} "
                     f"| {score_cell(name, first)} ({(first.get('commit') or '-')[:7]}) | {row['minutes']} "
                     f"| {(row.get('commit') or '-')[:10]} |")
    missing = [name for name in MODULES if name not in report["modules"]]
    if missing:
        lines += ["", "Not yet run: " + ", ".join(f"`{name}`" for name in missing) + "."]
    if "comparison" in report:
        compared = report["comparison"]
        lines += ["", f"## Two tools on `{compared['module']}`", "",
                  f"`{compared['command']}` ({compared['machine']}, {compared['date']}):", "",
                  "| tool | mutants | killed | minutes | CPU minutes |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {row['tool']} | {row['mutants']} | {row['killed']} | {row['minutes']} "
                  f"| {row.get('cpu_minutes', '-')} |" for row in compared["tools"]]
    for name, row in sorted(report["modules"].items()):
        if row["survivors"]:
            lines += ["", f"## {name}: {len(row['survivors'])} surviving", ""]
            lines += [f"- `{s['function']}` ({s['status']}): " + "; ".join(f"`{x}`" for x in s["lines"])
                      for s in row["survivors"]]
    return "\n".join(lines) + "\n"


def write_report(report: dict) -> None:
    for path, text in ((REPORT_JSON, json.dumps(report, indent=1, ensure_ascii=False) + "\n"),
                       (REPORT_MD, markdown(report))):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help=f"modules to mutate (default all: {', '.join(MODULES)})")
    parser.add_argument("--list", action="store_true", help="list the modules and their tests")
    parser.add_argument("--report", action="store_true", help="write MUTANTS.md again from MUTANTS.json")
    parser.add_argument("--children", type=int, default=CHILDREN, help="mutants run side by side (default 2)")
    parser.add_argument("--keep", type=Path, help="keep each module's working copy under this folder")
    args = parser.parse_args(argv)
    unknown = [name for name in args.modules if name not in MODULES]
    if unknown:
        parser.error(f"no module {', '.join(unknown)} in MODULES: choose from {', '.join(MODULES)}")
    if args.list:
        for name, module in MODULES.items():
            print(f"{name:<22}{module.path:<56}{' '.join(module.tests)}")
        return 0
    report = json.loads(REPORT_JSON.read_text(encoding="utf-8")) if REPORT_JSON.exists() else {"modules": {}}
    if args.report:
        equivalent = load_equivalent()
        report["modules"] = {name: rescore(name, row, equivalent) for name, row in report["modules"].items()}
        write_report(report)
        return 0
    mutmut = shutil.which("mutmut", path=str(Path(sys.executable).parent))
    if mutmut is None:
        raise SystemExit("mutmut is not installed beside this Python: pip install -e '.[mutants]' "
                         "(or make mutants, which installs it)")
    for name in args.modules or list(MODULES):
        row = run_module(name, MODULES[name], mutmut, args.children, args.keep)
        row |= {"commit": commit(), "date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": machine()}
        row["history"] = history(report["modules"].get(name))
        report["modules"][name] = row
        write_report(report)
        score = "-" if row["score"] is None else f"{row['score']:.1%}"
        print(f"{name}: {row['mutants']} mutants, {row['killed']} killed, {row['survived']} survived, "
              f"{row['equivalent']} equivalent: {score} ({row['minutes']} min)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
