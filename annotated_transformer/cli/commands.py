"""The package's command line, `python -m annotated_transformer COMMAND` (book chapter 16).

The commands are the paper's procedures (§5, §6.1), each a thin layer over the library of the
chapters: `train` trains a German→English translator with a named configuration (`train_translation`,
chapter 14, in the process group of `init_distributed`, chapter 15), resumably; `translate` translates
sentences with beam search (`Translator`, chapter 14); `evaluate` scores a test set with sacreBLEU
(`evaluate_bleu`); `average` averages the last checkpoints (`save_average`, chapter 11). A later
chapter adds a command of its own through `extra_commands` (chapter 18's `experiment`): the package's
`__main__`, which chapter 19 exports, calls `main` with it.

What this module does around them:

- the parser: one argparse sub-parser per command, each with a `--help` that explains its options;
  `train`'s recipe options are generated from the fields of `Recipe` (`cli.recipe_options`);
  the types argparse checks itself (`positive_int`, `parse_device`) refuse a bad value before any
  work; `translate` takes sentences after its options too (`_parse_arguments`);
- one rule for errors: `main` ends a command whose input is wrong (an `OSError`, a `ValueError`,
  `CheckpointError` and `VocabularyError` among them, or a `DataError`) with one line that says what
  is wrong and what to do, and exit status 2, never a traceback; a setting that a library message
  names (a `Setting`, chapter 3) is said as its option (`_option_spelling`: `lr_factor` is
  `--lr-factor`, the data loader's `root` is `--data-dir`), and a message of several lines is joined
  into one (`_command_line_message`); Ctrl-C ends with exit status 130 and, for `train`, how to
  resume; anything else is a bug and keeps its traceback;
- what `train` says: the steps it trained and how to go on after its time limit (`_what_was_trained`,
  `_training_report`), what to do on a GPU out of memory (`out_of_memory`) or after a divergence
  (`after_divergence`), and a warning when a finite loss is too high for a trained model
  (`_high_loss`); the library's warnings about a recipe (`TrainingWarning`) and about sentences a
  model cannot read (`InputWarning`) are printed as the command's own, one line on standard error;
- the files a command reads and writes: sentences from the arguments, `--input` or standard input,
  UTF-8 (`command_files`), and an `--output` checked before the work and written
  atomically.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shlex
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

from annotated_transformer.acceleration import configure_process
from annotated_transformer.checkpoints import checkpoint_paths
from annotated_transformer.cli.command_files import check_output, decode_utf8, output_errors
from annotated_transformer.cli.command_files import read_input, read_lines, write_lines
from annotated_transformer.data import CORPORA, DataError, corpus
from annotated_transformer.decoding import save_average
from annotated_transformer.distributed import init_distributed, shutdown_distributed
from annotated_transformer.helpers.errors import Setting, SettingsMessage
from annotated_transformer.helpers.files import atomic_write_text
from annotated_transformer.companions.hardware import check_device
from annotated_transformer.helpers.processes import is_main_process
from annotated_transformer.runs.pretrained import PREFIX, available, pretrained_dir
from annotated_transformer.cli.recipe_options import add_recipe_options, describe_configuration
from annotated_transformer.cli.recipe_options import option_name, recipe_from_args
from annotated_transformer.recipes import RECIPES, Recipe
from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.runs.run_files import read_recipe, recipe_copy, run_data_dir
from annotated_transformer.training import TrainingDiverged
from annotated_transformer.companions.translation_checks import TrainingWarning
from annotated_transformer.runs.translation import train_translation
from annotated_transformer.runs.translation_files import TrainingRun
from annotated_transformer.translator import InputWarning, Translator, evaluate_bleu

__all__ = [
    "after_divergence",
    "build_parser",
    "corpus_options",
    "main",
    "out_of_memory",
    "parse_device",
    "positive_int",
]


# --- average ---------------------------------------------------------------------------------------


AVERAGE_LAST = 5  # the base model's checkpoints averaged in §6.1


def _resolve_checkpoints(sources: Sequence[Path], last: int | None) -> list[Path]:
    """The checkpoint files to average: the newest `last` of a directory (AVERAGE_LAST when None), or
    the files given (with `last` None: a count beside a list of files would be ignored)."""
    if last is not None and last < 1:
        raise ValueError(f"--last must be at least 1, got {last}")
    if len(sources) == 1 and sources[0].is_dir():
        last = AVERAGE_LAST if last is None else last
        found = checkpoint_paths(sources[0])
        if not found:
            raise FileNotFoundError(
                f"no step_*.pt checkpoints in {sources[0]}: train with checkpoint_every > 0, "
                f"or list the checkpoint files to average"
            )
        if len(found) < last:
            raise ValueError(
                f"{sources[0]} holds {len(found)} checkpoint(s), fewer than --last {last}: "
                f"average fewer, or train longer"
            )
        return found[-last:]
    if last is not None:
        raise ValueError(f"--last {last} chooses among a directory's checkpoints: give one directory, or "
                         "list only the checkpoint files to average")
    for path in sources:
        if path.is_dir():
            raise ValueError(f"{path} is a directory: give one directory, or checkpoint files only")
        if not path.is_file():
            raise FileNotFoundError(f"no checkpoint at {path}: check the path")
    return list(sources)


def _run_average(args: argparse.Namespace) -> int:
    """`average`: the checkpoints' average into `--output`, checked before the work."""
    paths = _resolve_checkpoints(args.checkpoints, args.last)
    output = check_output(args.output, example="averaged.pt")
    if output.resolve() in {path.resolve() for path in paths}:
        raise ValueError(f"--output {output} is one of the checkpoints to average; write elsewhere")
    with output_errors(output):  # the average keeps the run's fingerprints and recipe
        steps = save_average(paths, output, {"averaged_from": [str(path) for path in paths]})
    print(f"averaged {len(paths)} checkpoints (steps {', '.join(map(str, steps))}) into {output}")
    return 0


