"""Companion of chapter 19: its runs' training curves drawn, as a figure and as a chart to explore.

`plot_layer_norm_runs(records)` draws the smoothed training loss and gradient norm of every run (each
result with its `curves`, as `results/layer_norm_small.json` ships them) against the step, one column
per depth; `layer_norm_chart(records)` draws the same runs as one interactive Vega-Lite chart (Altair,
a dependency of the book), where the reader picks the depth, the curve and a configuration.
"""

from __future__ import annotations

from collections.abc import Sequence

from annotated_transformer.helpers.notebook_charts import use_vega_lite_output
from annotated_transformer.layer_norm import smooth
from annotated_transformer.recipes import Recipe

__all__ = ["plot_layer_norm_runs", "layer_norm_chart"]


def plot_layer_norm_runs(records: Sequence[dict], window: int = 20):
    """Training loss (smoothed over `window` steps) and gradient norm against the step for every run
    of `records` (results with their `curves`), one column per depth, one thin line per seed: post-LN
    in blue, pre-LN in orange, no warmup dashed."""
    import matplotlib.pyplot as plt

    recipes = [Recipe.from_dict(record["recipe"]) for record in records]
    depths = sorted({recipe.model.n_layers for recipe in recipes})
    fig, axes = plt.subplots(2, len(depths), figsize=(5.5 * len(depths), 7), squeeze=False, sharex=True)
    labelled = set()
    for record, recipe in zip(records, recipes, strict=True):
        column, ramp = depths.index(recipe.model.n_layers), recipe.train.warmup_ramp
        label = record["name"].split(", N=")[0] + ("" if ramp else ", no warmup")
        style = {
            "color": "tab:blue" if recipe.model.norm_position == "post" else "tab:orange",
            "linestyle": "-" if ramp else "--",
            "linewidth": 1,
            "alpha": 0.7,
            "label": None if (column, label) in labelled else label,  # one legend entry per configuration
        }
        labelled.add((column, label))
        run_curves = record["curves"]
        axes[0][column].plot(run_curves["step"], smooth(run_curves["loss"], window), **style)
        norms = [float("nan") if g is None else g for g in run_curves["grad_norm"]]
        axes[1][column].plot(run_curves["step"], smooth(norms, window), **style)
        axes[0][column].set_title(f"N = {recipe.model.n_layers} layers")
    for column in range(len(depths)):
        axes[0][column].set_ylabel("training loss (label-smoothed)")
        axes[1][column].set_ylabel("gradient norm")
        axes[1][column].set_yscale("log")
        axes[1][column].set_xlabel("step")
        for row in range(2):
            axes[row][column].grid(alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    return fig


def layer_norm_chart(records: Sequence[dict], window: int = 20):
    """Every run of `records` as one interactive chart: the training loss or the gradient norm
    (smoothed over `window` steps, every 5th step kept) against the step, at the depth the reader
    picks; a click on the legend singles a configuration out, and hovering over a line names its seed."""
    alt = use_vega_lite_output()  # Altair, drawn offline in the book (helpers.notebook_charts)
    runs, keep = [], slice(4, None, 5)
    for run in records:
        curves = run["curves"]
        norms = [float("nan") if g is None else g for g in curves["grad_norm"]]
        ramp = ", no warmup" if "no warmup" in run["name"] else ", warmup"
        runs.append({"configuration": run["name"].split(", N=")[0] + ramp,
                     "N": run["recipe"]["n_layers"], "seed": run["recipe"]["seed"], "step": curves["step"][keep],
                     "loss": [round(x, 3) for x in smooth(curves["loss"], window)[keep]],
                     "gradient norm": [round(x, 3) for x in smooth(norms, window)[keep]]})

    depth = alt.param(name="depth", value=6, bind=alt.binding_radio(options=[3, 6], name="N "))
    measure = alt.param(name="measure", value="loss",
                        bind=alt.binding_radio(options=["loss", "gradient norm"], name="curve "))
    picked = alt.selection_point(fields=["configuration"], bind="legend")
    hovered = alt.selection_point(fields=["configuration", "seed"], on="pointerover", clear="pointerout",
                                  empty=False)
    lines = alt.Chart(alt.Data(values=runs)).transform_filter("datum.N == depth").transform_calculate(
        value="datum[measure]").transform_flatten(["step", "value"]).mark_line().encode(
        x=alt.X("step:Q", title="step"),
        y=alt.Y("value:Q", title=f"loss (label-smoothed) or gradient norm, smoothed over {window} steps",
                scale=alt.Scale(type="log")),
        color=alt.Color("configuration:N", scale=alt.Scale(
            domain=["post-LN, warmup", "post-LN, no warmup", "pre-LN, warmup", "pre-LN, no warmup"],
            range=["#1f77b4", "#9ecae1", "#ff7f0e", "#fdae6b"])),
        detail="seed:N",
        opacity=alt.condition(picked, alt.value(0.9), alt.value(0.08)),
        strokeWidth=alt.condition(hovered, alt.value(3.5), alt.value(1.5)),
        tooltip=["configuration:N", "seed:N", alt.Tooltip("step:Q"), alt.Tooltip("value:Q", format=".3f")],
    )
    return lines.add_params(depth, measure, picked, hovered).properties(
        width=620, height=320, title="Every run of the experiment, seed by seed (click the legend to pick one)",
        description="Training loss or gradient norm against the step for the runs of chapter 19",
    )
