"""Companion of chapter 7: §5.3's learning-rate schedule as a chart to explore.

`schedule_explorer()` computes `rate` for three widths and five warmups and draws one interactive
Vega-Lite chart (Altair, a dependency of the book): the reader chooses d_model and the warmup, the
paper's base setting (d_model = 512, warmup = 4000) stays as a dashed curve, and hovering the curve
shows a step and its rate.
"""

from __future__ import annotations

from typing import Any

from annotated_transformer.helpers.notebook_charts import use_vega_lite_output
from annotated_transformer.optimizer import rate

__all__ = ["schedule_explorer"]

WIDTHS, WARMUPS, LAST_STEP = [256, 512, 1024], [1000, 2000, 4000, 8000, 16000], 60_000


def _curves() -> list[dict]:
    """One row per (d_model, warmup): `rate` at every 1,000th step, and more often around the peak."""
    curves = []
    for warmup in WARMUPS:
        steps = sorted({1, *range(warmup // 10, 2 * warmup, warmup // 10), *range(1000, LAST_STEP + 1, 1000)})
        for width in WIDTHS:
            curves.append({"d_model": width, "warmup": warmup, "step": steps,
                           "rate": [float(f"{rate(s, width, warmup):.4g}") for s in steps]})
    return curves


def schedule_explorer() -> Any:
    """The interactive chart of §5.3's schedule (an Altair chart, drawn offline in the book)."""
    alt = use_vega_lite_output()
    width_choice = alt.param(name="d_model", value=512, bind=alt.binding_radio(options=WIDTHS, name="d_model "))
    warmup_choice = alt.param(name="warmup", value=4000,
                              bind=alt.binding_radio(options=WARMUPS, name="warmup "))
    hover = alt.selection_point(name="hover", fields=["step"], nearest=True, on="pointerover",
                                clear="pointerout", empty=False)

    schedule = alt.Chart(alt.Data(values=_curves())).transform_flatten(["step", "rate"]).encode(
        x=alt.X("step:Q", title="optimizer step", scale=alt.Scale(domain=[0, LAST_STEP])),
        y=alt.Y("rate:Q", title="learning rate", axis=alt.Axis(format=".1e"),
                scale=alt.Scale(domain=[0, rate(1000, 256, 1000)])),
    )
    papers = schedule.transform_filter("datum.d_model == 512 && datum.warmup == 4000").mark_line(
        color="gray", strokeDash=[4, 3])
    chosen = schedule.transform_filter("datum.d_model == d_model && datum.warmup == warmup")
    tooltip = [alt.Tooltip("step:Q", format=","), alt.Tooltip("rate:Q", format=".3e"), "d_model:Q", "warmup:Q"]
    chosen_line = chosen.mark_line(color="#1f77b4", strokeWidth=2.5)
    hovered_point = chosen.mark_point(size=80, filled=True, color="#1f77b4").encode(
        opacity=alt.condition(hover, alt.value(1), alt.value(0)), tooltip=tooltip).add_params(hover)
    hovered_step = chosen.transform_filter(hover).mark_rule(color="black", strokeWidth=0.7).encode(
        tooltip=tooltip)
    return (papers + chosen_line + hovered_step + hovered_point).add_params(width_choice, warmup_choice).properties(
        width=620, height=300, title="§5.3's schedule (dashed: the paper's d_model = 512, warmup = 4000)",
        description="The learning-rate schedule of paper §5.3 for a chosen d_model and warmup",
    )
