"""Training computes what it computed when the fingerprint was recorded.

A short run of the `builtin` recipe (tools/training_fingerprint.py: dropout, gradients, the schedule
and checkpoint averaging as users run them) must give the fingerprint recorded in
tests/training_fingerprint.json: bit for bit on a machine that matches a recorded run's processor,
float32 kernel family and torch; on any other, its losses and weights within the recorded tolerance of
the run of the same kernel family. A change to what training computes (initialization, data order,
dropout, the loss, the schedule, averaging) fails here when it is made: record the new fingerprint
with `python tools/training_fingerprint.py --write` only for a change meant to alter training, and say
so in the commit.
"""

import json

import pytest
import torch
from training_fingerprint import FILE, cpu_identity, fingerprint, relative_difference

RECORD = json.loads(FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def run() -> dict:
    return fingerprint()


def test_the_tolerance_stands_above_the_kernel_families_spread():
    assert RECORD["spread"] < RECORD["tolerance"] / 2, RECORD["spread"]
    assert {run["identity"]["kernels"] for run in RECORD["runs"]} >= {"DEFAULT", "AVX2"}


def test_a_short_run_reproduces_its_recorded_fingerprint(run):
    assert torch.get_num_threads() == 1  # as recorded (conftest.py)
    same_family = [r for r in RECORD["runs"] if r["identity"]["kernels"] == run["identity"]["kernels"]]
    recorded = same_family[0] if same_family else RECORD["runs"][0]
    difference = relative_difference(recorded, run)
    assert difference <= RECORD["tolerance"], (
        f"a {RECORD['steps']}-step builtin run differs from its recorded fingerprint by {difference:.2e} "
        f"(tolerance {RECORD['tolerance']:g}): training computes something else than it did"
    )
    exact = [r for r in RECORD["runs"] if r["identity"] == cpu_identity()]
    if exact:
        assert run["weights_sha256"] == exact[0]["weights_sha256"], (
            "on the recorded processor, kernels and torch, the run's weights differ in their bits")
