"""The versions the package allows are the versions it is tested on: `make matrix`.

For each of three environments, this script builds a fresh virtual environment with uv, installs
torch first at the environment's version, then the package's wheel built from this checkout with its
[test] extra, under a constraints file that pins the torch already installed (so that nothing else
changes it), and runs the unit tests (`tests/`) against the installed wheel:

- minimum: the oldest Python the package allows, and every dependency at the floor pyproject.toml
  gives it (torch included), the [test] extra's too;
- colab:   Google Colab's runtime (its Python, torch, NumPy and spaCy, below), the rest the newest;
- newest:  the newest Python here and the newest release of every dependency, torch included.

The tests run from the repository root with the environment's own `pytest` executable (never
`python -m pytest`, which would put the checkout's annotated_transformer/ first on sys.path), and
tests/conftest.py fails the run at once when the package it imports is not the one installed in the
environment (ANNOTATED_TRANSFORMER_EXPECT_PACKAGE_IN).

The result goes to VERSIONS.md (a table) and VERSIONS.json (the same, for programs) at the
repository root: per environment, its Python, torch and every dependency's installed version, the
tests passed, failed and skipped, the minutes, the date and the command. Running some environments
only (`--env minimum`) keeps the others' rows.

PyPI's torch for Linux is the CUDA build, which brings the nvidia-* wheels (gigabytes); they are
downloaded once into uv's cache under build/matrix/ (git-ignored) and linked into each environment.
uv reads no pip configuration, so a cap on torch in pip.conf does not apply here.

    python tools/version_matrix.py                 # all three (tens of minutes on two cores)
    python tools/version_matrix.py --env minimum   # one
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "matrix"
MARKDOWN = ROOT / "VERSIONS.md"
JSON = ROOT / "VERSIONS.json"
TEST_EXTRA = "test"


@dataclass(frozen=True)
class Environment:
    """One environment of the matrix: its Python (major.minor), its torch requirement (installed
    first, alone), and the requirements that go with the wheel (pins of other dependencies)."""

    name: str
    python: str
    torch: str  # a requirement: "torch==2.11.*", or "torch" for the newest
    pins: tuple[str, ...] = ()
    about: str = ""


@dataclass
class Result:
    """What one environment gave: the versions installed and the tests' counts."""

    name: str
    python: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    minutes: float = 0.0
    date: str = ""
    command: str = ""
    about: str = ""
    note: str = ""  # why there are no counts (the set-up failed)
    failures: list[str] = field(default_factory=list)  # the tests that failed or errored, by id


# --- what pyproject.toml allows ------------------------------------------------------------------


def project(pyproject: Path = ROOT / "pyproject.toml") -> dict:
    return tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]


def requirement_name(requirement: str) -> str:
    """The canonical name of a requirement (`tokenizers>=0.20  # ...` -> `tokenizers`)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def floor(requirement: str) -> str:
    """The lowest version a requirement allows: its `>=` bound (`spacy>=3.8.13` -> `3.8.13`)."""
    bounds = re.findall(r">=\s*([0-9][0-9A-Za-z.+!-]*)", requirement.split(";")[0])
    if len(bounds) != 1:
        raise ValueError(f"{requirement!r} needs exactly one `>=` floor for the minimum environment")
    return bounds[0]


def tested_requirements(meta: dict) -> list[str]:
    """The requirements the tests run with: the package's dependencies, then its [test] extra."""
    return [*meta["dependencies"], *meta["optional-dependencies"][TEST_EXTRA]]


def floors(meta: dict) -> dict[str, str]:
    """Every tested requirement's name and floor, torch included."""
    return {requirement_name(req): floor(req) for req in tested_requirements(meta)}


def oldest_python(meta: dict) -> str:
    match = re.fullmatch(r">=\s*(\d+\.\d+)", meta["requires-python"].strip())
    if match is None:
        raise ValueError(f"requires-python {meta['requires-python']!r} is not `>=X.Y`")
    return match.group(1)


# Google Colab's runtime, as of this writing: update it when Colab moves on.
COLAB = {"python": "3.13", "torch": "2.11", "numpy": "2.1", "spacy": "3.8.15"}
NEWEST_PYTHON = "3.13"  # the newest Python on the machines the project runs on


