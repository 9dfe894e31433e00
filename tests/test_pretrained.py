"""The translator shipped with the package (annotated_transformer/pretrained/): it is the file its
result file names, loads without training, and translates as its result file says."""

import shutil

import pytest
import torch

from annotated_transformer import Translator
from annotated_transformer.cli.commands import main
from annotated_transformer.runs import pretrained


@pytest.fixture(scope="module")
def translator() -> Translator:
    return pretrained.load_pretrained("multi30k", device="cpu")


def test_the_multi30k_translator_is_shipped_small_and_whole():
    assert pretrained.available() == ["multi30k"]
    info = pretrained.describe("multi30k")
    folder = pretrained.pretrained_dir("multi30k")
    assert {path.name for path in folder.iterdir()} >= set(pretrained.FILES)
    assert (folder / "model.pt").stat().st_size == info["size_bytes"] <= 10 * 2**20
    assert info["recipe"] == "multi30k" and info["test"] > 35


def test_it_loads_in_float32_with_its_recipes_decoding(translator):
    info = pretrained.describe("multi30k")
    assert all(p.dtype == torch.float32 for p in translator.model.parameters())
    assert sum(p.numel() for p in translator.model.parameters()) == info["parameters"]
    decoding = info["decoding"]
    assert (translator.beam_size, translator.alpha) == (decoding["beam_size"], decoding["alpha"])


def test_it_translates_the_test_sentences_as_its_result_file_says(translator):
    rows = pretrained.describe("multi30k")["translations"]
    assert translator.translate([row["source"] for row in rows]) == [row["translation"] for row in rows]


def test_a_damaged_or_unknown_translator_is_refused(tmp_path):
    root = tmp_path / "pretrained"
    shutil.copytree(pretrained.shipped_root(), root)
    with open(root / "multi30k" / "vocab.json", "a", encoding="utf-8") as file:
        file.write(" ")
    with pytest.raises(ValueError, match=r"is damaged .*reinstall the package"):
        pretrained.pretrained_dir("multi30k", root)
    with pytest.raises(ValueError, match="no shipped translator 'wmt14': choose one of multi30k"):
        pretrained.pretrained_dir("wmt14")


def test_the_command_line_translates_with_it(capsys):
    source = pretrained.describe("multi30k")["translations"][0]
    assert main(["translate", "pretrained:multi30k", source["source"], "--device", "cpu"]) == 0
    assert capsys.readouterr().out.strip() == source["translation"]
    with pytest.raises(SystemExit) as exit_code:
        main(["translate", "pretrained:nothing", "Hallo"])
    assert exit_code.value.code == 2
    assert "no shipped translator 'nothing'" in capsys.readouterr().err
