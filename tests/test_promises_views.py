"""Promises held at values where a bug shows (issue 62): what a view shows, what a seed draws, and
what a run directory records about its machine.

1. Views of the model. Chapter 14's attention explorer (companions/attention_explorer.py) shows, for
   every sentence, map, layer and head, the weights of that very attention module: each row of
   `_weight_rows` is compared with weights computed here from the queries and keys each module of the
   model receives and its own projections, on a model of 3 layers and 2 heads whose layers, heads and
   sentences all differ (checked, so that a layer or a head shown as another cannot pass unnoticed);
   so is `attention_maps`, which the explorer reads. The chart opens on the last layer and offers
   every layer and head of the model, and its pieces are the sentence's and its translation's.
2. Seeds that every side of a pair must use. BPE-dropout's sample (both the source and the target side)
   changes with the seed and with the epoch and is the same for the same ones; the training batches
   of a run draw the sample of the run's seed; token batching draws, from the seed and the epoch, both
   which pairs share a batch (the tie break) and the order of the batches (the shuffle); batches of
   sentences and the batch samplers shuffle with their seed; a trainer's seed draws its dropout masks.
   Each at sizes where two samples agree by chance with a negligible probability.
3. Recorded facts that one machine alone cannot check. hardware.json (`describe_hardware`, written by
   a run's first session), chapter 17's `describe_machine` and the training fingerprint's
   `cpu_identity` record the CPU, its float32 kernel family, torch's version and threads, the cores
   and processes: each is patched to two different values, and the record must follow each.
4. The attention explorer's chart as a reader sees it: rendered to SVG (vl-convert) at its opening view
   and at two others, its cells' colours are the chosen sentence's, map's, layer's and head's weights,
   its axes name that map's pieces, its bars are the hovered row's weights, its titles, legend, tooltips
   and choices are labelled; and `_weight_rows` is called afresh, so that its checks above do not rest on
   the fixture's one call.
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from helpers import assert_identical, copy_batches, need_dev_module, parameters, tiny_trainer
from torch import Tensor

import annotated_transformer.companions.attention_explorer as explorer
from annotated_transformer.attention_plots import attention_maps
from annotated_transformer.batching import (
    TokenBatchSampler,
    batch_by_sentences,
    batch_by_tokens,
    make_batch,
    shard_batches,
)
from annotated_transformer.companions import hardware, layer_comparison
from annotated_transformer.companions.corpus_cache import _dropout_epochs, training_batches
from annotated_transformer.data import builtin_corpus
from annotated_transformer.distributed import DistributedTokenBatchSampler
from annotated_transformer.model import Transformer, TransformerConfig, make_model
from annotated_transformer.multi_head_attention import MultiHeadAttention
from annotated_transformer.runs.long_run import LongRun
from annotated_transformer.tokenization import EncodedPairs, encode_pairs, token_batches
from annotated_transformer.translator import Translator

# --- 1. the attention explorer shows each module's own weights ----------------------------------------

N_LAYERS, N_HEADS = 3, 2  # unequal, so that layers and heads taken for each other show
KINDS = ("cross", "encoder", "decoder")  # the maps m = 0, 1, 2 of the chart (its radio buttons' order)
SENTENCES = [de for de, _ in builtin_corpus("test")[:2]]
SLACK = 0.5 + 1e-3  # hundredths: a rounded weight vs the exact one (float error at a .5 included)
APART = 2.0  # hundredths by which any two maps must differ somewhere, far beyond SLACK


@pytest.fixture(scope="module")
def translator(bpe_vocabs) -> Translator:
    """A random model of 3 layers and 2 heads over the shared BPE vocabulary. Its translations never
    end (no EOS), so they run to source length + 50 tokens: max_len 128 leaves room for [BOS] + all
    of them when the maps are read under teacher forcing."""
    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab_size=len(bpe_vocabs.source), tgt_vocab_size=len(bpe_vocabs.target), n_layers=N_LAYERS,
        d_model=32, d_ff=64, n_heads=N_HEADS, dropout=0.0, max_len=128, share_embeddings=bpe_vocabs.shared,
    )
    return Translator(make_model(config), bpe_vocabs, "cpu", beam_size=1)


def modules(model: Transformer) -> dict[str, list[MultiHeadAttention]]:
    return {"cross": [layer.src_attn for layer in model.decoder.layers],
            "encoder": [layer.self_attn for layer in model.encoder.layers],
            "decoder": [layer.self_attn for layer in model.decoder.layers]}


def head_weights(module: MultiHeadAttention, query: Tensor, key: Tensor, mask: Tensor) -> Tensor:
    """softmax(Q_i K_iᵀ / √d_k) of every head i of `module` (one sentence), in float64: (h, queries, keys)."""
    def split(x: Tensor) -> Tensor:
        return x[0].double().view(x.size(1), module.n_heads, module.d_k).transpose(0, 1)

    q, k = split(module.w_q(query)), split(module.w_k(key))
    scores = q @ k.transpose(-2, -1) / math.sqrt(module.d_k)
    return scores.masked_fill(~mask[0], -math.inf).softmax(dim=-1)


@torch.no_grad()
def reference_maps(model: Transformer, source: list[int], target: list[int]) -> dict[str, Tensor]:
    """Each kind's (layers, heads, queries, keys) weights, computed from what every attention module
    receives in one teacher-forced pass (a pre-hook keeps its query, key and mask), not read from it."""
    received: dict[MultiHeadAttention, tuple] = {}

    def keep(module: MultiHeadAttention, args: tuple) -> None:  # None: the inputs go on unchanged
        received[module] = args[0], args[1], args[3]  # query, key, mask

    groups = modules(model)
    hooks = [m.register_forward_pre_hook(keep) for group in groups.values() for m in group]
    batch = make_batch([(source, target)])
    try:
        model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    finally:
        for hook in hooks:
            hook.remove()
    return {kind: torch.stack([head_weights(m, *received[m]) for m in group])
            for kind, group in groups.items()}


@pytest.fixture(scope="module")
def views(translator) -> dict:
    """The explorer's rows and labels, each sentence's source and translation ids and reference maps."""
    sources = [translator.vocabs.source.encode(sentence) for sentence in SENTENCES]
    targets = translator.translate_ids(sources)
    references = [reference_maps(translator.model, s, t) for s, t in zip(sources, targets, strict=True)]
    labels, rows = explorer._weight_rows(translator, SENTENCES)
    return {"sources": sources, "targets": targets, "references": references, "labels": labels, "rows": rows}


def max_gap(a: Tensor, b: Tensor) -> float:
    return (a - b).abs().max().item() if a.shape == b.shape else math.inf


def test_the_models_layers_heads_and_sentences_differ_in_every_map(views):
    """The test's own premise: any two (layer, head) maps of a kind, and the two sentences' maps,
    differ by over 2 hundredths somewhere, so that showing one for another cannot pass."""
    first, second = views["references"]
    for kind in KINDS:
        assert max_gap(100 * first[kind], 100 * second[kind]) > APART, kind
    for maps in views["references"]:
        for kind in KINDS:
            flat = (100 * maps[kind]).flatten(0, 1)  # (layers · heads, queries, keys)
            gaps = [max_gap(flat[i], flat[j]) for i in range(len(flat)) for j in range(i)]
            assert min(gaps) > APART, (kind, gaps)


def shown(row: dict) -> Tensor:
    """A row's weights as the chart reads them: hundredths, queries split by ";", keys by spaces."""
    return torch.tensor([[int(w) for w in query.split(" ")] for query in row["w"].split(";")],
                        dtype=torch.float64)


