"""Companion of chapter 17. The tables and figures of the chapter's comparison of layers (paper §4, Table 1).

Chapter 17 counts and times self-attention, recurrent and convolutional layers (`measure_layer`,
`path_length_formula`, ...); what it measures is drawn and tabulated here:

- `cost_chart`: Table 1's complexity per layer (or every FLOP) against n, as an interactive chart
  (Altair, for the book), for several d.
- `describe_machine`: the processor, system and torch that a timing ran on.
- `plot_sweeps`: the FLOPs or the seconds of every layer against n and against d, on log–log axes.
- `timing_table`, `print_slopes`: the times and FLOP rates of the sweeps, and the slopes of their
  curves beside Table 1's exponents.
- `print_fixed_work`, `plot_fixed_work`, `plot_path_lengths`: the table and figures of the sections on
  sequential operations and on path length.
"""

from __future__ import annotations

import math
import platform
from typing import Any

import matplotlib.pyplot as plt
import torch

from annotated_transformer.why_self_attention import LAYER_KINDS, layer_flops, table1_term

__all__ = [
    "cost_chart",
    "describe_machine",
    "plot_fixed_work",
    "plot_path_lengths",
    "plot_sweeps",
    "print_fixed_work",
    "print_slopes",
    "slope",
    "timing_table",
]

STYLE = {"self-attention": "o", "recurrent": "s", "convolutional": "^", "separable": "v", "restricted": "D"}


def cost_chart() -> Any:
    """Operations per layer against n = 4 … 8192 for every layer of Table 1, at d = 64 … 2048 (a
    menu), counted as Table 1's term or every FLOP (`layer_flops`); the line n = d marks where
    self-attention's n²d meets the recurrent layer's nd². Click the legend to filter, hover for values."""
    from annotated_transformer.helpers.notebook_charts import use_vega_lite_output

    alt = use_vega_lite_output()  # Altair, drawn offline in the book (helpers.notebook_charts)
    # One row per (layer, d, count): Table 1's term or every FLOP at n = 4, 8, … 8192.
    chart_lengths = [2**e for e in range(2, 14)]
    chart_widths = [64, 128, 256, 512, 1024, 2048]
    counts = {"Table 1's term": table1_term, "every FLOP": layer_flops}
    costs = [
        {"layer": kind, "d": width, "count": name, "n": chart_lengths,
         "cost": [count(kind, n, width) for n in chart_lengths]}
        for kind in LAYER_KINDS for width in chart_widths for name, count in counts.items()
    ]

    width_choice = alt.param(name="d", value=512, bind=alt.binding_select(options=chart_widths, name="d "))
    count_choice = alt.param(name="count", value="Table 1's term",
                             bind=alt.binding_radio(options=list(counts), name="count "))
    shown = alt.selection_point(name="shown", fields=["layer"], bind="legend")
    hover = alt.selection_point(name="hover", fields=["layer", "n"], nearest=True, on="pointerover",
                                clear="pointerout", empty=False)

    per_layer = alt.Chart(alt.Data(values=costs)).transform_filter(
        "datum.d == d && datum.count == count").transform_flatten(["n", "cost"]).transform_filter(shown).encode(
        x=alt.X("n:Q", title="sequence length n", scale=alt.Scale(type="log", base=2, domain=[4, 8192]),
                axis=alt.Axis(values=chart_lengths[::2])),
        y=alt.Y("cost:Q", title="operations per layer", scale=alt.Scale(type="log"),
                axis=alt.Axis(format=".0e", values=[10.0**e for e in range(2, 15)])),
        color=alt.Color("layer:N", title="layer (click to filter)", scale=alt.Scale(domain=list(LAYER_KINDS))),
    )
    tooltip = ["layer:N", alt.Tooltip("n:Q", format=","), "d:Q", "count:N", alt.Tooltip("cost:Q", format=".3~s")]
    lines = per_layer.mark_line().add_params(shown)  # the view with the legend
    hovered = per_layer.mark_point(filled=True, size=70).encode(
        opacity=alt.condition(hover, alt.value(1), alt.value(0)), tooltip=tooltip).add_params(hover)
    crossover = alt.Chart(alt.Data(values=[{}])).transform_calculate(n="d", label="'n = d'").encode(x="n:Q")
    crossover_rule = crossover.mark_rule(strokeDash=[4, 3], color="gray")
    crossover_label = crossover.mark_text(align="left", dx=4, y=8, color="gray").encode(text="label:N")
    return (crossover_rule + crossover_label + lines + hovered).add_params(width_choice, count_choice).properties(
        width=560, height=340, title="The cost of one layer against the sequence length (§4, Table 1)",
        description="Operations per layer of self-attention, recurrent and convolutional layers against n",
    )


