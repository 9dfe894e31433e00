"""Sphinx extension: hide nbdev's directives in the book, and only there.

The chapters in book/ are the source of the package: nbdev reads `#| default_exp attention`,
`#| export` and the like at the top of their code cells. A reader of the book has no use for them,
so this extension removes every line that starts with `#|` from the code cells the book shows, and
drops a cell whose whole source is directives (and that has no output), such as the
`#| default_exp ...` cell near the top of every chapter. The notebooks stay as they are: only the
built pages (and the search index, which is made from the same document tree) change.

Registered in _config.yml:

    sphinx:
      local_extensions:
        hide_nbdev_directives: tools/sphinx_ext
"""

from __future__ import annotations

import re

from docutils import nodes

# nbdev accepts `#|` with spaces around it (`# | export`); the book writes `#| export`.
DIRECTIVE = re.compile(r"^\s*#\s*\|")


def strip_directives(code: str) -> str:
    """`code` without its nbdev directive lines and without the blank lines they leave at the top."""
    lines = code.splitlines()
    if not any(DIRECTIVE.match(line) for line in lines):
        return code
    lines = [line for line in lines if not DIRECTIVE.match(line)]
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines)


def _is_nb_element(node: nodes.Node, name: str) -> bool:
    return isinstance(node, nodes.container) and node.get("nb_element") == name


def hide_directives(doctree: nodes.document) -> int:
    """Strip the directives from every notebook code cell of `doctree`; returns how many cells changed.

    myst-nb renders a code cell as container(nb_element="cell_code") holding
    container(nb_element="cell_code_source") with the source as a literal_block, followed by
    container(nb_element="cell_code_output") when the cell has outputs.
    """
    changed = 0
    for source in list(doctree.findall(lambda node: _is_nb_element(node, "cell_code_source"))):
        emptied = False
        for block in list(source.findall(nodes.literal_block)):
            text = block.astext()
            stripped = strip_directives(text)
            if stripped == text:
                continue
            changed += 1
            if stripped.strip():
                block[:] = [nodes.Text(stripped)]
                block.rawsource = stripped
            else:
                block.parent.remove(block)
                emptied = True
        if emptied and next(source.findall(nodes.literal_block), None) is None:
            cell = source.parent
            cell.remove(source)
            # Nothing left to show (no output either): drop the whole cell.
            if _is_nb_element(cell, "cell_code") and not any(
                _is_nb_element(child, "cell_code_output") for child in cell.children
            ):
                cell.parent.remove(cell)
    return changed


def _on_doctree_read(app, doctree: nodes.document) -> None:
    hide_directives(doctree)


def setup(app):
    app.connect("doctree-read", _on_doctree_read)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
