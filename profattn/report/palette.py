"""One colour per backend in every chart of every page: :func:`backend_colors` is the only place a
backend's colour is chosen (the run report's latency bars, decode lines, page-size and roofline charts,
the result matrix's column swatches; pages that chart backends pass their own names through it)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["backend_colors"]


def backend_colors(backends: Iterable[str]) -> dict[str, str]:
    """A colour (``"#rrggbb"``) per distinct backend name: the names sorted, then coloured in that order
    from plotly's qualitative ``Plotly`` palette (10 colours) followed by ``Dark24`` (cycling past 34
    names). Sorting makes the choice independent of cell order and of which cells ran, so one run's
    charts agree with each other and a backend keeps its colour in any page built from the same set.

    Args:
        backends: backend names, repeats and any order allowed (e.g. every cell's ``backend``).
    """
    import plotly.colors

    seq = list(plotly.colors.qualitative.Plotly) + list(plotly.colors.qualitative.Dark24)
    return {name: seq[i % len(seq)] for i, name in enumerate(sorted(set(backends)))}
