"""Promises of the command line (annotated_transformer/cli/commands.py, chapter 16) about what a user
reads and what the parser gives: the help of each command is the one the book shows; each command's
options reach their attributes, with the documented defaults; `parse_device`, `corpus_options` and
`main`'s exit statuses; what `train` prints after training (whole lines: the steps, the time, how to
go on, the averaged checkpoints), its warning on a loss too high, and the training's warnings shown
as the command's own, one line, others as the caller's filters say."""

import argparse
import contextlib
import io
import json
import math
import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import small_config

from annotated_transformer.checkpoints import save_checkpoint
from annotated_transformer.cli import commands as cli
from annotated_transformer.companions.translation_checks import TrainingWarning
from annotated_transformer.helpers.errors import Setting
from annotated_transformer.model import make_model
from annotated_transformer.recipes import get_recipe
from annotated_transformer.runs.pretrained import pretrained_dir

PROG = "python -m annotated_transformer"
BOOK = Path(__file__).resolve().parents[1] / "book" / "16_command_line.ipynb"


def fails(capsys, *argv) -> str:
    """The last line of the error of a command that must end with exit status 2 (no traceback)."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main([str(argument) for argument in argv])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert "Traceback" not in error, error
    return error.splitlines()[-1]


# --- the help the book shows -------------------------------------------------------------------------


def book_output(marker: str) -> str:
    """The stored standard output of the chapter's code cell whose source holds `marker`."""
    cells = json.loads(BOOK.read_text(encoding="utf-8"))["cells"]
    (cell,) = [cell for cell in cells if cell["cell_type"] == "code" and marker in "".join(cell["source"])]
    return "".join("".join(output.get("text", "")) for output in cell["outputs"]
                   if output.get("name") == "stdout")


def book_helps() -> dict[str, str]:
    """The help of each command as the book prints it: train, translate and evaluate in one cell, then
    average (`python_m("average", "--help")`)."""
    helps = {}
    together = book_output('main([command, "--help"])')
    for part in re.split(r"(?m)^(?=usage: )", together):
        if part.strip():
            helps[part.split()[4]] = part
    helps["average"] = book_output('python_m("average", "--help")')
    return helps


def normalized(text: str) -> str:
    """Help text without what argparse lays out differently between Python versions: the spacing and
    wrapping, "optional arguments:" (before 3.10), and an option's metavar said once (3.13)."""
    text = text.replace("optional arguments:", "options:")
    text = re.sub(r"(--[\w-]+) ([A-Z_]+), (-\w) \2\b", r"\1, \3 \2", text)
    return " ".join(text.split())


@pytest.mark.parametrize("command", ["train", "translate", "evaluate", "average"])
def test_the_help_of_each_command_is_the_one_the_book_shows(command, monkeypatch):
    """Chapter 16 prints the help of each command (at 100 columns): the command prints the same."""
    expected = book_helps()[command]
    monkeypatch.setenv("COLUMNS", "100")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    assert normalized(printed.getvalue()) == normalized(expected)


def test_the_book_shows_the_help_of_the_four_commands():
    assert set(book_helps()) == {"train", "translate", "evaluate", "average"}


def test_the_top_level_help_lists_each_command_with_what_it_does(monkeypatch):
    """`--help` says what the package is, lists the commands in order, each with its summary, and says
    how to get the help of one."""
    monkeypatch.setenv("COLUMNS", "100")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    assert normalized(printed.getvalue()) == normalized(
        "usage: python -m annotated_transformer [-h] COMMAND ... "
        "The Annotated Transformer: the procedures of 'Attention Is All You Need' (paper §5, §6.1) as "
        "commands. positional arguments: COMMAND "
        "train train a German→English translator with a named configuration (paper §5, Table 3) "
        "translate translate German sentences into English (beam search, paper §6.1) "
        "evaluate translate a test set and score it with BLEU (sacreBLEU, paper §6.1) "
        "average average the parameters of the last checkpoints (paper §6.1) "
        "options: -h, --help show this help message and exit "
        "'python -m annotated_transformer COMMAND --help' explains a command and its options.")


# --- what the parser gives -----------------------------------------------------------------------------


