"""Faults of the machine, not of the input (chapters 10, 13, 14 and 16): a full disk while any file of
a run or any output is written, two trainings of one run directory, a reader of a run that is still
training, and what the command line says of each: one line, no traceback, exit status 2.

A full disk is simulated (portable, no root needed): the package's writers get files that refuse to
grow past a size with ENOSPC, as a full file system does. `torch.save` then fails as it does on a
real one, with its zip writer's "unexpected pos" and the OSError in the exception's context.
"""

import builtins
import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import helpers
import pytest
import torch
from helpers import FullFile, new_run, tiny_model

from annotated_transformer.__main__ import main
from annotated_transformer.checkpoints import checkpoint_paths, read_checkpoint, save_checkpoint
from annotated_transformer.companions.translation_checks import TrainingWarning, batch_warning
from annotated_transformer.helpers import files
from annotated_transformer.helpers.files import DiskFullError, atomic_write_text
from annotated_transformer.recipes import get_recipe
from annotated_transformer.runs.run_files import RunInUse, run_lock
from annotated_transformer.runs.translation import train_translation

TINY = [*helpers.TINY_TRAIN, "--device", "cpu"]


class FullDisk:
    """The package's writer (atomic_write, under atomic_save and atomic_write_text) on a disk that
    fills up: once `fill` is called, the temporary file of `target` (by name) gets `room` bytes,
    after `after` files of that name were written whole. `free()` makes room again."""

    def __init__(self, monkeypatch) -> None:
        self.target: str | None = None
        monkeypatch.setattr(files, "open", self.open, raising=False)

    def fill(self, target: str, room: int = 100, after: int = 0, code: int = errno.ENOSPC) -> None:
        self.target, self.room, self.after, self.code = target, room, after, code

    def free(self) -> None:
        self.target = None

    def open(self, path, mode="r", *args, **kwargs):
        name = Path(path).name
        if "w" not in mode or self.target is None or not name.startswith(f".{self.target}."):
            return builtins.open(path, mode, *args, **kwargs)
        if self.after > 0:
            self.after -= 1
            return builtins.open(path, mode, *args, **kwargs)
        file = FullFile(path, "wb", room=self.room, code=self.code)
        return file if "b" in mode else io.TextIOWrapper(io.BufferedWriter(file), encoding="utf-8")


@pytest.fixture
def disk(monkeypatch):
    return FullDisk(monkeypatch)


@pytest.fixture
def run(tiny_run):
    """The finished tiny run of the builtin configuration (conftest.py), trained once for the session
    with the options TINY: the tests below only read it, or train in a `new_run` beside it."""
    return tiny_run


def fails(capsys, *argv) -> str:
    """The command's error: one line, for every fault here."""
    error = helpers.fails(capsys, main, *argv)
    assert "\n" not in error, error
    return error


def temporaries(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.rglob(".*.tmp"))


# --- a full disk: the writers ---------------------------------------------------------------------


def test_a_checkpoint_on_a_full_disk_names_the_file_and_keeps_the_one_before(tmp_path, disk):
    path = save_checkpoint(tmp_path / "step_00000001.pt", tiny_model(), step=1)
    before = path.read_bytes()
    disk.fill("step_00000001.pt", room=5000)
    with pytest.raises(DiskFullError) as error:
        save_checkpoint(path, tiny_model(), step=2)
    assert isinstance(error.value.__cause__, RuntimeError)  # torch.save's "unexpected pos", explained
    assert str(error.value).startswith(f"the disk is full: {path} could not be written (No space left on "
                                       f"device), and nothing was changed; free some space")
    assert error.value.errno == errno.ENOSPC and error.value.filename == str(path)
    assert path.read_bytes() == before and temporaries(tmp_path) == []


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_text_file_on_a_full_disk_or_over_quota_names_the_file(tmp_path, disk, code):
    path = atomic_write_text(tmp_path / "history.json", "[1, 2]")
    disk.fill("history.json", room=3, code=code)
    with pytest.raises(DiskFullError) as error:
        atomic_write_text(path, "[1, 2, 3]")
    full = "the disk is full" if code == errno.ENOSPC else "the disk quota is used up"
    assert str(error.value).startswith(f"{full}: {path} could not be written ({os.strerror(code)})")
    assert path.read_text() == "[1, 2]" and temporaries(tmp_path) == []


# --- a full disk: a training run ------------------------------------------------------------------