def test_every_row_of_the_chart_is_its_sentences_maps_layers_and_heads_weights(views):
    """Row (s, m, l, h) holds round(100 · weights) of sentence s, map KINDS[m], layer l and head h
    (both from 1), once each: a layer or a head counted from 0, reversed or taken for another, a map
    or a sentence swapped, shows."""
    rows = views["rows"]
    keys = [(row["s"], row["m"], row["l"], row["h"]) for row in rows]
    expected = [(s, m, layer, head) for s in range(len(SENTENCES)) for m in range(len(KINDS))
                for layer in range(1, N_LAYERS + 1) for head in range(1, N_HEADS + 1)]
    assert sorted(keys) == expected
    for row in rows:
        reference = 100 * views["references"][row["s"]][KINDS[row["m"]]][row["l"] - 1, row["h"] - 1]
        assert max_gap(shown(row), reference) <= SLACK, (row["s"], row["m"], row["l"], row["h"])


def test_attention_maps_are_the_weights_of_each_layers_and_heads_own_module(translator, views):
    """`attention_maps` (what the explorer and chapter 14's figures draw) gives, at [layer, head], the
    weights of that layer's module and that head: checked against weights computed from what each
    module received, to float32 precision."""
    cases = zip(views["sources"], views["targets"], views["references"], strict=True)
    for source, target, reference in cases:
        maps = attention_maps(translator.model, source, target)
        assert set(maps) == set(KINDS)
        for kind in KINDS:
            torch.testing.assert_close(maps[kind].double(), reference[kind], atol=1e-5, rtol=1e-5)


