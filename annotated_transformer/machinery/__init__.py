"""The package's machinery: plain Python that the book uses but does not teach.

The modules at the package's top level are generated from the chapters (nbdev); the modules of
this subpackage are written by hand, documented and tested as ordinary code (CONTRIBUTING.md).

- `figures`: the result files the package ships, and `glue`, which hands a figure a chapter computed
  to the book's prose (MyST-NB's `{glue:text}` role).
- `classes`: `add_to_class`, a class written over several notebook cells (chapter 9's `Trainer`).
- `progress`: `Progress`, what training shows while it runs.
- `prefetch`: `prefetched`, the next micro-batches built in a background thread.
- `training_checks`: `check_train_config`, the range checks of a `TrainConfig`.
- `wrappers`: `unwrap_model`, the plain model inside `torch.compile`'s and DDP's wrappers.
- `platform`: what this machine can do (`check_compile_support`, `check_precision_support`) and the
  allocator setting of a run on a CPU (`reuse_freed_memory`).
- `processes`: which process of a distributed run this is (`is_main_process`: rank 0 writes the
  run's files).
- `run_directory`: the files of one run (its recipe, history, machine and lock), how each is kept,
  checked and restored.
- `long_run`: one session of a run, resumed, trained to its number of steps or its time limit, with
  its checkpoints, its history and a cooldown fitted to the clock (`ClockFit`).
- `hardware`: the device a run uses, checked before any work, and a description of the machine.
- `command_files`: the files a command of chapter 16 reads and writes.
- `recipe_files`: chapter 14's recipe as one flat dict of settings and back (older files included),
  its own checks, and a run's fingerprints; a trained model read back with its vocabulary.
- `translation_checks`: what chapter 14's training and translating say about their input.
- `attention_grid`: the grid of heatmaps that draws attention maps (chapters 14 and 20).
- `cli` and `recipe_options`: the command line, `python -m annotated_transformer` (chapter 16 shows it
  at work).
- `checks`: the checks of what a function is given (sentences, sentence pairs, counts), refused in
  one line that names the argument.
- `vocabulary_files`: the file of chapter 13's `Vocabularies`, and its fingerprint.
- `corpus_cache`: the cache of encoded corpora (chapter 13's `encode_pairs`, computed once).
"""