def test_train_defaults_reach_the_parsed_arguments():
    args = cli.build_parser().parse_args(["train"])
    assert (args.command, args.config, args.run_dir, args.data_dir) == ("train", "builtin", None, None)
    assert (args.no_download, args.device, args.quiet, args.handler) == (False, None, False, cli._run_train)


def test_train_options_reach_their_attributes():
    args = cli.build_parser().parse_args(["train", "--config", "multi30k", "--run-dir", "r", "--data-dir",
                                          "d", "--no-download", "--device", "cpu", "--quiet"])
    assert (args.config, args.run_dir, args.data_dir) == ("multi30k", Path("r"), Path("d"))
    assert (args.no_download, args.device, args.quiet) == (True, torch.device("cpu"), True)


def test_translate_defaults_reach_the_parsed_arguments():
    args = cli.build_parser().parse_args(["translate", "run"])
    assert (args.command, args.checkpoint, args.vocab, args.beam_size, args.device) == (
        "translate", Path("run"), None, None, None)
    assert (args.sentences, args.input, args.output, args.handler) == ([], None, None, cli._run_translate)


@pytest.mark.parametrize("short", [False, True])
def test_translate_options_reach_their_attributes(short):
    argv = ["translate", "run", "Hallo.", "--vocab", "v.json", "--beam-size", "2", "--device", "cuda:1",
            "-i" if short else "--input", "in.de", "-o" if short else "--output", "out.en"]
    args = cli.build_parser().parse_args(argv)
    assert (args.checkpoint, args.sentences, args.vocab, args.beam_size) == (
        Path("run"), ["Hallo."], Path("v.json"), 2)
    assert (args.device, args.input, args.output) == (torch.device("cuda", 1), Path("in.de"), "out.en")


def test_evaluate_defaults_reach_the_parsed_arguments():
    args = cli.build_parser().parse_args(["evaluate", "run"])
    assert (args.command, args.checkpoint, args.vocab, args.beam_size, args.device) == (
        "evaluate", Path("run"), None, None, None)
    assert (args.corpus, args.split, args.data_dir, args.no_download, args.limit, args.output) == (
        None, "test", None, False, None, None)
    assert args.handler == cli._run_evaluate


@pytest.mark.parametrize("short", [False, True])
def test_evaluate_options_reach_their_attributes(short):
    argv = ["evaluate", "run", "--vocab", "v.json", "--beam-size", "3", "--device", "cpu", "--corpus",
            "multi30k", "--split", "val", "--data-dir", "d", "--no-download", "--limit", "7",
            "-o" if short else "--output", "e.json"]
    args = cli.build_parser().parse_args(argv)
    assert (args.vocab, args.beam_size, args.device, args.corpus, args.split) == (
        Path("v.json"), 3, torch.device("cpu"), "multi30k", "val")
    assert (args.data_dir, args.no_download, args.limit, args.output) == (Path("d"), True, 7, "e.json")


def test_average_defaults_and_options_reach_the_parsed_arguments():
    args = cli.build_parser().parse_args(["average", "a.pt", "b.pt", "-o", "avg.pt"])
    assert (args.command, args.checkpoints, args.last, args.output, args.handler) == (
        "average", [Path("a.pt"), Path("b.pt")], None, "avg.pt", cli._run_average)
    for option in ("--last", "-k"):
        args = cli.build_parser().parse_args(["average", "run", option, "3", "--output", "x.pt"])
        assert (args.checkpoints, args.last, args.output) == ([Path("run")], 3, "x.pt")


def test_average_needs_an_output_and_a_checkpoint(capsys):
    assert fails(capsys, "average", "run").endswith("error: the following arguments are required: "
                                                    "--output/-o")
    assert fails(capsys, "average", "-o", "x.pt").endswith("error: the following arguments are required: "
                                                           "CHECKPOINT")


def test_a_command_is_required(capsys):
    assert fails(capsys).endswith("error: the following arguments are required: COMMAND")


