"""Promises about what a process must not do, and checks that must not pass a near miss.

1. Only rank 0 writes a run directory (helpers/processes.py: "the package asks `is_main_process()`,
   everywhere, before it prints or writes", chapter 15). The other ranks of a distributed run compute
   and write nothing: no checkpoint, history, validation scores, recipe, run.json, hardware.json,
   model.pt or lock, no damaged file set aside or repaired, no stale temporary removed, no note or
   progress line. Here a second rank is a real rank 1 of a process group of two, in this process:
   PyTorch's fake process group (whose collectives return at once) and DDP with a comm hook that
   keeps the local gradients, so that `train_translation` runs its whole distributed path (DDP, the
   barriers, rank 0's broadcast decisions) deterministically. Its run directory is compared, file by
   file (bytes, size, modification time, inode) and folder by folder, before and after; the same
   session as rank 0 of the same group changes the files it should, so the setup reaches the code
   that writes.

2. A check of a digest, a version or a recorded field refuses a value that is wrong only in its last
   character or component (which a comparison of a prefix, of the major version, or of a subset of
   the fields would pass), and a value that is absent (which a `.get()` giving None on both sides, or
   a default, would pass), with an error that says what was wrong: a checkpoint's SHA-256 (format
   versions 1 to 3) and what it covers, its format marker and version, a vocabulary file's format
   marker and version, a vocabulary's fingerprint against the one a run recorded, the fingerprints
   and configurations of checkpoints to average, a shipped translator's file digests, the key of an
   encoded corpus in the cache, and a Multi30k file's pinned SHA-256.
   Where the package decides that an absent record means "not recorded" (a checkpoint without
   fingerprints, from before they existed, is accepted by `check_fingerprint` and `same_run`), the
   near miss is tested on the value compared with it instead (a vocabulary one token short).
"""

import hashlib
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from helpers import tiny_model, version_2

from annotated_transformer.checkpoints import (
    CheckpointError,
    checkpoint_sha256,
    read_checkpoint,
    save_checkpoint,
    state_dict_sha256,
)
from annotated_transformer.companions.corpus_cache import cached_encode_pairs, corpus_key, pack
from annotated_transformer.companions.multi30k_files import DataError, multi30k_path
from annotated_transformer.companions.run_directory import RunDirectory
from annotated_transformer.companions.trained_models import read_run_model
from annotated_transformer.companions.vocabulary_files import (
    read_vocabularies,
    vocabularies_sha256,
    write_vocabularies,
)
from annotated_transformer.data import builtin_corpus
from annotated_transformer.decoding import average_checkpoints
from annotated_transformer.recipes import Recipe
from annotated_transformer.runs import pretrained
from annotated_transformer.runs.fingerprints import check_run_vocabulary
from annotated_transformer.runs.translation import train_translation
from annotated_transformer.tokenization import TextEncoder, Vocab, Vocabularies, VocabularyError, encode_pairs
from annotated_transformer.translator import Validator

# --- helpers ----------------------------------------------------------------------------------------


def last_char_changed(text: str) -> str:
    """`text` with its last character replaced: equal to it but for the end (a hex digest stays one)."""
    return text[:-1] + ("0" if text[-1] != "0" else "1")


def redigest(path: Path, change: Callable[[dict], None]) -> None:
    """Change the checkpoint at `path` with `change(checkpoint)` and store its digest again: a sound file
    that holds the changed values, so that only the check under test can refuse it."""
    checkpoint = torch.load(path, weights_only=True)
    change(checkpoint)
    checkpoint["sha256"] = checkpoint_sha256(checkpoint)
    torch.save(checkpoint, path)


Snapshot = dict[str, tuple]


def snapshot(folder: Path) -> Snapshot:
    """Every file and folder under `folder` (itself included): kind, size, modification time, inode
    and, for a file, the digest of its bytes. A file written again, even with the same bytes, gets a
    new modification time (and a new inode when replaced atomically); a file made and removed again
    (a temporary) changes its folder's modification time."""
    entries = {}
    for path in [folder, *folder.rglob("*")]:
        stat = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        entries[str(path.relative_to(folder))] = (stat.st_mode, stat.st_size, stat.st_mtime_ns, stat.st_ino,
                                                  digest)
    return entries


