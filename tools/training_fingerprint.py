"""The fingerprint of a short training run, so that a change to what training computes is seen when
it is made (tests/test_reproducibility.py).

    python tools/training_fingerprint.py                # print this machine's fingerprint
    python tools/training_fingerprint.py --sensitivity  # and what each small change does to it
    python tools/training_fingerprint.py --write        # record both in tests/training_fingerprint.json,
                                                        # once under each float32 kernel family

The run: the `builtin` recipe (what `make main` trains: its model, data, batches and dropout) on the
built-in corpus, on one thread, with gradients, the whole schedule and checkpoint averaging as users
run them. Its schedule is shortened so that one short run crosses all of it: WARMUP steps of warmup,
the decay, and a cooldown (COOLDOWN of the steps) fitted to a time limit by chapter 10's `ClockFit`.
The clock is a fake one, SECONDS_PER_STEP a step, so that the decision is the same on every machine:
MAX_MINUTES allows fewer steps than MAX_STEPS, and once (1 - COOLDOWN) of that time has passed,
ClockFit ends the schedule, its cooldown included, at the last step the time allows.

Its fingerprint holds (a) the SHA-256 of the averaged model's weights, which is the same bit for bit
on the same CPU, float32 kernel family (ATEN_CPU_CAPABILITY) and torch; (b) numbers that other CPUs
and kernel families reproduce up to float rounding: the training loss of every step and the sum of
squares of all the averaged model's weights; and (c) the schedule, which no kernel touches: the
SHA-256 of every step's learning rate, and the step at which the clock ended it, the same bit for bit
everywhere. A change to initialization, data order, dropout, the loss or averaging moves (b) far
beyond rounding; TOLERANCE is the relative difference allowed, set well above what the kernel
families differ by on one machine (recorded as `spread`). A change to the schedule moves (c) too.
(Not each tensor on its own: the keys' biases get no gradient, since softmax ignores a constant
added to all of a query's scores, so their steps are Adam scaling up rounding noise, and differ
wholly between kernel families.)

`--sensitivity` trains the run again once per small change of VARIANTS (one step more of warmup, the
decay's exponent, the cooldown's share, the clock's decision one step later, the accumulation, ...)
and gives what each does to the fingerprint: the relative difference of its losses and weights from
the run's (`relative_difference`, to 3 significant digits), and whether it changes the schedule. The
test sees a change when either does: a difference above TOLERANCE, or a schedule of another SHA-256.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from unittest import mock

FILE = Path(__file__).resolve().parent.parent / "tests" / "training_fingerprint.json"
RECIPE = "builtin"
# The schedule of the run: warmup for steps 1-12, the decay, then after step 31 (0.75 × 40.8 s gone)
# ClockFit ends the schedule at step 41, the last the time allows, with a cooldown over its last
# round(0.25 × 41) = 10 steps (32-41); the time limit stops the run there.
MAX_STEPS = 60  # as planned in steps: the time limit ends the run first
WARMUP = 12
LR_FACTOR = 0.05  # a peak rate of 1.3e-3 (the recipe's 0.5 at warmup 150: 3.6e-3): at the recipe's
# peak, the kernel families would differ by 5e-4 at the end of the run, above TOLERANCE
COOLDOWN = 0.25
SECONDS_PER_STEP = 1.0  # the fake clock
MAX_MINUTES = 0.68  # 40.8 s: 41 steps of the fake clock
CHECKPOINT_EVERY = 10  # averaged: the recipe's last 5, here all: 10, 20, 30, 40 and the last, 41
SETTINGS = {"recipe": RECIPE, "max_steps": MAX_STEPS, "warmup": WARMUP, "lr_factor": LR_FACTOR,
            "cooldown": COOLDOWN, "max_minutes": MAX_MINUTES, "seconds_per_step": SECONDS_PER_STEP,
            "checkpoint_every": CHECKPOINT_EVERY}
TOLERANCE = 3e-4  # between the families' `spread` and the `sensitivity` in training_fingerprint.json
FAMILIES = ("default", "avx2", "avx512")
DECAY_EXPONENT = -0.51  # the variant of the decay's exponent (§5.3: -0.5)


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


# The small changes to the training path that `--sensitivity` measures: each, the recipe's changed
# settings and the code it changes while it trains.
def _decay_exponent() -> contextlib.AbstractContextManager:
    """§5.3's decay as step^DECAY_EXPONENT past the warmup (the same peak rate)."""
    import annotated_transformer.optimizer as optimizer

    paper = optimizer.rate

    def rate(step: int, d_model: int = 512, warmup: int = 4000, factor: float = 1.0,
             ramp: bool = True) -> float:
        value = paper(step, d_model, warmup, factor, ramp)
        return value * (step / warmup) ** (DECAY_EXPONENT + 0.5) if step > warmup else value

    return mock.patch.object(optimizer, "rate", rate)


def _clock_decision_later() -> contextlib.AbstractContextManager:
    """ClockFit ends the schedule one step after the last the time allows: the time limit stops the
    run where it did, before the cooldown's last step."""
    from annotated_transformer.runs.long_run import ClockFit

    decide = ClockFit.last_step

    def last_step(self, minutes: float) -> int | None:
        step = decide(self, minutes)
        return None if step is None else step + 1

    return mock.patch.object(ClockFit, "last_step", last_step)


