"""The rule for "better" (annotated_transformer/helpers/verdicts.py) at the values where a wrong rule
would answer differently.

The heart of it is a simulation: under no difference, with normal seed noise, the rule says
"better" or "worse" at the rate it states (LEVEL), for 2 to 6 seeds, paired and unpaired, and its
power under a true difference is reported. A rule with a hand-written constant (2 standard errors),
degrees of freedom off by one, or the population standard deviation for the sample's leaves that
rate; each was planted once and failed `test_the_false_positive_rate_is_the_stated_level`.
"""

import doctest
import math
import random
import statistics

import pytest
from scipy import stats

from annotated_transformer.helpers import verdicts
from annotated_transformer.helpers.verdicts import (
    DECODINGS,
    LEVEL,
    PAIRED,
    SEED_MEANS,
    SINGLE_RUNS,
    Noise,
    Verdict,
    holm,
    judge,
    judge_against_control,
    judge_decodings,
    noise_of,
)

SCALE = "a scale"
UNIT = Noise(1.0, 4, SCALE, 5)  # s = 1 on 4 degrees of freedom
TRIALS = 20_000  # simulated experiments per case: the rate's standard error is √(0.05·0.95/20000) ≈ 0.0015


def simulated_rate(n: int, paired: bool, shift: float, rng: random.Random) -> float:
    """How often `judge` says better or worse when ours is theirs + shift, seed noise 1."""
    hits = 0
    for _ in range(TRIALS):
        theirs = [rng.gauss(0, 1) for _ in range(n)]
        if paired:  # the same seeds' runs share most of their noise; the difference carries some
            ours = [t + shift + rng.gauss(0, 1) for t in theirs]
        else:
            ours = [rng.gauss(shift, 1) for _ in range(n)]
        hits += judge(ours, theirs, paired=paired).word != "tie"
    return hits / TRIALS


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "unpaired"])
@pytest.mark.parametrize("n", [2, 3, 4, 6])
def test_the_false_positive_rate_is_the_stated_level(n, paired):
    """Under no difference the rule's rate of "better" or "worse" is LEVEL, to simulation error
    (4 standard errors either side: a rule at 2 standard errors on 2 degrees of freedom says so 18%
    of the time, one with n degrees of freedom for n - 1 about 10% at n = 2)."""
    rate = simulated_rate(n, paired, 0.0, random.Random(n * 2 + paired))
    tolerance = 4 * math.sqrt(LEVEL * (1 - LEVEL) / TRIALS)
    assert abs(rate - LEVEL) < tolerance, f"{rate:.4f} with {n} seeds ({'paired' if paired else 'unpaired'})"


@pytest.mark.parametrize("n", [3, 6])
def test_the_power_under_a_true_difference(n, capsys):
    """Its power at a true difference of two seed standard deviations, reported, and checked
    against the t distribution's own (noncentral t) to simulation error."""
    rate = simulated_rate(n, False, 2.0, random.Random(100 + n))
    dof, shift = 2 * n - 2, 2.0 / math.sqrt(2 / n)
    critical = stats.t.ppf(1 - LEVEL / 2, dof)
    expected = stats.nct.sf(critical, dof, shift) + stats.nct.cdf(-critical, dof, shift)
    with capsys.disabled():
        print(f"\npower at a difference of 2 s, {n} seeds a side, unpaired: {rate:.3f} "
              f"(theory {expected:.3f})")
    assert abs(rate - expected) < 4 * math.sqrt(expected * (1 - expected) / TRIALS)


def test_the_paired_test_is_student_t_on_the_differences():
    """The p-value and threshold are scipy's paired t-test's, on n - 1 degrees of freedom."""
    ours, theirs = [41.96, 42.50, 42.06], [41.38, 41.77, 41.52]
    verdict = judge(ours, theirs, paired=True)
    reference = stats.ttest_rel(ours, theirs)
    assert verdict.p == pytest.approx(reference.pvalue, rel=1e-9)
    assert verdict.dof == 2 and verdict.rule == PAIRED and verdict.word == "better"
    differences = [a - b for a, b in zip(ours, theirs, strict=True)]
    standard_error = statistics.stdev(differences) / math.sqrt(3)
    assert verdict.threshold == pytest.approx(stats.t.ppf(0.975, 2) * standard_error)


