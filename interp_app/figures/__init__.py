"""Pure figure helpers shared by the probe pages: artifacts in, Plotly objects out (no Streamlit).

Each probe's figures live in ``interp_app/figures/<probe>.py``; the small conventions they share are here:

- ``token_label(tok)`` / ``token_labels(tokens)``: tokens with visible whitespace (``▁`` for a space, as
  SentencePiece writes it), safe as Plotly text.
- ``head_label(layer, head)``: ``"L3H7"``, the one way heads are named on every page.
- ``DIVERGING`` and ``signed_range(values)``: a diverging colour scale and a range centred at 0,
  for signed values (``go.Heatmap(z=v, colorscale=DIVERGING, zmid=0, **signed_range(v))``).
- ``numeric_axis(labels)``: tick labels for a numeric axis, so repeated tokens keep their own column
  (a categorical axis would merge two "the" tokens into one).
- ``spread(px, gap)``: positions (pixels) pushed apart to at least `gap`, for labels that would overlap;
  ``line_labels(fig, lines, ...)``: horizontal lines labelled in the right margin, off the bars, never on one another.
- ``modebar_room(fig)``: the title (and subplot titles) below the band where Plotly's toolbar (the modebar) appears
  on hover, so the toolbar never covers them.
"""

from __future__ import annotations

import html
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
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


def spread(px: Sequence[float], gap: float, lo: float | None = None, hi: float | None = None) -> list[float]:
    """Positions `px` (pixels, any order) moved apart so that any two are at least `gap` apart, each moved as
    little as a sweep upwards from the lowest allows, then the whole group shifted back by its mean move (the
    labels stay centred on their points) and, where it fits, into [`lo`, `hi`]. Returned in the input order."""
    order = sorted(range(len(px)), key=lambda i: px[i])
    out = [float(p) for p in px]
    for prev, i in zip(order, order[1:]):
        out[i] = max(out[i], out[prev] + gap)
    shift = float(np.mean([o - p for o, p in zip(out, px)])) if len(px) else 0.0
    if out and hi is not None:
        shift = max(shift, max(out) - hi)
    if out and lo is not None:
        shift = min(shift, min(out) - lo)
    return [o - shift for o in out]


#: Pixels between two labels' centres that keep 10-12 px text apart.
LABEL_GAP = 15


def plot_height(fig: Any) -> float:
    """The height in pixels of a one-row figure's plot area: its layout height less the top and bottom margins
    (Plotly's defaults, 450 and 100/80, where the layout leaves them unset)."""
    lay = fig.layout
    return float((lay.height or 450) - (lay.margin.t if lay.margin.t is not None else 100)
                 - (lay.margin.b if lay.margin.b is not None else 80))


def line_labels(fig: Any, lines: Mapping[str, float], y_range: Sequence[float], *, colour: str = "#555",
                log: bool = False, xref: str = "x domain", yref: str = "y") -> None:
    """Label horizontal lines (name -> y) in the right margin beside the plot (left-anchored at its right edge), so
    no label sits on a bar, with labels of nearby lines pushed apart (`spread`) to `LABEL_GAP` pixels. `y_range`
    is the axis range the figure shows (log10 values for a log axis, `log`); the figure's height and margins are
    set before this is called. Give the figure a right margin that fits the names."""
    lo, hi = (float(v) for v in y_range)
    h = plot_height(fig)
    ys = [float(np.log10(v)) if log else float(v) for v in lines.values()]
    px = [(y - lo) / (hi - lo) * h for y in ys]
    for (name, y), p, q in zip(lines.items(), px, spread(px, LABEL_GAP)):
        fig.add_annotation(x=1, xref=xref, xanchor="left", y=y, yref=yref, yanchor="middle", yshift=q - p,
                           text=name, showarrow=False, font={"size": 11, "color": colour})


#: The band at the top of a figure where Plotly draws its toolbar on hover (buttons ~22 px and their padding).
MODEBAR_PX = 32
#: The height of a one-line title (16-17 px text) with its padding.
TITLE_PX = 26


def modebar_room(fig: Any) -> Any:
    """Keep the figure's title and subplot titles out of the toolbar's band: the title sits at the bottom of the top
    margin, just above the plot (its subplot titles already do), and the top margin holds the toolbar's band
    above it. Returns the figure."""
    title = fig.layout.title.text
    lines = (str(title).count("<br>") + 1) if title else 0
    subplot_titles = any(a.yref == "paper" and a.yanchor == "bottom" and a.showarrow is False
                         for a in fig.layout.annotations)
    need = MODEBAR_PX + TITLE_PX * lines + (TITLE_PX if subplot_titles and lines else 0)
    if lines or subplot_titles:
        need = max(need, MODEBAR_PX + TITLE_PX)
        fig.update_layout(margin={"t": max(need, fig.layout.margin.t or 0)})
    if lines:
        # above the subplot titles when there are any; else just above the plot
        fig.update_layout(title={"yref": "paper", "y": 1, "yanchor": "bottom",
                                 "pad": {"b": TITLE_PX if subplot_titles else 6}})
    return fig
