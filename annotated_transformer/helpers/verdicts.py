"""The book's rule for "better", as code: `judge` says better, worse or tie.

The appendix states the rule (book/appendix_recipes.ipynb, section `judging-differences`). A run's
score depends on its seed as well as on its recipe, so a difference between two scores is a
difference only when it is larger than the seeds' noise would make it by chance. The book asks
Student's t-test, two-sided, at the level LEVEL = 5%: one choice is **better** than another when
the test rejects "no difference" at that level and the difference is in its favour, **worse** when
it is against it, and otherwise the two are a **tie** (the runs cannot tell them apart, which is
not to say they are equal). Which test applies is the design's, never the caller's:

- **paired** (PAIRED), when the two sides are the same seeds' runs, seed by seed: the t-test on
  the seeds' differences, n - 1 degrees of freedom;
- **unpaired** (SEED_MEANS, or SINGLE_RUNS for one run a side): the two-sample t-test with the seed
  noise s of the setting. The noise is data: with two or more runs a side it is the two sides'
  pooled sample standard deviation (n₁ + n₂ - 2 degrees of freedom); else a `Noise` record made by
  `noise_of` from runs of the same setting (pooled over rows of one scale, with its degrees of
  freedom), which `judge` refuses for runs of another scale;
- **decodings of one model** on one set (`judge_decodings`): sacreBLEU's paired approximate
  randomization over the set's sentences, at the same level.

    >>> seeds = noise_of([[42.50, 41.72, 40.81]], scale="multi30k, 2 threads")
    >>> seeds
    Noise(sd=0.846, dof=2, scale='multi30k, 2 threads', runs=3)
    >>> judge([40.15], [42.50], noise=seeds, scale="multi30k, 2 threads").word
    'tie'
    >>> judge([40.16, 40.27, 40.20], [42.50, 41.72, 40.81], paired=True).word
    'tie'

`holm` controls the error of a family of comparisons drawn from the same runs (Holm, 1979): it
keeps a verdict only when its p-value passes Holm's step-down threshold.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from numbers import Real

from scipy import stats

__all__ = ["LEVEL", "Noise", "Verdict", "holm", "judge", "judge_against_control", "judge_decodings",
           "noise_of"]

LEVEL = 0.05  # the test's two-sided level: its rate of "better" or "worse" when nothing differs
SINGLE_RUNS = "two-sample t-test on single runs, the setting's seed noise"
SEED_MEANS = "two-sample t-test on means of seeds, pooled seed noise"
PAIRED = "paired t-test over seeds, n - 1 degrees of freedom"
DECODINGS = "paired approximate randomization over sentences (sacreBLEU)"


@dataclass(frozen=True)
class Noise:
    """The seed noise of a setting: the pooled sample standard deviation `sd` of its runs' scores,
    with `dof` degrees of freedom, measured on `runs` runs at `scale` (what the runs share: the
    recipe's size, budget and threads, named by the file they come from)."""

    sd: float
    dof: int
    scale: str
    runs: int

    def __repr__(self) -> str:
        return f"Noise(sd={round(self.sd, 3)}, dof={self.dof}, scale={self.scale!r}, runs={self.runs})"


@dataclass(frozen=True)
class Verdict:
    """What `judge` decided, and from what.

    word: "better", "worse" or "tie" (ours against theirs).
    margin: the mean difference, ours minus theirs, signed so that positive is better (for a metric
        where lower is better, such as perplexity, theirs minus ours).
    threshold: how far beyond zero the margin had to go: the t quantile times the standard error.
    rule: which test applied (PAIRED, SEED_MEANS, SINGLE_RUNS or DECODINGS).
    n: how many scores each side had: (ours, theirs).
    p: the test's two-sided p-value; dof: its degrees of freedom (None for DECODINGS);
    level: the level it was tested at.
    """

    word: str
    margin: float
    threshold: float
    rule: str
    n: tuple[int, int]
    p: float = math.nan
    dof: int | None = None
    level: float = LEVEL

    def __repr__(self) -> str:  # rounded, so that a message or a doctest reads at a glance
        return (f"Verdict(word={self.word!r}, margin={round(self.margin, 3)}, "
                f"threshold={round(self.threshold, 3)}, p={round(self.p, 4)}, dof={self.dof}, "
                f"rule={self.rule!r}, n={self.n})")


def noise_of(groups: Sequence[Sequence[float]], *, scale: str) -> Noise:
    """The seed noise of runs at one `scale`: each group is one setting's runs (its seeds), and the
    groups' sample variances are pooled, each weighted by its n - 1 degrees of freedom. Groups of
    one run carry no noise and are left out; the pooled runs must hold at least one degree of
    freedom and vary."""
    if not isinstance(scale, str) or not scale:
        raise ValueError(f"scale names what the runs share (recipe, budget, threads), got {scale!r}")
    checked = [_scores(group, f"group {i + 1}") for i, group in enumerate(groups)]
    varied = [group for group in checked if len(group) > 1]
    dof = sum(len(group) - 1 for group in varied)
    if dof == 0:
        raise ValueError(f"no setting at {scale!r} ran two seeds: train one twice to measure the noise")
    pooled = sum((len(group) - 1) * statistics.variance(group) for group in varied) / dof
    if pooled == 0:
        raise ValueError(f"the seeds at {scale!r} do not vary, so they measure no noise")
    return Noise(math.sqrt(pooled), dof, scale, sum(len(group) for group in varied))


def judge(ours: Sequence[float], theirs: Sequence[float], *, noise: Noise | None = None,
          scale: str | None = None, paired: bool = False, higher_is_better: bool = True,
          level: float = LEVEL) -> Verdict:
    """Whether `ours` is better than, worse than or tied with `theirs`, by the appendix's rule.

    ours, theirs: scores, one per run.
    noise: the setting's seed noise (`noise_of`), for sides of one run; `scale` names the runs'
        scale and must be the noise's. Without it the two sides' own runs are the noise.
    paired: the scores are the same seeds' (or the same models'), in the same order: the t-test is
        on the differences, seed by seed, and measures its own noise.
    higher_is_better: False for a metric such as perplexity or a loss.
    level: the two-sided level of the test.
    """
    ours, theirs = _scores(ours, "ours"), _scores(theirs, "theirs")
    sign = 1.0 if _flag(higher_is_better, "higher_is_better") else -1.0
    if not (isinstance(level, float) and 0 < level < 1):
        raise ValueError(f"level must be a probability between 0 and 1, got {level!r}")
    if _flag(paired, "paired"):
        if noise is not None:
            raise ValueError("noise= is for unpaired scores: the paired test measures its own")
        return _paired(ours, theirs, sign, level)
    s, dof = _unpaired_noise(ours, theirs, noise, scale)
    margin = sign * (statistics.fmean(ours) - statistics.fmean(theirs))
    standard_error = s * math.sqrt(1 / len(ours) + 1 / len(theirs))
    rule = SINGLE_RUNS if len(ours) == len(theirs) == 1 else SEED_MEANS
    return _t_verdict(margin, standard_error, dof, level, rule, (len(ours), len(theirs)))


def judge_against_control(ours: Mapping[int, float], control: Mapping[int, float], *,
                          noise: Noise | None = None, scale: str | None = None,
                          level: float = LEVEL) -> Verdict:
    """A treatment's runs against the control's runs of the same seeds (both: {seed: score}).

    Paired over the seeds both have when they are two or more; with one, single runs, with the
    setting's `noise` (its `scale` named), or, without it, the noise of the control's own seeds.
    Seeds only one side has are left out."""
    seeds = sorted(set(ours) & set(control))
    if not seeds:
        raise ValueError(f"no seed both ran: the treatment ran {sorted(ours)}, the control {sorted(control)}")
    treated, untreated = [ours[seed] for seed in seeds], [control[seed] for seed in seeds]
    if len(seeds) >= 2:
        return judge(treated, untreated, paired=True, level=level)
    if noise is None:
        if len(control) < 2:
            raise ValueError("one seed is judged against the control's seed noise, and the control ran one "
                             "seed: train the control with a second seed")
        scale = "the control's seeds"
        noise = noise_of([list(control.values())], scale=scale)
    return judge(treated, untreated, noise=noise, scale=scale, level=level)


def judge_decodings(ours: Sequence[str], theirs: Sequence[str], references: Sequence[str], *,
                    level: float = LEVEL, trials: int = 10_000) -> Verdict:
    """Two decodings of one model on one set (a beam width, a length penalty, checkpoints averaged),
    by sacreBLEU's paired approximate randomization over the set's sentences: how often a random
    swap of the two systems' sentences makes a BLEU difference as large. The margin is corpus BLEU,
    ours minus theirs; the threshold is not a t quantile, and is reported as nan."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    if not (len(ours) == len(theirs) == len(references)) or not references:
        raise ValueError(f"two decodings of one set need one hypothesis a reference each, got {len(ours)} "
                         f"and {len(theirs)} for {len(references)} references")
    test = PairedTest([("theirs", list(theirs)), ("ours", list(ours))], {"BLEU": BLEU()}, [list(references)],
                      test_type="ar", n_samples=trials)
    _, scores = test()
    baseline, candidate = scores["BLEU"]
    margin, p = candidate.score - baseline.score, candidate.p_value
    # Two decodings with the same BLEU are a tie whatever p says: sacreBLEU counts only shuffles that
    # differ by *more* than the real difference, so two identical decodings get p = 1 / (trials + 1).
    word = "tie" if p >= level or margin == 0 else "better" if margin > 0 else "worse"
    return Verdict(word, margin, math.nan, DECODINGS, (len(ours), len(theirs)), p, None, level)


def holm(verdicts: Sequence[Verdict], level: float = LEVEL) -> list[Verdict]:
    """A family of verdicts drawn from the same runs, with Holm's step-down correction: sorted by
    p-value, the k-th smallest (from 0) keeps its word only if its p and every smaller one are below
    level / (m - k); every other becomes a tie. The family's chance of any false "better" or "worse"
    is then at most `level`. Returned in the order given."""
    order = sorted(range(len(verdicts)), key=lambda i: verdicts[i].p)
    kept, rejecting = [False] * len(verdicts), True
    for rank, i in enumerate(order):
        rejecting = rejecting and verdicts[i].p < level / (len(verdicts) - rank)
        kept[i] = rejecting
    return [verdict if keep or verdict.word == "tie" else replace(verdict, word="tie")
            for verdict, keep in zip(verdicts, kept, strict=True)]


def _paired(ours: list[float], theirs: list[float], sign: float, level: float) -> Verdict:
    """The t-test on the seeds' differences, n - 1 degrees of freedom."""
    if len(ours) != len(theirs):
        raise ValueError(f"paired scores need one each per seed, got {len(ours)} and {len(theirs)}")
    if len(ours) < 2:
        raise ValueError("paired scores need at least 2 seeds for a standard error; one each is single runs")
    differences = [sign * (a - b) for a, b in zip(ours, theirs, strict=True)]
    standard_error = statistics.stdev(differences) / math.sqrt(len(differences))
    return _t_verdict(statistics.fmean(differences), standard_error, len(differences) - 1, level, PAIRED,
                      (len(ours), len(theirs)))


def _t_verdict(margin: float, standard_error: float, dof: int, level: float, rule: str,
               n: tuple[int, int]) -> Verdict:
    """Student's t-test of margin / standard_error on `dof` degrees of freedom, two-sided."""
    critical = float(stats.t.ppf(1 - level / 2, dof))
    if standard_error == 0:  # differences that do not vary: any difference at all is beyond noise
        p = 1.0 if margin == 0 else 0.0
    else:
        p = float(2 * stats.t.sf(abs(margin) / standard_error, dof))
    word = "tie" if p >= level else "better" if margin > 0 else "worse"
    return Verdict(word, margin, critical * standard_error, rule, n, p, dof, level)


def _unpaired_noise(ours: list[float], theirs: list[float], noise: Noise | None,
                    scale: str | None) -> tuple[float, int]:
    """The seed noise and its degrees of freedom: the given record's, checked against the runs'
    scale, or the two sides' pooled sample standard deviation."""
    if noise is not None:
        if not isinstance(noise, Noise):
            raise TypeError(f"noise must be a Noise record (noise_of(runs, scale=...)), not {noise!r}: the "
                            "noise is measured from runs of the setting, never a number chosen by hand")
        if scale != noise.scale:
            raise ValueError(f"these runs are at scale {scale!r} and the noise was measured at {noise.scale!r}: "
                             "judge runs with the noise of their own setting")
        return noise.sd, noise.dof
    if scale is not None:
        raise ValueError("scale= names the runs' scale for a noise= record; without one the runs are the noise")
    if len(ours) + len(theirs) < 3:
        raise ValueError("single runs need noise=, the setting's seed noise (noise_of), to be judged")
    measured = noise_of([ours, theirs], scale="these runs")
    return measured.sd, measured.dof


def _scores(values: Sequence[float], name: str) -> list[float]:
    """`values` as a list of finite floats, or a one-line error that names the argument."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a sequence of scores, got {type(values).__name__}")
    if not values:
        raise ValueError(f"{name} must hold at least one score, got none")
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
            raise ValueError(f"{name} must be finite numbers; score {i + 1} of {len(values)} is {value!r}")
    return [float(value) for value in values]


def _flag(value: bool, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value