def test_the_unpaired_test_is_student_t_with_pooled_noise():
    ours, theirs = [40.16, 40.27, 40.20, 40.3], [42.50, 41.72, 40.81]
    verdict = judge(ours, theirs)
    reference = stats.ttest_ind(ours, theirs, equal_var=True)
    assert verdict.p == pytest.approx(reference.pvalue, rel=1e-9)
    assert (verdict.dof, verdict.rule, verdict.word) == (5, SEED_MEANS, "worse")


def test_single_runs_take_the_noise_record_and_its_degrees_of_freedom():
    """The threshold is t(0.975, dof of the noise)·√2·s: 2.776·√2 for 4 degrees of freedom, so a
    margin of 3.9 is a tie there and a difference with 40 degrees of freedom (t = 2.021) is not."""
    assert judge([3.9], [0.0], noise=UNIT, scale=SCALE).word == "tie"
    assert judge([3.9], [0.0], noise=Noise(1.0, 40, SCALE, 41), scale=SCALE).word == "better"
    verdict = judge([0.0], [3.9], noise=UNIT, scale=SCALE)
    assert verdict.rule == SINGLE_RUNS and verdict.dof == 4
    assert verdict.threshold == pytest.approx(stats.t.ppf(0.975, 4) * math.sqrt(2))


def test_a_metric_where_lower_is_better():
    assert judge([40.0], [45.0], noise=UNIT, scale=SCALE, higher_is_better=False).word == "better"
    assert judge([45.0], [40.0], noise=UNIT, scale=SCALE, higher_is_better=False).word == "worse"
    paired = judge([40.0, 41.0, 43.0], [45.0, 47.0, 48.0], paired=True, higher_is_better=False)
    assert paired.word == "better" and paired.margin == pytest.approx(16 / 3)


def test_the_noise_is_pooled_over_rows_with_their_degrees_of_freedom():
    rows = [[1.0, 2.0, 3.0], [10.0, 14.0], [7.0]]  # variances 1 (2 dof) and 8 (1 dof); one run: none
    noise = noise_of(rows, scale=SCALE)
    assert noise.sd == pytest.approx(math.sqrt((2 * 1 + 1 * 8) / 3))
    assert (noise.dof, noise.runs, noise.scale) == (3, 5, SCALE)


def test_noise_from_another_scale_is_refused():
    with pytest.raises(ValueError, match="at scale 'other' and the noise was measured at 'a scale'"):
        judge([1.0], [0.0], noise=UNIT, scale="other")
    with pytest.raises(TypeError, match="noise must be a Noise record"):
        judge([1.0], [0.0], noise=0.85, scale=SCALE)


def test_a_control_of_two_or_more_seeds_is_paired():
    control = {0: 41.38, 1: 41.77, 2: 41.52}
    verdict = judge_against_control({0: 42.0, 2: 41.2, 7: 30.0}, control)
    assert verdict.rule == PAIRED and verdict.n == (2, 2)  # seed 7 left out
    one = judge_against_control({0: 42.5}, control)
    assert one.rule == SINGLE_RUNS and one.dof == 2  # the control's own seeds, 2 dof
    pooled = Noise(0.2, 6, "levers", 10)
    assert judge_against_control({0: 42.5}, control, noise=pooled, scale="levers").dof == 6


def test_decodings_of_one_model_are_paired_over_sentences():
    """sacreBLEU's approximate randomization: a system that gets every sentence right beats one that
    gets half of them wrong; two with the same error rate on other sentences tie."""
    references = [f"a dog number {i} runs on the green grass" for i in range(40)]
    broken = [ref if i % 2 else "a cat sits" for i, ref in enumerate(references)]
    better = judge_decodings(references, broken, references, trials=200)
    assert (better.word, better.rule, better.n) == ("better", DECODINGS, (40, 40)) and better.p < LEVEL
    assert judge_decodings(broken, references, references, trials=200).word == "worse"
    rng = random.Random(0)  # two systems with the same error rate, on other sentences: a tie
    one, other = ([ref if rng.random() < 0.8 else ref.replace("green", "brown") for ref in references]
                  for _ in range(2))
    assert judge_decodings(one, other, references, trials=1000).word == "tie"
    same = judge_decodings(broken, list(broken), references, trials=200)  # sacreBLEU's p: 1 / 201
    assert (same.word, same.margin) == ("tie", 0.0) and same.p < LEVEL
    with pytest.raises(ValueError, match="one hypothesis a reference each"):
        judge_decodings(references[:3], references, references)


