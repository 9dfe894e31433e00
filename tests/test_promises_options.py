"""Promises of options and of settings together, at values where a wrong wiring shows (issue 62).

The command line's options reach what they select (chapter 16): `evaluate --split` the sentences it
scores (and `--limit` the first of them), `--beam-size` (and else the run's recipe) the beam that
decodes in `translate` and `evaluate`, the checkpoint given the model that translates, and `average`
without `--last` the newest five checkpoints (§6.1). Each test's inputs make the right and the wrong
wiring differ: a validation split whose sentences are not the test split's, a run whose recipe says a
beam of 3 and α = 1.1 (not the fallback's 4 and 0.6), three checkpoints of different weights, seven
checkpoints in a directory.

Two settings together, where one changes the other's path: a model trained with R-Drop is validated
with one pass in evaluation mode, without R-Drop's penalty or its second pass, and trains on with its
dropout after each validation; gradient clipping with gradient accumulation clips the gradient of the
whole step once, as one big batch's step would, never each micro-batch's; with fp16's loss scaling
too, the accumulated gradient is unscaled once before it is clipped, and an overflow in one
micro-batch skips the whole step without ending the training."""

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers import copy_batches, new_run, small_config, tiny_trainer

import annotated_transformer.cli.commands as commands
import annotated_transformer.translator as translator_module
from annotated_transformer.__main__ import main
from annotated_transformer.batching import Batch, copy_task, make_batch
from annotated_transformer.checkpoints import read_checkpoint, save_checkpoint
from annotated_transformer.companions.vocabulary_files import read_vocabularies
from annotated_transformer.data import corpus
from annotated_transformer.model import make_model
from annotated_transformer.recipes import get_recipe
from annotated_transformer.regularization import token_nll
from annotated_transformer.runs.translation import train_translation
from annotated_transformer.training import Trainer, evaluate
from annotated_transformer.translator import Translator, Validator

CPU = ["--device", "cpu"]

# --- the command line: what an option selects ---------------------------------------------------------


@pytest.fixture
def scored(monkeypatch) -> list[dict]:
    """Every call of `evaluate` to `evaluate_bleu`: the pairs it scored."""
    calls: list[dict] = []
    real = commands.evaluate_bleu

    def recording(translator, pairs, *args, **kwargs):
        calls.append({"pairs": list(pairs)})
        return real(translator, pairs, *args, **kwargs)

    monkeypatch.setattr(commands, "evaluate_bleu", recording)
    return calls


@pytest.fixture
def decoders(monkeypatch) -> list[tuple]:
    """Every decoding the translators make: ("beam", beam_size, alpha) or ("greedy",)."""
    calls: list[tuple] = []
    beam_search, greedy_decode = translator_module.beam_search, translator_module.greedy_decode

    def beam(model, src, src_mask=None, beam_size=4, alpha=0.6, **kwargs):
        calls.append(("beam", beam_size, alpha))
        return beam_search(model, src, src_mask, beam_size=beam_size, alpha=alpha, **kwargs)

    def greedy(*args, **kwargs):
        calls.append(("greedy",))
        return greedy_decode(*args, **kwargs)

    monkeypatch.setattr(translator_module, "beam_search", beam)
    monkeypatch.setattr(translator_module, "greedy_decode", greedy)
    return calls


@pytest.mark.parametrize(
    ("option", "split"), [([], "test"), (["--split", "val"], "val"), (["--split", "train"], "train")]
)
def test_evaluate_scores_the_first_sentences_of_the_split_it_is_given(
    tiny_run, scored, capsys, option, split
):
    """`evaluate --split val --limit 3` scores the first 3 pairs of the validation split, and without
    --split those of the test split: the three splits' first pairs differ, so an option wired to
    another split, or a limit that takes other sentences than the first, scores other pairs."""
    firsts = {name: corpus("builtin", name)[:3] for name in ("train", "val", "test")}
    assert len({tuple(pairs) for pairs in firsts.values()}) == 3  # the splits differ where it is scored
    assert main(["evaluate", str(tiny_run), *option, "--limit", "3", "--beam-size", "1", *CPU]) == 0
    (call,) = scored
    assert call["pairs"] == firsts[split]
    assert f"builtin {split}: 3 sentences" in capsys.readouterr().out


