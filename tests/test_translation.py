"""Chapter 14: recipes, run directories, the Translator, BLEU and attention maps.

Everything trains tiny models on the built-in corpus (no network, no Multi30k).
"""

import dataclasses
import json
import warnings
from pathlib import Path

import pytest
import sacrebleu
import torch
from helpers import assert_identical, one_line

from annotated_transformer.attention_plots import attention_maps
from annotated_transformer.checkpoints import checkpoint_paths, read_checkpoint
from annotated_transformer.companions.hardware import check_device
from annotated_transformer.companions.vocabulary_files import vocabularies_sha256, write_vocabularies
from annotated_transformer.data import builtin_corpus
from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.model import TransformerConfig
from annotated_transformer.optimizer import cooldown_factor, rate
from annotated_transformer.recipes import RECIPES, Recipe, get_recipe
from annotated_transformer.runs.run_files import RESUMABLE_FIELDS, RunHistory
from annotated_transformer.runs.translation import train_translation
from annotated_transformer.tokenization import VocabularyError, build_vocabularies
from annotated_transformer.training import Trainer
from annotated_transformer.translator import InputWarning, Translator, Validator, bleu, evaluate_bleu

TINY = {
    "n_layers": 1,
    "d_model": 32,
    "d_ff": 64,
    "n_heads": 2,
    "vocab_size": 300,
    "max_tokens": 600,
    "warmup": 10,
    "checkpoint_every": 2,
    "average_last": 2,
}


def tiny_recipe(**overrides):
    return get_recipe("builtin", **{**TINY, "max_steps": 4, **overrides})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "tiny"
    run = train_translation(tiny_recipe(), run_dir, device="cpu", progress=False)
    return run


# --- recipes ------------------------------------------------------------------------------------


