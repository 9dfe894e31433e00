"""A training run that survives (chapter 10): files written atomically (`files`), checkpoints that
hold a trainer's whole state and are checked when read, a directory of checkpoints that a run
resumes from exactly, passing over a damaged one but never one of another model, and the
checkpoints of earlier releases, still read."""

import dataclasses
import os
from pathlib import Path

import pytest
import torch
from helpers import (
    assert_identical,
    copy_batches,
    max_difference,
    parameters,
    small_config,
    tiny_model,
    tiny_trainer,
    version_2,
)

from annotated_transformer.checkpoints import (
    CheckpointDirectory,
    CheckpointError,
    CheckpointMismatch,
    checkpoint_paths,
    checkpoint_sha256,
    load_checkpoint,
    model_from_checkpoint,
    read_checkpoint,
    save_checkpoint,
    state_dict_sha256,
)
from annotated_transformer.helpers.files import atomic_save, atomic_write_text, remove_stale_temporaries
from annotated_transformer.model import make_model
from annotated_transformer.training import TrainConfig, Trainer, TrainingDiverged


def trained(steps: int = 1, **config) -> Trainer:
    """A tiny trainer after `steps` steps of `copy_batches`."""
    t = tiny_trainer(max_steps=steps, **config)
    t.fit(copy_batches)
    return t


def resave(path: Path, checkpoint: dict) -> None:
    """Write `checkpoint` (changed on purpose) with a digest that matches: a sound file."""
    checkpoint["sha256"] = checkpoint_sha256(checkpoint)
    torch.save(checkpoint, path)


# --- files -----------------------------------------------------------------------------------------


def test_text_and_checkpoints_are_written_by_one_atomic_write(tmp_path, monkeypatch):
    # Both writers flush their temporary file and then the directory (the rename made durable).
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append("directory" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert atomic_write_text(tmp_path / "a.json", "ä") == tmp_path / "a.json"
    assert atomic_save({"x": 1}, tmp_path / "b.pt") == tmp_path / "b.pt"
    if Path("/proc/self/fd").is_dir():  # Linux: the descriptors can be told apart
        assert synced == ["file", "directory", "file", "directory"]
    assert (tmp_path / "a.json").read_bytes() == "ä".encode()
    assert torch.load(tmp_path / "b.pt", weights_only=True) == {"x": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.pt"]


def test_a_crash_while_writing_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "step_00000001.pt", tiny_model(), step=1)
    before = path.read_bytes()

    def crash(obj, file):
        file.write(b"partial")
        raise KeyboardInterrupt  # even an interrupt, not only an error

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, tiny_model(seed=1), step=2)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["step_00000001.pt"]


