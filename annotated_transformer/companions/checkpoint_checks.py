"""What reading a checkpoint checks (companion of chapter 10): the errors it raises (`CheckpointError`
for a file that cannot be used, `CheckpointMismatch` for a sound one of another model), the SHA-256
digest of everything a checkpoint holds (`content_sha256`; `state_dict_sha256`, the parameters alone,
as the first release's files stored it), that a file begins as the files of `torch.save` do
(`check_torch_file`), that its parameters are finite (`non_finite`, `refuse_non_finite`), the digests
of earlier releases' files (`earlier_digest_intact`), and where two models differ (`state_differences`,
`refuse_mismatch`). Chapter 10's `checkpoints` imports it, never the other way round."""

import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from annotated_transformer.companions.checkpoint_upgrades import OLD_VERSIONS, old_digest_intact
from annotated_transformer.helpers.model_wrappers import unwrap_model

__all__ = [
    "CheckpointError",
    "CheckpointMismatch",
    "check_torch_file",
    "content_sha256",
    "earlier_digest_intact",
    "non_finite",
    "refuse_mismatch",
    "refuse_non_finite",
    "state_dict_sha256",
    "state_differences",
]


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: corrupt, truncated, or for another model."""


class CheckpointMismatch(CheckpointError):
    """A sound checkpoint of another model configuration: not damage, so never passed over."""


def _feed_tensor(digest: Any, tag: str, tensor: Tensor) -> None:
    """Add a tensor to a digest: `tag`, its dtype and shape, then its bytes (the one way both digests
    read a tensor)."""
    tensor = tensor.detach().cpu().contiguous()
    digest.update(f"{tag}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
    digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())


def state_dict_sha256(state: dict[str, Tensor]) -> str:
    """A SHA-256 digest of a state dict's names, dtypes, shapes and bytes (the digest of the first
    release's checkpoints, which covered the parameters only)."""
    digest = hashlib.sha256()
    for name in sorted(state):
        _feed_tensor(digest, name, state[name])
    return digest.hexdigest()


def content_sha256(obj: Any) -> str:
    """A SHA-256 digest of everything a checkpoint holds: nested dicts, lists and tuples of tensors
    (their dtype, shape and bytes), numbers, strings and None, in a fixed order. Any flipped byte
    in the parameters, the optimizer's moments, the RNG states or the data position changes it."""
    digest = hashlib.sha256()

    def feed(value: Any) -> None:
        if isinstance(value, Tensor):
            _feed_tensor(digest, "T", value)
        elif isinstance(value, dict):
            digest.update(f"D{len(value)}|".encode())
            for key in sorted(value, key=repr):
                feed(key)
                feed(value[key])
        elif isinstance(value, list | tuple):
            digest.update(f"L{len(value)}|".encode())
            for item in value:
                feed(item)
        else:  # numbers, strings, booleans, None: repr is exact (floats round-trip)
            digest.update(f"{type(value).__name__}|{value!r}|".encode())

    feed(obj)
    return digest.hexdigest()


# How the files of torch.save begin: a zip archive, or (before PyTorch 1.6) a pickle. A file cut
# short still begins so; one that does not was never a checkpoint (a text file, say).
_TORCH_FILE_STARTS = (b"PK\x03\x04", b"\x80")


def check_torch_file(path: Path) -> None:
    """Refuse a path that holds no file (FileNotFoundError), or a file that does not begin as the files
    of `torch.save` do (CheckpointError): a text file given by mistake is not a damaged checkpoint,
    and deleting it is not the remedy."""
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}: check the path (training writes step_*.pt files)")
    with open(path, "rb") as file:
        head = file.read(4)
    if not any(head.startswith(start) or start.startswith(head) for start in _TORCH_FILE_STARTS):
        raise CheckpointError(
            f"{path} is not a checkpoint: it does not begin as the files of torch.save do (a zip archive); "
            f"give a run directory, its model.pt, or one of its checkpoints/step_*.pt"
        )


