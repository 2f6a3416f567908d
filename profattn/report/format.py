"""Every number profattn shows, formatted in one place: times in µs/ms, bytes in decimal units, rates with
the fraction of a measured ceiling, counts with SI suffixes, launch shapes as ``[x, y, z]``.

Inputs are raw numbers in the units their names say (``_us`` µs, ``_bytes`` bytes, GB/s, TFLOP/s); the
outputs are display strings. The missing-value text is part of each formatter's contract ("–" where a
value was not measured for this cell, "n/a" where the platform cannot have it), so a table never prints
one value two ways.
"""

from __future__ import annotations

__all__ = [
    "MISSING",
    "causal_text",
    "fmt_bytes",
    "fmt_count",
    "fmt_err",
    "fmt_flops_rate",
    "fmt_opt",
    "fmt_rate",
    "fmt_shape",
    "fmt_span",
    "fmt_us",
    "fmt_us_column",
    "launch_cells",
]

#: Shown for a value that was not measured (no timing, no trace).
MISSING = "–"


def fmt_us(v: float | None) -> str:
    """µs with a unit that keeps 3–4 significant digits: ``5.00 µs``, ``55.8 µs``, ``8,304.3 µs``,
    ``12.00 ms`` (10,000 µs and above in ms); "–" for None."""
    if v is None:
        return MISSING
    if v >= 10_000:
        return f"{v / 1000:,.2f} ms"
    return f"{v:,.1f} µs" if v >= 10 else f"{v:.2f} µs"


def fmt_us_column(v: float | None, width: int = 10) -> str:
    """µs right-aligned in a fixed-width console column (``"      55.8 µs"``, one decimal, no thousands
    separator); blanks of the same width (``width`` + 3) for None, so progress lines stay aligned."""
    return " " * (width + 3) if v is None else f"{v:{width}.1f} µs"


def fmt_span(lo: float, hi: float, like: float) -> str:
    """A p10–p90 range in µs, in the unit :func:`fmt_us` picks for ``like`` (no "8,304.3 µs – 12.00 ms"):
    ``50.0 – 60.0 µs``, ``11.00 – 13.00 ms``."""
    if like >= 10_000:
        return f"{lo / 1000:,.2f} – {hi / 1000:,.2f} ms"
    return f"{lo:,.1f} – {hi:,.1f} µs"


def fmt_bytes(v: float | None) -> str:
    """Bytes in decimal units (kB = 1e3, MB = 1e6, GB = 1e9) with one decimal: ``1.5 MB``, ``512 B``; "n/a"
    for None (e.g. peak memory on CPU, shared memory the trace did not record)."""
    if v is None:
        return "n/a"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:,.1f} {unit}"
    return f"{v:,.0f} B"


def fmt_rate(v: float | None, unit: str, ceiling: float | None = None) -> str:
    """A rate with its unit (``812.3 GB/s``; no decimal from 1000 up: ``3,900 GB/s``) and, when a measured
    ``ceiling`` in the same unit exists, its fraction of it (``3,900 GB/s (87%)``); "–" for None."""
    if v is None:
        return MISSING
    s = f"{v:,.1f} {unit}" if v < 1000 else f"{v:,.0f} {unit}"
    return f"{s} ({v / ceiling:.0%})" if ceiling else s


def fmt_flops_rate(tflops: float | None, ceiling: float | None = None) -> str:
    """TFLOP/s (``412.5 TFLOP/s``), or GFLOP/s below 1 TFLOP/s (CPU runs: ``12.3 GFLOP/s``), with the
    fraction of a measured ``ceiling`` in TFLOP/s; "–" for None."""
    if tflops is None:
        return MISSING
    s = f"{tflops:,.1f} TFLOP/s" if tflops >= 1 else f"{tflops * 1e3:,.1f} GFLOP/s"
    return f"{s} ({tflops / ceiling:.0%})" if ceiling else s


def fmt_count(v: float | None) -> str:
    """Large counts with SI suffixes (tokens/s, FLOPs): ``1.07 G``, ``65.54 k``, ``999``; "–" for None."""
    if v is None:
        return MISSING
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:,.2f} {unit}"
    return f"{v:,.0f}"


def fmt_err(v: float | None) -> str:
    """A relative error in scientific notation with two significant digits (``3.2e-03``); "–" for None
    (no correctness check ran)."""
    return MISSING if v is None else f"{v:.1e}"


def fmt_shape(t: tuple[int, ...] | None) -> str:
    """A launch shape (grid or block) as ``[128, 16, 1]``; "n/a" where the trace records none (ROCm)."""
    return "n/a" if t is None else "[" + ", ".join(str(x) for x in t) + "]"


def fmt_opt(v: float | None, spec: str) -> str:
    """``format(v, spec)`` (``fmt_opt(2048, ",")`` → ``2,048``; ``fmt_opt(1.5, ".2f")`` → ``1.50``), or
    "n/a" for None (a launch property the trace does not record)."""
    return "n/a" if v is None else format(v, spec)


def causal_text(causal: bool | None) -> str:
    """Whether an attention call is causal: "yes", "no", or "unknown" when the trace cannot tell."""
    return "unknown" if causal is None else ("yes" if causal else "no")


def launch_cells(grid: tuple[int, ...] | None, block: tuple[int, ...] | None, *, ctas: int | None,
                 registers: int | None, smem_bytes: float | None, blocks_per_sm: float | None = None,
                 ctas_per_sm: float | None = None) -> dict[str, str]:
    """The launch-shape columns every kernel table shows, formatted one way: ``grid``/``block``
    (``[x, y, z]``), ``ctas`` (``2,048``), ``registers`` per thread, ``smem`` (shared memory, bytes →
    ``kB``), ``blocks_per_sm`` (Kineto's figure) and ``ctas_per_sm`` (CTAs / SMs) with two decimals;
    "n/a" for whatever the trace does not record (ROCm records no launch shape)."""
    return {
        "grid": fmt_shape(grid), "block": fmt_shape(block), "ctas": fmt_opt(ctas, ","),
        "registers": "n/a" if registers is None else str(registers), "smem": fmt_bytes(smem_bytes),
        "blocks_per_sm": fmt_opt(blocks_per_sm, ".2f"), "ctas_per_sm": fmt_opt(ctas_per_sm, ".2f"),
    }