def test_named_recipes_and_overrides():
    assert set(RECIPES) == {"builtin", "multi30k", "multi30k-gpu", "base", "big"}
    assert RECIPES["base"].model == TransformerConfig.base() and RECIPES["base"].train.warmup == 4000
    assert RECIPES["big"].model == TransformerConfig.big() and RECIPES["big"].model.dropout == 0.3
    assert get_recipe("multi30k", max_steps=7).train.max_steps == 7
    assert get_recipe("multi30k", max_steps=None) == RECIPES["multi30k"]  # None means "not given"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: get_recipe("multi30K"), "unknown configuration 'multi30K'"),
        (lambda: get_recipe("builtin", layers=2), "unknown recipe field"),
        (lambda: get_recipe("builtin", corpus="wmt14"), "unknown corpus"),
        (lambda: get_recipe("builtin", vocab="char"), "vocab must be"),
        (lambda: get_recipe("builtin", checkpoint_every=0), "checkpoint_every must be at least 1"),
        (lambda: get_recipe("builtin", average_last=0), "average_last must be at least 1"),
        (lambda: get_recipe("builtin", max_minutes=0), "max_minutes must be positive"),
    ],
)
def test_bad_recipes_are_refused_with_a_clear_message(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_model_config_follows_the_vocabularies():
    pairs = builtin_corpus("train")[:300]
    recipe = tiny_recipe()
    joint = build_vocabularies(pairs, "bpe", 300)
    words = build_vocabularies(pairs, "word", min_freq=1)
    assert recipe.model_config(joint).share_embeddings
    config = recipe.model_config(words)
    assert not config.share_embeddings
    assert (config.src_vocab_size, config.tgt_vocab_size) == (len(words.source), len(words.target))


# --- the run directory ---------------------------------------------------------------------------


def test_a_run_writes_everything_it_needs(trained):
    run_dir = trained.run_dir
    for name in ("recipe.json", "vocab.json", "history.json", "hardware.json", "model.pt"):
        assert (run_dir / name).is_file(), name
    assert [p.name for p in checkpoint_paths(run_dir / "checkpoints")] == [
        "step_00000002.pt",
        "step_00000004.pt",
    ]
    history = json.loads((run_dir / "history.json").read_text())
    assert [h["step"] for h in history] == [1, 2, 3, 4]
    assert all(h["minutes"] >= 0 and h["tokens"] > 0 for h in history)
    assert json.loads((run_dir / "hardware.json").read_text())["device"] == "cpu"
    assert trained.hardware["device"] == "cpu"


def test_model_pt_is_the_average_of_the_last_checkpoints(trained):
    a, b = (
        torch.load(p, weights_only=True)["state"]["model"]
        for p in checkpoint_paths(trained.run_dir / "checkpoints")
    )
    saved = torch.load(trained.run_dir / "model.pt", weights_only=True)
    name = "generator.proj.weight" if "generator.proj.weight" in a else next(iter(a))
    expected = (a[name].double() + b[name].double()) / 2
    torch.testing.assert_close(saved["state"]["model"][name].double(), expected, rtol=0, atol=1e-6)
    assert saved["extra"]["averaged"] == ["step_00000002.pt", "step_00000004.pt"]


def test_a_finished_run_is_only_loaded(trained):
    before = {p.name: p.stat().st_mtime_ns for p in checkpoint_paths(trained.run_dir / "checkpoints")}
    again = train_translation(tiny_recipe(), trained.run_dir, device="cpu", progress=False)
    after = {p.name: p.stat().st_mtime_ns for p in checkpoint_paths(trained.run_dir / "checkpoints")}
    assert before == after
    assert len(again.history) == len(trained.history)
    for key, value in trained.model.state_dict().items():
        torch.testing.assert_close(again.model.state_dict()[key], value)


def test_a_run_can_be_extended_but_not_changed(trained, tmp_path):
    with pytest.raises(ValueError, match=r"another configuration \(d_model: 32 -> 48\)"):
        train_translation(tiny_recipe(d_model=48), trained.run_dir, device="cpu", progress=False)
    run_dir = tmp_path / "extended"
    train_translation(tiny_recipe(max_steps=2), run_dir, device="cpu", progress=False)
    longer = train_translation(tiny_recipe(max_steps=4), run_dir, device="cpu", progress=False)
    assert [h["step"] for h in longer.history] == [1, 2, 3, 4]


def test_an_interrupted_run_resumes_to_the_same_parameters(tmp_path):
    whole = train_translation(tiny_recipe(average_last=1), tmp_path / "whole", device="cpu", progress=False)
    # Stop after 2 steps (as an interruption would), then resume with the full recipe.
    train_translation(
        tiny_recipe(average_last=1, max_steps=2), tmp_path / "cut", device="cpu", progress=False
    )
    resumed = train_translation(tiny_recipe(average_last=1), tmp_path / "cut", device="cpu", progress=False)
    assert_identical(resumed.model, whole.model)


def test_the_builtin_recipe_learns_to_translate(tmp_path):
    # The builtin recipe, cut from 600 steps to 250 (past its warmup of 150, the validation BLEU
    # climbs from about 30 at step 150 to 81-93 at step 250 for seeds 0-3), its last checkpoint
    # kept as the model. The whole recipe reaches about 98.
    recipe = get_recipe("builtin", max_steps=250, checkpoint_every=250, average_last=1)
    run = train_translation(recipe, tmp_path / "builtin", device="cpu", progress=False)
    score = evaluate_bleu(Translator.load(run.run_dir, device="cpu"), builtin_corpus("val")[:200]).bleu
    assert score >= 50, score


def test_max_minutes_stops_training(tmp_path):
    run = train_translation(
        tiny_recipe(max_steps=1000, max_minutes=1e-6), tmp_path / "r", device="cpu", progress=False
    )
    assert [h["step"] for h in run.history] == [1]  # the limit is checked after every step
    assert (tmp_path / "r" / "model.pt").is_file()


class Interrupted(Exception):
    pass


TRAIN_STEP = Trainer.train_step_async  # the real one, whatever a test has patched


def fake_clock(monkeypatch, minutes_per_step: float, interrupt_after: int | None = None) -> None:
    """Training minutes = minutes_per_step × optimizer steps done (resumed steps included): a
    machine of known speed. `interrupt_after`: raise Interrupted once that step is done."""
    done = {"steps": 0}

    def counted_step(self, micro_batches):
        if self.step == interrupt_after:
            raise Interrupted
        done["steps"] = self.step + 1
        return TRAIN_STEP(self, micro_batches)

    monkeypatch.setattr(Trainer, "train_step_async", counted_step)
    monkeypatch.setattr(RunHistory, "minutes", lambda self: minutes_per_step * done["steps"])


def clock_fitted_recipe(**overrides):
    return tiny_recipe(max_steps=40, cooldown=0.5, max_minutes=1.0, checkpoint_every=1, average_last=1,
                       **overrides)


def test_a_slow_machine_ends_its_cooldown_when_the_time_runs_out(tmp_path, monkeypatch):
    # 0.1 minutes a step: after 0.5 of the 1.0 minutes (step 5) the cooldown of 40 steps has not
    # begun (step 20), and the speed so far allows 10 steps: the cooldown is steps 6-10.
    fake_clock(monkeypatch, 0.1)
    run = train_translation(clock_fitted_recipe(), tmp_path / "r", device="cpu", progress=False)
    assert (run.steps, run.fitted_last_step, run.out_of_time) == (10, 10, True)
    expected = [rate(n, 32, warmup=10, factor=0.5) * cooldown_factor(n, 10, 5) for n in range(1, 11)]
    assert [record["lr"] for record in run.history] == pytest.approx(expected)


def test_a_fast_machine_keeps_the_planned_cooldown(tmp_path, monkeypatch):
    fake_clock(monkeypatch, 0.02)  # 40 steps in 0.8 minutes: the clock never limits it
    run = train_translation(clock_fitted_recipe(), tmp_path / "r", device="cpu", progress=False)
    assert (run.steps, run.fitted_last_step, run.out_of_time) == (40, None, False)
    assert run.history[-1]["lr"] == pytest.approx(rate(40, 32, warmup=10, factor=0.5) / 21)


def test_a_clock_fitted_run_resumes_exactly(tmp_path, monkeypatch):
    fake_clock(monkeypatch, 0.1)
    whole = train_translation(clock_fitted_recipe(), tmp_path / "whole", device="cpu", progress=False)
    fake_clock(monkeypatch, 0.1, interrupt_after=7)  # after the decision at step 5
    with pytest.raises(Interrupted):
        train_translation(clock_fitted_recipe(), tmp_path / "cut", device="cpu", progress=False)
    fake_clock(monkeypatch, 0.1)
    resumed = train_translation(clock_fitted_recipe(), tmp_path / "cut", device="cpu", progress=False)
    assert (resumed.steps, resumed.fitted_last_step) == (10, 10)
    assert [r["lr"] for r in resumed.history] == pytest.approx([r["lr"] for r in whole.history])
    assert_identical(resumed.model, whole.model)


# --- the Translator ------------------------------------------------------------------------------


def test_translate_keeps_order_and_handles_edge_cases(trained):
    translator = Translator.load(trained.run_dir, device="cpu")
    sources = [de for de, _ in builtin_corpus("test")[:12]]
    batch = translator.translate(sources)
    assert len(batch) == 12 and all(isinstance(t, str) for t in batch)
    assert translator.translate(sources[3]) == batch[3]  # a single string gives a single string
    assert translator.translate(["", sources[0]])[0] == ""  # an empty line stays empty
    assert translator.translate([]) == []


@pytest.mark.parametrize("beam_size", [1, 3])
def test_batched_translation_equals_one_sentence_at_a_time(trained, beam_size):
    translator = Translator.load(trained.run_dir, device="cpu", beam_size=beam_size)
    sources = translator.vocabs.source.encode_batch([de for de, _ in builtin_corpus("test")[:10]])
    batched = translator.translate_ids(sources, batch_tokens=200)
    for ids, out in zip(sources, batched, strict=True):
        src = torch.tensor([ids])
        with torch.no_grad():
            if beam_size == 1:
                single = greedy_decode(translator.model, src, use_cache=False)[0].tolist()
            else:
                single = beam_search(translator.model, src, beam_size=beam_size, use_cache=False)[0]
        assert [t for t in single if t > 2] == out


def test_load_reads_the_recipe_and_finds_the_vocabulary(trained):
    translator = Translator.load(trained.run_dir / "model.pt", device="cpu")
    assert (translator.beam_size, translator.alpha) == (trained.recipe.beam_size, trained.recipe.alpha)
    step = Translator.load(checkpoint_paths(trained.run_dir / "checkpoints")[-1], device="cpu")
    # the vocabulary found above checkpoints/:
    assert vocabularies_sha256(step.vocabs) == vocabularies_sha256(translator.vocabs)


def test_a_vocabulary_of_another_run_is_refused(trained, tmp_path):
    other = build_vocabularies(builtin_corpus("train")[:200], "bpe", 300)
    write_vocabularies(other, tmp_path / "other.json")
    with pytest.raises(VocabularyError, match="not the vocabulary"):
        Translator.load(trained.run_dir, tmp_path / "other.json", device="cpu")
    smaller = build_vocabularies(builtin_corpus("train")[:50], "bpe", 120)
    with pytest.raises(VocabularyError, match="expects vocabularies"):
        Translator(trained.model, smaller, device="cpu")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        Translator.load(tmp_path / "missing", device="cpu")


# --- BLEU and attention --------------------------------------------------------------------------


def test_bleu_is_sacrebleus_with_its_signature():
    hypotheses = ["The cat sat on the mat.", "A dog runs in the park."]
    references = ["The cat sat on a mat.", "A dog is running in the park."]
    score, signature = bleu(hypotheses, references)
    assert score.score == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert "case:mixed" in signature and "tok:13a" in signature and "nrefs:1" in signature
    lower, lower_signature = bleu([h.upper() for h in hypotheses], references, lowercase=True)
    assert lower.score == pytest.approx(score.score) and "case:lc" in lower_signature
    assert bleu(references, references)[0].score == pytest.approx(100.0)
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        bleu(hypotheses, references[:1])


def test_evaluate_bleu_reports_both_scores(trained):
    translator = Translator.load(trained.run_dir, device="cpu", beam_size=1)
    pairs = builtin_corpus("test")[:15]
    evaluation = evaluate_bleu(translator, pairs)
    assert evaluation.sentences == 15 and len(evaluation.hypotheses) == 15
    assert evaluation.references == [en for _, en in pairs]
    expected = sacrebleu.corpus_bleu(evaluation.hypotheses, [evaluation.references]).score
    assert evaluation.bleu == pytest.approx(expected)
    assert "case:lc" in evaluation.signature_lowercase
    assert set(evaluation.summary()) >= {"bleu", "bleu_lowercase", "signature", "sentences", "seconds"}


def test_attention_maps_shapes_masks_and_rows(trained):
    model = trained.model
    source, target = [5, 6, 7, 8, 9], [10, 11, 12]
    maps = attention_maps(model, source, target)
    layers, heads = model.config.n_layers, model.config.n_heads
    assert maps["encoder"].shape == (layers, heads, 5, 5)
    assert maps["decoder"].shape == (layers, heads, 4, 4)  # [BOS] + target
    assert maps["cross"].shape == (layers, heads, 4, 5)
    for weights in maps.values():
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    upper = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    assert maps["decoder"][..., upper].abs().max() == 0
    # The model is left as it was: fused attention again, no weights kept.
    assert all(
        not layer.self_attn.store_weights and layer.self_attn.weights is None
        for layer in model.encoder.layers
    )


def test_recipe_json_round_trips(trained):
    saved = json.loads((trained.run_dir / "recipe.json").read_text())
    assert saved == trained.recipe.to_dict() and Recipe.from_dict(saved) == trained.recipe


# --- values refused where they enter -------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"n_layers": -2}, "n_layers must be a positive integer, got -2"),
        ({"d_model": 0}, "d_model must be a positive integer, got 0"),
        ({"max_steps": 0}, "max_steps must be a positive integer, got 0"),
        ({"warmup": 0}, "warmup must be a positive integer, got 0"),
        ({"accumulate": 0}, "accumulate must be a positive integer, got 0"),
        ({"dropout": 1.5}, r"dropout must lie in \[0, 1\), got 1.5"),
        ({"label_smoothing": -0.1}, r"label_smoothing must lie in \[0, 1\), got -0.1"),
        ({"lr_factor": float("inf")}, "lr_factor must be a positive finite number, got inf"),
        ({"lr_factor": float("nan")}, "lr_factor must be a positive finite number, got nan"),
        ({"lr_factor": 0.0}, "lr_factor must be a positive finite number, got 0.0"),
        ({"cooldown": -0.1}, r"cooldown must lie in \[0, 1\] \(a share of the steps\), got -0.1"),
        ({"cooldown": 1.5}, r"cooldown must lie in \[0, 1\] \(a share of the steps\), got 1.5"),
        ({"cooldown": float("nan")}, r"cooldown must lie in \[0, 1\] \(a share of the steps\), got nan"),
        ({"clip_grad_norm": -1.0}, "clip_grad_norm must be a positive finite number"),
        ({"alpha": float("nan")}, "alpha must be >= 0 and finite, got nan"),
        ({"max_minutes": float("nan")}, "max_minutes must be positive"),
        ({"precision": "fp8"}, "precision must be 'auto', 'fp32', 'bf16' or 'fp16', got 'fp8'"),
        ({"vocab_size": 4}, "vocab_size must exceed the 4 special tokens, got 4"),
        ({"n_layers": 2.5}, "n_layers must be a whole number, got 2.5"),
        ({"dropout": "0.1"}, "dropout must be a number, got '0.1'"),
        ({"compile": "yes"}, "compile must be true or false, got 'yes'"),
        ({"corpus": "wmt14"}, "unknown corpus 'wmt14'"),
    ],
)
def test_recipes_refuse_what_training_would_refuse_later_naming_the_field(overrides, message):
    with pytest.raises(ValueError, match=message) as info:
        get_recipe("builtin", **overrides)
    if "corpus" not in overrides:  # a FieldError: the field apart, for the command line to name its option
        assert info.value.field == next(iter(overrides))


