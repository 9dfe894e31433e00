"""Post-LN against pre-LN (chapter 19, book/19_layer_norm.ipynb), and the switches it needs: the
schedule without warmup (chapter 7), the gradient norm of every step (chapter 9), and the new
recipe fields (chapter 14)."""

import json
import math

import pytest
import torch
from helpers import small_config
from scipy import stats

from annotated_transformer.batching import copy_task, make_batch
from annotated_transformer.helpers import book_figures
from annotated_transformer.layer_norm import (
    check_layer_norm,
    curves,
    layer_gradient_norms,
    layer_norm_claims,
    layer_norm_variants,
    run_name,
    smooth,
    stability,
)
from annotated_transformer.model import make_model
from annotated_transformer.optimizer import make_optimizer, rate
from annotated_transformer.recipes import RECIPES, Recipe
from annotated_transformer.runs.run_files import _settle_recipe
from annotated_transformer.training import TrainConfig, Trainer
from annotated_transformer.variations import SCALES, with_seeds


def test_rate_without_ramp_holds_the_peak_then_decays_as_before():
    peak = rate(100, 128, 100, 0.5)
    for step in (1, 2, 50, 100):
        assert rate(step, 128, 100, 0.5, ramp=False) == pytest.approx(peak)
    for step in (101, 400, 10_000):
        assert rate(step, 128, 100, 0.5, ramp=False) == pytest.approx(rate(step, 128, 100, 0.5))
    assert rate(1, 128, 100, 0.5) < peak / 50  # the ramp's first step is tiny


def test_make_optimizer_without_ramp_starts_at_the_peak():
    model = make_model(small_config())
    optimizer, scheduler = make_optimizer(model, warmup=10, factor=2.0, ramp=False)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(rate(10, model.config.d_model, 10, 2.0))
    state = scheduler.state_dict()
    assert state["lr_lambdas"][0]["ramp"] is False  # the checkpoint records the schedule


def test_trainer_reports_the_gradient_norm_when_asked():
    torch.manual_seed(0)
    model = make_model(small_config(dropout=0.0))
    batch = make_batch(copy_task(4, 20, seed=0))
    plain = Trainer(model, TrainConfig(warmup=5, progress=False, log_every=0), device="cpu")
    assert plain.train_step([batch]).grad_norm is None
    tracked = Trainer(model, TrainConfig(warmup=5, progress=False, log_every=0, track_grad_norm=True), "cpu")
    stats = tracked.train_step([batch])
    assert stats.grad_norm is not None and stats.grad_norm > 0 and math.isfinite(stats.grad_norm)


def test_trainer_without_ramp_uses_the_peak_rate_at_step_one():
    model = make_model(small_config())
    trainer = Trainer(model, TrainConfig(warmup=20, lr_factor=1.0, warmup_ramp=False, progress=False), "cpu")
    stats = trainer.train_step([make_batch(copy_task(2, 20, seed=1))])
    assert stats.lr == pytest.approx(rate(20, model.config.d_model, 20, 1.0))


def test_recipe_fields_reach_the_model_and_the_trainer(tmp_path):
    recipe = RECIPES["builtin"].replace(d_k=8, d_v=16, positional="learned", norm_position="pre",
                                        warmup_ramp=False)

    class Vocab:  # the two sizes model_config reads
        def __init__(self, n):
            self.vocab = list(range(n))

    class Vocabs:
        source = target = Vocab(50)
        shared = True

    config = recipe.model_config(Vocabs())
    assert (config.d_k, config.d_v, config.positional, config.norm_position) == (8, 16, "learned", "pre")
    train = recipe.train_config()
    assert train.warmup_ramp is False and train.track_grad_norm is True


@pytest.mark.parametrize(
    "changes, message",
    [({"positional": "rotary"}, "positional"), ({"norm_position": "middle"}, "norm_position"),
     ({"n_heads": 3}, "d_model"), ({"d_k": 0}, "d_k")],
)
def test_bad_new_recipe_fields_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        RECIPES["builtin"].replace(**changes)


def test_a_run_saved_before_the_new_fields_existed_still_resumes(tmp_path):
    recipe = RECIPES["builtin"]
    old = recipe.to_dict()
    for name in ("d_k", "d_v", "positional", "norm_position", "warmup_ramp", "attention_dropout"):
        del old[name]
    (tmp_path / "recipe.json").write_text(json.dumps(old))
    (tmp_path / "model.pt").write_bytes(b"a finished run: its recipe is kept")
    def upgrade(saved: dict) -> dict:  # as chapter 14 reads a recipe saved by an earlier version
        return Recipe.from_dict(saved).to_dict()

    _settle_recipe(tmp_path, recipe.to_dict(), upgrade)  # the missing fields: what that run used
    with pytest.raises(ValueError, match="norm_position"):
        _settle_recipe(tmp_path, recipe.replace(norm_position="pre").to_dict(), upgrade)