def test_holm_at_its_threshold_exactly():
    """Holm keeps p < level / (m - k): a smallest p of exactly 0.05 / 2 in a family of 2 is a tie,
    and the step-down stops there (0.04 alone would pass 0.05)."""
    family = [Verdict("better", 1.0, 0.5, PAIRED, (3, 3), p) for p in (LEVEL / 2, 0.04)]
    assert [v.word for v in holm(family)] == ["tie", "tie"]
    assert holm([]) == []


def test_holm_keeps_only_what_its_step_down_allows():
    """p = 0.01, 0.03, 0.04 in a family of 3: 0.01 < 0.05/3 is kept; 0.03 ≥ 0.05/2 stops the rest,
    though 0.04 alone is below 0.05."""
    family = [Verdict("better", 1.0, 0.5, PAIRED, (3, 3), p) for p in (0.04, 0.01, 0.03)]
    assert [v.word for v in holm(family)] == ["tie", "better", "tie"]
    family = [Verdict("worse", -1.0, 0.5, PAIRED, (3, 3), p) for p in (0.012, 0.02, 0.03)]
    # 0.012 < 0.0167, 0.02 < 0.025, 0.03 < 0.05: every one kept
    assert [v.word for v in holm(family)] == ["worse", "worse", "worse"]


def test_holm_agrees_with_the_textbook_adjusted_p_values():
    """Holm's adjusted p: max over the sorted prefix of (m - k)·p, capped at 1; a verdict kept is one
    whose adjusted p is below the level."""
    rng = random.Random(7)
    for _ in range(200):
        ps = [rng.random() ** 3 for _ in range(rng.randint(1, 8))]
        order = sorted(range(len(ps)), key=ps.__getitem__)
        adjusted, running = [0.0] * len(ps), 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
            adjusted[i] = running
        family = [Verdict("better", 1.0, 0.5, PAIRED, (3, 3), p) for p in ps]
        assert [v.word == "better" for v in holm(family)] == [a < LEVEL for a in adjusted]


@pytest.mark.parametrize("call, error, message", [
    (lambda: judge([], [1.0], noise=UNIT, scale=SCALE), ValueError, "ours must hold at least one score"),
    (lambda: judge([1.0, math.nan], [1.0], noise=UNIT, scale=SCALE), ValueError, "score 2 of 2 is nan"),
    (lambda: judge([1.0], ["40.1"], noise=UNIT, scale=SCALE), ValueError, "score 1 of 1 is '40.1'"),
    (lambda: judge("41", [1.0]), TypeError, "ours must be a sequence of scores"),
    (lambda: judge([41.0], [40.0]), ValueError, "single runs need noise="),
    (lambda: judge([1.0, 2.0], [1.0, 2.0, 3.0], paired=True), ValueError, "one each per seed, got 2 and 3"),
    (lambda: judge([1.0], [2.0], paired=True), ValueError, "at least 2 seeds"),
    (lambda: judge([1.0, 2.0], [1.0, 3.0], paired=True, noise=UNIT), ValueError, "noise= is for unpaired"),
    (lambda: judge([1.0, 1.0], [2.0, 2.0]), ValueError, "do not vary"),
    (lambda: judge([1.0, 3.0], [2.0, 2.0], scale=SCALE), ValueError, "scale= names the runs' scale"),
    (lambda: judge([1.0], [2.0], noise=UNIT, scale=SCALE, paired=1), TypeError, "paired must be True"),
    (lambda: judge([1.0, 3.0], [2.0, 2.0], level=5), ValueError, "level must be a probability"),
    (lambda: noise_of([[1.0], [2.0]], scale=SCALE), ValueError, "ran two seeds"),
    (lambda: noise_of([[1.0, 2.0]], scale=""), ValueError, "scale names what the runs share"),
    (lambda: judge_against_control({0: 1.0}, {0: 2.0}), ValueError, "train the control with a second seed"),
    (lambda: judge_against_control({1: 1.0}, {0: 2.0}), ValueError, "no seed both ran"),
])
def test_inputs_are_refused_in_one_line(call, error, message):
    with pytest.raises(error) as raised:
        call()
    text = str(raised.value)
    assert "\n" not in text
    # the words as written, in their place (a message with text glued to it, or in capitals, is not)
    assert message in text and not text.startswith("XX") and not text.endswith("XX"), text


