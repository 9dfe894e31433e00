"""A run directory (chapter 14) under faults: a killed process, damaged side files, a run that failed
at its start, a vocabulary that is not the run's. Nothing is lost that the checkpoints can restore.

Everything trains tiny models on the built-in corpus (no network, no Multi30k).
"""

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import OLD_RECIPE_JSON, version_2

import annotated_transformer
from annotated_transformer.checkpoints import (
    CheckpointError,
    checkpoint_path,
    checkpoint_paths,
    read_checkpoint,
)
from annotated_transformer.cli.commands import main
from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.companions.vocabulary_files import read_vocabularies, vocabularies_sha256
from annotated_transformer.data import builtin_corpus
from annotated_transformer.model import config_sha256
from annotated_transformer.recipes import Recipe, get_recipe
from annotated_transformer.runs.run_files import run_data_dir
from annotated_transformer.runs.translation import train_translation
from annotated_transformer.tokenization import VocabularyError, encode_pairs, token_batches
from annotated_transformer.training import evaluate
from annotated_transformer.translator import Translator

TINY = {"n_layers": 1, "d_model": 32, "d_ff": 64, "n_heads": 2, "vocab_size": 300, "max_tokens": 600,
        "warmup": 10, "checkpoint_every": 2, "average_last": 2, "max_steps": 4}


def recipe(**overrides):
    return get_recipe("builtin", **{**TINY, **overrides})


