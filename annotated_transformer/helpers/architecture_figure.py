"""The paper's Figure 1 (§3), redrawn with matplotlib: the encoder and decoder stacks, their sub-layers,
residual connections and the output side, as chapter 1 shows it (`draw_architecture`)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

__all__ = ["draw_architecture"]

COLORS = {
    "attention": "#fcd9b6",
    "norm": "#f3efa0",
    "ffn": "#c7e3f6",
    "embed": "#f6c6d0",
    "linear": "#d9cff0",
    "softmax": "#cfeac6",
}
W, H = 2.7, 0.5  # width and height of a box
ENC, DEC = 2.6, 7.3  # x of the encoder and decoder columns


def box(ax, x, y, text, color, fontsize=10):
    """A rounded box centred at (x, y)."""
    ax.add_patch(
        FancyBboxPatch(
            (x - W / 2, y - H / 2),
            W,
            H,
            boxstyle="round,pad=0,rounding_size=0.1",
            facecolor=COLORS[color],
            edgecolor="black",
            linewidth=1,
            zorder=2,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, linespacing=0.95, zorder=3)


def line(ax, *points, head=True):
    """A polyline through the points; with `head`, an arrow head at the last one."""
    xs, ys = zip(*points, strict=True)
    ax.plot(xs[:-1], ys[:-1], color="black", linewidth=1, zorder=1)
    ax.add_patch(
        FancyArrowPatch(
            points[-2],
            points[-1],
            arrowstyle="-|>" if head else "-",
            mutation_scale=10,
            color="black",
            linewidth=1,
            shrinkA=0,
            shrinkB=0,
            zorder=1,
        )
    )


def fan(ax, x, y_from, y_to):
    """One input splitting into three arrows (queries, keys, values) into the bottom of a box."""
    y_branch = (y_from + y_to) / 2
    line(ax, (x, y_from), (x, y_branch), head=False)
    line(ax, (x - 0.7, y_branch), (x + 0.7, y_branch), head=False)
    for dx in (-0.7, 0.0, 0.7):
        line(ax, (x + dx, y_branch), (x + dx, y_to))
    return y_branch


def residual(ax, x, y_branch, y_norm, side, x_branch=None):
    """The residual connection: from the branch point around the sub-layer into Add & Norm."""
    x_out = x + side * (W / 2 + 0.25)
    start = x if x_branch is None else x_branch
    line(ax, (start, y_branch), (x_out, y_branch), (x_out, y_norm), (x + side * W / 2, y_norm))


def adder(ax, x, y, side):
    """The sum of embeddings and positional encodings, with the sinusoid symbol beside it."""
    ax.add_patch(Circle((x, y), 0.17, facecolor="white", edgecolor="black", linewidth=1, zorder=2))
    ax.text(x, y, "+", ha="center", va="center", fontsize=12, zorder=3)
    x_pe = x + side * 1.1
    ax.add_patch(Circle((x_pe, y), 0.25, facecolor="white", edgecolor="black", linewidth=1, zorder=2))
    t = np.linspace(-0.18, 0.18, 60)
    ax.plot(x_pe + t, y + 0.1 * np.sin(t * 30), color="black", linewidth=0.9, zorder=3)
    ax.text(
        x_pe + side * 0.35,
        y,
        "Positional\nencoding",
        ha="left" if side > 0 else "right",
        va="center",
        fontsize=9,
    )
    line(ax, (x_pe - side * 0.25, y), (x + side * 0.17, y))


def frame(ax, x, y0, y1, side, label):
    """The grey frame of one layer, which the stack repeats N times."""
    half = W / 2 + 0.45
    ax.add_patch(
        FancyBboxPatch(
            (x - half, y0),
            2 * half,
            y1 - y0,
            boxstyle="round,pad=0,rounding_size=0.2",
            facecolor="#f0f0f0",
            edgecolor="#888888",
            linewidth=1,
            zorder=0,
        )
    )
    ax.text(x + side * (half + 0.25), (y0 + y1) / 2, "N×", ha="center", va="center", fontsize=12)
    ax.text(
        x + side * (half + 0.65),
        (y0 + y1) / 2,
        label,
        ha="center",
        va="center",
        fontsize=11,
        weight="bold",
        rotation=90,
    )


def draw_architecture() -> Figure:
    """The Transformer's architecture after the paper's Figure 1 (§3); returns matplotlib's figure."""
    fig, ax = plt.subplots(figsize=(8, 8.6))
    ax.set_xlim(-0.3, 10.2)
    ax.set_ylim(0, 10.75)
    ax.set_aspect("equal")
    ax.axis("off")

    # Inputs, embeddings and positional encodings (§3.4, §3.5)
    for x, label, embedding, side in (
        (ENC, "Inputs", "Input embedding", -1),
        (DEC, "Outputs (shifted right)", "Output embedding", 1),
    ):
        ax.text(x, 0.2, label, ha="center", va="center", fontsize=10)
        line(ax, (x, 0.38), (x, 0.75))
        box(ax, x, 1.0, embedding, "embed")
        line(ax, (x, 1.25), (x, 1.68))
        adder(ax, x, 1.85, side)

    # Encoder layer (§3.1): self-attention, then the feed-forward network, each followed by Add & Norm
    frame(ax, ENC, 2.3, 6.3, -1, "Encoder")
    y = fan(ax, ENC, 2.02, 2.95)
    residual(ax, ENC, y, 4.0, -1)
    box(ax, ENC, 3.2, "Multi-head attention", "attention")
    line(ax, (ENC, 3.45), (ENC, 3.75))
    box(ax, ENC, 4.0, "Add & Norm", "norm")
    line(ax, (ENC, 4.25), (ENC, 4.75))
    residual(ax, ENC, 4.45, 5.8, -1)
    box(ax, ENC, 5.0, "Feed forward", "ffn")
    line(ax, (ENC, 5.25), (ENC, 5.55))
    box(ax, ENC, 5.8, "Add & Norm", "norm")

    # Decoder layer: masked self-attention, encoder-decoder attention, then the feed-forward network
    frame(ax, DEC, 2.3, 8.1, 1, "Decoder")
    y = fan(ax, DEC, 2.02, 2.95)
    residual(ax, DEC, y, 4.0, 1)
    box(ax, DEC, 3.2, "Masked multi-head\nattention", "attention", fontsize=9)
    line(ax, (DEC, 3.45), (DEC, 3.75))
    box(ax, DEC, 4.0, "Add & Norm", "norm")
    line(ax, (DEC + 0.7, 4.25), (DEC + 0.7, 4.75))  # the queries come from the decoder
    residual(ax, DEC, 4.5, 5.8, 1, x_branch=DEC + 0.7)
    box(ax, DEC, 5.0, "Multi-head attention", "attention")
    line(ax, (DEC, 5.25), (DEC, 5.55))
    box(ax, DEC, 5.8, "Add & Norm", "norm")
    line(ax, (DEC, 6.05), (DEC, 6.55))
    residual(ax, DEC, 6.3, 7.6, 1)
    box(ax, DEC, 6.8, "Feed forward", "ffn")
    line(ax, (DEC, 7.05), (DEC, 7.35))
    box(ax, DEC, 7.6, "Add & Norm", "norm")

    # The encoder's output (the "memory") gives the keys and values of encoder-decoder attention (§3.2.3)
    x_gap = (ENC + DEC) / 2
    line(ax, (ENC, 6.05), (ENC, 6.75), (x_gap, 6.75), (x_gap, 4.5), (DEC - 0.1, 4.5), head=False)
    line(ax, (DEC - 0.7, 4.5), (DEC - 0.7, 4.75))
    line(ax, (DEC - 0.1, 4.5), (DEC - 0.1, 4.75))
    ax.text(
        (ENC + x_gap) / 2 + 0.1,
        6.82,
        "memory (keys, values)",
        ha="center",
        va="bottom",
        fontsize=9,
        style="italic",
    )

    # Output side (§3.4): a linear map to vocabulary scores, then the softmax
    line(ax, (DEC, 7.85), (DEC, 8.55))
    box(ax, DEC, 8.8, "Linear", "linear")
    line(ax, (DEC, 9.05), (DEC, 9.35))
    box(ax, DEC, 9.6, "Softmax", "softmax")
    line(ax, (DEC, 9.85), (DEC, 10.25))
    ax.text(DEC, 10.45, "Output probabilities", ha="center", va="center", fontsize=10)

    ax.set_title("The Transformer, redrawn after Figure 1 of the paper")
    return fig
