"""Sphinx extension: include each script only once in a page.

sphinx-thebe (loaded by Jupyter Book even with thebe off) adds its configuration script, which
declares `const THEBE_JS_URL`, to the builder and to Sphinx's registry, and Sphinx 7 puts both copies
in every page: the second declaration is a script error in every page's console. This drops exact
duplicates (same file or inline body, same attributes) from the scripts of each page.

Registered in _config.yml (`sphinx: local_extensions: dedupe_scripts: tools/sphinx_ext`).
"""

from __future__ import annotations


def _key(script) -> tuple:
    # Sphinx 7.4 passes _JavaScript objects (filename, priority, attributes); older ones strings.
    # An inline script's filename is None or "" depending on who added it: the same script.
    filename = getattr(script, "filename", script) or ""
    attributes = getattr(script, "attributes", {})
    return (str(filename), tuple(sorted((k, str(v)) for k, v in attributes.items())))


def dedupe(scripts: list) -> list:
    seen, unique = set(), []
    for script in scripts:
        key = _key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    return unique


def _on_html_page_context(app, pagename, templatename, context, doctree) -> None:
    if "script_files" in context:
        context["script_files"] = dedupe(context["script_files"])


def setup(app):
    # After the other extensions' handlers (the default priority is 500).
    app.connect("html-page-context", _on_html_page_context, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
