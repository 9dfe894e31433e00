"""The command line, `python -m annotated_transformer` (chapter 16 shows it at work): the top layer.

- `commands`: the commands and their options (`build_parser`, `main`).
- `recipe_options`: a recipe's settings as options of `train`.
- `command_files`: the files a command reads and writes.
- `experiment_command` (chapter 18): the `experiment` command, the variants of an experiment trained from a
  shell; the package's `__main__` (chapter 19) adds it to the commands.
"""