def test_the_messages_name_what_was_given():
    """Each message names the argument and the type it got, and says what to do."""
    with pytest.raises(TypeError) as raised:
        judge([1.0], (x for x in [2.0]), noise=UNIT, scale=SCALE)
    assert str(raised.value) == "theirs must be a sequence of scores, got generator"
    with pytest.raises(TypeError) as raised:
        judge([1.0], [2.0], noise=UNIT, scale=SCALE, higher_is_better="yes")
    assert str(raised.value) == "higher_is_better must be True or False, got 'yes'"
    with pytest.raises(ValueError) as raised:
        noise_of([[1.0, 2.0], [3.0, math.nan]], scale=SCALE)
    assert str(raised.value) == "group 2 must be finite numbers; score 2 of 2 is nan"
    with pytest.raises(TypeError) as raised:
        judge([1.0], [0.0], noise=0.85, scale=SCALE)
    assert str(raised.value).endswith("never a number chosen by hand")
    with pytest.raises(ValueError) as raised:
        judge([1.0], [0.0], noise=UNIT, scale="other")
    assert str(raised.value).endswith("judge runs with the noise of their own setting")
    with pytest.raises(ValueError) as raised:
        judge_against_control({0: 1.0}, {0: 2.0})
    assert str(raised.value).endswith("the control ran one seed: train the control with a second seed")


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5, -0.05])
def test_a_level_outside_zero_to_one_is_refused(level):
    with pytest.raises(ValueError, match="level must be a probability"):
        judge([1.0, 3.0], [2.0, 2.0], level=level)


def test_the_level_reaches_every_rule():
    """A level passed in is the level tested at, paired, unpaired and against a control."""
    loose = 0.5
    assert judge([1.0, 2.0, 3.3], [0.0, 2.2, 3.0], paired=True, level=loose).level == loose
    assert judge_against_control({0: 1.0, 1: 2.0}, {0: 0.0, 1: 1.9}, level=loose).level == loose
    one = judge_against_control({0: 1.0}, {0: 0.0, 1: 0.5, 2: 1.0}, level=loose)
    assert one.level == loose and one.word == "better"  # p ≈ 0.27: a tie at 5%, better at 50%
    assert judge_against_control({0: 1.0}, {0: 0.0, 1: 0.5, 2: 1.0}).word == "tie"


def test_one_seed_against_a_control_of_two_seeds_is_judged():
    """Two control seeds measure a noise (1 dof): the single run is judged, not refused."""
    verdict = judge_against_control({0: 45.0}, {0: 40.0, 1: 40.5})
    assert (verdict.rule, verdict.dof, verdict.n) == (SINGLE_RUNS, 1, (1, 1))


def test_three_scores_in_all_carry_their_own_noise():
    """One run against two (3 runs, 1 dof) is judged with the runs' own pooled noise."""
    verdict = judge([4.0], [0.0, 2.0])
    assert (verdict.rule, verdict.dof) == (SEED_MEANS, 1)


def test_differences_that_do_not_vary():
    """Paired differences with no spread: any difference is beyond the noise (p = 0); none is a tie."""
    beyond = judge([2.0, 3.0, 4.0], [1.0, 2.0, 3.0], paired=True)
    assert (beyond.word, beyond.p, beyond.threshold) == ("better", 0.0, 0.0)
    level = judge([2.0, 3.0, 4.0], [2.0, 3.0, 4.0], paired=True)
    assert (level.word, level.p) == ("tie", 1.0)
    assert judge([1.0, 2.0], [2.0, 3.0], paired=True).word == "worse"
    spread = judge([2.0, 3.0, 4.5], [1.0, 2.0, 3.0], paired=True)  # differences 1, 1, 1.5: they vary
    assert 0 < spread.p < 1 and spread.threshold > 0


