"""The checkpoints of earlier releases, still read (companion of chapter 10): format versions 1 and
2 spread a trainer's state over fixed entries, and version 1's digest covered the parameters alone.
Chapter 10's `checkpoints` checks their digests and gives them today's layout (version 3: `config`,
`state`, `extra`) through this module. It passes in the digests it computes, so that this module
imports nothing of the package: `checkpoints` imports it, never the other way round."""

from collections.abc import Callable
from typing import Any

__all__ = ["OLD_DIGESTED", "OLD_VERSIONS", "old_digest_intact", "upgraded"]

OLD_VERSIONS = (1, 2)
# What version 2's digest covers (`checkpoints.checkpoint_sha256` reads this table beside version 3's);
# version 1 stored `model_sha256`, a digest of the parameters alone.
OLD_DIGESTED = {2: ("config", "model", "optimizer", "scheduler", "step", "rng", "extra")}


def old_digest_intact(
    checkpoint: dict, checkpoint_sha256: Callable[[dict], str], parameters_sha256: Callable[[dict], str]
) -> bool:
    """Whether a checkpoint of version 1 or 2 still holds what its digest was computed from: version
    1's `model_sha256` of its parameters (`parameters_sha256`, chapter 10's `state_dict_sha256`),
    version 2's `sha256` of the entries of `OLD_DIGESTED` (`checkpoint_sha256`, chapter 10's)."""
    if checkpoint["version"] == 1:
        return checkpoint.get("model_sha256") == parameters_sha256(checkpoint.get("model", {}))
    return checkpoint.get("sha256") == checkpoint_sha256(checkpoint)


def upgraded(checkpoint: dict) -> dict:
    """A checkpoint of version 1 or 2 in version 3's layout (`config`, `state`, `extra`), its header
    and version kept. They kept a trainer's state in fixed entries, and its position in the data, its
    TrainConfig and its gradient scaler in `extra`; a model alone has no optimizer."""
    extra: dict[str, Any] = dict(checkpoint["extra"])
    state = {"model": checkpoint["model"], "step": checkpoint["step"]}
    if checkpoint["optimizer"] is not None:  # a trainer's: its state_dict(), put together again
        state |= {"optimizer": checkpoint["optimizer"], "scheduler": checkpoint["scheduler"],
                  "scaler": extra.pop("scaler", None), "epoch": extra.pop("epoch", 0),
                  "position": extra.pop("position", 0), "rng": checkpoint["rng"],
                  "config": extra.pop("train_config", {})}
    return {"format": checkpoint["format"], "version": checkpoint["version"], "config": checkpoint["config"],
            "state": state, "extra": extra}
