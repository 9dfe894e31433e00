"""Shared helpers for the unit tests: small configurations, and weight copying from our layers
into PyTorch's reference layers (``torch.nn.MultiheadAttention``, ``TransformerEncoderLayer``, ...).

Mask conventions differ: ours are bool with True = *may attend*; PyTorch's bool masks use
True = *blocked*. The ``torch_*`` helpers convert ours into PyTorch's.
"""

import errno
import io
import os
import shutil
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from annotated_transformer.batching import Batch, batch_by_tokens, copy_task, make_batch
from annotated_transformer.model import DecoderLayer, EncoderLayer, Transformer, TransformerConfig, make_model
from annotated_transformer.multi_head_attention import MultiHeadAttention
from annotated_transformer.training import TrainConfig, Trainer

# The development tools some tests need: the [dev] extra (`make setup`), not the package's own
# dependencies nor its [test] extra (pytest, nbformat, PyYAML, packaging). A test that needs one skips,
# with the reason, where it is missing (a user's `pytest tests` beside an installed wheel), and
# fails where ANNOTATED_TRANSFORMER_REQUIRE_DEV=1 (`make unit`, in the project's .venv).
DEV_MODULES = {
    "nbdev": "nbdev, which exports the package from the notebooks",
    "nbclient": "nbclient, which runs the notebooks",
    "nbval": "nbval, which runs the notebooks",
    "jupyter_book": "jupyter-book, which builds the book",
    "sphinx": "Sphinx, which builds the book",
    "docutils": "docutils, which parses the book's pages",
    "myst_nb": "MyST-NB, which builds the book",
    "markdown_it": "markdown-it-py, which renders the book's Markdown",
    "playwright": "Playwright, which opens the book in a browser",
    "altair": "Altair, which draws the book's interactive charts",
    "vl_convert": "vl-convert, which renders the charts for the tests to read",
    "ipykernel": "ipykernel, which runs the notebooks",
    "IPython": "IPython, which runs the notebooks",
    "ruff": "ruff, the linter",
    # Build tools: pip is in a venv that `python -m venv` makes, setuptools (pyproject's build backend)
    # only up to Python 3.11; the tests that build the wheel offline need both.
    "pip": "pip, which builds the wheel",
    "setuptools": "setuptools, which builds the wheel",
    # The [test] extra's: missing only where pytest was installed alone.
    "nbformat": "nbformat, which reads the book's notebooks",
    "yaml": "PyYAML, which reads environment.yml and _toc.yml",
    "packaging": "packaging, which compares requirements",
}
TEST_EXTRA_MODULES = {"nbformat", "yaml", "packaging"}
REQUIRE_DEV = os.environ.get("ANNOTATED_TRANSFORMER_REQUIRE_DEV") == "1"


def dev_reason(name: str) -> str:
    """Why a test that needs the tool `name` (a key of DEV_MODULES, or a console script) skips."""
    what = DEV_MODULES.get(name, name)
    if name in TEST_EXTRA_MODULES:
        return f"needs {what}: the [test] extra (pip install -e '.[test]', or '.[dev]')"
    if name in ("pip", "setuptools"):
        return f"needs {what}, a build tool: pip install {name} (a venv made by `python -m venv` has pip)"
    return f"needs {what}, a development tool: the [dev] extra (pip install -e '.[dev]', or make setup)"


def need_dev_module(name: str):
    """The development tool's module `name` (pytest.importorskip), skipping the test where it is
    missing, except under ANNOTATED_TRANSFORMER_REQUIRE_DEV=1, where a missing tool fails."""
    if REQUIRE_DEV:
        import importlib

        return importlib.import_module(name)
    return pytest.importorskip(name, reason=dev_reason(name.split(".")[0]))


def is_installed(name: str) -> bool:
    """Whether the module `name` of DEV_MODULES is there, without importing it. pip and setuptools
    are looked up by their distributions: asking the import system for `pip` makes setuptools'
    distutils shim stand down for the whole process, and a later `import setuptools` (torch's
    benchmark utilities import it) then fails."""
    import importlib.metadata
    import importlib.util

    if name in ("pip", "setuptools"):
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True
    return importlib.util.find_spec(name) is not None


def need_dev_tools(*names: str) -> None:
    """Skip the test unless the modules `names` can be imported (found, not imported: importing
    setuptools in the test process would change distutils for it); under
    ANNOTATED_TRANSFORMER_REQUIRE_DEV=1 a missing one fails instead."""
    for name in names:
        if not is_installed(name):
            if REQUIRE_DEV:
                pytest.fail(f"missing {name}: {dev_reason(name)}")
            pytest.skip(dev_reason(name))


def need_dev_script(name: str, bin_dir: Path) -> str:
    """The console script `name` of a development tool, next to this Python or on PATH; the test
    skips where it is missing (fails under ANNOTATED_TRANSFORMER_REQUIRE_DEV=1)."""
    path = bin_dir / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        message = f"{name} not found next to the Python running the tests nor on PATH: {dev_reason(name)}"
        if REQUIRE_DEV:
            pytest.fail(message)
        pytest.skip(message)
    return found


