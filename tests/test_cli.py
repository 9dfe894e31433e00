"""The command line (annotated_transformer/cli/commands.py and recipe_options.py, shown at work in
chapter 16): `python -m annotated_transformer train | translate | evaluate | average`, and
`experiment` (chapters 18 and 19)."""

import dataclasses
import io
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import helpers
import pytest
import torch
from helpers import new_run, small_config

from annotated_transformer.__main__ import main
from annotated_transformer.checkpoints import checkpoint_sha256, read_checkpoint, save_checkpoint
from annotated_transformer.cli.commands import _what_was_trained
from annotated_transformer.cli.recipe_options import option_name
from annotated_transformer.companions.vocabulary_files import write_vocabularies
from annotated_transformer.data import corpus
from annotated_transformer.model import make_model
from annotated_transformer.recipes import get_recipe, recipe_settings
from annotated_transformer.tokenization import build_vocabularies
from annotated_transformer.training import Trainer


def write_run(directory, n: int = 4) -> list:
    """n checkpoints of one configuration, at steps 10, 20, ..., with different parameters."""
    paths = []
    for i in range(n):
        torch.manual_seed(i)
        model = make_model(small_config())
        step = (i + 1) * 10
        paths.append(save_checkpoint(directory / f"step_{step:08d}.pt", model, step=step))
    return paths


def test_average_of_the_last_k_in_a_directory(tmp_path, capsys):
    paths = write_run(tmp_path / "run")
    assert main(["average", str(tmp_path / "run"), "--last", "3", "--output", str(tmp_path / "avg.pt")]) == 0
    averaged = read_checkpoint(tmp_path / "avg.pt")
    states = [read_checkpoint(p)["state"]["model"] for p in paths[-3:]]
    for name, tensor in averaged["state"]["model"].items():
        expected = sum(state[name].double() for state in states) / 3
        assert torch.allclose(tensor.double(), expected, atol=1e-6), name
    assert averaged["state"]["step"] == 40
    assert averaged["extra"]["averaged_steps"] == [20, 30, 40]
    assert "averaged 3 checkpoints (steps 20, 30, 40)" in capsys.readouterr().out


def test_average_of_listed_files(tmp_path):
    paths = write_run(tmp_path)
    main(["average", str(paths[0]), str(paths[2]), "-o", str(tmp_path / "avg.pt")])
    assert read_checkpoint(tmp_path / "avg.pt")["extra"]["averaged_steps"] == [10, 30]


def test_averaging_one_checkpoint_k_times_returns_it(tmp_path):
    (path,) = write_run(tmp_path, 1)
    main(["average", str(path), str(path), str(path), "-o", str(tmp_path / "avg.pt")])
    original = read_checkpoint(path)["state"]["model"]
    averaged = read_checkpoint(tmp_path / "avg.pt")["state"]["model"]
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
    save_checkpoint(tmp_path / "a.pt", make_model(small_config()))
    save_checkpoint(tmp_path / "b.pt", make_model(small_config(d_ff=48)))
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

TINY = helpers.TINY_TRAIN
KEPT = ["step_00000002.pt", "step_00000003.pt"]  # the last --average-last 2 checkpoints


@pytest.fixture
def run(tiny_run):
    """The tiny training run of the builtin configuration (conftest.py), trained once for the session
    with the options TINY: the tests below only read it."""
    return tiny_run


def fails(capsys, *argv) -> str:
    return helpers.fails(capsys, main, *argv)


def test_train_writes_a_finished_run_and_says_how_to_use_it(run, tmp_path, capsys):
    run = shutil.copytree(run, tmp_path / "run")  # a copy: the same command again is run in it below
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == KEPT
    for name in ("recipe.json", "vocab.json", "history.json", "model.pt"):
        assert (run / name).is_file(), name
    model = read_checkpoint(run / "model.pt")
    assert model["state"]["step"] == 3 and model["extra"]["averaged"] == KEPT
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
    assert "train in a new run directory, or with the same settings to resume it" in message
    message = fails(capsys, "train", "--run-dir", tmp_path / "x", "--d-model", "30", "--heads", "4")
    assert message.endswith("--d-model 30 is not divisible by --heads 4: each head gets d_model / n_heads "
                            "dimensions, so choose --heads dividing --d-model (or give --d-k and --d-v "
                            "explicitly)")
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
    write_vocabularies(build_vocabularies(corpus("builtin", "train")[:100], "word", min_freq=1), other)
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
        ("experiment", ["table3", "layer-norm", "--scale", "--out", "--rows", "--seeds", "--workers",
                        "--device", "--data-dir", "quick", "small", "medium", "paper"]),
    ],
)
def test_help_of_each_command(capsys, command, options):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    if command == "train":
        settings = [name for name in recipe_settings() if name != "name"]
        options = options + [option_name(name) for name in settings]
        assert {"--layers", "--heads", "--decoder-layers", "--max-steps", "--ffn-dropout"} <= set(options)
    for option in options:
        assert option in help_text, option