def changes(before: Snapshot, after: Snapshot) -> set[str]:
    """The paths made, removed or changed between two snapshots."""
    return {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}


# --- 1. a rank other than 0 writes nothing ----------------------------------------------------------


def _keep_local_gradients(
    state: object, bucket: torch.distributed.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """A DDP comm hook that communicates nothing: the fake process group's all-reduce gives no tensor."""
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


class _LocalDDP(torch.nn.parallel.DistributedDataParallel):
    """DDP as the Trainer makes it, its gradients kept local (`_keep_local_gradients`)."""

    def __init__(self, module: torch.nn.Module, *args, **kwargs) -> None:
        super().__init__(module, *args, **kwargs)
        self.register_comm_hook(None, _keep_local_gradients)


@pytest.fixture
def join_group(monkeypatch) -> Iterator[Callable[[int], None]]:
    """`join_group(rank)` makes this process `rank` of a process group of two (PyTorch's fake
    backend: every collective returns at once); the group is left at the end of the test."""
    fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg",
                                  reason="this PyTorch has no fake process group")
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", _LocalDDP)

    def join(rank: int) -> None:
        torch.distributed.init_process_group("fake", store=fake_pg.FakeStore(), rank=rank, world_size=2)

    yield join
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def run_to_resume(tiny_run: Path, tmp_path: Path, damaged: bool) -> tuple[Path, Recipe]:
    """A copy of the tiny run (3 steps, checkpoints 2 and 3, model.pt), and its recipe trained on to
    step 5 keeping one checkpoint: rank 0 writes checkpoints 4 and 5 and deletes all but the newest.
    `damaged`: its recipe.json, history.json and hardware.json damaged, and a killed writer's
    temporaries left in it and in checkpoints/, which rank 0 repairs, sets aside and removes."""
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir)
    files = RunDirectory(run_dir)
    recipe = Recipe.from_dict(json.loads(files.recipe.read_text())).replace(max_steps=5, average_last=1)
    if damaged:
        for path in (files.recipe, files.history, files.hardware):
            path.write_text("{")
        for folder in (files.path, files.checkpoints):
            (folder / ".history.json.4242.tmp").write_text("half")
    return run_dir, recipe


def train_on(run_dir: Path, recipe: Recipe, data_dir: Path):
    """A session of `train_translation` that reaches every file a run keeps: a data folder (run.json),
    a validator (validation.json), progress lines and the notes."""
    validator = Validator(builtin_corpus("val")[:4], every=1, with_bleu=False, batch_tokens=200)
    return train_translation(recipe, run_dir, corpus_options={"root": str(data_dir)}, device="cpu",
                             progress=True, validator=validator)


WRITTEN_BY_RANK_0 = {
    "recipe.json", "run.lock", "run.json", "history.json", "validation.json", "model.pt",
    "checkpoints/step_00000002.pt", "checkpoints/step_00000003.pt", "checkpoints/step_00000005.pt",
}
REPAIRED_BY_RANK_0 = {
    "recipe.json.damaged", "history.json.damaged", "hardware.json", ".history.json.4242.tmp",
    "checkpoints/.history.json.4242.tmp",
}


@pytest.mark.parametrize("damaged", [False, True], ids=["sound run", "damaged side files"])
@pytest.mark.parametrize("rank", [0, 1])
def test_only_rank_0_of_a_distributed_session_changes_its_run_directory(
    rank, damaged, join_group, tiny_run, tmp_path, capsys
):
    """A resumed session of two ranks, in a run directory that holds everything a run keeps (and, in
    one case, damaged side files and stale temporaries): rank 1 trains to the end, but nothing in the
    run directory is made, removed, written again or even touched, and it prints nothing; rank 0, in
    the same group, writes, deletes, repairs and prints. A guard left off any one writer (the
    checkpoints, their deletion, the history, validation.json, run.json, model.pt, the lock, the
    recipe, a damaged file set aside or rewritten, a temporary removed, a note) shows in rank 1's
    snapshot; the same test as rank 0 shows that the session reaches each of them."""
    run_dir, recipe = run_to_resume(tiny_run, tmp_path, damaged)
    capsys.readouterr()
    before = snapshot(run_dir)
    join_group(rank)
    run = train_on(run_dir, recipe, tmp_path / "data")
    changed, printed = changes(before, snapshot(run_dir)), capsys.readouterr()
    assert run.steps == 5  # the session trained: rank 1 took the same path as rank 0
    if rank == 1:
        assert changed == set(), f"rank 1 changed {sorted(changed)}"
        assert (printed.out, printed.err) == ("", "")
    else:
        expected = WRITTEN_BY_RANK_0 | (REPAIRED_BY_RANK_0 if damaged else set())
        assert expected <= changed, f"rank 0 did not change {sorted(expected - changed)}"
        assert "step" in printed.out + printed.err  # its progress
        assert ("note: " in printed.err) == damaged


