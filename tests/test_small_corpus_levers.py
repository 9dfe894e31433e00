"""experiments/small_corpus_levers.py: the step arithmetic, the pairing of each lever with the control
of its seed (same machine, same threads), the verdicts by the appendix's rule, and the tiny mode
end to end (step costs, control and levers for two seeds, the summary)."""

import hashlib
import json
import math
import re
import statistics

import pytest
import small_corpus_levers as levers  # experiments/ is on pytest's pythonpath (pyproject.toml)

from annotated_transformer.helpers import verdicts

HARDWARE = {"device": "cpu", "cpu": "AMD EPYC", "cpu_cores": 2, "cpu_kernels": "AVX512", "torch_threads": 1,
            "torch": "2.13.0+cpu", "processes": 1}


def run(name: str, seed: int, val: float, **hardware) -> dict:
    """A run row as `read_runs` gives it."""
    info = {**HARDWARE, **hardware}
    return {"seed": seed, "steps": 9224, "minutes": 30.0, "val": val, "threads": info["torch_threads"],
            "hardware": info, "run": f"{name}-seed{seed}"}


# The step arithmetic: the steps a measured step cost buys in the recipe's 30 minutes.

def test_a_dearer_step_trains_the_steps_its_measured_cost_buys_in_30_minutes():
    assert levers.budget_steps(9224, 0.18, 2.06) == int(30 * 60 / (0.18 * 2.06)) == 4854
    assert levers.budget_steps(9224, 0.195, 2.06) == 4480  # a dearer control step: fewer steps
    # The old formula scaled the recipe's steps by a committed run's 23.0 minutes, whatever the
    # measured step: it gives the same steps for both control steps, and not these.
    stale = int(9224 * 30 / (23.0 * 2.06))
    assert stale == 5840 and stale not in (4854, 4480)
    assert levers.budget_steps(9224, 0.18, 1.05) == 9224  # within 5%: the control's steps
    assert levers.budget_steps(9224, 0.18, 1.06) == 9224  # dearer, but 30 minutes buy more than 9,224
    assert levers.budget_steps(9224, 0.18) == 9224  # the control: 30 minutes buy 10,000 > 9,224
    assert levers.budget_steps(9224, 0.25) == 7200  # the control's step buys fewer: 7,200
    assert levers.budget_steps(9224, 0.25, 1.03) == 7200  # and a lever as cheap trains those
    with pytest.raises(ValueError, match="above 0"):
        levers.budget_steps(9224, 0.0, 2.0)


def test_each_lever_is_planned_from_the_control_step_measured_here():
    """The committed measurement (0.1357 s, R-Drop 2.065 times): about 6,400 R-Drop steps, not the
    5,826 of a stale 23.0-minute figure; both alphas and both BPE-dropout p's share a cost."""
    args = levers.parse([])
    costs = {"control": {"seconds_per_step": 0.1357, "ratio": 1.0},
             "bpe-dropout": {"seconds_per_step": 0.1338, "ratio": 0.986},
             "rdrop": {"seconds_per_step": 0.2802, "ratio": 2.065}}
    plan = levers.planned_steps(["control", *levers.LEVERS], args, costs)
    assert plan == {"control": 9224, "bpe-dropout": 9224, "bpe-dropout-0.05": 9224, "rdrop": 6423,
                    "rdrop-alpha5": 6423}
    assert plan["rdrop"] != int(9224 * 30 / (23.0 * 2.065)) == 5826
    slower = {**costs, "control": {"seconds_per_step": 0.2, "ratio": 1.0}}
    assert levers.planned_steps(["control", "rdrop"], args, slower) == {"control": 9000, "rdrop": 4358}


# Pairing: the control's run of the same seed, trained on the same machine with the same threads.

def test_each_lever_run_is_paired_with_the_control_run_of_its_seed():
    control = [run("control", seed, val) for seed, val in ((2, 40.81), (0, 42.50), (1, 41.72))]
    lever = [run("bpe-dropout", seed, val) for seed, val in ((1, 40.27), (2, 40.20), (0, 40.16), (3, 39.0))]
    pairs = levers.pair_runs(lever, control)
    assert [(ours["seed"], theirs["seed"]) for ours, theirs in pairs] == [(0, 0), (1, 1), (2, 2)]
    assert [theirs["val"] for _, theirs in pairs] == [42.50, 41.72, 40.81]  # seed 3: no control, left out


