"""The package's machinery: plain Python that the book uses but does not teach.

The modules at the package's top level are generated from the chapters (nbdev); the modules of
this subpackage are written by hand, documented and tested as ordinary code (CONTRIBUTING.md).

- `figures`: the result files the package ships, and `glue`, which hands a figure a chapter computed
  to the book's prose (MyST-NB's `{glue:text}` role).
- `recipe_files`: chapter 14's recipe as one flat dict of settings and back (older files included),
  its own checks, and a run's fingerprints; a trained model read back with its vocabulary.
- `translation_checks`: what chapter 14's training and translating say about their input.
- `attention_grid`: the grid of heatmaps that draws attention maps (chapters 14 and 20).
"""
