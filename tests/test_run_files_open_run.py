"""`open_run`, the one session of a run directory (chapter 10's long runs, chapter 15's ranks): the ranks
that wait for rank 0, the files only rank 0 touches, and a full disk said with what to do."""

import errno

import pytest

from annotated_transformer.helpers.files import DiskFullError
from annotated_transformer.runs import run_files
from annotated_transformer.runs.run_files import open_run

RECIPE = {"max_steps": 40, "cooldown": 0.0}


def stale_temporary(directory):
    """What a writer killed mid-write leaves (`atomic_write`): `.NAME.PID.tmp` of a process that is gone."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ".recipe.json.999999999.tmp"
    path.write_text("half")
    return path


@pytest.mark.parametrize("world_size, barriers", [(1, 0), (2, 1), (3, 1)])
def test_every_rank_of_a_distributed_run_waits_for_rank_0_to_settle_the_run(tmp_path, monkeypatch,
                                                                            world_size, barriers):
    """With two processes or more, each waits at a barrier until rank 0 has settled the recipe; one
    process alone has nobody to wait for (and no process group to call)."""
    calls = []
    monkeypatch.setattr(run_files, "rank_and_world_size", lambda: (0, world_size))
    monkeypatch.setattr(run_files.torch.distributed, "barrier", lambda: calls.append("barrier"))
    with open_run(tmp_path / "run", RECIPE):
        assert len(calls) == barriers  # before the session's block starts
    assert len(calls) == barriers


def test_only_rank_0_removes_what_a_killed_writer_left(tmp_path, monkeypatch):
    """Another rank must not write in the run directory: a half-written file there is rank 0's to
    remove, under its lock."""
    run_dir = tmp_path / "run"
    left = stale_temporary(run_dir)
    monkeypatch.setattr(run_files, "is_main_process", lambda: False)
    monkeypatch.setattr(run_files, "_settle_recipe", lambda *args: None)  # rank 0's job, not tested here
    with open_run(run_dir, RECIPE):
        pass
    assert left.exists()
    monkeypatch.undo()
    with open_run(run_dir, RECIPE):
        pass
    assert not left.exists()


def test_a_full_disk_in_a_session_without_checkpoints_says_so_and_what_to_do(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(DiskFullError) as raised, open_run(run_dir, RECIPE):
        raise OSError(errno.ENOSPC, "No space left on device", str(run_dir / "history.json"))
    assert raised.value.path == run_dir / "history.json"
    assert "the run holds no checkpoint yet: free some space on its disk and run the same training again" \
        in str(raised.value)
