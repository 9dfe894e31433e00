"""The rule for "better" (annotated_transformer/helpers/verdicts.py) at the values where a wrong rule
would answer differently.

Each test is sized so that a plausible wrong implementation gives another word: ≥ for "beyond", a
threshold without √2, the standard deviation for the standard error, the sign test left out, the
population standard deviation for the sample's, a metric where lower is better read as higher, the
single-run threshold for means of several seeds. Each of those bugs was planted once in the module
and failed the test named in its comment.
"""

import doctest
import math

import pytest

from annotated_transformer.helpers import verdicts
from annotated_transformer.helpers.verdicts import (
    PAIRED,
    SEED_MEANS,
    SINGLE_RUNS,
    Verdict,
    judge,
    judge_against_control,
)

THRESHOLD = 2 * math.sqrt(2)  # 2·√2·s for s = 1, the float the rule computes


def test_a_margin_exactly_at_the_threshold_is_a_tie():
    """"Beyond" is strict (a bug: >= for >)."""
    at = judge([THRESHOLD], [0.0], noise=1.0)
    assert (at.word, at.margin, at.threshold) == ("tie", THRESHOLD, THRESHOLD)
    assert (at.rule, at.n) == (SINGLE_RUNS, (1, 1))
    assert judge([0.0], [THRESHOLD], noise=1.0).word == "tie"


def test_a_margin_just_beyond_the_threshold_decides():
    above = math.nextafter(THRESHOLD, math.inf)
    assert judge([above], [0.0], noise=1.0).word == "better"
    assert judge([0.0], [above], noise=1.0).word == "worse"


def test_single_runs_differ_by_sqrt_two_noises():
    """R-Drop at α = 5 against the recipe, seed 0: -2.35 is within 2·√2·0.85 = 2.40 but beyond
    2·0.85 = 1.70 (a bug: the √2 left out) and beyond √2·0.85 = 1.20 (a bug: the 2 left out)."""
    verdict = judge([40.15], [42.50], noise=0.85)
    assert verdict.word == "tie"
    assert verdict.threshold == pytest.approx(2.404, abs=1e-3)
    assert verdict.margin == pytest.approx(-2.35)


def test_paired_scores_are_judged_by_the_standard_error():
    """BPE-dropout against the recipe on seeds 0, 1, 2: differences -2.34, -1.45, -0.61, a mean of
    -1.47 beyond 2·SE = 1.00 but within 2·SD = 1.73 (a bug: SD for SE)."""
    verdict = judge([40.16, 40.27, 40.20], [42.50, 41.72, 40.81], paired=True)
    assert (verdict.word, verdict.rule, verdict.n) == ("worse", PAIRED, (3, 3))
    assert verdict.margin == pytest.approx(-1.4667, abs=1e-4)
    assert verdict.threshold == pytest.approx(0.999, abs=1e-3)


def test_a_paired_mean_beyond_two_se_with_one_seed_of_the_other_sign_is_a_tie():
    """Differences 3, 3, 3, -0.5: a mean of 2.125 beyond 2·SE = 1.75, but one seed went the other
    way (a bug: the sign test left out)."""
    verdict = judge([3.0, 3.0, 3.0, -0.5], [0.0, 0.0, 0.0, 0.0], paired=True)
    assert verdict.margin > verdict.threshold == pytest.approx(1.75)
    assert verdict.word == "tie"
    assert judge([0.0] * 4, [3.0, 3.0, 3.0, -0.5], paired=True).word == "tie"  # and for "worse"
    # A seed with no difference has no sign either.
    assert judge([1.0, 2.0, 3.0, 0.0], [0.0] * 4, paired=True).word == "tie"


def test_a_paired_mean_beyond_two_se_on_every_seed_decides():
    """Differences 1, 2, 3: a mean of 2 beyond 2·SE = 1.15, and exactly 2·SD (a bug: SD for SE)."""
    assert judge([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], paired=True).word == "better"
    assert judge([0.0, 0.0, 0.0], [1.0, 2.0, 3.0], paired=True).word == "worse"


def test_pairing_is_seed_by_seed():
    """The same scores unpaired are a tie: the seeds' spread hides what pairing removes (a bug:
    paired=True ignored)."""
    ours, theirs = [41.0, 43.0, 45.0], [40.5, 42.4, 44.6]
    assert judge(ours, theirs, paired=True).word == "better"
    assert judge(ours, theirs).word == "tie"


def test_lower_is_better_for_perplexity():
    """A perplexity of 40 against 45 is better (a bug: higher_is_better ignored, or the sign of the
    margin left as ours minus theirs)."""
    verdict = judge([40.0], [45.0], noise=1.0, higher_is_better=False)
    assert (verdict.word, verdict.margin) == ("better", 5.0)
    assert judge([45.0], [40.0], noise=1.0, higher_is_better=False).word == "worse"
    paired = judge([40.0, 41.0, 43.0], [45.0, 47.0, 48.0], paired=True, higher_is_better=False)
    assert (paired.word, paired.margin) == ("better", pytest.approx(16 / 3))


