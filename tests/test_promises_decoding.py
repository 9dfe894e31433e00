"""Promises of decoding at values where a bug shows (issue 50): a `Translator`'s beam size and length
penalty α reach beam search, whether they come from the constructor, a call or a run's recipe.

The model is a tiny random one whose end-of-sentence logit carries a bias (`eos_biased_model`), so
that hypotheses end at many lengths and the length penalty decides between them: with the defaults
(beam 4, α = 0.6), with greedy decoding, with beams of 3 or 4 or with another α, its translations of
the test sentences differ from those of beam 2 and α = 2.0 (checked in each test, so that a change
of the model that makes them agree fails loudly instead of letting the test pass vacuously)."""

import pytest
import torch

from annotated_transformer.batching import EOS
from annotated_transformer.checkpoints import save_checkpoint
from annotated_transformer.companions.vocabulary_files import write_vocabularies
from annotated_transformer.data import builtin_corpus
from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.model import Transformer, TransformerConfig, make_model
from annotated_transformer.tokenization import Vocabularies
from annotated_transformer.translator import Translator

BEAM, ALPHA = 2, 2.0  # neither the paper's (4, 0.6) nor greedy: a dropped setting shows
EOS_BIAS = 3.0  # how much likelier EOS is made: with 0 no hypothesis ends, with 5 all end at once
WRONG = [(1, 0.6), (2, 0.6), (2, 1.0), (3, ALPHA), (4, ALPHA)]  # what a lost setting would decode with


def eos_biased_model(vocabs: Vocabularies, seed: int = 0) -> Transformer:
    """A random one-layer model (d_model 32) whose EOS logit has a bias of `EOS_BIAS`: the decoder's
    output dimension 0 is made a constant 1 (its last LayerNorm: γ_0 = 0, β_0 = 1), and only EOS's
    row of the tied output matrix reads it. A plain Transformer still, so that it saves and loads."""
    torch.manual_seed(seed)
    config = TransformerConfig(
        src_vocab_size=len(vocabs.source), tgt_vocab_size=len(vocabs.target), n_layers=1, d_model=32,
        d_ff=64, n_heads=2, dropout=0.0, max_len=64, share_embeddings=vocabs.shared,
    )
    model = make_model(config).eval()
    with torch.no_grad():
        norm = model.decoder.layers[-1].sublayers[2].norm
        norm.weight[0], norm.bias[0] = 0.0, 1.0
        weight = model.generator.proj.weight
        weight[:, 0] = 0.0
        weight[EOS, 0] = EOS_BIAS
    return model


def sources(vocabs: Vocabularies) -> list[list[int]]:
    return vocabs.source.encode_batch([de for de, _ in builtin_corpus("test")[:8]])


def decoded(model: Transformer, ids: list[list[int]], beam_size: int, alpha: float) -> list[list[int]]:
    """Each sentence decoded alone by `beam_search` (or greedily, beam 1), without BOS, EOS and padding."""
    outputs = []
    for row in ids:
        src = torch.tensor([row])
        if beam_size == 1:
            out = greedy_decode(model, src)[0].tolist()
        else:
            out = beam_search(model, src, beam_size=beam_size, alpha=alpha)[0]
        outputs.append([t for t in out if t > EOS])
    return outputs


@pytest.fixture(scope="module")
def setting(word_vocabs):
    """The model, the source ids, and their translations with beam 2 and α = 2.0, which each of the
    `WRONG` settings would change."""
    model, ids = eos_biased_model(word_vocabs), sources(word_vocabs)
    expected = decoded(model, ids, BEAM, ALPHA)
    for beam_size, alpha in WRONG:
        assert decoded(model, ids, beam_size, alpha) != expected, (beam_size, alpha)
    return model, ids, expected


def test_a_translators_beam_of_two_and_its_alpha_reach_beam_search(word_vocabs, setting):
    """Translator(beam_size=2, alpha=2.0) decodes as beam_search(beam_size=2, alpha=2.0) does: not as
    the default beam 4 or α = 0.6, nor greedily (a beam of 2 is a beam)."""
    model, ids, expected = setting
    translator = Translator(model, word_vocabs, "cpu", beam_size=BEAM, alpha=ALPHA)
    assert translator.translate_ids(ids) == expected


def test_a_beam_size_given_to_a_call_keeps_the_translators_alpha(word_vocabs, setting):
    """translate_ids(beam_size=2) of a translator made with beam 4 and α = 2.0: the call's beam, the
    translator's α (not the default 0.6)."""
    model, ids, expected = setting
    translator = Translator(model, word_vocabs, "cpu", beam_size=4, alpha=ALPHA)
    assert translator.translate_ids(ids, beam_size=BEAM) == expected


def test_a_loaded_translator_decodes_with_its_runs_beam_and_alpha(word_vocabs, setting, tmp_path):
    """Translator.load takes beam 2 and α = 2.0 from the recipe a checkpoint recorded."""
    model, ids, expected = setting
    recipe = {"beam_size": BEAM, "alpha": ALPHA}
    path = save_checkpoint(tmp_path / "model.pt", model, extra={"recipe": recipe})
    write_vocabularies(word_vocabs, tmp_path / "vocab.json")
    translator = Translator.load(path, device="cpu")
    assert (translator.beam_size, translator.alpha) == (BEAM, ALPHA)
    assert translator.translate_ids(ids) == expected