def test_stale_temporary_files_are_removed(tmp_path):
    (tmp_path / ".step_00000002.pt.999999.tmp").write_bytes(b"half")
    ours = tmp_path / f".step_00000004.pt.{os.getpid()}.tmp"
    ours.write_bytes(b"being written")
    (tmp_path / "step_00000001.pt").write_bytes(b"kept")
    removed = remove_stale_temporaries(tmp_path)
    assert [p.name for p in removed] == [".step_00000002.pt.999999.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([ours.name, "step_00000001.pt"])


# --- what a checkpoint holds, and its checks ------------------------------------------------------


def test_a_trainers_checkpoint_holds_its_state_dict_as_it_is(tmp_path):
    t = trained(3)
    path = CheckpointDirectory(tmp_path).save(t, extra={"note": "kept"})
    checkpoint = torch.load(path, weights_only=True)
    assert set(checkpoint) == {"format", "version", "config", "state", "extra", "sha256"}
    assert checkpoint["format"] == "annotated-transformer-checkpoint" and checkpoint["version"] == 3
    assert checkpoint["config"] == dataclasses.asdict(t.model.config)
    assert checkpoint["extra"] == {"note": "kept"}
    state = t.state_dict()
    assert checkpoint["state"].keys() == state.keys() and checkpoint["state"]["step"] == 3
    assert_identical(list(checkpoint["state"]["model"].values()), list(state["model"].values()))
    moments = (saved["optimizer"]["state"][0]["exp_avg"] for saved in (checkpoint["state"], state))
    assert torch.equal(*moments)
    assert {k: checkpoint["state"][k] for k in ("scheduler", "scaler", "epoch", "position", "config")} == {
        k: state[k] for k in ("scheduler", "scaler", "epoch", "position", "config")}
    assert checkpoint["sha256"] == checkpoint_sha256(checkpoint)
    with pytest.raises(ValueError, match="the trainer's own step"):
        save_checkpoint(tmp_path / "x.pt", t, step=5)


def test_a_checkpoint_of_version_2_resumes_exactly(tmp_path):
    # Written by the releases before version 3 (the shipped translator is one, of a model alone).
    t = trained(3, checkpoint_every=3)
    path = CheckpointDirectory(tmp_path).save(t, extra={"note": "kept"})
    torch.save(version_2(torch.load(path, weights_only=True)), path)
    read = read_checkpoint(path)
    assert read["version"] == 2 and read["extra"] == {"note": "kept"}  # the state's entries taken out
    assert read["state"].keys() == t.state_dict().keys()
    fresh = tiny_trainer(model_seed=1, max_steps=3)
    assert CheckpointDirectory(tmp_path).resume_newest(fresh) == (path, [])
    assert fresh.step == 3 and fresh.config.max_steps == 3 and fresh.position == t.position
    assert_identical(parameters(t), parameters(fresh))
    model_alone = save_checkpoint(tmp_path / "model.pt", tiny_model(), step=7)
    old = version_2(torch.load(model_alone, weights_only=True))
    torch.save(old, model_alone)
    assert read_checkpoint(model_alone)["state"].keys() == {"model", "step"}
    old["step"] = 8  # damage the digest covers
    torch.save(old, model_alone)
    with pytest.raises(CheckpointError, match="SHA-256"):
        read_checkpoint(model_alone)


def test_the_shipped_translator_is_read(tmp_path):
    from importlib.resources import files

    path = files("annotated_transformer") / "pretrained" / "multi30k" / "model.pt"
    checkpoint = read_checkpoint(path)
    assert checkpoint["state"]["step"] > 0 and "optimizer" not in checkpoint["state"]
    assert model_from_checkpoint(path).config.d_model == checkpoint["config"]["d_model"]


def test_checkpoint_round_trip(tmp_path):
    t = trained(1)
    path = CheckpointDirectory(tmp_path).save(t)
    fresh = tiny_trainer(model_seed=1)
    assert load_checkpoint(path, fresh)["state"]["step"] == 1
    assert max_difference(parameters(t), parameters(fresh)) == 0.0
    assert fresh.step == 1 and fresh.scheduler.last_epoch == 1
    moments = [trainer.optimizer.state_dict()["state"][0]["exp_avg"] for trainer in (t, fresh)]
    assert moments[0].equal(moments[1])
    rebuilt = model_from_checkpoint(path)
    assert rebuilt.config == t.model.config
    assert max_difference(list(rebuilt.parameters()), parameters(t)) == 0.0


def test_the_gradient_scalers_state_is_kept(tmp_path):
    t = tiny_trainer(clip_grad_norm=1.0)
    t.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)  # fp16's, on the CPU
    for batch in copy_batches(0)[:4]:
        t.train_step([batch])
    path = CheckpointDirectory(tmp_path).save(t)
    assert read_checkpoint(path)["state"]["scaler"] == t.scaler.state_dict()
    fresh = tiny_trainer(clip_grad_norm=1.0)
    fresh.scaler = torch.amp.GradScaler("cpu", init_scale=1.0, growth_interval=3)
    CheckpointDirectory(tmp_path).resume_newest(fresh)
    assert fresh.scaler.state_dict() == t.scaler.state_dict()


