"""The files a command of chapter 16 reads and writes: an output checked before the work (`check_output`)
and written atomically, a failed write said in one line (`output_errors`), and text read as UTF-8, one
sentence per line, with the place of a byte that is not UTF-8 (`decode_utf8`)."""

__all__ = ["check_output", "decode_utf8", "output_errors", "read_input", "read_lines", "write_lines"]

import codecs
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from annotated_transformer.helpers.files import DiskFullError, atomic_write_text


def check_output(name: str | None, option: str = "--output", example: str = "out.txt") -> Path | None:
    """The output file `name` of `option` as a Path, refused before any work when it cannot be
    written: a directory, a name that ends in a slash (a directory is meant, but which file?), a
    path through a file, or a folder without write permission (missing folders are made when
    writing). `example` is a file name to suggest."""
    if name is None:
        return None
    path = Path(name)
    if path.is_dir():
        raise ValueError(f"{option} {path} is a directory: give the name of a file to write")
    if str(name).endswith(tuple(filter(None, (os.sep, os.altsep)))):
        raise ValueError(f"{option} {name} names a directory (it ends in {str(name)[-1]}): give the name of "
                         f"a file to write, e.g. {path / example}")
    folder = path.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise ValueError(f"{option} {path} cannot be written: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path} cannot be written: no permission to write in {folder}")
    return path


@contextlib.contextmanager


def output_errors(path: Path, option: str = "--output") -> Iterator[None]:
    """An OSError in writing `path` (or its temporary file) as one line that names `path`; a full
    disk (DiskFullError, which names it already) with the option to write elsewhere."""
    try:
        yield
    except DiskFullError as error:
        raise error.advised(f"free some space on its disk, or give {option} a file on another disk") from None
    except OSError as error:
        places = [Path(str(name)).absolute() for name in (error.filename, error.filename2) if name]
        if not any(_on_the_way(place, path.absolute()) for place in places):
            raise
        raise ValueError(f"cannot write {option} {path}: {error.strerror or error}") from None


def _on_the_way(place: Path, target: Path) -> bool:
    """Whether writing `target` touches `place`: the file, its temporary file, or a folder above it."""
    beside = place.parent == target.parent and place.name.startswith((target.name, f".{target.name}."))
    return beside or place in target.parents


def read_lines(text: str) -> list[str]:
    """One sentence per line: split at newlines only (not at the other characters that
    str.splitlines splits at), without a trailing empty line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def read_input(path: Path) -> bytes:
    """The bytes of the --input file, or a one-line error that names it."""
    if path.is_dir():
        raise ValueError(f"--input {path} is a directory: give a file of sentences, one per line")
    if not path.is_file():
        raise FileNotFoundError(f"no input file at {path}: check the path")
    try:
        return path.read_bytes()
    except OSError as error:
        raise ValueError(f"cannot read --input {path}: {error.strerror or error}") from None


def decode_utf8(data: bytes, name: str) -> str:
    """`data` as UTF-8 text (a byte-order mark is dropped), or an error naming the line and column
    of the first byte that is not UTF-8."""
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - data.rfind(b"\n", 0, error.start)
        raise ValueError(
            f"{name} is not UTF-8 text: line {line}, column {column} holds the byte "
            f"0x{data[error.start]:02x}; save it as UTF-8 (from Latin-1: iconv -f latin1 -t utf-8)"
        ) from None


def write_lines(lines: Sequence[str], output: Path | None) -> None:
    text = "".join(line.replace("\n", " ") + "\n" for line in lines)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with output_errors(output):
            atomic_write_text(output, text)
