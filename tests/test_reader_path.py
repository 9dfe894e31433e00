"""The reader's path: the chapters' prose speaks of the Transformer and of running it, and the
engineering chapters say that the paper's path does not need them.

- **Build talk.** The Markdown cells of the chapters (book/*.ipynb, the appendix's notebook too)
  mention tests, continuous integration, nbval, nbdev, `make`, the README or the versions of a file
  format at most MAX_MENTIONS times, all chapters together; what a maintainer needs is in
  CONTRIBUTING.md and in the appendix's "About this book" (book/about.md). A mention is one sentence
  (or list item, or heading) that matches a pattern of BUILD_TALK, counted once however many
  patterns it matches. The test lists every mention when there are too many.
- **Two ways through the book.** Chapter 1 names the engineering chapters (ENGINEERING, and chapter
  9's section "Speed"); each says in its first lines that the paper's path does not need it.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
MAX_MENTIONS = 10
BUILD_TALK = {
    "a test file": r"\btests/\w",
    "the test suite, unit or GPU tests": r"\b(?:test\s+suite|unit\s+tests?|[GC]PU\s+tests?)\b",
    "the tests": r"\b[Tt]he\s+tests\b",
    "a test that checks": r"\b[Aa]\s+test\s+(?:checks|counts|fails|keeps|compares|runs)\b",
    "pytest": r"\bpytest\b",
    "continuous integration": r"\bCI\b|\b[Cc]ontinuous\s+integration\b",
    "nbval": r"\bnbval\b",
    "nbdev": r"\bnbdev\b",
    "make": r"`make\s|\bMakefile\b",
    "the README": r"\b[Tt]he\s+README\b|\bREADME\.md\b",
    "a file format's versions": r"\b[Vv]ersions?\s+\d+\b|\b(?:old|older|earlier)\s+(?:format|version)s?\b"
                                r"|\bformat\s+versions?\b",
}
PATTERNS = {name: re.compile(pattern) for name, pattern in BUILD_TALK.items()}
# Where a sentence ends (before a capital, a code span, emphasis or a bracket), a paragraph ends, or
# a list item begins.
SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+(?=[A-Z`*(\[\"])|\n\s*\n|\n\s*(?:[-*]|\d+\.)\s")
ENGINEERING = ("10_long_runs", "15_distributed", "16_command_line", "20_gpu")
NOT_NEEDED = re.compile(r"the paper's path[^.]*(?:does not need|need not|may skip)", re.S)


def markdown_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown"]


def mentions(text: str) -> list[tuple[str, list[str]]]:
    """The sentences of a Markdown text that speak of the build or the tests, each with the names of
    the patterns it matches."""
    found = []
    for sentence in SENTENCE_END.split(text):
        names = [name for name, pattern in PATTERNS.items() if pattern.search(sentence)]
        if names:
            found.append((" ".join(sentence.split()), names))
    return found


def test_the_patterns_find_build_talk_and_leave_the_transformer_alone():
    talk = ("The test suite (`tests/test_model.py`) checks more. CI sets it: `make test` runs nbval. A "
            "test checks the gradient. The cells are copied by nbdev. The README quotes it. Versions 1 "
            "and 2 of the format are read, and a recipe.json of an older version too.")
    assert [names for _, names in mentions(talk)] == [
        ["a test file", "the test suite, unit or GPU tests"], ["continuous integration"],
        ["nbval", "make"], ["a test that checks"], ["nbdev"], ["the README"],
        ["a file format's versions"]]
    prose = ("The model is scored on the test set, the test split of Multi30k (test_2016_flickr), and the "
             "claim is tested on WMT 2014; chapter 19 tests the warmup. The data set's README gives its "
             "terms, and torch versions newer than 2.3 will not load it.")
    assert mentions(prose) == []


def test_the_chapters_prose_rarely_speaks_of_the_build():
    found = [(path.name, sentence, names) for path in NOTEBOOKS for text in markdown_cells(path)
             for sentence, names in mentions(text)]
    listing = "\n".join(f"  {name}: {', '.join(names)}: {sentence[:160]}" for name, sentence, names in found)
    assert len(found) <= MAX_MENTIONS, (
        f"the chapters' prose speaks of tests, the build or file-format versions {len(found)} times, more "
        f"than {MAX_MENTIONS}: say it in CONTRIBUTING.md or book/about.md instead\n{listing}")


@pytest.mark.parametrize("chapter", ENGINEERING)
def test_an_engineering_chapter_says_first_that_the_papers_path_does_not_need_it(chapter):
    _title, first, *_ = markdown_cells(ROOT / "book" / f"{chapter}.ipynb")
    assert NOT_NEEDED.search(" ".join(first.split()[:60])), (
        f"{chapter}: the first lines after the title say that the paper's path does not need the chapter")


def test_chapter_1_names_the_two_paths_and_chapter_9_its_section_beyond_the_paper():
    introduction = "\n".join(markdown_cells(ROOT / "book" / "01_introduction.ipynb"))
    paths = introduction[introduction.index("## Two ways through the book"):]
    engineering = paths[paths.index("**The engineering chapters**"):].split("\n\n")[0]
    for chapter in ENGINEERING:
        assert f"chapter {int(chapter[:2])})" in engineering, chapter
    assert "*Speed*" in engineering
    speed = next(text for text in markdown_cells(ROOT / "book" / "09_training.ipynb")
                 if text.startswith("## Speed"))
    assert NOT_NEEDED.search(speed.split("\n\n")[1]), "chapter 9's section Speed: its first lines"