@pytest.mark.parametrize("start", ["new run", "damaged vocab.json"])
def test_a_second_rank_writes_no_vocabulary_nor_encoded_corpus(start, join_group, tiny_run, tmp_path):
    """Rank 1 of a new run, or of a run whose vocab.json is damaged, builds the vocabulary and encodes
    the corpus as rank 0 does (building is deterministic), but must not write them: eight ranks
    writing one vocab.json, or setting it aside, is what chapter 15 says the package avoids."""
    if start == "new run":
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        recipe = Recipe.from_dict(json.loads((tiny_run / "recipe.json").read_text())).replace(max_steps=1)
    else:
        run_dir, recipe = run_to_resume(tiny_run, tmp_path, damaged=False)
        (run_dir / "vocab.json").write_text("{")
    before = snapshot(run_dir)
    join_group(1)
    train_translation(recipe, run_dir, device="cpu", progress=False)
    assert changes(before, snapshot(run_dir)) == set()


# --- 2. near misses ---------------------------------------------------------------------------------

# The digest that a checkpoint of each format version stores, and how it is named.
DIGEST_OF_VERSION = {1: "model_sha256", 2: "sha256", 3: "sha256"}
DIGEST_REFUSED = "is corrupt: what it holds does not match the SHA-256 digest stored when it was written"


def checkpoint_of_version(version: int, tmp_path: Path) -> Path:
    """A sound checkpoint of a tiny model as format `version` wrote it (1: its parameters' digest; 2: a
    trainer's fixed entries, `helpers.version_2`; 3: today's)."""
    path = save_checkpoint(tmp_path / f"v{version}.pt", tiny_model(), step=3, extra={"note": "kept"})
    checkpoint = torch.load(path, weights_only=True)
    if version == 2:
        torch.save(version_2(checkpoint), path)
    elif version == 1:
        state = checkpoint["state"]["model"]
        torch.save({"format": checkpoint["format"], "version": 1, "config": checkpoint["config"],
                    "model": state, "model_sha256": state_dict_sha256(state), "optimizer": None,
                    "scheduler": None, "step": 3, "rng": {}, "extra": {}}, path)
    assert read_checkpoint(path)["state"]["step"] == 3  # sound as written
    return path


def rewrite(path: Path, change: Callable[[dict], None]) -> None:
    """Change the checkpoint at `path` in place, its stored digest left as it was."""
    checkpoint = torch.load(path, weights_only=True)
    change(checkpoint)
    torch.save(checkpoint, path)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_checkpoint_digest_wrong_in_its_last_character_is_refused(version, tmp_path):
    """The stored SHA-256 differs from the true one in its last hex digit only: a comparison of a
    prefix of the digests would accept the file."""
    path, key = checkpoint_of_version(version, tmp_path), DIGEST_OF_VERSION[version]
    rewrite(path, lambda checkpoint: checkpoint.update({key: last_char_changed(checkpoint[key])}))
    with pytest.raises(CheckpointError, match=DIGEST_REFUSED):
        read_checkpoint(path)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_checkpoint_without_its_digest_is_refused(version, tmp_path):
    """A checkpoint whose digest entry is gone: its content is unchecked, so it is refused as corrupt,
    not read as if a missing digest matched."""
    path, key = checkpoint_of_version(version, tmp_path), DIGEST_OF_VERSION[version]
    rewrite(path, lambda checkpoint: checkpoint.pop(key))
    with pytest.raises(CheckpointError, match=DIGEST_REFUSED):
        read_checkpoint(path)