@pytest.mark.parametrize("changed", [{"torch_threads": 2}, {"cpu_kernels": "AVX2"}, {"torch": "2.12.0+cpu"},
                                     {"cpu": "Intel Xeon"}])
def test_runs_of_other_hardware_or_threads_are_not_paired(changed):
    control = [run("control", 0, 42.5), run("control", 1, 41.7)]
    lever = [run("rdrop", 0, 41.3), run("rdrop", 1, 41.0, **changed)]
    with pytest.raises(levers.NotComparable) as error:
        levers.pair_runs(lever, control)
    message = str(error.value)
    assert "\n" not in message and "rdrop-seed1" in message and "control-seed1" in message
    key = next(iter(changed))
    assert f"{key} {changed[key]!r} vs {HARDWARE[key]!r}" in message
    assert len(levers.pair_runs(lever[:1], control)) == 1  # seed 0 alone pairs


# The verdict: `judge` over the seeds both have, paired; one seed against the control's noise.

def test_a_levers_verdict_is_the_paired_rule_on_the_seeds_both_have():
    control = [run("control", seed, val) for seed, val in ((1, 41.77), (2, 41.52), (0, 41.38))]
    lever = [run("bpe-dropout", seed, val) for seed, val in ((2, 40.20), (0, 40.16), (1, 40.27))]
    out = levers.lever_verdict(levers.pair_runs(lever, control), control)
    expected = verdicts.judge([40.16, 40.27, 40.20], [41.38, 41.77, 41.52], paired=True)
    assert out["seeds"] == [0, 1, 2] and out["differences"] == [-1.22, -1.5, -1.32]
    assert (out["verdict"], out["margin"], out["threshold"], out["dof"]) == ("worse", -1.35, 0.35, 2)
    assert (out["margin"], out["threshold"]) == (round(expected.margin, 2), round(expected.threshold, 2))
    assert out["rule"] == verdicts.PAIRED and out["n"] == [3, 3] and out["p"] == round(expected.p, 4)
    # one seed the other way: a tie, whatever the mean
    lever[1] = run("bpe-dropout", 0, 42.60)
    assert levers.lever_verdict(levers.pair_runs(lever, control), control)["verdict"] == "tie"


def test_one_seed_is_judged_with_the_noise_of_its_scale_or_the_controls_seeds():
    control = [run("control", 0, 42.50), run("control", 1, 41.72), run("control", 2, 40.81)]
    noise = statistics.stdev([42.50, 41.72, 40.81])
    one = levers.lever_verdict(levers.pair_runs([run("rdrop", 0, 41.35)], control), control)
    assert one["seeds"] == [0] and one["differences"] == [-1.15]
    assert (one["verdict"], one["rule"], one["dof"]) == ("tie", verdicts.SINGLE_RUNS, 2)
    assert one["threshold"] == round(4.302653 * math.sqrt(2) * noise, 2) == 5.15  # t(0.975, 2 dof)
    far = levers.lever_verdict(levers.pair_runs([run("rdrop", 0, 37.0)], control), control)
    assert far["verdict"] == "worse"
    # with the noise of the recipe's scale (many runs, 8 dof), the same -1.15 is beyond it
    pooled = verdicts.Noise(0.458, 8, "the recipe", 12)
    judged = levers.lever_verdict(levers.pair_runs([run("rdrop", 0, 41.35)], control), control, pooled)
    assert (judged["verdict"], judged["dof"]) == ("tie", 8) and judged["threshold"] == 1.49
    sharper = verdicts.Noise(0.2, 6, "the levers", 9)
    assert levers.lever_verdict(levers.pair_runs([run("rdrop", 0, 41.35)], control), control,
                                sharper)["verdict"] == "worse"
    alone = levers.lever_verdict(levers.pair_runs([run("rdrop", 0, 39.0)], control[:1]), control[:1])
    assert alone["verdict"].startswith("not judged: one seed") and "margin" not in alone
    none = levers.lever_verdict(levers.pair_runs([run("rdrop", 5, 39.0)], control), control)
    assert none["verdict"].startswith("not judged") and none["seeds"] == []