# float32 tolerance required of every comparison with PyTorch's reference implementations.
TOL = {"atol": 1e-5, "rtol": 1e-5}


def small_config(**overrides) -> TransformerConfig:
    """A tiny configuration (d_model 32, 4 heads, 2 layers, no dropout) that runs in milliseconds."""
    fields = {
        "src_vocab_size": 23,
        "tgt_vocab_size": 23,
        "n_layers": 2,
        "d_model": 32,
        "d_ff": 64,
        "n_heads": 4,
        "dropout": 0.0,
        "max_len": 40,
    }
    fields.update(overrides)
    return TransformerConfig(**fields)


def tiny_model(seed: int = 0, **overrides) -> Transformer:
    """A model of `small_config`, initialized from `seed`."""
    torch.manual_seed(seed)
    return make_model(small_config(**overrides))


def tiny_trainer(model_seed: int = 0, model_overrides: dict | None = None, **config) -> Trainer:
    """A CPU trainer of a `tiny_model`: warmup 10, silent, no log points but the last (`config` changes)."""
    config = {"warmup": 10, "progress": False, "log_every": 0, **config}
    return Trainer(tiny_model(model_seed, **(model_overrides or {})), TrainConfig(**config), device="cpu")


COPY_PAIRS = copy_task(300, vocab_size=23, min_len=2, max_len=12, seed=5)
COPY_LENGTHS = [(len(s), len(t)) for s, t in COPY_PAIRS]


def copy_batches(epoch: int) -> list[Batch]:
    """One epoch of copy-task batches of about 200 tokens for a `tiny_trainer` (an `epoch_batches`)."""
    order = batch_by_tokens(COPY_LENGTHS, max_tokens=200, seed=0, epoch=epoch)
    return [make_batch([COPY_PAIRS[i] for i in indices]) for indices in order]


def parameters(trainer: Trainer) -> list[Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()]


def max_difference(a: list[Tensor], b: list[Tensor]) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


def assert_identical(a: list[Tensor] | nn.Module, b: list[Tensor] | nn.Module) -> None:
    """Bit for bit the same tensors (what an exactly resumed run must give): two lists of tensors, or
    two models, whose state_dicts must then hold the same names."""
    if isinstance(a, nn.Module):
        state, expected = a.state_dict(), b.state_dict()
        assert state.keys() == expected.keys()
        names, a, b = list(state), list(state.values()), [expected[name] for name in state]
    else:
        names = range(len(a))
    differing = {name: (x - y).abs().max().item() for name, x, y in zip(names, a, b, strict=True)
                 if not torch.equal(x, y)}
    assert not differing, f"{len(differing)} tensors differ: {dict(list(differing.items())[:3])}"


def small_model(**overrides) -> nn.Module:
    """A `tiny_model` of seed 0 in eval mode (`overrides` change its `small_config`)."""
    return tiny_model(0, **overrides).eval()


@torch.no_grad()
def copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Copy our W^Q, W^K, W^V, W^O into PyTorch's packed in_proj and out_proj."""
    theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
    theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
    theirs.out_proj.weight.copy_(ours.w_o.weight)
    theirs.out_proj.bias.copy_(ours.w_o.bias)


@torch.no_grad()
def _copy_linear_or_norm(ours: nn.Module, theirs: nn.Module) -> None:
    theirs.weight.copy_(ours.weight)
    theirs.bias.copy_(ours.bias)


def copy_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> None:
    copy_attention(ours.self_attn, theirs.self_attn)
    _copy_linear_or_norm(ours.feed_forward.w_1, theirs.linear1)
    _copy_linear_or_norm(ours.feed_forward.w_2, theirs.linear2)
    _copy_linear_or_norm(ours.sublayers[0].norm, theirs.norm1)
    _copy_linear_or_norm(ours.sublayers[1].norm, theirs.norm2)


def copy_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    copy_attention(ours.self_attn, theirs.self_attn)
    copy_attention(ours.src_attn, theirs.multihead_attn)
    _copy_linear_or_norm(ours.feed_forward.w_1, theirs.linear1)
    _copy_linear_or_norm(ours.feed_forward.w_2, theirs.linear2)
    _copy_linear_or_norm(ours.sublayers[0].norm, theirs.norm1)
    _copy_linear_or_norm(ours.sublayers[1].norm, theirs.norm2)
    _copy_linear_or_norm(ours.sublayers[2].norm, theirs.norm3)


def copy_layer_norm(ours: nn.LayerNorm, theirs: nn.LayerNorm) -> None:
    _copy_linear_or_norm(ours, theirs)


def _torch_layer_kwargs(config: TransformerConfig) -> dict:
    """PyTorch layer arguments for the same sizes as `config`, dropout off."""
    return {
        "d_model": config.d_model,
        "nhead": config.n_heads,
        "dim_feedforward": config.d_ff,
        "dropout": 0.0,
        "batch_first": True,
        "norm_first": config.norm_position == "pre",
        "layer_norm_eps": config.layer_norm_eps,
    }