def test_gradient_clipping_is_a_recipe_field_passed_to_training(tmp_path):
    recipe = tiny_recipe(clip_grad_norm=0.5, max_steps=2)
    assert recipe.train_config().clip_grad_norm == 0.5
    assert "clip_grad_norm" not in RESUMABLE_FIELDS  # it changes the optimization
    run = train_translation(recipe, tmp_path / "r", device="cpu", progress=False)
    checkpoint = read_checkpoint(checkpoint_paths(run.run_dir / "checkpoints")[-1])
    assert checkpoint["state"]["config"]["clip_grad_norm"] == 0.5
    with pytest.raises(ValueError, match=r"clip_grad_norm: 0\.5 -> 1\.0"):
        train_translation(tiny_recipe(clip_grad_norm=1.0, max_steps=2), run.run_dir, device="cpu",
                          progress=False)


@pytest.mark.parametrize("beam_size", [0, -1, 2.5])
def test_a_beam_size_that_is_not_a_beam_is_refused_not_decoded_greedily(trained, beam_size):
    translator = Translator.load(trained.run_dir, device="cpu")
    with pytest.raises(ValueError, match="beam_size must be"):
        translator.translate(["Der Hund schläft."], beam_size=beam_size)
    with pytest.raises(ValueError, match="beam_size must be"):
        Translator(trained.model, trained.vocabs, device="cpu", beam_size=beam_size)


