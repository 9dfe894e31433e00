"""The fingerprint of a short training run, so that a change to what training computes is seen when
it is made (tests/test_reproducibility.py).

    python tools/training_fingerprint.py            # print this machine's fingerprint
    python tools/training_fingerprint.py --write    # record it in tests/training_fingerprint.json,
                                                    # once under each float32 kernel family

The run: the `builtin` recipe (what `make main` trains) for STEPS steps on the built-in corpus, on one
thread, with dropout, gradients, the schedule and checkpoint averaging as users run them. Its
fingerprint holds (a) the SHA-256 of the averaged model's weights, which is the same bit for bit on
the same CPU, float32 kernel family (ATEN_CPU_CAPABILITY) and torch; and (b) numbers that other CPUs
and kernel families reproduce up to float rounding: the training loss of every step and the sum of
squares of all the averaged model's weights. A change to initialization, data order, dropout, the
loss, the schedule or averaging moves (b) far beyond rounding; TOLERANCE is the relative difference
allowed, set well above what the kernel families differ by on one machine (recorded as `spread`).
(Not each tensor on its own: the keys' biases get no gradient, since softmax ignores a constant
added to all of a query's scores, so their steps are Adam scaling up rounding noise, and differ
wholly between kernel families.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

FILE = Path(__file__).resolve().parent.parent / "tests" / "training_fingerprint.json"
STEPS = 40
TOLERANCE = 3e-4  # between the families' `spread` and the `sensitivity` in training_fingerprint.json
FAMILIES = ("default", "avx2", "avx512")


def cpu_identity() -> dict:
    """What decides which float32 kernels run: the processor's model and features, torch's version
    and kernel family. Two machines that agree on all of it compute the same bits."""
    import torch

    fields: dict[str, str] = {}
    if Path("/proc/cpuinfo").exists():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("vendor_id", "cpu family", "model", "stepping", "flags") and key not in fields:
                fields[key] = value.strip()
    flags = fields.pop("flags", "")
    return {**fields, "flags_sha256": hashlib.sha256(flags.encode()).hexdigest()[:16],
            "machine": platform.machine(), "torch": torch.__version__,
            "kernels": torch.backends.cpu.get_cpu_capability()}


def fingerprint() -> dict:
    """Train the short run in a temporary directory; its fingerprint."""
    import torch

    from annotated_transformer import get_recipe, train_translation

    torch.set_num_threads(1)
    recipe = get_recipe("builtin").replace(max_steps=STEPS, checkpoint_every=10)
    with tempfile.TemporaryDirectory() as folder:
        run = train_translation(recipe, Path(folder) / "run", device="cpu", progress=False)
        digest = hashlib.sha256()
        for name, tensor in sorted(run.model.state_dict().items()):
            digest.update(name.encode() + tensor.detach().contiguous().view(torch.uint8).numpy().tobytes())
        return {
            "identity": cpu_identity(),
            "weights_sha256": digest.hexdigest(),
            "losses": [round(record["loss"], 9) for record in run.history],
            "sum_of_squares": sum(tensor.double().square().sum().item()
                                  for tensor in run.model.state_dict().values()),
        }


def relative_difference(a: dict, b: dict) -> float:
    """The largest relative difference between two fingerprints' losses and sums of squares."""
    pairs = [*zip(a["losses"], b["losses"], strict=True), (a["sum_of_squares"], b["sum_of_squares"])]
    return max(abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in pairs)


def _under_each_family() -> list[dict]:
    runs = []
    for family in FAMILIES:
        env = {**os.environ, "ATEN_CPU_CAPABILITY": family, "OMP_NUM_THREADS": "1"}
        out = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout))
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"record each kernel family's run: {FILE.name}")
    args = parser.parse_args()
    if not args.write:
        print(json.dumps(fingerprint()))
        return 0
    runs = _under_each_family()
    spread = max(relative_difference(runs[0], other) for other in runs[1:])
    record = {"steps": STEPS, "recipe": "builtin", "tolerance": TOLERANCE, "spread": spread,
              "command": "python tools/training_fingerprint.py --write", "runs": runs}
    FILE.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"{FILE}: {len(runs)} runs; the kernel families differ by {spread:.2e} at most (tolerance "
          f"{TOLERANCE:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