def test_a_full_disk_at_a_checkpoint_ends_training_in_one_line_and_the_same_command_resumes(
    run, tmp_path, capsys, disk
):
    run_dir = new_run(run, tmp_path)
    disk.fill("step_00000003.pt", room=5000)
    message = fails(capsys, "train", "--run-dir", run_dir, *TINY)
    path = run_dir / "checkpoints" / "step_00000003.pt"
    assert message == (
        f"python -m annotated_transformer train: error: the disk is full: {path} could not be written (No "
        f"space left on device), and nothing was changed; the run can resume from its checkpoint "
        f"step_00000002.pt: free some space on its disk and run the same training again, or train in a new "
        f"run directory on another disk"
    )
    kept = checkpoint_paths(run_dir / "checkpoints")
    assert [p.name for p in kept] == ["step_00000001.pt", "step_00000002.pt"]  # none deleted for the new one
    assert [read_checkpoint(p)["state"]["step"] for p in kept] == [1, 2] and temporaries(run_dir) == []
    disk.free()
    assert main(["train", "--run-dir", str(run_dir), *TINY]) == 0
    assert "resumed" in capsys.readouterr().out
    assert read_checkpoint(run_dir / "model.pt")["state"]["step"] == 3


@pytest.mark.parametrize(("target", "after", "resume"), [
    ("history.json", 1, "the run can resume from its checkpoint step_00000001.pt"),
    ("model.pt", 0, "the run can resume from its checkpoint step_00000003.pt"),
    ("vocab.json", 0, "the run holds no checkpoint yet"),
    ("recipe.json", 0, "the run holds no checkpoint yet"),
])
def test_a_full_disk_at_any_file_of_a_run_names_it_and_what_the_run_can_resume_from(
    run, tmp_path, capsys, disk, target, after, resume
):
    run_dir = new_run(run, tmp_path)
    if target == "vocab.json":
        (run_dir / "vocab.json").unlink()
    disk.fill(target, after=after)
    message = fails(capsys, "train", "--run-dir", run_dir, *TINY)
    assert f"error: the disk is full: {run_dir / target} could not be written" in message
    assert f"nothing was changed; {resume}: free some space" in message
    assert temporaries(run_dir) == []
    if target == "history.json":  # the history written before is whole
        assert [record["step"] for record in json.loads((run_dir / "history.json").read_text())] == [1]


# --- a full disk: the outputs of the commands -----------------------------------------------------


@pytest.mark.parametrize("command", [
    ["translate", "RUN", "Der Hund.", "--beam-size", "1", "--device", "cpu", "--output", "OUT"],
    ["evaluate", "RUN", "--limit", "2", "--beam-size", "1", "--device", "cpu", "--output", "OUT"],
    ["average", "RUN/checkpoints", "-k", "2", "-o", "OUT"],
])
def test_a_full_disk_at_an_output_names_it_and_keeps_the_old_one(run, tmp_path, capsys, disk, command):
    output = tmp_path / "out"
    output.write_text("the old output")
    disk.fill("out")
    argv = [part.replace("RUN", str(run)).replace("OUT", str(output)) for part in command]
    message = fails(capsys, *argv)
    assert message.endswith(f"error: the disk is full: {output} could not be written (No space left on "
                            f"device), and nothing was changed; free some space on its disk, or give "
                            f"--output a file on another disk")
    assert output.read_text() == "the old output" and temporaries(tmp_path) == []


# --- two trainings of one run directory -----------------------------------------------------------