# --- options of new recipe fields, and experiment ---------------------------------------------------


def test_options_of_fields_without_a_default_value_have_their_types(tmp_path):
    from annotated_transformer.cli.commands import build_parser
    from annotated_transformer.cli.recipe_options import recipe_from_args

    args = build_parser().parse_args(
        ["train", "--max-minutes", "2.5", "--d-k", "16", "--d-v", "8", "--positional", "learned",
         "--norm-position", "pre", "--no-warmup-ramp"]
    )
    recipe = recipe_from_args(args)
    assert (recipe.max_minutes, recipe.model.d_k, recipe.model.d_v) == (2.5, 16, 8)
    model, train = recipe.model, recipe.train
    assert (model.positional, model.norm_position, train.warmup_ramp) == ("learned", "pre", False)


def test_a_decoder_of_its_own_depth_reaches_the_model(tmp_path, capsys):
    from annotated_transformer.cli.commands import build_parser
    from annotated_transformer.cli.recipe_options import recipe_from_args
    from annotated_transformer.tokenization import build_vocabularies

    recipe = recipe_from_args(build_parser().parse_args(["train", "--layers", "4", "--decoder-layers", "1"]))
    pairs = [("ein Hund", "a dog"), ("eine Katze", "a cat")]
    config = recipe.model_config(build_vocabularies(pairs, kind="word", min_freq=1))
    assert (config.n_layers, config.decoder_layers) == (4, 1)
    message = fails(capsys, "train", "--run-dir", tmp_path / "x", "--decoder-layers", "0")
    assert "--decoder-layers" in message and "got 0" in message


# Every setting of a recipe and its option, with a value other than the builtin recipe's: the options
# keep their names (N and h of Table 3 as --layers and --heads), and each reaches its part.
EVERY_OPTION = {
    "corpus": ("--corpus", "multi30k"), "vocab": ("--vocab", "word"), "vocab_size": ("--vocab-size", 500),
    "min_freq": ("--min-freq", 3), "bpe_dropout": ("--bpe-dropout", 0.1), "n_layers": ("--layers", 3),
    "n_decoder_layers": ("--decoder-layers", 1),
    "d_model": ("--d-model", 256), "d_ff": ("--d-ff", 256), "n_heads": ("--heads", 8), "d_k": ("--d-k", 16),
    "d_v": ("--d-v", 8), "dropout": ("--dropout", 0.2), "attention_dropout": ("--attention-dropout", 0.1),
    "ffn_dropout": ("--ffn-dropout", 0.05), "max_len": ("--max-len", 600),
    "positional": ("--positional", "learned"), "norm_position": ("--norm-position", "pre"),
    "layer_norm_eps": ("--layer-norm-eps", 1e-5), "max_steps": ("--max-steps", 7),
    "accumulate": ("--accumulate", 2), "warmup": ("--warmup", 20), "warmup_ramp": ("--no-warmup-ramp", False),
    "lr_factor": ("--lr-factor", 0.7), "cooldown": ("--cooldown", 0.3),
    "label_smoothing": ("--label-smoothing", 0.2), "clip_grad_norm": ("--clip-grad-norm", 1.5),
    "rdrop_alpha": ("--rdrop-alpha", 0.5),
    "precision": ("--precision", "fp32"), "compile": ("--compile", True),
    "checkpoint_every": ("--checkpoint-every", 7), "seed": ("--seed", 3), "max_tokens": ("--max-tokens", 800),
    "max_minutes": ("--max-minutes", 2.5),
    "average_last": ("--average-last", 3), "beam_size": ("--beam-size", 2), "alpha": ("--alpha", 1.0),
}


