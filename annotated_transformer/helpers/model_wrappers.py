"""The plain model inside the wrappers that training puts around it.

`torch.compile` wraps a module in an `OptimizedModule` (the model is its `_orig_mod`) and
DistributedDataParallel (chapter 15) in a module whose model is its `module`; the parameters of
both carry those prefixes in their names (`_orig_mod.`, `module.`). A saved state must name the
parameters as the plain model does, so that it loads into a model that is not wrapped, or wrapped
otherwise: chapter 9's `Trainer.state_dict` and chapter 10's checkpoints unwrap first.
"""

from __future__ import annotations

import torch

__all__ = ["unwrap_model"]


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The plain model inside any nesting of `torch.compile`'s and DistributedDataParallel's wrappers."""
    while True:
        if hasattr(model, "_orig_mod"):  # torch.compile
            model = model._orig_mod
        elif isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model