def test_a_compiled_trainers_checkpoint_has_plain_names_and_resumes_a_compiled_one(tmp_path):
    compiled = torch.compile(tiny_model(), backend="eager")
    t = Trainer(compiled, TrainConfig(warmup=10, progress=False, log_every=0), device="cpu")
    t.train_step(copy_batches(0)[:1])
    path = CheckpointDirectory(tmp_path).save(t)
    trained_parameters = [p.detach().clone() for p in compiled.parameters()]
    plain = tiny_model(seed=1)
    load_checkpoint(path, plain)
    assert max_difference(list(plain.parameters()), trained_parameters) == 0.0
    assert max_difference(list(model_from_checkpoint(path).parameters()), trained_parameters) == 0.0
    fresh = Trainer(torch.compile(tiny_model(seed=1), backend="eager"),
                    TrainConfig(warmup=10, progress=False), device="cpu")
    CheckpointDirectory(tmp_path).resume_newest(fresh)
    assert fresh.step == 1 and max_difference(list(fresh.model.parameters()), trained_parameters) == 0.0


def test_checkpoints_are_loaded_with_weights_only(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "a.pt", tiny_model())
    calls = []
    real_load = torch.load
    monkeypatch.setattr(
        torch, "load", lambda *args, **kwargs: calls.append(kwargs) or real_load(*args, **kwargs)
    )
    read_checkpoint(path)
    assert calls and all(call.get("weights_only") is True for call in calls)


def test_truncated_checkpoint_is_detected(tmp_path):
    path = save_checkpoint(tmp_path / "a.pt", tiny_model())
    data = path.read_bytes()
    for size in (0, 10, len(data) // 2, len(data) - 10):
        path.write_bytes(data[:size])
        with pytest.raises(CheckpointError, match="truncated or corrupt"):
            read_checkpoint(path)


def test_corrupted_parameters_are_detected(tmp_path):
    path = save_checkpoint(tmp_path / "a.pt", tiny_model())
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["state"]["model"]["generator.proj.weight"][0, 0] += 1.0
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match="SHA-256"):
        read_checkpoint(path)


def test_flipped_bytes_are_never_silently_loaded(tmp_path):
    path = save_checkpoint(tmp_path / "a.pt", tiny_model())
    data = bytearray(path.read_bytes())
    reference = read_checkpoint(path)["state"]["model"]
    for offset in range(1000, len(data), len(data) // 25):
        damaged = bytearray(data)
        damaged[offset] ^= 0xFF
        path.write_bytes(bytes(damaged))
        try:
            loaded = read_checkpoint(path)["state"]["model"]
        except CheckpointError:
            continue
        # A flip that reading survives must have hit bytes that do not matter (metadata padding).
        assert all(loaded[k].equal(reference[k]) for k in reference)


@pytest.mark.parametrize("where", ["optimizer", "rng", "position", "scheduler", "extra", "step"])
def test_damage_anywhere_in_the_saved_state_is_detected(tmp_path, where):
    path = CheckpointDirectory(tmp_path).save(trained(1), extra={"note": "kept"})
    checkpoint = torch.load(path, weights_only=True)
    state = checkpoint["state"]
    if where == "optimizer":
        state["optimizer"]["state"][0]["exp_avg"].view(-1)[0] += 1e-3
    elif where == "rng":
        state["rng"]["torch"][100] ^= 1
    elif where == "position":
        state["position"] += 1
    elif where == "scheduler":
        state["scheduler"]["last_epoch"] += 1
    elif where == "extra":
        checkpoint["extra"]["note"] = "changed"
    else:
        state["step"] += 1
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match="does not match the SHA-256 digest"):
        read_checkpoint(path)


