"""Every number profattn shows, formatted in one place: times in µs/ms, bytes in decimal units, rates with
the fraction of a measured ceiling, counts with SI suffixes, launch shapes as ``[x, y, z]``.

Inputs are raw numbers in the units their names say (``_us`` µs, ``_bytes`` bytes, GB/s, TFLOP/s); the
outputs are display strings. The missing-value text is part of each formatter's contract ("–" where a
value was not measured for this cell, "n/a" where the platform cannot have it), so a table never prints
one value two ways.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Collection, Iterable
from typing import Any

from profattn.errors import message_text

__all__ = [
    "MISSING",
    "chart_text",
    "safe_chart",
    "Md",
    "md_code",
    "md_text",
    "causal_text",
    "fmt_bytes",
    "fmt_count",
    "fmt_err",
    "fmt_flops_rate",
    "fmt_latency_s",
    "fmt_opt",
    "fmt_rate",
    "fmt_shape",
    "fmt_sig",
    "fmt_span",
    "fmt_us",
    "fmt_us_column",
    "flops_unit",
    "launch_cells",
    "short_kernel_name",
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


def fmt_latency_s(v: float | None) -> str:
    """A latency given in seconds, in the unit that keeps it readable: ``850 µs`` (below 1 ms, as :func:`fmt_us`),
    ``26.0 ms`` / ``157 ms`` (three significant digits below 1 s), ``1.23 s``, ``2,104 s``; "–" for None or NaN."""
    if v is None or v != v:
        return MISSING
    if v < 1e-3:
        return fmt_us(v * 1e6)
    if v < 1.0:
        ms = v * 1e3
        return f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"
    return f"{v:.2f} s" if v < 100 else f"{v:,.0f} s"


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


def fmt_sig(v: float | None, digits: int = 3) -> str:
    """A number with ``digits`` significant digits, never rounded to zero: ``0.0412``, ``5.58``, ``55.8``;
    from ``10**digits`` up (and from 100 up with 3 digits) an integer with thousands separators:
    ``576``, ``4,287``. Exactly 0 is ``0``; "–" for None."""
    if v is None:
        return MISSING
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    decimals = digits - 1 - math.floor(math.log10(abs(v)))
    if decimals <= 0:
        return f"{v:,.0f}"
    s = f"{v:,.{decimals}f}"
    # rounding can carry into a new digit (9.996 → "10.00"): drop the extra decimal
    return f"{v:,.{decimals - 1}f}" if len(s.replace(",", "").replace("-", "").replace(".", "").lstrip("0")) > digits else s


def _fraction(v: float, ceiling: float | None) -> str:
    """`` (58%)``, `` (5.8%)``, `` (0.074%)``: a fraction of a ceiling with two significant digits."""
    return f" ({fmt_sig(100 * v / ceiling, 2)}%)" if ceiling else ""


def fmt_rate(v: float | None, unit: str, ceiling: float | None = None, *, bare: bool = False) -> str:
    """A rate with three significant digits and its unit (``57.6 GB/s``, ``0.0412 GB/s``, ``4,287 GB/s``: no
    rate prints as 0) and, when a measured ``ceiling`` in the same unit exists, its fraction of it
    (``3,900 GB/s (91%)``); ``bare``: without the unit (a column whose header carries it). "–" for None."""
    if v is None:
        return MISSING
    return fmt_sig(v) + ("" if bare else f" {unit}") + _fraction(v, ceiling)


#: FLOP-rate units :func:`fmt_flops_rate` prints, with their size in TFLOP/s.
FLOPS_UNITS: dict[str, float] = {"TFLOP/s": 1.0, "GFLOP/s": 1e-3}


def flops_unit(tflops: Iterable[float | None]) -> str:
    """The one unit for a column of FLOP rates (TFLOP/s in): ``"TFLOP/s"`` when any value reaches
    1 TFLOP/s, else ``"GFLOP/s"`` (CPU runs), so a header can carry the unit of every value under it."""
    vals = [v for v in tflops if v is not None]
    return "TFLOP/s" if not vals or max(vals) >= 1 else "GFLOP/s"


def fmt_flops_rate(tflops: float | None, ceiling: float | None = None, *, unit: str | None = None,
                   bare: bool = False) -> str:
    """A FLOP rate given in TFLOP/s, with three significant digits, in ``unit`` (``"TFLOP/s"`` or
    ``"GFLOP/s"``; None: TFLOP/s from 1 TFLOP/s up, else GFLOP/s — ``395 TFLOP/s``, ``261 GFLOP/s``,
    ``0.0123 GFLOP/s``), with the fraction of a measured ``ceiling`` in TFLOP/s; ``bare``: without the
    unit (a column whose header carries it, see :func:`flops_unit`). "–" for None.

    Raises:
        KeyError: ``unit`` is not one of :data:`FLOPS_UNITS`."""
    if tflops is None:
        return MISSING
    unit = unit or flops_unit([tflops])
    return fmt_rate(tflops / FLOPS_UNITS[unit], unit, bare=bare) + _fraction(tflops, ceiling)


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


def fmt_isolation(isolated: bool | None) -> str:
    """The document-isolation check of a packed call (``Correctness.isolated``): "documents isolated", "documents
    not isolated", or "" where it was not checked."""
    return "" if isolated is None else "documents isolated" if isolated else "documents not isolated"


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


