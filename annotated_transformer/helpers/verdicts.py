"""The book's rule for "better", as code: `judge` says better, worse or tie.

The appendix states the rule (book/appendix_recipes.ipynb, section `judging-differences`). A run's
score depends on its seed as well as on its recipe; the seeds of one recipe measure how much, by
their sample standard deviation s. One choice is **better** than another only when

- compared in single runs, one run each, the difference exceeds 2·√2·s. Each single run carries
  noise of standard deviation s, and the difference of two independent runs carries √2·s; the rule
  asks for twice that, and "exceeds" is strict: a difference of exactly 2·√2·s is a tie;
- compared on the same seeds' models (paired), the mean of the differences exceeds twice its
  standard error (sd of the differences / √n) *and* the difference has the same sign on every seed.

Otherwise the two are a **tie**: the comparison cannot tell them apart, which is not to say they
are equal. "Worse" is "better" the other way round.

Between means of several seeds that are not paired (three seeds against one run, say), `judge`
applies the first rule to the means: the difference of a mean of n₁ runs and one of n₂ runs has
standard deviation s·√(1/n₁ + 1/n₂), which is √2·s for single runs, and the rule asks for twice it.

    >>> judge([40.15], [42.50], noise=0.85)        # one seed each: within 2·√2·0.85 = 2.40
    Verdict(word='tie', margin=-2.35, threshold=2.404, rule='single runs: beyond 2·√2·s', n=(1, 1))
    >>> judge([40.16, 40.27, 40.20], [42.50, 41.72, 40.81], paired=True).word
    'worse'

A treatment trained beside a control (the recipe unchanged, the same seeds) is judged by
`judge_against_control`: paired over the seeds both ran when there are two or more, else a single
run against the control's run of its seed, with the control's seeds as the noise.

    >>> judge_against_control({0: 41.96}, {0: 41.38, 1: 40.90, 2: 41.70}).rule
    'single runs: beyond 2·√2·s'
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real

__all__ = ["PAIRED", "SINGLE_RUNS", "SEED_MEANS", "Verdict", "judge", "judge_against_control"]

SINGLE_RUNS = "single runs: beyond 2·√2·s"
SEED_MEANS = "means of seeds: beyond 2·s·√(1/n₁ + 1/n₂)"
PAIRED = "paired over seeds: beyond twice the standard error, one sign on every seed"


@dataclass(frozen=True)
class Verdict:
    """What `judge` decided, and from what.

    word: "better", "worse" or "tie" (ours against theirs).
    margin: the mean difference, ours minus theirs, signed so that positive is better (for a metric
        where lower is better, such as perplexity, theirs minus ours).
    threshold: how far beyond zero the margin had to go (2·√2·s, 2·s·√(1/n₁ + 1/n₂) or 2·SE).
    rule: which of the rules applied (SINGLE_RUNS, SEED_MEANS or PAIRED).
    n: how many scores each side had: (ours, theirs).
    """

    word: str
    margin: float
    threshold: float
    rule: str
    n: tuple[int, int]

    def __repr__(self) -> str:  # rounded, so that a message or a doctest reads at a glance
        return (f"Verdict(word={self.word!r}, margin={round(self.margin, 3)}, "
                f"threshold={round(self.threshold, 3)}, rule={self.rule!r}, n={self.n})")


def judge(ours: Sequence[float], theirs: Sequence[float], *, noise: float | None = None,
          paired: bool = False, higher_is_better: bool = True) -> Verdict:
    """Whether `ours` is better than, worse than or tied with `theirs`, by the appendix's rule.

    ours, theirs: scores, one per run (one each for single runs, several seeds each for means).
    noise: the seeds' standard deviation s. Needed for single runs; for several seeds each it is
        their pooled sample standard deviation unless given. The paired rule measures its own noise
        (the differences' standard error) and takes none.
    paired: the scores are the same seeds' (or the same models'), in the same order: the rule is
        applied to the differences, seed by seed.
    higher_is_better: False for a metric such as perplexity or a loss.
    """
    ours, theirs = _scores(ours, "ours"), _scores(theirs, "theirs")
    sign = 1.0 if _flag(higher_is_better, "higher_is_better") else -1.0
    if _flag(paired, "paired"):
        return _paired(ours, theirs, sign, noise)
    s = _noise(ours, theirs, noise)
    margin = sign * (statistics.fmean(ours) - statistics.fmean(theirs))
    threshold = 2 * s * math.sqrt(1 / len(ours) + 1 / len(theirs))
    rule = SINGLE_RUNS if len(ours) == len(theirs) == 1 else SEED_MEANS
    return Verdict(_word(margin, threshold), margin, threshold, rule, (len(ours), len(theirs)))


def judge_against_control(ours: Mapping[int, float], control: Mapping[int, float]) -> Verdict:
    """A treatment's runs against the control's runs of the same seeds (both: {seed: score}).

    Paired over the seeds both have when they are two or more; with one, single runs, the noise s
    being the sample standard deviation of all the control's seeds (which must be two or more, and
    vary). Seeds only one side has are left out.
    """
    seeds = sorted(set(ours) & set(control))
    if not seeds:
        raise ValueError(f"no seed both ran: the treatment ran {sorted(ours)}, the control {sorted(control)}")
    treated, untreated = [ours[seed] for seed in seeds], [control[seed] for seed in seeds]
    if len(seeds) >= 2:
        return judge(treated, untreated, paired=True)
    if len(control) < 2:
        raise ValueError("one seed is judged against the control's seed noise, and the control ran one seed: "
                         "train the control with a second seed")
    noise = statistics.stdev(_scores(list(control.values()), "control"))
    if noise == 0:
        raise ValueError("the control's seeds do not vary, so they measure no noise for a single run")
    return judge(treated, untreated, noise=noise)


def _paired(ours: list[float], theirs: list[float], sign: float, noise: float | None) -> Verdict:
    """The rule on the seeds' differences: beyond 2·SE, and one sign on every seed."""
    if noise is not None:
        raise ValueError("noise= is for unpaired scores: the paired rule measures its own (the SE)")
    if len(ours) != len(theirs):
        raise ValueError(f"paired scores need one each per seed, got {len(ours)} and {len(theirs)}")
    if len(ours) < 2:
        raise ValueError("paired scores need at least 2 seeds for a standard error; one each is single runs")
    differences = [sign * (a - b) for a, b in zip(ours, theirs, strict=True)]
    margin = statistics.fmean(differences)
    threshold = 2 * statistics.stdev(differences) / math.sqrt(len(differences))
    word = _word(margin, threshold)
    # A mean carried by most seeds while one goes the other way (or shows no difference) is a tie.
    if (word == "better" and min(differences) <= 0) or (word == "worse" and max(differences) >= 0):
        word = "tie"
    return Verdict(word, margin, threshold, PAIRED, (len(ours), len(theirs)))


def _word(margin: float, threshold: float) -> str:
    """"Beyond" is strict: a margin exactly at the threshold is a tie."""
    return "better" if margin > threshold else "worse" if margin < -threshold else "tie"


def _noise(ours: list[float], theirs: list[float], noise: float | None) -> float:
    """The given noise, checked, or the pooled sample standard deviation of the two groups."""
    if noise is not None:
        if isinstance(noise, bool) or not isinstance(noise, Real) or not math.isfinite(noise) or noise <= 0:
            raise ValueError(f"noise must be a finite standard deviation above 0, got {noise!r}")
        return float(noise)
    dof = len(ours) - 1 + len(theirs) - 1  # each group's sample variance has n - 1 degrees of freedom
    if dof == 0:
        raise ValueError("single runs need noise=, the seeds' standard deviation s (the appendix's rule)")
    pooled = sum((len(g) - 1) * statistics.variance(g) for g in (ours, theirs) if len(g) > 1) / dof
    if pooled == 0:
        raise ValueError("the seeds' scores do not vary: give noise=, the seeds' standard deviation")
    return math.sqrt(pooled)


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
