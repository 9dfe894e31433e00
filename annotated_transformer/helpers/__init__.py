"""Leaf helpers: plain Python that the chapters' modules use, and that imports nothing of the package.

- `errors`: `Setting`, `SettingsMessage`, `FieldError` and `field_error`, errors that name the
  settings they are about, spelled as Python or the command line spells them (chapter 3 on).
- `input_checks`: what a function is given (sentences, sentence pairs, counts), refused in one line
  that names the argument.
- `tensor_checks`: what the model's functions are given as tensors (attention masks, token ids,
  positions, a loss's logits and targets), refused with a message that says how to fix it.
- `batch_checks`: what chapter 6's batching is given (sentence pairs, their lengths, a share of the
  batches), refused before any tensor is built.
- `dropout_masks`: `dropout_keep_mask`, dropout's random mask from 16 random bits per component
  (chapter 4's `Dropout` on a CPU).
- `harvard_form`: the Harvard notebook's `make_model(src_vocab, tgt_vocab, N=2)` read into the
  fields of a `TransformerConfig` (chapter 5's `make_model`).
- `config_fingerprint`: `config_sha256`, the fingerprint of a model configuration that checkpoints carry.
- `quick`: `quick_mode`, the book's switch that shrinks every chapter's training to seconds.
- `random_state`: `rng_state` and `set_rng_state`, every random generator training draws from
  (chapter 9's `Trainer.state_dict`).
- `shell`: a command run as a shell would run it (`as_a_shell`, `python_m`), for chapter 16's cells.
- `cell_classes`: `add_to_class`, a class written over several notebook cells (chapter 9's `Trainer`).
- `model_wrappers`: `unwrap_model`, the plain model inside `torch.compile`'s and DDP's wrappers.
- `torch_support`: what this machine and this torch can do (`torch.compile`, a precision), and the
  allocator setting of a run on a CPU.
- `processes`: which process of a distributed run this is (`is_main_process`: rank 0 writes).
- `files`: the one way the package writes a file (`atomic_write`: a temporary file, flushed and
  renamed over its target), and a full disk said in one line (`DiskFullError`; chapter 10).
- `progress`: `Progress`, what training shows while it runs.
- `prefetch`: `prefetched`, the next micro-batches built in a background thread.
- `book_figures`: the result files the package ships, and `glue`, which hands a figure a chapter
  computed to the book's prose (`glue_all`: many figures at once).
- `search_tables`: the appendix's tables of the CPU recipe search, and the runs each choice rests on.
- `collected_tests`: how many tests a test file holds and a run reported (chapter 20's GPU tests).
- `architecture_figure`: `draw_architecture`, the paper's Figure 1 redrawn (chapter 1).
- `attention_grid`: the grid of heatmaps that draws attention maps (chapters 14 and 20).
- `verdicts`: `judge`, the appendix's rule for "better", "worse" or "tie" as code (Student's t at
  the 5% level, the seed noise a `Noise` record measured from runs; `holm` for a family).
- `notebook_charts`: Altair's charts as Vega-Lite outputs, which the book draws offline (the
  interactive charts of chapters 7, 14 and 17; Altair is a dependency of the book only).
"""
