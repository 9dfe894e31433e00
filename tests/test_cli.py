"""The command line (chapter 15, book/15_command_line.ipynb): `python -m annotated_transformer
train | translate | evaluate | average`."""

import dataclasses
import io
import json
import shutil
import subprocess
import sys

import pytest
import torch
from helpers import small_config

from annotated_transformer.__main__ import main, option_name
from annotated_transformer.data import corpus
from annotated_transformer.model import make_model
from annotated_transformer.tokenization import build_vocabularies
from annotated_transformer.training import read_checkpoint, save_checkpoint
from annotated_transformer.translation import Recipe


def write_run(directory, n: int = 4) -> list:
    """n checkpoints of one configuration, at steps 10, 20, ..., with different parameters."""
    paths = []
    for i in range(n):
        torch.manual_seed(i)
        model = make_model(small_config())
        step = (i + 1) * 10
        paths.append(save_checkpoint(directory / f"step_{step:08d}.pt", model=model, step=step))
    return paths


def test_average_of_the_last_k_in_a_directory(tmp_path, capsys):
    paths = write_run(tmp_path / "run")
    assert main(["average", str(tmp_path / "run"), "--last", "3", "--output", str(tmp_path / "avg.pt")]) == 0
    averaged = read_checkpoint(tmp_path / "avg.pt")
    states = [read_checkpoint(p)["model"] for p in paths[-3:]]
    for name, tensor in averaged["model"].items():
        expected = sum(state[name].double() for state in states) / 3
        assert torch.allclose(tensor.double(), expected, atol=1e-6), name
    assert averaged["step"] == 40
    assert averaged["extra"]["averaged_steps"] == [20, 30, 40]
    assert "averaged 3 checkpoints (steps 20, 30, 40)" in capsys.readouterr().out


def test_average_of_listed_files(tmp_path):
    paths = write_run(tmp_path)
    main(["average", str(paths[0]), str(paths[2]), "-o", str(tmp_path / "avg.pt")])
    assert read_checkpoint(tmp_path / "avg.pt")["extra"]["averaged_steps"] == [10, 30]


def test_averaging_one_checkpoint_k_times_returns_it(tmp_path):
    (path,) = write_run(tmp_path, 1)
    main(["average", str(path), str(path), str(path), "-o", str(tmp_path / "avg.pt")])
    original, averaged = read_checkpoint(path)["model"], read_checkpoint(tmp_path / "avg.pt")["model"]
    assert all(torch.equal(original[name], averaged[name]) for name in original)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["EMPTY", "-o", "out.pt"], "no step_*.pt checkpoints in"),
        (["RUN", "--last", "0", "-o", "out.pt"], "--last must be at least 1"),
        (["RUN", "--last", "5", "-o", "out.pt"], "holds 4 checkpoint(s), fewer than --last 5"),
        (["RUN/step_00000099.pt", "-o", "out.pt"], "no checkpoint at"),
        (["RUN/step_00000010.pt", "RUN", "-o", "out.pt"], "is a directory"),
        (["RUN", "-k", "2", "-o", "RUN/step_00000040.pt"], "is one of the checkpoints to average"),
    ],
)
def test_bad_input_ends_with_a_message_and_status_2(tmp_path, capsys, arguments, message):
    write_run(tmp_path / "run")
    (tmp_path / "empty").mkdir()
    places = {"EMPTY": str(tmp_path / "empty"), "RUN": str(tmp_path / "run")}
    for name, place in places.items():
        arguments = [argument.replace(name, place) for argument in arguments]
    with pytest.raises(SystemExit) as exit_info:
        main(["average", *arguments])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_checkpoints_of_different_models_are_refused(tmp_path, capsys):
    save_checkpoint(tmp_path / "a.pt", model=make_model(small_config()))
    save_checkpoint(tmp_path / "b.pt", model=make_model(small_config(d_ff=48)))
    with pytest.raises(SystemExit):
        main(["average", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "-o", str(tmp_path / "avg.pt")])
    assert "error" in capsys.readouterr().err
    assert not (tmp_path / "avg.pt").exists()