def test_a_translation_that_never_ended_is_read_up_to_the_models_positions(translator, views):
    """A translation cut at max_len (no end of sentence) fills every position the model has: read
    after [BOS], its last piece, which predicts nothing, is left out, and the maps cover the rest."""
    source, target = views["sources"][0], views["targets"][0]
    max_len = translator.model.config.max_len
    long = (target * (max_len // len(target) + 1))[:max_len]  # max_len pieces: one past the table
    maps = attention_maps(translator.model, source, long)
    assert maps["decoder"].shape[-2:] == (max_len, max_len) and maps["cross"].shape[-2] == max_len
    reference = reference_maps(translator.model, source, long[: max_len - 1])
    torch.testing.assert_close(maps["decoder"].double(), reference["decoder"], atol=1e-5, rtol=1e-5)


def words_of(pieces: list[str]) -> list[str]:
    """The words that the explorer's pieces spell: a piece ending in "-" continues into the next."""
    return "".join(piece[:-1] if piece.endswith("-") else piece + " " for piece in pieces).split()


def test_the_charts_pieces_are_each_sentences_encoding_and_its_translation(translator, views):
    """Sentence s's labels: its number and text, one source piece per source id spelling the words
    the model read, and "<bos>" and one piece per id of its translation, spelling that: the axes of
    its maps, so that a source and a target swapped or a piece lost shows."""
    vocabs = translator.vocabs
    assert len(views["labels"]) == len(SENTENCES)
    for s, (label, sentence, source, target) in enumerate(
            zip(views["labels"], SENTENCES, views["sources"], views["targets"], strict=True)):
        assert label["label"] == f"{s + 1}. {sentence}"
        assert len(label["src"]) == len(source) and words_of(label["src"]) == vocabs.source.words(source)
        assert label["tgt"][0] == "<bos>" and len(label["tgt"]) == 1 + len(target)
        assert words_of(label["tgt"][1:]) == vocabs.target.words(target)
        assert words_of(label["src"]) == vocabs.source.tokenizer.pipe([sentence])[0]


def test_the_chart_opens_on_the_last_layer_and_offers_every_layer_and_head(translator, views, monkeypatch):
    """The chart's choices: the model's 3 layers (opened on the last, the closest to an alignment), its
    2 heads, the three maps in the rows' order m, the sentences; its data and pieces are the rows and
    labels above (reused: `_weight_rows` is checked to be called with the translator and sentences)."""
    need_dev_module("altair")

    def weight_rows(given, sentences):
        assert given is translator and list(sentences) == SENTENCES
        return views["labels"], views["rows"]

    monkeypatch.setattr(explorer, "_weight_rows", weight_rows)
    spec = explorer.attention_explorer(translator, SENTENCES).to_dict(validate=False)
    params = {param["name"]: param for param in spec["params"]}
    assert params["layer"]["value"] == N_LAYERS and params["layer"]["bind"]["options"] == [1, 2, 3]
    assert params["head"]["value"] == 1 and params["head"]["bind"]["options"] == [1, 2]
    assert params["attention"]["bind"]["options"] == [0, 1, 2]
    assert params["attention"]["bind"]["labels"] == [explorer.MAPS[kind] for kind in KINDS]
    assert params["sentence"]["bind"]["options"] == [0, 1]
    assert params["sentence"]["bind"]["labels"] == [label["label"] for label in views["labels"]]
    assert params["tokens"]["value"] == views["labels"] and spec["data"]["values"] == views["rows"]


# --- 2. a seed that every side of a pair uses ---------------------------------------------------------

DROPOUT = 0.1
MAX_TOKENS = 800


@pytest.fixture(scope="module")
def pairs() -> list[tuple[str, str]]:
    """300 training pairs: a few thousand words, each segmented anew by BPE-dropout 0.1."""
    return builtin_corpus("train")[:300]


@pytest.fixture(scope="module")
def encoded(pairs, bpe_vocabs) -> EncodedPairs:
    return encode_pairs(pairs, bpe_vocabs)


def test_bpe_dropout_samples_both_sides_anew_for_each_seed_and_epoch(pairs, bpe_vocabs):
    """The source and the target ids both change with the seed and with the epoch, and are the same
    for the same seed and epoch: a side drawn from a generator of a constant seed or epoch shows."""
    # `again`: a second sampler of seed 1, with generators of its own.
    one, two, again = (_dropout_epochs(pairs, bpe_vocabs, DROPOUT, seed=seed) for seed in (1, 2, 1))
    assert again(3) == one(3)
    for side in ("source", "target"):
        seed_1, seed_2, epoch_4 = (getattr(sample, side) for sample in (one(3), two(3), one(4)))
        assert seed_1 != seed_2, f"the {side} side ignores the seed"
        assert seed_1 != epoch_4, f"the {side} side ignores the epoch"


def test_a_runs_training_batches_batch_the_sample_of_its_seed_on_every_rank(pairs, encoded, bpe_vocabs):
    """training_batches(seed=s) batches BPE-dropout's sample of seed s (not of seed 0), alone and on
    each of two ranks; seeds 1 and 2 give different samples."""
    for seed in (1, 2):
        sample = _dropout_epochs(pairs, bpe_vocabs, DROPOUT, seed=seed)(1)
        assert training_batches(pairs, encoded, bpe_vocabs, DROPOUT, MAX_TOKENS, seed=seed)(1).data == sample
        for rank in (0, 1):
            share = training_batches(pairs, encoded, bpe_vocabs, DROPOUT, MAX_TOKENS, seed=seed, rank=rank,
                                     world_size=2)(1)
            assert share.data == sample
    assert _dropout_epochs(pairs, bpe_vocabs, DROPOUT, seed=1)(1) != _dropout_epochs(pairs, bpe_vocabs,
                                                                                      DROPOUT, seed=2)(1)


def test_token_batches_shuffle_with_their_seed_and_epoch_on_every_rank(encoded):
    """token_batches(seed=s)(e) is batch_by_tokens(seed=s, epoch=e), each rank its share; the seeds
    and epochs chosen give four different orders."""
    lengths = encoded.lengths()
    orders = {}
    for seed in (1, 2):
        for epoch in (0, 1):
            whole = batch_by_tokens(lengths, MAX_TOKENS, seed=seed, epoch=epoch)
            assert token_batches(encoded, MAX_TOKENS, seed=seed)(epoch).batches == whole
            for rank in (0, 1):
                share = token_batches(encoded, MAX_TOKENS, seed=seed, rank=rank, world_size=2)(epoch)
                assert share.batches == shard_batches(whole, rank, 2)
            orders[seed, epoch] = whole
    assert len({json.dumps(order) for order in orders.values()}) == 4


def tied_lengths(n: int = 2000) -> list[tuple[int, int]]:
    """Lengths of 36 kinds, about 55 pairs each: many ties for the seed to break."""
    rng = random.Random(0)
    return [(rng.randint(3, 8), rng.randint(3, 8)) for _ in range(n)]


def members(batches: list[list[int]]) -> set[frozenset[int]]:
    """Which pairs share a batch, whatever the batches' order: what the tie break alone decides."""
    return {frozenset(batch) for batch in batches}


def shapes(batches: list[list[int]], lengths: list[tuple[int, int]]) -> list[tuple]:
    """The batches' lengths in their order, whoever the pairs: what the shuffle alone decides (ties
    only swap pairs of equal lengths, so the batches cut are the same)."""
    return [tuple(sorted(lengths[i] for i in batch)) for batch in batches]


def test_the_seed_and_epoch_draw_both_the_tie_break_and_the_batches_order():
    """batch_by_tokens draws two things from (seed, epoch): which pairs of equal lengths share a batch,
    and the order of the batches. Each changes with the seed and with the epoch, and neither for the
    same seed and epoch: a tie break or a shuffle of a constant generator shows."""
    lengths = tied_lengths()
    draws = {(seed, epoch): batch_by_tokens(lengths, 200, seed=seed, epoch=epoch)
             for seed, epoch in ((1, 0), (2, 0), (1, 1))}
    assert batch_by_tokens(lengths, 200, seed=1, epoch=0) == draws[1, 0]
    for other in ((2, 0), (1, 1)):
        assert members(draws[1, 0]) != members(draws[other]), f"the tie break ignores {other}"
        assert shapes(draws[1, 0], lengths) != shapes(draws[other], lengths), f"the shuffle ignores {other}"


def test_batches_of_sentences_shuffle_with_their_seed():
    """batch_by_sentences: another seed, another order (the existing tests vary only the epoch)."""
    first = batch_by_sentences(1000, 50, seed=1)
    assert first == batch_by_sentences(1000, 50, seed=1)
    assert first != batch_by_sentences(1000, 50, seed=2)
    assert first != batch_by_sentences(1000, 50, seed=1, epoch=1)


def test_the_batch_samplers_draw_with_their_seed_and_epoch():
    """TokenBatchSampler(seed=s) after set_epoch(e) yields batch_by_tokens(seed=s, epoch=e), and a
    DistributedTokenBatchSampler each rank's share of it: four different orders for two seeds and
    two epochs."""
    lengths = tied_lengths(600)
    orders = set()
    for seed in (1, 2):
        sampler = TokenBatchSampler(lengths, 200, seed=seed)
        ranks = [DistributedTokenBatchSampler(lengths, 200, seed=seed, rank=rank, world_size=2)
                 for rank in (0, 1)]
        for epoch in (0, 1):
            whole = batch_by_tokens(lengths, 200, seed=seed, epoch=epoch)
            for each in (sampler, *ranks):
                each.set_epoch(epoch)
            assert list(sampler) == whole
            assert [list(r) for r in ranks] == [shard_batches(whole, rank, 2) for rank in (0, 1)]
            orders.add(json.dumps(whole))
    assert len(orders) == 4


def trained_with_seed(seed: int) -> list[Tensor]:
    """The weights after 3 steps of the same model on the same batches, with dropout 0.3 and `seed`."""
    trainer = tiny_trainer(0, {"dropout": 0.3}, max_steps=3, seed=seed)
    trainer.fit(copy_batches)
    return parameters(trainer)


def test_a_trainers_seed_draws_its_dropout_masks():
    """Same model, same batches: the dropout masks alone differ with the trainer's seed, so seeds 1
    and 2 end at different weights and seed 1 twice at the same, bit for bit."""
    one = trained_with_seed(1)
    assert_identical(one, trained_with_seed(1))
    assert any(not torch.equal(a, b) for a, b in zip(one, trained_with_seed(2), strict=True))


# --- 3. recorded facts follow the machine they are recorded on ---------------------------------------

MACHINES = [
    {"cpu": "Intel(R) Xeon(R) Fake 8375C CPU @ 2.90GHz", "cores": {0, 1}, "kernels": "AVX2",
     "torch": "2.98.1+cpu", "threads": 3, "machine": "x86_64", "system": "Linux"},
    {"cpu": "AMD EPYC Fake 9654 96-Core Processor", "cores": {0, 1, 2, 3, 4, 5}, "kernels": "AVX512",
     "torch": "3.1.0+cu999", "threads": 7, "machine": "aarch64", "system": "Darwin"},
]
IDS = ["avx2-machine", "avx512-machine"]


class FakeFile:
    """What `Path(name)` gives for /proc/cpuinfo: `text`, or an OSError where `text` is None."""

    def __init__(self, text: str | None) -> None:
        self.text = text

    def exists(self) -> bool:
        return self.text is not None

    def read_text(self, *args, **kwargs) -> str:
        if self.text is None:
            raise OSError("no /proc/cpuinfo here")
        return self.text


def cpuinfo(cpu: str) -> str:
    return (f"processor\t: 0\nvendor_id\t: Fake\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: {cpu}\n"
            f"stepping\t: 1\nflags\t\t: fpu sse\n\nprocessor\t: 1\nmodel name\t: another name\n")


def pretend(monkeypatch, machine: dict, cpuinfo_text: str | None = "") -> None:
    """Make this machine look like `machine` to every recorder: /proc/cpuinfo (as a Path and as an
    open file), the cores this process may use, torch's kernel family, version and threads, platform."""
    text = cpuinfo(machine["cpu"]) if cpuinfo_text == "" else cpuinfo_text

    def fake_path(name):
        assert str(name) == "/proc/cpuinfo", name
        return FakeFile(text)

    def fake_open(name, *args, **kwargs):
        import io

        return io.StringIO(FakeFile(text).read_text())

    monkeypatch.setattr(hardware, "Path", fake_path)
    monkeypatch.setattr(layer_comparison, "open", fake_open, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(machine["cores"]), raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: machine["kernels"])
    monkeypatch.setattr(torch, "__version__", machine["torch"])
    monkeypatch.setattr(torch, "get_num_threads", lambda: machine["threads"])
    monkeypatch.setattr(platform, "machine", lambda: machine["machine"])
    monkeypatch.setattr(platform, "system", lambda: machine["system"])
    monkeypatch.setattr(platform, "processor", lambda: "")


def described(machine: dict, device: str = "cpu", processes: int = 1) -> dict:
    return {"device": device, "cpu": machine["cpu"], "cpu_cores": len(machine["cores"]),
            "cpu_kernels": machine["kernels"], "torch_threads": machine["threads"], "torch": machine["torch"],
            "processes": processes}


@pytest.mark.parametrize("machine", MACHINES, ids=IDS)
def test_describe_hardware_records_the_machine_it_runs_on(monkeypatch, machine):
    """Every field of hardware.json is this machine's: the CPU's model name (the first in
    /proc/cpuinfo), its cores, torch's float32 kernel family (AVX2 on one machine, AVX512 on the
    other), version and threads; the processes are the run's."""
    pretend(monkeypatch, machine)
    assert hardware.describe_hardware(torch.device("cpu")) == described(machine)
    assert hardware.describe_hardware(torch.device("cpu"), world_size=4) == described(machine, processes=4)


def test_the_cpu_is_named_by_platform_where_proc_cpuinfo_names_none(monkeypatch):
    """Without /proc/cpuinfo (macOS, Windows), or with one that names no model (some ARM boards), the
    CPU is what `platform` says: its processor, else its machine; without `os.sched_getaffinity`,
    the cores are `os.cpu_count()`."""
    machine = MACHINES[1]
    for text in (None, "processor\t: 0\nBogoMIPS\t: 50.00\n"):
        pretend(monkeypatch, machine, cpuinfo_text=text)
        monkeypatch.setattr(platform, "processor", lambda: "fakeproc")
        assert hardware.describe_hardware(torch.device("cpu"))["cpu"] == "fakeproc"
        monkeypatch.setattr(platform, "processor", lambda: "")
        assert hardware.describe_hardware(torch.device("cpu"))["cpu"] == "aarch64"
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 5)
    assert hardware.describe_hardware(torch.device("cpu"))["cpu_cores"] == 5


def test_a_gpu_run_records_its_gpus_name_and_a_cpu_run_none(monkeypatch):
    """The GPU's name is the one torch gives for the run's device; a CPU run records no GPU."""
    pretend(monkeypatch, MACHINES[0])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: f"Fake GPU on {device}")
    info = hardware.describe_hardware(torch.device("cuda", 1), world_size=2)
    assert info == {**described(MACHINES[0], "cuda", 2), "gpu": "Fake GPU on cuda:1"}
    assert "gpu" not in hardware.describe_hardware(torch.device("cpu"))


