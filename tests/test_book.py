"""The built book's checks are honest: tools/browser_test.py and the book's Sphinx extensions.

`make browser-test` opens every page of _build/html in headless Chromium, offline (see
tools/browser_test.py). These tests run its core, check_page(), on small hand-made pages: a page
whose math renderer is missing must be reported (raw TeX, formulas not typeset), the same page with
the bundled MathJax must be clean, and each other kind of defect must be reported; an interactive
chart drawn with the book's own copy of Vega must be found drawn and responding, and one whose
scripts are missing, or that does not respond to the pointer or to its controls, must be reported.
They need Debian's chromium and Playwright, and are skipped without them (`make browser-test`
installs chromium). The Sphinx extensions in tools/sphinx_ext are tested on document trees, without
a browser, and the chapters' chart cells (tools/chart_cells.py) on the notebooks.
"""

import base64
import importlib.util
from pathlib import Path

import browser_test  # tools/ and tools/sphinx_ext are on pytest's pythonpath (pyproject.toml)
import chart_cells
import dedupe_scripts
import hide_nbdev_directives
import nbformat
import pytest
import vega_charts
import vendor_vega
from browser_test import Numbering, check_page, numbering_problems
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document
from helpers import need_dev_module

ROOT = Path(__file__).resolve().parent.parent

# --- the Sphinx extensions, on document trees -----------------------------------------------------


def test_strip_directives():
    strip = hide_nbdev_directives.strip_directives
    assert strip("#| export\nimport torch\n\nx = 1") == "import torch\n\nx = 1"
    assert strip("#| default_exp attention") == ""
    assert strip("#| export\n# |hide\n\n\ndef f():\n    return 1") == "def f():\n    return 1"
    assert strip("x = 1  #| not a directive\n") == "x = 1  #| not a directive\n"
    assert strip("  # indented comment\ny = 2") == "  # indented comment\ny = 2"


def _cell(source: str, outputs: bool = False) -> nodes.container:
    """A code cell as myst-nb builds it: cell_code > cell_code_source > literal_block (+ outputs)."""
    cell = nodes.container(nb_element="cell_code", classes=["cell"])
    code = nodes.container(nb_element="cell_code_source", classes=["cell_input"])
    code += nodes.literal_block(source, source, language="ipython3")
    cell += code
    if outputs:
        output = nodes.container(nb_element="cell_code_output", classes=["cell_output"])
        output += nodes.literal_block("42", "42")
        cell += output
    return cell


def test_hide_directives_in_notebook_cells():
    document = new_document("<test>", get_default_settings(Parser))
    section = nodes.section()
    document += section
    section += _cell("#| default_exp attention")
    section += _cell("#| export\ndef attention():\n    pass")
    section += _cell("#| export", outputs=True)
    section += _cell("print('no directive')")
    section += nodes.literal_block("#| export\nshown as written", "#| export\nshown as written")

    assert hide_nbdev_directives.hide_directives(document) == 3
    cells = [node for node in section.children if node.get("nb_element") == "cell_code"]
    # The directive-only cell is gone; the one with an output keeps the output, without its source.
    assert len(cells) == 3
    assert cells[0].astext() == "def attention():\n    pass"
    assert [child["nb_element"] for child in cells[1].children] == ["cell_code_output"]
    assert cells[2].astext() == "print('no directive')"
    # A literal block that is not a notebook cell (a code example in the prose) is left alone.
    assert section.children[-1].astext() == "#| export\nshown as written"


def test_dedupe_scripts():
    from sphinx.builders.html._assets import _JavaScript

    body = "const THEBE_JS_URL = 'x'"
    scripts = [
        _JavaScript("_static/a.js"),
        _JavaScript(None, body=body),
        _JavaScript("_static/a.js", priority=200),
        _JavaScript("", body=body),
        _JavaScript("_static/b.js", **{"async": "async"}),
        _JavaScript("_static/b.js"),
    ]
    unique = dedupe_scripts.dedupe(scripts)
    assert unique == [scripts[0], scripts[1], scripts[4], scripts[5]]


# --- the interactive charts: the extension, the vendored Vega, the chart cells --------------------

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.20.1.json"


class _Logger:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str, **kwargs) -> None:
        self.warnings.append(message)


class _Renderer:  # what VegaLiteRenderer.handle_mime uses of MyST-NB's NbElementRenderer
    def __init__(self) -> None:
        self.logger = _Logger()


