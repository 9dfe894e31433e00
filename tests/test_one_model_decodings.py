"""experiments/one_model_decodings.py: two decodings of one model judged over its sentences, the
tiny mode end to end, and the committed file's scores and verdicts recomputed from its sentences."""

import json

import one_model_decodings as decodings  # experiments/ is on pytest's pythonpath (pyproject.toml)
import pytest

from annotated_transformer.helpers.book_figures import result
from annotated_transformer.helpers.verdicts import DECODINGS, judge_decodings
from annotated_transformer.translator import bleu


@pytest.fixture(scope="module")
def committed() -> dict:
    return result("multi30k_decodings.json")


def test_the_committed_scores_are_the_kept_sentences_bleu(committed):
    references = committed["references"]
    assert len(references) == 1014 and committed["split"] == "multi30k val"
    for name, decoding in committed["decodings"].items():
        assert len(decoding["hypotheses"]) == len(references), name
        assert round(bleu(decoding["hypotheses"], references)[0].score, 2) == decoding["bleu"], name
        assert (decoding["beam"], decoding["alpha"]) == decodings.DECODINGS[name]


def test_the_committed_verdicts_are_the_rules(committed):
    """Each verdict is judge_decodings' on the kept sentences (sacreBLEU's seed is fixed: the same p)."""
    for row in committed["verdicts"]:
        ours, theirs = (committed["decodings"][name]["hypotheses"] for name in (row["ours"], row["theirs"]))
        verdict = judge_decodings(ours, theirs, committed["references"], trials=row["trials"])
        assert (row["verdict"], row["margin"], row["p"], row["rule"]) == (
            verdict.word, round(verdict.margin, 2), round(verdict.p, 4), DECODINGS)


def test_the_tiny_mode_decodes_judges_and_keeps_every_sentence(tmp_path):
    out = tmp_path / "decodings.json"
    summary = decodings.main(["--tiny", "--out", str(out)])
    assert json.loads(out.read_text(encoding="utf-8")) == summary
    assert len(summary["references"]) == decodings.TINY_SENTENCES
    assert set(summary["decodings"]) == set(decodings.DECODINGS)
    assert [(row["ours"], row["theirs"]) for row in summary["verdicts"]] == decodings.COMPARISONS
    assert summary["commit"] == decodings.commit_of_checkout() and "--tiny" in summary["command"]
    greedy = summary["decodings"]["greedy"]
    assert greedy["beam"] == 1 and len(greedy["hypotheses"]) == decodings.TINY_SENTENCES