def test_eight_runs_that_differ_only_in_norm_warmup_and_depth():
    base = SCALES["small"].base
    variants = layer_norm_variants(base)
    assert len(variants) == 8
    recipes = [v.recipe(base) for v in variants]
    assert {(r.model.n_layers, r.model.norm_position, r.train.warmup_ramp) for r in recipes} == {
        (n, norm, ramp) for n in (3, 6) for norm in ("post", "pre") for ramp in (True, False)
    }
    for recipe in recipes:
        assert recipe.replace(n_layers=3, norm_position="post", warmup_ramp=True) == base
    assert variants[0].slug(base) == "base"  # the paper's setting is chapter 18's base run
    assert len({v.slug(base) for v in variants}) == 8
    assert {r.model.n_layers for r in (v.recipe(base) for v in layer_norm_variants(base, (2, 4)))} == {2, 4}


def test_smooth_is_a_running_mean():
    assert smooth([1, 2, 3, 4, 5], 2) == [1, 1.5, 2.5, 3.5, 4.5]
    assert smooth([4.0], 10) == [4.0]


def history(losses, norms=None):
    norms = norms or [1.0] * len(losses)
    pairs = enumerate(zip(losses, norms, strict=True))
    return [{"step": i + 1, "loss": x, "grad_norm": g, "lr": 1e-3, "tokens": 10} for i, (x, g) in pairs]


def test_curves_keep_the_loss_and_gradient_norm_of_every_step():
    run_curves = curves([*history([9.123456, 8.5]), {"step": 3, "loss": 8.0}])
    assert run_curves == {"step": [1, 2, 3], "loss": [9.1235, 8.5, 8.0], "grad_norm": [1.0, 1.0, None]}


def test_stability_of_a_smooth_run_and_of_one_that_blew_up():
    good = stability(curves(history([9 - 0.05 * i for i in range(100)])), window=5)
    assert not good["diverged"] and good["rise_from_lowest"] == pytest.approx(0.0)
    assert good["final_loss"] == pytest.approx(9 - 0.05 * 97)
    losses = [9 - 0.05 * i for i in range(60)] + [8.0] * 40
    bad = stability(curves(history(losses, [1.0] * 60 + [50.0] * 40)), window=5)
    assert bad["rise_from_lowest"] == pytest.approx(8.0 - (9 - 0.05 * 57)) and bad["max_grad_norm"] == 50.0
    nan = stability(curves(history([9.0, 8.0, float("nan"), 7.0])), window=2)
    assert nan["diverged"]
    with pytest.raises(ValueError, match="empty"):
        stability(curves([]))


def ln_records(bleu: dict[str, list[float]], depths=(3, 6)) -> list[dict]:
    """Results of every configuration of layer_norm_variants at `depths`, one per seed, with the BLEU
    of `bleu` by name (10, 10.5, 11 for the others), in the order the command writes them."""
    base = SCALES["small"].base
    records = []
    for variant in with_seeds(layer_norm_variants(base, depths), seeds=(0, 1, 2)):
        recipe = variant.recipe(base)
        scores = bleu.get(variant.name, [10.0, 10.5, 11.0])
        records.append({"name": variant.name, "paper_change": variant.paper_change,
                        "recipe": recipe.to_dict(), "steps": recipe.train.max_steps,
                        "val_bleu": scores[recipe.train.seed]})
    return records


def test_the_claims_name_the_chapters_configurations():
    names = {variant.name for variant in layer_norm_variants(SCALES["small"].base)}
    claims = layer_norm_claims((3, 6))
    assert [len(claim.pairs) for claim in claims] == [1, 2, 2]
    assert set().union(*(claim.rows() for claim in claims)) <= names
    assert claims[0].pairs == ((run_name("post", 3, True), run_name("post", 3, False)),)


def test_check_layer_norm_judges_each_question_by_the_rule():
    """Every configuration's seeds spread by 0.5 (noise 0.5 on 8 · 2 = 16 degrees of freedom,
    threshold t·0.5·√(2/3) = 0.865), so 0.9 apart is a difference on its own and 0.7 is not; a claim
    with one pair ahead and one tied is a tie. The five comparisons are one family: 0.9's p-value
    (0.043), the fourth smallest, must pass 5% / 2 after Holm's correction, and becomes a tie.
    The shallower depth of the first claim is the smaller one, whichever order the runs come in."""
    ahead = {run_name("post", 3, True): [11.4, 11.9, 12.4], run_name("pre", 3, True): [12.3, 12.8, 13.3],
             run_name("pre", 6, True): [11.2, 11.7, 12.2], run_name("post", 6, True): [10.5, 11.0, 11.5]}
    records = ln_records(ahead)
    checks = check_layer_norm(list(reversed(records)))
    assert [check["verdict"] for check in checks] == ["holds", "tie", "holds"]
    assert [check["uncorrected"] for check in checks] == ["holds", "tie", "holds"]
    assert {check["family"] for check in checks} == {5}
    post, pre, warmup = checks
    assert post["pairs"][0]["a"] == run_name("post", 3, True)
    assert post["pairs"][0]["verdict"].margin == pytest.approx(1.4)
    t_16 = stats.t.ppf(0.975, 16)
    assert post["pairs"][0]["verdict"].threshold == pytest.approx(t_16 * 0.5 * (2 / 3) ** 0.5)
    assert [pair["uncorrected"].word for pair in pre["pairs"]] == ["better", "tie"]
    assert [pair["verdict"].word for pair in pre["pairs"]] == ["tie", "tie"]
    assert [pair["verdict"].margin for pair in pre["pairs"]] == pytest.approx([0.9, 0.7])
    assert [pair["verdict"].margin for pair in warmup["pairs"]] == pytest.approx([2.3, 1.2])
    assert [pair["verdict"].word for pair in warmup["pairs"]] == ["better", "better"]


