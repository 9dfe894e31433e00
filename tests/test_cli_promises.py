"""Promises of the command line (annotated_transformer/cli/commands.py, chapter 16) that reach what a
command does: `evaluate`'s --split, --beam-size, --data-dir, --output and the run's recipe in what it
scores and the JSON it writes; `translate`'s sentences from standard input, --input or the arguments,
checked before the work; `average`'s directory (its newest 5 by default) and file list; the whole
one-line messages a user reads on bad input; the warnings shown once, as the library gave them."""

import errno
import io
import json
import shutil
import sys
import warnings

import pytest
import torch
from helpers import small_config

from annotated_transformer.__main__ import main
from annotated_transformer.checkpoints import read_checkpoint, save_checkpoint
from annotated_transformer.cli import commands as cli
from annotated_transformer.data import corpus
from annotated_transformer.helpers.errors import Setting
from annotated_transformer.model import make_model
from annotated_transformer.recipes import get_recipe
from annotated_transformer.translator import Translator

PROG = "python -m annotated_transformer"
CPU = ["--device", "cpu"]


def fails(capsys, *argv) -> str:
    """The one-line error of a command that must end with exit status 2 (no traceback)."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(argument) for argument in argv])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert "Traceback" not in error and "\n" not in error, error
    return error


def write_test_set(folder, german):
    """A folder laid out like Multi30k's, with a test split of the `german` sentences."""
    folder.mkdir()
    (folder / "test_2016_flickr.de").write_text("".join(f"{de}\n" for de in german), encoding="utf-8")
    (folder / "test_2016_flickr.en").write_text("".join(f"the dog {i}.\n" for i in range(len(german))),
                                                encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def runs(tiny_run, tmp_path_factory):
    """Copies of the session's tiny run (conftest.py), made once for this file, which only reads them:
    `tuned`, in a folder whose name is not ASCII, whose recipe decodes with beam 2 and alpha 1.0;
    `recorded`, whose run.json says it was trained from the folder `a` (5 German sentences in its test
    split); `b`, another folder (3 Russian sentences, which the model cannot read); `lone`, the run's
    model and vocabulary alone, without a recipe."""
    root = tmp_path_factory.mktemp("cli_promises")
    tuned = shutil.copytree(tiny_run, root / "Läufe" / "tuned")
    recipe = json.loads((tuned / "recipe.json").read_text(encoding="utf-8"))
    (tuned / "recipe.json").write_text(json.dumps({**recipe, "beam_size": 2, "alpha": 1.0}), encoding="utf-8")
    a = write_test_set(root / "a", [f"Der Hund {i}." for i in range(5)])
    b = write_test_set(root / "b", ["Привет, как дела?", "Где мой дом?", "Я люблю кошек."])
    recorded = shutil.copytree(tiny_run, root / "recorded")
    (recorded / "run.json").write_text(json.dumps({"data_dir": str(a)}), encoding="utf-8")
    lone = root / "lone"
    lone.mkdir()
    for name in ("model.pt", "vocab.json"):
        shutil.copy(tiny_run / name, lone / name)
    return {"run": tiny_run, "tuned": tuned, "recorded": recorded, "a": a, "b": b, "lone": lone}


# --- evaluate ----------------------------------------------------------------------------------------


def test_evaluate_scores_the_split_asked_for_with_the_runs_beam_and_writes_them_as_json(runs, tmp_path,
                                                                                         capsys):
    """--split chooses the sentences scored; the run's recipe gives the beam and alpha; the JSON names
    the checkpoint, corpus, split, beam and alpha, one key a line, its text as UTF-8 (not escaped)."""
    tuned, output = runs["tuned"], tmp_path / "evaluation.json"
    assert main(["evaluate", str(tuned), "--split", "val", "--limit", "2", *CPU, "--output",
                 str(output)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("builtin val: 2 sentences, beam 2, alpha 1.0, translated in ")
    assert lines[-1] == f"scores and translations written to {output}"
    text = output.read_text(encoding="utf-8")
    report = json.loads(text)
    keys = ("checkpoint", "corpus", "split", "beam_size", "alpha", "sentences")
    assert {key: report[key] for key in keys} == {
        "checkpoint": str(tuned), "corpus": "builtin", "split": "val", "beam_size": 2, "alpha": 1.0,
        "sentences": 2}
    assert text == json.dumps(report, indent=1, ensure_ascii=False) + "\n"
    assert '"checkpoint": "' + str(tuned) + '"' in text and "Läufe" in text
    expected = Translator.load(tuned, device="cpu", beam_size=2, alpha=1.0).translate(
        [de for de, _ in corpus("builtin", "val")[:2]])
    assert report["hypotheses"] == expected


def test_evaluate_of_a_checkpoint_without_a_recipe_scores_the_builtin_test_set(runs, capsys):
    """Without a recipe, the corpus is the builtin one, and the beam and alpha the paper's (4, 0.6)."""
    assert main(["evaluate", str(runs["lone"] / "model.pt"), "--limit", "1", *CPU]) == 0
    assert capsys.readouterr().out.startswith("builtin test: 1 sentences, beam 4, alpha 0.6, translated in ")


def test_evaluate_data_dir_comes_before_the_folder_the_run_was_trained_from(runs, capsys):
    """--data-dir, else the folder the run was trained from (run.json), is where the test set is read;
    the sentences the model cannot read get the command's one-line warning."""
    recorded, a, b = runs["recorded"], runs["a"], runs["b"]
    options = ["--corpus", "multi30k", "--no-download", "--beam-size", "1", *CPU]
    assert main(["evaluate", str(recorded), *options]) == 0
    assert capsys.readouterr().out.startswith(f"multi30k test (from {a}): 5 sentences, beam 1, alpha 0.6")
    assert main(["evaluate", str(recorded), *options, "--data-dir", str(b)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"multi30k test (from {b}): 3 sentences, beam 1, alpha 0.6")
    (warning,) = captured.err.splitlines()
    assert warning.startswith(f"{PROG} evaluate: warning: 3 of 3 sentence(s) are mostly <unk>")


def test_evaluate_of_the_builtin_corpus_names_no_data_folder(runs, capsys):
    """The builtin corpus is read from the package, whatever --data-dir says: no "(from ...)"."""
    assert main(["evaluate", str(runs["run"]), "--data-dir", str(runs["a"]), "--limit", "1", "--beam-size",
                 "1", *CPU]) == 0
    assert capsys.readouterr().out.startswith("builtin test: 1 sentences, beam 1, alpha 0.6, translated in ")


def test_evaluate_output_that_names_a_folder_suggests_a_file(runs, tmp_path, capsys):
    folder = f"{tmp_path / 'scores'}/"
    assert fails(capsys, "evaluate", runs["run"], "--output", folder) == (
        f"{PROG} evaluate: error: --output {folder} names a directory (it ends in /): give the name of a "
        f"file to write, e.g. {tmp_path / 'scores' / 'evaluation.json'}")


def test_evaluate_a_failed_write_names_the_users_file(runs, tmp_path, capsys, monkeypatch):
    output = tmp_path / "evaluation.json"

    def refused(path, text):
        raise OSError(errno.EACCES, "Permission denied", str(path.with_name(f".{path.name}.123.tmp")))

    monkeypatch.setattr(cli, "atomic_write_text", refused)
    message = fails(capsys, "evaluate", runs["run"], "--limit", "1", "--beam-size", "1", *CPU, "-o", output)
    assert message == f"{PROG} evaluate: error: cannot write --output {output}: Permission denied"


# --- translate ---------------------------------------------------------------------------------------


def test_translate_input_dash_reads_standard_input(runs, capsys, monkeypatch):
    run = str(runs["run"])
    main(["translate", run, "Der Hund.", "Die Katze.", "--beam-size", "1", *CPU])
    from_arguments = capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.StringIO("Der Hund.\nDie Katze.\n"))
    assert main(["translate", run, "--input", "-", "--beam-size", "1", *CPU]) == 0
    assert capsys.readouterr().out == from_arguments


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_translate_says_on_a_terminal_how_to_end_standard_input(runs, capsys, monkeypatch):
    """On a terminal, one line on standard error says how to end the input; standard output holds the
    translations alone."""
    monkeypatch.setattr(sys, "stdin", Terminal("Der Hund.\n"))
    assert main(["translate", str(runs["run"]), "--beam-size", "1", *CPU]) == 0
    captured = capsys.readouterr()
    assert captured.err == "reading sentences from standard input, one per line; end with Ctrl-D\n"
    assert len(captured.out.splitlines()) == 1


def test_translate_sentences_and_input_together_are_refused_in_one_line(runs, tmp_path, capsys):
    assert fails(capsys, "translate", runs["run"], "Hallo.", "--input", tmp_path / "in.de") == (
        f"{PROG} translate: error: give the sentences either as arguments or with --input, not both")


def test_translate_reads_its_input_before_loading_the_model_and_once(runs, tmp_path, capsys, monkeypatch):
    """A missing --input is said before the model is loaded; a file is read once."""
    original_load, original_read = cli.Translator.load, cli.read_input

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the input was read")

    monkeypatch.setattr(cli.Translator, "load", never)
    missing = tmp_path / "missing.de"
    assert fails(capsys, "translate", runs["run"], "--input", missing) == (
        f"{PROG} translate: error: no input file at {missing}: check the path")
    monkeypatch.setattr(cli.Translator, "load", original_load)
    reads = []

    def read_input(path):
        reads.append(path)
        return original_read(path)

    monkeypatch.setattr(cli, "read_input", read_input)
    (tmp_path / "in.de").write_text("Der Hund.\nDie Katze.\n", encoding="utf-8")
    assert main(["translate", str(runs["run"]), "-i", str(tmp_path / "in.de"), "--beam-size", "1", *CPU]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2 and reads == [tmp_path / "in.de"]


class Unread(io.StringIO):
    def read(self, *args):
        raise AssertionError("standard input was read before the model was loaded")


def test_translate_says_a_missing_model_before_waiting_for_standard_input(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", Unread())
    assert fails(capsys, "translate", tmp_path / "missing") == (
        f"{PROG} translate: error: no run directory or checkpoint at {tmp_path / 'missing'}: check the path, "
        f"or train first")


def test_translate_output_that_names_a_folder_suggests_a_file(runs, tmp_path, capsys):
    folder = f"{tmp_path / 'out'}/"
    assert fails(capsys, "translate", runs["run"], "Hallo.", "-o", folder) == (
        f"{PROG} translate: error: --output {folder} names a directory (it ends in /): give the name of a "
        f"file to write, e.g. {tmp_path / 'out' / 'translations.txt'}")


def test_translate_shows_other_warnings_once_as_the_library_gave_them(runs, capsys, monkeypatch):
    """A warning of another kind than InputWarning, given twice from one place during the translation,
    follows the caller's filters ("default": once a place) and keeps its message, category, file and
    line."""
    original = cli.Translator.translate

    def translate(self, sentences, *args, **kwargs):
        for _ in range(2):
            warnings.warn("a warning of another kind", UserWarning, stacklevel=1)
        return original(self, sentences, *args, **kwargs)

    monkeypatch.setattr(cli.Translator, "translate", translate)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("default")
        assert main(["translate", str(runs["run"]), "Der Hund.", "--beam-size", "1", *CPU]) == 0
    (warning,) = shown
    assert (str(warning.message), warning.category) == ("a warning of another kind", UserWarning)
    assert (warning.filename, warning.lineno) == (__file__, translate.__code__.co_firstlineno + 2)
    assert len(capsys.readouterr().out.splitlines()) == 1


# --- average -----------------------------------------------------------------------------------------


def write_checkpoints(directory, n):
    """n checkpoints of one small model, at steps 10, 20, ..., with different parameters."""
    paths = []
    for i in range(n):
        torch.manual_seed(i)
        paths.append(save_checkpoint(directory / f"step_{(i + 1) * 10:08d}.pt", make_model(small_config()),
                                     step=(i + 1) * 10))
    return paths


def test_average_of_a_directory_takes_its_newest_five_and_names_them(tmp_path, capsys):
    """Without --last, a directory's newest 5 checkpoints (§6.1) are averaged; the average names the
    files it came from."""
    paths = write_checkpoints(tmp_path / "run", 6)
    output = tmp_path / "averaged.pt"
    assert main(["average", str(tmp_path / "run"), "-o", str(output)]) == 0
    assert capsys.readouterr().out == f"averaged 5 checkpoints (steps 20, 30, 40, 50, 60) into {output}\n"
    extra = read_checkpoint(output)["extra"]
    assert extra["averaged_steps"] == [20, 30, 40, 50, 60]
    assert extra["averaged_from"] == [str(path) for path in paths[1:]]


def test_average_last_beside_a_list_of_files_is_refused_in_one_line(tmp_path, capsys):
    paths = write_checkpoints(tmp_path, 2)
    assert fails(capsys, "average", *paths, "--last", "2", "-o", tmp_path / "a.pt") == (
        f"{PROG} average: error: --last 2 chooses among a directory's checkpoints: give one directory, or "
        f"list only the checkpoint files to average")


def test_average_output_that_names_a_folder_suggests_a_file(tmp_path, capsys):
    paths = write_checkpoints(tmp_path, 2)
    folder = f"{tmp_path / 'out'}/"
    assert fails(capsys, "average", *paths, "-o", folder) == (
        f"{PROG} average: error: --output {folder} names a directory (it ends in /): give the name of a file "
        f"to write, e.g. {tmp_path / 'out' / 'averaged.pt'}")


def test_average_a_failed_write_names_the_users_file(tmp_path, capsys, monkeypatch):
    paths = write_checkpoints(tmp_path, 2)
    output = tmp_path / "averaged.pt"

    def refused(paths, path, extra):
        raise OSError(errno.EACCES, "Permission denied", str(path.with_name(f".{path.name}.123.tmp")))

    monkeypatch.setattr(cli, "save_average", refused)
    assert fails(capsys, "average", *paths, "-o", output) == (
        f"{PROG} average: error: cannot write --output {output}: Permission denied")


# --- messages ----------------------------------------------------------------------------------------


def test_out_of_memory_halves_the_batch_down_to_one_token(tmp_path):
    assert cli.out_of_memory(get_recipe("builtin", max_tokens=3), tmp_path / "run") == (
        "out of GPU memory with batches of up to 3 tokens: run the same command with --max-tokens 1 (and "
        "--accumulate 2 to keep the batch size)")


def test_download_is_said_as_the_option_that_gives_it():
    assert cli._option_spelling(Setting("download", False)) == "--no-download"
    assert cli._option_spelling(Setting("download", True)) == "leaving out --no-download"