def torch_encoder_layer(config: TransformerConfig) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(**_torch_layer_kwargs(config))


def torch_decoder_layer(config: TransformerConfig) -> nn.TransformerDecoderLayer:
    return nn.TransformerDecoderLayer(**_torch_layer_kwargs(config))


def torch_key_padding(mask: Tensor) -> Tensor:
    """Our padding mask (batch, 1, len), True = real token → PyTorch's (batch, len), True = padding."""
    return ~mask.squeeze(1)


def torch_causal(size: int) -> Tensor:
    """PyTorch's bool causal mask (size, size): True above the diagonal (= blocked)."""
    return torch.ones(size, size, dtype=torch.bool).triu(diagonal=1)


def set_fused(model: nn.Module, fused: bool) -> None:
    """Switch every MultiHeadAttention in `model` between the SDPA kernel and `attention()`."""
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.fused = fused


def one_line(info: pytest.ExceptionInfo) -> str:
    """The message of a raised exception, which must be one line."""
    message = str(info.value)
    assert "\n" not in message, message
    return message


def fails(capsys, main, *argv) -> str:
    """Run a command of `main` that must fail: exit status 2 and an error without a traceback;
    returns it (argparse's own errors come after its usage lines)."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(argument) for argument in argv])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert "Traceback" not in error, error
    return error


# The recipe.json of the tests' tiny recipe (`get_recipe("builtin", n_layers=1, d_model=32, ...)`) as
# the package wrote it before a recipe held the model's and the training's configurations: one flat
# dict, `decoder_layers` for n_decoder_layers, and no attention_dropout, ffn_dropout, max_len,
# layer_norm_eps or bpe_dropout (the runs of then used their defaults).
OLD_RECIPE_JSON = {
    "name": "builtin", "corpus": "builtin", "vocab": "bpe", "vocab_size": 300, "min_freq": 2, "n_layers": 1,
    "decoder_layers": None, "d_model": 32, "d_ff": 64, "n_heads": 2, "d_k": None, "d_v": None, "dropout": 0.1,
    "positional": "sinusoidal", "norm_position": "post", "max_tokens": 600, "accumulate": 1, "max_steps": 4,
    "warmup": 10, "warmup_ramp": True, "lr_factor": 0.5, "cooldown": 0.0, "label_smoothing": 0.1,
    "clip_grad_norm": None, "checkpoint_every": 2, "average_last": 2, "beam_size": 4, "alpha": 0.6,
    "precision": "auto", "compile": False, "seed": 0, "max_minutes": None,
}


# The command-line options of the tests' tiny training run (`python -m annotated_transformer train`):
# 3 steps of a one-layer model of the builtin configuration, a checkpoint at every step, the last two
# averaged into model.pt. conftest.py's `tiny_run` is this run, trained once.
TINY_TRAIN = ["--max-steps", "3", "--d-model", "32", "--d-ff", "64", "--layers", "1", "--heads", "2",
              "--checkpoint-every", "1", "--average-last", "2", "--quiet"]


def new_run(run: Path, tmp_path: Path, name: str = "new") -> Path:
    """An empty run directory that already holds `run`'s vocabulary and encoded corpus, so that training
    in it skips building them (a run directory may hold just these)."""
    run_dir = tmp_path / name
    run_dir.mkdir()
    shutil.copy(run / "vocab.json", run_dir / "vocab.json")
    shutil.copytree(run / "cache", run_dir / "cache")
    return run_dir


class FullFile(io.FileIO):
    """A file on a disk that has `room` bytes left for it: a larger write fails with `code` (by
    default ENOSPC, what a full file system says)."""

    def __init__(self, file, mode: str = "wb", room: int = 0, code: int = errno.ENOSPC) -> None:
        super().__init__(file, mode)
        self.room, self.code = room, code

    def write(self, data) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(self.code, os.strerror(self.code))
        return super().write(data)


def version_2(checkpoint: dict) -> dict:
    """A checkpoint of version 3 (as `torch.load` reads the file) as the releases before wrote it:
    a trainer's state in fixed entries, with its position in the data, its TrainConfig (which then
    named two fields since removed) and its scaler in `extra`, and a digest of all of it."""
    from annotated_transformer.checkpoints import checkpoint_sha256

    state, extra = checkpoint["state"], dict(checkpoint["extra"])
    old = {"format": checkpoint["format"], "version": 2, "config": checkpoint["config"],
           "model": state["model"], "optimizer": None, "scheduler": None, "step": state["step"], "rng": {},
           "extra": extra}
    if "optimizer" in state:  # a trainer's
        extra |= {"epoch": state["epoch"], "position": state["position"],
                  "train_config": {**state["config"], "checkpoint_dir": "old", "keep_checkpoints": 5}}
        if state["scaler"] is not None:
            extra["scaler"] = state["scaler"]
        old |= {"optimizer": state["optimizer"], "scheduler": state["scheduler"], "rng": state["rng"]}
    old["sha256"] = checkpoint_sha256(old)
    return old
