"""The command line, `python -m annotated_transformer` (chapter 16 shows it at work): the top layer.

- `commands`: the commands and their options (`build_parser`, `main`).
- `recipe_options`: a recipe's settings as options of `train`.
- `command_files`: the files a command reads and writes.
"""
