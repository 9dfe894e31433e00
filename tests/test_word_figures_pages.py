"""The Markdown pages' figures in words are held to the chapters' definition of one.

A chapter's figures in words are found by tests/test_figures.py (WORD_FIGURE: "about twice as long",
"a sixth of the peak", "one and a half times"); a page's are found, and each checked against its
result file, its recipe or a reason, by tests/test_results.py (its own WORD_FIGURE, inside
`figure_spans`). This test checks that no figure in words the chapters' pattern finds on a page
escapes the pages' check: each overlaps a figure that test_results.py accounts for. The README's
"up to six times the CPU run's tokens", for one, is the ratio of the two recipes' `max_tokens`
there, computed from `get_recipe`, not typed.
"""

import pytest
from test_figures import WORD_FIGURE
from test_results import PAGES, figure_spans, prose, text


def escaped(page_text: str) -> list[tuple[str, str]]:
    """The figures in words of a page that the pages' check does not find: (figure, its context)."""
    checked = [(start, end) for start, end, _ in figure_spans(page_text)]
    masked = prose(page_text)
    return [(found.group(0), masked[max(0, found.start() - 40):found.end() + 20].replace("\n", " "))
            for found in WORD_FIGURE.finditer(masked)
            if not any(start < found.end() and found.start() < end for start, end in checked)]


@pytest.mark.parametrize("page", PAGES)
def test_every_figure_in_words_on_a_page_is_checked(page):
    missed = escaped(text(page))
    assert not missed, (
        f"{page} writes {missed} in words, which tests/test_results.py does not find as figures: "
        f"widen its WORD_FIGURE so that the page's figure is listed in FIGURES or NOT_MEASURED")


def test_a_figure_the_pages_pattern_misses_is_caught():
    page = "On the GPU it uses about a sixth of the peak, on a corpus 150 times smaller, half-way through."
    assert [figure for figure, _ in escaped(page)] == ["about a sixth", "150 times"]
    assert escaped("The GPU run's batches hold up to six times the CPU run's tokens.") == []