def missing_gpu() -> str:
    """A CUDA device this machine does not have."""
    return f"cuda:{torch.cuda.device_count()}" if torch.cuda.is_available() else "cuda"


def test_a_device_the_machine_lacks_is_refused_before_anything_is_written(trained, tmp_path):
    with pytest.raises(ValueError, match=r"device='cuda.*'cpu'"):
        train_translation(tiny_recipe(), tmp_path / "gpu", device=missing_gpu(), progress=False)
    assert not (tmp_path / "gpu").exists()
    with pytest.raises(ValueError, match="device='cuda"):
        Translator.load(trained.run_dir, device=missing_gpu())
    assert check_device("cpu") == torch.device("cpu")


# --- what the model cannot read ------------------------------------------------------------------


def test_sentences_in_another_script_are_reported_with_their_share_of_unknown_tokens(trained):
    translator = Translator.load(trained.run_dir, device="cpu", beam_size=1)
    sentences = ["Der Hund schläft.", "Привет, как дела?", "我爱你"]
    with pytest.warns(InputWarning, match=r"2 of 3 sentence\(s\) are mostly <unk>.*sentence 2: 9\d% of"):
        infos = translator.translate_with_info(sentences)
    assert [info.unreadable for info in infos] == [False, True, True]
    assert infos[2].unknown_tokens == infos[2].source_tokens > 0 and infos[0].unknown_tokens == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert translator.translate(sentences[0]) == infos[0].text  # a readable sentence: no warning