def test_one_models_decodings_of_the_shipped_model():
    """The shipped model's α = 1.4 against 0.6 over its validation sentences: +0.59 BLEU, better, a
    margin under 1 (a rule that asked for more than 1 BLEU would say worse); the record's fields."""
    from annotated_transformer.helpers.book_figures import result

    kept = result("multi30k_decodings.json")
    ours, theirs = (kept["decodings"][f"beam 4, alpha {alpha}"]["hypotheses"] for alpha in ("1.4", "0.6"))
    verdict = judge_decodings(ours, theirs, kept["references"], trials=2000)
    assert verdict.word == "better" and 0 < verdict.margin < 1 and verdict.p < LEVEL
    assert math.isnan(verdict.threshold) and verdict.dof is None and verdict.level == LEVEL
    assert verdict.n == (1014, 1014)
    # the trials asked for are the trials made: p is (count + 1) / (trials + 1)
    assert (verdict.p * 2001) == pytest.approx(round(verdict.p * 2001))
    assert judge_decodings(ours, theirs, kept["references"], trials=200, level=0.001).level == 0.001


def test_a_verdict_reads_at_a_glance():
    verdict = judge([41.96, 42.50, 42.06], [41.38, 41.77, 41.52], paired=True)  # R-Drop's seeds
    assert repr(verdict) == ("Verdict(word='better', margin=0.617, threshold=0.249, p=0.0087, dof=2, "
                             "rule='paired t-test over seeds, n - 1 degrees of freedom', n=(3, 3))")
    assert repr(UNIT) == "Noise(sd=1.0, dof=4, scale='a scale', runs=5)"


def test_the_verdict_is_a_frozen_record():
    verdict = judge([1.0], [0.0], noise=UNIT, scale=SCALE)
    assert isinstance(verdict, Verdict)
    with pytest.raises(AttributeError):
        verdict.word = "better"


def test_the_docstring_examples_run():
    assert doctest.testmod(verdicts, raise_on_error=False).failed == 0


def test_the_module_is_a_leaf():
    """helpers/ imports nothing of the package: the rule is arithmetic on scores and scipy's t."""
    with open(verdicts.__file__, encoding="utf-8") as file:
        text = file.read()
    assert "annotated_transformer" not in text.split('"""', 2)[2]


def test_a_p_value_equal_to_the_level_is_a_tie():
    """The rule says better or worse only when p is *below* the level: run the same comparison at a
    level equal to its own p, and it is a tie (paired over seeds and with single runs' noise)."""
    ours, theirs = [41.0, 41.6, 41.2], [40.1, 40.9, 40.5]
    found = judge(ours, theirs, paired=True)
    assert found.word == "better" and 0 < found.p < LEVEL
    assert judge(ours, theirs, paired=True, level=found.p).word == "tie"
    assert judge(ours, theirs, paired=True, level=found.p * 1.0001).word == "better"
    references = [f"a dog number {i} runs on the green grass" for i in range(20)]
    broken = [ref if i % 2 else "a cat sits" for i, ref in enumerate(references)]
    better = judge_decodings(references, broken, references, trials=200)  # sacreBLEU's seed is fixed
    assert better.word == "better"
    assert judge_decodings(references, broken, references, trials=200, level=better.p).word == "tie"


def test_decodings_are_judged_over_ten_thousand_trials_by_default():
    """sacreBLEU's p is (shuffles at least as far apart + 1) / (trials + 1): with the default 10,000
    trials it is a whole number of 10,001ths."""
    references = [f"a dog number {i} runs on the green grass" for i in range(12)]
    rng = random.Random(1)  # two systems with errors on other sentences: p well above 1 / 10,001
    one, other = ([ref if rng.random() < 0.7 else ref.replace("green", "brown") for ref in references]
                  for _ in range(2))
    found = judge_decodings(one, other, references)
    assert found.p > 0.01 and found.p * 10_001 == pytest.approx(round(found.p * 10_001), abs=1e-6)
    assert found.p * 10_002 != pytest.approx(round(found.p * 10_002), abs=1e-3)