def train(run_dir, **overrides):
    return train_translation(recipe(**overrides), run_dir, device="cpu", progress=False)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny run; tests copy it before they damage it."""
    return train(tmp_path_factory.mktemp("runs") / "finished")


@pytest.fixture
def copy(finished, tmp_path):
    return shutil.copytree(finished.run_dir, tmp_path / "run")


def test_the_run_directory_knows_where_each_file_lives(tmp_path):
    run = RunDirectory(tmp_path / "run")
    # The names are a promise: runs written by earlier versions, and the book's chapters, read them.
    layout = {key: path.relative_to(run.path).as_posix() for key, path in vars(run).items() if key != "path"}
    assert layout == {
        "recipe": "recipe.json", "info": "run.json", "vocab": "vocab.json", "cache": "cache",
        "checkpoints": "checkpoints", "history": "history.json", "validation": "validation.json",
        "hardware": "hardware.json", "model": "model.pt", "lock": "run.lock"}
    assert run.checkpoint_paths() == [] and run.newest_step() == 0 and run.work() == []
    run.checkpoints.mkdir(parents=True)
    for step in (100, 5, 40):  # named as chapter 10 names them
        checkpoint_path(run.checkpoints, step).write_bytes(b"")
    newest = run.checkpoint_paths()[-1]
    assert [run.step_of(path) for path in run.checkpoint_paths()] == [5, 40, 100] and run.newest_step() == 100
    run.vocab.write_text("{}")
    run.model.write_bytes(b"")
    assert run.work() == [*run.checkpoint_paths(), run.model]
    # A command given a checkpoint finds the run's files: in the run directory, or above checkpoints/.
    assert RunDirectory.find(run.path, "vocab") == RunDirectory.find(newest, "vocab") == run.vocab
    assert RunDirectory.find(newest, "recipe") is None
    assert RunDirectory.model_of(run.path) == run.model and RunDirectory.model_of(newest) == newest
    assert RunDirectory.vocab_of(tmp_path / "copied.pt") == tmp_path / "vocab.json"  # where it would be
    (tmp_path / "empty").mkdir()  # a run directory without vocab.json: where it would be, inside it
    assert RunDirectory.vocab_of(tmp_path / "empty") == tmp_path / "empty" / "vocab.json"


def test_a_run_writes_only_the_files_of_its_layout(finished):
    layout = RunDirectory(finished.run_dir)
    names = {path.name for key, path in vars(layout).items() if key != "path"}
    written = {path.name for path in finished.run_dir.iterdir()}
    assert written <= names, written - names
    assert layout.model.is_file() and layout.newest_step() == 4


def test_every_checkpoint_records_the_recipe_and_the_fingerprints(finished):
    vocabs = read_vocabularies(finished.run_dir / "vocab.json")
    for path in [*checkpoint_paths(finished.run_dir / "checkpoints"), finished.run_dir / "model.pt"]:
        extra = read_checkpoint(path)["extra"]
        assert extra["vocab_sha256"] == vocabularies_sha256(vocabs), path.name
        assert extra["config_sha256"] == config_sha256(finished.model.config), path.name
        assert extra["recipe"]["d_model"] == 32 and extra["longest_source"] > 0, path.name


def test_a_step_checkpoint_refuses_a_vocabulary_of_another_run(finished, tmp_path):
    other = train(tmp_path / "other", vocab_size=200, max_steps=2)
    step = checkpoint_paths(finished.run_dir / "checkpoints")[-1]
    with pytest.raises(VocabularyError, match="not the vocabulary"):
        Translator.load(step, other.run_dir / "vocab.json", device="cpu")


def test_resuming_with_a_replaced_vocabulary_is_refused(copy, tmp_path):
    other = train(tmp_path / "other", vocab_size=200, max_steps=2)
    shutil.copy(other.run_dir / "vocab.json", copy / "vocab.json")
    with pytest.raises(VocabularyError, match=r"vocab\.json is not the vocabulary .*model\.pt was trained"):
        train(copy, max_steps=6)
    kept = [path.name for path in checkpoint_paths(copy / "checkpoints")]
    assert kept == ["step_00000002.pt", "step_00000004.pt"]


def test_a_run_none_of_whose_checkpoints_can_be_resumed_is_not_overwritten(copy):
    for path in checkpoint_paths(copy / "checkpoints"):
        path.write_bytes(path.read_bytes()[:1000])  # truncated, as by a full disk
    with pytest.raises(CheckpointError, match=r"no checkpoint in .* can be resumed.*truncated or corrupt"):
        train(copy, max_steps=6)
    assert all(path.stat().st_size == 1000 for path in checkpoint_paths(copy / "checkpoints"))


# --- a run that failed at its start ----------------------------------------------------------------


def test_a_run_without_checkpoints_takes_a_new_recipe_and_builds_a_new_vocabulary(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    failed = recipe(vocab_size=200, max_steps=1, checkpoint_every=5, dropout=0.3)  # failed at its start
    (run_dir / "recipe.json").write_text(json.dumps(failed.to_dict()))
    first = train(run_dir, vocab_size=200, max_steps=1, checkpoint_every=5)
    note = capsys.readouterr().err
    assert note.endswith("holds no checkpoint yet, so it takes the new settings of dropout\n")
    shutil.rmtree(run_dir / "checkpoints")
    (run_dir / "model.pt").unlink()
    again = train(run_dir, vocab_size=250, max_steps=1, checkpoint_every=5)
    assert "takes the new settings of vocab_size" in capsys.readouterr().err
    assert len(first.vocabs.source) != len(again.vocabs.source)  # built again, with the new size
    assert json.loads((run_dir / "recipe.json").read_text())["vocab_size"] == 250


def test_a_run_with_only_model_pt_left_keeps_its_recipe(copy):
    shutil.rmtree(copy / "checkpoints")
    with pytest.raises(ValueError, match="holds a run of another configuration"):
        train(copy, dropout=0.2)


# --- a run written before a recipe held its two configurations ------------------------------------


def written_before(run_dir, **decoding):
    """Make `run_dir` a run as the package wrote it before a recipe held the model's and the training's
    configurations: its recipe.json, and the copy in every checkpoint, in the old flat format (with
    other `decoding` settings, which a run may change), and its checkpoints and model.pt in the
    checkpoint format of then (version 2)."""
    old = {**OLD_RECIPE_JSON, **decoding}
    assert Recipe.from_dict(old) == recipe(**decoding)  # the recipe the run was trained with
    (run_dir / "recipe.json").write_text(json.dumps(old, indent=1))
    for path in RunDirectory(run_dir).work():
        checkpoint = torch.load(path, weights_only=True)
        checkpoint["extra"]["recipe"] = old
        torch.save(version_2(checkpoint), path)
        assert read_checkpoint(path)["extra"]["recipe"] == old
    return run_dir


def test_a_run_written_before_translates_evaluates_and_resumes(copy, capsys):
    written_before(copy, beam_size=3, alpha=1.2)
    translator = Translator.load(copy, device="cpu")  # the decoding settings of model.pt's old recipe
    assert (translator.beam_size, translator.alpha) == (3, 1.2)
    assert main(["translate", str(copy), "--device", "cpu", "Der Hund schläft."]) == 0  # its recipe.json
    assert main(["evaluate", str(copy), "--device", "cpu", "--limit", "3"]) == 0
    assert "builtin test: 3 sentences, beam 3, alpha 1.2" in capsys.readouterr().out
    run = train(copy, max_steps=6)  # the same recipe, trained on: max_steps (and the decoding) may change
    assert run.steps == 6 and run.history[-1]["step"] == 6
    assert json.loads((copy / "recipe.json").read_text()) == recipe(max_steps=6).to_dict()  # written anew


def test_a_run_written_before_restores_its_recipe_json_from_an_old_checkpoint(copy, capsys):
    (written_before(copy) / "recipe.json").write_text("{")
    assert train(copy, max_steps=6).steps == 6
    assert "restored it from" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "difference"),
    [({"dropout": 0.2}, "dropout: 0.1 -> 0.2"), ({"n_decoder_layers": 2}, "n_decoder_layers: None -> 2"),
     ({"attention_dropout": 0.1}, "attention_dropout: 0.0 -> 0.1")],  # not in the old file: its default
)
def test_a_run_written_before_refuses_another_configuration(copy, change, difference):
    written_before(copy)
    refused = rf"holds a run of another configuration \({re.escape(difference)}\)"
    with pytest.raises(ValueError, match=refused):
        train(copy, max_steps=6, **change)


# --- damaged side files ----------------------------------------------------------------------------


def test_a_damaged_history_is_kept_aside_and_started_again(copy, capsys):
    minutes = read_checkpoint(checkpoint_paths(copy / "checkpoints")[-1])["extra"]["minutes"]
    (copy / "history.json").write_text('[{"step": 1, "loss"')
    run = train(copy, max_steps=6)
    error = capsys.readouterr().err
    assert "history.json is damaged" in error and "kept it as history.json.damaged" in error
    assert "starts again at step 4" in error
    assert (copy / "history.json.damaged").read_text() == '[{"step": 1, "loss"'
    assert [record["step"] for record in run.history] == [5, 6]
    assert run.history[0]["minutes"] >= minutes > 0  # the minutes before come from the checkpoint


def test_a_damaged_recipe_is_restored_from_the_checkpoints(copy, capsys):
    (copy / "recipe.json").write_text("{")
    train(copy, max_steps=6)
    assert "restored it from" in capsys.readouterr().err
    assert json.loads((copy / "recipe.json").read_text())["d_model"] == 32
    assert (copy / "recipe.json.damaged").read_text() == "{"
    (copy / "recipe.json").write_text("[]")
    with pytest.raises(ValueError, match="another configuration"):  # the restored recipe still protects
        train(copy, max_steps=8, d_model=48)


def test_a_damaged_recipe_without_a_copy_says_what_to_do(copy):
    for path in [*checkpoint_paths(copy / "checkpoints"), copy / "model.pt"]:  # written before copies
        checkpoint = torch.load(path, weights_only=True)
        checkpoint["extra"].pop("recipe")
        torch.save(checkpoint, path)
    (copy / "recipe.json").write_text("{")
    with pytest.raises(ValueError, match=r"no checkpoint of .* holds a copy of the recipe: restore"):
        train(copy, max_steps=6)


def test_a_damaged_vocabulary_is_built_again_and_checked(copy, capsys):
    original = (copy / "vocab.json").read_text()
    (copy / "vocab.json").write_text(original[: len(original) // 2])
    train(copy, max_steps=6)
    assert "built it again" in capsys.readouterr().err
    assert json.loads((copy / "vocab.json").read_text()) == json.loads(original)


def test_a_damaged_hardware_file_is_written_again(copy, capsys):
    (copy / "hardware.json").write_text("{")
    run = train(copy, max_steps=6)
    assert "hardware.json is damaged" in capsys.readouterr().err
    assert run.hardware["device"] == "cpu" and json.loads((copy / "hardware.json").read_text())


# --- a killed process ------------------------------------------------------------------------------

KILLED_WRITER = """
import os, sys, time
from pathlib import Path
from annotated_transformer.helpers.files import atomic_save, atomic_write_text
run = Path(sys.argv[1])
os.fsync = lambda fd: time.sleep(600)  # every write stops between its temporary file and the rename
if sys.argv[2] == "text":
    atomic_write_text(run / "history.json", "[]")