# --- train -----------------------------------------------------------------------------------------


def corpus_options(args: argparse.Namespace) -> dict:
    """The keyword arguments of `corpus()` from --data-dir and --no-download."""
    options = {"download": not args.no_download}
    if args.data_dir is not None:
        options["root"] = args.data_dir
    return options


def _what_was_trained(run: TrainingRun, start_step: int) -> list[str]:
    """What `train` did: the steps it trained (`run.steps`, not the recipe's goal), and when the
    time limit stopped it, how to go on."""
    recipe, run_dir, trained = run.recipe, run.run_dir, run.steps - start_step
    max_steps = recipe.train.max_steps
    limit = f"--max-minutes {recipe.max_minutes}"
    spent = f"{run.minutes:.1f} minutes" if run.minutes >= 1 else f"{run.minutes * 60:.0f} seconds"
    if trained == 0 and not run.out_of_time:
        return [f"{run_dir} is already trained ({run.steps:,} steps): nothing left to do ({spent} of "
                f"training in all)"]
    if trained == 0:
        done = f"{run_dir} has used up its time limit ({limit}) at step {run.steps:,} of {max_steps:,}"
    elif start_step:
        done = f"resumed {run_dir} at step {start_step:,} and trained to step {run.steps:,}"
    else:
        done = f"trained {run.steps:,} step{'s' if run.steps != 1 else ''} into {run_dir}"
    lines = [f"{done} ({spent} of training in all)"]
    if run.fitted_last_step is not None and trained:
        lines.append(f"the time limit ({limit}) allowed about {run.fitted_last_step:,} of the "
                     f"{max_steps:,} steps on this machine: the cooldown was fitted to end there")
    elif run.out_of_time and trained:
        lines.append(f"the time limit ({limit}) stopped it at step {run.steps:,} of {max_steps:,}")
    if run.out_of_time and run.fitted_last_step is None:
        lines.append("to go on, run the same command with a larger --max-minutes (the limit counts the "
                     "training of every session, so the same command alone trains no further)")
    return lines


