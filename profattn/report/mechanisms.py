"""Mechanisms in words: a :class:`profattn.analysis.run.mechanisms.Gap` (why one call trails another, from the run's own
evidence) → one sentence with its numbers. Only findings the analysis holds are worded; a gap without trace,
counters or ceilings says so instead of guessing.
"""

from __future__ import annotations

from profattn.analysis.run.mechanisms import (
    Bound, ExtraKernels, ExtraWork, Gap, GapPart, Grid, HostGap, KernelRole, Rate, Traffic, WorkCause,
)
from profattn.interfaces import Layout
from profattn.report.format import fmt_sig, fmt_us
from profattn.workload import Phase

#: At most this many findings (besides the rates) make one mechanism sentence.
MAX_PHRASES = 3

#: How each layout is named after a winner: "sdpa-cudnn (contiguous copy)".
LAYOUT_NAMES = {Layout.PAGED: "paged cache", Layout.CONTIGUOUS: "contiguous K/V", Layout.PACKED: "packed rows"}


def layout_name(layout: Layout | None, *, paged_workload: bool = False) -> str:
    """What a kernel read, in words: ``"paged cache"``, ``"contiguous copy"`` (contiguous K/V of a paged workload,
    made outside the timing), ``"contiguous K/V"``, ``"packed rows"``; ``"layout unknown"`` for None (a plugin)."""
    if layout is None:
        return "layout unknown"
    if layout is Layout.CONTIGUOUS and paged_workload:
        return "contiguous copy"
    return LAYOUT_NAMES[layout]


def _pct(x: float) -> str:
    return f"{fmt_sig(100 * x, 2)} %"


def fmt_bytes3(v: float) -> str:
    """Bytes with three significant digits in decimal units: ``2.15 GB``, ``872 MB``, ``16.9 MB``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= scale:
            return f"{fmt_sig(v / scale)} {unit}"
    return f"{v:,.0f} B"


#: How a bound reads after a rate.
BOUND_WORDS = {Bound.COMPUTE: "compute-bound", Bound.BANDWIDTH: "bandwidth-bound", Bound.LAUNCH: "launch-bound",
               Bound.NEITHER: "below both roofs", Bound.UNKNOWN: "bound unknown"}


def _kernels(n: float) -> str:
    return f"{n:g} launch{'' if n == 1 else 'es'}"


def extra_phrase(e: ExtraKernels) -> str:
    """``"adds a layout copy (2 launches, 7.20 µs, 47 % of its GPU time)"``."""
    what = {KernelRole.MASK: "an explicit mask built in the call", KernelRole.LAYOUT: "a layout copy",
            KernelRole.COMBINE: "a split combine", KernelRole.INDEX: "index setup", KernelRole.FILL: "buffer fills",
            KernelRole.OTHER: "other PyTorch kernels"}.get(e.role, e.role.value)
    return f"adds {what} ({_kernels(e.launches)}, {fmt_us(e.gpu_us)}, {_pct(e.share)} of its GPU time)"


def work_phrase(w: ExtraWork, mask: ExtraKernels | None = None) -> str:
    """``"is handed an explicit mask (built in the call: 15 launches, 187 µs), so its kernel computes the whole q × kv
    rectangle: 1.19× the causal pairs"`` or ``"computes 19.32× the required pairs (padded to the longest sequence)"``."""
    if w.cause is WorkCause.PADDING:
        return f"computes {w.ratio:.2f}× the required pairs (padded to the longest sequence)"
    built = f" (built in the call: {_kernels(mask.launches)}, {fmt_us(mask.gpu_us)})" if mask is not None else ""
    return (f"is handed an explicit mask{built}, so its kernel computes the whole q × kv rectangle: "
            f"{w.ratio:.2f}× the causal pairs")