def start_run(run_dir: Path, world_size: int) -> LongRun:
    """A session of a tiny run in `run_dir`, its trainer one of `world_size` processes."""
    trainer = tiny_trainer(max_steps=2)
    trainer.world_size = world_size
    return LongRun(run_dir, trainer, {"recipe": {"max_steps": 2}})


def test_a_runs_hardware_json_is_the_machine_of_its_first_session(monkeypatch, tmp_path):
    """A run's hardware.json holds the machine its first session ran on, with the trainer's processes;
    a run started on the other machine records that one; a session resumed there keeps the first."""
    for name, machine, processes in (("a", MACHINES[0], 2), ("b", MACHINES[1], 3)):
        pretend(monkeypatch, machine)
        run = start_run(tmp_path / name, processes)
        expected = described(machine, "cpu", processes)
        assert json.loads((tmp_path / name / "hardware.json").read_text()) == expected == run.hardware
    resumed = start_run(tmp_path / "a", 1)  # on machine b now
    assert resumed.hardware == described(MACHINES[0], "cpu", 2)
    assert json.loads((tmp_path / "a" / "hardware.json").read_text()) == described(MACHINES[0], "cpu", 2)


@pytest.mark.parametrize("machine", MACHINES, ids=IDS)
def test_chapter_17s_timings_name_the_machine_they_ran_on(monkeypatch, machine):
    """describe_machine: the CPU's model name, platform's machine and system, torch's version and threads."""
    pretend(monkeypatch, machine)
    assert layer_comparison.describe_machine() == (
        f"{machine['cpu']}, {machine['machine']}, {machine['system']}; torch {machine['torch']}; "
        f"timings on 1 thread (torch.get_num_threads() = {machine['threads']} otherwise)")