def test_every_setting_of_a_recipe_is_an_option_of_train():
    from annotated_transformer.cli.commands import build_parser
    from annotated_transformer.cli.recipe_options import recipe_from_args

    assert set(EVERY_OPTION) == set(recipe_settings()) - {"name"}
    argv = ["train"]
    for name, (option, value) in EVERY_OPTION.items():
        assert option.replace("--no-", "--") == option_name(name), name
        argv += [option] if isinstance(value, bool) else [option, str(value)]
    recipe = recipe_from_args(build_parser().parse_args(argv))
    settings, builtin = recipe.to_dict(), get_recipe("builtin").to_dict()
    for name, (_, value) in EVERY_OPTION.items():
        assert settings[name] == value != builtin[name], name
    assert recipe.model.attention_dropout == 0.1 and recipe.train.accumulate == 2 and recipe.max_tokens == 800


def test_bad_values_of_new_fields_name_the_option(tmp_path, capsys):
    message = fails(capsys, "train", "--run-dir", tmp_path / "x", "--d-k", "0")
    assert message.endswith("--d-k must be a positive integer, got 0; leaving out --d-k means "
                            "d_model / n_heads")
    message = fails(capsys, "train", "--run-dir", tmp_path / "x", "--attention-dropout", "1.5")
    assert message.endswith("--attention-dropout must lie in [0, 1), got 1.5")
    message = fails(capsys, "train", "--run-dir", tmp_path / "x", "--rdrop-alpha", "-1")
    assert message.endswith("--rdrop-alpha must be >= 0 and finite (0: no R-Drop), got -1.0")
    assert not (tmp_path / "x").exists()
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
    assert main([*command, "--seeds", "2"]) == 0  # seed 0 is the run above, read back; seed 1 is new
    seeded = json.loads((out / "table3.json").read_text())
    first = results[0]["run"]
    assert [(r["run"], r["recipe"]["seed"]) for r in seeded] == [(first, 0), (f"{first}-seed=1", 1)]
    assert seeded[0] == results[0] and seeded[1]["val_nll"] != results[0]["val_nll"]
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| E |")][-1]
    assert row.split(" | ")[3] == "2"  # one line for the row, with its two seeds


def test_experiment_errors(tmp_path, capsys):
    message = fails(capsys, "experiment", "table3", "--scale", "quick", "--rows", "F", "--out", tmp_path)
    assert "unknown row(s) ['F']" in message and "'A'" in message
    with pytest.raises(SystemExit):
        main(["experiment", "table4"])
    assert "invalid choice: 'table4'" in capsys.readouterr().err


def test_the_complete_command_line_is_chapter_15s_with_the_experiment_of_chapters_17_and_18(capsys):
    from annotated_transformer.cli import commands as cli

    with pytest.raises(SystemExit):
        cli.main(["experiment", "table3"])
    assert "invalid choice: 'experiment'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = re.findall(r"^    (\w[\w-]*)", capsys.readouterr().out, re.MULTILINE)
    assert listed == ["train", "translate", "evaluate", "experiment", "average"]
    with pytest.raises(SystemExit):
        main(["experiment", "--help"])
    assert "{table3,layer-norm}" in capsys.readouterr().out


# --- faults: what the user sees --------------------------------------------------------------------


def test_divergence_names_the_step_the_value_and_the_options_and_keeps_a_checkpoint(
    run, tmp_path, capsys, monkeypatch
):
    run_dir = new_run(run, tmp_path)  # the builtin configuration as it is, 10,000 times its learning rate
    # At this rate the loss becomes NaN on some CPUs and only explodes (a finite 1e4) on others, whose
    # float32 kernels differ: an infinite loss from step 8 on makes the run diverge on every CPU.
    forward_loss = Trainer._forward_loss

    def exploding(trainer, *tensors):
        loss, nll = forward_loss(trainer, *tensors)
        return (loss * math.inf, nll) if trainer.step >= 7 else (loss, nll)

    monkeypatch.setattr(Trainer, "_forward_loss", exploding)
    message = fails(capsys, "train", "--config", "builtin", "--run-dir", run_dir, "--lr-factor", "10000",
                    "--max-steps", "20", "--checkpoint-every", "5", "--quiet", "--device", "cpu")
    assert message.startswith("python -m annotated_transformer train: error: training diverged at step ")
    assert re.search(r"the (loss|gradient norm) is (nan|inf)", message)
    assert "(--lr-factor, now 10000)" in message and "(--warmup, now 150 steps)" in message
    assert "(--clip-grad-norm, e.g. 1.0)" in message and "in a new --run-dir" in message
    assert "\n" not in message
    kept = re.search(r"step_\d{8}\.pt", message)[0]
    diverged_at = int(re.search(r"diverged at step (\d+)", message)[1])
    assert read_checkpoint(run_dir / "checkpoints" / kept)["state"]["step"] < diverged_at
    assert not (run_dir / "model.pt").exists()