def traffic_phrase(t: Traffic, other: Traffic | None, *, reuse_lost: bool = False) -> str:
    """``"moves 2.15 GB from DRAM for 872 MB requested (2.47×; L2→SM 33.4 GB, 38.3×) against 658 MB (0.98×)
    unchunked"``; ``reuse_lost``: say that the excess is as large as reading K/V once per query head."""
    l2 = f"; L2→SM {fmt_bytes3(t.l2_bytes)}, {t.l2_ratio:.1f}×" if t.l2_bytes is not None and t.l2_ratio is not None else ""
    vs = f" against {other.dram_ratio:.2f}× for {other.backend}" if other is not None and other.backend != t.backend else (
        f" against {fmt_bytes3(other.dram_bytes)} ({other.dram_ratio:.2f}×) unchunked" if other is not None else "")
    reuse = f" — as if each of the group's {t.group_size} query heads re-read its K/V (GQA reuse lost)" if reuse_lost else ""
    return (f"moves {fmt_bytes3(t.dram_bytes)} from DRAM for {fmt_bytes3(t.requested_bytes)} requested "
            f"({t.dram_ratio:.2f}×{l2}){vs}{reuse}")


def grid_phrase(g: Grid, other: Grid | None) -> str:
    """``"launches 32 CTAs on 132 SMs (100 SMs idle) against 256 for triton-paged-decode"``."""
    ctas = f"{g.ctas_min:,}" if g.ctas_min == g.ctas_max else f"{g.ctas_min:,}–{g.ctas_max:,}"
    idle = f", {g.idle_sms} SMs idle" if g.idle_sms else f", {g.ctas_per_sm:.2f} per SM"
    waves = f", {g.waves:.2f} waves" if g.waves is not None else ""
    vs = f" against {other.ctas_min:,} for {other.backend}" if other is not None and other.backend != g.backend else ""
    return f"launches {ctas} CTAs on {g.num_sms} SMs{idle}{waves}{vs}"


def host_phrase(h: HostGap) -> str:
    """``"spends 7.30 µs of its 12.4 µs in launch and dispatch (its kernels run 5.10 µs)"``."""
    return f"spends {fmt_us(h.host_us)} of its {fmt_us(h.latency_us)} in launch and dispatch (its kernels run {fmt_us(h.gpu_us)})"


def rate_phrase(r: Rate, phase: Phase, *, name: bool = True) -> str:
    """``"sdpa-cudnn 576 TFLOP/s (83 % of the GEMM ceiling, compute-bound)"`` (decode: GB/s of the memory roof)."""
    who = f"{r.backend} " if name else ""
    if phase is Phase.DECODE:
        frac = f" ({_pct(r.gbps_fraction)} of the {r.roof_kind} roof" if r.gbps_fraction is not None else " ("
        return f"{who}{fmt_sig(r.gbps)} GB/s{frac}{', ' if r.gbps_fraction is not None else ''}{BOUND_WORDS[r.bound]})"
    frac = f" ({_pct(r.tflops_fraction)} of the GEMM ceiling" if r.tflops_fraction is not None else " ("
    return f"{who}{fmt_sig(r.tflops)} TFLOP/s{frac}{', ' if r.tflops_fraction is not None else ''}{BOUND_WORDS[r.bound]})"


def rate_pair(rb: Rate, ra: Rate, phase: Phase, *, other: str) -> str:
    """``"does 419 TFLOP/s against 496 for flashinfer-prefill-paged (61 % and 72 % of the GEMM ceiling; both
    compute-bound)"``; decode: ``"streams 906 GB/s against 1,837 for … (21 % and 43 % of the copy roof; …)"``.
    ``other``: how the faster side is named (``"for X"``, ``"unchunked"``)."""
    decode = phase is Phase.DECODE
    verb, unit = ("streams", "GB/s") if decode else ("does", "TFLOP/s")
    vb, va = (rb.gbps, ra.gbps) if decode else (rb.tflops, ra.tflops)
    fb, fa = (rb.gbps_fraction, ra.gbps_fraction) if decode else (rb.tflops_fraction, ra.tflops_fraction)
    roof = f"the {rb.roof_kind} roof" if decode else "the GEMM ceiling"
    if rb.bound is ra.bound:
        bounds = "neither near a roof" if rb.bound is Bound.NEITHER else f"both {BOUND_WORDS[rb.bound]}"
    else:
        bounds = f"{BOUND_WORDS[rb.bound]} vs {BOUND_WORDS[ra.bound]}"
    fracs = f"{_pct(fb)} and {_pct(fa)} of {roof}; " if fb is not None and fa is not None else ""
    return f"{verb} {fmt_sig(vb)} {unit} against {fmt_sig(va)} {other} ({fracs}{bounds})"


