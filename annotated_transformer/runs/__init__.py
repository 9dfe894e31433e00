"""The run layer: a training run's files and sessions, above the chapters whose code they run.

- `run_directory` (above chapter 10): the files of one run (its recipe, history, machine and lock),
  how each is kept, checked and restored; `Run`, an open run directory.
- `long_run` (above chapter 10): one session of a run, resumed, trained to its number of steps or its
  time limit, with its checkpoints and history.
- `recipe_files` (above chapter 13): chapter 14's recipe as one flat dict of settings and back, and a
  run's fingerprints; a trained model read back with its vocabulary.
- `pretrained` (above chapter 14): the translators that ship with the package.
"""