@pytest.fixture
def beam_3_run(tiny_run, tmp_path) -> Path:
    """A copy of the tiny run whose recipe.json says beam 3 and α = 1.1: neither the fallback's
    beam 4 and α 0.6 nor the values its checkpoints recorded, so that a setting taken from elsewhere
    than the run's recipe shows."""
    run = shutil.copytree(tiny_run, tmp_path / "run")
    recipe = json.loads((run / "recipe.json").read_text())
    assert (recipe["beam_size"], recipe["alpha"]) == (4, 0.6)
    (run / "recipe.json").write_text(json.dumps({**recipe, "beam_size": 3, "alpha": 1.1}))
    return run


DECODINGS = [
    ([], ("beam", 3, 1.1)),
    (["--beam-size", "2"], ("beam", 2, 1.1)),
    (["--beam-size", "1"], ("greedy",)),
]


@pytest.mark.parametrize(("option", "decoding"), DECODINGS)
@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_the_beam_given_else_the_runs_decodes_with_the_runs_alpha(
    beam_3_run, decoders, capsys, command, option, decoding
):
    """`--beam-size 2` decodes with a beam of 2, `--beam-size 1` greedily, and no --beam-size with the
    run's beam of 3; always with the run's α of 1.1. What beam search receives is recorded, so that a
    beam printed right but decoded with another (or an option read by `translate` only) shows."""
    arguments = (
        ["Der kleine Hund sieht die Katze.", "Heute malt die Frau."]
        if command == "translate"
        else ["--limit", "2"]
    )
    assert main([command, str(beam_3_run), *arguments, *option, *CPU]) == 0
    assert decoders and set(decoders) == {decoding}
    if command == "evaluate":
        beam = decoding[1] if decoding[0] == "beam" else 1
        assert f"beam {beam}, alpha 1.1" in capsys.readouterr().out


@pytest.fixture
def translators(monkeypatch) -> list[Translator]:
    """Every Translator that `translate` and `evaluate` load (a subclass that records itself)."""
    made: list[Translator] = []

    class Recording(Translator):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(commands, "Translator", Recording)
    return made


def same_weights(model: torch.nn.Module, state: dict) -> bool:
    return all(torch.equal(tensor, state[name]) for name, tensor in model.state_dict().items())


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_the_checkpoint_given_is_the_model_that_translates(tiny_run, translators, command):
    """The run directory, its step 2 and its step 3 checkpoint are three different models (model.pt is
    the average of the two); each, given, is the one whose weights translate, never the run's
    model.pt nor its newest checkpoint in its place."""
    paths = [
        tiny_run,
        tiny_run / "checkpoints" / "step_00000002.pt",
        tiny_run / "checkpoints" / "step_00000003.pt",
    ]
    states = [
        read_checkpoint(path / "model.pt" if path.is_dir() else path)["state"]["model"] for path in paths
    ]
    for i, state in enumerate(states):  # the inputs: three models that differ
        assert not any(
            all(torch.equal(state[name], other[name]) for name in state) for other in states[i + 1 :]
        )
    arguments = ["Der Hund."] if command == "translate" else ["--limit", "1"]
    for path, state in zip(paths, states, strict=True):
        translators.clear()
        assert main([command, str(path), *arguments, "--beam-size", "1", *CPU]) == 0
        (translator,) = translators
        assert same_weights(translator.model, state), path


def write_checkpoints(directory: Path, n: int) -> list[Path]:
    """n checkpoints of one configuration at steps 10, 20, ..., each of other weights."""
    paths = []
    for i in range(n):
        torch.manual_seed(i)
        step = (i + 1) * 10
        paths.append(
            save_checkpoint(directory / f"step_{step:08d}.pt", make_model(small_config()), step=step)
        )
    return paths


def test_average_without_last_averages_the_newest_five_of_seven(tmp_path, capsys):
    """§6.1 averaged the last 5 checkpoints: of a directory of 7, `average` without --last averages
    steps 30 to 70 (not all 7, nor the oldest 5, nor 4 or 6 of them), weight by weight."""
    paths = write_checkpoints(tmp_path / "run", 7)
    assert main(["average", str(tmp_path / "run"), "-o", str(tmp_path / "avg.pt")]) == 0
    averaged = read_checkpoint(tmp_path / "avg.pt")
    assert averaged["extra"]["averaged_steps"] == [30, 40, 50, 60, 70]
    states = [read_checkpoint(path)["state"]["model"] for path in paths[-5:]]
    for name, tensor in averaged["state"]["model"].items():
        expected = sum(state[name].double() for state in states) / 5
        torch.testing.assert_close(tensor.double(), expected, atol=1e-6, rtol=0)
    assert "averaged 5 checkpoints (steps 30, 40, 50, 60, 70)" in capsys.readouterr().out


# --- R-Drop and validation ----------------------------------------------------------------------------


