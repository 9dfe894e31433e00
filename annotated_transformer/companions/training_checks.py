"""The checks of a training configuration's values (companion of chapter 9: `TrainConfig`).

`check_train_config(config)` refuses, with a message that names the field, what it must be and
the value given, a configuration no training could run: a step count below 1, a negative interval,
a share outside [0, 1], an R-Drop weight that is negative or not finite, a learning-rate factor or
a clipping norm that is not a positive finite number. (The types of the fields are chapter 5's
`check_types`.)
"""

from __future__ import annotations

import math
from typing import Any

from annotated_transformer.errors import field_error

__all__ = ["check_train_config"]


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