def _training_report(run: TrainingRun, start_step: int) -> str:
    """What a finished `train` prints: what it did, where the model is, how to use it."""
    files = RunDirectory(run.run_dir)
    lines = _what_was_trained(run, start_step)
    if run.history:
        lines.append(f"last training loss {run.history[-1]['loss']:.3f} (label-smoothed, §5.4)")
    steps = [str(files.step_of(path)) for path in files.checkpoint_paths()[-run.recipe.average_last :]]
    place = shlex.quote(str(run.run_dir))
    lines += [
        f"model:      {files.model} (the average of the checkpoints of steps {', '.join(steps)}, §6.1)",
        f"vocabulary: {files.vocab} ({run.vocabs.describe()})",
        f'translate:  python -m annotated_transformer translate {place} "Der kleine Hund sieht die Katze."',
        f"evaluate:   python -m annotated_transformer evaluate {place}",
    ]
    return "\n".join(lines)


def out_of_memory(recipe: Recipe, run_dir: Path) -> str:
    """What to do when the device's memory does not hold a batch of the recipe."""
    problem = f"out of GPU memory with batches of up to {recipe.max_tokens} tokens"
    smaller = (f"--max-tokens {max(recipe.max_tokens // 2, 1)} (and --accumulate "
               f"{2 * recipe.train.accumulate} to keep the batch size)")
    if RunDirectory(run_dir).newest_step() == 0:  # no checkpoint: the run directory takes the smaller batches
        return f"{problem}: run the same command with {smaller}"
    return (f"{problem}: free the GPU's memory and run the same command, which resumes from the newest "
            f"checkpoint, or start a new --run-dir with {smaller}")


def _high_loss(run: TrainingRun) -> str | None:
    """A warning when the last training loss is more than twice that of a uniform guess over the
    target vocabulary: a finite loss that high means the training has diverged all the same."""
    uniform = math.log(len(run.vocabs.target))
    if not run.history or run.history[-1]["loss"] <= 2 * uniform:
        return None
    return (f"the last training loss, {run.history[-1]['loss']:.1f}, is more than twice that of a uniform "
            f"guess ({uniform:.1f}): the training has diverged; train again with a lower --lr-factor, a "
            f"longer --warmup or --clip-grad-norm 1.0, in a new --run-dir")


def after_divergence(run_dir: Path) -> str:
    """How to go on after training diverged: a run keeps its settings once it has a checkpoint (its
    newest was written before the divergence: a diverged model is never saved)."""
    checkpoints = RunDirectory(run_dir).checkpoint_paths()
    if checkpoints:
        return (f"{run_dir} keeps its settings with its checkpoints (the newest, {checkpoints[-1].name}, is "
                f"kept), so train with other values in a new --run-dir")
    return f"the same command with other values starts {run_dir} again"


def _run_train(args: argparse.Namespace) -> int:
    """`train`: check the options, join the process group if torchrun started this process, train,
    and print the report on rank 0."""
    recipe = recipe_from_args(args)  # every value checked, before anything is written
    if args.device is not None:  # a GPU this machine lacks: refused before the run directory exists
        check_device(args.device, "--device")
    run_dir = args.run_dir if args.run_dir is not None else Path("runs") / args.config
    context = init_distributed(device=args.device)  # a single process unless torchrun started us
    configure_process(context.device)  # a program that trains makes the process-wide settings (chapter 9)
    try:
        try:
            with _training_warnings(args):
                run = train_translation(recipe, run_dir, corpus_options=corpus_options(args),
                                        device=context.device, progress=not args.quiet)
        except TrainingDiverged as error:
            raise ValueError(f"{_spelled(error)}; {after_divergence(run_dir)}") from None
        except torch.OutOfMemoryError:
            raise ValueError(out_of_memory(recipe, run_dir)) from None
        if is_main_process():
            print(_training_report(run, run.resumed_step))
            if _high_loss(run) is not None:
                _warn(args, _high_loss(run))
    finally:
        shutdown_distributed()
    return 0