class ForwardLog:
    """Each forward pass of a model: whether it ran in training mode (and its dropout), with
    gradients, on how many sentences, and whether the batch was doubled (its two halves the same
    sentences: R-Drop's two passes in one call)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls: list[dict] = []
        model.register_forward_hook(self._record)

    def _record(self, module, inputs, output) -> None:
        self.calls.append(
            {
                "training": module.training,
                "grad": torch.is_grad_enabled(),
                "sentences": len(inputs[0]),
                "doubled": len(inputs[0]) % 2 == 0
                and torch.equal(inputs[0][: len(inputs[0]) // 2], inputs[0][len(inputs[0]) // 2 :]),
                "dropout_on": any(m.training for m in module.modules() if isinstance(m, torch.nn.Dropout)),
            }
        )


RDROP_RECIPE = {
    "n_layers": 1,
    "d_model": 32,
    "d_ff": 64,
    "n_heads": 2,
    "vocab_size": 300,
    "max_tokens": 600,
    "warmup": 10,
    "max_steps": 2,
    "checkpoint_every": 1,
    "average_last": 2,
    "dropout": 0.3,
    "rdrop_alpha": 1.0,
}


def test_the_validation_of_a_model_that_trains_with_rdrop_is_one_eval_pass_without_the_penalty(
    tiny_run, tmp_path, monkeypatch
):
    """A run that trains with R-Drop (α = 1) and dropout 0.3, validated at every step: each step's
    val_nll is the plain cross-entropy of one pass of that step's model in evaluation mode. With
    dropout on, the penalty or a second pass, val_nll would differ (dropout 0.3 changes it by far
    more than the tolerance); a second pass in evaluation mode gives the same number, so the forward
    passes of the validation are recorded too: in eval mode, no dropout, each sentence once."""
    import annotated_transformer.runs.translation as translation

    logs: list[ForwardLog] = []

    def logged_model(config):
        model = make_model(config)
        logs.append(ForwardLog(model))
        return model

    monkeypatch.setattr(translation, "make_model", logged_model)
    pairs = corpus("builtin", "val")[:12]
    run_dir = new_run(tiny_run, tmp_path, "rdrop")
    recipe = get_recipe("builtin", **RDROP_RECIPE)
    train_translation(recipe, run_dir, device="cpu", progress=False, validator=Validator(pairs, 1))
    (log,) = logs
    training = [call for call in log.calls if call["grad"]]
    validation = [call for call in log.calls if not call["grad"]]
    # The combination was in effect: every training pass was R-Drop's (dropout on, the batch twice).
    assert training and all(call["training"] and call["dropout_on"] for call in training)
    assert all(call["doubled"] for call in training)
    # The validation's passes: in eval mode, each of the 12 sentences once per validation (steps 1, 2).
    assert validation
    assert not any(call["training"] or call["dropout_on"] or call["doubled"] for call in validation)
    assert sum(call["sentences"] for call in validation) == 2 * len(pairs)
    records = json.loads((run_dir / "validation.json").read_text())
    assert [record["step"] for record in records] == [1, 2]
    vocabs = read_vocabularies(run_dir / "vocab.json")
    for record in records:
        state = read_checkpoint(run_dir / "checkpoints" / f"step_{record['step']:08d}.pt")["state"]["model"]
        model = make_model(recipe.model_config(vocabs))
        model.load_state_dict(state)
        assert record["val_nll"] == pytest.approx(plain_nll(model.eval(), vocabs, pairs), rel=1e-5)
        model.train()  # the same model with its dropout on: what a validation in training mode would say
        assert abs(plain_nll(model, vocabs, pairs) - record["val_nll"]) > 1e-3


@torch.no_grad()
def plain_nll(model: torch.nn.Module, vocabs, pairs: list[tuple[str, str]]) -> float:
    """The cross-entropy per target token of one teacher-forced pass over `pairs`, in one batch."""
    from annotated_transformer.tokenization import encode_pairs

    encoded = encode_pairs(pairs, vocabs)
    batch = make_batch(list(zip(encoded.source, encoded.target, strict=True)))
    torch.manual_seed(0)
    logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    return token_nll(logits, batch.tgt_out).item() / batch.n_tokens


def rdrop_trainer() -> Trainer:
    return tiny_trainer(model_overrides={"dropout": 0.3}, rdrop_alpha=1.0, max_steps=4)


HELD_OUT = [make_batch(copy_task(20, vocab_size=23, min_len=2, max_len=10, seed=9))]


def test_a_model_that_trains_with_rdrop_goes_on_with_its_dropout_after_each_validation():
    """R-Drop needs dropout: with the model left in eval mode after a validation, its two passes would
    agree, the penalty vanish, and training go on without any dropout. Validated after every step,
    the model is back in training mode, and the run's losses are bit for bit those of the same run
    without validation (a validation in eval mode draws no random numbers)."""
    plain = rdrop_trainer().fit(copy_batches)
    validated = rdrop_trainer()
    modes: list[bool] = []

    def validate(step: int) -> None:
        evaluate(validated.model, HELD_OUT)
        modes.append(validated.model.training)

    history = validated.fit(copy_batches, on_step=validate)
    assert modes == [True] * 4
    assert [(s.loss, s.nll) for s in history] == [(s.loss, s.nll) for s in plain]
    without_dropout = rdrop_trainer()
    without_dropout.model.eval()
    without_dropout.model.train = lambda mode=True: without_dropout.model  # stays in eval mode
    assert [s.loss for s in without_dropout.fit(copy_batches)] != [s.loss for s in plain]  # the control


# --- gradient clipping with gradient accumulation --------------------------------------------------------

PAIRS = copy_task(7, vocab_size=23, min_len=1, max_len=15, seed=1)
MICRO = [make_batch(PAIRS[:2]), make_batch(PAIRS[2:5]), make_batch(PAIRS[5:])]  # different token counts
WHOLE = [make_batch(PAIRS)]


def gradients(trainer: Trainer) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in trainer.model.parameters()]


def total_norm(grads: list[torch.Tensor]) -> float:
    return torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item()


@pytest.fixture
def clip_calls(monkeypatch) -> list[float]:
    """The total gradient norm each call of clip_grad_norm_ found (before it clipped)."""
    calls: list[float] = []
    real: Callable = torch.nn.utils.clip_grad_norm_

    def recording(parameters, max_norm, *args, **kwargs):
        norm = real(parameters, max_norm, *args, **kwargs)
        calls.append(norm.item())
        return norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording)
    return calls


def step(micro_batches: list[Batch], **config) -> tuple[Trainer, float | None]:
    trainer = tiny_trainer(**config)
    return trainer, trainer.train_step(micro_batches).grad_norm


def test_clipping_acts_once_on_the_whole_accumulated_gradient_as_on_one_big_batch(clip_calls):
    """3 micro-batches of 2, 3 and 2 sentences, clipped to a quarter of the whole step's gradient norm:
    clip_grad_norm_ is called once, on the norm of the whole step; the clipped gradient the optimizer
    takes is that of one batch of the 7 sentences clipped alike (a norm of exactly the limit), and the
    step reports the norm before clipping. Clipping each micro-batch's share, or the running sum after
    each, would call it 3 or 4 times and leave another gradient."""
    _, whole_norm = step(WHOLE, track_grad_norm=True)
    limit = whole_norm / 4
    clip_calls.clear()
    big, big_norm = step(WHOLE, clip_grad_norm=limit)
    clip_calls.clear()
    accumulated, norm = step(MICRO, clip_grad_norm=limit, accumulate=3)
    assert clip_calls == [pytest.approx(whole_norm, rel=1e-5)]
    assert norm == pytest.approx(whole_norm, rel=1e-5) and big_norm == pytest.approx(whole_norm, rel=1e-5)
    assert accumulated.step == 1 and accumulated.scheduler.last_epoch == 1  # one optimizer step
    grads, expected = gradients(accumulated), gradients(big)
    assert total_norm(grads) == pytest.approx(limit, rel=1e-4)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-7, rtol=1e-4)
    # The control: the micro-batches' own norms are not the whole step's, so clipping them differs.
    shares = [step([batch], track_grad_norm=True)[1] for batch in MICRO]
    assert all(abs(share - whole_norm) > 0.05 * whole_norm for share in shares)


@pytest.mark.parametrize("factor", [0.5, 1.5])
def test_whether_an_accumulated_step_is_clipped_is_decided_on_the_whole_steps_norm(factor):
    """A limit of 0.5 or 1.5 times the whole step's norm: the accumulated gradient is clipped (to the
    limit) exactly when one big batch's is, and then equals it. At 0.5, clipping each micro-batch's
    running sum, or the sum before the last micro-batch, leaves another gradient; at 1.5, a limit
    shared out among the micro-batches (divided by `accumulate`) clips a step that must not be."""
    _, whole_norm = step(WHOLE, track_grad_norm=True)
    limit = factor * whole_norm
    big, _ = step(WHOLE, clip_grad_norm=limit)
    accumulated, norm = step(MICRO, clip_grad_norm=limit, accumulate=3)
    assert norm == pytest.approx(whole_norm, rel=1e-5)
    assert total_norm(gradients(accumulated)) == pytest.approx(min(limit, whole_norm), rel=1e-4)
    for got, want in zip(gradients(accumulated), gradients(big), strict=True):
        torch.testing.assert_close(got, want, atol=1e-7, rtol=1e-4)


def scaled_trainer(**config) -> Trainer:
    """A tiny trainer with an enabled gradient scaler: fp16's needs a GPU, but the scaler runs on the
    CPU too, and an fp32 model scaled by a power of two gives the same gradients up to rounding."""
    trainer = tiny_trainer(**config)
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=1000)
    return trainer


def test_a_scaled_accumulated_step_is_unscaled_once_then_clipped_as_one_big_batch(monkeypatch):
    """fp16's loss scaling, accumulation and clipping together: the 3 micro-batches' scaled gradients
    are unscaled once, after the last, and the true gradient of the whole step is clipped, as one big
    unscaled batch's. Clipping the scaled gradient (unscaling forgotten) would leave a gradient 4096
    times too small; unscaling after each micro-batch fails in the scaler."""
    _, whole_norm = step(WHOLE, track_grad_norm=True)
    limit = whole_norm / 4
    big, _ = step(WHOLE, clip_grad_norm=limit)
    accumulated = scaled_trainer(clip_grad_norm=limit, accumulate=3)
    unscaled: list[int] = []
    real_unscale = accumulated.scaler.unscale_
    monkeypatch.setattr(
        accumulated.scaler, "unscale_", lambda optimizer: (unscaled.append(1), real_unscale(optimizer))
    )
    norm = accumulated.train_step(MICRO).grad_norm
    assert unscaled == [1] and accumulated.scaler.get_scale() == 2.0**12  # one unscale, no overflow
    assert norm == pytest.approx(whole_norm, rel=1e-5)
    for got, want in zip(gradients(accumulated), gradients(big), strict=True):
        torch.testing.assert_close(got, want, atol=1e-7, rtol=1e-4)


def overflow_in(trainer: Trainer, call: int) -> None:
    """Make the `call`-th backward pass (counted over micro-batches) give an infinite gradient, as a
    float16 overflow in one micro-batch would."""
    backwards = {"n": 0}

    def hook(grad: torch.Tensor) -> torch.Tensor:
        backwards["n"] += 1
        return grad * math.inf if backwards["n"] == call else grad

    next(trainer.model.parameters()).register_hook(hook)


def test_an_overflow_in_one_micro_batch_skips_the_whole_step_and_training_goes_on():
    """Steps of 2 micro-batches under a gradient scaler, the second micro-batch of step 2 overflowing:
    the whole of step 2 is skipped (the parameters stay those of step 1, the first micro-batch's
    finite share is not applied either), the scale halves once, and `fit` goes on to step 3, reporting
    the infinite gradient norm without calling it a divergence: an infinite gradient is the scaler's
    to handle. Stepping anyway, or treating it as TrainingDiverged, fails here."""
    trainer = scaled_trainer(clip_grad_norm=1.0, accumulate=2, max_steps=3)
    overflow_in(trainer, call=4)  # step 2's second micro-batch
    snapshots: list[list[torch.Tensor]] = []
    history = trainer.fit(
        copy_batches,
        on_step=lambda _: snapshots.append([p.detach().clone() for p in trainer.model.parameters()]),
    )
    assert [s.step for s in history] == [1, 2, 3]
    assert math.isfinite(history[0].grad_norm) and history[1].grad_norm == math.inf
    assert math.isfinite(history[2].grad_norm)
    for after_1, after_2 in zip(snapshots[0], snapshots[1], strict=True):
        assert torch.equal(after_1, after_2)  # step 2 skipped
    assert any(not torch.equal(a, b) for a, b in zip(snapshots[1], snapshots[2], strict=True))  # step 3 taken
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert trainer.scaler.get_scale() == 2.0**11  # halved once, for the one skipped step


def test_average_refuses_a_count_beside_a_list_of_files(tmp_path):
    """--last chooses among a directory's checkpoints: beside listed files it would be ignored."""
    from annotated_transformer.cli.commands import _resolve_checkpoints

    files = []
    for step in (1, 2, 3):
        files.append(tmp_path / f"step_{step:08d}.pt")
        files[-1].write_bytes(b"")
    assert _resolve_checkpoints(files, None) == files
    with pytest.raises(ValueError, match=r"^--last 2 chooses among a directory's checkpoints: give one "):
        _resolve_checkpoints(files, 2)