def environments(meta: dict) -> dict[str, Environment]:
    lows = floors(meta)
    return {
        "minimum": Environment(
            "minimum", oldest_python(meta), f"torch=={lows['torch']}",
            tuple(f"{name}=={version}" for name, version in lows.items() if name != "torch"),
            "the oldest Python allowed, every dependency at its floor"),
        "colab": Environment(
            "colab", COLAB["python"], f"torch=={COLAB['torch']}.*",
            (f"numpy=={COLAB['numpy']}.*", f"spacy=={COLAB['spacy']}"),
            "Colab's runtime: its Python, torch, NumPy and spaCy; the rest the newest"),
        "newest": Environment(
            "newest", NEWEST_PYTHON, "torch", (), "the newest Python here, the newest of every dependency"),
    }


# --- pytest's summary line -----------------------------------------------------------------------

COUNT_WORDS = {"passed": "passed", "failed": "failed", "skipped": "skipped", "error": "errors",
               "errors": "errors", "xfailed": "xfailed", "xpassed": "xpassed", "deselected": "deselected"}


def parse_failures(output: str) -> list[str]:
    """The ids of the tests pytest's short summary (-ra) lists as FAILED or ERROR."""
    return [f"{kind} {test}" for kind, test in re.findall(r"^(FAILED|ERROR) (\S+)", output, re.M)]


def parse_summary(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line (`3 failed, 740 passed, 12 skipped, 2 warnings,
    1 error in 431.20s (0:07:11)`), with `errors` for error(s); {} when there is none."""
    for line in reversed(output.splitlines()):
        text = line.strip().strip("=").strip()
        if not re.search(r"\bin [0-9.]+s\b", text) and not text.startswith("no tests ran"):
            continue
        counts = {COUNT_WORDS[word]: int(number)
                  for number, word in re.findall(r"(\d+) ([a-z]+)", text) if word in COUNT_WORDS}
        if counts or text.startswith("no tests ran"):
            main = ("passed", "failed", "skipped", "errors")
            return {key: counts.get(key, 0) for key in main} | {
                key: value for key, value in counts.items() if key not in main}
    return {}


# --- the files it writes -------------------------------------------------------------------------

TABLE_PACKAGES = ["torch", "numpy", "matplotlib", "tqdm", "spacy", "tokenizers", "sacrebleu", "pytest"]


def markdown(results: list[Result]) -> str:
    """VERSIONS.md: the table of every environment, then each one's date and command."""
    head = ["environment", "Python", *TABLE_PACKAGES, "passed", "failed", "skipped", "errors", "minutes"]
    lines = [
        "# The versions the package is tested on",
        "",
        "Written by `make matrix` (`tools/version_matrix.py`), which builds each environment afresh,",
        "installs torch first, then the wheel built from the checkout with its `[test]` extra, and",
        "runs the unit tests (`tests/`) against the installed wheel. Do not edit by hand: run it again",
        "(`python tools/version_matrix.py --env NAME` for one environment). `VERSIONS.json` holds the",
        "same, with every package installed.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---:" if name in ("passed", "failed", "skipped", "errors", "minutes") else "---"
                       for name in head) + "|",
    ]
    for result in results:
        counts = [str(result.counts[key]) if result.counts else "–"
                  for key in ("passed", "failed", "skipped", "errors")]
        versions = [result.versions.get(name, "–") for name in TABLE_PACKAGES]
        row = [result.name, result.python or "–", *versions, *counts, f"{result.minutes:.1f}"]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    for result in results:
        lines.append(f"- **{result.name}** ({result.about}), {result.date}: `{result.command}`"
                     + (f"; {result.note}" if result.note else ""))
        lines += [f"  - {failure}" for failure in result.failures]
    return "\n".join(lines) + "\n"


def read_results(path: Path = JSON) -> list[Result]:
    if not path.exists():
        return []
    return [Result(**entry) for entry in json.loads(path.read_text(encoding="utf-8"))["environments"]]


def write_results(results: list[Result], order: list[str], markdown_path: Path = MARKDOWN,
                  json_path: Path = JSON) -> None:
    """Both files, the environments in `order` (any other after them)."""
    ranked = sorted(results, key=lambda r: (order.index(r.name) if r.name in order else len(order), r.name))
    entries = [vars(result) for result in ranked]
    json_path.write_text(json.dumps({"environments": entries}, indent=1) + "\n", encoding="utf-8")
    markdown_path.write_text(markdown(ranked), encoding="utf-8")


