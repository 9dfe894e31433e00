"""The checks of a training configuration's values, and of a run's numbers (companion of chapter 9:
`TrainConfig`, and `Trainer.fit`'s log points).

`check_train_config(config)` refuses, with a message that names the field, what it must be and
the value given, a configuration no training could run: a step count below 1, a negative interval,
a share outside [0, 1], an R-Drop weight that is negative or not finite, a learning-rate factor or
a clipping norm that is not a positive finite number. (The types of the fields are chapter 5's
`check_types`.)

`first_non_finite(records)` finds the first NaN or infinite loss or gradient norm of a log point's
statistics, and `TrainingDiverged` is the error that stops the run there: it names the step, what is
kept to resume from, and the settings to try (`lr_factor`, `warmup`, `clip_grad_norm`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from annotated_transformer.helpers.errors import Setting, SettingsMessage, field_error

__all__ = ["TrainingDiverged", "check_train_config", "first_non_finite"]


def check_train_config(config: Any) -> None:
    """Raise the `ValueError` of chapter 3's `field_error` for the first value of `config` (a
    `TrainConfig`) that no training could use."""
    for name in ("max_steps", "accumulate", "warmup"):
        if getattr(config, name) < 1:
            raise field_error(name, "be a positive integer", getattr(config, name))
    for name in ("log_every", "checkpoint_every"):
        if getattr(config, name) < 0:
            raise field_error(name, "be >= 0", getattr(config, name))
    if not 0.0 <= config.cooldown <= 1.0:
        raise field_error("cooldown", "lie in [0, 1] (a share of the steps)", config.cooldown)
    if not 0.0 <= config.label_smoothing < 1.0:
        raise field_error("label_smoothing", "lie in [0, 1)", config.label_smoothing)
    if not (math.isfinite(config.rdrop_alpha) and config.rdrop_alpha >= 0):
        raise field_error("rdrop_alpha", "be >= 0 and finite (0: no R-Drop)", config.rdrop_alpha)
    if not (math.isfinite(config.lr_factor) and config.lr_factor > 0):
        raise field_error("lr_factor", "be a positive finite number", config.lr_factor)
    clip = config.clip_grad_norm
    if clip is not None and not (math.isfinite(clip) and clip > 0):
        raise field_error("clip_grad_norm", "be a positive finite number", clip, unset_means="no clipping")


class TrainingDiverged(SettingsMessage, RuntimeError):
    """The loss, the gradient or the parameters became NaN or infinite: training cannot go on. The
    message names the settings to change (`settings`)."""

    @classmethod
    def at(cls, config: Any, step: int, problem: str, kept: str) -> TrainingDiverged:
        """What went wrong (`problem`) at which step, what is `kept` to resume from, and which
        settings of `config` (a `TrainConfig`) to try."""
        return cls(
            f"training diverged at step {step}: {problem}; {kept}. Try a lower learning rate (",
            Setting("lr_factor"), f", now {config.lr_factor:g}), a longer warmup (", Setting("warmup"),
            f", now {config.warmup} steps), or gradient clipping (", Setting("clip_grad_norm"), ", e.g. 1.0)",
        )


def first_non_finite(records: Sequence[Any], grad_norms: bool = True) -> tuple[int, str, float] | None:
    """(step, what, value) of the first NaN or infinite loss or gradient norm of `records` (a log
    point's `StepStats`), or None. Without `grad_norms`, the losses alone: in float16 training an
    infinite gradient is the gradient scaler's to handle (it skips that step and lowers its scale),
    not a divergence."""
    for record in records:
        norm = record.grad_norm if grad_norms else None
        for what, value in (("loss", record.loss), ("gradient norm", norm)):
            if value is not None and not math.isfinite(value):
                return record.step, what, value
    return None