def test_a_sentence_longer_than_any_in_training_is_reported_and_one_too_long_refused(trained):
    translator = Translator.load(trained.run_dir, device="cpu", beam_size=1)
    longest = translator.max_source_tokens
    assert longest == max(len(ids) for ids in translator.vocabs.source.encode_batch(
        [de for de, _ in builtin_corpus("train")]))
    long = " ".join(de for de, _ in builtin_corpus("val")[:4])
    expected = rf"longer than the longest the model was trained on, {longest} tokens"
    with pytest.warns(InputWarning, match=expected):
        (info,) = translator.translate_with_info([long])
    assert info.too_long and info.source_tokens > longest
    huge = " ".join(["Hund"] * (translator.model.config.max_len + 1))
    with pytest.raises(ValueError, match=r"sentence 2 has 5,00\d tokens, more than the model can read"):
        translator.translate(["Hund.", huge])


# --- what the translator is given -----------------------------------------------------------------


@pytest.mark.parametrize("method", ["translate", "translate_with_info"])
@pytest.mark.parametrize(
    ("sentences", "message"),
    [
        (None, "sentences must be a string or a list of strings, got None$"),
        (42, "sentences must be a string or a list of strings, got 42$"),
        (b"Ein Hund.", r"got b'Ein Hund.'$"),
        (["Ein Hund.", None], "sentences must be a string or a list of strings; item 2 of 2 is None$"),
        (("Ein Hund.", 7), "item 2 of 2 is 7$"),
    ],
)
def test_translate_says_what_it_expected_and_what_it_got(trained, method, sentences, message):
    translator = Translator(trained.model, trained.vocabs, device="cpu", beam_size=1)
    with pytest.raises(TypeError, match=message) as info:
        getattr(translator, method)(sentences)
    one_line(info)


