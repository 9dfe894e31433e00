"""Promises of chapter 14's `translator` at values where a bug shows: the paper's decoding defaults
(beam 4, α = 0.6), the device a translator is given (not the machine's best one), the batches of
about `batch_tokens` source tokens (8000 by default), what `evaluate_bleu` measures and keeps, and
what a `Validator` scores (greedy BLEU, on the model's own device, silencing only the warning about
unreadable sentences).

The model is a tiny random one whose end-of-sentence logit carries a bias (`eos_biased_model`), so
that hypotheses end at many lengths and the beam and α decide between them; each test checks that
the settings it tells apart do decode differently, so that it cannot pass vacuously. Every test
calls the function whose promise it holds."""

import types
import warnings

import pytest
import torch
from test_promises_decoding import eos_biased_model

import annotated_transformer.translator as translator_module
from annotated_transformer.batching import EOS
from annotated_transformer.checkpoints import save_checkpoint
from annotated_transformer.companions import hardware
from annotated_transformer.companions.vocabulary_files import write_vocabularies
from annotated_transformer.data import builtin_corpus
from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.model import Transformer
from annotated_transformer.tokenization import Vocabularies
from annotated_transformer.translator import (
    Evaluation,
    InputWarning,
    Translator,
    Validator,
    bleu,
    evaluate_bleu,
)

GERMAN = [de for de, _ in builtin_corpus("test")[:8]]
NINE_TOKENS = "Die kleine Katze hat ein schnelles Buch gekannt."  # 9 word tokens
RUSSIAN = "Съешь же ещё этих мягких французских булок"  # all <unk> for a German vocabulary


def decoded(model: Transformer, ids: list[list[int]], beam_size: int, alpha: float) -> list[list[int]]:
    """Each sentence decoded alone by `beam_search` (or greedily, beam 1), without BOS, EOS and padding."""
    outputs = []
    for row in ids:
        src = torch.tensor([row])
        out = greedy_decode(model, src)[0].tolist() if beam_size == 1 else beam_search(
            model, src, beam_size=beam_size, alpha=alpha)[0]
        outputs.append([t for t in out if t > EOS])
    return outputs


def texts(vocabs: Vocabularies, rows: list[list[int]]) -> list[str]:
    return [vocabs.target.decode(row) for row in rows]


@pytest.fixture(scope="module")
def ids(word_vocabs):
    return word_vocabs.source.encode_batch(GERMAN)


@pytest.fixture
def machine_best_is_elsewhere(monkeypatch):
    """A machine whose best device (`default_device`, what `device=None` means) is not the CPU, as on a
    GPU machine: a translator given device='cpu' must still work on the CPU. The meta device stands
    in for the GPU this machine may lack: a model or batch that went there holds no numbers."""
    monkeypatch.setattr(hardware, "default_device", lambda: torch.device("meta"))


def on_cpu(model: Transformer) -> bool:
    return all(p.device.type == "cpu" for p in model.parameters())


# --- the paper's defaults and the device ------------------------------------------------------------


def test_a_translators_defaults_are_the_papers_beam_4_and_alpha_0_6(word_vocabs, ids):
    """Translator(model, vocabs) decodes with §6.1's beam of 4 and α = 0.6, which here differ from a
    beam of 5 and from α = 1.6 (with this seed and bias)."""
    model = eos_biased_model(word_vocabs, seed=1, bias=2.5)
    expected = decoded(model, ids, 4, 0.6)
    assert decoded(model, ids, 5, 0.6) != expected and decoded(model, ids, 4, 1.6) != expected
    translator = Translator(model, word_vocabs)
    assert (translator.beam_size, translator.alpha) == (4, 0.6)
    assert translator.translate_ids(ids) == expected


def test_a_translator_works_on_the_device_it_is_given_not_the_machines_best(
    word_vocabs, ids, machine_best_is_elsewhere
):
    """device='cpu' on a machine whose best device is another: the translator, its model and its
    decoding stay on the CPU."""
    model = eos_biased_model(word_vocabs)
    expected = decoded(model, ids, 2, 0.6)
    translator = Translator(model, word_vocabs, "cpu", beam_size=2)
    assert translator.device == torch.device("cpu")
    assert on_cpu(translator.model)
    assert translator.translate_ids(ids) == expected