def test_one_seed_is_judged_with_the_recipes_noise_pooled_with_the_runs():
    """The script's noise for a lever of one seed is companions/seed_noise's CPU_RECIPE noise, with
    its own runs in the place of the committed levers: the committed file gives the book's noise."""
    from annotated_transformer.companions.seed_noise import CPU_RECIPE, seed_noise

    committed = json.loads(levers.OUT.read_text(encoding="utf-8"))
    runs = {name: lever["runs"] for name, lever in committed["levers"].items()}
    noise = levers.single_seed_noise(levers.parse([]), committed["control"]["runs"], runs)
    assert noise == seed_noise(CPU_RECIPE)
    tiny = levers.single_seed_noise(levers.parse(["--tiny"]), committed["control"]["runs"], runs)
    assert tiny.scale == "the tiny mode's runs" and tiny.dof == 6  # control, BPE-dropout, R-Drop: 2 each


def test_matched_compute_gives_a_dearer_lever_the_controls_minutes():
    """--matched: the control trains the recipe's steps, R-Drop (1.84 times dearer) int(9,224 / 1.84)."""
    costs = {"control": {"seconds_per_step": 0.3158, "ratio": 1.0},
             "bpe-dropout": {"seconds_per_step": 0.31, "ratio": 0.98},
             "rdrop": {"seconds_per_step": 0.5812, "ratio": 1.84}}
    args = levers.parse(["--matched"])
    assert args.cost_threads == args.threads == 1 and args.out == levers.MATCHED_OUT
    assert args.runs_dir.name == "levers-matched"
    plan = levers.planned_steps(["control", "rdrop", "bpe-dropout"], args, costs)
    assert plan == {"control": 9224, "rdrop": int(9224 / 1.84), "bpe-dropout": 9224} and plan["rdrop"] == 5013
    assert levers.planned_steps(["rdrop"], levers.parse([]), costs) == {"rdrop": int(30 * 60 / 0.5812)}


def test_rdrops_alpha_is_chosen_on_the_seeds_every_alpha_trained():
    summary = {"rdrop": {"settings": {"rdrop_alpha": 2.5}, "verdict": "tie",
                         "runs": [run("rdrop", 0, 41.0), run("rdrop", 1, 41.2), run("rdrop", 2, 30.0)]},
               "rdrop-alpha5": {"settings": {"rdrop_alpha": 5.0}, "verdict": "worse",
                                "runs": [run("rdrop-alpha5", 0, 41.5), run("rdrop-alpha5", 1, 40.9)]}}
    choice = levers.choose_rdrop(summary)
    assert choice["seeds"] == [0, 1] and choice["chosen"] == "rdrop-alpha5"  # 41.2 over 41.1
    assert choice["verdict"] == "worse" and choice["mean_val"] == {"rdrop": 41.1, "rdrop-alpha5": 41.2}


def test_the_test_set_is_scored_only_for_a_lever_found_better_on_validation(monkeypatch):
    scored = []
    monkeypatch.setattr(levers, "score",
                        lambda run_dir, args, split: scored.append((run_dir.name, split)) or 40.0)
    args = levers.parse([])
    control = {"runs": [run("control", 0, 41.0), run("control", 1, 41.5)]}
    summary = {"rdrop": {"verdict": "better", "runs": [run("rdrop", 0, 42.0), run("rdrop", 1, 42.4)]},
               "bpe-dropout": {"verdict": "tie", "runs": [run("bpe-dropout", 0, 41.1)]}}
    assert levers.score_test(summary, control, args) == ["rdrop"]
    assert scored == [("control-seed0", "test"), ("control-seed1", "test"), ("rdrop-seed0", "test"),
                      ("rdrop-seed1", "test")]
    assert control["test_mean"] == summary["rdrop"]["test_mean"] == 40.0
    assert "test" not in summary["bpe-dropout"]["runs"][0] and "test_mean" not in summary["bpe-dropout"]
    scored.clear()
    summary["rdrop"]["verdict"] = "tie"  # no lever better: the test set stays unscored
    assert levers.score_test(summary, {"runs": [run("control", 0, 41.0)]}, args) == [] and scored == []