@pytest.mark.parametrize("machine", MACHINES, ids=IDS)
def test_the_training_fingerprints_cpu_identity_is_the_machines(monkeypatch, machine):
    """cpu_identity, which decides whether a recorded fingerprint must match bit for bit: the CPU's
    vendor, family, model, stepping and flags, platform's machine, torch's version and kernel family."""
    import hashlib

    import training_fingerprint

    pretend(monkeypatch, machine)
    monkeypatch.setattr(training_fingerprint, "Path", lambda name: FakeFile(cpuinfo(machine["cpu"])))
    assert training_fingerprint.cpu_identity() == {
        "vendor_id": "Fake", "cpu family": "25", "model": "17", "stepping": "1",
        "flags_sha256": hashlib.sha256(b"fpu sse").hexdigest()[:16], "machine": machine["machine"],
        "torch": machine["torch"], "kernels": machine["kernels"]}


# --- 4. the explorer's chart as a reader sees it (rendered to SVG by vl-convert) ----------------------
# mutmut credits a module-scoped fixture's work to the first test that uses it only: each test below
# calls what it checks itself (the chart is cheap to build once `_weight_rows` is given the fixture's rows).

SVG = "{http://www.w3.org/2000/svg}"
CELL = (24.0, 20.0)  # a heatmap cell's width and height in pixels; a bar's column is as wide
BARS_HEIGHT = 110.0  # the bar chart's height in pixels: a weight of 1
WHITE, BLUE, RED = (255, 255, 255), (8, 81, 156), "#d62728"  # the colour scale's ends; the hovered row's
OPENING = (0, 0, N_LAYERS, 1, 1)  # (sentence, map m, layer, head, hovered row q) the chart opens on
# Two views more, which change every choice (each map shown once): a choice ignored shows.
OTHER_VIEWS = [(1, 1, 2, 2, 3), (1, 2, 1, 2, 5)]