def _cpu_name() -> str:
    """The processor's model name (from /proc/cpuinfo on Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_machine() -> str:
    """The processor, the system and torch, and the threads a timing uses (one)."""
    return (f"{_cpu_name()}, {platform.machine()}, {platform.system()}; torch {torch.__version__}; "
            f"timings on 1 thread (torch.get_num_threads() = {torch.get_num_threads()} otherwise)")


def _plot_sweep(ax, rows: list[dict], x: str, y: str, ylabel: str, reference: str | None = None) -> None:
    """One log–log panel: y against x for every layer kind; `reference` draws that column as dashed lines
    scaled to meet the last measured point (the paper's formulas, up to a constant)."""
    for kind in LAYER_KINDS:
        points = [row for row in rows if row["kind"] == kind]
        xs, ys = [row[x] for row in points], [row[y] for row in points]
        line, = ax.plot(xs, ys, marker=STYLE[kind], linestyle="-" if reference else "none", label=kind)
        if reference:
            scale = ys[-1] / points[-1][reference]
            ax.plot(xs, [scale * row[reference] for row in points], "--", color=line.get_color(), alpha=0.6)
        else:
            ax.plot(xs, [row["formula"] for row in points], "-", color=line.get_color(), alpha=0.6)
    ax.set(xscale="log", yscale="log", xlabel=x, ylabel=ylabel)
    ax.grid(True, which="major", alpha=0.3)


def plot_sweeps(by_n: list[dict], by_d: list[dict], timed: bool = False) -> None:
    """Two panels, against n (d fixed) and against d (n fixed), the band n < d shaded: the FLOPs
    counted (markers) and the formulas (lines); or, `timed`, the seconds per forward pass (markers and
    lines) and Table 1's terms scaled to meet the largest size (dashed)."""
    d_fixed, n_fixed = by_n[0]["d"], by_d[0]["n"]
    n_values, d_values = [row["n"] for row in by_n], [row["d"] for row in by_d]
    _, (ax_n, ax_d) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    if timed:
        _plot_sweep(ax_n, by_n, "n", "seconds", "seconds per forward pass", reference="table1")
        ax_n.axvspan(min(n_values), d_fixed, color="grey", alpha=0.15)
        ax_n.set_title(f"Time against n (d = {d_fixed}, 1 thread)")
        _plot_sweep(ax_d, by_d, "d", "seconds", "seconds per forward pass", reference="table1")
        ax_d.axvspan(n_fixed, max(d_values), color="grey", alpha=0.15)
        ax_d.set_title(f"Time against d (n = {n_fixed}, 1 thread)")
        ax_n.legend(fontsize=8)
        return
    _plot_sweep(ax_n, by_n, "n", "flops", "FLOPs per layer")
    ax_n.axvspan(min(n_values), d_fixed, color="grey", alpha=0.15, label=f"n < d = {d_fixed}")
    ax_n.set_title(f"FLOPs against n (d = {d_fixed})")
    _plot_sweep(ax_d, by_d, "d", "flops", "FLOPs per layer")
    ax_d.axvspan(n_fixed, max(d_values), color="grey", alpha=0.15, label=f"n = {n_fixed} < d")
    ax_d.set_title(f"FLOPs against d (n = {n_fixed})")
    ax_n.legend(fontsize=8)
    ax_d.legend(fontsize=8)


def timing_table(rows: list[dict], x: str) -> str:
    """Milliseconds per layer, one row per value of x, and the achieved GFLOP/s."""
    values = sorted({row[x] for row in rows})
    lines = [f"{x:>5} " + " ".join(f"{kind:>15}" for kind in LAYER_KINDS)]
    for value in values:
        cells = []
        for kind in LAYER_KINDS:
            row = next(r for r in rows if r["kind"] == kind and r[x] == value)
            cells.append(f"{row['seconds'] * 1e3:7.3f} ms {row['flops'] / row['seconds'] / 1e9:4.0f}G")
        lines.append(f"{value:>5} " + " ".join(f"{cell:>15}" for cell in cells))
    return "\n".join(lines)


def slope(rows: list[dict], kind: str, x: str, y: str) -> float:
    """Least-squares slope of log y against log x over the upper half of the x values of `kind`."""
    points = sorted((row[x], row[y]) for row in rows if row["kind"] == kind)
    logs = [(math.log(a), math.log(b)) for a, b in points[len(points) // 2 :]]
    mean_x = sum(a for a, _ in logs) / len(logs)
    mean_y = sum(b for _, b in logs) / len(logs)
    return sum((a - mean_x) * (b - mean_y) for a, b in logs) / sum((a - mean_x) ** 2 for a, _ in logs)


def print_slopes(by_n: list[dict], by_d: list[dict]) -> None:
    """Each layer's measured slope in n and in d beside its Table 1 term's, and its range of GFLOP/s."""
    print(f"{'layer':<15} {'slope in n':>10} {'Table 1':>8} {'slope in d':>11} {'Table 1':>8} {'GFLOP/s':>13}")
    for kind in LAYER_KINDS:
        rates = [row["flops"] / row["seconds"] / 1e9 for row in by_n + by_d if row["kind"] == kind]
        print(f"{kind:<15} {slope(by_n, kind, 'n', 'seconds'):>10.2f} {slope(by_n, kind, 'n', 'table1'):>8.2f} "
              f"{slope(by_d, kind, 'd', 'seconds'):>11.2f} {slope(by_d, kind, 'd', 'table1'):>8.2f} "
              f"{min(rates):>6.2f}–{max(rates):<6.1f}")


def print_fixed_work(fixed_work: dict[str, list[float]], lengths: list[int], n_tokens: int, d: int) -> None:
    """The seconds of each layer at a fixed n × batch = `n_tokens` positions, one row per n, then how
    much its time and its FLOPs (`layer_flops`) grew from the shortest n to the longest."""
    print(f"N = n × batch = {n_tokens} positions, d = {d}; milliseconds per forward pass")
    print(f"{'n':>6} {'batch':>6} " + " ".join(f"{name:>23}" for name in fixed_work))
    for i, n in enumerate(lengths):
        cells = " ".join(f"{times[i] * 1e3:>23.3f}" for times in fixed_work.values())
        print(f"{n:>6} {n_tokens // n:>6} {cells}")
    first, last = lengths[0], lengths[-1]
    for name, times in fixed_work.items():
        kind = name.split(" ")[0]
        flops_ratio = layer_flops(kind, last, d, batch=n_tokens // last) / layer_flops(
            kind, first, d, batch=n_tokens // first)
        print(f"{name:<24} from n = {first} to n = {last}: "
              f"time × {times[-1] / times[0]:5.1f}, FLOPs × {flops_ratio:5.1f}")


def plot_fixed_work(fixed_work: dict[str, list[float]], lengths: list[int], n_tokens: int, d: int) -> None:
    """Milliseconds per layer against n at a fixed n × batch = `n_tokens` positions, log–log."""
    _, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
    for (name, times), marker in zip(fixed_work.items(), "sxo^", strict=True):
        ax.plot(lengths, [t * 1e3 for t in times], marker=marker, label=name)
    ax.set(xscale="log", yscale="log", xlabel="sequence length n (batch = N / n)",
           ylabel="milliseconds per layer", title=f"Fixed work: n × batch = {n_tokens} positions, d = {d}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def plot_path_lengths(measured: dict[str, list[int]], lengths: list[int], kernel: int, radius: int) -> None:
    """The measured path lengths (markers) and §4's formulas as smooth curves (dotted), log–log."""
    _, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
    smooth = [2 + i / 10 for i in range(10 * (lengths[-1] - 2) + 1)]
    formulas = {
        "self-attention": lambda n: 1,
        "recurrent": lambda n: n - 1,
        "convolutional": lambda n: (n - 1) / (kernel - 1),
        "dilated": lambda n: math.log(n, kernel),
        "separable": lambda n: (n - 1) / (kernel - 1),
        "restricted": lambda n: (n - 1) / radius,
    }
    for (kind, counts), marker in zip(measured.items(), "osx^vD", strict=True):
        line, = ax.plot(lengths, counts, marker=marker, linestyle="none", label=kind)
        ax.plot(smooth, [formulas[kind](n) for n in smooth], ":", color=line.get_color(), alpha=0.7)
    ax.set(xscale="log", yscale="log", xlabel="sequence length n", ylabel="layers (recurrent: steps)",
           title=f"Maximum path length (k = {kernel}, r = {radius}); dotted: formulas")
    ax.set_xscale("log", base=2)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