def test_a_second_training_of_a_run_is_refused_naming_the_process_and_a_killed_one_leaves_no_lock(
    run, tmp_path, capsys
):
    pytest.importorskip("fcntl")
    run_dir = new_run(run, tmp_path)
    command = ["train", "--run-dir", str(run_dir), *TINY, "--max-steps", "100000",
               "--checkpoint-every", "100000"]  # trains until killed
    first = subprocess.Popen([sys.executable, "-m", "annotated_transformer", *command])
    try:  # the first training has settled its recipe (it holds the lock by then) and goes on training
        deadline = time.monotonic() + 120
        while not (run_dir / "recipe.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.poll() is None
        message = fails(capsys, "train", "--run-dir", run_dir, *TINY)
        assert f"error: {run_dir} is in use: process {first.pid} is training in it" in message
        assert "wait for it to end or stop it, or train in a new run directory" in message
    finally:
        os.kill(first.pid, signal.SIGKILL)  # as a crash: the lock file stays, the lock goes
        first.wait()
    assert (run_dir / "run.lock").exists()
    assert main(["train", "--run-dir", str(run_dir), *TINY]) == 0
    assert (run_dir / "run.lock").read_text().split()[0] == str(os.getpid())


def test_the_library_refuses_a_run_that_is_being_trained(run, tmp_path):
    pytest.importorskip("fcntl")
    run_dir = new_run(run, tmp_path)
    recipe = get_recipe("builtin", d_model=32, d_ff=64, n_layers=1, n_heads=2, max_steps=2)
    with run_lock(run_dir), pytest.raises(RunInUse, match=f"process {os.getpid()} is training in it"):
        train_translation(recipe, run_dir, device="cpu", progress=False)
    assert train_translation(recipe, run_dir, device="cpu", progress=False).steps == 2  # released


def test_a_reader_of_a_run_in_training_only_ever_sees_complete_checkpoints(run, tmp_path, monkeypatch):
    """Halfway through every write of a checkpoint or model.pt (its bytes written, not yet renamed),
    a reader (translate, evaluate, average) lists the run's checkpoints and reads them all."""
    run_dir = new_run(run, tmp_path)
    save, reads = torch.save, []

    def save_and_read(obj, file, *args, **kwargs):
        save(obj, file, *args, **kwargs)
        name = Path(file.name).name
        target = name[1:].rsplit(".", 2)[0] if name.startswith(".") else name  # .NAME.PID.tmp
        if not (target.startswith("step_") or target == "model.pt"):
            return
        visible = [p.name for p in checkpoint_paths(run_dir / "checkpoints")]
        visible += ["model.pt"] if (run_dir / "model.pt").exists() else []
        assert target not in visible, f"{target} is visible before its write is complete"
        for path in visible:
            reads.append(read_checkpoint(run_dir / path if path == "model.pt" else
                                         run_dir / "checkpoints" / path)["state"]["step"])

    monkeypatch.setattr(torch, "save", save_and_read)
    assert main(["train", "--run-dir", str(run_dir), *TINY]) == 0
    assert reads == [1, 1, 2, 2, 3]  # at steps 2 and 3 (step 1 kept: two to average), and at model.pt


# --- mistakes the machine's state makes look like faults ------------------------------------------


def test_a_run_directory_that_is_a_file_is_named_as_such(tmp_path, capsys):
    file = tmp_path / "notes.txt"
    file.write_text("not a run")
    message = fails(capsys, "train", "--run-dir", file, *TINY)
    assert message.endswith(f"error: the run directory {file} is a file, not a folder: move the file, or "
                            f"train in a new run directory")
    message = fails(capsys, "train", "--run-dir", file / "run", *TINY)
    assert f"the run directory {file / 'run'} cannot be made: {file} is a file, not a folder" in message
    assert file.read_text() == "not a run"


def test_a_file_that_was_never_a_checkpoint_is_not_called_damaged(run, tmp_path, capsys):
    text = tmp_path / "notes.pt"
    text.write_text("a text file, not a checkpoint\n")
    message = fails(capsys, "translate", text, "Der Hund.")
    assert message.endswith(f"error: {text} is not a checkpoint: it does not begin as the files of "
                            f"torch.save do (a zip archive); give a run directory, its model.pt, or one "
                            f"of its checkpoints/step_*.pt")
    assert "delete" not in message
    cut = tmp_path / "cut.pt"  # a checkpoint cut short is damage, and keeps its advice
    cut.write_bytes((run / "model.pt").read_bytes()[:5000])
    assert "is truncated or corrupt" in fails(capsys, "translate", cut, "Der Hund.")


@pytest.mark.parametrize(("command", "example"), [
    (["translate", "RUN", "Der Hund."], "translations.txt"),
    (["evaluate", "RUN"], "evaluation.json"),
    (["average", "RUN/checkpoints", "-k", "2"], "averaged.pt"),
])
def test_an_output_ending_in_a_slash_is_refused_before_the_work(run, tmp_path, capsys, command, example):
    output = f"{tmp_path / 'newdir'}/"
    message = fails(capsys, *[part.replace("RUN", str(run)) for part in command], "--output", output)
    assert message.endswith(f"error: --output {output} names a directory (it ends in /): give the name of a "
                            f"file to write, e.g. {tmp_path / 'newdir' / example}")
    assert not (tmp_path / "newdir").exists()


def test_batches_of_single_sentences_are_warned_of(run, tmp_path, capsys):
    assert main(["train", "--run-dir", str(new_run(run, tmp_path)), *TINY, "--max-tokens", "3"]) == 0
    error = capsys.readouterr().err
    assert error.startswith("python -m annotated_transformer train: warning: every step trains on a single "
                            "sentence pair: 100% of the training pairs")
    assert "(--max-tokens, now 3)" in error and error.count("\n") == 1
    assert batch_warning([(10, 9)] * 10, 1500) is None
    warning = batch_warning([(10, 9)] * 6 + [(2, 1)] * 4, 15)
    assert str(warning).startswith("most steps train on a single")
    assert [setting.name for setting in warning.settings] == ["max_tokens"]
    with pytest.warns(TrainingWarning, match=r"\(max_tokens, now 3\)"):
        recipe = get_recipe("builtin", d_model=32, d_ff=64, n_layers=1, n_heads=2, max_steps=1, max_tokens=3)
        train_translation(recipe, new_run(run, tmp_path, "library"), device="cpu", progress=False)