def earlier_digest_intact(path: Path, checkpoint: dict, checkpoint_sha256: Callable[[dict], str], current: int) -> bool:
    """Whether a checkpoint of an earlier release (`companions.checkpoint_upgrades`) still holds what
    its digest was computed from; a version this package does not know (a later release's) is
    refused. `checkpoint_sha256` is chapter 10's, `current` its format version."""
    version = checkpoint.get("version")
    if version not in OLD_VERSIONS:
        raise CheckpointError(
            f"{path} has checkpoint format version {version}, this package reads versions "
            f"{OLD_VERSIONS[0]} to {current}: update the package"
        )
    return old_digest_intact(checkpoint, checkpoint_sha256, state_dict_sha256)


def non_finite(state: dict[str, Tensor]) -> list[str]:
    """The names of the floating-point tensors of `state` that hold a NaN or an infinity."""
    names = [name for name, tensor in state.items() if tensor.is_floating_point()]
    finite = torch.stack([state[name].isfinite().all() for name in names]).tolist() if names else []
    return [name for name, ok in zip(names, finite, strict=True) if not ok]


def refuse_non_finite(path: Path, state: dict[str, Tensor]) -> None:
    """Raise CheckpointError when the parameters of the checkpoint at `path` hold a NaN or an infinity:
    the training that wrote it had diverged."""
    bad = non_finite(state)
    if bad:
        raise CheckpointError(
            f"{path} holds NaN or infinite parameters ({', '.join(bad[:3])}{' …' if len(bad) > 3 else ''}): "
            f"the training that wrote it diverged; use an earlier checkpoint, or train again with a "
            f"lower learning rate"
        )


def state_differences(
    config_a: dict, state_a: dict[str, Tensor], config_b: dict, state_b: dict[str, Tensor]
) -> list[tuple[str, str, Any, Any]]:
    """Where two models (configuration dicts and state dicts) differ, as (kind, name, a, b):
    ("config", field, value_a, value_b), ("key", tensor name, in_a, in_b) for a tensor only one side
    has, and ("shape", tensor name, shape_a, shape_b). Callers word the differences their way."""
    differences = []
    for name in sorted(set(config_a) | set(config_b)):
        if config_a.get(name) != config_b.get(name):
            differences.append(("config", name, config_a.get(name), config_b.get(name)))
    for name in sorted(set(state_a) ^ set(state_b)):
        differences.append(("key", name, name in state_a, name in state_b))
    for name in sorted(set(state_a) & set(state_b)):
        if state_a[name].shape != state_b[name].shape:
            differences.append(("shape", name, tuple(state_a[name].shape), tuple(state_b[name].shape)))
    return differences


def refuse_mismatch(path: str | Path, checkpoint: dict, model: nn.Module) -> None:
    """Raise CheckpointMismatch, naming every difference of configuration, keys and shapes, when the
    checkpoint's tensors do not fit `model`; configuration fields that change no shape may differ."""
    model = unwrap_model(model)
    differences = state_differences(
        checkpoint["config"], checkpoint["state"]["model"], dataclasses.asdict(model.config),
        model.state_dict()
    )
    if all(kind == "config" for kind, *_ in differences):
        return
    problems = [f"config {name}: checkpoint {a!r}, model {b!r}" for kind, name, a, b in differences
                if kind == "config"]
    for what, side in (("missing from the checkpoint", 3), ("not in the model", 2)):
        names = [difference[1] for difference in differences if difference[0] == "key" and difference[side]]
        if names:
            problems.append(f"{what}: {', '.join(names[:5])}" + (" …" if len(names) > 5 else ""))
    problems += [f"{name}: checkpoint {a}, model {b}" for kind, name, a, b in differences if kind == "shape"]
    raise CheckpointMismatch(
        f"{path} was written for another model configuration:\n  " + "\n  ".join(problems)
        + "\nbuild the model with the checkpoint's config: "
        "make_model(TransformerConfig(**read_checkpoint(path)['config']))"
    )
