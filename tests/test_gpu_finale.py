"""The GPU chapter's stages run end to end on the CPU in their tiny mode (experiments/gpu_finale.py
and the scripts it runs), and the committed results of the real runs agree with the recipe the
package registers and with the choices they record."""

import json
import shutil
from importlib.resources import files

import colab_chapters  # experiments/ is on pytest's pythonpath (pyproject.toml)
import gpu_fast_recipe
import gpu_finale
import pytest
import torch
from helpers import need_dev_tools

from annotated_transformer.data import corpus
from annotated_transformer.recipes import RECIPES, Recipe

RESULTS = files("annotated_transformer") / "results" / "gpu"


def committed(name: str):
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """The report folder of the search stage, run once in tiny mode (its two candidates trained side by
    side, about 20 s): the tests read it, and the final stage's test works on a copy of it."""
    root = tmp_path_factory.mktemp("search")
    gpu_finale.main(["search", "--tiny", "--run-root", str(root / "runs"), "--out", str(root / "out")])
    return root / "out"


def test_the_search_stage_runs_in_tiny_mode(searched):
    out = searched
    names = {p.name for p in out.iterdir()}
    assert {"search.json", "final.json", "history.json", "validation.json", "translations.json",
            "attention.pt"} <= names
    search = json.loads((out / "search.json").read_text())
    final = json.loads((out / "final.json").read_text())
    scores = {c["name"]: c["val_beam"] for c in search["candidates"]}
    assert set(scores) == {"recipe", "p0.2"} and search["chosen"] == max(scores, key=scores.get)
    assert all(c["validation"] and c["validation"][-1]["step"] == c["steps"] for c in search["candidates"])
    # The test set is scored for the chosen run only, after its decoding was chosen on validation.
    assert final["candidate"] == search["chosen"]
    assert search["choice"] == max(search["decoding"], key=lambda row: row["val_beam"])
    assert (final["test"][0]["averaged"], final["test"][0]["alpha"]) == (
        search["choice"]["averaged"], search["choice"]["alpha"])
    assert search["test"] == final["test"]  # the search keeps its own test scores
    assert search["command"].startswith("python experiments/gpu_finale.py search --tiny")
    assert len(json.loads((out / "translations.json").read_text())) == len(corpus("builtin", "test"))
    attention = torch.load(out / "attention.pt", weights_only=True)
    assert len(attention) == gpu_finale.ATTENTION_SENTENCES
    first = attention[0]
    assert first["cross"].shape[-2:] == (len(first["target_tokens"]), len(first["source_tokens"]))


def test_the_final_stage_trains_the_choice_alone_and_keeps_the_search(searched, tmp_path):
    out = shutil.copytree(searched, tmp_path / "out")  # the final stage reads its search.json
    search = (out / "search.json").read_text()
    gpu_finale.main(["final", "--tiny", "--run-root", str(tmp_path / "final"), "--out", str(out),
                     "--copy-to", str(tmp_path / "copy")])
    final = json.loads((out / "final.json").read_text())
    assert (out / "search.json").read_text() == search  # the search's report is left as it was
    assert final["candidate"] == json.loads(search)["chosen"] and final["side_by_side"] == 1
    assert (out / "final_search.json").exists() and (tmp_path / "copy" / "gpu_results.tgz").exists()
    with pytest.raises(SystemExit):
        other = next(name for name in gpu_finale.CANDIDATES if name != final["candidate"])
        gpu_finale.parse_args(["final", "--tiny", "--out", str(out), "--candidates", other])


def test_history_is_thinned_to_a_bound_and_keeps_the_last_step():
    history = [{"step": i} for i in range(1, 1002)]
    kept = gpu_finale.thinned(history, 100)
    assert len(kept) <= 101 and kept[0]["step"] == 1 and kept[-1]["step"] == 1001


def test_the_registered_gpu_recipe_is_the_one_the_search_chose():
    final, search = committed("final.json"), committed("search.json")
    assert RECIPES["multi30k-gpu"] == Recipe.from_dict(final["recipe"])
    scored = [c for c in search["candidates"] if "val_beam" in c]
    assert final["candidate"] == search["chosen"] == max(scored, key=lambda c: c["val_beam"])["name"]
    assert search["choice"] == max(search["decoding"], key=lambda row: row["val_beam"])
    # The final run (the choice, trained again alone) chose its own decoding on validation.
    choice = max(final["decoding"], key=lambda row: row["val_beam"])
    recipe = final["recipe"]
    assert (recipe["average_last"], recipe["alpha"]) == (choice["averaged"], choice["alpha"])
    assert final["side_by_side"] == 1 and final["val_beam"] == choice["val_beam"]
    trained = gpu_finale.candidate_recipe(search["chosen"], gpu_finale.parse_args(["search"]))
    chosen = trained.to_dict()
    recorded = Recipe.from_dict(final["recipe"]).to_dict()  # a flat dict of an older version: read as such
    changed = {k for k in chosen if chosen[k] != recorded[k]}
    assert changed <= {"average_last", "alpha"}  # the run trained what the recipe says