def test_python_dash_m_runs_the_command_line(tmp_path):
    write_run(tmp_path, 2)
    result = subprocess.run(
        [sys.executable, "-m", "annotated_transformer", "average", str(tmp_path), "--last", "2",
         "-o", str(tmp_path / "x.pt")],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "x.pt").is_file()
    help_text = subprocess.run(
        [sys.executable, "-m", "annotated_transformer", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "§6.1" in help_text
    assert all(command in help_text for command in ("train", "translate", "evaluate", "average"))


# --- train, translate, evaluate ---------------------------------------------------------------------

TINY = ["--max-steps", "3", "--d-model", "32", "--d-ff", "64", "--layers", "1", "--heads", "2",
        "--checkpoint-every", "1", "--average-last", "2", "--quiet"]
KEPT = ["step_00000002.pt", "step_00000003.pt"]  # the last --average-last 2 checkpoints


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One tiny training run of the builtin configuration, shared by the tests below (a few seconds)."""
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", "--config", "builtin", "--run-dir", str(run_dir), "--device", "cpu", *TINY]) == 0
    return run_dir


def fails(capsys, *argv) -> str:
    """Run a command that must fail: exit status 2 and one line of error; returns that line."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(argument) for argument in argv])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert "Traceback" not in error
    return error


def test_train_writes_a_finished_run_and_says_how_to_use_it(run, capsys):
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == KEPT
    for name in ("recipe.json", "vocab.json", "history.json", "model.pt"):
        assert (run / name).is_file(), name
    model = read_checkpoint(run / "model.pt")
    assert model["step"] == 3 and model["extra"]["averaged"] == KEPT
    assert json.loads((run / "recipe.json").read_text())["d_model"] == 32
    assert main(["train", "--run-dir", str(run), "--device", "cpu", *TINY]) == 0  # the same command again
    out = capsys.readouterr().out
    assert "already trained (3 steps): nothing left to do" in out
    assert f"model:      {run / 'model.pt'}" in out and f"vocabulary: {run / 'vocab.json'}" in out
    assert f"python -m annotated_transformer translate {run}" in out
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == KEPT


def test_translate_arguments_stdin_and_files_agree(run, tmp_path, capsys, monkeypatch):
    sentences = ["Der kleine Hund sieht die Katze.", "", "Heute malt die Frau."]
    options = ["--device", "cpu", "--beam-size", "2"]
    assert main(["translate", str(run), sentences[0], *options[:2], *sentences[1:], *options[2:]]) == 0
    from_arguments = capsys.readouterr().out.split("\n")
    assert len(from_arguments) == 4 and from_arguments[1] == "" and from_arguments[3] == ""
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(sentences) + "\n"))
    main(["translate", str(run / "model.pt"), *options])
    assert capsys.readouterr().out.split("\n") == from_arguments
    (tmp_path / "in.de").write_text("\r\n".join(sentences) + "\r\n", encoding="utf-8")
    main(["translate", str(run), "-i", str(tmp_path / "in.de"), "-o", str(tmp_path / "out/en.txt"), *options])
    assert capsys.readouterr().out == ""
    assert (tmp_path / "out" / "en.txt").read_text(encoding="utf-8").split("\n") == from_arguments