def test_translate_takes_any_sequence_of_strings(trained):
    translator = Translator(trained.model, trained.vocabs, device="cpu", beam_size=1)
    sources = [de for de, _ in builtin_corpus("test")[:3]]
    assert translator.translate(tuple(sources)) == translator.translate(sources)
    assert translator.translate(s for s in sources) == translator.translate(sources)


@pytest.mark.parametrize(
    ("pairs", "error", "message"),
    [
        ([], ValueError, r"pairs must hold at least one \(source, reference\) pair, got an empty list$"),
        ([("Ein Hund.",)], TypeError,
         r"pairs must be a list of \(source, reference\) pairs of strings; item 1 of 1 is \('Ein Hund.',\)$"),
        ([("Ein Hund", "A dog"), ("Eine Katze", None)], TypeError, r"item 2 of 2 is \('Eine Katze', None\)$"),
        ("Ein Hund.", TypeError, "got 'Ein Hund.'$"),
        (None, TypeError, "got None$"),
    ],
)
def test_evaluate_bleu_needs_source_reference_pairs(trained, pairs, error, message):
    translator = Translator(trained.model, trained.vocabs, device="cpu", beam_size=1)
    with pytest.raises(error, match=message) as info:
        evaluate_bleu(translator, pairs)
    one_line(info)
    with pytest.raises(TypeError, match="translator must be a Translator"):
        evaluate_bleu(trained.run_dir, [("Ein Hund.", "A dog.")])


