"""Paper §5.2: runs of 12 hours and 3.5 days, kept in a run directory (`RunDirectory`): a recipe that
never changes under its checkpoints (`_settle_recipe`), its history (`RunHistory`), its machine, a lock
against a second training (`run_lock`), damaged side files restored, a full disk said in one line.
Chapter 10 shows it at work on a run of the copy task; chapters 14 and 16 keep translation runs in it."""

__all__ = [
    "RESUMABLE_FIELDS",
    "Run",
    "RunHistory",
    "RunInUse",
    "note",
    "open_run",
    "peek_extra",
    "read_history",
    "read_recipe",
    "recipe_copy",
    "record_data_dir",
    "record_hardware",
    "recorded",
    "run_data_dir",
    "run_lock",
    "set_aside",
]

import contextlib
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed

from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.helpers.processes import is_main_process, rank_and_world_size
from annotated_transformer.helpers.files import DiskFullError, atomic_write_text, disk_full, remove_stale_temporaries
from annotated_transformer.companions.hardware import describe_hardware
from annotated_transformer.training import StepStats

try:  # file locks, for `run_lock`: POSIX only
    import fcntl
except ImportError:  # Windows: runs are not locked
    fcntl = None


class Run(RunDirectory):
    """A run directory held for one session of training (`open_run` makes it, once): where its files
    are (`RunDirectory`) and the recipe it trains (`settings`: every setting by name). The functions
    of the run layer take the run directory's path; a session hands them `run.path`."""

    def __init__(self, path: str | Path, settings: dict) -> None:
        super().__init__(path)
        self.settings = settings


def _read_json(path: Path) -> Any:
    """The JSON a run file holds; ValueError naming the file when it cannot be read or parsed."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is damaged ({error})") from error


def set_aside(path: Path) -> Path:
    """Keep a damaged file beside itself as NAME.damaged, for a look later; returns where."""
    kept = path.with_name(path.name + ".damaged")
    with contextlib.suppress(FileNotFoundError):  # another process may have moved it already
        os.replace(path, kept)
    return kept


def note(message: str) -> None:
    """One line on standard error about what a run did to its own files (rank 0 only)."""
    if is_main_process():
        print(f"note: {message}", file=sys.stderr)


def peek_extra(path: Path) -> dict:
    """The `extra` of a checkpoint (the recipe, fingerprints, minutes a run recorded), read without
    checking or loading the whole file; {} when it cannot be read."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # a damaged file: whoever loads it for real says why
        return {}
    extra = checkpoint.get("extra") if isinstance(checkpoint, dict) else None
    return extra if isinstance(extra, dict) else {}


def recorded(run_dir: str | Path, key: str) -> tuple[Any, Path | None]:
    """The newest value of `extra[key]` in a run's checkpoints and model.pt, and the file it is in."""
    for path in reversed(RunDirectory(run_dir).work()):
        value = peek_extra(path).get(key)
        if value is not None:
            return value, path
    return None, None


_Upgrade = Callable[[dict], dict]  # reads a recipe saved by an earlier version as today's

# Fields that may change when a run is resumed: how long it trains, how it computes and how it is
# decoded. Any other field changes the data, the model or the optimization, and would mix two
# trainings in one run.
RESUMABLE_FIELDS = (
    "name", "max_steps", "max_minutes", "average_last", "beam_size", "alpha", "compile", "precision"
)


def _changed_fields(saved: dict, recipe: dict, upgrade: _Upgrade | None) -> dict[str, tuple[Any, Any]]:
    """The fields outside RESUMABLE_FIELDS in which `recipe` differs from a saved recipe, by name,
    with the saved value and the new one. A field the saved recipe lacks was added to the recipes
    later, or renamed: `upgrade` reads the saved recipe as today's."""
    saved = upgrade(saved) if upgrade is not None else saved
    return {k: (saved.get(k), recipe[k])
            for k in sorted(recipe) if saved.get(k) != recipe[k] and k not in RESUMABLE_FIELDS}


