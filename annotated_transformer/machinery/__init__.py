"""The package's machinery: plain Python that the book uses but does not teach.

The modules at the package's top level are generated from the chapters (nbdev); the modules of
this subpackage are written by hand, documented and tested as ordinary code (CONTRIBUTING.md).

- `figures`: the result files the package ships, and `glue`, which hands a figure a chapter computed
  to the book's prose (MyST-NB's `{glue:text}` role).
- `cli` and `recipe_options`: the command line, `python -m annotated_transformer` (chapter 16 shows it
  at work).
"""
