"""What a reader meets in the built book: every page of _build/html, in headless Chromium, offline.

    make browser-test                    (builds the book first; installs Debian's chromium if missing)
    .venv/bin/python tools/browser_test.py [--site _build/html] [--chromium /usr/bin/chromium]

Every page that _toc.yml lists (the cover and the chapters) is opened from disk (file://) with the
network cut off: every request that is not file:, data: or blob: is refused and counted, and the
browser cannot resolve any host name. A page fails when, once it has loaded and MathJax has finished:

- it asked for anything on the network, or a local file it needs (script, style, image, font) is
  missing, or a script raised an exception;
- raw TeX is left in its text outside code (`$$`, `\\(`, `\\[`, `\\begin{`, `\\frac`, any `\\command`,
  `$x_1$`): the math renderer did not run, or a formula was not parsed as math;
- a formula Sphinx emitted (span.math, div.math) holds no MathJax output, or MathJax reports a TeX
  error in it;
- an image has not loaded (naturalWidth 0), or a web font failed to load;
- a link to a local page or anchor leads nowhere (the file, or the id in it, does not exist);
- a notebook output shows an error (a traceback, or an error word in a stderr output);
- an nbdev directive (`#| export`, `#| default_exp ...`) is visible in a code block;
- pydata-sphinx-theme's header bar shows across the top (with nothing but a second search field);
- a code block (a code cell's source, a cell's text output, or a code block in the text) scrolls
  sideways, or is cut off, in a window 1,440 pixels wide (a common laptop's): the ends of its lines
  would be out of sight. Collapsed cells are opened first, as a reader would;
- the numbering is wrong: chapter N's title, heading and sidebar entry must start with "N.", the
  sidebar must number the chapters 1, 2, ... without a gap across parts, and the cover page and
  the pages of unnumbered parts (the conclusion) must have no number.
- an interactive chart (a Vega-Lite output of the chapter, drawn by tools/sphinx_ext/vega_charts.py)
  is missing, did not draw (no SVG or canvas with marks in its container), or does not respond: the
  pointer moved onto its first marks must change what it shows (highlighted or selected marks, a
  tooltip), each of its controls (a select, radio buttons, a slider, a checkbox) must redraw it, and
  a legend that filters must filter when clicked. A chapter must have as many drawn charts as its
  notebook has Vega-Lite outputs.

It prints one line per page and a total, and exits 1 when any page has a problem. check_page() is
the core, used by tests/test_book.py on small hand-made pages to show the checks catch what they say.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import yaml

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "_build" / "html"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Headless, as root, and quiet: no sandbox (root), no GPU, no background traffic of its own; every
# host name resolves to nothing, so even a request that slipped past the route below goes nowhere.
# (Playwright adds --headless and a new, empty --user-data-dir.)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",
]
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")
# How long a page may take to load and typeset its math (MathJax on the longest chapter: ~2 s).
PAGE_TIMEOUT_MS = 60_000
# The window every page is opened in: a common laptop's. No code block may scroll sideways in it.
VIEWPORT = {"width": 1440, "height": 900}
SHOWN = 3  # examples shown per kind of problem

# Collects what the checks need, in the page, after it has loaded. Takes the time limit (ms).
COLLECT_JS = r"""
async (timeoutMs) => {
  const withTimeout = (promise, ms) =>
    Promise.race([promise, new Promise((resolve) => setTimeout(() => resolve("timeout"), ms))]);

  // MathJax 3: startup.promise resolves once the page is typeset. If its script did not load,
  // window.MathJax is at most the configuration object Sphinx writes, with no startup.
  let mathjax = "absent";
  if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
    mathjax = await withTimeout(window.MathJax.startup.promise.then(() => "typeset"), timeoutMs);
  }

  // Images: load lazy ones too, and wait for every image to finish (or fail).
  const images = Array.from(document.images);
  images.forEach((img) => { if (img.loading === "lazy") img.loading = "eager"; });
  const settled = (img) => img.complete ? null : new Promise((resolve) => {
    img.addEventListener("load", resolve);
    img.addEventListener("error", resolve);
  });
  await withTimeout(Promise.all(images.map(settled)), timeoutMs);
  await withTimeout(document.fonts.ready, timeoutMs);

  const text = (el) => (el ? el.textContent.replace(/\s+/g, " ").trim() : null);

  // Math: the containers Sphinx emitted, and whether MathJax rendered each of them.
  const mathNodes = Array.from(document.querySelectorAll("span.math, div.math"));
  const untypeset = mathNodes.filter((el) => !el.querySelector("mjx-container")).map(text);
  const mathErrors = Array.from(document.querySelectorAll("mjx-merror")).map(
    (el) => el.getAttribute("data-mjx-error") || text(el));

  // Raw TeX: text outside code, scripts and MathJax's own output.
  const skip = "pre, code, kbd, samp, script, style, noscript, textarea, mjx-container, .highlight";
  const tex = /\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\\end\{|\\[A-Za-z]{2,}|\$[^$\n]*[\\^_{}][^$\n]*\$/;
  const rawTex = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest(skip)) continue;
    const match = node.data.match(tex);
    if (match) {
      const at = match.index;
      rawTex.push(node.data.slice(Math.max(0, at - 30), at + 50).replace(/\s+/g, " ").trim());
    }
  }

  const brokenImages = images.filter((img) => !img.complete || img.naturalWidth === 0)
    .map((img) => img.getAttribute("src"));
  const failedFonts = Array.from(document.fonts).filter((font) => font.status === "error")
    .map((font) => font.family);

  const links = Array.from(document.querySelectorAll("a[href]")).map((a) => a.href);

  // Notebook errors: error outputs (a traceback), or an error in a stderr stream.
  const notebookErrors = [];
  for (const el of document.querySelectorAll(".cell_output .traceback, .cell_output .output.error"))
    notebookErrors.push("error output: " + text(el).slice(0, 80));
  for (const el of document.querySelectorAll(".cell_output"))
    if (el.textContent.includes("Traceback (most recent call last)"))
      notebookErrors.push("traceback: " + text(el).slice(0, 80));
  for (const el of document.querySelectorAll(".cell_output .stderr"))
    if (/\w*Error\b/.test(el.textContent)) notebookErrors.push("stderr: " + text(el).slice(0, 80));

  // nbdev directives left in code blocks.
  const directives = [];
  for (const pre of document.querySelectorAll("pre"))
    for (const line of pre.textContent.split("\n"))
      if (/^\s*#\s*\|/.test(line)) directives.push(line.trim());

  // Numbering: the title, the page's heading, and the sidebar's entries.
  // (The first h1 in the page is the print-only copy of the title, without its number.)
  const heading = document.querySelector(".bd-article h1") || document.querySelector("article h1");
  const sidebar = Array.from(document.querySelectorAll(".bd-docs-nav a.reference.internal")).map((a) => ({
    text: text(a), current: a.classList.contains("current"),
  }));

  // pydata-sphinx-theme's header bar: sphinx-book-theme has none (it held a second search field).
  const header = document.querySelector("#pst-header");
  const headerBar = !!header && header.getBoundingClientRect().height > 0;

  let headingText = null;
  if (heading) {
    const copy = heading.cloneNode(true);
    copy.querySelectorAll(".headerlink").forEach((a) => a.remove());
    headingText = text(copy);
  }

  // Code blocks wider than their box (they scroll sideways, or are cut off), with collapsed cells
  // opened as a reader would open them. Last, since it opens them.
  document.querySelectorAll("details").forEach((el) => { el.open = true; });
  const kinds = [];
  const wide = [];
  for (const pre of document.querySelectorAll("pre")) {
    const kind = pre.closest(".cell_input") ? "code cell" : pre.closest(".cell_output") ? "output"
      : "code block";
    kinds.push(kind);
    const over = pre.scrollWidth - pre.clientWidth;
    if (over > 1) {
      const longest = pre.textContent.split("\n").reduce((a, b) => (b.length > a.length ? b : a), "");
      const number = kinds.filter((k) => k === kind).length;
      wide.push(`${kind} ${number} (${over} px too wide; a line of ${longest.length} characters: ` +
        `${longest.trim().slice(0, 60)})`);
    }
  }

  return {
    mathjax, math: mathNodes.length, untypeset, mathErrors, rawTex, images: images.length,
    brokenImages, failedFonts, links, notebookErrors, directives,
    title: document.title, heading: headingText, sidebar, headerBar, codeBlocks: kinds.length, wide,
    window: window.innerWidth,
  };
}
"""


# The interactive charts (div.vega-chart, see tools/sphinx_ext/vega_charts.py): waits until each has
# drawn or failed, then describes them. Takes the time limit (ms).
CHARTS_JS = r"""
async (timeoutMs) => {
  const containers = Array.from(document.querySelectorAll("div.vega-chart"));
  const start = performance.now();
  while (containers.some((c) => !c.dataset.vegaState) && performance.now() - start < timeoutMs)
    await new Promise((resolve) => setTimeout(resolve, 50));
  const hasLegendFilter = (node) => node && typeof node === "object" && (node.bind === "legend" ||
    Object.values(node).some(hasLegendFilter));
  return containers.map((container) => {
    const svg = container.querySelector("svg");
    const canvas = container.querySelector("canvas");
    let spec = null;
    try { spec = JSON.parse(container.querySelector("script.vega-chart-spec").textContent); } catch (e) {}
    const error = container.querySelector(".vega-chart-error");
    return {
      state: container.dataset.vegaState || "not drawn",
      error: error ? error.textContent : null,
      marks: svg ? svg.querySelectorAll("g.role-mark > *").length : 0,
      canvas: !!canvas && canvas.width > 0,
      controls: Array.from(container.querySelectorAll(".vega-bindings .vega-bind")).map((bind) => {
        const name = bind.querySelector(".vega-bind-name");
        const input = bind.querySelector("select, input");
        return { name: name ? name.textContent.trim() : "?", kind: !input ? "none"
          : input.tagName === "SELECT" ? "select" : input.type };
      }),
      legendFilter: hasLegendFilter(spec),
    };
  });
}
"""

# What a chart shows now: a digest of its SVG (or canvas) and the text of a visible tooltip.
CHART_STATE_JS = r"""
(container) => {
  const svg = container.querySelector("svg");
  let text = svg ? svg.outerHTML : "";
  const canvas = container.querySelector("canvas");
  if (!svg && canvas) text = canvas.toDataURL();
  let hash = 0;
  for (let i = 0; i < text.length; i++) hash = (Math.imul(31, hash) + text.charCodeAt(i)) | 0;
  const tip = document.getElementById("vg-tooltip-element");
  const tooltip = tip && tip.classList.contains("visible") ? tip.textContent.trim() : "";
  return { drawing: `${text.length}:${hash}`, tooltip };
}
"""

# Where the pointer goes to hover a chart: on its first marks (a cell of a heat map, a bar, a point,
# the middle of a line), in the window's coordinates, after scrolling the chart into sight.
HOVER_POINT_JS = r"""
(container) => {
  container.scrollIntoView({ block: "center" });
  const groups = container.querySelectorAll(
    "svg g.role-mark.mark-rect, svg g.role-mark.mark-symbol, svg g.role-mark.mark-line, " +
    "svg g.role-mark.mark-area, svg g.role-mark.mark-arc");
  for (const group of groups) {
    for (const item of group.children) {
      if (item.tagName === "path" && group.classList.contains("mark-line") && item.getTotalLength() > 0) {
        const point = item.getPointAtLength(item.getTotalLength() / 2);
        const screen = point.matrixTransform(item.getScreenCTM());
        return { x: screen.x, y: screen.y };
      }
      const box = item.getBoundingClientRect();
      if (box.width > 0 && box.height > 0) return { x: box.x + box.width / 2, y: box.y + box.height / 2 };
    }
  }
  return null;
}
"""
# How long a chart may take to redraw after the pointer moves or a control changes.
CHART_SETTLE_MS = 300


@dataclass
class Numbering:
    """What the numbering of a page must be: chapter `number` (None: the cover page, no number) of
    a book with `chapters` numbered chapters."""

    number: int | None
    chapters: int


@dataclass
class PageReport:
    path: Path
    problems: list[str] = field(default_factory=list)
    math: int = 0
    typeset: int = 0
    images: int = 0
    code_blocks: int = 0
    internal_links: int = 0
    external_links: int = 0
    charts: int = 0
    seconds: float = 0.0

    def summary(self, site: Path) -> str:
        try:
            name = self.path.relative_to(site).as_posix()
        except ValueError:
            name = str(self.path)
        status = "ok  " if not self.problems else "FAIL"
        line = (
            f"{status} {name}: {self.typeset}/{self.math} formulas typeset, {self.images} images, "
            f"{self.code_blocks} code blocks, "
            f"{self.internal_links} internal links ({self.external_links} external, not followed), "
            + (f"{self.charts} interactive charts, " if self.charts else "")
            + f"{self.seconds:.1f} s"
        )
        if self.problems:
            line += f", {len(self.problems)} problems:\n" + "\n".join(f"       - {p}" for p in self.problems)
        return line


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and (name == "id" or (tag == "a" and name == "name")):
                self.ids.add(value)


@cache
def anchors(path: Path) -> frozenset[str]:
    """The ids (and <a name>) of an HTML file: the anchors a link may point to."""
    parser = _Ids()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return frozenset(parser.ids)


def broken_links(hrefs: list[str], site: Path) -> tuple[list[str], int, int]:
    """Local links (file:) whose file, or whose #anchor in it, does not exist; with the counts of
    internal and external links."""
    broken, internal, external = [], 0, 0
    site = site.resolve()
    for href in dict.fromkeys(hrefs):
        parts = urlsplit(href)
        if parts.scheme in ("http", "https", "mailto", "javascript", "tel"):
            external += parts.scheme in ("http", "https")
            continue
        if parts.scheme != "file":
            broken.append(f"{href} (unknown scheme)")
            continue
        internal += 1
        target = Path(unquote(parts.path))
        if target.is_dir():
            target = target / "index.html"
        shown = target.relative_to(site).as_posix() if target.is_relative_to(site) else str(target)
        if not target.resolve().is_relative_to(site):
            broken.append(f"{shown} is outside the built site")
        elif not target.is_file():
            broken.append(f"{shown} does not exist")
        elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in anchors(target):
            broken.append(f"{shown}#{parts.fragment}: no such anchor")
    return broken, internal, external


def _examples(items: list[str]) -> str:
    shown = "; ".join(repr(item) for item in items[:SHOWN])
    more = f" (and {len(items) - SHOWN} more)" if len(items) > SHOWN else ""
    return shown + more


NUMBERED = re.compile(r"^(\d+)\.\s")


def numbering_problems(data: dict, numbering: Numbering) -> list[str]:
    problems = []
    title, heading, sidebar = data["title"] or "", data["heading"] or "", data["sidebar"]
    if numbering.number is None:
        for what, text in (("title", title), ("heading", heading)):
            if NUMBERED.match(text):
                problems.append(f"this unnumbered page's {what} has a number: {text!r}")
    else:
        prefix = f"{numbering.number}. "
        for what, text in (("title", title), ("heading", heading)):
            if not text.startswith(prefix):
                problems.append(f"the {what} should start with {prefix!r}: {text!r}")
        current = [entry["text"] for entry in sidebar if entry["current"]]
        if not current or not current[0].startswith(prefix):
            problems.append(f"the page's sidebar entry should start with {prefix!r}: {current}")
    numbers = [int(m.group(1)) for entry in sidebar if (m := NUMBERED.match(entry["text"] or ""))]
    expected = list(range(1, numbering.chapters + 1))
    if numbers != expected:
        problems.append(f"the sidebar numbers the chapters {numbers}, expected 1 to {numbering.chapters}")
    return problems


def _change_control(bind, kind: str) -> None:
    """Set one chart control (a .vega-bind element) to another value, as a reader would."""
    if kind == "select":
        select = bind.locator("select")
        current = select.input_value()
        values = [value for value in select.locator("option").evaluate_all("(os) => os.map((o) => o.value)")
                  if value != current]
        select.select_option(values[-1])
    elif kind == "radio":
        bind.locator("input[type=radio]:not(:checked)").last.check()
    elif kind == "checkbox":
        bind.locator("input[type=checkbox]").click()
    else:  # a slider, or a text field: the other end of its range, or another number
        bind.locator("input").evaluate(
            "(input) => { input.value = input.type === 'range' ? (input.value === input.max ? input.min : "
            "input.max) : String(Number(input.value || 0) + 1); "
            "input.dispatchEvent(new Event('input', { bubbles: true })); "
            "input.dispatchEvent(new Event('change', { bubbles: true })); }"
        )


def _unresponsive(page, container, chart: dict) -> list[str]:
    """What one drawn chart does not respond to: the pointer on its marks, each of its controls, a
    click on its legend when the legend filters (empty: it responds to all)."""

    def state() -> dict:
        return container.evaluate(CHART_STATE_JS)

    quiet = []
    # Hover: from the page's corner onto the chart's first marks.
    page.mouse.move(1, 1)
    page.wait_for_timeout(CHART_SETTLE_MS)
    before = state()
    point = container.evaluate(HOVER_POINT_JS)
    if point is None:
        quiet.append("it has no marks to hover")
    else:
        page.mouse.move(point["x"], point["y"], steps=4)
        page.wait_for_timeout(CHART_SETTLE_MS)
        after = state()
        if after["drawing"] == before["drawing"] and not after["tooltip"]:
            quiet.append("hovering its marks changed nothing (no highlight, no tooltip)")
    page.mouse.move(1, 1)

    # Every control, one after the other.
    for number, control in enumerate(chart["controls"]):
        before = state()
        _change_control(container.locator(".vega-bindings .vega-bind").nth(number), control["kind"])
        page.wait_for_timeout(CHART_SETTLE_MS)
        if state()["drawing"] == before["drawing"]:
            quiet.append(f"changing its control {control['name']!r} ({control['kind']}) redrew nothing")

    # A legend that filters: click its first entry.
    if chart["legendFilter"]:
        before = state()
        symbol = container.locator("svg g.role-legend-symbol path").first
        box = symbol.bounding_box() if symbol.count() else None
        if box is None:
            quiet.append("its legend filters, but it has no entries to click")
        else:  # the pointer, not the element: Vega finds the legend entry under it
            page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.wait_for_timeout(CHART_SETTLE_MS)
            if state()["drawing"] == before["drawing"]:
                quiet.append("clicking its legend filtered nothing")
    return quiet


def check_charts(page, expected: int | None = None) -> tuple[int, list[str]]:
    """The interactive charts of an open page: (how many drew and respond, the problems). Each must
    draw marks, change when the pointer moves onto its marks, redraw when any of its controls
    changes, and filter when its legend is clicked if the legend filters. `expected`: how many
    charts the page must have (None: any number)."""
    charts = page.evaluate(CHARTS_JS, PAGE_TIMEOUT_MS)
    problems = []
    if expected is not None and len(charts) != expected:
        problems.append(f"expected {expected} interactive charts, found {len(charts)}")
    good = 0
    for index, chart in enumerate(charts):
        if chart["state"] != "drawn" or not (chart["marks"] or chart["canvas"]):
            why = chart["error"] or ("no marks in its SVG" if chart["state"] == "drawn" else chart["state"])
            problems.append(f"chart {index + 1} did not draw ({why})")
            continue
        quiet = _unresponsive(page, page.locator("div.vega-chart").nth(index), chart)
        if quiet:
            problems.append(f"chart {index + 1} does not respond: " + "; ".join(quiet))
        else:
            good += 1
    return good, problems


def expected_charts(notebook: Path) -> int:
    """How many interactive charts (Vega-Lite outputs) the notebook behind a page has."""
    if notebook.suffix != ".ipynb" or not notebook.is_file():
        return 0
    cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
    return sum(1 for cell in cells for output in cell.get("outputs", [])
               if any(mime.startswith("application/vnd.vegalite.") for mime in output.get("data", {})))


def check_page(context, path: Path, site: Path, numbering: Numbering | None = None,
               charts: int | None = None) -> PageReport:
    """Open one built page in `context` (a Playwright BrowserContext from browser()), offline, and
    report every problem a reader would meet on it (see the module's docstring). `charts`: how many
    interactive charts the page must have (None: any number; each must draw and respond)."""
    start = time.perf_counter()
    report = PageReport(path)
    requested, failed, errors = [], [], []

    def route(route) -> None:
        url = route.request.url
        if url.startswith(LOCAL_SCHEMES):
            route.continue_()
        else:
            requested.append(f"{route.request.resource_type} {url}")
            route.abort("internetdisconnected")

    def request_failed(request) -> None:
        if request.url.startswith("file:"):
            failed.append(f"{request.resource_type} {unquote(urlsplit(request.url).path)}")

    page = context.new_page()
    page.route("**/*", route)
    page.on("requestfailed", request_failed)
    page.on("pageerror", lambda error: errors.append(str(error).splitlines()[0]))
    try:
        page.goto(path.resolve().as_uri(), wait_until="load", timeout=PAGE_TIMEOUT_MS)
        data = page.evaluate(COLLECT_JS, PAGE_TIMEOUT_MS)
        report.charts, chart_problems = check_charts(page, charts)
    finally:
        page.close()

    problems = report.problems
    if requested:
        problems.append(f"asked for the network ({len(requested)}): {_examples(requested)}")
    if failed:
        problems.append(f"local files missing ({len(failed)}): {_examples(failed)}")
    if errors:
        problems.append(f"script errors ({len(errors)}): {_examples(errors)}")
    report.math = data["math"]
    report.typeset = data["math"] - len(data["untypeset"])
    if data["math"] and data["mathjax"] != "typeset":
        problems.append(f"MathJax did not typeset the page (MathJax: {data['mathjax']})")
    if data["untypeset"]:
        untypeset = data["untypeset"]
        problems.append(f"formulas not typeset ({len(untypeset)} of {data['math']}): {_examples(untypeset)}")
    if data["mathErrors"]:
        problems.append(f"TeX errors ({len(data['mathErrors'])}): {_examples(data['mathErrors'])}")
    if data["rawTex"]:
        problems.append(f"raw TeX in the text ({len(data['rawTex'])}): {_examples(data['rawTex'])}")
    report.images = data["images"]
    if data["brokenImages"]:
        problems.append(f"images not loaded ({len(data['brokenImages'])}): {_examples(data['brokenImages'])}")
    if data["failedFonts"]:
        problems.append(f"fonts not loaded: {_examples(sorted(set(data['failedFonts'])))}")
    broken, report.internal_links, report.external_links = broken_links(data["links"], site)
    if broken:
        problems.append(f"broken links ({len(broken)}): {_examples(broken)}")
    if data["notebookErrors"]:
        problems.append(
            f"notebook errors in outputs ({len(data['notebookErrors'])}): {_examples(data['notebookErrors'])}"
        )
    if data["directives"]:
        problems.append(
            f"nbdev directives visible ({len(data['directives'])}): {_examples(data['directives'])}"
        )
    if data["headerBar"]:
        problems.append("a header bar across the top of the page (a second search field)")
    report.code_blocks = data["codeBlocks"]
    if data["wide"]:
        problems.append(
            f"scrolls sideways in a {data['window']}-pixel window ({len(data['wide'])} of "
            f"{data['codeBlocks']} code blocks): {_examples(data['wide'])}"
        )
    if numbering is not None:
        problems.extend(numbering_problems(data, numbering))
    problems.extend(chart_problems)
    report.seconds = time.perf_counter() - start
    return report


@contextmanager
def browser(chromium: str = CHROMIUM) -> Iterator[object]:
    """A fresh headless Chromium (a new, empty profile) and a BrowserContext to open pages in."""
    from playwright.sync_api import sync_playwright

    if not Path(chromium).exists():
        raise FileNotFoundError(
            f"no Chromium at {chromium}: install Debian's (apt-get install chromium), or give "
            "--chromium PATH (never `playwright install`: it downloads a browser)"
        )
    with tempfile.TemporaryDirectory(prefix="browser-test-profile-") as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_ARGS,
            service_workers="block",
            viewport=VIEWPORT,
        )
        try:
            yield context
        finally:
            context.close()


def book_pages(root: Path = ROOT, site: Path = SITE) -> list[tuple[Path, Numbering]]:
    """Every page _toc.yml lists, with the numbering it must show: the root (the cover, no number),
    the chapters of the numbered parts, numbered 1, 2, ... across parts, and the pages of the
    unnumbered parts (the conclusion, an appendix), without a number."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    parts = toc.get("parts", [{"chapters": toc.get("chapters", []), "numbered": True}])

    def files(numbered: bool) -> list[str]:
        return [chapter["file"] for part in parts for chapter in part.get("chapters", [])
                if (part.get("numbered") is True) == numbered]

    chapters, others = files(True), files(False)
    pages = [(site / f"{Path(toc['root']).with_suffix('')}.html", Numbering(None, len(chapters)))]
    pages += [
        (site / f"{Path(file).with_suffix('')}.html", Numbering(number, len(chapters)))
        for number, file in enumerate(chapters, start=1)
    ]
    pages += [
        (site / f"{Path(file).with_suffix('')}.html", Numbering(None, len(chapters))) for file in others
    ]
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=SITE, help="the built book (default: _build/html)")
    parser.add_argument("--chromium", default=CHROMIUM, help=f"the browser (default: {CHROMIUM})")
    args = parser.parse_args(argv)

    site = args.site.resolve()
    pages = book_pages(ROOT, site)
    missing = [path for path, _ in pages if not path.is_file()]
    if missing:
        print(f"browser-test: pages missing from {site}: {[str(p) for p in missing]}: build the book first "
              "(make book)", file=sys.stderr)
        return 2
    start = time.perf_counter()
    reports = []
    with browser(args.chromium) as context:
        for path, numbering in pages:
            notebook = ROOT / path.relative_to(site).with_suffix(".ipynb")
            report = check_page(context, path, site, numbering, charts=expected_charts(notebook))
            reports.append(report)
            print(report.summary(site), flush=True)
    seconds = time.perf_counter() - start
    bad = [report for report in reports if report.problems]
    formulas = sum(report.typeset for report in reports), sum(report.math for report in reports)
    print(
        f"browser-test: {len(reports)} pages, {len(reports) - len(bad)} clean, {len(bad)} with problems "
        f"({sum(len(r.problems) for r in bad)} problems); {formulas[0]}/{formulas[1]} formulas typeset, "
        f"{sum(r.images for r in reports)} images, {sum(r.code_blocks for r in reports)} code blocks, "
        f"{sum(r.internal_links for r in reports)} internal links, "
        f"{sum(r.charts for r in reports)} interactive charts; "
        f"offline, {seconds:.1f} s"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