def test_the_checkpoint_digest_covers_the_last_field_of_its_model_configuration(tmp_path):
    """The digest covers the configuration as well as the state and `extra`: its last field
    (layer_norm_eps) changed, the digest kept, is refused. A digest of the state and extra alone
    would let the model be rebuilt with another configuration."""
    path = checkpoint_of_version(3, tmp_path)
    last = list(torch.load(path, weights_only=True)["config"])[-1]
    assert last == "layer_norm_eps"
    rewrite(path, lambda checkpoint: checkpoint["config"].update({last: 1e-5}))
    with pytest.raises(CheckpointError, match=DIGEST_REFUSED):
        read_checkpoint(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "annotated-transformer-checkpoinT"},
         "is not an annotated-transformer checkpoint \\(no 'annotated-transformer-checkpoint' marker\\)"),
        ({"format": None},
         "is not an annotated-transformer checkpoint \\(no 'annotated-transformer-checkpoint' marker\\)"),
        ({"version": 30}, "has checkpoint format version 30, this package reads versions 1 to 3: update"),
        ({"version": None}, "has checkpoint format version None, this package reads versions 1 to 3"),
    ],
    ids=["format wrong in its last character", "format missing", "version 30", "version missing"],
)
def test_a_checkpoint_header_near_miss_is_refused(change, message, tmp_path):
    """The header is outside the digest, so its own check alone refuses a marker wrong in its last
    character or missing, a version whose first digit is today's (30: a check of the leading digit
    would read it as version 3) and a missing version (None, not today's by default)."""
    path = checkpoint_of_version(3, tmp_path)

    def apply(checkpoint: dict) -> None:
        for key, value in change.items():
            if value is None:
                checkpoint.pop(key)
            else:
                checkpoint[key] = value

    rewrite(path, apply)
    with pytest.raises(CheckpointError, match=f"{re.escape(str(path))} {message}"):
        read_checkpoint(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "annotated-transformer-vocabularY"}, "is not an annotated-transformer vocabulary file"),
        ({"format": None}, "is not an annotated-transformer vocabulary file"),
        ({"version": 10}, "has vocabulary format version 10; this package reads version 1"),
        ({"version": None}, "has vocabulary format version None; this package reads version 1"),
    ],
    ids=["format wrong in its last character", "format missing", "version 10", "version missing"],
)
def test_a_vocabulary_file_header_near_miss_is_refused(change, message, word_vocabs, tmp_path):
    """vocab.json's marker wrong in its last character or missing, a version whose first digit is
    today's (10) or none: refused, naming the file, before its contents are used."""
    path = write_vocabularies(word_vocabs, tmp_path / "vocab.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    for key, value in change.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(VocabularyError, match=re.escape(f"{path} {message}")):
        read_vocabularies(path)


def trained_with(vocabs: Vocabularies, tmp_path: Path, fingerprint: str | None = None) -> Path:
    """A run directory whose one checkpoint records `fingerprint` (by default that of `vocabs`)."""
    run_dir = tmp_path / "run"
    fingerprint = vocabularies_sha256(vocabs) if fingerprint is None else fingerprint
    save_checkpoint(RunDirectory(run_dir).checkpoints / "step_00000001.pt", tiny_model(), step=1,
                    extra={"vocab_sha256": fingerprint})
    return run_dir


def last_target_token(vocabs: Vocabularies, tokens: Callable[[list[str]], list[str]]) -> Vocabularies:
    """`vocabs` with the target side's token list changed by `tokens`."""
    target = tokens(vocabs.target.vocab.get_itos())
    return Vocabularies(vocabs.source, TextEncoder(vocabs.target.language, vocab=Vocab(target)))


@pytest.mark.parametrize(
    "near_miss",
    [lambda tokens: [*tokens[:-1], tokens[-1] + "s"], lambda tokens: tokens[:-1]],
    ids=["last token wrong in its last character", "last token missing"],
)
def test_a_vocabulary_that_differs_from_the_runs_in_its_last_token_is_refused(
    near_miss, word_vocabs, tmp_path
):
    """A vocabulary equal to the run's but for its last target token, or without it: the fingerprint
    covers every token, and resuming is refused, naming the checkpoint that recorded it. A fingerprint
    of a prefix of the tokens, or of the kinds and languages only, would accept it."""
    run_dir = trained_with(word_vocabs, tmp_path)
    check_run_vocabulary(run_dir, word_vocabs)  # the run's own: accepted
    with pytest.raises(VocabularyError, match=r"vocab.json is not the vocabulary .*step_00000001.pt was "
                                              r"trained with \(fingerprints differ\)"):
        check_run_vocabulary(run_dir, last_target_token(word_vocabs, near_miss))


def test_a_recorded_vocabulary_fingerprint_wrong_in_its_last_character_is_refused(word_vocabs, tmp_path):
    """The checkpoint records the fingerprint of the vocabulary but for its last hex digit: refused,
    when a run resumes and when a trained model is read back with its vocabulary."""
    recorded = last_char_changed(vocabularies_sha256(word_vocabs))
    run_dir = trained_with(word_vocabs, tmp_path, recorded)
    with pytest.raises(VocabularyError, match=r"\(fingerprints differ\)"):
        check_run_vocabulary(run_dir, word_vocabs)
    checkpoint = RunDirectory(run_dir).checkpoints / "step_00000001.pt"
    vocab = write_vocabularies(word_vocabs, tmp_path / "vocab.json")
    refused = f"{vocab} is not the vocabulary {checkpoint} was trained with (fingerprints differ)"
    with pytest.raises(VocabularyError, match=re.escape(refused)):
        read_run_model(checkpoint, vocab)


@pytest.fixture
def two_checkpoints(tiny_run, tmp_path) -> tuple[Path, Path]:
    """The tiny run's two checkpoints (steps 2 and 3), copied: one run, averaged as they are."""
    folder = tmp_path / "checkpoints"
    shutil.copytree(tiny_run / "checkpoints", folder)
    paths = (folder / "step_00000002.pt", folder / "step_00000003.pt")
    average_checkpoints(paths)  # one run: accepted
    return paths


@pytest.mark.parametrize(("key", "what"), [("vocab_sha256", "vocabularies"),
                                           ("config_sha256", "model configurations")])
def test_checkpoints_whose_run_fingerprint_differs_in_its_last_character_are_not_averaged(
    key, what, two_checkpoints
):
    """Two checkpoints of the same model whose recorded vocabulary or configuration fingerprint differs
    in its last hex digit only come from two runs: averaging them is refused, saying which differs."""
    redigest(two_checkpoints[1], lambda checkpoint: checkpoint["extra"].update(
        {key: last_char_changed(checkpoint["extra"][key])}))
    with pytest.raises(CheckpointError, match=rf"different training runs \(their {what} differ\)"):
        average_checkpoints(two_checkpoints)


@pytest.mark.parametrize(("field", "value"), [("layer_norm_eps", 1e-5), ("layer_norm_eps", None),
                                              ("max_len", None)],
                         ids=["last field changed", "last field missing", "a shape's field missing"])
def test_checkpoints_whose_configurations_differ_in_one_field_or_lack_it_are_not_averaged(
    field, value, two_checkpoints
):
    """One checkpoint's configuration differs in its last field, or lacks a field the other has (its
    parameters unchanged, so that only the configuration check can tell): averaging is refused, naming
    the field and both values. Compared over the fields both hold, or with a missing one read as
    equal, they would be averaged into a model of another configuration."""

    def change(checkpoint: dict) -> None:
        if value is None:
            checkpoint["config"].pop(field)
        else:
            checkpoint["config"][field] = value

    redigest(two_checkpoints[1], change)
    first = read_checkpoint(two_checkpoints[0])["config"][field]
    with pytest.raises(CheckpointError, match=rf"hold different models\n  config {field}: {first!r} in "
                                              rf"step_00000002.pt, {value!r} in step_00000003.pt"):
        average_checkpoints(two_checkpoints)


FILES_OF_A_TRANSLATOR = {"model.pt": b"weights", "vocab.json": b"{}", "recipe.json": b"{\"beam_size\": 4}"}


def shipped(tmp_path: Path, digests: Callable[[dict], None] = lambda digests: None) -> Path:
    """A root of shipped translators that holds one, `tiny`, whose result file records its files'
    digests (changed by `digests`)."""
    root = tmp_path / "pretrained"
    (root / "tiny").mkdir(parents=True)
    recorded = {}
    for name, content in FILES_OF_A_TRANSLATOR.items():
        (root / "tiny" / name).write_bytes(content)
        recorded[name] = hashlib.sha256(content).hexdigest()
    digests(recorded)
    (root / "tiny.json").write_text(json.dumps({"name": "tiny", "sha256": recorded}), encoding="utf-8")
    return root


@pytest.mark.parametrize("file", list(FILES_OF_A_TRANSLATOR))
def test_a_shipped_translators_file_whose_digest_differs_in_its_last_character_is_refused(file, tmp_path):
    """Each of the three files checked in full: its recorded SHA-256 off by the last hex digit is
    refused, naming the file; the same folder with the true digests is accepted."""
    sound = shipped(tmp_path / "sound")
    assert pretrained.pretrained_dir("tiny", sound) == sound / "tiny"
    root = shipped(tmp_path, lambda digests: digests.update({file: last_char_changed(digests[file])}))
    refused = f"'tiny' is damaged ({root / 'tiny' / file} is missing or not the file it was shipped with)"
    with pytest.raises(ValueError, match=re.escape(f"{refused}: reinstall the package")):
        pretrained.pretrained_dir("tiny", root)


@pytest.mark.parametrize("file", list(FILES_OF_A_TRANSLATOR))
def test_a_shipped_translator_missing_a_file_is_refused(file, tmp_path):
    root = shipped(tmp_path)
    (root / "tiny" / file).unlink()
    with pytest.raises(ValueError, match=re.escape(f"({root / 'tiny' / file} is missing or not the file")):
        pretrained.pretrained_dir("tiny", root)


def test_a_shipped_translator_whose_result_file_records_no_digest_for_a_file_is_refused(tmp_path):
    """A result file without the digest of one of the files cannot vouch for it: refused as damaged."""
    root = shipped(tmp_path, lambda digests: digests.pop("recipe.json"))
    with pytest.raises(ValueError, match=r"'tiny' is damaged"):
        pretrained.pretrained_dir("tiny", root)


@pytest.mark.parametrize("stored", [last_char_changed, None], ids=["key wrong in its last character",
                                                                   "key missing"])
def test_an_encoded_corpus_whose_stored_key_is_a_near_miss_is_encoded_again(stored, word_vocabs, tmp_path):
    """The cache file at the corpus's name holds other ids, and a key that differs from the corpus's
    in its last hex digit, or none: it is not trusted; the corpus is encoded again (the true ids) and
    the file replaced. Trusting a key by its prefix, or a missing one, would train on the other ids."""
    pairs = builtin_corpus("val")[:6]
    key = corpus_key(pairs, word_vocabs)
    path = tmp_path / f"encoded-{key}.pt"
    others = [[4, 5]] * len(pairs)
    entry = {"source": pack(others), "target": pack(others)}
    if stored is not None:
        entry["key"] = stored(key)
    torch.save(entry, path)
    expected = encode_pairs(pairs, word_vocabs)
    encoded = cached_encode_pairs(pairs, word_vocabs, tmp_path)
    assert (encoded.source, encoded.target) == (expected.source, expected.target) != (others, others)
    assert torch.load(path, weights_only=True)["key"] == key  # replaced by the true encoding


def test_a_multi30k_file_whose_pinned_digest_differs_in_its_last_character_is_refused(tmp_path):
    """A file in the data folder whose SHA-256 is the pinned one but for the last hex digit: refused,
    with both digests in full; the pinned digest written in capitals is the same digest."""
    (tmp_path / "val.de.gz").write_bytes(b"a Multi30k file")
    actual = hashlib.sha256(b"a Multi30k file").hexdigest()
    assert multi30k_path("val", "de", root=tmp_path, checksums={"val.de.gz": actual.upper()}).is_file()
    pinned = last_char_changed(actual)
    with pytest.raises(DataError, match=rf"is corrupt or a different version of Multi30k: its SHA-256 is "
                                        rf"{actual}, expected {pinned}"):
        multi30k_path("val", "de", root=tmp_path, checksums={"val.de.gz": pinned})

