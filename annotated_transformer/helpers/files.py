"""The one way the package writes a file (chapter 10, paper §5.2: runs of 12 hours to 3.5 days, long
enough to meet a crash and a full disk): atomically, a temporary file beside the target, flushed to the
disk and renamed over it (`atomic_write`, `atomic_save`, `atomic_write_text`), with the temporaries of
killed writers removed at the next start (`remove_stale_temporaries`), and a full disk said in one line
that names the file (`DiskFullError`, found behind torch's own error by `disk_full`)."""

import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch

__all__ = ["DiskFullError", "atomic_save", "atomic_write", "atomic_write_text", "disk_full",
           "remove_stale_temporaries"]

_DISK_FULL_ERRNOS = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))  # no space; quota used up


class DiskFullError(OSError):
    """A file that could not be written because its disk is full (or its quota is used up). Nothing
    was changed: the file that was there before, if any, is whole. The message names the file and
    says what to do; `advised` gives the same error with a caller's advice, who knows more."""

    def __init__(self, path: str | Path, code: int = errno.ENOSPC,
                 advice: str = "free some space on its disk, or write it elsewhere") -> None:
        super().__init__(code, os.strerror(code), str(path))
        self.path, self.advice = Path(path), advice

    def __str__(self) -> str:
        full = "the disk is full" if self.errno == errno.ENOSPC else "the disk quota is used up"
        return (f"{full}: {self.path} could not be written ({self.strerror}), and nothing was changed; "
                f"{self.advice}")

    def __reduce__(self):  # pickled (to another process) with its own arguments, not OSError's
        return type(self), (self.path, self.errno, self.advice)

    def advised(self, advice: str) -> "DiskFullError":
        return DiskFullError(self.path, self.errno, advice)


def disk_full(error: BaseException | None) -> OSError | None:
    """The OSError of a full disk behind `error`, or None: `error` itself, or one it was raised from
    or while handling (`torch.save` reports a full disk as a RuntimeError of its zip writer)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS:
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def atomic_write(path: str | Path, write: Callable[[BinaryIO], Any]) -> Path:
    """Write a file so that a crash at any moment leaves at `path` either the old file or the
    complete new one, never a half-written one: `write(file)` fills a temporary file beside `path`
    (opened in binary mode), which is flushed to disk, then renamed over `path`.

    A rename within one directory is atomic, and flushing the directory afterwards makes the rename
    itself durable. A process killed between the two leaves a `.NAME.PID.tmp` file, which
    `remove_stale_temporaries` cleans up at the next start. Any failure, an interrupt too, removes
    the temporary file; a full disk then raises `DiskFullError`, which names `path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # open() rather than mkstemp(): the file gets the usual permissions (umask), not owner-only.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        full = disk_full(error)
        if full is not None:  # not torch's "unexpected pos": say what happened, and to which file
            raise DiskFullError(path, full.errno) from error
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable (POSIX)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    return path


def atomic_save(obj: Any, path: str | Path) -> Path:
    """`torch.save(obj)` to `path`, atomically (`atomic_write`)."""
    return atomic_write(path, lambda file: torch.save(obj, file))


def atomic_write_text(path: str | Path, text: str) -> Path:
    """`text` to `path` in UTF-8, atomically (`atomic_write`): vocabularies, run descriptions,
    histories and results (chapters 13 to 19)."""
    return atomic_write(path, lambda file: file.write(text.encode("utf-8")))


def remove_stale_temporaries(directory: str | Path) -> list[Path]:
    """Delete the temporary files that killed writers (`atomic_write`) left in `directory`; their
    process is gone, so nobody will finish them. Returns what was removed."""
    removed = []
    for tmp in Path(directory).glob(".*.tmp"):
        pid = tmp.name.rsplit(".", 2)[-2]
        if pid.isdigit() and int(pid) != os.getpid():
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed
