"""Multi30k's files, fetched and checked (companion of chapter 12, paper §5.1's data at a laptop's
scale): `DataError`, the one error of data loading, whose message says what to do; the cache folder
(`default_cache_dir`, moved by `$ANNOTATED_TRANSFORMER_CACHE`); `download_file`, a download that is
atomic (a temporary file beside its destination, renamed when complete), checked against the announced
length and a SHA-256, that says a full disk as such and removes what killed downloads left; the
official files and their pinned hashes (`MULTI30K_SHA256`); and `multi30k_path`, one verified file of
a split, from a local folder or the cache, downloaded when missing or corrupt. Chapter 12's `data`
imports it and hands its names on; `multi30k` there reads the pairs."""

import contextlib
import gzip
import hashlib
import http.client
import os
import re
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from annotated_transformer.helpers.errors import Setting, SettingsMessage
from annotated_transformer.helpers.files import disk_full

__all__ = [
    "CACHE_ENV",
    "LANGUAGES",
    "MULTI30K_BASE_URL",
    "MULTI30K_SHA256",
    "MULTI30K_SPLITS",
    "DataError",
    "default_cache_dir",
    "download_file",
    "multi30k_path",
    "read_lines",
    "sha256_file",
]


class DataError(SettingsMessage, RuntimeError):
    """A data file is missing, unreachable, corrupt or inconsistent. The message says what to do,
    naming the loader's arguments as `Setting`s (`root`, `download`), so that the command line
    (chapter 16) can name its options instead."""


CACHE_ENV = "ANNOTATED_TRANSFORMER_CACHE"


def default_cache_dir() -> Path:
    """The folder for downloaded data: $ANNOTATED_TRANSFORMER_CACHE if set, else
    $XDG_CACHE_HOME/annotated_transformer, else ~/.cache/annotated_transformer. Not created here."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "annotated_transformer"


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, as 64 hexadecimal digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(url: str, destination: Path, sha256: str | None, timeout: float, advice: tuple) -> Path:
    """download_file, with `advice` (what to do) ending every error message."""
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        _remove_partial_downloads(destination)
        fd, name = tempfile.mkstemp(prefix=f".{destination.name}.{os.getpid()}.", suffix=".part",
                                    dir=destination.parent)
    except OSError as error:
        raise (_disk_full(destination, error) or DataError(
            f"cannot write to {destination.parent}: {error}. Choose a folder you can write to (for the data "
            f"cache: the environment variable {CACHE_ENV}).")) from error
    temporary = Path(name)

    def failure(reason: str) -> DataError:
        return DataError(f"could not download {url}: {reason}. Nothing was saved. ", *advice)

    try:
        digest, received, announced = hashlib.sha256(), 0, None
        try:
            with os.fdopen(fd, "wb") as file, urllib.request.urlopen(url, timeout=timeout) as response:
                announced = response.headers.get("Content-Length")
                while chunk := response.read(1 << 16):
                    file.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
        except urllib.error.HTTPError as error:
            raise failure(f"the server answered HTTP {error.code} ({error.reason})") from error
        except urllib.error.URLError as error:
            raise failure(f"{error.reason}") from error
        except (OSError, http.client.HTTPException) as error:  # timeouts, resets, bad responses; a full disk
            raise (_disk_full(destination, error) or failure(f"{error!r}")) from error
        if announced is not None and announced.isdigit() and received != int(announced):
            raise failure(f"the transfer was interrupted after {received:,} of {int(announced):,} bytes")
        if sha256 is not None and digest.hexdigest() != sha256.lower():
            raise failure(f"the file received is not the expected one: its SHA-256 is {digest.hexdigest()}, "
                          f"expected {sha256.lower()} (the transfer was corrupted, or the server holds "
                          f"another version of the file)")
        os.replace(temporary, destination)
    finally:
        temporary.unlink(missing_ok=True)  # after os.replace there is nothing left to remove
    return destination


def download_file(
    url: str, destination: str | Path, sha256: str | None = None, *, timeout: float = 30.0
) -> Path:
    """Download `url` to `destination` atomically; check its SHA-256 when `sha256` is given.

    The body is streamed to a temporary file in the destination folder, its size checked against
    the Content-Length header (an interrupted transfer is an error), its hash checked, and only
    then renamed to `destination` (os.replace, atomic). On failure the partial file is removed and
    a DataError names the URL, the reason and what to do. Returns the destination path.
    """
    destination = Path(destination)
    advice = (f"Check the network connection and try again, or download the file some other way and "
              f"save it as {destination}.",)
    return _download(url, destination, sha256, timeout, advice)


def _disk_full(destination: Path, error: BaseException) -> DataError | None:
    """The DataError to raise when `error` is a full disk (or a used-up quota, chapter 10's
    `disk_full`); None otherwise."""
    full = disk_full(error)
    if full is None:
        return None
    return DataError(
        f"the disk is full: {destination} could not be written ({full.strerror}). Nothing was saved. Free "
        f"some space on the disk of {destination.parent}, or keep the data on another disk (for the data "
        f"cache: the environment variable {CACHE_ENV})."
    )


def _running(pid: int) -> bool:
    """Whether process `pid` is alive. POSIX only; elsewhere False (Windows does not delete a file
    that a running process holds open, so trying is safe there)."""
    if os.name != "posix":
        return False
    try:
        os.kill(pid, 0)  # signal 0 sends nothing: it only checks that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, and belongs to another user
        return True
    return True


def _remove_partial_downloads(destination: Path) -> list[Path]:
    """Delete the temporary files (`.NAME.PID.XXXXXXXX.part`) that interrupted downloads of
    `destination` left, except those of processes still running; returns what was removed."""
    pattern = re.escape(f".{destination.name}.") + r"(?:(\d+)\.)?[a-z0-9_]+\.part"
    removed = []
    for path in destination.parent.iterdir():
        match = re.fullmatch(pattern, path.name)
        if match is None or (match[1] is not None and _running(int(match[1]))):
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


MULTI30K_BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
MULTI30K_SPLITS = (
    "train", "val", "test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr"
)
LANGUAGES = ("de", "en")

# SHA-256 of the official files as served (gzip-compressed). The 2017 and 2018 test sets are not
# pinned (no copy was available to hash): they are checked by decoding them completely instead.
MULTI30K_SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
}


def _check_split(split: str) -> None:
    if split not in MULTI30K_SPLITS:
        hint = ' (the validation split is called "val")' if split in ("valid", "validation", "dev") else ""
        raise DataError(f"unknown Multi30k split {split!r}{hint}; the splits are: "
                        f"{', '.join(MULTI30K_SPLITS)}")


def _where_to_get(split: str, folder: Path, base_url: str, cache: bool = True) -> tuple[str | Setting, ...]:
    """What to do, as the end of a sentence: which files to download, from where, and where to put them."""
    urls = " and ".join(f"{base_url.rstrip('/')}/{split}.{language}.gz" for language in LANGUAGES)
    if not cache:
        return (f"download {urls} and put them in {folder}.",)
    return (f"download {urls} and put them in {folder} (the cache folder; the environment variable "
            f"{CACHE_ENV} moves it), or pass a folder that holds them as ", Setting("root"), ".")


def _problem(path: Path, sha256: str | None) -> str | None:
    """Why the file at `path` cannot be used, or None: a hash mismatch, or an unreadable gzip stream."""
    if sha256 is not None:
        actual = sha256_file(path)
        return None if actual == sha256.lower() else f"its SHA-256 is {actual}, expected {sha256.lower()}"
    if path.suffix == ".gz":  # no pinned hash: at least the gzip stream must decode to its end
        try:
            with gzip.open(path, "rb") as file:
                while file.read(1 << 20):
                    pass
        except (OSError, EOFError, zlib.error) as error:
            return f"it is not a complete gzip file ({error})"
    return None


def _file_in_root(root: Path, split: str, name: str, sha256: str | None, base_url: str) -> Path:
    if not root.is_dir():
        raise DataError(Setting("root", str(root)), " is not a folder. Pass a folder that holds the Multi30k "
                        f"files ({split}.de.gz, {split}.en.gz, ...) as ", Setting("root"), ", or use the "
                        "cache: ", Setting("root", None), " takes them from there.")
    compressed, plain = root / name, root / name.removesuffix(".gz")
    if compressed.is_file():
        problem = _problem(compressed, sha256)
        if problem is not None:
            raise DataError(f"{compressed} is corrupt or a different version of Multi30k: {problem}. Replace "
                            f"it with the official file, {base_url.rstrip('/')}/{name}.")
        return compressed
    if plain.is_file():
        return plain  # uncompressed: no pinned hash to compare with
    raise DataError(f"neither {name} nor {plain.name} is in {root} (", Setting("root"), "). To fix it, ",
                    *_where_to_get(split, root, base_url, cache=False))


def multi30k_path(
    split: str,
    language: str,
    *,
    root: str | Path | None = None,
    cache_dir: str | Path | None = None,
    download: bool = True,
    base_url: str = MULTI30K_BASE_URL,
    checksums: dict[str, str] | None = None,
) -> Path:
    """The verified local path of one Multi30k file (task 1, raw), e.g. split "train", language "de".

    With `root`, the file is taken from that folder (`train.de.gz`, or uncompressed `train.de`);
    a compressed file must match its pinned hash. Otherwise it comes from `cache_dir` (default
    `default_cache_dir() / "multi30k"`), re-verified on every call; a missing or corrupt cached
    file is downloaded from `base_url` when `download` is True. `checksums` replaces
    MULTI30K_SHA256 (file name -> SHA-256). The 2017 and 2018 test sets have no pinned hash: their
    gzip stream is checked instead. Every failure is a DataError that says what to do.
    """
    _check_split(split)
    if language not in LANGUAGES:
        raise DataError(f"unknown Multi30k language {language!r}; the languages are: {', '.join(LANGUAGES)}")
    name = f"{split}.{language}.gz"
    sha256 = (MULTI30K_SHA256 if checksums is None else checksums).get(name)
    url = f"{base_url.rstrip('/')}/{name}"
    if root is not None:
        return _file_in_root(Path(root), split, name, sha256, base_url)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "multi30k"
    path = folder / name
    if path.is_file():
        problem = _problem(path, sha256)
        if problem is None:
            return path
        if not download:
            raise DataError(f"the cached file {path} is corrupt or a different version of Multi30k: "
                            f"{problem}. Delete it, and ", Setting("download", True), " downloads it "
                            f"again; or replace it with {url}.")
        path.unlink()  # corrupt: download it again below
    elif not download:
        raise DataError(f"{name} is not in the cache folder {folder}, and ", Setting("download", False),
                        " was given: ", Setting("download", True), " downloads it, or ",
                        *_where_to_get(split, folder, base_url))
    advice = ("If this machine cannot download it, ", *_where_to_get(split, folder, base_url))
    _download(url, path, sha256, 30.0, advice)
    problem = _problem(path, sha256) if sha256 is None else None  # pinned files were checked already
    if problem is not None:
        path.unlink()
        raise DataError(f"the file downloaded from {url} is unusable: {problem}. Nothing was kept. "
                        "Try again. ", *advice)
    return path


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (gzip-compressed if its name ends in .gz), without newlines."""
    try:
        data = path.read_bytes()
        text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as error:
        raise DataError(f"cannot read {path}: {error}. It must be UTF-8 text, one sentence a line "
                        f"(gzip-compressed if its name ends in .gz); replace it with the official "
                        f"file.") from error
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line.removesuffix("\r") for line in lines]