def _check_recipe(run_dir: Path, recipe: dict, saved: dict, upgrade: _Upgrade | None) -> None:
    """Refuse a recipe that differs from the run's own (`saved`) outside RESUMABLE_FIELDS, naming
    the fields: resuming with it would mix two trainings."""
    changed = _changed_fields(saved, recipe, upgrade)
    if changed:
        details = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items())
        raise ValueError(
            f"{run_dir} holds a run of another configuration ({details}); train in a new run "
            f"directory, or with the same settings to resume it"
        )


def read_recipe(path: Path) -> dict:
    """A run's recipe.json; ValueError naming the file when it cannot be read or holds no recipe."""
    recipe = _read_json(path)
    if not isinstance(recipe, dict):
        raise ValueError(f"{path} is damaged (it holds no recipe)")
    return recipe


def recipe_copy(files: Sequence[Path]) -> tuple[dict | None, Path | None]:
    """The copy of a run's recipe that the newest of `files` (its checkpoints, model.pt) holds, and
    that file: what restores a missing or damaged recipe.json. (None, None) when none holds one."""
    for path in reversed(files):
        copy = peek_extra(path).get("recipe")
        if isinstance(copy, dict):
            return copy, path
    return None, None


def _saved_recipe(files: RunDirectory, has_work: bool) -> dict | None:
    """The run's recipe.json; when it is damaged or missing, the copy in its newest checkpoint
    (restored to recipe.json), or None when the run has no training to protect yet."""
    path = files.recipe
    if path.exists():
        try:
            return read_recipe(path)
        except ValueError as damaged:
            error = damaged
    copy, source = recipe_copy(files.work()) if has_work else (None, None)
    if not path.exists():
        if copy is not None:
            note(f"{path} is missing: the run's recipe is taken from {source}")
        return copy
    if not has_work:
        note(f"{error}; it is replaced, since the run holds no checkpoint yet")
        return None
    if copy is None:
        raise ValueError(f"{error}, and no checkpoint of {files.path} holds a copy of the recipe: restore "
                         f"recipe.json from a backup, or train in a new run directory")
    if is_main_process():
        kept = set_aside(path)
        atomic_write_text(path, json.dumps(copy, indent=1))
        note(f"{error}: restored it from {source}, and kept the damaged file as {kept.name}")
    return copy


def _settle_recipe(
    run_dir: str | Path, recipe: dict, upgrade: _Upgrade | None = None,
    built_from: Mapping[str, Collection[str]] | None = None,
) -> None:
    """Make `recipe` (every setting, by name) the recipe of `run_dir` (its recipe.json), or refuse
    it (ValueError).

    A run that holds checkpoints (or model.pt) keeps its recipe: another one would mix two
    trainings, and is refused, except in RESUMABLE_FIELDS. A run without any has no training to
    lose: it takes the new recipe, and removes the files that `built_from` says were built from a
    field that changed (`{"vocab": ("vocab_size", ...)}`: RunDirectory's names), to be built again.
    A damaged recipe.json is restored from the copy that every checkpoint holds (`extra["recipe"]`).
    `upgrade(saved)`: a recipe saved by an earlier version, as today's recipes spell it (a field
    added since with the value such runs used, a renamed one under its new name).
    """
    files = RunDirectory(run_dir)
    run_dir = files.path
    has_work = bool(files.work())
    write = is_main_process()  # the other ranks of a distributed run only check
    saved = _saved_recipe(files, has_work)
    changed = _changed_fields(saved, recipe, upgrade) if saved is not None else {}
    if changed and not has_work:
        note(f"{run_dir} holds no checkpoint yet, so it takes the new settings of "
             f"{', '.join(changed)}")
        for name, fields in (built_from or {}).items():
            if write and set(changed) & set(fields):  # built from the old settings
                path = getattr(files, name)
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
    elif saved is not None:
        _check_recipe(run_dir, recipe, saved, upgrade)
    if write:
        atomic_write_text(files.recipe, json.dumps(recipe, indent=1))


class RunInUse(OSError):
    """A run directory that another process is training in: it holds the run's lock."""


