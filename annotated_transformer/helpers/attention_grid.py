"""The grid of heatmaps that draws a model's attention, as the paper's Figures 3–5 do for a few heads.

`plot_attention` takes what chapter 14's `attention_maps` returns for one kind of attention (a
tensor of layers × heads × rows × columns) and draws one heatmap per layer and head: layers down,
heads across, the row labels on the left of the first column and the column labels under the last row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor

__all__ = ["plot_attention"]


def plot_attention(weights: Tensor, row_labels: Sequence[str], column_labels: Sequence[str], title: str = "") -> Any:
    """A grid of heatmaps, one row per layer and one column per head (weights: layers, heads, R, C);
    returns matplotlib's figure."""
    import matplotlib.pyplot as plt

    layers, heads = weights.shape[:2]
    figure, axes = plt.subplots(layers, heads, figsize=(2.2 * heads + 1, 2.2 * layers + 0.6), squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            axis = axes[layer][head]
            axis.imshow(weights[layer, head].numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
            axis.set_xticks(
                range(len(column_labels)),
                column_labels if layer == layers - 1 else [],
                rotation=90,
                fontsize=6,
            )
            axis.set_yticks(range(len(row_labels)), row_labels if head == 0 else [], fontsize=6)
            if layer == 0:
                axis.set_title(f"head {head + 1}", fontsize=8)
            if head == 0:
                axis.set_ylabel(f"layer {layer + 1}", fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    return figure