def test_a_translator_moves_its_model_to_its_device_for_evaluation(word_vocabs, monkeypatch):
    """The model goes to the translator's device (a GPU-trained model given device='cpu' comes to the
    CPU) in evaluation mode: seen in what `model.to` is asked, as this machine may have no GPU."""
    model = eos_biased_model(word_vocabs).train()
    asked = []

    def to(*args, **kwargs):
        asked.append((args, kwargs))
        return type(model).to(model, *args, **kwargs)

    monkeypatch.setattr(model, "to", to)
    translator = Translator(model, word_vocabs, "cpu")
    assert asked == [((torch.device("cpu"),), {})]
    assert translator.model is model and not model.training


def test_translate_ids_makes_its_batches_on_the_translators_device(word_vocabs, ids, monkeypatch):
    """The source batches are made on the translator's device, where its model is (not on torch's
    default device): seen in what `make_batch` is asked, as this machine may have no GPU."""
    model = eos_biased_model(word_vocabs)
    devices = []
    real_make_batch = translator_module.make_batch

    def make_batch(pairs, **kwargs):
        devices.append(kwargs.get("device"))
        return real_make_batch(pairs, **kwargs)

    monkeypatch.setattr(translator_module, "make_batch", make_batch)
    translator = Translator(model, word_vocabs, "cpu", beam_size=1)
    assert translator.translate_ids(ids) == decoded(model, ids, 1, 0.6)
    assert devices and set(devices) == {torch.device("cpu")}


def test_a_loaded_translator_works_on_the_device_it_is_given(
    word_vocabs, tmp_path, machine_best_is_elsewhere
):
    """Translator.load(path, device='cpu') on a machine whose best device is another: on the CPU."""
    model = eos_biased_model(word_vocabs)
    path = save_checkpoint(tmp_path / "model.pt", model, extra={"recipe": {"beam_size": 2, "alpha": 0.6}})
    write_vocabularies(word_vocabs, tmp_path / "vocab.json")
    translator = Translator.load(path, device="cpu")
    assert translator.device == torch.device("cpu")
    assert on_cpu(translator.model)
    ids = word_vocabs.source.encode_batch(GERMAN[:2])
    assert translator.translate_ids(ids) == decoded(model, ids, 2, 0.6)


# --- batches of about batch_tokens source tokens ------------------------------------------------------


@pytest.fixture
def decoded_batches(monkeypatch):
    """The sizes of the batches greedy decoding is given (it answers EOS at once: only sizes matter)."""
    sizes = []

    def greedy(model, src, src_mask):
        sizes.append(src.size(0))
        return torch.full((src.size(0), 1), EOS)

    monkeypatch.setattr(translator_module, "greedy_decode", greedy)
    return sizes


# 889 sentences of 9 tokens: 888 of them fill 7992 of the default 8000 tokens; 889 would be 8001.
MANY = 889


def test_translate_ids_batches_at_most_8000_source_tokens_by_default(word_vocabs, decoded_batches):
    """By default a batch holds at most 8000 padded source tokens (times the beam, 1 here), and as many
    sentences as fit: 888 of 9 tokens, then the last one alone."""
    translator = Translator(eos_biased_model(word_vocabs), word_vocabs, "cpu", beam_size=1)
    assert translator.translate_ids([[5] * 9] * MANY) == [[]] * MANY
    assert decoded_batches == [888, 1]


def test_translate_batches_at_most_8000_source_tokens_by_default(word_vocabs, decoded_batches):
    """translate's default batch is translate_ids's: at most 8000 padded source tokens."""
    assert len(word_vocabs.source.encode(NINE_TOKENS)) == 9
    translator = Translator(eos_biased_model(word_vocabs), word_vocabs, "cpu", beam_size=1)
    assert translator.translate([NINE_TOKENS] * MANY) == [""] * MANY
    assert decoded_batches == [888, 1]