@pytest.mark.parametrize("name", ["final.json", "search.json", "bench.json", "validation.json"])
def test_committed_gpu_results_name_their_hardware_or_run(name):
    result = committed(name)
    if name == "validation.json":
        assert result and all({"step", "minutes", "val_nll", "val_bleu_greedy"} <= set(r) for r in result)
    elif name == "bench.json":  # rows of several runs: each names its own machine and command
        rows = result["base"] + result["recipe"]
        assert rows and all("H200" in row["hardware"]["gpu"] and row["command"] for row in rows)
    else:
        assert "H200" in json.dumps(result["hardware"])


def test_the_table3_stage_runs_side_by_side_and_checks_convergence(tmp_path):
    out, runs = tmp_path / "out", tmp_path / "runs"
    gpu_finale.main(["table3", "--tiny", "--run-root", str(runs), "--out", str(out)])
    report = json.loads((out / "table3.json").read_text())
    assert [row["row"] for row in report["rows"]] == ["base×2", "base", "E", "base", "base"]
    assert [row["recipe"]["seed"] for row in report["rows"][3:]] == [1, 2] and report["left_out"] == []
    doubled, base = report["rows"][0], report["rows"][1]
    assert doubled["steps"] == 2 * base["steps"] == 2 * report["scale"]["recipe"]["max_steps"]
    check = report["convergence"]
    assert check["val_bleu"] == [base["val_bleu"], doubled["val_bleu"]]
    assert check["levelled_off"] == (abs(doubled["val_bleu"] - base["val_bleu"]) < 1)
    assert report["exit_status"] == 0 and report["scale"]["name"] == "quick"


def test_the_table3_stage_stops_at_its_time_and_names_what_it_left_out(tmp_path):
    out = tmp_path / "out"
    gpu_finale.main(["table3", "--tiny", "--run-root", str(tmp_path / "runs"), "--out", str(out),
                     "--wait-minutes", "0.01"])
    report = json.loads((out / "table3.json").read_text())
    assert report["rows"] == [] and len(report["left_out"]) == 5 and report["convergence"] is None
    assert report["exit_status"] != 0


def test_the_table3_plan_shares_the_runs_two_experiments_have_in_common():
    args = gpu_finale.parse_args(["table3", "--experiments", "table3", "layer-norm"])
    scale, variants = gpu_finale.table3_plan(args)
    slugs = [variant.slug(scale.base) for variant in variants]
    # the base's seeds 1 and 2 too; post-LN with warmup at N=6 is the base
    assert len(slugs) == len(set(slugs)) == 1 + 19 + 2 + 8 - 1
    assert variants[0].row == "base×2" and scale.name == "medium"


def test_the_profile_stage_writes_both_profiles_in_tiny_mode(tmp_path):
    out = tmp_path / "out"
    assert gpu_finale.main(["profile", "--tiny", "--out", str(out)]) == 0
    compiled, eager = (json.loads((out / f"profile_{mode}.json").read_text())
                       for mode in ("compiled", "eager"))
    assert compiled["step"]["compiled"] and not eager["step"]["compiled"]
    assert all(abs(sum(k["share"] for k in p["kinds"]) - 1) < 1e-6 for p in (compiled, eager))