def test_divergence_before_the_first_checkpoint_lets_the_corrected_command_start_over(run, tmp_path, capsys):
    run_dir = new_run(run, tmp_path)
    message = fails(capsys, "train", "--run-dir", run_dir, *TINY, "--lr-factor", "1e12",
                    "--checkpoint-every", "5")
    assert "no checkpoint had been taken yet" in message
    assert f"the same command with other values starts {run_dir} again" in message
    assert main(["train", "--run-dir", str(run_dir), *TINY, "--checkpoint-every", "5"]) == 0
    assert "takes the new settings of lr_factor" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--lr-factor", "inf", "--lr-factor must be a positive finite number, got inf"),
        ("--lr-factor", "nan", "--lr-factor must be a positive finite number, got nan"),
        ("--lr-factor", "0", "--lr-factor must be a positive finite number, got 0.0"),
        ("--lr-factor", "-1", "--lr-factor must be a positive finite number, got -1.0"),
        ("--clip-grad-norm", "0", "--clip-grad-norm must be a positive finite number, got 0.0; leaving out "
         "--clip-grad-norm means no clipping"),
        ("--clip-grad-norm", "inf", "--clip-grad-norm must be a positive finite number, got inf; leaving out "
         "--clip-grad-norm means no clipping"),
        ("--dropout", "1.5", "--dropout must lie in [0, 1), got 1.5"),
        ("--label-smoothing", "1", "--label-smoothing must lie in [0, 1), got 1.0"),
        ("--layers", "-2", "--layers must be a positive integer, got -2"),
        ("--d-ff", "0", "--d-ff must be a positive integer, got 0"),
        ("--warmup", "0", "--warmup must be a positive integer, got 0"),
        ("--accumulate", "0", "--accumulate must be a positive integer, got 0"),
        ("--max-steps", "-5", "--max-steps must be a positive integer, got -5"),
        ("--alpha", "nan", "--alpha must be >= 0 and finite, got nan"),
        ("--max-minutes", "nan", "--max-minutes must be positive, got nan; --max-minutes inf means no time "
         "limit"),
        ("--decoder-layers", "0", "--decoder-layers must be a positive integer, got 0; leaving out "
         "--decoder-layers means N, as many as the encoder"),
        ("--average-last", "0", "--average-last must be at least 1, got 0"),
        ("--vocab-size", "4", "--vocab-size must exceed the 4 special tokens, got 4"),
    ],
)
def test_values_no_training_could_use_are_refused_naming_the_option(tmp_path, capsys, option, value, message):
    assert fails(capsys, "train", "--run-dir", tmp_path / "x", option, value).endswith(message)
    assert not (tmp_path / "x").exists()


def test_gradient_clipping_is_an_option(run, tmp_path, capsys):
    run_dir = new_run(run, tmp_path)
    assert main(["train", "--run-dir", str(run_dir), *TINY, "--clip-grad-norm", "0.5"]) == 0
    assert json.loads((run_dir / "recipe.json").read_text())["clip_grad_norm"] == 0.5
    state = read_checkpoint(run_dir / "checkpoints" / KEPT[-1])["state"]
    assert state["config"]["clip_grad_norm"] == 0.5
    assert "clip_grad_norm: 0.5 -> 1.0" in fails(capsys, "train", "--run-dir", run_dir, *TINY,
                                                 "--clip-grad-norm", "1.0")