def test_translate_with_info_batches_at_most_8000_source_tokens_by_default(word_vocabs, decoded_batches):
    """translate_with_info's default batch is translate_ids's: at most 8000 padded source tokens."""
    translator = Translator(eos_biased_model(word_vocabs), word_vocabs, "cpu", beam_size=1)
    infos = translator.translate_with_info([NINE_TOKENS] * MANY)
    assert [(info.text, info.source_tokens) for info in infos] == [("", 9)] * MANY
    assert decoded_batches == [888, 1]


def test_a_batch_tokens_that_is_not_a_count_is_refused_by_name(word_vocabs, ids):
    """translate_ids(batch_tokens=0) is refused with a message that names batch_tokens."""
    translator = Translator(eos_biased_model(word_vocabs), word_vocabs, "cpu")
    with pytest.raises(ValueError, match=r"^batch_tokens must be a whole number, at least 1, got 0$"):
        translator.translate_ids(ids, batch_tokens=0)


def test_translate_with_info_decodes_with_the_beam_of_the_call(word_vocabs, ids):
    """translate_with_info(beam_size=1) decodes greedily, not with the translator's beam of 4."""
    model = eos_biased_model(word_vocabs)
    greedy = texts(word_vocabs, decoded(model, ids, 1, 0.6))
    assert greedy != texts(word_vocabs, decoded(model, ids, 4, 0.6))
    translator = Translator(model, word_vocabs, "cpu", beam_size=4)
    assert [info.text for info in translator.translate_with_info(GERMAN, beam_size=1)] == greedy


# --- evaluate_bleu and its Evaluation -----------------------------------------------------------------


class RecordingTranslator:
    """A stand-in translator that answers each sentence with a fixed text, records the beam sizes it is
    asked for, and lets `seconds` pass on the `clock` while it translates."""

    def __init__(self, answers: dict[str, str], clock: list[float] | None = None, seconds: float = 0.0):
        self.answers, self.clock, self.seconds, self.beams = answers, clock, seconds, []

    def translate(self, sentences, beam_size=None):
        self.beams.append(beam_size)
        if self.clock is not None:
            self.clock[0] += self.seconds
        return [self.answers[sentence] for sentence in sentences]


PAIRS = [("Ein Hund läuft.", "A dog runs in the park."),
         ("Zwei Katzen schlafen.", "Two cats sleep on a mat.")]
ANSWERS = {"Ein Hund läuft.": "A dog runs in a park.", "Zwei Katzen schlafen.": "Two cats sleep on a mat."}


@pytest.mark.parametrize("beam_size", [1, 3])
def test_evaluate_bleu_translates_with_the_beam_it_is_given(beam_size):
    """evaluate_bleu(beam_size=b) asks the translator for beam b; without one, for its own (None)."""
    translator = RecordingTranslator(ANSWERS)
    evaluate_bleu(translator, PAIRS, beam_size=beam_size)
    evaluate_bleu(translator, PAIRS)
    assert translator.beams == [beam_size, None]