def test_vega_lite_outputs_render_as_charts_in_html_only():
    from myst_nb.core import render

    vega_charts.register_renderer()
    vega_charts.register_renderer()  # idempotent
    renderers = render.load_mime_renders()
    assert renderers.count(vega_charts.VegaLiteRenderer) == 1
    html = render.get_mime_priority("html", [])
    assert html.index(vega_charts.MIME_TYPE) < html.index("text/html")
    latex = render.get_mime_priority("latex", [])  # the note below, not Altair's text/plain
    assert latex.index(vega_charts.MIME_TYPE) < latex.index("text/plain")

    spec = {"$schema": SCHEMA, "description": "A <small> chart", "data": {"values": [{"a": "</script>"}]},
            "mark": "point"}
    data = render.MimeData(vega_charts.MIME_TYPE, spec)
    raw, note = vega_charts.VegaLiteRenderer.handle_mime(_Renderer(), data, False)
    assert raw["format"] == "html" and "vega-chart-output" in raw["classes"]
    assert '<div class="vega-chart" role="figure" aria-label="A &lt;small&gt; chart">' in raw.astext()
    assert "</script>\"}" not in raw.astext() and '"a":"<\\/script>"' in raw.astext()
    assert note["expr"] == "not html" and "online book" in note.astext()
    assert vega_charts.has_chart(nodes.section("", raw)) and not vega_charts.has_chart(nodes.section())
    html_output = render.MimeData("text/html", "<b>bold</b>")
    assert vega_charts.VegaLiteRenderer.handle_mime(_Renderer(), html_output, False) is None

    renderer = _Renderer()
    newer = render.MimeData(vega_charts.MIME_TYPE, {**spec, "$schema": SCHEMA.replace("v5.20.1", "v6.1.0")})
    assert vega_charts.VegaLiteRenderer.handle_mime(renderer, newer, False) == []
    assert "a chart for Vega-Lite 6, but the book ships Vega-Lite 5" in renderer.logger.warnings[0]


def test_vendored_vega_is_what_its_readme_records():
    assert vendor_vega.check() == []
    shipped = {path.name for path in vendor_vega.TARGET.iterdir()}
    for script in vega_charts.SCRIPTS:
        assert (vendor_vega.TARGET.parent / script).is_file(), script
    assert {"vega.LICENSE", "vega-lite.LICENSE", "vega-embed.LICENSE", "README.md"} <= shipped
    # The copy of Vega-Lite is the version Altair's charts name.
    altair = need_dev_module("altair")
    assert vendor_vega.PACKAGES["vega-lite"][0] == altair.VEGALITE_VERSION
    assert altair.SCHEMA_VERSION.startswith(f"v{vega_charts.VEGALITE_MAJOR}.")


def test_chart_cells_are_hidden_and_hold_one_small_chart():
    charted = {}
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        assert chart_cells.problems(notebook) == [], path.name
        cells = chart_cells.chart_cells(notebook)
        if cells:
            charted[path.stem] = len(cells)
        for cell in cells:  # scaffolding of the book, never a part of the package
            assert not any(line.lstrip().startswith("#|") for line in cell.source.splitlines()), path.name
            # Whoever runs the chapter (nbval, tools/execute_notebooks.py) writes what the book draws:
            # helpers.notebook_charts switches Altair to Vega-Lite outputs (a chapter's companion that
            # draws the chart, such as the attention explorer, switches it too).
            assert ("use_vega_lite_output()" in cell.source
                    or "from annotated_transformer.companions." in cell.source), path.name
    assert charted == {"07_optimizer": 1, "14_translation": 1, "17_why_self_attention": 1,
                       "19_layer_norm": 1}


# --- the numbering of the pages ---------------------------------------------------------------


def _numbered(titles: list[str], current: int | None) -> dict:
    sidebar = [{"text": f"{i}. {t}", "current": i == current} for i, t in enumerate(titles, start=1)]
    return {"sidebar": sidebar}


