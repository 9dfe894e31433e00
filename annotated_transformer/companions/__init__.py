"""Companions of the chapters: hand-written modules that sit beside one chapter's modules, import
only that chapter's and earlier ones, and are used by that chapter and later ones.

- `schedule_explorer` (chapter 7): §5.3's learning-rate schedule as an interactive chart (Altair, for
  the book).
- `chunked_loss` (chapter 8): the output layer and the label-smoothed loss a chunk of rows at a time
  (`projected_smoothed_loss`), for a large vocabulary's memory.
- `training_checks` (chapter 9): the range checks of a `TrainConfig`, and `TrainingDiverged`, the
  error of a run whose loss or gradient became NaN or infinite.
- `hardware` (chapter 9, §5.2): the device a run uses (`default_device`), checked before any work,
  the settings of the whole process that make training on it faster (`configure_process`), and a
  description of the machine.
- `run_directory` (chapter 10): where each file of a run directory lives (`RunDirectory`).
- `checkpoint_upgrades` (chapter 10): the checkpoints that earlier releases wrote (format versions 1
  and 2), their digests checked and their contents given today's layout.
- `checkpoint_checks` (chapter 10): what reading a checkpoint checks (its digest, its parameters, the
  model it fits) and the errors it raises (`CheckpointError`, `CheckpointMismatch`).
- `decoding_checks` (chapter 11): what the searches and checkpoint averaging are given (a batch of
  source sentences, a beam size, a maximum length, checkpoints of one model and one run).
- `multi30k_files` (chapter 12): Multi30k's files, downloaded atomically, checked against their pinned
  SHA-256 and found in a folder or the cache (`multi30k_path`), and `DataError`, which says what to do.
- `vocabulary_files` (chapter 13): the file of a translation direction's `Vocabularies`
  (`vocab.json`), read, written and fingerprinted.
- `corpus_cache` (chapter 13): the cache of encoded corpora, and BPE-dropout's new sample of the
  training words every epoch (`training_batches`).
- `batch_sequence` (chapter 13): `BatchSequence`, an epoch's token batches, padded when each is asked for.
- `vocabulary_figures` (chapter 13): the figure that compares word vocabularies with a joint BPE.
- `recipe_settings` (chapter 14): a recipe as one flat dict of its settings and back, and its checks.
- `translation_checks` (chapter 14): what training and translating say about their input.
- `trained_models` (chapter 14): a trained model read back with its vocabulary (`Translator.load`).
- `attention_explorer` (chapter 14): the attention maps as an interactive chart (Altair, for the book).
- `distributed_check` (chapter 15): the check that two processes train as one (`equivalence_worker`,
  the worker each spawned rank runs, and `free_port`).
- `layer_comparison` (chapter 17): the tables and figures of the chapter's comparison of layers
  (Table 1's costs as an interactive chart, the timing sweeps, the path lengths).
- `layer_norm_figures` (chapter 19): the training curves of post-LN and pre-LN runs, as a figure and
  as an interactive chart.
"""