def test_version_1_checkpoints_are_still_read(tmp_path):
    m = tiny_model()
    state = {name: tensor.detach().clone() for name, tensor in m.state_dict().items()}
    old = {"format": "annotated-transformer-checkpoint", "version": 1, "config": dataclasses.asdict(m.config),
           "model": state, "model_sha256": state_dict_sha256(state), "optimizer": None, "scheduler": None,
           "step": 3, "rng": {}, "extra": {}}
    torch.save(old, tmp_path / "v1.pt")
    assert read_checkpoint(tmp_path / "v1.pt")["state"]["step"] == 3
    old["model"]["generator.proj.weight"][0, 0] += 1
    torch.save(old, tmp_path / "v1.pt")
    with pytest.raises(CheckpointError, match="SHA-256"):
        read_checkpoint(tmp_path / "v1.pt")


def test_other_files_are_refused_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        read_checkpoint(tmp_path / "missing.pt")
    torch.save({"weights": torch.zeros(3)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not an annotated-transformer checkpoint"):
        read_checkpoint(tmp_path / "other.pt")
    (tmp_path / "text.pt").write_text("hello")  # never a checkpoint: not called damaged
    with pytest.raises(CheckpointError, match="is not a checkpoint: it does not begin as the files of torch"):
        read_checkpoint(tmp_path / "text.pt")


def test_checkpoints_with_non_finite_parameters_are_refused(tmp_path):
    m = tiny_model()
    with torch.no_grad():
        m.generator.proj.weight[0, 0] = float("nan")
    path = save_checkpoint(tmp_path / "nan.pt", m)
    with pytest.raises(CheckpointError, match="NaN or infinite parameters"):
        read_checkpoint(path)
    t, checkpoints = tiny_trainer(), CheckpointDirectory(tmp_path / "run")
    t.model.load_state_dict(m.state_dict())
    with pytest.raises(TrainingDiverged, match=r"parameters are NaN or infinite; .* holds no checkpoint yet"):
        checkpoints.save(t)
    assert not (tmp_path / "run").exists()
    sound = trained(2)
    kept = checkpoints.save(sound)
    sound.model.load_state_dict(m.state_dict())
    with pytest.raises(TrainingDiverged, match=f"step 2: .*; the newest checkpoint, {kept}, is kept"):
        checkpoints.save(sound)
    assert checkpoints.paths() == [kept] and read_checkpoint(kept)["state"]["step"] == 2


# --- another configuration ----------------------------------------------------------------------


def test_checkpoint_of_another_configuration_names_the_differences(tmp_path):
    path = save_checkpoint(tmp_path / "a.pt", tiny_model())
    with pytest.raises(CheckpointMismatch) as error:
        load_checkpoint(path, tiny_model(n_layers=3, d_ff=48))
    message = str(error.value)
    assert "config n_layers: checkpoint 2, model 3" in message
    assert "missing from the checkpoint: decoder.layers.2" in message  # keys the checkpoint lacks
    assert "feed_forward.w_1.weight: checkpoint (64, 32), model (48, 32)" in message
    assert "TransformerConfig(**read_checkpoint(path)['config'])" in message


def test_a_checkpoint_loads_into_a_model_differing_only_in_dropout(tmp_path):
    path = save_checkpoint(tmp_path / "a.pt", tiny_model())
    target = tiny_model(seed=1, dropout=0.3)
    load_checkpoint(path, target)
    assert max_difference(list(target.parameters()), list(tiny_model().parameters())) == 0.0


def test_resuming_needs_the_optimizer_state(tmp_path):
    path = save_checkpoint(tmp_path / "step_00000001.pt", tiny_model())
    with pytest.raises(CheckpointError, match="no optimizer state"):
        load_checkpoint(path, tiny_trainer())
    # ... and resume_newest passes over such a file (an average, say) as it does over a damaged one.
    used, passed_over = CheckpointDirectory(tmp_path).resume_newest(tiny_trainer())
    assert used is None and "no optimizer state" in passed_over[0]


# --- a directory of checkpoints -------------------------------------------------------------------


def test_a_run_stopped_and_resumed_from_its_directory_ends_as_an_uninterrupted_one(tmp_path):
    # Dropout on (the random generators matter), accumulation of 2 (the position in the epoch
    # matters); the run stops 2 steps after its last checkpoint, in the middle of the second epoch,
    # and those steps are trained again.
    steps_per_epoch = -(-len(copy_batches(0)) // 2)
    total = steps_per_epoch + 4

    def new_trainer(model_seed: int = 3) -> Trainer:
        return tiny_trainer(model_seed, {"dropout": 0.1}, max_steps=total, accumulate=2, seed=7,
                            checkpoint_every=steps_per_epoch + 1)

    uninterrupted = new_trainer()
    uninterrupted.fit(copy_batches)
    checkpoints = CheckpointDirectory(tmp_path)
    interrupted = new_trainer()
    interrupted.fit(copy_batches, on_step=lambda step: step == steps_per_epoch + 3,
                    on_checkpoint=lambda: checkpoints.save(interrupted))
    torch.manual_seed(999)  # anything the process does in between must not matter
    resumed = new_trainer(model_seed=4)
    used, passed_over = checkpoints.resume_newest(resumed)
    assert used == checkpoints.paths()[-1] and passed_over == []
    assert (resumed.step, resumed.epoch) == (steps_per_epoch + 1, 1) and resumed.position > 0
    resumed.fit(copy_batches)
    assert_identical(parameters(uninterrupted), parameters(resumed))


def test_the_directory_keeps_the_newest_checkpoints(tmp_path):
    t = tiny_trainer(max_steps=7, checkpoint_every=2)
    checkpoints = CheckpointDirectory(tmp_path / "run", keep=2)
    assert checkpoints.paths() == []  # not made yet
    t.fit(copy_batches, on_checkpoint=lambda: checkpoints.save(t))
    assert [p.name for p in checkpoints.paths()] == ["step_00000004.pt", "step_00000006.pt"]
    for keep in (-1, 1.5, True):
        with pytest.raises(ValueError, match="keep must be a whole number of checkpoints, at least 0"):
            CheckpointDirectory(tmp_path, keep=keep)


def test_checkpoint_paths_sort_by_step(tmp_path):
    for step in (10, 2, 100):
        save_checkpoint(tmp_path / f"step_{step:08d}.pt", tiny_model(), step=step)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert [read_checkpoint(p)["state"]["step"] for p in checkpoint_paths(tmp_path)] == [2, 10, 100]
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        checkpoint_paths(tmp_path / "missing")


def test_resume_passes_over_a_damaged_newest_checkpoint(tmp_path):
    t = tiny_trainer(max_steps=6, checkpoint_every=2)
    checkpoints = CheckpointDirectory(tmp_path)
    t.fit(copy_batches, on_checkpoint=lambda: checkpoints.save(t))
    newest = checkpoints.paths()[-1]
    newest.write_bytes(newest.read_bytes()[:1000])  # a copy cut short
    fresh = tiny_trainer(max_steps=6, checkpoint_every=2)
    used, passed_over = checkpoints.resume_newest(fresh)
    assert used.name == "step_00000004.pt" and fresh.step == 4
    assert len(passed_over) == 1 and "step_00000006.pt is truncated or corrupt" in passed_over[0]
    assert CheckpointDirectory(tmp_path / "empty").resume_newest(tiny_trainer()) == (None, [])


def test_resume_refuses_a_sound_newer_checkpoint_of_another_configuration(tmp_path):
    # The newest checkpoint is whole but of another model (a wider feed-forward layer): a mistake in
    # the command, not damage. Passing over it to the older checkpoint of this model would quietly
    # train something else than was asked for.
    checkpoints = CheckpointDirectory(tmp_path)
    checkpoints.save(trained(2))
    wider = Trainer(make_model(small_config(d_ff=48)), TrainConfig(max_steps=4, warmup=10, progress=False,
                                                                   log_every=0), device="cpu")
    wider.fit(copy_batches)
    checkpoints.save(wider)
    assert [p.name for p in checkpoints.paths()] == ["step_00000002.pt", "step_00000004.pt"]
    fresh = tiny_trainer()
    before = parameters(fresh)
    with pytest.raises(CheckpointMismatch, match=r"step_00000004\.pt was written for another model"):
        checkpoints.resume_newest(fresh)
    assert fresh.step == 0 and max_difference(before, parameters(fresh)) == 0.0  # left as it was


def test_a_directory_written_by_a_diverging_run_holds_only_sound_checkpoints(tmp_path):
    t = tiny_trainer(max_steps=60, warmup=1, lr_factor=1e6, log_every=5, checkpoint_every=1,
                     clip_grad_norm=None, track_grad_norm=True)
    checkpoints = CheckpointDirectory(tmp_path)
    with pytest.raises(TrainingDiverged) as caught:
        t.fit(copy_batches, on_checkpoint=lambda: checkpoints.save(t))
    step = int(str(caught.value).split("at step ")[1].split(":")[0])
    saved = checkpoints.paths()
    # each read, sound
    assert [read_checkpoint(path)["state"]["step"] for path in saved] == list(range(1, step))
    # Found by the log point (a NaN loss) or by the checkpoint (NaN parameters after the update of a
    # step whose loss was still finite), depending on the float kernels: the last sound one is named.
    message = str(caught.value)
    assert f"the last checkpoint was taken at step {step - 1}, before it" in message or (
        f"the newest checkpoint, {saved[-1]}, is kept for resuming" in message)


# --- promises held against mutation testing's survivors ------------------------------------------


def test_checkpoint_paths_sort_by_step_number_not_by_name(tmp_path):
    # Names made by hand, without checkpoint_path's zero padding, still match step_*.pt: sorted as
    # text they would come 10, 100, 9; the promise is oldest (lowest step) first.
    for step in (100, 9, 10):
        (tmp_path / f"step_{step}.pt").write_bytes(b"")
    by_step = ["step_9.pt", "step_10.pt", "step_100.pt"]
    assert [p.name for p in checkpoint_paths(tmp_path)] == by_step
    assert [p.name for p in CheckpointDirectory(tmp_path).paths()] == by_step


def test_map_location_reaches_torch_load(tmp_path):
    """The map_location given to read_checkpoint, load_checkpoint and model_from_checkpoint is the one
    torch.load maps the tensors with (a callable one is called for each storage)."""
    path = save_checkpoint(tmp_path / "a.pt", tiny_model(), step=4)
    reference = read_checkpoint(path)["state"]["model"]
    for read in (lambda where: read_checkpoint(path, where),
                 lambda where: load_checkpoint(path, tiny_model(seed=1), where),
                 lambda where: model_from_checkpoint(path, where)):
        mapped = []

        def where(storage, location, mapped=mapped):
            mapped.append(location)
            return storage

        read(where)
        assert mapped and set(mapped) == {"cpu"}
    model = model_from_checkpoint(path, {"cpu": "cpu"})
    assert all(torch.equal(model.state_dict()[k], reference[k]) for k in reference)


def test_model_from_checkpoint_takes_a_checkpoint_already_read(tmp_path):
    path = save_checkpoint(tmp_path / "a.pt", tiny_model(), step=4)
    checkpoint = read_checkpoint(path)
    path.unlink()  # the dict alone is used: the file is not read again
    model = model_from_checkpoint(checkpoint)
    assert model.config == tiny_model().config
    assert max_difference(list(model.parameters()), list(tiny_model().parameters())) == 0.0


def test_a_corrupt_files_message_names_the_error_and_its_first_line(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "a.pt", tiny_model())
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(path)
    cause = caught.value.__cause__
    assert f"({type(cause).__name__}: {str(cause).splitlines()[0]})" in str(caught.value)

    def failing(error):
        def load(*args, **kwargs):
            raise error
        return load

    save_checkpoint(path, tiny_model())  # sound again: what torch.load raises is all that differs
    monkeypatch.setattr(torch, "load", failing(RuntimeError("the zip's central directory\nis cut")))
    with pytest.raises(CheckpointError, match=r"truncated or corrupt and cannot be read \(RuntimeError: "
                                              r"the zip's central directory\); delete it"):
        read_checkpoint(path)
    monkeypatch.setattr(torch, "load", failing(EOFError()))  # no message at all
    with pytest.raises(CheckpointError, match=r"cannot be read \(EOFError: no detail\); delete it"):
        read_checkpoint(path)


def test_a_later_versions_file_is_refused_naming_the_file_and_the_versions_read(tmp_path):
    path = save_checkpoint(tmp_path / "a.pt", tiny_model())
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["version"] = 99
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(path)
    assert str(caught.value).startswith(f"{path} has checkpoint format version 99")
    assert "this package reads versions 1 to 3: update the package" in str(caught.value)


def test_a_non_finite_checkpoints_message_names_the_file(tmp_path):
    m = tiny_model()
    with torch.no_grad():
        m.generator.proj.weight[0, 0] = float("inf")
    path = save_checkpoint(tmp_path / "inf.pt", m)
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(path)
    assert str(caught.value).startswith(f"{path} holds NaN or infinite parameters (")
    assert "generator.proj.weight" in str(caught.value)


def test_a_model_alones_checkpoint_is_of_step_0_unless_told(tmp_path):
    assert read_checkpoint(save_checkpoint(tmp_path / "a.pt", tiny_model()))["state"]["step"] == 0
    assert read_checkpoint(save_checkpoint(tmp_path / "b.pt", tiny_model(), step=12))["state"]["step"] == 12


def test_a_step_given_with_a_trainer_is_refused_with_the_whole_reason(tmp_path):
    with pytest.raises(ValueError) as caught:
        save_checkpoint(tmp_path / "x.pt", tiny_trainer(), step=5)
    assert str(caught.value) == "a trainer's checkpoint holds the trainer's own step: leave out step"
    assert not (tmp_path / "x.pt").exists()


def test_saving_goes_on_when_an_old_checkpoint_is_already_gone(tmp_path, monkeypatch):
    # Another process (a second copy of the run, a clean-up) removed an old checkpoint between the
    # directory's listing and the deletion: the save still succeeds and keeps the newest.
    t = trained(2)
    checkpoints = CheckpointDirectory(tmp_path, keep=1)
    kept = checkpoints.save(t)
    listing = checkpoints.paths
    monkeypatch.setattr(checkpoints, "paths", lambda: [tmp_path / "step_00000001.pt", *listing()])
    t.step = 3
    newest = checkpoints.save(t)
    assert newest == tmp_path / "step_00000003.pt" and not kept.exists()
    assert listing() == [newest]


def test_every_rank_of_a_two_process_run_waits_for_the_checkpoint(tmp_path, monkeypatch):
    barriers = []
    monkeypatch.setattr(torch.distributed, "barrier", lambda *args, **kwargs: barriers.append(args))
    t = trained(1)
    CheckpointDirectory(tmp_path).save(t)
    assert barriers == []  # a lone process waits for no one
    t.world_size = 2
    path = CheckpointDirectory(tmp_path).save(t)
    assert barriers == [()] and path.exists()


def test_keep_0_keeps_every_checkpoint(tmp_path):
    t, checkpoints = trained(1), CheckpointDirectory(tmp_path)
    assert checkpoints.keep == 0  # the default
    for step in (1, 2, 3):
        t.step = step
        checkpoints.save(t)
    assert [p.name for p in checkpoints.paths()] == [f"step_0000000{step}.pt" for step in (1, 2, 3)]