def test_numbering_problems():
    titles = ["Introduction", "Attention", "Multi-head attention"]
    chapter = {**_numbered(titles, 2), "title": "2. Attention — Book", "heading": "2. Attention"}
    assert numbering_problems(chapter, Numbering(2, 3)) == []
    cover = {**_numbered(titles, None), "title": "Book — Book", "heading": "Book"}
    assert numbering_problems(cover, Numbering(None, 3)) == []

    unnumbered = {**chapter, "title": "Attention — Book", "heading": "Attention"}
    assert len(numbering_problems(unnumbered, Numbering(2, 3))) == 2
    gap = {**chapter, "sidebar": [{**e, "text": e["text"].split(". ", 1)[1]} if i == 1 else e
                                  for i, e in enumerate(chapter["sidebar"])]}
    problems = numbering_problems(gap, Numbering(2, 3))
    assert any("sidebar entry" in p for p in problems) and any("[1, 3]" in p for p in problems)
    numbered_cover = {**cover, "heading": "1. Book"}
    assert numbering_problems(numbered_cover, Numbering(None, 3)) == [
        "this unnumbered page's heading has a number: '1. Book'"
    ]


def test_book_pages_are_the_cover_the_numbered_chapters_and_the_unnumbered_pages():
    pages = browser_test.book_pages(ROOT, ROOT / "_build" / "html")
    assert pages[0][0].name == "index.html" and pages[0][1].number is None
    numbers = [numbering.number for _, numbering in pages[1:]]
    chapters = [n for n in numbers if n is not None]
    assert chapters == list(range(1, len(chapters) + 1)) and numbers[: len(chapters)] == chapters
    assert pages[14][0].name == "14_translation.html" and pages[14][1].number == 14
    unnumbered = [path.name for path, numbering in pages[len(chapters) + 1 :]]
    assert "conclusion.html" in unnumbered and all(n is None for n in numbers[len(chapters) :])


# --- check_page() in a browser, on hand-made pages ---------------------------------------------

MATHJAX_CONFIG = (
    '<script>window.MathJax = {"options": {"processHtmlClass": '
    '"tex2jax_process|mathjax_process|math|output_area"}}</script>'
)
# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
)


def page(body: str, head: str = "") -> str:
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>A page</title>{head}</head>'
        f'<body><main><article class="bd-article"><section class="tex2jax_ignore mathjax_ignore">'
        f"{body}</section></article></main></body></html>"
    )


# What Sphinx's MathJax support writes for inline and display math, with the script it loads.
MATH_PAGE = page(
    '<h1>Attention</h1><p>The scores are <span class="math notranslate nohighlight">\\(QK^T\\)</span>, '
    "scaled:</p>"
    '<div class="math notranslate nohighlight">\\[\\mathrm{Attention}(Q, K, V) = '
    "\\mathrm{softmax}\\left(\\frac{QK^T}{\\sqrt{d_k}}\\right)V\\]</div>"
    '<p><img src="pixel.png" alt="a pixel"> <a href="other.html#there">a link</a> '
    '<a href="#scores">an anchor</a> <span id="scores"></span></p>'
    '<div class="cell docutils container"><div class="cell_input docutils container">'
    '<div class="highlight"><pre>import torch\nx = torch.ones(2)</pre></div></div></div>',
    head=MATHJAX_CONFIG + '<script defer src="_static/mathjax/tex-chtml.js"></script>',
)


def mathjax_dir() -> Path | None:
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"
    return found if (found / "tex-chtml.js").is_file() else None


@pytest.fixture(scope="module")
def context():
    if not Path(browser_test.CHROMIUM).exists():
        pytest.skip(f"no Chromium at {browser_test.CHROMIUM} (`make browser-test` installs Debian's)")
    need_dev_module("playwright.sync_api")
    with browser_test.browser() as context:
        yield context


def site(tmp_path: Path, pages: dict[str, str], mathjax: bool) -> Path:
    (tmp_path / "pixel.png").write_bytes(PNG)
    (tmp_path / "other.html").write_text(page('<p id="there">there</p>'), encoding="utf-8")
    for name, html in pages.items():
        (tmp_path / name).write_text(html, encoding="utf-8")
    if mathjax:
        source = mathjax_dir()
        if source is None:
            pytest.skip("sphinx-mathjax-offline (the bundled MathJax) is not installed (make setup)")
        (tmp_path / "_static").mkdir()
        (tmp_path / "_static" / "mathjax").symlink_to(source, target_is_directory=True)
    return tmp_path


