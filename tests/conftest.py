"""Test-wide settings, and the fixtures that tests of several files share.

The tests build tiny models (d_model 32), for which PyTorch's intra-op threads cost more than they
save: on a 2-core CI machine, two threads that busy-wait for each other are slower than one, and
much slower when another process shares the cores. One thread makes the suite fast and its
timing predictable; results do not depend on the thread count beyond float rounding. The same holds
for the Python processes that tests start (the scripts of experiments/ and benchmarks/ in their tiny
modes, the workers of chapter 18's runner, notebook kernels): OMP_NUM_THREADS=1 in the environment
they inherit gives them one thread too (a tiny-mode profile of one training step took 27 s with
two threads and 11 s with one, on two cores shared with another job).
"""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import DEV_MODULES, REQUIRE_DEV, TINY_TRAIN, dev_reason, is_installed

torch.set_num_threads(1)
os.environ["OMP_NUM_THREADS"] = "1"  # for the processes the tests start


def pytest_configure(config):
    """Two checks of where the tests run, before any test:

    - `make unit` sets ANNOTATED_TRANSFORMER_REQUIRE_DEV=1: every development tool must be there, so
      that no test skips for a missing one in the project's .venv (elsewhere they skip, with the reason);
    - `make matrix` (tools/version_matrix.py) sets ANNOTATED_TRANSFORMER_EXPECT_PACKAGE_IN to the site
      folder of the environment it built: the tests must import the installed wheel, never this
      checkout's annotated_transformer/."""
    if REQUIRE_DEV:
        missing = sorted(name for name in DEV_MODULES if not is_installed(name))
        if missing:
            raise pytest.UsageError(f"ANNOTATED_TRANSFORMER_REQUIRE_DEV=1, but these development tools are "
                                    f"missing: {missing}: run `make setup` (pip install -e '.[dev]')")
    expected = os.environ.get("ANNOTATED_TRANSFORMER_EXPECT_PACKAGE_IN")
    if expected:
        import annotated_transformer

        location = Path(annotated_transformer.__file__).resolve()
        if not location.is_relative_to(Path(expected).resolve()):
            raise pytest.UsageError(f"the tests import {location}, not the package installed in {expected}")


class _ModuleNeedingDevTools(pytest.Module):
    """A test module whose import fails only because a development tool is missing is skipped, with
    the reason, instead of failing to collect (as `pytest.importorskip` would do in the module)."""

    def collect(self):
        try:
            return super().collect()
        except self.CollectError as error:
            cause = error.__cause__
            name = getattr(cause, "name", None) if isinstance(cause, ModuleNotFoundError) else None
            top = name.split(".")[0] if name else None
            if top not in DEV_MODULES or REQUIRE_DEV:
                raise
            pytest.skip(f"{self.path.name}: {dev_reason(top)}", allow_module_level=True)


def pytest_pycollect_makemodule(module_path, parent):
    return _ModuleNeedingDevTools.from_parent(parent, path=module_path)


def _contents(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by its relative path: its bytes."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Iterator[Path]:
    """A finished tiny training run of the builtin configuration (`helpers.TINY_TRAIN`, a few seconds),
    trained once for the whole session and shared by the tests of the command line and of faults.

    Tests only read it: a test that trains on, damages or otherwise changes a run works on a copy
    (`shutil.copytree(tiny_run, tmp_path / "run")`) or in a `helpers.new_run`. At the end of the
    session the run must hold exactly the files and bytes it was trained with, so that a test that
    changed it by mistake fails here instead of making later tests depend on their order."""
    from annotated_transformer.__main__ import main

    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    assert main(["train", "--config", "builtin", "--run-dir", str(run_dir), "--device", "cpu",
                 *TINY_TRAIN]) == 0
    trained = _contents(run_dir)
    yield run_dir
    now = _contents(run_dir)
    changed = sorted(name for name in trained.keys() | now.keys() if trained.get(name) != now.get(name))
    assert not changed, f"a test changed the shared tiny run (it must work on a copy): {changed}"


@pytest.fixture(scope="session")
def bpe_vocabs():
    """A BPE vocabulary of the built-in corpus (400 pieces), shared by the tests of vocabulary files and
    of the corpus cache; tests only read it."""
    from annotated_transformer.data import builtin_corpus
    from annotated_transformer.tokenization import build_vocabularies

    return build_vocabularies(builtin_corpus("train"), "bpe", vocab_size=400)


@pytest.fixture(scope="session")
def word_vocabs():
    """Word vocabularies of the built-in corpus, shared as `bpe_vocabs` is."""
    from annotated_transformer.data import builtin_corpus
    from annotated_transformer.tokenization import build_vocabularies

    return build_vocabularies(builtin_corpus("train"), "word")