@contextlib.contextmanager
def _training_warnings(args: argparse.Namespace) -> Iterator[None]:
    """The training's warnings about its recipe (`TrainingWarning`) as warnings of the command, one
    line each on standard error, as soon as they come (not after the training); others as usual."""
    with warnings.catch_warnings():  # restores showwarning at the end
        warnings.simplefilter("always", TrainingWarning)
        show = warnings.showwarning

        def show_now(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, TrainingWarning):
                _warn(args, _command_line_message(message))  # its settings said as options
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = show_now
        yield


# --- translate and evaluate --------------------------------------------------------------------------


def _run_recipe(args: argparse.Namespace) -> Recipe | None:
    """The recipe the run of `args.checkpoint` was trained with: its recipe.json, or, when that is
    damaged, the copy in the checkpoint (with a warning); None when unknown."""
    path = RunDirectory.find(args.checkpoint, "recipe")
    if path is None:
        return None
    try:
        recipe = read_recipe(path)  # chapter 10's reader of a run's recipe
    except ValueError as error:
        recipe, model = recipe_copy([RunDirectory.model_of(args.checkpoint)])
        if recipe is None:
            raise ValueError(f"{error}: restore it, or give --corpus and --beam-size") from None
        _warn(args, f"{error}; using the copy of the recipe in {model} (the same train command repairs it)")
    return Recipe.from_dict(recipe)


def _warn(args: argparse.Namespace, message: str) -> None:
    """A warning of a command: one line on standard error."""
    print(f"{args.prog}: warning: {message}", file=sys.stderr)


def _load_translator(args: argparse.Namespace, recipe: Recipe | None) -> Translator:
    """The model and vocabulary of a run directory or checkpoint, with the run's decoding settings."""
    path = args.checkpoint
    if not path.exists():
        raise FileNotFoundError(f"no run directory or checkpoint at {path}: check the path, or train first")
    vocab = args.vocab or RunDirectory.vocab_of(path)  # if it is missing, Translator.load says so
    beam_size = args.beam_size if args.beam_size is not None else recipe.beam_size if recipe else 4
    return Translator.load(path, vocab=vocab, device=check_device(args.device, "--device"),
                           beam_size=beam_size, alpha=recipe.alpha if recipe else 0.6)


def _from_stdin(args: argparse.Namespace) -> bool:
    """Whether `translate` reads its sentences from standard input (no sentences, no --input or '-')."""
    return not args.sentences and (args.input is None or str(args.input) == "-")


def _read_sentences(args: argparse.Namespace) -> list[str]:
    """The sentences of `translate`: the arguments, else the lines of --input, else those of standard
    input, UTF-8 (a byte-order mark dropped)."""
    if args.sentences and args.input is not None:
        raise ValueError("give the sentences either as arguments or with --input, not both")
    if args.sentences:
        return list(args.sentences)
    if not _from_stdin(args):
        return read_lines(decode_utf8(read_input(args.input), f"--input {args.input}"))
    if sys.stdin.isatty():
        print("reading sentences from standard input, one per line; end with Ctrl-D", file=sys.stderr)
    if not hasattr(sys.stdin, "buffer"):  # already text (a notebook, a test)
        return read_lines(sys.stdin.read())
    return read_lines(decode_utf8(sys.stdin.buffer.read(), "standard input"))


