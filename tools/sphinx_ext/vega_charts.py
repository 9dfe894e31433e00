"""Sphinx extension: draw the chapters' interactive charts (Vega-Lite outputs) offline.

A chart cell of a chapter displays an Altair chart with Altair's "mimetype" renderer: its output is
the chart's Vega-Lite specification, data included, under the MIME type
`application/vnd.vegalite.v5+json` (which JupyterLab and VS Code draw themselves). MyST-NB knows no
renderer for that type, so this extension gives it one:

- each such output becomes a `<div class="vega-chart">` holding the specification in a
  `<script type="application/json">`, which book/_static/vega-charts.js hands to Vega-Embed once the
  page has loaded (SVG, with tooltips, without Vega-Embed's action menu);
- a page with a chart, and only such a page, loads Vega, Vega-Lite and Vega-Embed from the book's
  own _static/vega/ (copied there from book/_static/vega/ by tools/vendor_vega.py): no page asks a
  CDN for anything, and `make browser-test` checks that every chart draws and responds offline;
- other builders (LaTeX for a PDF, text) show a one-line note instead; the static figure the
  chapter draws with matplotlib stays beside the chart for them.

MyST-NB finds MIME renderers through the entry points of installed packages
(`myst_nb.mime_renderers`); a local extension has none, so `setup` adds `VegaLiteRenderer` to the
list MyST-NB reads (`myst_nb.core.render.load_mime_renders`). Should MyST-NB stop reading that list,
its warning "skipping unknown output mime type" fails the book's build (-W), and
tests/test_book.py fails too.

Registered in _config.yml (`sphinx: local_extensions: vega_charts: tools/sphinx_ext`).
"""

from __future__ import annotations

import html
import json
import re

from docutils import nodes
from sphinx import addnodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

# The Vega-Lite major version of the copy in book/_static/vega/ (tools/vendor_vega.py): a chart
# written for another one is refused with a warning, since it may not draw.
VEGALITE_MAJOR = 5
MIME_TYPE = f"application/vnd.vegalite.v{VEGALITE_MAJOR}+json"
# Loaded in this order by every page with a chart, from _static/ (vega-lite needs vega, vega-embed both).
SCRIPTS = ("vega/vega.min.js", "vega/vega-lite.min.js", "vega/vega-embed.min.js", "vega-charts.js")
STYLES = ("vega-charts.css",)
CONTAINER_CLASS = "vega-chart"
SCHEMA = re.compile(r"/vega-lite/v(\d+)")


def chart_html(spec: dict) -> str:
    """The HTML of one chart: a container that vega-charts.js draws `spec` into."""
    # "</" would end the script element early; JSON allows "<\/" for it.
    data = json.dumps(spec, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")
    title = spec.get("description") or spec.get("title") or "an interactive chart"
    if isinstance(title, dict):
        title = title.get("text", "an interactive chart")
    return (
        f'<div class="{CONTAINER_CLASS}" role="figure" aria-label="{html.escape(str(title))}">'
        f'<script type="application/json" class="vega-chart-spec">{data}</script></div>'
    )


def chart_nodes(spec: dict) -> list[nodes.Node]:
    """The nodes of one chart: the HTML for the HTML builders, a note for the others."""
    note = addnodes.only(expr="not html")
    note += nodes.paragraph(text="(An interactive chart: see the online book.)")
    return [nodes.raw("", chart_html(spec), format="html", classes=["vega-chart-output"]), note]


def schema_problem(spec: object) -> str | None:
    """Why `spec` cannot be drawn by the copy of Vega-Lite the book ships, or None."""
    if not isinstance(spec, dict):
        return f"a {MIME_TYPE} output that is not a JSON object"
    match = SCHEMA.search(str(spec.get("$schema", "")))
    if match is None or int(match.group(1)) != VEGALITE_MAJOR:
        return (f"a chart for Vega-Lite {match.group(1) if match else '(no $schema)'}, but the book ships "
                f"Vega-Lite {VEGALITE_MAJOR} (tools/vendor_vega.py)")
    return None


class VegaLiteRenderer:
    """MyST-NB's MimeRenderPlugin protocol, for Vega-Lite outputs."""

    # First for every builder (text/html is 30 in HTML): the HTML builders write the chart, the
    # others drop raw HTML and show the note of chart_nodes (not the text/plain Altair writes).
    mime_priority_overrides = (("*", MIME_TYPE, 5),)

    @staticmethod
    def handle_mime(renderer, data, inline: bool) -> list[nodes.Node] | None:
        if data.mime_type != MIME_TYPE:
            return None
        spec = data.content
        if isinstance(spec, (str, bytes)):
            spec = json.loads(spec)
        problem = schema_problem(spec)
        if problem:
            renderer.logger.warning(problem, subtype="vega_chart", line=data.line)
            return []
        return chart_nodes(spec)


def register_renderer() -> None:
    """Add VegaLiteRenderer to the MIME renderers MyST-NB reads (once)."""
    from myst_nb.core import render

    if getattr(render.load_mime_renders, "_vega_charts", False):
        return
    entry_points = render.load_mime_renders

    def load_mime_renders() -> list:
        return [*entry_points(), VegaLiteRenderer]

    load_mime_renders._vega_charts = True  # type: ignore[attr-defined]
    render.load_mime_renders = load_mime_renders


def has_chart(doctree: nodes.Node | None) -> bool:
    if doctree is None:
        return False
    return any("vega-chart-output" in node.get("classes", []) for node in doctree.findall(nodes.raw))


def _on_html_page_context(app, pagename, templatename, context, doctree) -> None:
    # Called within html-page-context, add_js_file adds the script to this page only.
    if has_chart(doctree):
        for script in SCRIPTS:
            app.add_js_file(script)
        for style in STYLES:
            app.add_css_file(style)


def setup(app):
    register_renderer()
    app.connect("html-page-context", _on_html_page_context)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