def test_a_checkpoint_with_non_finite_weights_is_refused_everywhere_in_one_line(run, tmp_path, capsys):
    checkpoint = torch.load(run / "checkpoints" / KEPT[-1], weights_only=True)
    checkpoint["state"]["model"]["generator.proj.weight"][0, 0] = float("inf")
    checkpoint["sha256"] = checkpoint_sha256(checkpoint)  # whole and sound, but not finite
    bad = tmp_path / "checkpoints" / "step_00000009.pt"
    bad.parent.mkdir()
    torch.save(checkpoint, bad)
    shutil.copy(run / "vocab.json", tmp_path / "vocab.json")
    for argv in (["average", bad.parent, "--last", "1", "-o", tmp_path / "avg.pt"],
                 ["translate", bad, "Hallo."], ["evaluate", bad, "--limit", "2"]):
        message = fails(capsys, *argv)
        assert "holds NaN or infinite parameters" in message and "\n" not in message
    assert not (tmp_path / "avg.pt").exists()


def swapped_vocabulary(run, path):
    """The run's vocabulary with two of its BPE pieces exchanged: same size, other ids."""
    data = json.loads((run / "vocab.json").read_text(encoding="utf-8"))
    pieces = data["bpe"]["model"]["vocab"]
    a, b = list(pieces)[10], list(pieces)[11]
    pieces[a], pieces[b] = pieces[b], pieces[a]
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def test_a_vocabulary_of_the_same_size_but_not_the_runs_is_refused(run, tmp_path, capsys):
    other = swapped_vocabulary(run, tmp_path / "vocab.json")
    step = run / "checkpoints" / KEPT[-1]
    for argv in (["translate", step, "--vocab", other, "Hallo."], ["evaluate", step, "--vocab", other],
                 ["translate", run, "--vocab", other, "Hallo."]):
        assert "is not the vocabulary" in fails(capsys, *argv)
    assert main(["average", str(run / "checkpoints"), "--last", "2", "-o", str(tmp_path / "avg.pt")]) == 0
    averaged = read_checkpoint(tmp_path / "avg.pt")["extra"]
    assert averaged["vocab_sha256"] == read_checkpoint(step)["extra"]["vocab_sha256"]
    assert averaged["recipe"]["d_model"] == 32 and averaged["config_sha256"]
    assert "is not the vocabulary" in fails(capsys, "translate", tmp_path / "avg.pt", "Hallo.")


def test_checkpoints_of_runs_with_different_vocabularies_are_not_averaged(run, tmp_path, capsys):
    checkpoint = torch.load(run / "checkpoints" / KEPT[-1], weights_only=True)
    checkpoint["extra"]["vocab_sha256"] = "0" * 64  # a run of the same model with another vocabulary
    checkpoint["sha256"] = checkpoint_sha256(checkpoint)
    torch.save(checkpoint, tmp_path / "other.pt")
    message = fails(capsys, "average", run / "checkpoints" / KEPT[0], tmp_path / "other.pt",
                    "-o", tmp_path / "a.pt")
    assert "come from different training runs (their vocabularies differ)" in message


