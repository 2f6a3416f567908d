"""One colour per backend in every chart of every page: :func:`backend_colors` is the only place a
backend's colour is chosen (the run report's latency bars, decode lines, page-size and roofline charts,
the result matrix's column swatches; pages that chart backends pass their own names through it)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["BUILTIN_COLORS", "backend_colors"]

#: Fixed colours of the built-in backends (plotly's qualitative ``Plotly`` and ``Dark24`` palettes, then ``Alphabet``), so a
#: backend has the same colour in every report, whichever other backends ran beside it.
BUILTIN_COLORS: dict[str, str] = {
    "sdpa-math": "#636EFA", "sdpa-flash": "#EF553B", "sdpa-efficient": "#00CC96", "sdpa-cudnn": "#AB63FA",
    "eager": "#FFA15A", "flex": "#19D3F3", "triton-paged-decode": "#FF6692", "torch-paged-reference": "#B6E880",
    "flex-paged-decode": "#FF97FF", "flashinfer-decode": "#FECB52", "flashinfer-decode-tc": "#2E91E5",
    "flashinfer-prefill-paged": "#E15F99", "flashinfer-prefill-ragged": "#1CA71C",
    "triton-paged-prefill": "#C4451C", "sdpa-nested": "#1C8356",  # plotly's ``Alphabet`` (Dark24 is spent below)
}
#: Colours for other names (plugins): plotly's ``Dark24`` minus those used above.
_OTHERS = ("#FB0D0D", "#DA16FF", "#222A2A", "#B68100", "#750D86", "#EB663B", "#511CFB", "#00A08B",
           "#FB00D1", "#FC0080", "#B2828D", "#6C7C32", "#778AAE", "#862A16", "#A777F1", "#620042",
           "#1616A7", "#DA60CA", "#6C4516", "#0D2A63", "#AF0038")


def backend_colors(backends: Iterable[str]) -> dict[str, str]:
    """A colour (``"#rrggbb"``) per distinct backend name: :data:`BUILTIN_COLORS` for the built-ins; any
    other name (a plugin) takes a colour from a second list chosen by a hash of its name (stable across
    runs and pages; two plugins in one page that would share a colour get the next free one).

    Args:
        backends: backend names, repeats and any order allowed (e.g. every cell's ``backend``).
    """
    out: dict[str, str] = {}
    taken: set[str] = set()
    names = sorted(set(backends))
    for name in names:
        if name in BUILTIN_COLORS:
            out[name] = BUILTIN_COLORS[name]
            taken.add(out[name])
    for name in names:
        if name in out:
            continue
        start = int(hashlib.sha1(name.encode()).hexdigest(), 16) % len(_OTHERS)
        for i in range(len(_OTHERS)):
            color = _OTHERS[(start + i) % len(_OTHERS)]
            if color not in taken:
                break
        out[name] = color
        taken.add(color)
    return out
