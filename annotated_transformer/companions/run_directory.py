"""Where each file of a run directory lives (companion of chapter 10): `RunDirectory`, the layout
alone, which the run layer (`runs.run_files`) keeps and chapter 14's translator reads a trained
model from."""

from __future__ import annotations

from pathlib import Path

from annotated_transformer.checkpoints import CheckpointDirectory, checkpoint_step

__all__ = ["RunDirectory"]


class RunDirectory:
    """Where each file of a run directory lives. `path` is the directory; the others are in it."""

    def __init__(self, path: str | Path) -> None:
        self.path = path = Path(path)
        self.recipe = path / "recipe.json"  # the recipe: every setting of the run, by name
        self.info = path / "run.json"  # where the training data came from, when a folder was given
        self.vocab = path / "vocab.json"  # a translation run's vocabularies (chapter 13)
        self.cache = path / "cache"  # a translation run's training corpus, encoded once (chapter 13)
        self.checkpoints = path / "checkpoints"  # the step checkpoints (`CheckpointDirectory`)
        self.history = path / "history.json"  # one record per optimizer step (`RunHistory`)
        self.validation = path / "validation.json"  # held-out scores while training (`LongRun.train`)
        self.hardware = path / "hardware.json"  # the machine of the first session
        self.model = path / "model.pt"  # the average of the last checkpoints (§6.1, chapter 14)
        self.lock = path / "run.lock"  # held by the process that trains the run (`run_lock`)

    def checkpoint_paths(self) -> list[Path]:
        """The step checkpoints, oldest first (`CheckpointDirectory.paths`); [] before the first."""
        return CheckpointDirectory(self.checkpoints).paths()

    @staticmethod
    def step_of(checkpoint: Path) -> int:
        """The step of a checkpoint that `checkpoint_path` named (`step_00000100.pt`: 100)."""
        return checkpoint_step(checkpoint)

    def newest_step(self) -> int:
        """The step of the newest checkpoint, 0 when there is none."""
        paths = self.checkpoint_paths()
        return self.step_of(paths[-1]) if paths else 0

    def work(self) -> list[Path]:
        """The files that hold the run's training: its step checkpoints, oldest first, then model.pt."""
        return self.checkpoint_paths() + [path for path in (self.model,) if path.is_file()]

    @classmethod
    def model_of(cls, checkpoint: str | Path) -> Path:
        """The model a path names: a run directory's model.pt, or the checkpoint file itself."""
        checkpoint = Path(checkpoint)
        return cls(checkpoint).model if checkpoint.is_dir() else checkpoint

    @classmethod
    def find(cls, checkpoint: str | Path, name: str) -> Path | None:
        """The file `name` ("vocab", "recipe", "info", ...) of the run a run directory or a checkpoint
        belongs to: in the run directory, beside the checkpoint, or in the run directory above its
        checkpoints/. None when there is none."""
        checkpoint = Path(checkpoint)
        places = [checkpoint] if checkpoint.is_dir() else [checkpoint.parent, checkpoint.parent.parent]
        return next((path for path in (getattr(cls(place), name) for place in places) if path.is_file()),
                    None)

    @classmethod
    def vocab_of(cls, checkpoint: str | Path) -> Path:
        """The vocab.json of a run directory or checkpoint (`find`), else where it would be beside it."""
        checkpoint = Path(checkpoint)
        beside = cls(checkpoint if checkpoint.is_dir() else checkpoint.parent)
        return cls.find(checkpoint, "vocab") or beside.vocab