def test_sentences_the_model_cannot_read_get_one_warning_on_stderr(run, capsys):
    assert main(["translate", str(run), "Привет, как дела?", "我爱你", "Der Hund.", "--beam-size", "1",
                 "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 3
    (warning,) = captured.err.splitlines()
    assert warning.startswith("python -m annotated_transformer translate: warning: 2 of 3 sentence(s) are "
                              "mostly <unk>")
    long = " ".join(de for de, _ in corpus("builtin", "val")[:3])
    assert main(["translate", str(run), long, "--beam-size", "1", "--device", "cpu"]) == 0
    assert "longer than the longest the model was trained on" in capsys.readouterr().err


def test_a_time_limit_reports_the_steps_trained_and_how_to_go_on(run, tmp_path, capsys):
    run_dir = new_run(run, tmp_path)
    command = ["train", "--run-dir", str(run_dir), *TINY[:1], "50", *TINY[2:], "--max-minutes", "0.000001"]
    assert main(command) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"trained 1 step into {run_dir} (")
    assert "the time limit (--max-minutes 1e-06) stopped it at step 1 of 50" in out
    assert "to go on, run the same command with a larger --max-minutes" in out and "trained 50" not in out
    assert main(command) == 0
    out = capsys.readouterr().out
    assert f"{run_dir} has used up its time limit (--max-minutes 1e-06) at step 1 of 50" in out
    assert main([*command[:-1], "inf"]) == 0
    assert f"resumed {run_dir} at step 1 and trained to step 50" in capsys.readouterr().out


def test_a_cooldown_fitted_to_the_clock_is_reported_as_such(tmp_path):
    recipe = get_recipe("builtin", max_steps=2650, max_minutes=30.0, cooldown=0.32)
    run = dataclasses.make_dataclass("Run", ["recipe", "run_dir", "steps", "minutes", "out_of_time",
                                             "fitted_last_step"])(recipe, tmp_path, 1998, 30.0, True, 1998)
    lines = _what_was_trained(run, 0)
    assert lines[1] == ("the time limit (--max-minutes 30.0) allowed about 1,998 of the 2,650 steps on this "
                        "machine: the cooldown was fitted to end there")
    assert len(lines) == 2  # no advice to train on: the schedule has ended


def fake_multi30k(folder):
    """A folder laid out like Multi30k's, uncompressed, with a few built-in sentences in each split."""
    folder.mkdir()
    for split, name in (("train", "train"), ("val", "val"), ("test", "test_2016_flickr")):
        pairs = corpus("builtin", split)[:200]
        (folder / f"{name}.de").write_text("".join(de + "\n" for de, _ in pairs), encoding="utf-8")
        (folder / f"{name}.en").write_text("".join(en + "\n" for _, en in pairs), encoding="utf-8")
    return folder


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No download and an empty cache: a test that would reach the network fails instead."""
    import annotated_transformer.companions.multi30k_files as data

    def no_network(url, *args, **kwargs):
        raise data.DataError(f"could not download {url}: the tests are offline")

    monkeypatch.setattr(data, "_download", no_network)
    monkeypatch.setenv("ANNOTATED_TRANSFORMER_CACHE", str(tmp_path / "empty-cache"))


def test_evaluate_reads_the_test_set_from_the_runs_data_folder(tmp_path, capsys, offline):
    data_dir = fake_multi30k(tmp_path / "multi30k")
    run_dir = tmp_path / "run"
    assert main(["train", "--corpus", "multi30k", "--data-dir", str(data_dir), "--run-dir", str(run_dir),
                 *TINY, "--vocab-size", "300"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run_dir), "--limit", "3", "--beam-size", "1", "--device", "cpu"]) == 0
    assert f"multi30k test (from {data_dir.resolve()}): 3 sentences" in capsys.readouterr().out


def test_data_errors_name_the_options_not_python_arguments(tmp_path, capsys, offline):
    message = fails(capsys, "train", "--corpus", "multi30k", "--run-dir", tmp_path / "r", "--no-download")
    assert "--no-download was given: leaving out --no-download downloads it" in message
    assert message.endswith("or pass a folder that holds them as --data-dir.")
    assert "root=" not in message and "as root" not in message and "download=" not in message
    message = fails(capsys, "train", "--corpus", "multi30k", "--run-dir", tmp_path / "r", "--data-dir",
                    tmp_path / "missing")
    assert message.endswith(f"error: --data-dir {tmp_path / 'missing'} is not a folder. Pass a folder that "
                            f"holds the Multi30k files (train.de.gz, train.en.gz, ...) as --data-dir, or use "
                            f"the cache: leaving out --data-dir takes them from there.")
    (tmp_path / "folder").mkdir()
    message = fails(capsys, "train", "--corpus", "multi30k", "--run-dir", tmp_path / "r", "--data-dir",
                    tmp_path / "folder")
    assert "(--data-dir)" in message and "(root)" not in message


def test_a_device_this_machine_lacks_is_refused_before_any_work(run, tmp_path, capsys):
    gpu = f"cuda:{torch.cuda.device_count()}" if torch.cuda.is_available() else "cuda"
    message = fails(capsys, "train", "--run-dir", tmp_path / "gpu", "--device", gpu, *TINY[:-1])
    assert f"--device {gpu}: " in message and "use --device cpu" in message
    assert not (tmp_path / "gpu").exists()
    assert f"--device {gpu}: " in fails(capsys, "translate", run, "Hallo.", "--device", gpu)


def test_damaged_history_and_recipe_are_recovered_by_the_same_command(run, tmp_path, capsys):
    run_dir = shutil.copytree(run, tmp_path / "run")
    (run_dir / "history.json").write_text("[{")
    (run_dir / "recipe.json").write_text("{")
    assert main(["train", "--run-dir", str(run_dir), *TINY[:1], "5", *TINY[2:]]) == 0
    err = capsys.readouterr().err
    assert "recipe.json is damaged" in err and "restored it from" in err and "recipe.json.damaged" in err
    assert "history.json is damaged" in err and "kept it as history.json.damaged" in err
    assert "delete the run directory" not in err
    (run_dir / "recipe.json").write_text("{")
    assert main(["translate", str(run_dir), "Der Hund.", "--device", "cpu"]) == 0
    assert "using the copy of the recipe in" in capsys.readouterr().err


def test_a_file_that_is_not_utf8_is_named_with_its_line(run, tmp_path, capsys, monkeypatch):
    (tmp_path / "latin1.de").write_bytes("Der Hund.\nDie Stra\u00dfe.\n".encode("latin-1"))
    message = fails(capsys, "translate", run, "--input", tmp_path / "latin1.de")
    assert message.endswith(f"--input {tmp_path / 'latin1.de'} is not UTF-8 text: line 2, column 9 holds the "
                            f"byte 0xdf; save it as UTF-8 (from Latin-1: iconv -f latin1 -t utf-8)")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"Hallo.\n\xe4\n"), encoding="utf-8"))
    assert "standard input is not UTF-8 text: line 2, column 1" in fails(capsys, "translate", run)
    assert f"--input {tmp_path} is a directory" in fails(capsys, "translate", run, "--input", tmp_path)
    (tmp_path / "bom.de").write_bytes("\ufeffDer Hund.\n".encode())
    main(["translate", str(run), "--input", str(tmp_path / "bom.de"), "--beam-size", "1", "--device", "cpu"])
    with_bom = capsys.readouterr().out
    main(["translate", str(run), "Der Hund.", "--beam-size", "1", "--device", "cpu"])
    assert capsys.readouterr().out == with_bom


def test_an_output_that_cannot_be_written_is_refused_before_the_work(run, tmp_path, capsys, monkeypatch):
    from annotated_transformer.cli import command_files
    from annotated_transformer.cli import commands as cli

    def never(*args, **kwargs):
        raise AssertionError("translated before checking the output")

    monkeypatch.setattr(cli.Translator, "translate", never)
    (tmp_path / "file").write_text("x")
    cases = {
        tmp_path: f"--output {tmp_path} is a directory: give the name of a file to write",
        tmp_path / "file" / "out.txt": f"--output {tmp_path / 'file' / 'out.txt'} cannot be written: "
                                       f"{tmp_path / 'file'} is a file, not a folder",
    }
    for output, expected in cases.items():
        assert fails(capsys, "translate", run, "Hallo.", "--output", output).endswith(expected)
    assert "is a directory" in fails(capsys, "evaluate", run, "--output", tmp_path)
    assert "is a directory" in fails(capsys, "average", run / "checkpoints", "-k", "1", "-o", tmp_path)
    monkeypatch.setattr(command_files.os, "access", lambda path, mode: False)
    message = fails(capsys, "translate", run, "Hallo.", "--output", tmp_path / "out.txt")
    assert message.endswith(f"--output {tmp_path / 'out.txt'} cannot be written: no permission to write in "
                            f"{tmp_path}")


def test_a_failed_write_names_the_users_file_not_a_temporary_one(run, tmp_path, capsys, monkeypatch):
    from annotated_transformer.cli import command_files

    def full_disk(path, text):
        raise OSError(28, "No space left on device", str(path.with_name(f".{path.name}.123.tmp")))

    monkeypatch.setattr(command_files, "atomic_write_text", full_disk)
    output = tmp_path / "out.txt"
    message = fails(capsys, "translate", run, "Hallo.", "--beam-size", "1", "--output", output)
    assert message.endswith(f"cannot write --output {output}: No space left on device")


def test_a_finite_but_exploded_loss_is_not_reported_as_a_success_in_silence(run, tmp_path, capsys):
    run_dir = new_run(run, tmp_path)
    try:  # the small model's loss explodes; whether to NaN depends on the CPU's float arithmetic
        status = main(["train", "--run-dir", str(run_dir), *TINY[:1], "12", *TINY[2:],
                       "--lr-factor", "10000"])
    except SystemExit as exit_info:
        status = exit_info.code
    error = capsys.readouterr().err
    if status == 2:
        assert "training diverged at step" in error
    else:
        assert "is more than twice that of a uniform guess" in error and "--lr-factor" in error


def test_out_of_gpu_memory_names_a_smaller_batch_and_keeps_the_run_resumable(tmp_path, capsys, monkeypatch):
    from annotated_transformer.cli import commands as cli

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(cli, "train_translation", out_of_memory)
    fresh = tmp_path / "fresh"
    message = fails(capsys, "train", "--config", "builtin", "--run-dir", fresh, "--max-tokens", "1500")
    assert message.endswith("out of GPU memory with batches of up to 1500 tokens: run the same command "
                            "with --max-tokens 750 (and --accumulate 2 to keep the batch size)")
    started = tmp_path / "started"
    (started / "checkpoints").mkdir(parents=True)
    (started / "checkpoints" / "step_00000050.pt").write_bytes(b"")
    message = fails(capsys, "train", "--config", "builtin", "--run-dir", started)
    assert "run the same command, which resumes from the newest checkpoint" in message
    assert "start a new --run-dir with --max-tokens 750" in message


def test_every_setting_a_library_message_names_is_an_option():
    """A library message names settings as `Setting(name)`; the command line says each as its option.
    A name with no option (a new argument of the data loader, say) would be said as an option that
    does not exist, so every name the package's messages use must be one the parser knows."""
    from annotated_transformer.cli.commands import _option_spelling
    from annotated_transformer.helpers.errors import Setting

    package = Path(__file__).resolve().parents[1] / "annotated_transformer"
    names = {name for path in package.rglob("*.py")  # the machinery's messages too
             for name in re.findall(r"""Setting\(\s*["'](\w+)["']""", path.read_text(encoding="utf-8"))}
    assert {"root", "download", "lr_factor", "max_tokens"} <= names
    from annotated_transformer.cli.commands import build_parser

    commands = next(action for action in build_parser()._actions if action.dest == "command")
    options = {option for action in commands.choices["train"]._actions for option in action.option_strings}
    for name in names:
        for value in (..., None, 1):
            spelled = _option_spelling(Setting(name, value))
            assert re.search(r"--[\w-]+", spelled)[0] in options, (name, spelled)


def test_the_argparse_types_refuse_a_bad_value_with_a_reason():
    import argparse

    from annotated_transformer.cli.commands import parse_device, positive_int

    assert positive_int("3") == 3
    for text, reason in (("0", "must be at least 1, got 0"), ("2.5", "'2.5' is not a whole number")):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(reason)):
            positive_int(text)
    assert parse_device("cpu") == torch.device("cpu")
    with pytest.raises(argparse.ArgumentTypeError, match="'gpu7' is not a device"):
        parse_device("gpu7")


def test_a_message_of_several_lines_is_said_on_one():
    from annotated_transformer.cli.commands import _command_line_message

    error = ValueError("runs/x holds a run of another configuration:\n  d_model: 128 -> 64\n"
                       "  n_heads: 4 -> 8\n")
    assert _command_line_message(error) == (
        "runs/x holds a run of another configuration: d_model: 128 -> 64; n_heads: 4 -> 8")
    assert _command_line_message(ValueError("")) == "ValueError"


def test_what_train_says_on_a_gpu_out_of_memory_and_after_a_divergence(tmp_path):
    from annotated_transformer.cli.commands import after_divergence, out_of_memory

    run_dir = tmp_path / "run"
    assert out_of_memory(get_recipe("base"), run_dir) == (
        "out of GPU memory with batches of up to 25000 tokens: run the same command with --max-tokens 12500 "
        "(and --accumulate 2 to keep the batch size)")
    assert after_divergence(run_dir) == f"the same command with other values starts {run_dir} again"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "step_00000050.pt").write_bytes(b"")
    assert "keeps its settings with its checkpoints (the newest, step_00000050.pt, is kept)" in (
        after_divergence(run_dir))
