"""The machinery of chapter 9's training loop (annotated_transformer/machinery/): the class written over
several cells, the progress display, the prefetching thread, the checks of a TrainConfig, the plain
model inside its wrappers, and what the platform can do."""

import sys
import threading
from types import SimpleNamespace

import pytest
import torch
from helpers import tiny_model

from annotated_transformer.companions.training_checks import check_train_config
from annotated_transformer.helpers.cell_classes import add_to_class
from annotated_transformer.helpers.errors import FieldError
from annotated_transformer.helpers.model_wrappers import unwrap_model
from annotated_transformer.helpers.prefetch import prefetched
from annotated_transformer.helpers.progress import Progress
from annotated_transformer.helpers.torch_support import (
    check_compile_support,
    check_precision_support,
    reuse_freed_memory,
)
from annotated_transformer.training import TrainConfig

# --- add_to_class --------------------------------------------------------------------------------


def test_add_to_class_makes_a_method_and_returns_the_function():
    class Counter:
        def __init__(self):
            self.n = 0

    @add_to_class(Counter)
    def bump(self, by: int = 1) -> int:
        self.n += by
        return self.n

    assert bump is Counter.bump  # the name stays bound to the function, not to None
    counter = Counter()
    assert counter.bump() == 1 and counter.bump(2) == 3


# --- Progress ------------------------------------------------------------------------------------


def record(step: int, n_tokens: int = 100) -> SimpleNamespace:
    return SimpleNamespace(step=step, loss=2.5, nll=1.0, n_tokens=n_tokens, lr=1e-3)


def test_progress_prints_a_line_at_each_log_point_off_a_terminal(capsys):
    progress = Progress(total=10, initial=0)
    for _ in range(3):
        progress.advance()
    progress.log([record(1), record(2), record(3)])
    progress.close()
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "\r" not in out  # no bar outside a terminal
    assert "step      3  loss 2.500  ppl 2.72  lr 1.00e-03" in out and "tok/s" in out


def test_disabled_progress_prints_nothing(capsys):
    progress = Progress(total=5, initial=2, enabled=False)
    progress.advance()
    progress.log([record(3)])
    progress.log([])
    progress.close()
    assert capsys.readouterr().out == ""


# --- prefetched ----------------------------------------------------------------------------------


def test_prefetched_keeps_the_order_and_builds_in_another_thread():
    threads = []

    def builder(i: int):
        def build() -> int:
            threads.append(threading.get_ident())
            return i * i

        return build

    assert list(prefetched(builder(i) for i in range(7))) == [i * i for i in range(7)]
    assert set(threads) == {threads[0]} and threads[0] != threading.get_ident()
    assert list(prefetched([])) == []
    assert list(prefetched([builder(3)], ahead=5)) == [9]


def test_prefetched_raises_a_builders_error_where_its_result_is_asked_for():
    def failing() -> int:
        raise OSError("disk gone")

    results = prefetched([lambda: 1, failing, lambda: 3])
    assert next(results) == 1
    with pytest.raises(OSError, match="disk gone"):
        next(results)
    with pytest.raises(ValueError, match="ahead"):
        list(prefetched([lambda: 1], ahead=0))


# --- check_train_config --------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [("max_steps", 0), ("accumulate", 0), ("warmup", -1),
                                              ("log_every", -1), ("checkpoint_every", -5), ("cooldown", 1.5),
                                              ("label_smoothing", 1.0), ("lr_factor", float("inf")),
                                              ("lr_factor", 0.0), ("clip_grad_norm", -1.0)])
def test_train_config_checks_name_the_field(field, value):
    with pytest.raises(FieldError) as error:
        TrainConfig(**{field: value})
    assert error.value.field == field and repr(value) in str(error.value)


def test_a_sound_config_passes_the_checks():
    check_train_config(TrainConfig(clip_grad_norm=1.0, cooldown=0.3, log_every=0))


# --- unwrap_model ----------------------------------------------------------------------------------


def test_unwrap_model_finds_the_plain_model():
    model = tiny_model()
    assert unwrap_model(model) is model

    class Compiled(torch.nn.Module):  # what torch.compile's wrapper looks like: the model in `_orig_mod`
        def __init__(self, inner):
            super().__init__()
            self._orig_mod = inner

    assert unwrap_model(Compiled(Compiled(model))) is model
    assert set(unwrap_model(Compiled(model)).state_dict()) == set(model.state_dict())


# --- platform ------------------------------------------------------------------------------------


def test_precision_refusals_say_what_the_device_can_run():
    check_precision_support(torch.device("cpu"), "bf16")
    check_precision_support(torch.device("cpu"), "fp32")
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        check_precision_support(torch.device("cpu"), "fp16")


def test_compile_support_on_the_cpu_needs_a_cpp_compiler(monkeypatch):
    import annotated_transformer.helpers.torch_support as platform

    monkeypatch.setattr(platform.shutil, "which", lambda name: None)
    if torch._dynamo.is_dynamo_supported():
        with pytest.raises(RuntimeError, match="C\\+\\+ compiler"):
            check_compile_support(torch.device("cpu"))


def test_freed_memory_reuse_is_applied_on_linux_only():
    applied = reuse_freed_memory()
    assert applied == sys.platform.startswith("linux")
    assert reuse_freed_memory() == applied  # idempotent