def test_holm_turns_the_chapters_claim_into_a_tie_when_both_depths_are_barely_ahead():
    """Pre-LN 0.9 ahead of post-LN at both depths: each p = 0.043, so the claim holds uncorrected;
    among the family's five comparisons the two are the largest p-values and fail Holm's 5% / 2."""
    barely = {run_name("post", 3, True): [11.4, 11.9, 12.4], run_name("pre", 3, True): [12.3, 12.8, 13.3],
              run_name("pre", 6, True): [11.4, 11.9, 12.4], run_name("post", 6, True): [10.5, 11.0, 11.5]}
    pre = check_layer_norm(ln_records(barely))[1]
    assert (pre["uncorrected"], pre["verdict"]) == ("holds", "tie")
    assert all(0.025 < pair["uncorrected"].p < 0.05 for pair in pre["pairs"])


def test_check_layer_norm_refuses_runs_of_another_scale():
    records = ln_records({})
    records[0] = {**records[0], "steps": records[0]["steps"] * 2}
    with pytest.raises(ValueError, match="2 scales"):
        check_layer_norm(records)


def test_check_layer_norm_on_the_shipped_runs():
    """The file chapter 19 reads: every configuration with three seeds and its hardware, and curves
    for every step of every run."""
    shipped = book_figures.result("layer_norm_small.json")
    names = [variant.name for variant in layer_norm_variants(SCALES["small"].base)]
    assert sorted({run["name"] for run in shipped}) == sorted(names)
    for name in names:
        runs = [run for run in shipped if run["name"] == name]
        assert sorted(run["recipe"]["seed"] for run in runs) == [0, 1, 2], name
    for run in shipped:
        assert run["hardware"]["cpu_kernels"] and run["hardware"]["torch"], run["run"]
        assert run["curves"]["step"] == list(range(1, run["steps"] + 1)), run["run"]
    assert len(check_layer_norm(shipped)) == 3


def test_gradient_norms_per_layer():
    torch.manual_seed(0)
    batch = make_batch(copy_task(4, 20, seed=0))
    norms = {}
    for position in ("post", "pre"):
        torch.manual_seed(0)
        model = make_model(small_config(n_layers=3, dropout=0.0, norm_position=position))
        norms[position] = layer_gradient_norms(model, batch)
        assert [len(norms[position][k]) for k in ("encoder", "decoder")] == [3, 3]
        assert all(x > 0 for x in norms[position]["encoder"] + norms[position]["decoder"])
    # Chapter 19: at initialization post-LN's decoder gradients grow from the first layer to the
    # last, pre-LN's do not (the margins allow for float differences).
    ratio = {position: norms[position]["decoder"][-1] / norms[position]["decoder"][0] for position in norms}
    assert ratio["post"] > 1.2 and ratio["pre"] < 0.95, ratio


def test_shipping_the_runs_keeps_each_runs_curves_and_refuses_an_unfinished_run(tmp_path):
    """tools/ship_layer_norm.py: the command's results, each with its run's curves; a run whose
    history stops short of its steps is refused, and nothing is written."""
    from ship_layer_norm import ship

    def run(name: str, steps: int, trained: int) -> dict:
        (tmp_path / name).mkdir()
        losses = [9.0, 8.0, 7.5][:trained]
        records = [{**record, "minutes": 0.1 * record["step"]} for record in history(losses)]
        (tmp_path / name / "history.json").write_text(json.dumps(records), encoding="utf-8")
        return {"name": name, "run": name, "steps": steps, "val_bleu": 1.0}

    results = [run("a", 3, 3), run("b", 2, 2)]
    (tmp_path / "layer-norm.json").write_text(json.dumps(results), encoding="utf-8")
    out = tmp_path / "shipped.json"
    shipped = ship(tmp_path, out)
    assert json.loads(out.read_text(encoding="utf-8")) == shipped
    assert [record["curves"]["loss"] for record in shipped] == [[9.0, 8.0, 7.5], [9.0, 8.0]]
    assert shipped[0]["val_bleu"] == 1.0 and shipped[0]["curves"]["step"] == [1, 2, 3]
    results.append(run("c", 3, 2))
    (tmp_path / "layer-norm.json").write_text(json.dumps(results), encoding="utf-8")
    out.unlink()
    with pytest.raises(SystemExit, match="has not finished its 3 steps"):
        ship(tmp_path, out)
    assert not out.exists()
