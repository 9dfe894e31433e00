"""`config_sha256`, the fingerprint of a model configuration that checkpoints carry (chapter 5's
`TransformerConfig`, or the dict a checkpoint holds), so that the files of different models are never
mixed (chapter 14)."""

import hashlib
import json
from dataclasses import asdict, is_dataclass
from typing import Any

# Fields added after checkpoints were first written, at the value that leaves the model as it was:
# left out of the fingerprint there, so that checkpoints saved before they existed keep theirs.
_LATER_FIELD_DEFAULTS = {("n_decoder_layers", None)}


def config_sha256(config: Any) -> str:
    """A SHA-256 fingerprint of a model configuration (a dataclass, or the dict a checkpoint holds)."""
    fields = asdict(config) if is_dataclass(config) else dict(config)
    fields = {name: value for name, value in fields.items() if (name, value) not in _LATER_FIELD_DEFAULTS}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
