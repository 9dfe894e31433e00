"""The package's machinery: plain Python that the book uses but does not teach.

The modules at the package's top level are generated from the chapters (nbdev); the modules of
this subpackage are written by hand, documented and tested as ordinary code (CONTRIBUTING.md).

- `figures`: the result files the package ships, and `glue`, which hands a figure a chapter computed
  to the book's prose (MyST-NB's `{glue:text}` role).
- `checks`: the checks of what a function is given (sentences, sentence pairs, counts), refused in
  one line that names the argument.
- `vocabulary_files`: the file of chapter 13's `Vocabularies`, and its fingerprint.
- `corpus_cache`: the cache of encoded corpora (chapter 13's `encode_pairs`, computed once).
"""