#: Kernel names that say nothing alone (CUTLASS's ``Kernel2<Op>``, cuBLAS's ``gemvx::kernel<…>``).
_GENERIC_KERNEL_NAMES = frozenset({"kernel", "Kernel", "Kernel2", "device_kernel"})


def _split_top(s: str, stops: str) -> tuple[str, str]:
    """``s`` cut at its first character in ``stops`` outside ``<>``/``()`` nesting: (before, from there)."""
    depth = 0
    for i, ch in enumerate(s):
        if ch in stops and depth == 0:
            return s[:i], s[i:]
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
    return s, ""


def short_kernel_name(name: str, width: int = 60) -> str:
    """A demangled kernel name cut to what identifies it in a table: the function's own name without
    namespaces, template arguments, parameters or return type (``void pytorch_flash::flash_fwd_kernel<…>(…)``
    → ``flash_fwd_kernel``; ``std::enable_if<…>::type internal::gemvx::kernel<…>(…)`` → ``gemvx::kernel``;
    ``void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nt_align1>(…)`` →
    ``cutlass_80_simt_sgemm_128x128_8x4_nt_align1``), then cut to ``width`` characters with "…".
    Show the full name beside it (a ``title``)."""
    n = name.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon").strip().removeprefix("void ").strip()
    head, _ = _split_top(n, "(")
    head = head.strip()
    # a return type before the function (``std::enable_if<…>::type ns::f<…>``): keep what follows it
    while True:
        _, rest = _split_top(head, " ")
        if not rest:
            break
        head = rest.strip()
    qual, targs = _split_top(head, "<")
    parts = [p for p in qual.split("::") if p]
    short = parts[-1] if parts else n
    if short in _GENERIC_KERNEL_NAMES:
        first_arg = _split_top(targs[1:], ",>")[0].strip().rsplit("::", 1)[-1] if targs else ""
        if "_" in first_arg:  # a generated operation's name (CUTLASS): that is the kernel
            short = first_arg
        elif len(parts) > 1:
            short = f"{parts[-2]}::{short}"
    return short if len(short) <= width else short[: width - 1] + "…"


# ---- Markdown: text from files made inert -------------------------------------------------------------------------

#: Backslash escapes for every ASCII punctuation character that is markup in GitHub-flavoured Markdown inline text
#: (CommonMark §2.4 allows a backslash before any ASCII punctuation), and entities for the HTML-special ones.
_MD_ESCAPES = str.maketrans({**{c: "\\" + c for c in "\\`*_[]|~#"}, "<": "&lt;", ">": "&gt;", "&": "&amp;"})
#: GitHub turns ``@name`` into a mention (a notification) and ``#12`` into a link: a word joiner after the sign keeps
#: the text as it reads and breaks both.
_REFERENCE = re.compile(r"([@#])(?=\w)")
#: What makes a line a list item, a heading underline or an ordered list when it starts it.
_LINE_START = re.compile(r"^(?:[-+](?=\s|$)|=+\s*$|\d{1,9}[.)](?=\s|$))")


class Md(str):
    """Text that is already Markdown — profattn's own markup around values escaped with :func:`md_text` — which a
    table keeps as it is (:func:`profattn.report.markdown.md_table` escapes every other cell)."""