def test_at_matched_compute_the_test_set_is_scored_for_every_lever_and_the_control(monkeypatch):
    """--matched asks a question fixed before its runs: the test set is scored whatever validation says."""
    scored = []
    monkeypatch.setattr(levers, "score",
                        lambda run_dir, args, split: scored.append((run_dir.name, split)) or 40.0)
    control = {"runs": [run("control", 0, 41.0), run("control", 1, 41.5)]}
    summary = {"rdrop": {"verdict": "tie", "runs": [run("rdrop", 0, 41.2), run("rdrop", 1, 41.4)]}}
    assert levers.score_test(summary, control, levers.parse(["--matched"])) == ["rdrop"]
    assert scored == [("control-seed0", "test"), ("control-seed1", "test"), ("rdrop-seed0", "test"),
                      ("rdrop-seed1", "test")]
    scored.clear()
    assert levers.score_test(summary, control, levers.parse([])) == [] and scored == []  # unmatched: not


# The tiny mode, end to end.

COMMIT = "0123456789abcdef0123456789abcdef01234567"  # the checkout's commit, as git would give it


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    committed = hashlib.sha256(levers.OUT.read_bytes()).hexdigest()
    runs_dir = tmp_path_factory.mktemp("levers") / "runs"
    with pytest.MonkeyPatch.context() as patch:  # a commit made while the tests run changes nothing
        patch.setattr(levers, "commit_of_checkout", lambda: COMMIT)
        result = levers.main(["--tiny", "--runs-dir", str(runs_dir), "--seeds", "0", "1",
                              "--cost-threads", "1"])
    assert hashlib.sha256(levers.OUT.read_bytes()).hexdigest() == committed  # never the committed file
    return runs_dir, result


def test_the_tiny_mode_trains_the_control_and_the_levers_and_judges_them(tiny):
    runs_dir, result = tiny
    assert json.loads((runs_dir / "levers.json").read_text(encoding="utf-8")) == result
    costs = result["step_costs"]
    kept = json.loads((runs_dir / "step_costs.json").read_text(encoding="utf-8"))  # the plan, for a rerun
    assert kept == {"step_costs": costs, "step_cost_measurement": result["step_cost_measurement"]}
    assert set(costs) == {"control", "bpe-dropout", "rdrop"} and costs["control"]["ratio"] == 1.0
    assert result["step_cost_measurement"]["threads"] == 1
    control = result["control"]
    assert [row["seed"] for row in control["runs"]] == [0, 1]
    assert control["steps"] == result["planned_steps"]["control"]
    assert set(result["levers"]) == set(levers.DEFAULT_LEVERS)
    everything = control["runs"] + [row for lever in result["levers"].values() for row in lever["runs"]]
    assert all(row["hardware"] == result["hardware"] and row["threads"] == 1 for row in everything)
    assert result["hardware"]["cpu_kernels"] and result["hardware"]["torch"] and result["threads"] == 1
    for row in everything:
        assert {"seed", "steps", "minutes", "seconds_per_step", "val", "threads", "hardware"} <= set(row)
        # what each run was made from: this checkout's commit, and the command with its own seed
        assert row["commit"] == COMMIT and f"--seed {row['seed']}" in row["command"]
    assert set(result["minutes_by_arm"]) == {"control", *levers.DEFAULT_LEVERS}
    for name, lever in result["levers"].items():
        ratio, control_step = costs[levers.cost_name(name)]["ratio"], costs["control"]["seconds_per_step"]
        planned = levers.budget_steps(levers.TINY_SETTINGS["max_steps"], control_step, ratio,
                                      result["budget_minutes"])
        assert lever["steps"] == lever["planned_steps"] == planned, name
        rows = {row["seed"]: row for row in control["runs"]}
        assert lever["seeds"] == [0, 1]
        ours = [row["val"] for row in lever["runs"]]
        theirs = [rows[row["seed"]]["val"] for row in lever["runs"]]
        verdict = verdicts.judge(ours, theirs, paired=True)
        assert (lever["verdict"], lever["margin"], lever["threshold"]) == (
            verdict.word, round(verdict.margin, 2), round(verdict.threshold, 2)), name
        assert lever["differences"] == [round(a - b, 2) for a, b in zip(ours, theirs, strict=True)]
        assert all(row["control_val"] == rows[row["seed"]]["val"] for row in lever["runs"])
    assert result["rdrop_alpha"]["chosen"] in levers.RDROP_CANDIDATES