else:
    atomic_save({"x": 1}, run / sys.argv[2])
"""


@pytest.mark.parametrize("target", ["text", "checkpoints/step_00000006.pt", "cache/encoded-x.pt"])
def test_what_a_killed_process_left_half_written_is_removed_at_the_next_start(copy, target):
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(copy), target])
    folder = copy / (target.rsplit("/", 1)[0] if "/" in target else "")
    deadline = time.monotonic() + 60
    while not list(folder.glob(f".*.{writer.pid}.tmp")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    (orphan,) = folder.glob(f".*.{writer.pid}.tmp")
    train(copy, max_steps=6)
    assert not orphan.exists()


# --- the data folder -------------------------------------------------------------------------------


def test_the_data_folder_of_a_run_is_recorded(tmp_path):
    run_dir = tmp_path / "run"
    train_translation(recipe(max_steps=1), run_dir, device="cpu", progress=False,
                      corpus_options={"root": tmp_path})  # the built-in corpus ignores it
    assert run_data_dir(run_dir) == tmp_path.resolve()
    (run_dir / "run.json").write_text("{")
    assert run_data_dir(run_dir) is None  # a damaged run.json is only a lost default


# --- chapter 9's evaluate says what it computes -----------------------------------------------------


def test_evaluate_documents_each_value_it_returns(finished):
    pairs = encode_pairs(builtin_corpus("val")[:20], finished.vocabs)
    batches = token_batches(pairs, 400, shuffle=False)(0)
    result = evaluate(finished.model, list(batches))
    assert set(result) == {"nll", "ppl", "exact_match"}
    for key in result:
        assert f"`{key}`" in evaluate.__doc__, key
    assert "is exactly greedy decoding's" not in evaluate.__doc__


def run_parameters(source: str) -> list[tuple[str, str, str]]:
    """(function, parameter, annotation) for every parameter of `source`'s functions whose annotation
    names a run directory's object (`RunDirectory` or `Run`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if re.search(r"\b(RunDirectory|Run)\b", annotation):
                    found.append((node.name, arg.arg, annotation))
    return found


def test_the_run_layer_takes_a_path_never_a_run_directory_or_a_path():
    """One run type in signatures: a function takes a run directory's path (`str | Path`), or, where
    it works on the layout itself, a `RunDirectory` alone; never a union of both, and no converter
    between them (`RunDirectory.of`). Checked over every module of the package."""
    package = Path(annotated_transformer.__file__).parent
    mixed = [(path.name, *found) for path in sorted(package.rglob("*.py"))
             for found in run_parameters(path.read_text(encoding="utf-8"))
             if "|" in found[2]]
    assert not mixed, f"parameters that take a run directory's object or a path: {mixed}"
    assert not [path.name for path in package.rglob("*.py") if "RunDirectory.of(" in path.read_text()]
    planted = "def f(run: RunDirectory | Path, files: RunDirectory, path: str | Path): ...\n"
    assert run_parameters(planted) == [("f", "run", "RunDirectory | Path"), ("f", "files", "RunDirectory")]


