"""Pure figure helpers shared by the probe pages: artifacts in, Plotly objects out (no Streamlit).

Each probe's figures live in ``interp_app/figures/<probe>.py``; the small conventions they share are here:

- ``token_label(tok)`` / ``token_labels(tokens)``: tokens with visible whitespace (``▁`` for a space, as
  SentencePiece writes it), safe as Plotly text.
- ``head_label(layer, head)``: ``"L3H7"``, the one way heads are named on every page.
- ``DIVERGING`` and ``signed_range(values)``: a diverging colour scale and a range centred at 0,
  for signed values (``go.Heatmap(z=v, colorscale=DIVERGING, zmid=0, **signed_range(v))``).
- ``numeric_axis(labels)``: tick labels for a numeric axis, so repeated tokens keep their own column
  (a categorical axis would merge two "the" tokens into one).
"""

from __future__ import annotations

import html
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

#: Blue (negative) - white (0) - red (positive); pass zmid=0 or a symmetric zmin/zmax with it.
DIVERGING = "RdBu_r"

_WHITESPACE = {" ": "▁", "\n": "↵", "\t": "→", "\r": "↵"}


def token_label(tok: str, max_len: int = 16, escape: bool = True) -> str:
    """A token as a readable label: whitespace made visible, long tokens cut, HTML escaped for
    Plotly text (pass ``escape=False`` for tables and widgets, which show text verbatim).

    >>> token_label(" Paris")
    '▁Paris'
    """
    tok = str(tok)
    if tok == "":
        return "∅"
    shown = "".join(_visible(c) for c in tok)
    if len(shown) > max_len:
        shown = shown[: max_len - 1] + "…"
    return html.escape(shown, quote=False) if escape else shown


def _visible(c: str) -> str:
    if c in _WHITESPACE:
        return _WHITESPACE[c]
    if unicodedata.category(c) in ("Zs", "Zl", "Zp"):  # other spaces (no-break, thin, ...): an open box
        return "␣"
    if unicodedata.category(c) in ("Cc", "Cf"):  # controls, zero-width: the code point, no backslash
        return f"⟨U+{ord(c):04X}⟩"
    return c


def token_labels(tokens: Iterable[str], max_len: int = 16, escape: bool = True) -> list[str]:
    """`token_label` of each token, in order."""
    return [token_label(t, max_len, escape) for t in tokens]


def head_label(layer: int, head: int) -> str:
    """The name of attention head `head` of layer `layer`: ``L{layer}H{head}``."""
    return f"L{int(layer)}H{int(head)}"


def signed_range(values: Any) -> dict[str, float]:
    """``zmin``/``zmax`` symmetric about 0 covering the finite values (1.0 when all are 0 or none)."""
    arr = np.asarray(values, dtype=float)
    finite = arr[np.isfinite(arr)]
    bound = float(np.abs(finite).max()) if finite.size else 0.0
    bound = bound or 1.0
    return {"zmin": -bound, "zmax": bound}


def numeric_axis(labels: Sequence[str]) -> dict[str, Any]:
    """Axis settings that show `labels` at positions 0..n-1 of a numeric axis."""
    return {"tickmode": "array", "tickvals": list(range(len(labels))), "ticktext": list(labels)}