def explorer_spec(translator, views, monkeypatch) -> dict:
    """The chart's Vega-Lite spec (validated by Altair), drawn from the fixture's rows and pieces."""
    need_dev_module("altair")
    monkeypatch.setattr(explorer, "_weight_rows", lambda given, sentences: (views["labels"], views["rows"]))
    return explorer.attention_explorer(translator, SENTENCES).to_dict()


def render(spec: dict, view: tuple | None = None) -> ET.Element:
    """The chart as an SVG, at its opening view, or with its choices and hovered row set to `view`."""
    need_dev_module("vl_convert")  # skipped, saying why, without it
    if view is not None:
        chosen = dict(zip(("sentence", "attention", "layer", "head"), view[:4], strict=True))
        for param in spec["params"]:
            if "select" in param:  # the hover selection: the row of query q
                param["value"] = [{"q": view[4]}]
            elif param["name"] in chosen:
                param["value"] = chosen[param["name"]]
    # In a process of its own: vl-convert's JavaScript engine runs on threads that a fork does not
    # copy, so a test process that forks after rendering (as a mutation tool does, for each mutant)
    # would hang in its next render.
    svg = subprocess.run([sys.executable, "-c", RENDER], input=json.dumps(spec), capture_output=True,
                         text=True, check=True, timeout=120).stdout
    return ET.fromstring(svg)


RENDER = "import json, sys, vl_convert; sys.stdout.write(vl_convert.vegalite_to_svg(json.load(sys.stdin)))"


def groups(element: ET.Element, cls: str) -> list[ET.Element]:
    """The <g> under `element` of class `cls` (Vega's role classes: role-scope, role-axis-label, ...)."""
    return [g for g in element.iter(f"{SVG}g") if cls in g.get("class", "").split()]


def texts(element: ET.Element, cls: str) -> list[str]:
    return [text.text or "" for g in groups(element, cls) for text in g.iter(f"{SVG}text")]


def box(path: ET.Element) -> tuple[float, ...]:
    """A rectangle's x, y, width and height, from its path "Mx,yhWvHh-WZ"."""
    numbers = re.fullmatch(r"M([-\d.e]+),([-\d.e]+)h([-\d.e]+)v([-\d.e]+)h-[-\d.e]+Z", path.get("d"))
    assert numbers, path.get("d")
    return tuple(float(n) for n in numbers.groups())


def marks(scope: ET.Element) -> list[ET.Element]:
    """A view's marks (its cells or bars), each with the fields its tooltip shows as an aria-label."""
    return [path for path in scope.iter(f"{SVG}path") if path.get("role") == "graphics-symbol"]