def test_translate_a_step_checkpoint_finds_the_run_vocabulary(run, capsys):
    assert main(["translate", str(run / "checkpoints" / "step_00000003.pt"), "Der Hund.", "--beam-size", "1",
                 "--device", "cpu"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_evaluate_prints_both_bleu_scores_and_writes_json(run, tmp_path, capsys):
    output = tmp_path / "evaluation.json"
    assert main(["evaluate", str(run), "--limit", "20", "--beam-size", "1", "--device", "cpu",
                 "--output", str(output)]) == 0
    out = capsys.readouterr().out
    assert "builtin test: 20 sentences, beam 1" in out
    assert "BLEU " in out and "case:mixed" in out and "BLEU, lowercased" in out and "case:lc" in out
    report = json.loads(output.read_text(encoding="utf-8"))
    assert report["corpus"] == "builtin" and report["sentences"] == 20 and len(report["hypotheses"]) == 20
    assert 0 <= report["bleu"] <= 100 and report["signature"].startswith("nrefs:1|case:mixed")
    assert report["signature_lowercase"].startswith("nrefs:1|case:lc")
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically: no temporary file left


def test_train_errors(run, tmp_path, capsys):
    message = fails(capsys, "train", "--run-dir", run, *TINY, "--dropout", "0.2")  # another config
    assert "holds a run of another configuration (dropout: 0.1 -> 0.2)" in message
    assert "use a new --run-dir" in message
    message = fails(capsys, "train", "--run-dir", tmp_path / "x", "--d-model", "30", "--heads", "4")
    assert "d_model=30 is not divisible by n_heads=4" in message
    assert "--checkpoint-every must be at least 1" in fails(
        capsys, "train", "--run-dir", tmp_path / "x", "--checkpoint-every", "0"
    )
    assert not (tmp_path / "x").exists()  # refused before anything was written


def test_unknown_configuration_lists_the_choices(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--config", "huge"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "invalid choice: 'huge'" in error
    assert all(name in error for name in ("builtin", "multi30k", "base", "big"))


def test_translate_and_evaluate_errors(run, tmp_path, capsys):
    assert "no run directory or checkpoint at" in fails(capsys, "translate", tmp_path / "missing", "Hallo.")
    (tmp_path / "unfinished").mkdir()
    assert "holds no model.pt yet" in fails(capsys, "evaluate", tmp_path / "unfinished")
    other = tmp_path / "other" / "vocab.json"  # the vocabulary of another run
    build_vocabularies(corpus("builtin", "train")[:100], "word", min_freq=1).save(other)
    message = fails(capsys, "translate", run, "--vocab", other, "Hallo.")
    assert "is not the vocabulary" in message and "vocab.json" in message
    (tmp_path / "damaged").mkdir()
    shutil.copy(run / "vocab.json", tmp_path / "damaged" / "vocab.json")
    (tmp_path / "damaged" / "model.pt").write_bytes((run / "model.pt").read_bytes()[:5000])
    assert "truncated or corrupt" in fails(capsys, "translate", tmp_path / "damaged" / "model.pt", "Hallo.")
    assert "no input file at" in fails(capsys, "translate", run, "--input", tmp_path / "nothing.de")
    assert "not both" in fails(capsys, "translate", run, "Hallo.", "--input", tmp_path / "nothing.de")
    assert "unknown split 'dev'" in fails(capsys, "evaluate", run, "--split", "dev")
    message = fails(capsys, "evaluate", run, "--corpus", "wmt14")
    assert "invalid choice: 'wmt14'" in message and "builtin" in message
    assert "must be at least 1" in fails(capsys, "evaluate", run, "--limit", "0")


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("train", ["--config", "--run-dir", "--data-dir", "--no-download", "--device", "--quiet", "builtin",
                   "multi30k", "base", "big"]),
        ("translate", ["RUN_DIR_OR_CHECKPOINT", "SENTENCE", "--vocab", "--beam-size", "--input", "--output",
                       "--device"]),
        ("evaluate", ["RUN_DIR_OR_CHECKPOINT", "--corpus", "--split", "--data-dir", "--no-download",
                      "--beam-size", "--limit", "--output", "--vocab", "--device"]),
        ("average", ["CHECKPOINT", "--last", "--output"]),
        ("experiment", ["table3", "layer-norm", "--scale", "--out", "--rows", "--workers", "--device",
                        "--data-dir", "quick", "small", "medium", "paper"]),
    ],
)
def test_help_of_each_command(capsys, command, options):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    if command == "train":
        fields = [field.name for field in dataclasses.fields(Recipe) if field.name != "name"]
        options = options + [option_name(name) for name in fields]
        assert "--layers" in options and "--heads" in options and "--max-steps" in options
    for option in options:
        assert option in help_text, option


# --- options of new recipe fields, and experiment ---------------------------------------------------


def test_options_of_fields_without_a_default_value_have_their_types(tmp_path):
    from annotated_transformer.__main__ import build_parser, recipe_from_args

    args = build_parser().parse_args(
        ["train", "--max-minutes", "2.5", "--d-k", "16", "--d-v", "8", "--positional", "learned",
         "--norm-position", "pre", "--no-warmup-ramp"]
    )
    recipe = recipe_from_args(args)
    assert (recipe.max_minutes, recipe.d_k, recipe.d_v) == (2.5, 16, 8)
    assert (recipe.positional, recipe.norm_position, recipe.warmup_ramp) == ("learned", "pre", False)


def test_bad_values_of_new_fields_name_the_option(tmp_path, capsys):
    message = fails(capsys, "train", "--run-dir", tmp_path / "x", "--d-k", "0")
    assert "--d-k must be a positive integer or None, got 0" in message
    with pytest.raises(SystemExit):
        main(["train", "--positional", "rotary"])
    assert "invalid choice: 'rotary'" in capsys.readouterr().err


def test_experiment_trains_the_rows_asked_for_and_reads_them_back(tmp_path, capsys):
    out = tmp_path / "experiments"
    command = ["experiment", "table3", "--scale", "quick", "--rows", "E", "--out", str(out)]
    assert main([*command, "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "(E) learned positions" in printed and "| E | learned positions |" in printed
    results = json.loads((out / "table3.json").read_text())
    assert [r["name"] for r in results] == ["(E) learned positions"]
    assert (out / results[0]["run"] / "model.pt").is_file()
    assert main(command) == 0
    assert json.loads((out / "table3.json").read_text()) == results  # read back, not trained again


def test_experiment_errors(tmp_path, capsys):
    message = fails(capsys, "experiment", "table3", "--scale", "quick", "--rows", "F", "--out", tmp_path)
    assert "unknown row(s) ['F']" in message and "'A'" in message
    with pytest.raises(SystemExit):
        main(["experiment", "table4"])
    assert "invalid choice: 'table4'" in capsys.readouterr().err