# --- building and testing one environment ------------------------------------------------------


def find_python(version: str) -> str:
    """An interpreter of `version` (major.minor): pyenv's newest of that version, else python3.X on
    PATH (not a pyenv shim, which may answer for another version)."""
    pyenv = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    release = lambda path: [int(part) for part in re.findall(r"\d+", Path(path).parents[1].name)]
    candidates = sorted(glob.glob(f"{pyenv}/versions/{version}.*/bin/python{version}"), key=release)
    if candidates:
        return candidates[-1]
    found = shutil.which(f"python{version}")
    if found and "/shims/" not in found:
        return found
    raise SystemExit(f"version_matrix: no Python {version} (pyenv's, or python{version} on PATH)")


def uv() -> str:
    found = shutil.which("uv") or (str(Path(sys.executable).parent / "uv")
                                   if (Path(sys.executable).parent / "uv").exists() else None)
    if found is None:
        raise SystemExit("version_matrix: needs uv (pip install uv)")
    return found


def run(args: list[str], log, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Run `args`, its output going to the log as it comes (`tail -f build/matrix/NAME.log`); the
    result holds the output too."""
    print("$ " + shlex.join(args), file=log, flush=True)
    start = log.tell()
    code = subprocess.run(args, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL).returncode
    log.flush()
    with open(log.name, encoding="utf-8", errors="replace") as text:
        text.seek(start)
        output = text.read()
    return subprocess.CompletedProcess(args, code, output)


def build_wheel(work: Path, log) -> Path:
    out = work / "wheel"
    shutil.rmtree(out, ignore_errors=True)
    # setuptools builds in the checkout's build/lib and keeps what an earlier build left there: a
    # module since renamed or removed would ride along in the wheel, so the tree is cleared first.
    for stale in [ROOT / "build" / "lib", *ROOT.glob("build/bdist.*")]:
        shutil.rmtree(stale, ignore_errors=True)
    result = run([uv(), "build", "--wheel", "--out-dir", str(out), str(ROOT)], log, env=uv_env(work))
    if result.returncode != 0:
        raise SystemExit(f"version_matrix: building the wheel failed:\n{result.stdout}")
    (wheel,) = out.glob("annotated_transformer-*.whl")
    return wheel


def uv_env(work: Path) -> dict:
    """The environment of every command: no PYTHONPATH, no active virtual environment (its bin/ off
    PATH, and the project's .venv/bin too, so that a test looking for a development tool on PATH does
    not find .venv's), no pip settings; uv's cache under `work`."""
    hidden = {str(ROOT / ".venv" / "bin")}
    if os.environ.get("VIRTUAL_ENV"):
        hidden.add(str(Path(os.environ["VIRTUAL_ENV"]) / "bin"))
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not key.startswith("PIP_")}
    env["PATH"] = os.pathsep.join(part for part in env.get("PATH", "").split(os.pathsep)
                                  if part and part.rstrip("/") not in hidden)
    env["UV_CACHE_DIR"] = str(work / "cache")
    env["UV_LINK_MODE"] = env.get("UV_LINK_MODE", "hardlink")
    return env


def ask(python: Path, code: str) -> str:
    """What `code` prints, run by `python` outside the checkout (so that the checkout's
    annotated_transformer/ is not on its path); "" when it fails."""
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd="/").stdout.strip()


def installed(python: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json, re\n"
            "print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version"
            " for d in m.distributions()}))")
    return json.loads(subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                                     check=True, cwd="/").stdout)


def build_and_test(environment: Environment, wheel: Path, work: Path, pytest_args: list[str],
                   meta: dict) -> Result:
    started = time.monotonic()
    result = Result(environment.name, about=environment.about,
                    date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    venv = work / environment.name
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log_path = work / f"{environment.name}.log"
    env = uv_env(work)
    with log_path.open("w", encoding="utf-8") as log:
        def fail(what: str, output: str) -> Result:
            result.note = f"{what} failed (build/matrix/{log_path.name})"
            result.minutes = (time.monotonic() - started) / 60
            print(f"{environment.name}: {what} failed:\n{output[-3000:]}", file=sys.stderr)
            return result

        python = venv / "bin" / "python"
        # --seed: pip (and setuptools before Python 3.12) as in a venv that `python -m venv` makes.
        step = run([uv(), "venv", "--seed", "--python", find_python(environment.python), str(venv)], log,
                   env=env)
        if step.returncode != 0:
            return fail("creating the environment", step.stdout)
        # torch first, alone, at the environment's version; then the constraint keeps it.
        step = run([uv(), "pip", "install", "--python", str(python), environment.torch], log, env=env)
        if step.returncode != 0:
            return fail(f"installing {environment.torch}", step.stdout)
        torch_version = installed(python)["torch"]
        constraints = work / f"{environment.name}-constraints.txt"
        constraints.write_text(f"torch=={torch_version}\n", encoding="utf-8")
        package = f"annotated-transformer[{TEST_EXTRA}] @ {wheel.resolve().as_uri()}"
        step = run([uv(), "pip", "install", "--python", str(python), "--constraint", str(constraints),
                    package, *environment.pins], log, env=env)
        if step.returncode != 0:
            return fail("installing the wheel", step.stdout)
        versions = installed(python)
        if versions.get("torch") != torch_version:
            return fail(f"keeping torch {torch_version}", f"torch is now {versions.get('torch')}")
        names = ["torch", "numpy", *(requirement_name(req) for req in tested_requirements(meta))]
        result.versions = {name: versions.get(name, "–") for name in dict.fromkeys(names)}
        result.python = ask(python, "import platform; print(platform.python_version())")
        site = ask(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])")
        location = ask(python, "import annotated_transformer; print(annotated_transformer.__file__)")
        if not location or not Path(location).resolve().is_relative_to(Path(site).resolve()):
            return fail("importing the installed package",
                        f"annotated_transformer is {location!r}, not in {site}")
        # The environment's pytest from the repository root: sys.path[0] is its bin/, not the checkout;
        # conftest.py checks the package's location again inside the run.
        test_env = {**env, "ANNOTATED_TRANSFORMER_EXPECT_PACKAGE_IN": site,
                    "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}"}
        test_env.pop("ANNOTATED_TRANSFORMER_REQUIRE_DEV", None)
        args = [str(venv / "bin" / "pytest"), "tests", "-q", "-p", "no:cacheprovider", "-ra", *pytest_args]
        print(f"{environment.name}: {' '.join(args[1:])} (log: {log_path})", flush=True)
        step = run(args, log, env=test_env)
        result.counts = parse_summary(step.stdout)
        result.failures = parse_failures(step.stdout)
        if not result.counts:
            result.note = f"pytest gave no summary (exit {step.returncode}; build/matrix/{log_path.name})"
    result.minutes = (time.monotonic() - started) / 60
    return result


def main(argv: list[str] | None = None) -> int:
    meta = project()
    matrix = environments(meta)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", action="append", choices=list(matrix),
                        help="an environment to build and test (again: several); default all")
    parser.add_argument("--work", type=Path, default=WORK, help="where the environments and uv's cache go")
    parser.add_argument("--parallel", action="store_true", help="build and test the environments at once")
    parser.add_argument("pytest_args", nargs="*", help="after --: more arguments for pytest")
    options = parser.parse_args(argv)
    chosen = options.env or list(matrix)
    work = options.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    with (work / "wheel.log").open("w", encoding="utf-8") as log:
        wheel = build_wheel(work, log)
    command = shlex.join(["python", "tools/version_matrix.py", *(argv if argv is not None else sys.argv[1:])])
    results = {result.name: result for result in read_results()}
    lock = threading.Lock()

    def one(name: str) -> None:
        print(f"{name}: building ({matrix[name].about})", flush=True)
        result = build_and_test(matrix[name], wheel, work, options.pytest_args, meta)
        result.command = command
        with lock:
            results[name] = result
            write_results(list(results.values()), list(matrix))
        print(f"{name}: {result.counts or result.note} in {result.minutes:.1f} min", flush=True)

    # The tests run on one thread each (tests/conftest.py): on two cores, two environments at once
    # take little longer than one.
    with ThreadPoolExecutor(max_workers=len(chosen) if options.parallel else 1) as pool:
        list(pool.map(one, chosen))
    bad = [name for name in chosen
           if not results[name].counts or results[name].counts["failed"] or results[name].counts["errors"]]
    print(f"written {MARKDOWN.name} and {JSON.name}" + (f"; not green: {bad}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
