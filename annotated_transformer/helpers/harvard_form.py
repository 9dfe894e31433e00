"""The Harvard notebook's `make_model(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8,
dropout=0.1)`, as chapter 5's `make_model` reads it: its argument names (`N` and `h` for `n_layers`
and `n_heads`), by keyword or in its order, turned into the fields of a `TransformerConfig`; a call
that cannot be read is a `TypeError` that shows the keyword form."""

from collections.abc import Iterable
from typing import Any

# The Harvard notebook's argument names after the two vocabulary sizes, in its order, and the
# TransformerConfig fields they set.
HARVARD_ARGUMENTS = {"N": "n_layers", "d_model": "d_model", "d_ff": "d_ff", "h": "n_heads", "dropout": "dropout"}
KEYWORD_FORM = ("the keyword form is make_model(src_vocab_size=1000, tgt_vocab_size=1000, n_layers=2, "
                "d_model=512, d_ff=2048, n_heads=8, dropout=0.1)")


def field_names(overrides: dict[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    """Keyword arguments with the Harvard names N and h renamed to n_layers and n_heads; a name that
    is no field of `fields`, or one setting given twice, is refused."""
    fields = set(fields)
    renamed, given = {}, {}
    for name, value in overrides.items():
        field = HARVARD_ARGUMENTS.get(name, name)
        if field not in fields:
            raise TypeError(f"make_model got an unknown argument {name!r}; {KEYWORD_FORM} (every field "
                            f"of TransformerConfig may be given; N and h are accepted for n_layers, n_heads)")
        if field in renamed:
            raise TypeError(f"make_model got both {given[field]!r} and {name!r}: they are one setting, "
                            f"give one")
        renamed[field], given[field] = value, name
    return renamed


def harvard_fields(src_vocab: int, tgt_vocab: Any, sizes: tuple, overrides: dict[str, Any]) -> dict[str, Any]:
    """The fields of the Harvard form make_model(src_vocab, tgt_vocab, N, d_model, d_ff, h, dropout):
    the vocabulary sizes, shared embeddings where the two are one size (§3.4), the sizes given by
    position and then `overrides` (the keyword arguments, already renamed by `field_names`)."""
    if not isinstance(tgt_vocab, int) or isinstance(tgt_vocab, bool):
        raise TypeError(f"make_model({src_vocab}, ...) needs the target vocabulary size too, "
                        f"make_model({src_vocab}, {src_vocab}, N=2); {KEYWORD_FORM}")
    if len(sizes) > len(HARVARD_ARGUMENTS):
        raise TypeError(f"make_model takes at most 7 positional arguments (src_vocab, tgt_vocab, "
                        f"{', '.join(HARVARD_ARGUMENTS)}), got {2 + len(sizes)}; {KEYWORD_FORM}")
    fields = {"src_vocab_size": src_vocab, "tgt_vocab_size": tgt_vocab, "share_embeddings": src_vocab == tgt_vocab}
    for name, value in zip(HARVARD_ARGUMENTS, sizes, strict=False):  # positional: in the Harvard order
        if HARVARD_ARGUMENTS[name] in overrides:
            raise TypeError(f"make_model got {name} twice, by position and by keyword; give it once")
        fields[HARVARD_ARGUMENTS[name]] = value
    return {**fields, **overrides}


def not_a_model_call(first: Any) -> TypeError:
    """The error of a make_model call whose first argument is neither a configuration nor a size."""
    return TypeError(f"make_model takes a TransformerConfig or two vocabulary sizes first, got {first!r}; "
                     f"{KEYWORD_FORM}")