def test_page_without_the_math_renderer_is_reported(context, tmp_path):
    root = site(tmp_path, {"chapter.html": MATH_PAGE}, mathjax=False)
    report = check_page(context, root / "chapter.html", root)
    problems = "\n".join(report.problems)
    assert report.math == 2 and report.typeset == 0, report
    assert "formulas not typeset (2 of 2)" in problems
    assert "raw TeX in the text" in problems and "\\\\frac" in problems
    assert "MathJax did not typeset the page" in problems
    assert "local files missing" in problems and "tex-chtml.js" in problems


def test_page_with_the_bundled_math_renderer_is_clean(context, tmp_path):
    root = site(tmp_path, {"chapter.html": MATH_PAGE}, mathjax=True)
    report = check_page(context, root / "chapter.html", root)
    assert report.problems == []
    assert (report.math, report.typeset, report.images, report.internal_links) == (2, 2, 1, 2)


def test_each_defect_is_reported(context, tmp_path):
    bad = page(
        "<h1>Defects</h1>"
        "<p>Display math left as text: $$E = mc^2$$</p><p>and inline math too: $d_k$.</p>"
        '<p><img src="missing.png" alt="gone"> <img src="https://example.org/remote.png" alt="remote"></p>'
        '<p><a href="nowhere.html">a missing page</a> <a href="other.html#elsewhere">a missing anchor</a> '
        '<a href="#nothing">a missing anchor here</a> <a href="https://example.org/">outside</a></p>'
        '<div class="cell docutils container"><div class="cell_input docutils container">'
        '<div class="highlight"><pre>#| export\ndef f():\n    pass</pre></div></div>'
        '<div class="cell_output docutils container"><div class="output traceback highlight-ipythontb">'
        "<pre>Traceback (most recent call last):\nValueError: bad</pre></div>"
        '<div class="output stderr"><pre>RuntimeError: worse</pre></div></div></div>'
        "<script>undefinedFunction();</script>"
        '<header id="pst-header" style="height: 60px">Search</header>'
    )
    root = site(tmp_path, {"bad.html": bad}, mathjax=False)
    report = check_page(context, root / "bad.html", root)
    problems = "\n".join(report.problems)
    expected = [
        "raw TeX in the text (2)",
        "images not loaded (2)",
        "asked for the network (1): 'image https://example.org/remote.png'",
        "local files missing",
        "broken links (3)",
        "nowhere.html does not exist",
        "other.html#elsewhere: no such anchor",
        "bad.html#nothing: no such anchor",
        "notebook errors in outputs (3)",
        "nbdev directives visible (1): '#| export'",
        "script errors (1)",
        "a header bar across the top of the page",
    ]
    missing = [text for text in expected if text not in problems]
    assert not missing, f"not reported: {missing}\nreport:\n{problems}"
    assert report.external_links == 1


def test_code_that_scrolls_sideways_is_reported(context, tmp_path):
    # In a 1,440-pixel window, a column 600 pixels wide: a 110-character line of code does not fit,
    # in sight or in a collapsed cell; an output whose long line wraps, or a short line, does.
    long_line = "x = 1  # " + "a comment that says why " * 4 + "and more"
    cell = (
        '<div class="cell docutils container"><div class="cell_input docutils container">'
        '<div class="highlight"><pre style="overflow: auto">{code}</pre></div></div>'
        '<div class="cell_output docutils container"><div class="output stream highlight-myst-ansi">'
        '<pre style="overflow: auto; white-space: pre-wrap">{output}</pre></div></div></div>'
    )
    wide = page(
        '<h1>Code</h1><div style="width: 600px">'
        + cell.format(code=long_line, output="a long output line that wraps " * 8)
        + cell.format(code="x = 1", output="short")
        + "<details><summary>Show code cell source</summary>"
        + cell.format(code=long_line.replace("x = 1", "y = 2"), output="")
        + "</details></div>"
    )
    root = site(tmp_path, {"wide.html": wide}, mathjax=False)
    report = check_page(context, root / "wide.html", root)
    problems = "\n".join(report.problems)
    assert report.code_blocks == 6, report
    assert "scrolls sideways in a 1440-pixel window (2 of 6 code blocks)" in problems, problems
    assert "code cell 1" in problems and "code cell 3" in problems and "output" not in problems, problems
    assert f"a line of {len(long_line)} characters: x = 1  # a comment" in problems, problems


# --- interactive charts in a browser, on hand-made pages ------------------------------------------

