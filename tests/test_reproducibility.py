"""Training computes what it computed when the fingerprint was recorded.

A short run of the `builtin` recipe (tools/training_fingerprint.py: dropout, gradients, checkpoint
averaging, and the whole schedule: the warmup, the decay, and a cooldown fitted to a time limit by
`ClockFit` under a fake clock) must give the fingerprint recorded in tests/training_fingerprint.json:
its schedule (every step's learning rate, the clock's decision) bit for bit everywhere; its weights
bit for bit on a machine that matches a recorded run's processor, float32 kernel family and torch; on
any other, its losses and weights within the recorded tolerance of the run of the same kernel family.
A change to what training computes (initialization, data order, dropout, the loss, the schedule,
averaging) fails here when it is made: record the new fingerprint with `python
tools/training_fingerprint.py --write` only for a change meant to alter training, and say so in the
commit. The record's `sensitivity` (what small changes do to the fingerprint) is the tool's too: one
of them is measured again here.
"""

import json

import pytest
import torch
from training_fingerprint import (
    FILE,
    SETTINGS,
    TOLERANCE,
    VARIANTS,
    cpu_identity,
    fingerprint,
    relative_difference,
    sensitivity,
)

RECORD = json.loads(FILE.read_text(encoding="utf-8"))
SCHEDULE = ("steps", "fitted_last_step", "schedule_sha256")  # what no kernel touches
MEASURED_AGAIN = "decay step^-0.51 instead of step^-0.5"  # one of VARIANTS: a run's worth of time


@pytest.fixture(scope="module")
def run() -> dict:
    return fingerprint()


def _recorded(run: dict) -> dict:
    """The recorded run of `run`'s kernel family (the first, if none)."""
    same_family = [r for r in RECORD["runs"] if r["identity"]["kernels"] == run["identity"]["kernels"]]
    return same_family[0] if same_family else RECORD["runs"][0]


def test_the_record_is_of_the_tools_run_and_changes():
    assert {key: RECORD[key] for key in SETTINGS} == SETTINGS, "the tool's run changed: --write again"
    assert RECORD["tolerance"] == TOLERANCE
    for recorded in RECORD["runs"]:
        assert list(recorded["sensitivity"]) == list(VARIANTS), "the tool's changes changed: --write again"


def test_the_tolerance_stands_above_the_kernel_families_spread():
    assert RECORD["spread"] < RECORD["tolerance"] / 2, RECORD["spread"]
    assert {run["identity"]["kernels"] for run in RECORD["runs"]} >= {"DEFAULT", "AVX2"}


def test_the_schedule_is_the_same_under_every_kernel_family():
    first = RECORD["runs"][0]
    assert first["fitted_last_step"] == first["steps"] < RECORD["max_steps"]  # the clock decided
    assert first["steps"] > 2 * RECORD["warmup"]
    for recorded in RECORD["runs"][1:]:
        assert {key: recorded[key] for key in SCHEDULE} == {key: first[key] for key in SCHEDULE}


def test_every_small_change_is_seen():
    for recorded in RECORD["runs"]:
        for variant, change in recorded["sensitivity"].items():
            assert change["schedule_changed"] or change["difference"] > RECORD["tolerance"], (
                f"{variant} ({recorded['identity']['kernels']}) would pass the test unseen: {change}")


def test_a_short_run_reproduces_its_recorded_fingerprint(run):
    assert torch.get_num_threads() == 1  # as recorded (conftest.py)
    recorded = _recorded(run)
    assert {key: run[key] for key in SCHEDULE} == {key: recorded[key] for key in SCHEDULE}, (
        "the learning rates of the steps, or where the clock ended the schedule, changed")
    difference = relative_difference(recorded, run)
    assert difference <= RECORD["tolerance"], (
        f"a {RECORD['max_steps']}-step builtin run differs from its recorded fingerprint by {difference:.2e} "
        f"(tolerance {RECORD['tolerance']:g}): training computes something else than it did"
    )
    exact = [r for r in RECORD["runs"] if r["identity"] == cpu_identity()]
    if exact:
        assert run["weights_sha256"] == exact[0]["weights_sha256"], (
            "on the recorded processor, kernels and torch, the run's weights differ in their bits")


def test_a_recorded_sensitivity_is_what_the_tool_measures(run):
    recorded = _recorded(run)["sensitivity"][MEASURED_AGAIN]
    measured = sensitivity(run, MEASURED_AGAIN)
    assert measured["schedule_changed"] == recorded["schedule_changed"]
    if run["identity"] == _recorded(run)["identity"]:
        assert measured == recorded
    else:
        difference = abs(measured["difference"] - recorded["difference"])
        assert difference <= RECORD["tolerance"], (measured, recorded)