def test_translate_takes_sentences_after_its_options_and_refuses_unknown_options(capsys):
    parser = cli.build_parser()
    args = cli._parse_arguments(parser, ["translate", "run", "Eins.", "--beam-size", "2", "Zwei.", "Drei."])
    assert (args.sentences, args.beam_size) == (["Eins.", "Zwei.", "Drei."], 2)
    with pytest.raises(SystemExit) as exit_info:
        cli._parse_arguments(cli.build_parser(), ["translate", "run", "Eins.", "--bogus", "Zwei.", "--other"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"{PROG}: error: unrecognized arguments: --bogus --other")
    with pytest.raises(SystemExit):
        cli._parse_arguments(cli.build_parser(), ["evaluate", "run", "extra"])
    assert capsys.readouterr().err.splitlines()[-1] == f"{PROG}: error: unrecognized arguments: extra"


def test_parse_device_names_a_device_or_says_what_to_use():
    assert cli.parse_device("cuda:1") == torch.device("cuda", 1)
    assert cli.parse_device("cpu") == torch.device("cpu")
    with pytest.raises(argparse.ArgumentTypeError) as error:
        cli.parse_device("gpu7")
    assert str(error.value) == "'gpu7' is not a device: use cpu, cuda, cuda:1, ..."


def test_a_bad_device_is_refused_by_the_parser_in_one_line(capsys):
    assert fails(capsys, "translate", "run", "--device", "tpu0") == (
        f"{PROG} translate: error: argument --device: 'tpu0' is not a device: use cpu, cuda, cuda:1, ...")


def test_corpus_options_download_unless_told_and_take_the_data_folder():
    assert cli.corpus_options(argparse.Namespace(no_download=False, data_dir=None)) == {"download": True}
    assert cli.corpus_options(argparse.Namespace(no_download=True, data_dir=Path("d"))) == {
        "download": False, "root": Path("d")}


def test_pretrained_names_a_shipped_translator_or_says_which_there_are(capsys):
    assert cli.run_or_pretrained("pretrained:multi30k") == pretrained_dir("multi30k")
    assert cli.run_or_pretrained("runs/x") == Path("runs/x")
    assert fails(capsys, "translate", "pretrained:nope", "Hallo.") == (
        f"{PROG} translate: error: argument RUN_DIR_OR_CHECKPOINT: no shipped translator 'nope': choose one "
        f"of multi30k")


def test_main_ends_bad_input_with_status_2_and_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["average", str(tmp_path / "missing.pt"), "-o", str(tmp_path / "avg.pt")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        f"{PROG} average: error: no checkpoint at {tmp_path / 'missing.pt'}: check the path\n")


def test_ctrl_c_ends_with_status_130_and_for_train_how_to_resume(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "train_translation", interrupted)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "--run-dir", str(tmp_path / "run"), "--device", "cpu"])
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == (
        f"{PROG} train: interrupted; the same command resumes from the newest checkpoint\n")
    monkeypatch.setattr(cli, "_run_average", interrupted)
    monkeypatch.setattr(cli, "build_parser", _parser_with(interrupted))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["average", "run", "-o", "x.pt"])
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == f"{PROG} average: interrupted\n"


def _parser_with(handler):
    build = cli.build_parser

    def build_parser(extra_commands=()):
        parser = build(extra_commands)
        commands = next(action for action in parser._actions if action.dest == "command")
        commands.choices["average"].set_defaults(handler=handler)
        return parser

    return build_parser


# --- what train says -------------------------------------------------------------------------------


class Vocabularies:
    def __init__(self, target_size):
        self.target = [None] * target_size

    def describe(self):
        return "a shared BPE vocabulary of 100 tokens"


def training_run(run_dir, steps, minutes, out_of_time=False, fitted_last_step=None, history=(),
                 **settings):
    recipe = get_recipe("builtin", **{"max_steps": 50, "average_last": 2, **settings})
    return SimpleNamespace(recipe=recipe, run_dir=run_dir, steps=steps, minutes=minutes,
                           out_of_time=out_of_time, fitted_last_step=fitted_last_step,
                           history=list(history), vocabs=Vocabularies(100))


@pytest.mark.parametrize(("steps", "minutes", "expected"), [
    (1, 0.75, "trained 1 step into RUN (45 seconds of training in all)"),
    (3, 1.0, "trained 3 steps into RUN (1.0 minutes of training in all)"),
    (1200, 1.96, "trained 1,200 steps into RUN (2.0 minutes of training in all)"),
])
def test_train_says_the_steps_it_trained_and_the_time_in_one_line(tmp_path, steps, minutes, expected):
    """A finished run: one line, the steps (one step, several steps) and the time it took, in seconds
    under a minute."""
    lines = cli._what_was_trained(training_run(tmp_path, steps, minutes), 0)
    assert lines == [expected.replace("RUN", str(tmp_path))]


