"""The states of every random number generator training draws from (Python's, torch's CPU one and
CUDA's), taken and put back, so that a resumed run draws the dropout masks it would have drawn
(chapter 9's `Trainer.state_dict`)."""

import random
from typing import Any

import torch

__all__ = ["rng_state", "set_rng_state"]


def rng_state() -> dict[str, Any]:
    """Every random number generator training touches: Python's, torch's CPU one, and CUDA's."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back the states `rng_state` took (also after a round trip through a checkpoint file)."""
    python = state["python"]  # stored in a file as nested lists and tuples; random wants tuples
    random.setstate((python[0], tuple(python[1]), python[2]))
    # The generators take their states as CPU byte tensors, wherever the state was loaded to (a
    # checkpoint read onto a GPU, say).
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([generator.cpu() for generator in state["cuda"]])