def test_the_tiny_summary_refuses_runs_of_other_threads(tiny):
    runs_dir, _ = tiny
    hardware = runs_dir / "rdrop-seed1" / "hardware.json"
    saved = hardware.read_text(encoding="utf-8")
    hardware.write_text(json.dumps({**json.loads(saved), "torch_threads": 2}), encoding="utf-8")
    try:
        refused = r"will not pair rdrop-seed1 with control-seed1: .*torch_threads 2 vs 1"
        with pytest.raises(SystemExit, match=refused):
            levers.main(["--tiny", "--runs-dir", str(runs_dir), "--seeds", "0", "1", "--score-only"])
    finally:
        hardware.write_text(saved, encoding="utf-8")


def test_a_run_not_started_by_the_script_shows_no_commit(tmp_path):
    """A run reused from elsewhere has no made_by record: the summary says so (commit None); one
    resumed from another commit lists it."""
    run_dir = tmp_path / "control-seed0"
    assert levers.made_by(run_dir) == {"commit": None, "command": None}
    levers.record_made_by(run_dir, ["python", "-m", "annotated_transformer", "train", "--seed", "0"])
    first = levers.made_by(run_dir)
    # git's commit of this checkout (with "+changes" when its files differ), 40 hex digits
    assert re.fullmatch(r"[0-9a-f]{40}(\+changes)?", first["commit"])
    assert first["command"].endswith("--seed 0")
    record = levers.made_by_path(run_dir)
    starts = json.loads(record.read_text(encoding="utf-8"))["starts"]
    record.write_text(json.dumps({"starts": [*starts, {**starts[0], "commit": "0" * 40}]}), encoding="utf-8")
    assert levers.made_by(run_dir)["also_commits"] == ["0" * 40]


def test_the_tiny_mode_never_writes_the_committed_result():
    with pytest.raises(SystemExit):
        levers.parse(["--tiny", "--out", str(levers.OUT)])


def test_matched_compute_plans_from_the_seconds_per_step_of_the_runs_themselves():
    """The first levers' runs, side by side at one thread: R-Drop 0.58 s a step, the control 0.32."""
    summary = {"control": {"runs": [{"seconds_per_step": 0.31}, {"seconds_per_step": 0.33}]},
               "levers": {"rdrop": {"runs": [{"seconds_per_step": 0.57}, {"seconds_per_step": 0.59}]},
                          "rdrop-alpha5": {"runs": [{"seconds_per_step": 0.9}]}},  # R-Drop's cost is rdrop's
               "threads": 1, "parallel": 2, "hardware": {"cpu": "AMD EPYC", "cpu_kernels": "AVX512"}}
    costs = levers.step_costs_of_runs(summary)
    assert costs == {"control": {"seconds_per_step": 0.32, "ratio": 1.0},
                     "rdrop": {"seconds_per_step": 0.58, "ratio": 1.812}}
    args = levers.parse(["--matched"])
    assert levers.planned_steps(["control", "rdrop"], args, costs) == {"control": 9224, "rdrop": 5090}
    here = levers.machine(summary["hardware"])
    assert levers.runs_trained_here(summary, args, here)
    xeon = {"cpu": "Intel Xeon", "cpu_kernels": "AVX512"}
    for changed in ({"threads": 2}, {"parallel": 1}, {"hardware": xeon}):
        assert not levers.runs_trained_here({**summary, **changed}, args, here), changed