@pytest.mark.parametrize(
    ("hypotheses", "references", "error", "message"),
    [
        (["A dog."], ["A dog.", "A cat."], ValueError,
         "references must hold one sentence per hypothesis, got 1 hypotheses but 2 references$"),
        ([], [], ValueError, "hypotheses must hold at least one sentence, got an empty list$"),
        ("A dog.", "A dog.", TypeError, "hypotheses must be a list of strings, got 'A dog.'$"),
        (["A dog."], [None], TypeError, "references must be a list of strings; item 1 of 1 is None$"),
    ],
)
def test_bleu_needs_lists_of_strings_of_equal_length(hypotheses, references, error, message):
    with pytest.raises(error, match=message) as info:
        bleu(hypotheses, references)
    one_line(info)


def test_load_says_which_path_it_needed(trained, tmp_path):
    for bad in (None, 42):
        with pytest.raises(TypeError, match=rf"checkpoint must be the path of a run directory or a \.pt file "
                                            rf"\(a str or Path\), got {bad}$") as info:
            Translator.load(bad, device="cpu")
        one_line(info)
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at .*missing: give the path of a run dir"):
        Translator.load(tmp_path / "missing", device="cpu")
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    needed = r"unfinished holds no model\.pt yet: finish training .* one of its checkpoints, "
    with pytest.raises(FileNotFoundError, match=needed + r".*unfinished/checkpoints/step_\*\.pt$"):
        Translator.load(unfinished, device="cpu")
    with pytest.raises(TypeError, match=r"vocab must be the path of a vocab\.json"):
        Translator.load(trained.run_dir, vocab=3, device="cpu")
    with pytest.raises(FileNotFoundError, match=r"no vocabulary file at .*nothing\.json"):
        Translator.load(trained.run_dir, vocab=tmp_path / "nothing.json", device="cpu")


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (([], 5), ValueError, r"pairs must hold at least one \(source, reference\) pair"),
        (([("Ein Hund.",)], 5), TypeError, r"item 1 of 1 is \('Ein Hund.',\)$"),
        (([("Ein Hund.", "A dog.")], 0), ValueError, "every must be a whole number, at least 1, got 0$"),
        (([("Ein Hund.", "A dog.")], 2.5), ValueError, "every must be a whole number, at least 1, got 2.5$"),
        (([("Ein Hund.", "A dog.")], True), ValueError, "got True$"),
        (([("Ein Hund.", "A dog.")], 5, True, 0), ValueError, "batch_tokens must be a whole number"),
    ],
)
def test_a_validator_checks_its_pairs_and_its_settings(arguments, error, message):
    with pytest.raises(error, match=message) as info:
        Validator(*arguments)
    one_line(info)


class FixedTranslations:
    """A stand-in translator that gives fixed translations: BLEU is then known exactly."""

    def __init__(self, translations: dict[str, str]):
        self.translations = translations

    def translate(self, sentences, beam_size=None):
        return [self.translations[sentence] for sentence in sentences]


def test_evaluate_bleu_counts_case_in_the_cased_score_only():
    """Translations that differ from their references in case alone: the cased score is sacreBLEU's
    (below 100), the lowercased one 100, so the two cannot be swapped or mixed up unnoticed."""
    references = ["A man in a Red Shirt rides a Horse.", "Two Dogs play in the Snow near Berlin.",
                  "The Girl in the Park reads a Book.", "Three Men sit on a Bench at the Station."]
    hypotheses = [reference.lower() for reference in references]
    sources = [f"Satz {i}" for i in range(len(references))]
    translator = FixedTranslations(dict(zip(sources, hypotheses, strict=True)))
    evaluation = evaluate_bleu(translator, list(zip(sources, references, strict=True)))
    cased = sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert 0 < cased < 90  # case matters to the cased score
    assert evaluation.bleu == pytest.approx(cased)
    assert evaluation.bleu_lowercase == pytest.approx(100.0)
    assert evaluation.bleu < evaluation.bleu_lowercase
    assert "case:mixed" in evaluation.signature and "case:lc" in evaluation.signature_lowercase



