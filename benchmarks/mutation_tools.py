"""Two mutation-testing tools on one module of this code base: mutmut 3 and cosmic-ray 8.

    pip install -e ".[mutants]" cosmic-ray==8.7.0      # the two tools, once
    python benchmarks/mutation_tools.py attention      # minutes on two cores; any module of MODULES

Each tool mutates the module in its own copy of the checkout and runs the module's tests
(tools/mutants.py: MODULES) against each mutant; the script reports the mutants each made, how many
its tests killed, and the minutes, and keeps the figures in MUTANTS.json ("comparison"), which
MUTANTS.md shows. mutmut runs, for each mutant, only the tests that reach the mutated function,
two mutants at a time, each under a limit of CPU time; cosmic-ray runs the whole test command for
each mutant, one after another (its local distributor), each under a limit of wall time. The
minutes depend on the machine: time the two on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent.parent / "tools"
sys.path.insert(0, str(TOOLS))

import mutants  # noqa: E402  (tools/mutants.py: the modules, their tests, the report)

COSMIC_TIMEOUT_S = 120.0


def children_cpu_seconds() -> float:
    """CPU seconds (user + system) of the finished child processes and theirs: a tool's cost that
    other work on the machine barely changes, where its minutes on the clock do."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cosmic_ray_config(module: mutants.Module) -> str:
    tests = " ".join(module.tests)
    return ("[cosmic-ray]\n"
            f'module-path = "{module.path}"\n'
            f"timeout = {COSMIC_TIMEOUT_S}\n"
            "excluded-modules = []\n"
            f'test-command = "{sys.executable} -m pytest -x -q -p no:cacheprovider {tests}"\n\n'
            "[cosmic-ray.distributor]\n"
            'name = "local"\n')


def outcomes(dump: str) -> dict[str, int]:
    """Counts of each test outcome in `cosmic-ray dump`'s lines (one JSON pair a mutant)."""
    counts: dict[str, int] = {}
    for line in dump.splitlines():
        if not line.strip():
            continue
        _, result = json.loads(line)
        outcome = (result or {}).get("test_outcome") or "not run"
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def run_cosmic_ray(name: str, module: mutants.Module) -> dict:
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "cosmic-ray").exists():
        raise SystemExit("cosmic-ray is not installed beside this Python: pip install cosmic-ray==8.7.0")
    start, cpu = time.monotonic(), children_cpu_seconds()
    with tempfile.TemporaryDirectory(prefix=f"cosmic-ray-{name}-") as tmp:
        work = Path(tmp)
        mutants.copy_checkout(work)
        (work / "cosmic-ray.toml").write_text(cosmic_ray_config(module), encoding="utf-8")

        def cosmic_ray(*command: str) -> str:
            return subprocess.run([bin_dir / "cosmic-ray", *command], cwd=work, capture_output=True,
                                  text=True, check=True).stdout

        cosmic_ray("init", "cosmic-ray.toml", "session.sqlite")
        cosmic_ray("exec", "cosmic-ray.toml", "session.sqlite")
        counts = outcomes(cosmic_ray("dump", "session.sqlite"))
    killed = counts.get("killed", 0)
    made = sum(counts.values())
    return {"tool": "cosmic-ray 8", "mutants": made, "killed": killed, "counts": counts,
            "score": round(killed / made, 4) if made else None,
            "minutes": round((time.monotonic() - start) / 60, 1),
            "cpu_minutes": round((children_cpu_seconds() - cpu) / 60, 1)}


def run_mutmut(name: str, module: mutants.Module) -> dict:
    mutmut = shutil.which("mutmut", path=str(Path(sys.executable).parent))
    cpu = children_cpu_seconds()
    row = mutants.run_module(name, module, mutmut, mutants.CHILDREN, None)
    return {"tool": "mutmut 3", "mutants": row["mutants"], "killed": row["killed"], "counts": row["counts"],
            "score": round(row["killed"] / row["mutants"], 4) if row["mutants"] else None,
            "minutes": row["minutes"], "cpu_minutes": round((children_cpu_seconds() - cpu) / 60, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", choices=sorted(mutants.MODULES), help="the module both tools mutate")
    args = parser.parse_args(argv)
    module = mutants.MODULES[args.module]
    rows = [run_mutmut(args.module, module), run_cosmic_ray(args.module, module)]
    for row in rows:
        print(f"{row['tool']:<14}{row['mutants']:>8} mutants{row['killed']:>6} killed"
              f"{row['minutes']:>7} min{row['cpu_minutes']:>7} CPU min  {row['counts']}")
    path = mutants.REPORT_JSON
    report = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"modules": {}}
    report["comparison"] = {"module": args.module, "machine": mutants.machine(), "commit": mutants.commit(),
                            "date": time.strftime("%Y-%m-%d", time.gmtime()),
                            "command": "python benchmarks/mutation_tools.py " + args.module, "tools": rows}
    mutants.write_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
