"""Companion of chapter 14: its attention maps (the paper's Figures 3–5) as a chart to explore.

`attention_explorer(translator, sentences)` translates each German sentence, reads it once more with
every attention module keeping its weights (`attention_maps`), and draws one interactive Vega-Lite
chart (Altair, a dependency of the book): the reader chooses the sentence, the attention
(encoder–decoder, encoder self-attention, decoder self-attention), the layer and the head, and
hovers a row of the map to see that piece's weights over the pieces it attends to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from annotated_transformer.attention_plots import attention_maps
from annotated_transformer.helpers.notebook_charts import use_vega_lite_output

__all__ = ["attention_explorer"]

MAPS = {"cross": "encoder–decoder", "encoder": "encoder self-attention", "decoder": "decoder self-attention"}


def _pieces(encoder: Any, ids: Sequence[int]) -> list[str]:
    """The pieces of `ids`, a piece that continues a word marked with a trailing "-"."""
    if encoder.kind == "word":
        return encoder.tokens(ids)
    return [token[: -len("</w>")] if token.endswith("</w>") else token + "-" for token in encoder.tokens(ids)]


def _weight_rows(translator: Any, sentences: Sequence[str]) -> tuple[list[dict], list[dict]]:
    """The sentences' pieces, and one row per sentence, map, layer and head: the weights in
    hundredths, as text (a small chart), the rows of the queries separated by ";", a row's by spaces."""
    vocabs = translator.vocabs
    sources = [vocabs.source.encode(sentence) for sentence in sentences]
    labels, rows = [], []
    for s, (sentence, source, translation) in enumerate(
            zip(sentences, sources, translator.translate_ids(sources), strict=True)):
        labels.append({"label": f"{s + 1}. {sentence}", "src": _pieces(vocabs.source, source),
                       "tgt": ["<bos>", *_pieces(vocabs.target, translation)]})
        weights = attention_maps(translator.model, source, translation)
        for m, kind in enumerate(MAPS):
            for layer, by_head in enumerate((weights[kind] * 100).round().int().tolist(), start=1):
                for head, by_query in enumerate(by_head, start=1):
                    text = ";".join(" ".join(map(str, keys)) for keys in by_query)
                    rows.append({"s": s, "m": m, "l": layer, "h": head, "w": text})
    return labels, rows


def attention_explorer(translator: Any, sentences: Sequence[str]) -> Any:
    """The chart of `translator`'s attention on `sentences` (German), opened on the encoder–decoder
    attention of the last layer, the closest to a word alignment."""
    alt = use_vega_lite_output()
    labels, rows = _weight_rows(translator, sentences)
    decoder = translator.model.decoder.layers
    n_layers, n_heads = len(decoder), decoder[0].src_attn.n_heads
    choices = (
        alt.param(name="tokens", value=labels),
        alt.param(name="sentence", value=0, bind=alt.binding_select(
            options=list(range(len(labels))), labels=[x["label"] for x in labels], name="sentence ")),
        alt.param(name="attention", value=0, bind=alt.binding_radio(
            options=[0, 1, 2], labels=list(MAPS.values()), name="attention ")),
        alt.param(name="layer", value=n_layers, bind=alt.binding_radio(
            options=list(range(1, n_layers + 1)), name="layer ")),
        alt.param(name="head", value=1, bind=alt.binding_radio(options=list(range(1, n_heads + 1)), name="head ")),
    )
    hover = alt.selection_point(name="hover", fields=["q"], on="pointerover", value=[{"q": 1}])
    # The queries are the English pieces in the decoder's maps, the German ones in the encoder's; the
    # keys are German, but in the decoder's self-attention.
    keys = "tokens[sentence][attention == 2 ? 'tgt' : 'src']"
    queries = "tokens[sentence][attention == 1 ? 'src' : 'tgt']"
    chosen = alt.Chart(alt.Data(values=rows)).transform_filter(
        "datum.s == sentence && datum.m == attention && datum.l == layer && datum.h == head"
    ).transform_calculate(row="split(datum.w, ';')").transform_flatten(["row"]).transform_window(
        q="row_number()").transform_calculate(q="datum.q - 1", cell="split(datum.row, ' ')").transform_flatten(
        ["cell"]).transform_window(k="row_number()", groupby=["q"]).transform_calculate(
        # In order: `key` reads k once counted from 0, as `query` reads q.
        k="datum.k - 1", weight="toNumber(datum.cell) / 100", key=f"{keys}[datum.k]",
        query=f"{queries}[datum.q]")
    key_axis = alt.Axis(labelExpr=f"{keys}[datum.value]", labelAngle=-50, title=None)
    tooltip = [alt.Tooltip("query:N", title="piece"), alt.Tooltip("key:N", title="attends to"),
               alt.Tooltip("weight:Q", format=".2f")]
    heatmap = chosen.mark_rect().encode(
        x=alt.X("k:O", axis=key_axis),
        y=alt.Y("q:O", axis=alt.Axis(labelExpr=f"{queries}[datum.value]", title=None)),
        color=alt.Color("weight:Q", title="weight",
                        scale=alt.Scale(domain=[0, 1], range=["#ffffff", "#08519c"], interpolate="rgb")),
        stroke=alt.condition(hover, alt.value("#d62728"), alt.value(None)),
        tooltip=tooltip,
    ).add_params(hover).properties(width=alt.Step(24), height=alt.Step(20),
                                  title="Each row: a piece attending (hover one)")
    bars = chosen.transform_filter(hover).mark_bar(color="#d62728").encode(
        x=alt.X("k:O", axis=key_axis),
        y=alt.Y("weight:Q", scale=alt.Scale(domain=[0, 1]), title="weight"),
        tooltip=tooltip,
    ).properties(width=alt.Step(24), height=110, title="The hovered piece's weights")
    return alt.vconcat(heatmap, bars).add_params(*choices).properties(
        description="The attention weights of a translator, by sentence, layer and head")
