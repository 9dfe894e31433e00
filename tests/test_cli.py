"""The command line (chapter 11): `python -m annotated_transformer average`."""

import subprocess
import sys

import pytest
import torch
from helpers import small_config

from annotated_transformer.__main__ import main
from annotated_transformer.model import make_model
from annotated_transformer.training import read_checkpoint, save_checkpoint


def write_run(directory, n: int = 4) -> list:
    """n checkpoints of one configuration, at steps 10, 20, ..., with different parameters."""
    paths = []
    for i in range(n):
        torch.manual_seed(i)
        model = make_model(small_config())
        step = (i + 1) * 10
        paths.append(save_checkpoint(directory / f"step_{step:08d}.pt", model=model, step=step))
    return paths


def test_average_of_the_last_k_in_a_directory(tmp_path, capsys):
    paths = write_run(tmp_path / "run")
    assert main(["average", str(tmp_path / "run"), "--last", "3", "--output", str(tmp_path / "avg.pt")]) == 0
    averaged = read_checkpoint(tmp_path / "avg.pt")
    states = [read_checkpoint(p)["model"] for p in paths[-3:]]
    for name, tensor in averaged["model"].items():
        expected = sum(state[name].double() for state in states) / 3
        assert torch.allclose(tensor.double(), expected, atol=1e-6), name
    assert averaged["step"] == 40
    assert averaged["extra"]["averaged_steps"] == [20, 30, 40]
    assert "averaged 3 checkpoints (steps 20, 30, 40)" in capsys.readouterr().out


def test_average_of_listed_files(tmp_path):
    paths = write_run(tmp_path)
    main(["average", str(paths[0]), str(paths[2]), "-o", str(tmp_path / "avg.pt")])
    assert read_checkpoint(tmp_path / "avg.pt")["extra"]["averaged_steps"] == [10, 30]


def test_averaging_one_checkpoint_k_times_returns_it(tmp_path):
    (path,) = write_run(tmp_path, 1)
    main(["average", str(path), str(path), str(path), "-o", str(tmp_path / "avg.pt")])
    original, averaged = read_checkpoint(path)["model"], read_checkpoint(tmp_path / "avg.pt")["model"]
    assert all(torch.equal(original[name], averaged[name]) for name in original)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["EMPTY", "-o", "out.pt"], "no step_*.pt checkpoints in"),
        (["RUN", "--last", "0", "-o", "out.pt"], "--last must be at least 1"),
        (["RUN", "--last", "5", "-o", "out.pt"], "holds 4 checkpoint(s), fewer than --last 5"),
        (["RUN/step_00000099.pt", "-o", "out.pt"], "no checkpoint at"),
        (["RUN/step_00000010.pt", "RUN", "-o", "out.pt"], "is a directory"),
        (["RUN", "-k", "2", "-o", "RUN/step_00000040.pt"], "is one of the checkpoints to average"),
    ],
)
def test_bad_input_ends_with_a_message_and_status_2(tmp_path, capsys, arguments, message):
    write_run(tmp_path / "run")
    (tmp_path / "empty").mkdir()
    places = {"EMPTY": str(tmp_path / "empty"), "RUN": str(tmp_path / "run")}
    for name, place in places.items():
        arguments = [argument.replace(name, place) for argument in arguments]
    with pytest.raises(SystemExit) as exit_info:
        main(["average", *arguments])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_checkpoints_of_different_models_are_refused(tmp_path, capsys):
    save_checkpoint(tmp_path / "a.pt", model=make_model(small_config()))
    save_checkpoint(tmp_path / "b.pt", model=make_model(small_config(d_ff=48)))
    with pytest.raises(SystemExit):
        main(["average", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "-o", str(tmp_path / "avg.pt")])
    assert "error" in capsys.readouterr().err
    assert not (tmp_path / "avg.pt").exists()


def test_python_dash_m_runs_the_command_line(tmp_path):
    write_run(tmp_path, 2)
    result = subprocess.run(
        [sys.executable, "-m", "annotated_transformer", "average", str(tmp_path), "--last", "2",
         "-o", str(tmp_path / "x.pt")],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "x.pt").is_file()
    help_text = subprocess.run(
        [sys.executable, "-m", "annotated_transformer", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "average" in help_text and "§6.1" in help_text