def test_the_noise_of_seeds_is_their_pooled_sample_standard_deviation():
    """theirs = 0 and 2 (sample sd √2, population sd 1), ours one run of 4: a margin of 3 within
    2·√2·√(1 + 1/2) = 3.46, beyond 2·1·√1.5 = 2.45 (a bug: the population sd)."""
    verdict = judge([4.0], [0.0, 2.0])
    assert (verdict.word, verdict.rule, verdict.n) == ("tie", SEED_MEANS, (1, 2))
    assert verdict.threshold == pytest.approx(2 * math.sqrt(3))
    # Pooled over both groups, each with its own mean: variances 2 and 8 on 1 degree of freedom each.
    assert judge([10.0, 14.0], [0.0, 2.0]).threshold == pytest.approx(2 * math.sqrt(5) * 1)


def test_means_of_seeds_need_less_than_single_runs():
    """Three seeds each with s = 1: the means differ by noise of √(2/3), so a margin of 2 is beyond
    2·√(2/3) = 1.63 but within the single runs' 2.83 (a bug: 2·√2·s whatever the number of runs)."""
    verdict = judge([2.0, 2.0, 2.0], [0.0, 0.0, 0.0], noise=1.0)
    assert (verdict.word, verdict.threshold) == ("better", pytest.approx(2 * math.sqrt(2 / 3)))


def test_a_treatment_is_paired_with_the_controls_runs_of_its_seeds():
    """Seeds only one side ran are left out, and the pairs follow the seeds, not the order given: the
    treatment leads on seeds 0 and 2 by 1.0 and 1.2 (better); paired in the order given it would
    lead by 2.0 and 0.2 (a tie)."""
    control = {2: 40.0, 0: 41.0, 1: 39.0}
    verdict = judge_against_control({0: 42.0, 2: 41.2, 7: 30.0}, control)
    assert (verdict.word, verdict.rule, verdict.n) == ("better", PAIRED, (2, 2))
    assert verdict.margin == pytest.approx(1.1)


def test_one_seed_is_judged_against_the_controls_seed_noise():
    """One shared seed: single runs, s the control's sample standard deviation over all its seeds
    (1.0 here), so 2·√2 = 2.83 decides; the other seeds' scores do not enter the margin."""
    control = {0: 41.0, 1: 40.0, 2: 42.0}
    tie = judge_against_control({0: 43.8}, control)
    assert (tie.word, tie.rule, tie.n) == ("tie", SINGLE_RUNS, (1, 1))
    assert tie.threshold == pytest.approx(2 * math.sqrt(2))
    assert judge_against_control({0: 43.9}, control).word == "better"


@pytest.mark.parametrize("ours, control, message", [
    ({5: 40.0}, {0: 41.0, 1: 40.0}, "no seed both ran"),
    ({0: 40.0}, {0: 41.0}, "the control ran one seed"),
    ({0: 40.0}, {0: 41.0, 1: 41.0}, "the control's seeds do not vary"),
])
def test_a_treatment_the_control_cannot_judge_is_refused(ours, control, message):
    with pytest.raises(ValueError, match=message):
        judge_against_control(ours, control)


def test_single_runs_without_noise_are_refused():
    with pytest.raises(ValueError, match="single runs need noise="):
        judge([41.0], [40.0])


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda: judge([], [1.0], noise=1.0), ValueError, "ours must hold at least one score"),
    (lambda: judge([1.0], [], noise=1.0), ValueError, "theirs must hold at least one score"),
    (lambda: judge([1.0, math.nan], [1.0], noise=1.0), ValueError, "score 2 of 2 is nan"),
    (lambda: judge([1.0], [math.inf], noise=1.0), ValueError, "theirs must be finite numbers"),
    (lambda: judge([1.0], ["40.1"], noise=1.0), ValueError, "score 1 of 1 is '40.1'"),
    (lambda: judge("41", [1.0], noise=1.0), TypeError, "ours must be a sequence of scores"),
    (lambda: judge([1.0], [2.0], noise=0.0), ValueError, "noise must be a finite standard deviation"),
    (lambda: judge([1.0], [2.0], noise=-0.85), ValueError, "above 0, got -0.85"),
    (lambda: judge([1.0], [2.0], noise=math.inf), ValueError, "noise must be a finite"),
    (lambda: judge([1.0, 2.0], [1.0, 2.0, 3.0], paired=True), ValueError, "one each per seed, got 2 and 3"),
    (lambda: judge([1.0], [2.0], paired=True), ValueError, "at least 2 seeds"),
    (lambda: judge([1.0, 2.0], [1.0, 3.0], paired=True, noise=1.0), ValueError, "noise= is for unpaired"),
    (lambda: judge([1.0, 1.0], [2.0, 2.0]), ValueError, "do not vary"),
    (lambda: judge([1.0], [2.0], noise=1.0, paired=1), TypeError, "paired must be True or False"),
])
def test_inputs_are_refused_in_one_line(call, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(")) as raised:
        call()
    assert "\n" not in str(raised.value)


def test_the_verdict_is_a_frozen_record():
    verdict = judge([1.0], [0.0], noise=1.0)
    assert isinstance(verdict, Verdict)
    with pytest.raises(AttributeError):
        verdict.word = "better"


def test_the_docstring_examples_run():
    assert doctest.testmod(verdicts, raise_on_error=False).failed == 0


def test_the_module_is_a_leaf():
    """helpers/ imports nothing of the package: the rule is plain arithmetic on scores."""
    source = verdicts.__file__
    with open(source, encoding="utf-8") as file:
        text = file.read()
    assert "annotated_transformer" not in text.split('"""', 2)[2]