def fields(mark: ET.Element) -> dict[str, str]:
    """A mark's aria-label "k: 1; q: 0; weight: 0.03; piece: ne; attends to: D-" as a dict."""
    return dict(item.split(": ", 1) for item in mark.get("aria-label").split("; "))


def axes(scope: ET.Element) -> dict[str, ET.Element]:
    """A view's axes by their letter, "X" and "Y" (the ones Vega describes: grids are hidden)."""
    return {g.get("aria-label")[0]: g for g in scope.iter(f"{SVG}g")
            if g.get("aria-roledescription") == "axis"}


def colour_is(fill: str, weight: float) -> bool:
    """`fill` is the colour of `weight` on the scale white (0) to #08519c (1), interpolated in RGB: each
    channel within the rounding of the weight to hundredths and of the channel to an integer."""
    channels = re.fullmatch(r"rgb\((\d+), (\d+), (\d+)\)", fill)
    return channels is not None and all(
        abs(int(got) - (white + (blue - white) * weight)) <= abs(blue - white) * SLACK / 100 + 0.5 + 1e-9
        for got, white, blue in zip(channels.groups(), WHITE, BLUE, strict=True))


def expected_view(views, view: tuple) -> tuple[Tensor, list[str], list[str]]:
    """A view's weights (queries, keys) from the reference maps, and its query and key pieces: English
    queries but in the encoder's self-attention, German keys but in the decoder's."""
    sentence, m, layer, head, _ = view
    labels = views["labels"][sentence]
    weights = views["references"][sentence][KINDS[m]][layer - 1, head - 1]
    return weights, labels["src" if m == 1 else "tgt"], labels["tgt" if m == 2 else "src"]


def check_heatmap(heatmap: ET.Element, weights: Tensor, queries: list[str], keys: list[str], hovered: int):
    """Row q, column k is the cell of query piece q and key piece k, coloured by its weight, its tooltip
    naming both pieces and the weight; the hovered row alone outlined in red; the axes
    name the pieces (the keys' slanted by 50°), without titles; the view's title asks for a hover."""
    assert texts(heatmap, "role-title-text") == ["Each row: a piece attending (hover one)"]
    cells = marks(heatmap)
    assert len(cells) == weights.numel() == len(queries) * len(keys)
    seen = set()
    for cell in cells:
        x, y, width, height = box(cell)
        q, k = round(y / CELL[1]), round(x / CELL[0])
        assert (x, y, width, height) == (k * CELL[0], q * CELL[1], *CELL)
        seen.add((q, k))
        weight, shown_fields = weights[q, k].item(), fields(cell)
        assert colour_is(cell.get("fill"), weight), (q, k, cell.get("fill"), weight)
        assert (shown_fields["piece"], shown_fields["attends to"]) == (queries[q], keys[k])
        assert abs(float(shown_fields["weight"]) - weight) <= SLACK / 100, (q, k, shown_fields, weight)
        assert (cell.get("stroke", "none").lower() == RED) == (q == hovered), (q, k)
    assert len(seen) == len(cells)
    assert box(heatmap.find(f".//{SVG}path[@class='background']"))[2:] == (
        len(keys) * CELL[0], len(queries) * CELL[1])
    axis = axes(heatmap)
    assert texts(axis["X"], "role-axis-label") == keys and texts(axis["Y"], "role-axis-label") == queries
    assert all("rotate(310)" in label.get("transform") for g in groups(axis["X"], "role-axis-label")
               for label in g.iter(f"{SVG}text"))
    assert texts(heatmap, "role-axis-title") == []


def check_bars(bars: ET.Element, weights: Tensor, queries: list[str], keys: list[str], hovered: int):
    """One red bar per key piece, in the heatmap's columns, as high as the hovered row's weight on a
    scale from 0 to 1 (the view's height), its tooltip naming the hovered piece and the key; the keys
    name the bars; the y axis is titled "weight"; the view's title says whose weights these are."""
    assert texts(bars, "role-title-text") == ["The hovered piece's weights"]
    width, height = box(bars.find(f".//{SVG}path[@class='background']"))[2:]
    assert (width, height) == (len(keys) * CELL[0], BARS_HEIGHT)
    shown_bars = marks(bars)
    assert len(shown_bars) == len(keys)
    columns = set()
    for bar in shown_bars:
        x, y, bar_width, bar_height = box(bar)
        k = int(x // CELL[0])
        columns.add(k)
        assert x + bar_width / 2 == pytest.approx((k + 0.5) * CELL[0]) and bar_width > CELL[0] / 2
        assert y + bar_height == pytest.approx(BARS_HEIGHT)
        assert abs(bar_height / BARS_HEIGHT - weights[hovered, k].item()) <= SLACK / 100 + 1e-6, k
        assert bar.get("fill").lower() == RED
        assert (fields(bar)["piece"], fields(bar)["attends to"]) == (queries[hovered], keys[k])
    assert columns == set(range(len(keys)))
    axis = axes(bars)
    assert texts(axis["X"], "role-axis-label") == keys
    assert all("rotate(310)" in label.get("transform") for g in groups(axis["X"], "role-axis-label")
               for label in g.iter(f"{SVG}text"))
    assert texts(bars, "role-axis-title") == ["weight"]


def check_legend(svg: ET.Element):
    """The colour legend, titled "weight", runs from 0.0 to 1.0, white to #08519c through RGB."""
    assert texts(svg, "role-legend-title") == ["weight"]
    assert texts(svg, "role-legend-label") == ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]
    stops = list(svg.iter(f"{SVG}stop"))
    assert len(stops) > 10
    for stop in stops:
        assert colour_is(stop.get("stop-color"), float(stop.get("offset"))), stop.attrib