def md_text(v: Any) -> str:
    """A value from a run or a trace (a backend name, a reason, a device name, a version) made inert for GitHub
    Markdown, to be placed in inline text or a table cell: one line; Markdown's inline markup characters
    (backslash, backtick, ``*``, ``_``, ``[``, ``]``, ``|``, ``~``, ``#``) backslash-escaped; HTML shown, not
    interpreted (``<`` ``>`` ``&`` as entities); ``@name`` mentions and ``#12`` references broken by a word joiner
    (U+2060); a leading list marker (``- ``, ``+ ``, ``1. ``) or a line of ``=`` escaped, so it cannot start a list or
    underline a heading. Rendered, the
    text reads as it was written."""
    s = "" if v is None else str(v)
    s = message_text(s.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")).translate(_MD_ESCAPES)
    s = _REFERENCE.sub("\\1\u2060", s)
    start = _LINE_START.match(s)
    if start is None:
        return s
    end = start.end() if s[0].isdigit() else 1  # "- x" → "\- x"; "1. x" → "1\. x" (a backslash escapes punctuation)
    return s[: end - 1] + "\\" + s[end - 1:]


def md_code(v: Any) -> str:
    """A value from a file as a Markdown code span (shown literally, markup and HTML included): fenced by one more
    backtick than the longest run of backticks inside, padded with a space where it starts or ends with one, on one
    line (backslash escapes do not work inside code spans, so backticks cannot be escaped there)."""
    s = message_text(("" if v is None else str(v)).replace("\r", " ").replace("\n", " "))
    fence = "`" * (max((len(m) for m in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith(("`", " ")) or s.endswith(("`", " ")) or not s else ""
    return f"{fence}{pad}{s}{pad}{fence}"


#: A code span in one of profattn's sentences: ``profattn profile --regime all`` between single backticks.
_CODE_SPAN = re.compile(r"`([^`]+)`")


def _bold_run(part: str) -> str:
    """``part`` in bold, escaped as by :func:`md_text`, the white space at its ends outside the markers
    (``** x**`` is not bold)."""
    core = part.strip()
    if not core:
        return " " if part else ""
    lead, trail = part[: len(part) - len(part.lstrip())], part[len(part.rstrip()):]
    return f"{' ' if lead else ''}**{md_text(core)}**{' ' if trail else ''}"


def md_bold(v: Any, code: Collection[str] = ()) -> str:
    """A sentence of profattn's (a verdict) in bold, the code spans it wrote itself — `` `S` `` for each ``S`` in
    ``code`` (``profattn profile --regime all``) — kept as code *outside* the bold: ``**… measured:** `profattn
    profile --regime all` **adds …**``. GitHub does not render a code span nested in bold, and an escaped backtick
    inside it shows as a stray character. Every other backtick (a name from a run) is text, escaped as by
    :func:`md_text` like the rest."""
    s = "" if v is None else str(v)
    out: list[str] = []
    text_from = 0
    for m in _CODE_SPAN.finditer(s):
        if m.group(1) not in code:
            continue
        out += [_bold_run(s[text_from:m.start()]), md_code(m.group(1))]
        text_from = m.end()
    out.append(_bold_run(s[text_from:]))
    return "".join(out)


def chart_text(v: Any) -> str:
    """A string from a run or a trace placed inside a plotly template (``hovertemplate``): plotly.js draws a subset
    of HTML in labels, legends, titles and hovers (``<a href>``, ``<b>``, ``<br>``), so ``<``, ``>`` and ``&`` become
    entities (plotly shows them as the characters) and control characters escapes (:func:`message_text`)."""
    return html.escape(message_text("" if v is None else v), quote=False)


def safe_chart(figure: Any) -> Any:
    """A plotly figure (its JSON-ready dict) with every string it displays made inert by :func:`chart_text` — trace
    names, data labels, hover text, titles, annotations, tick text — except the values of ``*template`` keys
    (profattn's own hover markup, whose run strings are escaped where they are built with :func:`chart_text`, and the
    layout's theme). Call it once, where the figure leaves its builder."""
    if isinstance(figure, dict):
        return {k: v if k.endswith("template") else safe_chart(v) for k, v in figure.items()}
    if isinstance(figure, list):
        return [safe_chart(v) for v in figure]
    if isinstance(figure, str):
        return chart_text(figure)
    return figure
