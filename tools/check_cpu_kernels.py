"""Prove that the checked outputs do not depend on the CPU: run the tests under every float32
kernel family PyTorch can use on this machine.

    python tools/check_cpu_kernels.py            # nbval (quick mode) and the unit tests
    python tools/check_cpu_kernels.py --nbval    # only the notebooks' checked cells
    make test-cpus                               # the same as the first line

PyTorch picks its CPU kernels when it starts, by what the processor supports (AVX-512, AVX2, or
plain vector code), and each family adds up float32 numbers in its own order: the last digit of a
float32 result may differ from one machine to the next. `ATEN_CPU_CAPABILITY` forces a family, so
one machine can stand in for several: this script runs the same checks under `default` and under
each family this CPU has, and fails if any of them fails.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAPABILITIES = ("default", "avx2", "avx512")


def capability_in_use(requested: str | None) -> str:
    """The kernel family torch uses when `requested` is asked for (None: what torch picks by itself
    from the CPU's feature flags), as torch names it: DEFAULT, AVX2, AVX512."""
    env = {key: value for key, value in os.environ.items() if key != "ATEN_CPU_CAPABILITY"}
    if requested is not None:
        env["ATEN_CPU_CAPABILITY"] = requested
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    result = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def available_capabilities() -> list[str]:
    """`default` and every family up to the one torch picks by itself. The CPU's flags decide: torch
    obeys ATEN_CPU_CAPABILITY without checking the CPU (it reports AVX512 when asked on a CPU without
    AVX-512, whose first AVX-512 instruction would then kill the process)."""
    native = capability_in_use(None).lower()
    return list(CAPABILITIES[: CAPABILITIES.index(native) + 1]) if native in CAPABILITIES else ["default"]


def checks(nbval: bool, unit: bool) -> list[tuple[str, list[str], dict[str, str]]]:
    python = sys.executable
    runs = []
    if nbval:
        command = [python, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "book/", "-q",
                   "-p", "no:cacheprovider"]
        runs.append(("nbval", command, {"ANNOTATED_TRANSFORMER_QUICK": "1"}))
    if unit:
        runs.append(("unit tests", [python, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider"], {}))
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nbval", action="store_true", help="only nbval over the notebooks' checked cells")
    parser.add_argument("--unit", action="store_true", help="only the unit tests")
    args = parser.parse_args()
    both = not (args.nbval or args.unit)
    capabilities = available_capabilities()
    print(f"kernel families on this CPU: {', '.join(capabilities)}", flush=True)
    results = []
    for capability in capabilities:
        for name, command, env in checks(args.nbval or both, args.unit or both):
            started = time.perf_counter()
            print(f"\n== {name} with ATEN_CPU_CAPABILITY={capability}", flush=True)
            status = subprocess.run(
                command, cwd=ROOT, env={**os.environ, **env, "ATEN_CPU_CAPABILITY": capability}
            ).returncode
            results.append((capability, name, status, time.perf_counter() - started))
    print("\nkernels   check        result  seconds")
    for capability, name, status, seconds in results:
        print(f"{capability:9} {name:12} {'passed' if status == 0 else 'FAILED':7} {seconds:7.0f}")
    return 0 if all(status == 0 for _, _, status, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
