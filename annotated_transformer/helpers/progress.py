"""What training shows while it runs (chapter 9's `Trainer.fit` uses it).

A tqdm bar on a terminal, advanced every step, and a log line at every log point: the step, the
smoothed loss, the perplexity, the learning rate and the tokens a second since the last log point.
Where the output is not a terminal (a notebook, a log file, CI), a bar would fill the log with
carriage returns, so only the log lines are printed.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from typing import Protocol

from tqdm import tqdm

__all__ = ["Progress"]


class _StepRecord(Protocol):
    """What a log line reads of a step's statistics (chapter 9's `StepStats` has it)."""

    step: int
    loss: float
    nll: float
    n_tokens: int
    lr: float


class Progress:
    """A progress display for `total` steps, starting at step `initial`; silent when not `enabled`
    (a rank other than 0, or `TrainConfig(progress=False)`)."""

    def __init__(self, total: int, initial: int, enabled: bool = True) -> None:
        self.enabled = enabled
        interactive = enabled and sys.stdout.isatty()
        self.bar = tqdm(total=total, initial=initial, unit="step", file=sys.stdout, mininterval=1.0,
                        disable=not interactive)
        self.since = time.perf_counter()  # tokens per second are measured from log point to log point

    def advance(self) -> None:
        """One step done."""
        self.bar.update(1)

    def log(self, records: Sequence[_StepRecord]) -> None:
        """A log point: print a line about the last of `records`, the steps since the last log point."""
        now = time.perf_counter()
        seconds, self.since = now - self.since, now
        if not (self.enabled and records):
            return
        last = records[-1]
        tokens_per_second = sum(r.n_tokens for r in records) / max(seconds, 1e-9)
        self.bar.set_postfix({"loss": f"{last.loss:.3f}", "tok/s": f"{tokens_per_second:.0f}"}, refresh=False)
        perplexity = math.exp(min(last.nll, 50))
        line = (f"step {last.step:>6}  loss {last.loss:.3f}  ppl {perplexity:.2f}  lr {last.lr:.2e}  "
                f"{tokens_per_second:,.0f} tok/s")
        self.bar.write(line, file=sys.stdout)

    def close(self) -> None:
        """Training is over: close the bar."""
        self.bar.close()
