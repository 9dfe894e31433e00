"""The run's lock and its full-disk advice (annotated_transformer/runs/run_files.py): `run_lock` holds
`run.lock` (its holder's pid and host inside) on rank 0 only, refuses a second holder in one line that
names the holder, takes over a stale lock, and lets go on exit and on error; `_disk_full_advice` turns a
full disk (ENOSPC, EDQUOT) into one line naming the file and the checkpoint to resume from, and lets any
other error through unchanged. Fast, in this process only (a second holder is another open file)."""

import errno
import fcntl
import os
import socket
import stat
from types import SimpleNamespace

import pytest

from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.helpers.files import DiskFullError
from annotated_transformer.runs import run_files
from annotated_transformer.runs.run_files import RunInUse, run_lock

ADVICE = ("free some space on its disk and run the same training again, or train in a new run directory "
          "on another disk")


def refusal(run_dir, who):
    """The one line that refuses a run directory held by `who`."""
    return (f"{run_dir} is in use: {who} is training in it (it holds {run_dir / 'run.lock'}), and two "
            f"trainings would overwrite each other's checkpoints; wait for it to end or stop it, or train "
            f"in a new run directory")


def hold_by_hand(lock, content: bytes):
    """Another holder of `lock`: a file written by hand with `content`, flocked through its own open file
    (a second open file conflicts with run_lock's, even in this process). Returns the fd to close."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_bytes(content)
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_lock_file_holds_the_pid_and_host_of_its_holder_exactly(tmp_path):
    """run_lock makes the run directory and writes `run.lock` as "PID HOST\\n", from byte 0."""
    run_dir = tmp_path / "a" / "run"
    with run_lock(run_dir):
        assert (run_dir / "run.lock").read_bytes() == f"{os.getpid()} {socket.gethostname()}\n".encode()


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    """A run.lock left by a process that ended (no one holds its flock) is taken, and rewritten whole."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.lock").write_text("999999999 a-very-long-host-name-of-a-machine-long-gone.example.org\n")
    with run_lock(run_dir):
        assert (run_dir / "run.lock").read_text() == f"{os.getpid()} {socket.gethostname()}\n"


def test_lock_file_is_readable_by_all_and_written_by_its_owner(tmp_path):
    """run.lock is made with mode 0o644 (whatever the umask allows of it): others can read who holds it."""
    old = os.umask(0)
    try:
        with run_lock(tmp_path / "run"):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "run" / "run.lock").stat().st_mode) == 0o644


def test_second_holder_is_refused_with_the_holders_pid(tmp_path):
    """While one run_lock holds the run, a second is refused at once, naming this process (same host: no
    host named); the first one's block goes on, and the run is free again once it ends."""
    run_dir = tmp_path / "run"
    with run_lock(run_dir):
        with pytest.raises(RunInUse) as refused:
            with run_lock(run_dir):
                pytest.fail("a second holder ran its block")
        assert str(refused.value) == refusal(run_dir, f"process {os.getpid()}")
    with run_lock(run_dir):  # let go on exit
        pass


def test_refusal_names_another_holders_pid_and_host(tmp_path):
    """A run held by process 4242 on another machine is refused naming both, in one line."""
    run_dir = tmp_path / "run"
    fd = hold_by_hand(run_dir / "run.lock", b"4242 other-machine\n")
    try:
        with pytest.raises(RunInUse) as refused:
            with run_lock(run_dir):
                pytest.fail("ran while another process holds the lock")
    finally:
        os.close(fd)
    assert str(refused.value) == refusal(run_dir, "process 4242 on other-machine")
    assert "\n" not in str(refused.value)


def test_refusal_survives_a_lock_file_that_is_not_text(tmp_path):
    """A run.lock holding bytes that are not UTF-8 still gives the one-line refusal (bad bytes replaced)."""
    run_dir = tmp_path / "run"
    fd = hold_by_hand(run_dir / "run.lock", b"4242 host-\xff\n")
    try:
        with pytest.raises(RunInUse) as refused:
            with run_lock(run_dir):
                pass
    finally:
        os.close(fd)
    assert str(refused.value) == refusal(run_dir, "process 4242 on host-\ufffd")


def test_lock_is_let_go_when_the_block_fails(tmp_path):
    """An error in the block passes through run_lock, and the run can be locked again afterwards."""
    run_dir = tmp_path / "run"
    with pytest.raises(KeyError):
        with run_lock(run_dir):
            raise KeyError("boom")
    with run_lock(run_dir):
        assert (run_dir / "run.lock").read_text() == f"{os.getpid()} {socket.gethostname()}\n"


def test_only_rank_0_takes_the_lock(tmp_path, monkeypatch):
    """Another rank of a distributed run makes the run directory but neither writes nor holds run.lock."""
    monkeypatch.setattr(run_files, "is_main_process", lambda: False)
    run_dir = tmp_path / "run"
    fd = hold_by_hand(run_dir / "run.lock", b"4242 other-machine\n")
    try:
        with run_lock(run_dir):  # rank 0 holds it: another rank is not refused
            assert (run_dir / "run.lock").read_bytes() == b"4242 other-machine\n"
    finally:
        os.close(fd)
    with run_lock(tmp_path / "other"):
        assert (tmp_path / "other").is_dir()
        assert not (tmp_path / "other" / "run.lock").exists()