@pytest.mark.parametrize("view", [None, *OTHER_VIEWS], ids=["opening", "encoder-self", "decoder-self"])
def test_the_rendered_chart_shows_the_chosen_maps_weights_named_by_its_pieces(translator, views, monkeypatch,
                                                                              view):
    """What the reader sees, for the chart's opening view (sentence 1, the encoder–decoder attention of
    the last layer, head 1, the first English piece hovered) and two others: the heatmap is the chosen
    sentence's, map's, layer's and head's weights (against weights computed here), its axes and
    tooltips name that map's query and key pieces, the bars are the hovered row's weights, and the
    titles and the legend say what they show."""
    svg = render(explorer_spec(translator, views, monkeypatch), view)
    heatmap, bars = groups(svg, "role-scope")
    weights, queries, keys = expected_view(views, view or OPENING)
    hovered = (view or OPENING)[4]
    check_heatmap(heatmap, weights, queries, keys, hovered)
    check_bars(bars, weights, queries, keys, hovered)
    check_legend(svg)


def test_the_charts_choices_hover_tooltips_and_description_as_the_reader_meets_them(translator, views,
                                                                                   monkeypatch):
    """What a rendering cannot show: the four choices are labelled with their names (vega-embed shows
    `bind.name`, else the parameter's name), the sentence, map, layer and head open on sentence 1, the
    encoder–decoder attention, the last layer and head 1; hovering (not clicking) a cell selects its
    whole row; each view's tooltip names the piece, what it attends to and the weight to 2 decimals;
    the chart describes itself to a screen reader."""
    spec = explorer_spec(translator, views, monkeypatch)
    params = {param["name"]: param for param in spec["params"]}
    choices = ("sentence", "attention", "layer", "head")
    for name in choices:
        assert params[name]["bind"].get("name", name) == f"{name} ", name
    assert [params[name].get("value") for name in choices] == [0, 0, N_LAYERS, 1]
    (hover,) = [param for param in spec["params"] if "select" in param]
    assert hover["select"] == {"type": "point", "fields": ["q"], "on": "pointerover"}
    assert hover["value"] == [{"q": 1}]
    tooltip = [{"field": "query", "type": "nominal", "title": "piece"},
               {"field": "key", "type": "nominal", "title": "attends to"},
               {"field": "weight", "type": "quantitative", "format": ".2f"}]
    assert [view["encoding"]["tooltip"] for view in spec["vconcat"]] == [tooltip, tooltip]
    assert spec["description"] == "The attention weights of a translator, by sentence, layer and head"


def test_a_one_layer_model_offers_its_one_layer_and_every_head(bpe_vocabs, monkeypatch):
    """The choices follow the model: one layer (opened on it) and its 4 heads."""
    need_dev_module("altair")
    config = TransformerConfig(src_vocab_size=len(bpe_vocabs.source), tgt_vocab_size=len(bpe_vocabs.target),
                               n_layers=1, d_model=16, d_ff=32, n_heads=4, dropout=0.0, max_len=32,
                               share_embeddings=bpe_vocabs.shared)
    one_layer = Translator(make_model(config), bpe_vocabs, "cpu", beam_size=1)
    monkeypatch.setattr(explorer, "_weight_rows", lambda given, sentences: ([], []))
    spec = explorer.attention_explorer(one_layer, []).to_dict()
    params = {param["name"]: param for param in spec["params"]}
    assert params["layer"]["value"] == 1 and params["layer"]["bind"]["options"] == [1]
    assert params["head"]["bind"]["options"] == [1, 2, 3, 4]


def test_the_rows_and_pieces_hold_when_read_afresh(translator, views):
    """`_weight_rows` called here, not through the fixture: its rows are the reference weights of
    every sentence, map, layer and head, and its pieces each sentence's and its translation's (the
    checks of the tests above, on this call's rows and pieces)."""
    labels, rows = explorer._weight_rows(translator, SENTENCES)
    fresh = {**views, "labels": labels, "rows": rows}
    test_every_row_of_the_chart_is_its_sentences_maps_layers_and_heads_weights(fresh)
    test_the_charts_pieces_are_each_sentences_encoding_and_its_translation(translator, fresh)


def test_a_word_vocabularys_pieces_are_its_words(word_vocabs):
    """With a word vocabulary, each id's piece is its word as it is (no "-", no "</w>")."""
    sentence = builtin_corpus("train")[0][0]
    ids = word_vocabs.source.encode(sentence)
    assert explorer._pieces(word_vocabs.source, ids) == word_vocabs.source.words(ids)
    assert len(ids) > 5 and len(word_vocabs.source.words(ids)) == len(ids)