def test_train_stopped_by_its_time_limit_says_how_to_go_on(tmp_path):
    lines = cli._what_was_trained(training_run(tmp_path, 7, 0.5, out_of_time=True, max_minutes=0.5), 2)
    assert lines == [
        f"resumed {tmp_path} at step 2 and trained to step 7 (30 seconds of training in all)",
        "the time limit (--max-minutes 0.5) stopped it at step 7 of 50",
        "to go on, run the same command with a larger --max-minutes (the limit counts the training of every "
        "session, so the same command alone trains no further)",
    ]
    lines = cli._what_was_trained(training_run(tmp_path, 7, 2.0, out_of_time=True, max_minutes=2.0), 7)
    assert lines == [
        f"{tmp_path} has used up its time limit (--max-minutes 2.0) at step 7 of 50 (2.0 minutes of training "
        "in all)",
        "to go on, run the same command with a larger --max-minutes (the limit counts the training of every "
        "session, so the same command alone trains no further)",
    ]
    assert cli._what_was_trained(training_run(tmp_path, 50, 3.0), 50) == [
        f"{tmp_path} is already trained (50 steps): nothing left to do (3.0 minutes of training in all)"]


def test_the_report_after_training_names_the_averaged_checkpoints_and_how_to_use_the_model(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    for step in (10, 20, 30):
        (tmp_path / "checkpoints" / f"step_{step:08d}.pt").write_bytes(b"")
    run = training_run(tmp_path, 30, 0.75, history=[{"loss": 5.0}, {"loss": 2.3456}])
    assert cli._training_report(run, 0).split("\n") == [
        f"trained 30 steps into {tmp_path} (45 seconds of training in all)",
        "last training loss 2.346 (label-smoothed, §5.4)",
        f"model:      {tmp_path / 'model.pt'} (the average of the checkpoints of steps 20, 30, §6.1)",
        f"vocabulary: {tmp_path / 'vocab.json'} (a shared BPE vocabulary of 100 tokens)",
        f"translate:  python -m annotated_transformer translate {tmp_path} "
        '"Der kleine Hund sieht die Katze."',
        f"evaluate:   python -m annotated_transformer evaluate {tmp_path}",
    ]


def test_a_loss_more_than_twice_a_uniform_guess_is_warned_of_and_no_other(tmp_path):
    uniform = math.log(100)
    assert cli._high_loss(training_run(tmp_path, 3, 1.0)) is None  # no history
    for loss in (5.0, 2 * uniform):  # twice is not more than twice
        assert cli._high_loss(training_run(tmp_path, 3, 1.0, history=[{"loss": loss}])) is None
    run = training_run(tmp_path, 3, 1.0, history=[{"loss": 3.0}, {"loss": 50.0}, {"loss": 12.04}])
    assert cli._high_loss(run) == (
        "the last training loss, 12.0, is more than twice that of a uniform guess (4.6): the training has "
        "diverged; train again with a lower --lr-factor, a longer --warmup or --clip-grad-norm 1.0, in a new "
        "--run-dir")


# --- the training's warnings ---------------------------------------------------------------------------


def test_training_warnings_are_the_commands_one_line_others_as_the_callers_filters_say(capsys):
    """A TrainingWarning is said at once, each time, as the command's warning on one line, its settings as
    options; a warning of another kind follows the caller's filters ("default": once a place) and
    reaches the caller's showwarning with all it was given."""
    shown = []

    def showwarning(message, category, filename, lineno, file=None, line=None):
        shown.append((str(message), category, filename, lineno, file, line))

    args = argparse.Namespace(prog=f"{PROG} train")
    somewhere = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = showwarning
        with cli._training_warnings(args):
            for _ in range(2):
                warnings.warn(TrainingWarning(Setting("max_tokens", 100), " is small:\n  most pairs alone"),
                              stacklevel=1)
                warnings.warn("another kind", UserWarning, stacklevel=1)
            warnings.showwarning("given", RuntimeWarning, "elsewhere.py", 7, somewhere, "x = 1")
        assert warnings.showwarning is showwarning  # the caller's again
    code = test_training_warnings_are_the_commands_one_line_others_as_the_callers_filters_say.__code__
    expected = f"{PROG} train: warning: --max-tokens 100 is small: most pairs alone\n"
    assert capsys.readouterr().err == expected * 2
    assert shown == [("another kind", UserWarning, __file__, shown[0][3], None, None),
                     ("given", RuntimeWarning, "elsewhere.py", 7, somewhere, "x = 1")]
    assert shown[0][3] > code.co_firstlineno


def test_a_damaged_recipe_without_a_copy_says_how_to_go_on(tmp_path, capsys):
    save_checkpoint(tmp_path / "model.pt", make_model(small_config()))
    (tmp_path / "recipe.json").write_text("{", encoding="utf-8")
    message = fails(capsys, "translate", tmp_path, "Hallo.", "--device", "cpu")
    assert message.startswith(f"{PROG} translate: error: ") and str(tmp_path) in message
    assert message.endswith(": restore it, or give --corpus and --beam-size")


def test_train_runs_in_runs_config_by_default_and_prints_the_report_and_the_high_loss(tmp_path, capsys,
                                                                                      monkeypatch):
    """Without --run-dir, the run goes to runs/CONFIG; the data options, device and --quiet reach the
    training; the report follows, and a loss too high is warned of on standard error."""
    calls = []
    run = training_run(tmp_path, 3, 0.75, history=[{"loss": 12.04}])
    run.resumed_step = 1

    def train_translation(recipe, run_dir, corpus_options, device, progress):
        calls.append((recipe.train.max_steps, run_dir, corpus_options, device, progress))
        return run

    monkeypatch.setattr(cli, "train_translation", train_translation)
    init_distributed = cli.init_distributed
    devices = []

    def init(device):
        devices.append(device)
        return init_distributed(device=device)

    monkeypatch.setattr(cli, "init_distributed", init)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "--config", "multi30k", "--max-steps", "3", "--device", "cpu",
                     "--no-download", "--data-dir", "d"]) == 0
    assert calls == [(3, Path("runs") / "multi30k", {"download": False, "root": Path("d")},
                      torch.device("cpu"), True)]
    captured = capsys.readouterr()
    assert captured.out == cli._training_report(run, 1) + "\n"
    assert captured.out.startswith(f"resumed {tmp_path} at step 1 and trained to step 3")
    assert captured.err == f"{PROG} train: warning: {cli._high_loss(run)}\n"
    assert cli.main(["train", "--run-dir", "elsewhere", "--device", "cpu", "--quiet"]) == 0
    assert calls[-1][1:] == (Path("elsewhere"), {"download": True}, torch.device("cpu"), False)
    assert devices == [torch.device("cpu")] * 2


def test_a_later_chapters_command_is_added_to_the_parser_and_run_by_main(capsys):
    """`extra_commands` (chapter 18's `experiment`) each add a sub-parser, which `main` runs."""
    def add_hello(commands):
        hello = commands.add_parser("hello", help="say hello")
        hello.add_argument("--times", type=int, default=1)
        hello.set_defaults(handler=lambda args: print(f"hello {args.times} from {args.prog}") or 7)

    assert cli.main(["hello", "--times", "3"], extra_commands=[add_hello]) == 7
    assert capsys.readouterr().out == f"hello 3 from {PROG} hello\n"
    assert cli.build_parser([add_hello]).parse_args(["hello"]).times == 1


def test_the_train_help_lays_out_its_description_and_configurations_as_the_book_shows(monkeypatch):
    """The description and the list of configurations of `train` are laid out by the command itself
    (argparse prints them as they are), so they are the book's to the character."""
    expected = book_helps()["train"]
    monkeypatch.setenv("COLUMNS", "100")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = printed.getvalue()
    for part in (lambda help_text: help_text.split("\n\n")[1],  # the description
                 lambda help_text: help_text[help_text.index("\nconfigurations:\n"):].rstrip()):
        assert part(text) == part(expected)