def test_evaluate_bleu_times_the_translation(monkeypatch):
    """Evaluation.seconds is the time the translations took, on the clock it reads (2.5 s here, with
    the clock at 1000 s when they start)."""
    clock = [1000.0]
    monkeypatch.setattr(translator_module, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    evaluation = evaluate_bleu(RecordingTranslator(ANSWERS, clock, seconds=2.5), PAIRS)
    assert evaluation.seconds == pytest.approx(2.5)
    assert evaluation.summary()["seconds"] == pytest.approx(2.5)


def test_an_evaluation_keeps_its_sources_references_and_hypotheses():
    """The Evaluation holds the sentences it was computed from, in order, and their count."""
    evaluation = evaluate_bleu(RecordingTranslator(ANSWERS), PAIRS)
    assert evaluation.sources == [source for source, _ in PAIRS]
    assert evaluation.references == [reference for _, reference in PAIRS]
    assert evaluation.hypotheses == [ANSWERS[source] for source, _ in PAIRS]
    assert evaluation.sentences == 2


def test_an_evaluations_summary_holds_its_scores_without_the_texts():
    """summary() is every field but the three lists of sentences (hypotheses, references, sources)."""
    evaluation = Evaluation(31.5, 33.0, "case:mixed", "case:lc", 2, 1.25, ["a"], ["b"], ["c"])
    assert evaluation.summary() == {
        "bleu": 31.5, "bleu_lowercase": 33.0, "signature": "case:mixed", "signature_lowercase": "case:lc",
        "sentences": 2, "seconds": 1.25,
    }


# --- the Validator ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def greedy_pairs(word_vocabs, ids):
    """(German, the model's own greedy translation) pairs: greedy decoding scores BLEU 100 on them,
    beams of 2 and 4 less (checked)."""
    model = eos_biased_model(word_vocabs)
    greedy = texts(word_vocabs, decoded(model, ids, 1, 0.6))
    assert bleu(greedy, greedy)[0].score == pytest.approx(100.0)
    for beam_size in (2, 4):
        assert bleu(texts(word_vocabs, decoded(model, ids, beam_size, 0.6)), greedy)[0].score < 99.0
    return list(zip(GERMAN, greedy, strict=True))


def test_a_validator_scores_the_bleu_of_greedy_decoding_by_default(word_vocabs, greedy_pairs):
    """Validator(pairs, every) scores val_nll and, by default, val_bleu_greedy: BLEU of greedy
    decoding (100 on the model's own greedy translations, not a beam's lower score)."""
    scores = Validator(greedy_pairs, 5)(eos_biased_model(word_vocabs), word_vocabs)
    assert set(scores) == {"val_nll", "val_bleu_greedy"}
    assert isinstance(scores["val_bleu_greedy"], float)
    assert scores["val_bleu_greedy"] == pytest.approx(100.0)


def test_a_validator_decodes_on_the_models_device(word_vocabs, greedy_pairs, machine_best_is_elsewhere):
    """On a machine whose best device is another, a CPU model is scored on the CPU, and stays there."""
    model = eos_biased_model(word_vocabs)
    scores = Validator(greedy_pairs, 5)(model, word_vocabs)
    assert on_cpu(model)
    assert scores["val_bleu_greedy"] == pytest.approx(100.0)


def test_a_validator_silences_only_the_warning_about_unreadable_sentences(word_vocabs, monkeypatch):
    """A held-out sentence the model cannot read (all <unk>) is the data's business, said elsewhere: no
    InputWarning while validating; any other warning (one that decoding gives, here) still reaches the
    caller."""
    model = eos_biased_model(word_vocabs)
    pairs = [(RUSSIAN, "Eat some more of these soft French rolls."), (GERMAN[4], "A horse watched a table.")]
    with pytest.warns(InputWarning):
        Translator(model, word_vocabs, "cpu", beam_size=1).translate([source for source, _ in pairs])
    real_greedy = translator_module.greedy_decode

    def greedy(*args, **kwargs):
        warnings.warn("a warning of decoding", RuntimeWarning, stacklevel=2)
        return real_greedy(*args, **kwargs)

    monkeypatch.setattr(translator_module, "greedy_decode", greedy)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scores = Validator(pairs, 5)(model, word_vocabs)
    assert [(w.category, str(w.message)) for w in caught] == [(RuntimeWarning, "a warning of decoding")]
    assert "val_bleu_greedy" in scores


def test_a_validators_pairs_are_described_as_source_reference_pairs():
    """Pairs that are not pairs of strings are refused as 'a list of (source, reference) pairs'."""
    with pytest.raises(TypeError, match=r"a list of \(source, reference\) pairs of strings"):
        Validator([("Ein Hund.", 5)], 5)


def test_a_validators_batches_hold_4000_tokens_by_default():
    """Validator's batches for the cross-entropy hold about 4000 tokens unless told otherwise."""
    assert Validator(PAIRS, 5).batch_tokens == 4000
    assert Validator(PAIRS, 5, batch_tokens=123).batch_tokens == 123