def test_the_deviations_page_names_the_recipes_with_a_cooldown():
    """`book/deviations.md` says which recipes end with a cooldown (not in the paper) and which keep
    the paper's schedule: the recipes decide, so that a recipe changed or added cannot leave it stale."""
    page = (Path(__file__).resolve().parent.parent / "book" / "deviations.md").read_text(encoding="utf-8")
    schedule = next(item for item in page.split("\n- ") if item.startswith("**Schedule.**"))
    sentences = " ".join(schedule.split()).split(". ")

    def named(phrase: str) -> set[str]:
        sentence = next(sentence for sentence in sentences if phrase in sentence)
        return {name for name in RECIPES if f"`{name}`" in sentence}

    cooldowns = {name: recipe.train.cooldown for name, recipe in RECIPES.items()}
    assert named("end with a linear cooldown") == {name for name, share in cooldowns.items() if share > 0}
    assert named("keep the paper's schedule") == {name for name, share in cooldowns.items() if share == 0}
    assert all(f"cooldown={r.train.cooldown}" in schedule for r in RECIPES.values() if r.train.cooldown > 0)


def nll_with_dropout(model, batches) -> float:
    """The held-out cross-entropy as `evaluate` computes it, but in train mode: dropout on."""
    from annotated_transformer.batching import PAD
    from annotated_transformer.regularization import token_nll

    with torch.no_grad():
        nll = sum(token_nll(model(b.src, b.tgt_in, b.src_mask, b.tgt_mask), b.tgt_out, PAD).item()
                  for b in batches)
    return nll / sum(b.n_tokens for b in batches)


def test_the_validators_cross_entropy_is_evaluates_without_dropout(monkeypatch):
    """A model with dropout, in train mode (as the Trainer hands it to the Validator): `val_nll` is
    `evaluate`'s cross-entropy of the model in eval mode on the same batches, the same at every call,
    and the model is left in train mode, for the steps that follow."""
    import copy

    from annotated_transformer import translator
    from annotated_transformer.model import make_model
    from annotated_transformer.tokenization import encode_pairs, token_batches
    from annotated_transformer.training import evaluate

    vocabs = build_vocabularies(builtin_corpus("train")[:300], "word", min_freq=1)
    torch.manual_seed(0)
    model = make_model(dataclasses.replace(tiny_recipe().model_config(vocabs), dropout=0.3)).train()
    pairs = builtin_corpus("val")[:20]
    batches = list(token_batches(encode_pairs(pairs, vocabs), 200, shuffle=False)(0))  # the Validator's
    validator = Validator(pairs, every=1, batch_tokens=200)
    first = validator(model, vocabs)
    assert model.training  # left as it was, greedy BLEU included
    assert validator(model, vocabs) == first and model.training  # nll and BLEU: no dropout in either
    expected = evaluate(copy.deepcopy(model).eval(), batches)["nll"]
    assert first["val_nll"] == expected  # the same computation on the same batches: exactly

    # The test can fail: a Validator that scored the model as it receives it, in train mode, would
    # give the cross-entropy with dropout on, far from the one without, and another one at each call
    # (other dropout masks): made so below, by an `evaluate` without its `model.eval()`, it breaks
    # the assertions above. (So does a Validator that leaves the model in eval mode after its greedy
    # BLEU: without its `model.train(was_training)`, `assert model.training` fails.)
    with_dropout = nll_with_dropout(copy.deepcopy(model).train(), batches)
    assert abs(with_dropout - expected) > 1e-3
    monkeypatch.setattr(translator, "evaluate",
                        lambda model, batches: {"nll": nll_with_dropout(model, batches)})
    broken = Validator(pairs, every=1, with_bleu=False, batch_tokens=200)
    assert abs(broken(model, vocabs)["val_nll"] - expected) > 1e-3
    assert broken(model, vocabs)["val_nll"] != broken(model, vocabs)["val_nll"]