# A bar chart as the book's charts are: a control that chooses what is drawn, bars that the pointer
# highlights, a tooltip.
RESPONSIVE_CHART = {
    "$schema": SCHEMA,
    "data": {"values": [{"x": "a", "y": 1, "g": 1}, {"x": "b", "y": 3, "g": 1},
                        {"x": "a", "y": 2, "g": 2}, {"x": "b", "y": 1, "g": 2}]},
    "params": [
        {"name": "group", "value": 1, "bind": {"input": "radio", "options": [1, 2], "name": "group "}},
        {"name": "hover", "select": {"type": "point", "on": "pointerover", "fields": ["x"]}},
    ],
    "transform": [{"filter": "datum.g == group"}],
    "mark": "bar",
    "encoding": {
        "x": {"field": "x", "type": "nominal"},
        "y": {"field": "y", "type": "quantitative"},
        "opacity": {"condition": {"param": "hover", "value": 1, "empty": False}, "value": 0.4},
        "tooltip": [{"field": "y", "type": "quantitative"}],
    },
}
# The same bars with neither highlight nor tooltip, and a control that nothing reads.
QUIET_CHART = {
    **{key: value for key, value in RESPONSIVE_CHART.items() if key != "transform"},
    "params": [
        {"name": "unused", "value": 1, "bind": {"input": "radio", "options": [1, 2], "name": "unused "}},
    ],
    "encoding": {"x": {"field": "x", "type": "nominal"}, "y": {"field": "y", "type": "quantitative"}},
}


def chart_page(*specs: dict) -> str:
    """A page as tools/sphinx_ext/vega_charts.py writes one: the book's scripts, then the charts."""
    scripts = "".join(f'<script src="_static/{script}"></script>' for script in vega_charts.SCRIPTS)
    return page("<h1>Charts</h1>" + "".join(vega_charts.chart_html(spec) for spec in specs), head=scripts)


def chart_site(tmp_path: Path, html: str, vega: bool = True) -> Path:
    """A site with the page and the book's chart script; with the book's copy of Vega when `vega`."""
    static = tmp_path / "_static"
    static.mkdir()
    (static / "vega-charts.js").symlink_to(ROOT / "book" / "_static" / "vega-charts.js")
    if vega:
        (static / "vega").symlink_to(vendor_vega.TARGET, target_is_directory=True)
    (tmp_path / "charts.html").write_text(html, encoding="utf-8")
    return tmp_path


def test_a_chart_that_draws_and_responds_is_clean(context, tmp_path):
    root = chart_site(tmp_path, chart_page(RESPONSIVE_CHART))
    report = check_page(context, root / "charts.html", root, charts=1)
    assert report.problems == [] and report.charts == 1, report


def test_a_chart_without_its_scripts_is_reported(context, tmp_path):
    root = chart_site(tmp_path, chart_page(RESPONSIVE_CHART), vega=False)
    report = check_page(context, root / "charts.html", root, charts=1)
    problems = "\n".join(report.problems)
    assert "local files missing (3)" in problems and "vega-embed.min.js" in problems, problems
    assert "chart 1 did not draw (This interactive chart could not be drawn: Vega-Embed did not load" \
        in problems, problems
    assert report.charts == 0


def test_a_chart_that_does_not_respond_is_reported(context, tmp_path):
    root = chart_site(tmp_path, chart_page(RESPONSIVE_CHART, QUIET_CHART))
    report = check_page(context, root / "charts.html", root, charts=3)
    problems = "\n".join(report.problems)
    assert "expected 3 interactive charts, found 2" in problems, problems
    assert "chart 1" not in problems and report.charts == 1, problems
    assert "chart 2 does not respond: hovering its marks changed nothing (no highlight, no tooltip); " \
        "changing its control 'unused' (radio) redrew nothing" in problems, problems


def test_expected_charts_counts_the_notebooks_vega_lite_outputs(tmp_path):
    cells = [nbformat.v4.new_code_cell("chart"), nbformat.v4.new_code_cell("")]
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.cells[0].outputs = [nbformat.v4.new_output(
        "display_data", data={vega_charts.MIME_TYPE: {"$schema": SCHEMA}, "text/plain": "chart"})]
    nbformat.write(notebook, tmp_path / "chapter.ipynb")
    assert browser_test.expected_charts(tmp_path / "chapter.ipynb") == 1
    assert browser_test.expected_charts(tmp_path / "missing.ipynb") == 0
    assert browser_test.expected_charts(ROOT / "book" / "14_translation.ipynb") == 1
