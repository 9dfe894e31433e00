"""The run layer: a training run's files and sessions, above the chapters whose code they run.

- `run_files`: a run directory's files (its recipe, history, machine and lock), how each is kept,
  checked and restored (chapter 10 shows it at work).
- `long_run`: one session of a run, resumed, trained to its number of steps or its time limit, with
  its checkpoints, its history and a cooldown fitted to the clock (`ClockFit`, chapter 10).
- `translation` (generated from chapter 14): `train_translation`, a recipe trained in a run directory;
  `bookkeeping`: what its session keeps besides the training (`RunBookkeeping`: device, rank, lock,
  recipe, fingerprints, warnings, the finish); `translation_files`: the run's vocabularies
  (`load_vocabularies`) and what it leaves (`TrainingRun`).
- `variant_runs` (chapter 18): `run_variants`, the variants of an experiment as runs, and their results
  as a table (`results_table`) and a figure (`plot_variations`).
- `fingerprints`: what every checkpoint of a run records about it, and the vocabulary checks of a run.
- `pretrained`: the translators that ship with the package.
"""
