"""Every chapter reads right where a reader opens it alone: Colab, Jupyter, GitHub.

Those viewers render a notebook's Markdown as CommonMark with GitHub's tables, and show a cell's
outputs by their MIME types; they know nothing of MyST, the Markdown dialect of the online book.
So the chapters' prose holds no MyST role (`{glue:text}`...``), directive (```` ```{note} ````,
`:::`), target (`(label)=`), substitution or comment, and no figure that only the book's builder
could paste: a figure is plain text between two HTML comments (tools/glue_figures.py), which every
viewer shows as the text alone. These tests render each Markdown cell as such a viewer does
(markdown-it-py's CommonMark with tables) and read the text a reader sees.
"""

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="reads the book's notebooks: a [dev] extra's tool")
markdown_it = pytest.importorskip("markdown_it", reason="renders Markdown as Colab does: the [dev] extra's")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
RENDERER = markdown_it.MarkdownIt("commonmark").enable("table").enable("strikethrough")
# What a MyST-only construct leaves in the text a viewer shows.
RAW_MYST = re.compile(
    r"\{[a-z][\w:.-]*\}`"  # a role: {glue:text}`name`, {ref}`label`, {doc}`page`
    r"|^\s*(?:`{3,}|~{3,}|:{3,})\s*\{[a-z][\w-]*\}"  # a directive: ```{note}, :::{admonition}
    r"|^\s*:{3,}"  # the colon fence that closes one
    r"|^\s*\([\w-]+\)=\s*$"  # a target: (judging-differences)=
    r"|\{\{[^}]*\}\}"  # a substitution: {{ name }}
    r"|^%\s",  # a MyST comment line
    re.M,
)
# MIME types no notebook viewer shows: MyST-NB's glue records.
HIDDEN_MIME = re.compile(r"^application/papermill\.record/")


def visible_text(source: str) -> str:
    """The text a viewer shows for a Markdown cell: rendered, HTML comments dropped, tags removed."""
    html = RENDERER.render(source)
    html = re.sub(r"<!--.*?-->", "", html, flags=re.S)
    return re.sub(r"<[^>]+>", "", html)


def raw_markup(source: str) -> list[str]:
    """The MyST constructs a viewer would show as raw text in a Markdown cell, as they read there."""
    found = [match.group(0).strip() for match in RAW_MYST.finditer(source)]
    # A line that starts with an HTML comment opens an HTML block in CommonMark: the rest of the line
    # is then shown as raw HTML, unparsed, and the paragraph it was in is cut in two.
    found += [token.content.strip()[:60] for token in RENDERER.parse(source)
              if token.type == "html_block" and "<!--fig:" in token.content]
    return found


def test_raw_markup_is_found():
    source = ("The run took {glue:text}`cpu_minutes` minutes, by {ref}`judging-differences`.\n\n"
              "(judging-differences)=\n## Judging\n\n```{note}\nA note.\n```\n\n:::{tip}\nA tip.\n:::\n\n"
              "A {{ name }} substitution.\n\n% a comment\n\n"
              "A figure\n<!--fig:x-->1.5<!--/fig--> at a line's start.")
    assert raw_markup(source) == ["{glue:text}`", "{ref}`", "(judging-differences)=", "```{note}", ":::{tip}",
                                  ":::", "{{ name }}", "%", "<!--fig:x-->1.5<!--/fig--> at a line's start."]
    fine = "The run took <!--fig:cpu_minutes-->20.8<!--/fig--> minutes.\n\n```python\nx = {1: 2}\n```"
    assert raw_markup(fine) == []


def test_a_marked_figure_reads_as_its_text():
    text = visible_text("| run | BLEU |\n|---|---|\n| CPU | **<!--fig:cpu_bleu-->40.73<!--/fig-->** |\n\n"
                        "It took <!--fig:cpu_minutes-->20.8<!--/fig--> minutes.")
    assert "40.73" in text and "It took 20.8 minutes." in text and "fig" not in text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_the_prose_reads_without_myst(path):
    notebook = nbformat.read(path, as_version=4)
    raw = [(index, found) for index, cell in enumerate(notebook.cells) if cell.cell_type == "markdown"
           for found in raw_markup(cell.source)]
    assert not raw, f"{path.name} shows MyST markup raw where Colab opens it (cell, text): {raw}"
    leftovers = [(index, text) for index, cell in enumerate(notebook.cells) if cell.cell_type == "markdown"
                 for text in re.findall(r"<!--/?fig[^>]*-->|\{glue", visible_text(cell.source))]
    assert not leftovers, f"{path.name}: a figure's markers would show in Colab: {leftovers}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_no_output_only_the_book_can_show(path):
    notebook = nbformat.read(path, as_version=4)
    hidden = [(index, mime) for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"
              for output in cell.get("outputs", []) for mime in output.get("data", {})
              if HIDDEN_MIME.match(mime)]
    assert not hidden, f"{path.name} keeps outputs that only the book's builder reads: {hidden}"