@contextlib.contextmanager
def _input_warnings(args: argparse.Namespace) -> Iterator[None]:
    """The Translator's warnings about sentences it cannot read (`InputWarning`), one line each on
    standard error, after the work; other warnings as usual."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InputWarning)
        yield
    for warning in caught:
        if issubclass(warning.category, InputWarning):
            _warn(args, str(warning.message))
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)


def _run_translate(args: argparse.Namespace) -> int:
    """`translate`: one translation per line, in order, to standard output or --output."""
    output = check_output(args.output, example="translations.txt")  # before the work, not after it
    sentences = None if _from_stdin(args) else _read_sentences(args)
    translator = _load_translator(args, _run_recipe(args))  # before waiting for standard input
    with _input_warnings(args):
        translations = translator.translate(_read_sentences(args) if sentences is None else sentences)
    write_lines(translations, output)
    return 0


def _evaluation_data(args: argparse.Namespace) -> dict:
    """The keyword arguments of `corpus()` for the test set: --data-dir, else the data folder the
    run was trained from (its run.json), else the cache."""
    options = corpus_options(args)
    info = RunDirectory.find(args.checkpoint, "info")
    recorded = run_data_dir(info.parent) if info is not None else None
    if args.data_dir is None and recorded is not None and recorded.is_dir():
        options["root"] = recorded
    return options


def _run_evaluate(args: argparse.Namespace) -> int:
    """`evaluate`: translate a test set, print BLEU cased and lowercased with sacreBLEU's signatures,
    and with --output write the scores and translations as JSON."""
    output = check_output(args.output, example="evaluation.json")
    recipe = _run_recipe(args)
    translator = _load_translator(args, recipe)
    name = args.corpus or (recipe.corpus if recipe else "builtin")
    options = _evaluation_data(args)
    pairs = corpus(name, args.split, **options)
    if args.limit is not None:
        pairs = pairs[: args.limit]
    with _input_warnings(args):
        result = evaluate_bleu(translator, pairs)
    source = f" (from {options['root']})" if "root" in options and name != "builtin" else ""
    print(f"{name} {args.split}{source}: {result.sentences:,} sentences, beam {translator.beam_size}, "
          f"alpha {translator.alpha}, translated in {result.seconds:.1f} s")
    print(f"BLEU             {result.bleu:6.2f}  {result.signature}")
    print(f"BLEU, lowercased {result.bleu_lowercase:6.2f}  {result.signature_lowercase}")
    if output is not None:
        report = {"checkpoint": str(args.checkpoint), "corpus": name, "split": args.split,
                  "beam_size": translator.beam_size, "alpha": translator.alpha, **result.summary(),
                  "hypotheses": result.hypotheses}
        with output_errors(output):
            atomic_write_text(output, json.dumps(report, indent=1, ensure_ascii=False) + "\n")
        print(f"scores and translations written to {output}")
    return 0


# --- the parser ------------------------------------------------------------------------------------


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_device(text: str) -> torch.device:
    """An argparse type: a device PyTorch can name (whether the machine has it is checked later)."""
    try:
        return torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device: use cpu, cuda, cuda:1, ...") from None


def _add_train_command(commands) -> None:
    """The sub-parser of `train`: its options, the recipe options, and the configurations in its help."""
    configurations = "\n".join(
        textwrap.fill(describe_configuration(name), 96, initial_indent=f"  {name:9} ",
                      subsequent_indent=" " * 12)
        for name in RECIPES
    )
    train = commands.add_parser(
        "train",
        help="train a German→English translator with a named configuration (paper §5, Table 3)",
        usage="%(prog)s [--config NAME] [--run-dir DIR] [OPTION ...]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "Train a German→English Transformer with a named configuration, changed by the recipe options, "
            "in a run directory. Run the same command again to resume an interrupted run (it continues from "
            "the newest checkpoint); a finished run has nothing left to train. At the end, model.pt is the "
            "average of the last checkpoints (§6.1). Under torchrun, every process trains on its share of "
            "each step's batches.", 96),
        epilog=f"configurations:\n{configurations}",
    )
    train.add_argument("--config", default="builtin", choices=list(RECIPES), metavar="NAME",
                       help=f"the configuration to start from: {', '.join(RECIPES)} (default builtin; "
                       "see below)")
    train.add_argument("--run-dir", type=Path, metavar="DIR",
                       help="where the run's files go (default runs/CONFIG)")
    train.add_argument("--data-dir", type=Path, metavar="DIR",
                       help="a folder that holds the Multi30k files (train.de.gz, ...), instead of the cache")
    train.add_argument("--no-download", action="store_true",
                       help="never download: use the cache or --data-dir only")
    train.add_argument("--device", type=parse_device, help="cpu, cuda, ... (default: a GPU if there is one)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    add_recipe_options(train)
    train.set_defaults(handler=_run_train)


def run_or_pretrained(text: str) -> Path:
    """The argparse type of a model argument: a path, or `pretrained:NAME`, the folder of a translator
    shipped with the package (checked against its SHA-256 before use)."""
    if text.startswith(PREFIX):
        try:
            return pretrained_dir(text[len(PREFIX):])
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from error
    return Path(text)


def _add_decoding_options(parser: argparse.ArgumentParser) -> None:
    """The options of `translate` and `evaluate` that say which model, and how to decode."""
    parser.add_argument("checkpoint", type=run_or_pretrained, metavar="RUN_DIR_OR_CHECKPOINT",
                        help="a run directory of train (its model.pt), a checkpoint file, or "
                        f"{PREFIX}NAME, a translator shipped with the package ({', '.join(available())})")
    parser.add_argument("--vocab", type=Path, metavar="FILE",
                        help="the vocabulary the model was trained with (default: the run's vocab.json)")
    parser.add_argument("--beam-size", type=positive_int, metavar="K",
                        help="beam size (default: the run's, 4 as in §6.1); 1 is greedy decoding")
    parser.add_argument("--device", type=parse_device, help="cpu, cuda, ... (default: a GPU if there is one)")


def _add_translate_command(commands) -> None:
    """The sub-parser of `translate`."""
    translate = commands.add_parser(
        "translate",
        help="translate German sentences into English (beam search, paper §6.1)",
        description="Translate German sentences into English with a trained model: the sentences given, "
        "else the lines of --input, else the lines of standard input. One translation per line, in order.",
    )
    _add_decoding_options(translate)
    translate.add_argument("sentences", nargs="*", metavar="SENTENCE", help="German sentences to translate")
    translate.add_argument("--input", "-i", type=Path, metavar="FILE",
                           help="a UTF-8 file of German sentences, one per line ('-': standard input)")
    translate.add_argument("--output", "-o", metavar="FILE",
                           help="write the translations to FILE (default: standard output)")
    translate.set_defaults(handler=_run_translate)


def _add_evaluate_command(commands) -> None:
    """The sub-parser of `evaluate`."""
    evaluate = commands.add_parser(
        "evaluate",
        help="translate a test set and score it with BLEU (sacreBLEU, paper §6.1)",
        description="Translate a test set with a trained model and score the translations with BLEU "
        "(sacreBLEU on detokenized text, cased and lowercased), with sacreBLEU's signatures.",
    )
    _add_decoding_options(evaluate)
    evaluate.add_argument("--corpus", choices=CORPORA,
                          help="the test data (default: the corpus the run was trained on, else builtin)")
    evaluate.add_argument("--split", default="test",
                          help="the split to score (default test; Multi30k: test is test_2016_flickr)")
    evaluate.add_argument("--data-dir", type=Path, metavar="DIR",
                          help="a folder that holds the Multi30k files, instead of the cache")
    evaluate.add_argument("--no-download", action="store_true", help="never download the test set")
    evaluate.add_argument("--limit", type=positive_int, metavar="N", help="score the first N sentences only")
    evaluate.add_argument("--output", "-o", metavar="FILE",
                          help="write the scores, signatures and translations to FILE as JSON")
    evaluate.set_defaults(handler=_run_evaluate)


def build_parser(extra_commands: Sequence[Callable] = ()) -> argparse.ArgumentParser:
    """The parser of every command; each of `extra_commands`, a later chapter's, adds its own sub-parser
    to the sub-parsers it is given (chapter 18's `add_experiment_command`)."""
    parser = argparse.ArgumentParser(
        prog="python -m annotated_transformer",
        description="The Annotated Transformer: the procedures of 'Attention Is All You Need' (paper §5, "
        "§6.1) as commands.",
        epilog="'python -m annotated_transformer COMMAND --help' explains a command and its options.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train_command(commands)
    _add_translate_command(commands)
    _add_evaluate_command(commands)
    for add_command in extra_commands:
        add_command(commands)
    average = commands.add_parser(
        "average",
        help="average the parameters of the last checkpoints (paper §6.1)",
        description=(
            "Average the parameters of several checkpoints of one training run into one checkpoint, "
            "as the paper did for its results (§6.1: the last 5 checkpoints for the base model, the "
            "last 20 for the big one)."
        ),
    )
    average.add_argument(
        "checkpoints", nargs="+", type=Path, metavar="CHECKPOINT",
        help="a directory of step_*.pt checkpoints (its newest --last are averaged), or the files",
    )
    average.add_argument(
        "--last", "-k", type=int, default=None,
        help=f"with a directory: how many of its newest checkpoints to average (default {AVERAGE_LAST}, "
             "as §6.1)",
    )
    average.add_argument(
        "--output", "-o", required=True, help="where to write the averaged checkpoint"
    )
    average.set_defaults(handler=_run_average)
    return parser


def _parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser.parse_args(argv)`, except that the sentences of `translate` may also come after its
    options: argparse gives all the positional arguments it sees before the first option to the
    positionals, and would refuse those after it as unrecognized."""
    args, extras = parser.parse_known_args(argv)
    if args.command == "translate":
        args.sentences += [extra for extra in extras if not extra.startswith("-")]
        extras = [extra for extra in extras if extra.startswith("-")]
    if extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    return args


# --- messages and main -----------------------------------------------------------------------------


def _option_spelling(setting: Setting) -> str:
    """How the command line says a setting that a library message names (see `Setting`): a Recipe
    field as its option (`lr_factor` is --lr-factor), the data loader's `root` as --data-dir and
    `download=False` as --no-download. None is said as leaving the option out (or inf, for a
    time limit)."""
    if setting.name == "download":
        return "leaving out --no-download" if setting.value else "--no-download"
    option = "--data-dir" if setting.name == "root" else option_name(setting.name)
    if setting.value is ...:
        return option
    if setting.value is None:
        return f"{option} inf" if setting.name == "max_minutes" else f"leaving out {option}"
    return f"{option} {setting.value}"


def _spelled(error: BaseException) -> str:
    """An error's message, with the settings it names said as options."""
    return error.spelled(_option_spelling) if isinstance(error, SettingsMessage) else str(error)


def _command_line_message(error: BaseException) -> str:
    """An error message as the command line says it: on one line, with the options where the
    library names its settings (`root` is --data-dir, `lr_factor` is --lr-factor, ...)."""
    lines = [line.strip() for line in _spelled(error).splitlines() if line.strip()]
    message = lines[0] if lines else type(error).__name__
    for line in lines[1:]:  # a list of differences, say: one line, separated by semicolons
        message += (" " if message.endswith(":") else "; ") + line
    return message


def main(argv: Sequence[str] | None = None, extra_commands: Sequence[Callable] = ()) -> int:
    """Run one command; errors in the input end it with a message and exit status 2. `extra_commands`
    are later chapters' commands (`build_parser`)."""
    parser = build_parser(extra_commands)
    args = _parse_arguments(parser, argv)
    args.prog = f"{parser.prog} {args.command}"
    try:
        return args.handler(args)
    except (OSError, ValueError, DataError) as error:  # CheckpointError, VocabularyError are ValueErrors
        parser.exit(2, f"{args.prog}: error: {_command_line_message(error)}\n")
    except KeyboardInterrupt:
        advice = "; the same command resumes from the newest checkpoint" if args.command == "train" else ""
        parser.exit(130, f"{args.prog}: interrupted{advice}\n")