def test_file_system_without_locks_trains_unlocked_with_a_note(tmp_path, monkeypatch, capsys):
    """Where flock is refused (ENOLCK, some network file systems) the block runs, with one note naming
    the lock file and why."""
    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(run_files, "fcntl", SimpleNamespace(flock=no_locks, LOCK_EX=fcntl.LOCK_EX,
                                                            LOCK_NB=fcntl.LOCK_NB))
    ran = []
    with run_lock(tmp_path / "run"):
        ran.append(True)
    assert ran == [True]
    lock = tmp_path / "run" / "run.lock"
    assert capsys.readouterr().err == (f"note: cannot lock {lock} ({os.strerror(errno.ENOLCK)}): make sure "
                                       f"that no other process trains there\n")


def test_lock_flock_is_exclusive_and_non_blocking(tmp_path, monkeypatch):
    """run_lock asks flock for an exclusive lock without waiting (LOCK_EX | LOCK_NB)."""
    asked = []
    monkeypatch.setattr(run_files, "fcntl", SimpleNamespace(flock=lambda fd, op: asked.append(op),
                                                            LOCK_EX=fcntl.LOCK_EX, LOCK_NB=fcntl.LOCK_NB))
    with run_lock(tmp_path / "run"):
        pass
    assert asked == [fcntl.LOCK_EX | fcntl.LOCK_NB]


def test_failing_to_write_the_lock_file_names_it(tmp_path, monkeypatch):
    """A full disk met writing the holder's pid is an OSError with its errno and strerror that names
    run.lock; the lock is let go (the run can be locked again)."""
    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    run_dir = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(run_files.os, "pwrite", full)
        with pytest.raises(OSError) as failed:
            with run_lock(run_dir):
                pytest.fail("ran without its lock file written")
    error = failed.value
    assert (error.errno, error.strerror, error.filename) == (errno.ENOSPC, os.strerror(errno.ENOSPC),
                                                             str(run_dir / "run.lock"))
    assert str(run_dir / "run.lock") in str(error)
    with run_lock(run_dir):
        pass


# _disk_full_advice


def make_checkpoints(run_dir, *steps):
    files = RunDirectory(run_dir)
    files.checkpoints.mkdir(parents=True, exist_ok=True)
    for step in steps:
        (files.checkpoints / f"step_{step:08d}.pt").write_bytes(b"")
    return files


def test_full_disk_names_the_file_and_the_newest_checkpoint(tmp_path):
    """ENOSPC writing a run's file: one line naming that file and the newest checkpoint to resume from."""
    files = make_checkpoints(tmp_path / "run", 300, 100, 200)
    cause = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(files.path / "history.json"))
    with pytest.raises(DiskFullError) as full:
        with run_files._disk_full_advice(files):
            raise cause
    error = full.value
    assert error.__cause__ is cause
    assert (error.errno, error.path) == (errno.ENOSPC, files.path / "history.json")
    assert str(error) == (f"the disk is full: {files.path / 'history.json'} could not be written "
                          f"({os.strerror(errno.ENOSPC)}), and nothing was changed; the run can resume from "
                          f"its checkpoint step_00000300.pt: {ADVICE}")
    assert "\n" not in str(error)


def test_full_disk_before_any_checkpoint_names_the_run_directory(tmp_path):
    """A full disk with no file named and no checkpoint yet: the run directory is named, and it is said
    that the run holds no checkpoint."""
    files = RunDirectory(tmp_path / "run")
    with pytest.raises(DiskFullError) as full:
        with run_files._disk_full_advice(files):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert full.value.path == files.path
    assert str(full.value) == (f"the disk is full: {files.path} could not be written "
                               f"({os.strerror(errno.ENOSPC)}), and nothing was changed; the run holds no "
                               f"checkpoint yet: {ADVICE}")


def test_quota_used_up_is_said_too(tmp_path):
    """EDQUOT is said as a used-up quota, keeping its errno and its file."""
    files = make_checkpoints(tmp_path / "run", 100, 200)
    target = files.checkpoints / "step_00000300.pt"
    with pytest.raises(DiskFullError) as full:
        with run_files._disk_full_advice(files):
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), str(target))
    assert (full.value.errno, full.value.path) == (errno.EDQUOT, target)
    assert str(full.value) == (f"the disk quota is used up: {target} could not be written "
                               f"({os.strerror(errno.EDQUOT)}), and nothing was changed; the run can resume "
                               f"from its checkpoint step_00000200.pt: {ADVICE}")


def test_other_errors_pass_through_unchanged(tmp_path):
    """An OSError that is not a full disk (here: permission denied) leaves the block as itself."""
    files = make_checkpoints(tmp_path / "run", 100)
    denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(files.path / "history.json"))
    with pytest.raises(PermissionError) as raised:
        with run_files._disk_full_advice(files):
            raise denied
    assert raised.value is denied
    with run_files._disk_full_advice(files):  # and a block that succeeds is left alone
        pass
