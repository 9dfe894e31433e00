"""The one notion of "this process writes" (helpers/processes.py): rank 0 of a torch.distributed run,
or a lone process, writes a run's files and notes; every other rank computes and writes nothing.

The other ranks are pretended by patching torch.distributed's own answers (initialized, rank 1 of 2),
so that every part of the package that asks is asked the same way a real second process is.
"""

import json

import pytest
import torch

from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.helpers.processes import is_main_process, rank_and_world_size
from annotated_transformer.runs.run_files import (
    RunHistory,
    _settle_recipe,
    note,
    record_hardware,
    run_lock,
)


def pretend_rank(monkeypatch, rank: int, world_size: int = 2) -> None:
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda *args: world_size)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda *args: rank)


def test_a_lone_process_is_rank_0_of_1():
    assert rank_and_world_size() == (0, 1)
    assert is_main_process()


@pytest.mark.parametrize("rank", [0, 1])
def test_only_rank_0_writes_the_run_files_and_notes(monkeypatch, tmp_path, capsys, rank):
    pretend_rank(monkeypatch, rank)
    assert rank_and_world_size() == (rank, 2) and is_main_process() == (rank == 0)
    files = RunDirectory(tmp_path / "run")
    with run_lock(files.path):
        _settle_recipe(files.path, {"lr": 1.0})
        history = RunHistory(files.history, resumed_step=0)
        history.records.append({"step": 1, "minutes": 0.1})
        history.save()
        record_hardware(files.path, torch.device("cpu"), world_size=2)
        note("a note")
    written = sorted(path.name for path in files.path.iterdir())
    if rank == 0:
        assert written == ["hardware.json", "history.json", "recipe.json", "run.lock"]
        assert json.loads(files.recipe.read_text()) == {"lr": 1.0}
        assert capsys.readouterr().err == "note: a note\n"
    else:
        assert written == []  # the folder is made, nothing is written in it
        assert capsys.readouterr().err == ""