def _first(fs: tuple, kind: type, backend: str, **match: object):
    return next((f for f in fs if isinstance(f, kind) and f.backend == backend
                 and all(getattr(f, k) == v for k, v in match.items())), None)


def mechanism_text(g: Gap | None, phase: Phase, *, chunking: bool = False) -> str:
    """One sentence on why ``g.behind`` trails ``g.ahead``, ``g.behind`` its subject: the findings that explain the gap
    in the analysis' order (at most :data:`MAX_PHRASES`), then the two sides' rates. ``chunking``: the two sides are one
    backend's prompt chunked and whole (the subject is the chunked prompt, the other side "unchunked"). ``""`` for
    None, and when the run holds no evidence for the gap (no trace, counters or ceilings)."""
    if g is None:
        return ""
    b, a = g.behind.backend, g.ahead.backend
    other = "unchunked" if chunking else f"for {a}"
    phrases: list[str] = []
    fb, fa = g.behind_findings, g.ahead_findings
    mask = _first(fb, ExtraKernels, b, role=KernelRole.MASK)
    if chunking and g.behind.launches is not None and g.ahead.launches is not None and g.behind.launches != g.ahead.launches:
        phrases.append(f"launches {g.behind.launches:g} kernels in its {g.behind.calls} calls per prompt against "
                       f"{g.ahead.launches:g} unchunked")
    for f in g.explains:
        if len(phrases) >= MAX_PHRASES:
            break
        if isinstance(f, ExtraKernels) and f.backend == b:
            if f.role is KernelRole.MASK and any(isinstance(x, ExtraWork) and x.cause is WorkCause.DENSE_MASK for x in g.explains):
                continue  # worded with the extra work it causes
            phrases.append(extra_phrase(f))
        elif isinstance(f, HostGap) and f.backend == b:
            phrases.append(host_phrase(f))
        elif isinstance(f, ExtraWork) and f.backend == b:
            phrases.append(work_phrase(f, mask))
        elif isinstance(f, Traffic) and f.backend == b:
            t_other = next((x for x in fa if isinstance(x, Traffic)), None)
            lost = (phase is Phase.DECODE and f.group_size > 1 and f.dram_ratio >= 0.8 * f.group_size
                    and not any(isinstance(x, ExtraWork) for x in fb))
            phrases.append(traffic_phrase(f, t_other, reuse_lost=lost))
        elif isinstance(f, Grid) and f.backend == b:
            phrases.append(grid_phrase(f, next((x for x in fa if isinstance(x, Grid)), None)))
    ra, rb = _first(fa, Rate, a), _first(fb, Rate, b)
    if ra is not None and rb is not None:
        rates = rate_pair(rb, ra, phase, other=other)
        if chunking and g.behind.kernel_tflops and g.ahead.kernel_tflops and phase is not Phase.DECODE:
            rates += (f", its kernel {fmt_sig(g.behind.kernel_tflops)} TFLOP/s on the work it executes against "
                      f"{fmt_sig(g.ahead.kernel_tflops)}")
        phrases.append(rates)
    if not phrases:  # no trace, counters or ceilings: nothing to explain the gap with
        return ""
    if g.main_part is GapPart.HOST and len(phrases) == 1:
        phrases.insert(0, "loses the gap in launch and dispatch")
    subject = "chunked, it" if chunking else b
    return f"{subject} " + "; it ".join(phrases)
