"""Every verdict a chapter states on our results is the rule's, pasted from code.

Chapter 18 judges §6.2's claims on Table 3's rows, chapter 19 its own on post-LN against pre-LN
(`annotated_transformer.layer_norm.check_layer_norm`), and the other chapters and the appendix compare
runs of their own (decoding settings, checkpoint averaging, recipes). Each verdict on our results that
a chapter's prose states ("holds", "fails", "tie", "better", "worse" ...) is pasted with {glue:text}
from a glue cell, where `annotated_transformer.variations.check_claims`, `check_layer_norm` or
`annotated_transformer.helpers.verdicts.judge` reaches it from the shipped result files;
tests/test_figures.py checks that the glued values are today's. A verdict word the prose types itself
is either listed, by a phrase around it, in the notebook's metadata `typed_verdicts` with the reason it
is not a verdict on our results (the paper's conclusion, quoted before it is judged; the rule's own
words; a word used in another sense, such as beam search's best hypothesis), or this test fails.
"""

import re
from pathlib import Path

import nbformat
import pytest
from test_figures import NOT_PROSE, markdown

ROOT = Path(__file__).resolve().parent.parent
ANALYSIS_CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))
VERDICT_WORD = re.compile(
    r"\b(?:better|worse|best|worst|ties?|tied|holds?|held|fails?|failed|helped|helps?|hurts?|"
    r"about the same|opposite|reversed?|agrees?|disagrees?|within the noise|beyond the noise)\b", re.I)


def blank(found: re.Match) -> str:
    """What NOT_PROSE matched, as spaces: the text keeps its length, so that places still match."""
    return re.sub(r"\S", " ", found.group(0))


def unexplained_verdicts(text: str, typed: dict[str, str]) -> list[str]:
    """The verdict words of `text`'s prose that no phrase of `typed` covers, each with its context."""
    prose = NOT_PROSE.sub(blank, text)
    flat = re.sub(r"\s+", " ", prose)
    covered = [(m.start(), m.end()) for phrase in typed for m in re.finditer(re.escape(phrase), flat)]
    # Positions in `flat`: the phrases are matched with single spaces, as a reader's text wraps freely.
    return [f"{found.group(0)!r} in …{flat[max(0, found.start() - 50):found.end() + 30]}…"
            for found in VERDICT_WORD.finditer(flat)
            if not any(start <= found.start() and found.end() <= end for start, end in covered)]


def test_typed_verdicts_are_found_and_glued_ones_are_not():
    text = ("Dropout helps: {glue:text}`claim_dropout`. Without it the model did better, a tie\n"
            "by the rule; the paper says bigger models are better. `better` in code.")
    found = unexplained_verdicts(text, {"the paper says bigger models are better": "the paper's words"})
    assert [item.split(" in ")[0] for item in found] == ["'helps'", "'better'", "'tie'"]


@pytest.mark.parametrize("path", ANALYSIS_CHAPTERS, ids=lambda path: path.stem)
def test_every_verdict_the_prose_states_is_glued(path):
    notebook = nbformat.read(path, as_version=4)
    typed = notebook.metadata.get("typed_verdicts", {})
    unexplained = unexplained_verdicts(markdown(notebook), typed)
    assert not unexplained, (
        f"{path.name} types verdicts of its own: {unexplained}. Paste each from a glue cell that reaches "
        f"it with the rule (check_claims, judge) from the shipped results, or list a phrase around it in "
        f"the notebook's metadata 'typed_verdicts' with the reason it is no verdict on our results")
    flat = re.sub(r"\s+", " ", NOT_PROSE.sub(blank, markdown(notebook)))
    unused = [phrase for phrase in typed if phrase not in flat]
    assert not unused, f"{path.name}'s metadata 'typed_verdicts' lists {unused}, not in its prose"