def test_the_stages_pass_their_options_to_the_scripts_they_run(tmp_path):
    def argv(*options):
        args = gpu_finale.parse_args([*options, "--out", str(tmp_path), "--data-dir", "DATA"])
        return gpu_finale.bench_argv(args, 2.0) if args.stage == "bench" else gpu_finale.delegated(args)

    bench = argv("bench", "--only", "missing")
    assert bench[1].endswith("benchmarks/gpu_training.py") and bench[3] == str(tmp_path / "bench.json")
    assert bench[4:8] == ["--only", "missing", "--minutes", "2.00"]
    ablation = argv("ablation", "--bench-minutes", "6.5")
    assert ablation[0].endswith("benchmarks/gpu_ablation.py")
    assert ablation[2] == str(tmp_path / "ablation.json")
    assert "--minutes" in ablation and ablation[ablation.index("--minutes") + 1] == "6.50"
    recipe = argv("recipe", "--candidates", "p0.3", "bpe8000")
    assert recipe[0].endswith("experiments/gpu_fast_recipe.py") and recipe[1] == "search"
    assert recipe[recipe.index("--candidates") + 1 :][:2] == ["p0.3", "bpe8000"]
    assert argv("seeds")[1] == "seeds" and "--candidates" not in argv("seeds")
    colab = argv("colab", "--part", "3")
    assert colab[0].endswith("experiments/colab_chapters.py") and colab[1:4] == ["run", "--part", "3"]
    assert all(command[command.index("--data-dir") + 1] == "DATA" for command in (ablation, recipe, colab))
    with pytest.raises(SystemExit):
        gpu_finale.parse_args(["search", "--candidates", "p0.3"])  # a candidate of the recipe stage


def test_the_recipe_stage_chooses_on_validation_and_the_seeds_stage_measures_the_noise(tmp_path):
    out, runs = tmp_path / "out", tmp_path / "runs"
    options = ["--tiny", "--run-root", str(runs), "--out", str(out)]
    assert gpu_fast_recipe.main(["search", *options]) == 0
    search = json.loads((out / "fast_search.json").read_text())
    scored = {c["name"]: c["val_beam"] for c in search["candidates"]}
    assert set(scored) == {"recipe", "p0.3"} and search["choice"]["candidate"] == max(scored, key=scored.get)
    assert all(c["steps"] == search["steps"] == 20 for c in search["candidates"])  # by steps, not minutes
    best = max(search["decoding"], key=lambda row: row["val_beam"])
    assert {(row["averaged"], row["alpha"]) for row in search["decoding"]} == {
        (a, alpha) for a in gpu_fast_recipe.AVERAGED for alpha in gpu_fast_recipe.ALPHAS}
    assert (search["choice"]["averaged"], search["choice"]["alpha"]) == (best["averaged"], best["alpha"])
    assert not any("test" in row for row in [search, *search["candidates"]])  # it never meets the test set
    assert gpu_fast_recipe.main(["seeds", *options, "--seeds", "0", "1"]) == 0
    seeds = json.loads((out / "fast_seeds.json").read_text())
    assert [row["seed"] for row in seeds["seeds"]] == [0, 1] and seeds["choice"] == search["choice"]
    for split in ("val", "test"):
        scores = [row[split] for row in seeds["seeds"]]
        assert seeds["summary"][split] == {"n": 2, "mean": round(sum(scores) / 2, 2),
                                           "std": round(abs(scores[0] - scores[1]) / 2**0.5, 2)}
    # the seed-0 run is the search's own run of the choice, not trained again
    assert seeds["seeds"][0]["val"] is not None and seeds["recipe"]["max_minutes"] is None


def test_the_chapters_are_split_into_parts_that_fit_a_command():
    every = colab_chapters.chapters()
    parts = colab_chapters.plan(7.5, measured={})
    assert [chapter for part in parts for chapter in part] == every  # each once, in the book's order
    for part in parts:
        minutes = [colab_chapters.expected_minutes(chapter, None) for chapter in part]
        assert sum(minutes) <= 7.5 or len(part) == 1  # a longer chapter alone
    measured = {"14_translation": {"minutes": 4.0, "status": "passed"},
                "18_variations": {"minutes": 7.5, "status": "stopped"}}
    assert colab_chapters.expected_minutes("14_translation", measured["14_translation"]) == 4.0
    assert colab_chapters.expected_minutes("18_variations", measured["18_variations"]) >= 60  # still unknown
    assert len(colab_chapters.plan(7.5, measured)) < len(parts)  # chapter 14 now shares a part


def test_the_colab_stage_runs_a_chapter_from_the_wheel_in_a_fresh_environment(tmp_path):
    need_dev_tools("pip", "setuptools")  # it builds the wheel offline
    status = colab_chapters.main(["run", "--tiny", "--chapters", "01_introduction", "--out", str(tmp_path)])
    row = json.loads((tmp_path / "colab.json").read_text())["chapters"]["01_introduction"]
    assert status == 0 and row["status"] == "passed" and row["quick_mode"] and 0 < row["minutes"] < 5
    assert row["command"] == "python experiments/colab_chapters.py run --tiny --chapters 01_introduction " \
        f"--out {tmp_path}"