_SAME_CODE = contextlib.nullcontext
VARIANTS: dict[str, tuple[dict, Callable[[], contextlib.AbstractContextManager]]] = {
    f"warmup {WARMUP + 1} instead of {WARMUP}": ({"warmup": WARMUP + 1}, _SAME_CODE),
    f"decay step^{DECAY_EXPONENT} instead of step^-0.5": ({}, _decay_exponent),
    f"cooldown {COOLDOWN + 0.01:g} instead of {COOLDOWN:g}": ({"cooldown": COOLDOWN + 0.01}, _SAME_CODE),
    "clock's schedule end one step later": ({}, _clock_decision_later),
    "accumulate 2 micro-batches of half the tokens": ({"accumulate": 2, "max_tokens": 750}, _SAME_CODE),
    "lr_factor x1.01": ({"lr_factor": LR_FACTOR * 1.01}, _SAME_CODE),
    "label_smoothing 0.11": ({"label_smoothing": 0.11}, _SAME_CODE),
    "average_last 2 instead of 5": ({"average_last": 2}, _SAME_CODE),
}


def _train_translation_module() -> ModuleType:
    """The module that makes `train_translation`'s LongRun (its bookkeeping, `RunBookkeeping`): the
    LongRun is looked up there."""
    from annotated_transformer.runs.bookkeeping import RunBookkeeping

    return sys.modules[RunBookkeeping.__module__]


@contextlib.contextmanager
def _fake_clock() -> Iterator[None]:
    """`train_translation`'s LongRun timed by a clock that reads SECONDS_PER_STEP a step trained
    (LongRun's `clock`)."""
    module = _train_translation_module()

    class FakeClockRun(module.LongRun):
        def __init__(self, *args, **options) -> None:
            super().__init__(*args, **options, clock=lambda: self.trainer.step * SECONDS_PER_STEP)

    with mock.patch.object(module, "LongRun", FakeClockRun):
        yield


def fingerprint(variant: str | None = None) -> dict:
    """Train the short run (with one of VARIANTS' changes) in a temporary directory; its fingerprint."""
    import torch

    from annotated_transformer import get_recipe, train_translation

    torch.set_num_threads(1)
    changes, patch = VARIANTS[variant] if variant is not None else ({}, contextlib.nullcontext)
    settings = {"max_steps": MAX_STEPS, "warmup": WARMUP, "lr_factor": LR_FACTOR, "cooldown": COOLDOWN,
                "max_minutes": MAX_MINUTES, "checkpoint_every": CHECKPOINT_EVERY}
    recipe = get_recipe(RECIPE).replace(**{**settings, **changes})
    with tempfile.TemporaryDirectory() as folder, _fake_clock(), patch():
        run = train_translation(recipe, Path(folder) / "run", device="cpu", progress=False)
    digest = hashlib.sha256()
    for name, tensor in sorted(run.model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().contiguous().view(torch.uint8).numpy().tobytes())
    rates = b"".join(struct.pack("<d", record["lr"]) for record in run.history)
    return {
        "identity": cpu_identity(),
        "weights_sha256": digest.hexdigest(),
        "steps": run.steps,
        "fitted_last_step": run.fitted_last_step,
        "schedule_sha256": hashlib.sha256(rates).hexdigest(),
        "losses": [round(record["loss"], 9) for record in run.history],
        "sum_of_squares": sum(tensor.double().square().sum().item()
                              for tensor in run.model.state_dict().values()),
    }


def relative_difference(a: dict, b: dict) -> float:
    """The largest relative difference between two fingerprints' losses and sums of squares."""
    pairs = [*zip(a["losses"], b["losses"], strict=True), (a["sum_of_squares"], b["sum_of_squares"])]
    return max(abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in pairs)


def sensitivity(run: dict, variant: str) -> dict:
    """What `variant` does to the fingerprint `run` (trained on this machine): the relative difference
    of its losses and weights (to 3 significant digits), and whether it changes the schedule."""
    changed = fingerprint(variant)
    return {"difference": float(f"{relative_difference(run, changed):.3g}"),
            "schedule_changed": changed["schedule_sha256"] != run["schedule_sha256"]}


def _under_family(family: str) -> dict:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": family, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, __file__, "--sensitivity"], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the run under ATEN_CPU_CAPABILITY={family} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sensitivity", action="store_true", help="add each of VARIANTS' difference")
    parser.add_argument("--write", action="store_true", help=f"record each kernel family's run: {FILE.name}")
    args = parser.parse_args()
    if not args.write:
        run = fingerprint()
        if args.sensitivity:
            run["sensitivity"] = {variant: sensitivity(run, variant) for variant in VARIANTS}
        print(json.dumps(run))
        return 0
    # The clock is a fake one: the families can train side by side, one thread each.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        runs = list(pool.map(_under_family, FAMILIES))
    spread = max(relative_difference(runs[0], other) for other in runs[1:])
    record = {**SETTINGS, "tolerance": TOLERANCE, "spread": spread,
              "command": "python tools/training_fingerprint.py --write", "runs": runs}
    FILE.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    lowest = min(min(change["difference"] for change in run["sensitivity"].values()) for run in runs)
    print(f"{FILE}: {len(runs)} runs of {runs[0]['steps']} steps; the kernel families differ by {spread:.2e} "
          f"at most (tolerance {TOLERANCE:g}), the smallest change by {lowest:.2e} at least")
    return 0


if __name__ == "__main__":
    sys.exit(main())