def _make_run_dir(run_dir: Path) -> None:
    """Create the run directory; a file where it, or a folder above it, should be is named."""
    place = next((place for place in (run_dir, *run_dir.parents) if place.exists()), None)
    if place is not None and not place.is_dir():
        what = "is a file" if place == run_dir else f"cannot be made: {place} is a file"
        raise ValueError(f"the run directory {run_dir} {what}, not a folder: move the file, or train in a "
                         f"new run directory")
    run_dir.mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def run_lock(run_dir: str | Path) -> Iterator[None]:
    """Make `run_dir`, and hold its lock (`run.lock`) while the block runs, on rank 0: a
    process that tries to train there meanwhile is refused at once (RunInUse), with the id of the
    process that holds it. The operating system drops the lock when its process ends, however it
    ends. Without fcntl (Windows), runs are not locked."""
    files = RunDirectory(run_dir)
    _make_run_dir(files.path)
    if not is_main_process() or fcntl is None:
        yield
        return
    path = files.lock
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunInUse(_in_use(files, os.pread(fd, 256, 0).decode(errors="replace"))) from None
        except OSError as error:  # a file system without locks (some network ones): train unlocked
            note(f"cannot lock {path} ({error.strerror}): make sure that no other process trains there")
        else:  # the process id, for a refused second training to name
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
            except OSError as error:  # a full disk, say: name the file
                raise OSError(error.errno, error.strerror, str(path)) from error
        yield
    finally:
        os.close(fd)  # and with it, the lock


def _in_use(files: RunDirectory, holder: str) -> str:
    """Why a run directory whose lock is taken is refused; `holder` is what its run.lock holds."""
    pid, _, host = holder.strip().partition(" ")
    who = f"process {pid}" if pid.isdigit() else "another process"
    if host and host != socket.gethostname():
        who += f" on {host}"
    return (f"{files.path} is in use: {who} is training in it (it holds {files.lock}), and two "
            f"trainings would overwrite each other's checkpoints; wait for it to end or stop it, or train "
            f"in a new run directory")


@contextlib.contextmanager
def _disk_full_advice(files: RunDirectory) -> Iterator[None]:
    """A full disk met while the block writes the run's files, as a DiskFullError that names the file
    and the checkpoint the run can resume from once there is space again."""
    try:
        yield
    except OSError as error:
        full = disk_full(error)
        if full is None:
            raise
        checkpoints = files.checkpoint_paths()
        resume = (f"the run can resume from its checkpoint {checkpoints[-1].name}" if checkpoints
                  else "the run holds no checkpoint yet")
        raise DiskFullError(full.filename or files.path, full.errno, f"{resume}: free some space on its disk "
                            f"and run the same training again, or train in a new run directory on another "
                            f"disk") from error


@contextlib.contextmanager
def open_run(
    run_dir: str | Path, recipe: dict, upgrade: _Upgrade | None = None,
    built_from: Mapping[str, Collection[str]] | None = None,
) -> Iterator[Run]:
    """Hold `run_dir` for one session of training, and yield it as a `Run`, the one object of the
    session: a full disk met in the block is said with the checkpoint to resume from
    (`_disk_full_advice`); rank 0 (`is_main_process`) holds the run's lock (`run_lock`), removes what a
    killed process left half-written, and settles the recipe (`_settle_recipe`, with `upgrade` and
    `built_from`), while every other rank of a distributed run waits for it."""
    run = Run(run_dir, recipe)
    with _disk_full_advice(run), run_lock(run.path):
        for directory in (run.path, run.checkpoints, run.cache):
            # no other process writes there: rank 0 holds the lock
            if is_main_process() and directory.is_dir():
                remove_stale_temporaries(directory)
        _settle_recipe(run.path, run.settings, upgrade, built_from)
        if rank_and_world_size()[1] > 1:
            torch.distributed.barrier()
        yield run


def read_history(path: str | Path) -> list[dict]:
    """The step records of a run's history.json (`path`: the run directory, or the file): the one
    reader of that file. ValueError, naming the file, when it is missing or damaged."""
    path = RunDirectory(path).history if Path(path).is_dir() else Path(path)
    if not path.exists():
        raise ValueError(f"{path} does not exist: the run has not trained yet")
    records = _read_json(path)
    if not (isinstance(records, list) and all(_is_record(record) for record in records)):
        raise ValueError(f"{path} is damaged (it holds no list of step records)")
    return records


def _is_record(record: Any) -> bool:
    return (isinstance(record, dict) and isinstance(record.get("step"), int)
            and isinstance(record.get("minutes"), int | float))


class RunHistory:
    """A run's `history.json`: one record per optimizer step (loss, cross-entropy, learning rate,
    tokens, gradient norm, minutes of training so far), carried across resumed sessions; records
    after the resumed step are dropped. A damaged file is kept as `history.json.damaged`, and the
    history starts again at the resumed step, with the minutes of the checkpoint (`resumed_minutes`).
    `clock` gives seconds (a simulated one makes a demonstration exact)."""

    def __init__(self, path: Path, resumed_step: int, resumed_minutes: float = 0.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.path, self.clock = path, clock
        saved = self._load(resumed_step, resumed_minutes)
        self.records = [record for record in saved if record["step"] <= resumed_step]
        self.done_minutes = self.records[-1]["minutes"] if self.records else resumed_minutes
        self.started = clock()
        self.step_minutes: dict[int, float] = {}  # the clock at each step, until its statistics come

    def _load(self, resumed_step: int, resumed_minutes: float) -> list[dict]:
        if not self.path.exists():
            return []
        try:
            return read_history(self.path)
        except ValueError as error:
            kept = set_aside(self.path) if is_main_process() else self.path
            note(f"{error}: kept it as {kept.name}; the history starts again at step {resumed_step}, "
                 f"after {resumed_minutes:.1f} minutes of training")
            return []

    def minutes_trained(self) -> float:
        """Minutes of training in the records (summed over the sessions that wrote them)."""
        return self.records[-1]["minutes"] if self.records else self.done_minutes

    def minutes(self) -> float:
        """Minutes of training so far, this session included."""
        return self.done_minutes + (self.clock() - self.started) / 60

    def start(self) -> None:
        """Count this session's training from now: setting a run up is not training it."""
        self.started = self.clock()

    def step_done(self, step: int) -> None:
        self.step_minutes[step] = self.minutes()

    def leave_out(self, seconds: float) -> None:
        """Do not count the last `seconds` as training time (the validation's, say)."""
        self.started += seconds

    def add(self, records: Sequence[StepStats]) -> None:
        for r in records:
            minutes = self.step_minutes.pop(r.step, self.minutes())
            self.records.append({"step": r.step, "loss": r.loss, "nll": r.nll, "lr": r.lr,
                                 "tokens": r.n_tokens, "grad_norm": r.grad_norm, "minutes": minutes})

    def save(self) -> None:
        if is_main_process():
            atomic_write_text(self.path, json.dumps(self.records))


def _read_run_info(run_dir: str | Path) -> dict:
    """The run's run.json (`{"data_dir": ...}`): {} when it is missing or damaged."""
    try:
        info = _read_json(RunDirectory(run_dir).info)
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def run_data_dir(run_dir: str | Path) -> Path | None:
    """The folder of data files the run was trained from (`corpus_options["root"]`, the `--data-dir`
    of `train`), if one was given: evaluating the run reads its test set from there too."""
    value = _read_run_info(run_dir).get("data_dir")
    return Path(value) if isinstance(value, str) else None


def record_data_dir(run_dir: str | Path, corpus_options: dict) -> None:
    """Keep the folder the training data came from, if `corpus_options` names one, in run.json."""
    if corpus_options.get("root") is not None:
        info = {**_read_run_info(run_dir), "data_dir": str(Path(corpus_options["root"]).resolve())}
        atomic_write_text(RunDirectory(run_dir).info, json.dumps(info, indent=1))


def record_hardware(run_dir: str | Path, device: torch.device, world_size: int) -> dict:
    """hardware.json: the machine of the run's first session (written again if it is damaged)."""
    path = RunDirectory(run_dir).hardware
    if path.exists():
        try:
            return _read_json(path)
        except ValueError as error:
            note(f"{error}; written again, for this machine")
    info = describe_hardware(device, world_size)
    if is_main_process():
        atomic_write_text(path, json.dumps(info, indent=1))
    return info
