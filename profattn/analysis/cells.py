"""Analysis: trace evidence per cell, the family check, winners per workload, and the verdict.

Inputs are typed records (:mod:`profattn.results`) and parsed traces (:mod:`profattn.trace.kineto`); outputs are
typed records the report renders. Nothing here measures or renders.

The verdict answers the seed lesson's question: does the training winner remain the decode winner, and
why — from what was observed (query rows against CTAs and SMs, K/V bytes against time and the measured
copy ceiling, kernels per call), never from canned text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import pandas as pd

from profattn.families import ATTENTION_FAMILIES, KernelFamily
from profattn.results import (
    CellResult,
    CounterKernel,
    CountersInfo,
    CounterSummary,
    KernelLaunch,
    RunResult,
    TraceSummary,
)
from profattn.trace.counter_sums import SUMMED_COUNTERS, sum_counters
from profattn.trace.kineto import Trace, kernels_in_range, ops_in_range
from profattn.workload import Phase

# ---- trace evidence ------------------------------------------------------------------------------


def _opt_int(v: object) -> int | None:
    return None if v is None or pd.isna(v) else int(v)  # type: ignore[arg-type]


def _opt_float(v: object) -> float | None:
    return None if v is None or pd.isna(v) else float(v)  # type: ignore[arg-type]


def _shape(row: pd.Series, prefix: str) -> tuple[int, int, int] | None:
    vals = [row.get(f"{prefix}_{a}") for a in "xyz"]
    if any(v is None or pd.isna(v) for v in vals):
        return None
    return tuple(int(v) for v in vals)  # type: ignore[return-value]


def family_check(family: KernelFamily, kernel_names: list[str], op_names: list[str], *, gpu: bool | None = None) -> tuple[bool | None, str]:
    """Do the kernels (GPU run) or operators (CPU run) that ran belong to ``family``?

    ``gpu`` says whether the trace recorded GPU kernels at all (default: whether ``kernel_names`` is
    non-empty). On a GPU trace only kernels count: operator names say what was *called*, not what ran
    (a compiled region that fell back to an unfused path still shows its operator).
    Returns ``(ok, note)``: ``ok`` is False when another attention family's kernel ran or none of the
    family's own did (on a GPU trace, also when the cell launched no kernel); None when there is no
    evidence (a CPU trace without operators).
    """
    gpu = bool(kernel_names) if gpu is None else gpu
    names, kind, match = (kernel_names, "kernel", family.matches_kernel) if gpu else (op_names, "operator", family.matches_op)
    if not names:
        if gpu:
            return False, "no kernel was launched inside this cell's ranges"
        return None, "no kernels or operators recorded for this cell"
    others = [f for f in ATTENTION_FAMILIES if f.name != family.name and f.name not in family.allows]
    foreign = sorted({n for n in names for f in others if (f.matches_kernel(n) if kind == "kernel" else f.matches_op(n))})
    own = sorted({n for n in names if match(n)})
    if foreign:
        return False, f"ran {kind}s of another family: {', '.join(foreign)[:300]}"
    if not own:
        return False, f"no {family.name} {kind} among the {len(set(names))} that ran"
    return True, f"{family.name} {kind}s ran: {', '.join(own)[:300]}"


def summarize_cell(trace: Trace, trace_file: str, cell: CellResult, family: KernelFamily) -> TraceSummary:
    """The kernels that actually ran in ``cell``'s ``record_function`` ranges of ``trace``, per call."""
    rid = cell.cell_id
    ranges = trace.ranges
    calls = int((ranges["name"] == rid).sum()) if len(ranges) else 0
    k = kernels_in_range(trace, rid)
    ops = ops_in_range(trace, rid)["name"].tolist()
    ok, note = family_check(family, k["name"].tolist(), ops, gpu=trace.has_gpu_kernels)
    per = max(calls, 1)
    launches: list[KernelLaunch] = []
    if len(k):
        for name, g in sorted(k.groupby("name", sort=False), key=lambda kv: -kv[1]["dur_us"].sum()):
            first = g.iloc[0]
            launches.append(KernelLaunch(
                name=str(name),
                count_per_call=len(g) / per,
                dur_us_per_call=float(g["dur_us"].sum()) / per,
                grid=_shape(first, "grid"),
                block=_shape(first, "block"),
                registers_per_thread=_opt_int(first.get("registers_per_thread")),
                shared_mem_bytes=_opt_int(first.get("shared_mem_bytes")),
                ctas=_opt_int(first.get("ctas")),
                blocks_per_sm=_opt_float(first.get("blocks_per_sm")),
                est_occupancy_pct=_opt_float(first.get("est_occupancy_pct")),
                shapes=tuple(dict.fromkeys(
                    (gs, bs) for gs, bs in ((_shape(r, "grid"), _shape(r, "block")) for _, r in g.iterrows())
                    if gs is not None and bs is not None))[:8],
            ))
    total = sum(kl.dur_us_per_call for kl in launches)
    ctas = k["ctas"].dropna() if len(k) and "ctas" in k else pd.Series(dtype=float)
    ctas_per_call = float(ctas.sum()) / per if len(ctas) else None
    sms = trace.num_sms
    return TraceSummary(
        trace_file=trace_file,
        calls=calls,
        kernels_per_call=len(k) / per,
        gpu_time_per_call_us=total if launches else None,
        ctas_per_call=ctas_per_call,
        ctas_per_sm=ctas_per_call / sms if ctas_per_call is not None and sms else None,
        dominant_kernel=launches[0].name if launches else None,
        dominant_share=launches[0].dur_us_per_call / total if launches and total > 0 else None,
        kernels=tuple(launches),
        family_ok=ok,
        family_note=note,
        ops=tuple(dict.fromkeys(ops))[:40],
    )


def attach_trace(cell: CellResult, trace: Trace, trace_file: str, family: KernelFamily) -> CellResult:
    """``cell`` with its :class:`TraceSummary` from ``trace``."""
    return replace(cell, trace=summarize_cell(trace, trace_file, cell, family))


# ---- winners and verdict -------------------------------------------------------------------------


def winners(run: RunResult) -> dict[str, CellResult | None]:
    """Per workload tag: the fastest eligible cell (timed, correct, family confirmed), or None."""
    out: dict[str, CellResult | None] = {}
    for cell in run.cells:
        out.setdefault(cell.workload.tag, None)
        best = out[cell.workload.tag]
        if cell.eligible and (best is None or cell.latency_us < best.latency_us):  # type: ignore[operator]
            out[cell.workload.tag] = cell
    return out


@dataclass(frozen=True)
class CellEvidence:
    """Observed facts about one cell the verdict reasons with (None where not observed).

    ``query_rows`` = B·Hq·Lq; ``ctas`` / ``ctas_per_sm`` of the dominant kernel per launch;
    ``kv_gbps`` = K/V bytes / latency (GB = 1e9); ``copy_fraction`` = kv_gbps / measured copy GB/s;
    ``floor_us`` = requested bytes / copy ceiling (µs).
    """

    backend: str
    latency_us: float | None
    query_rows: int
    ctas: int | None
    ctas_per_sm: float | None
    rows_per_cta: float | None
    kernels_per_call: float | None
    dominant_kernel: str | None
    kv_gbps: float | None
    copy_fraction: float | None
    floor_us: float | None


def evidence(cell: CellResult, run: RunResult) -> CellEvidence:
    """Collect :class:`CellEvidence` for ``cell`` from its timing, trace summary and the run's ceilings."""
    w = cell.workload
    rows = w.batch * w.num_q_heads * w.q_len
    ctas = ctas_sm = None
    kpc = dom = None
    if cell.trace is not None:
        kpc = cell.trace.kernels_per_call
        dom = cell.trace.dominant_kernel
        if cell.trace.kernels:
            top = cell.trace.kernels[0]
            ctas = top.ctas
            sms = run.environment.num_sms
            ctas_sm = ctas / sms if ctas is not None and sms else None
    ceiling = run.ceilings.copy_gbps if run.ceilings else None
    kv = cell.kv_gbps
    return CellEvidence(
        backend=cell.backend,
        latency_us=cell.latency_us,
        query_rows=rows,
        ctas=ctas,
        ctas_per_sm=ctas_sm,
        rows_per_cta=rows / ctas if ctas else None,
        kernels_per_call=kpc,
        dominant_kernel=dom,
        kv_gbps=kv,
        copy_fraction=kv / ceiling if kv is not None and ceiling else None,
        floor_us=w.requested_bytes / (ceiling * 1e9) * 1e6 if ceiling else None,
    )


@dataclass(frozen=True)
class VerdictRow:
    """One comparison: the training winner against the winner of another workload (prefill or decode)."""

    workload_tag: str
    phase: str
    kv_len: int
    label: str
    training_winner: str | None
    winner: str | None
    stays: bool | None
    headline: str
    reasons: tuple[str, ...]
    close_call: bool = False  #: the winner and the training winner (or runner-up) are within noise


@dataclass(frozen=True)
class Verdict:
    """The run's answer: the training winner, and for every other workload whether it still wins and why."""

    training_winner: str | None
    training_tag: str | None
    summary: str
    rows: tuple[VerdictRow, ...]


def _fmt_us(v: float | None) -> str:
    return "n/a" if v is None else (f"{v:,.1f} µs" if v < 10_000 else f"{v / 1000:,.2f} ms")


def _launch_phrase(e: CellEvidence, sms: int | None) -> str:
    if e.ctas is None:
        return f"{e.backend}: launch shape not recorded"
    fill = f"{e.ctas_per_sm:.2f} CTAs per SM on {sms} SMs" if e.ctas_per_sm is not None else "SM count unknown"
    rows = f", {e.rows_per_cta:,.2f} query rows per CTA" if e.rows_per_cta is not None else ""
    persistent = ": a persistent grid, one CTA per SM looping over tiles" if sms and e.ctas == sms else ""
    return f"{e.backend}'s main kernel launches {e.ctas:,} CTAs ({fill}{rows}{persistent})"


def _explain(row_cell_w: CellResult | None, row_cell_t: CellResult | None, train_cell: CellResult | None, run: RunResult) -> list[str]:
    """Reasons, generated from evidence, why the winner of a workload is or is not the training winner."""
    reasons: list[str] = []
    sms = run.environment.num_sms
    cells = [c for c in (row_cell_w, row_cell_t) if c is not None]
    if not cells:
        return reasons
    w = cells[0].workload
    ev = {c.backend: evidence(c, run) for c in cells}
    rows = w.batch * w.num_q_heads * w.q_len
    if train_cell is not None:
        trows = train_cell.workload.batch * train_cell.workload.num_q_heads * train_cell.workload.q_len
        reasons.append(
            f"Query parallelism: this call has B·Hq·Lq = {rows:,} query rows against {trows:,} in training "
            f"({trows / rows:,.0f}× fewer)." if trows > rows else
            f"Query parallelism: this call has {rows:,} query rows, as many as training ({trows:,})."
        )
        te = evidence(train_cell, run)
        if te.ctas is not None:
            reasons.append(f"In training, {_launch_phrase(te, sms)}.")
    for c in cells:
        e = ev[c.backend]
        if e.ctas is None:
            continue
        phrase = _launch_phrase(e, sms)
        if e.ctas_per_sm is not None and e.ctas_per_sm < 1:
            phrase += " — fewer CTAs than SMs, so part of the GPU idles"
        reasons.append(f"Here, {phrase}.")
    measured = [(c, byte_ledger(c)) for c in cells if c.counters is not None]
    if measured:
        reasons.append("Measured traffic (Nsight Compute, cold caches): " + "; ".join(
            f"{c.backend} moved {bl.dram_bytes / 1e6:,.1f} MB from DRAM for {bl.requested_bytes / 1e6:,.1f} MB requested "
            f"({bl.dram_ratio:.2f}×{', redundant reads' if bl.redundant else ''}), L2→SM {bl.l2_ratio:.2f}×"
            for c, bl in measured) + ".")
    if w.phase is Phase.DECODE:
        kv_mb = w.kv_bytes / 1e6
        parts = []
        for c in cells:
            e = ev[c.backend]
            if e.kv_gbps is None:
                continue
            frac = f" ({e.copy_fraction:.0%} of the measured copy bandwidth)" if e.copy_fraction is not None else ""
            parts.append(f"{c.backend} streams them at {e.kv_gbps:,.0f} GB/s{frac}")
        floor = ev[cells[0].backend].floor_us
        floor_txt = f"; the byte floor at the copy ceiling is {_fmt_us(floor)}" if floor is not None else ""
        reasons.append(
            f"KV access: K/V hold {kv_mb:,.1f} MB (Hkv = {w.num_kv_heads} heads, GQA group {w.group_size}); "
            + ("; ".join(parts) if parts else "no timing")
            + floor_txt + "."
        )
    for c in cells:
        gpu = c.trace.gpu_time_per_call_us if c.trace else None
        lat = c.latency_us
        if gpu is not None and lat and gpu < 0.6 * lat:
            where = ("launch latency and the gaps between its kernels, which graph replay does not remove"
                     if c.graph_timing is not None else
                     "host-side dispatch and launch gaps (a CUDA graph would hide most of it)")
            reasons.append(
                f"{c.backend} is launch-bound here: its kernels run {_fmt_us(gpu)} of the {_fmt_us(lat)} median latency; "
                f"the other {_fmt_us(lat - gpu)} is {where}."
            )
    kpc = [(c.backend, ev[c.backend].kernels_per_call) for c in cells if ev[c.backend].kernels_per_call is not None]
    if kpc and any(k for _, k in kpc):
        reasons.append("Kernels per call: " + ", ".join(f"{b} {k:g}" for b, k in kpc) + ".")
    return reasons


def within_noise(a: CellResult, b: CellResult) -> bool:
    """Is ``b`` (slower) indistinguishable from ``a``? True when the medians differ by under 2 %, or the
    faster cell's p90 reaches past the slower one's median (their spreads overlap substantially)."""
    ta, tb = a.graph_timing or a.timing, b.graph_timing or b.timing
    if ta is None or tb is None:
        return False
    return (tb.median_us - ta.median_us) / ta.median_us < 0.02 or ta.p90_us >= tb.median_us


def runner_up(run: RunResult, tag: str, winner: CellResult | None) -> CellResult | None:
    """The fastest eligible cell of workload ``tag`` other than ``winner``, or None."""
    ranked = sorted((c for c in run.cells if c.workload.tag == tag and c.eligible and (winner is None or c.backend != winner.backend)),
                    key=lambda c: c.latency_us)
    return ranked[0] if ranked else None


def _label(w) -> str:  # noqa: ANN001
    extra = []
    if w.batch != 8:
        extra.append(f"B={w.batch}")
    if w.page_size:
        extra.append(f"page {w.page_size}")
    if w.is_ragged:
        extra.append(f"{w.kv_len_dist} lengths")
    if w.shared_prefix_len:
        extra.append(f"prefix {w.shared_prefix_len}")
    return f"{w.phase.value} kv {w.kv_len}" + (f" ({', '.join(extra)})" if extra else "")


def verdict(run: RunResult) -> Verdict:
    """Training winner vs every prefill and decode winner, with evidence-based reasons."""
    win = winners(run)
    by_tag = {c.workload.tag: c.workload for c in run.cells}
    train_tags = [t for t, w in by_tag.items() if w.phase is Phase.TRAIN]
    tw = win.get(train_tags[0]) if train_tags else None
    rows: list[VerdictRow] = []
    for tag, w in by_tag.items():
        if w.phase is Phase.TRAIN:
            continue
        cw = win.get(tag)
        label = _label(w)
        cells_here = [c for c in run.cells if c.workload.tag == tag]
        t_here = next((c for c in cells_here if tw is not None and c.backend == tw.backend), None)
        second = runner_up(run, tag, cw)
        noise = f" — within noise of {second.backend} ({_fmt_us(second.latency_us)})" if cw and second and within_noise(cw, second) else ""
        margin = f", {second.latency_us / cw.latency_us:.2f}× ahead of {second.backend}" if cw and second and not noise else ""
        stays: bool | None = None
        if cw is None:
            pending = all(c.status == "pending" for c in cells_here)
            headline = f"{label}: not run (the run was interrupted)" if pending else f"{label}: no cell passed, so there is no winner"
        elif tw is None:
            why = "this run has no training workload" if not train_tags else "no training cell passed"
            headline = f"{label}: {cw.backend} wins at {_fmt_us(cw.latency_us)}{margin}{noise} ({why} to compare with)"
        elif cw.backend == tw.backend:
            headline = f"{label}: the training winner {tw.backend} stays the winner ({_fmt_us(cw.latency_us)}{margin}){noise}"
            stays = True
        else:
            if t_here is not None and t_here.eligible:
                near = " (within noise)" if within_noise(cw, t_here) else ""
                cmp = f"{t_here.latency_us / cw.latency_us:.2f}× faster than {tw.backend} ({_fmt_us(t_here.latency_us)}){near}"
            else:
                status = t_here.status if t_here is not None else "absent"
                cmp = f"{tw.backend} did not produce an eligible cell here ({status}{': ' + t_here.reason if t_here is not None and t_here.reason else ''})"
            headline = f"{label}: the training winner {tw.backend} does not stay the winner — {cw.backend} wins at {_fmt_us(cw.latency_us)}, {cmp}"
            stays = False
        other = t_here if (cw is not None and t_here is not None and t_here.backend != cw.backend) else second
        reasons = _explain(cw, other, tw, run)
        close = bool(cw and other and other.eligible and within_noise(cw, other))
        rows.append(VerdictRow(tag, w.phase.value, w.kv_len, label, tw.backend if tw else None, cw.backend if cw else None,
                               stays, headline, tuple(reasons), close))
    decode = [r for r in rows if r.phase == Phase.DECODE.value]
    decided = [r for r in decode if r.stays is not None]
    if not train_tags:
        won_rows = [r for r in decode if r.winner]
        won = "; ".join(f"{r.label} → {r.winner}" for r in won_rows[:12]) + (f"; and {len(won_rows) - 12} more" if len(won_rows) > 12 else "")
        summary = "This run has no training workload" + (f"; decode winners: {won}." if won else ".")
    elif tw is None:
        summary = "No training cell passed, so the question has no answer in this run."
    elif not decided:
        summary = f"{tw.backend} wins training; no decode workload has a winner in this run."
    else:
        kept = [r for r in decided if r.stays]
        lost = [r for r in decided if not r.stays]
        if not lost:
            summary = f"{tw.backend} wins training and stays the decode winner at every KV length measured ({', '.join(str(r.kv_len) for r in kept)})."
        elif not kept:
            summary = f"{tw.backend} wins training but not decode: " + "; ".join(f"kv {r.kv_len} → {r.winner}" for r in lost) + "."
        else:
            summary = (f"{tw.backend} wins training; it stays the decode winner at kv {', '.join(str(r.kv_len) for r in kept)}, "
                       f"but not at " + ", ".join(f"kv {r.kv_len} ({r.winner} wins)" for r in lost) + ": the verdict depends on context length.")
    close = [r for r in decided if r.close_call]
    if close and tw is not None:
        summary += " Within noise at " + ", ".join(f"kv {r.kv_len}" for r in close) + ": there the ranking is a tie."
    return Verdict(tw.backend if tw else None, tw.workload.tag if tw else None, summary, tuple(rows))


# ---- counters and ledgers ------------------------------------------------------------------------

#: DRAM traffic above this multiple of the requested bytes is flagged as redundant reads.
REDUNDANT_DRAM_RATIO = 1.2
#: L2→SM traffic above this multiple of the requested bytes means rereads served from L2.
L2_REREAD_RATIO = 1.5


def counter_summary(kernels: pd.DataFrame) -> CounterSummary | None:
    """Sum one cell's ncu kernel rows (:attr:`profattn.trace.counters.NcuReport.kernels` columns) into a
    :class:`CounterSummary` by :func:`profattn.trace.counters.sum_counters`: a sum that some kernel
    lacks is None, and ``kernels_lacking`` counts those kernels per counter. None without rows."""
    if not len(kernels):
        return None
    sums = sum_counters(kernels).iloc[0]

    def total(col: str) -> float | None:
        value = float(sums[col])
        return None if math.isnan(value) else value

    lacking = {c: int(sums[f"missing_{c}"]) for c in SUMMED_COUNTERS if c != "dram_bytes" and sums[f"missing_{c}"] > 0}
    ks = tuple(
        CounterKernel(
            name=str(r["name"]), grid=r["grid"], block=r["block"],
            registers_per_thread=_opt_int(r.get("registers_per_thread")),
            shared_mem_dynamic_bytes=_opt_float(r.get("shared_mem_dynamic_bytes")),
            shared_mem_static_bytes=_opt_float(r.get("shared_mem_static_bytes")),
            waves_per_sm=_opt_float(r.get("waves_per_sm")),
            dram_read_bytes=_opt_float(r.get("dram_read_bytes")),
            dram_write_bytes=_opt_float(r.get("dram_write_bytes")),
            l2_to_sm_read_bytes=_opt_float(r.get("l2_to_sm_read_bytes")),
            l1_global_load_bytes=_opt_float(r.get("l1_global_load_bytes")),
            gpu_time_us=_opt_float(r.get("gpu_time_us")),
        )
        for _, r in kernels.iterrows()
    )
    return CounterSummary(
        dram_read_bytes=total("dram_read_bytes"), dram_write_bytes=total("dram_write_bytes"),
        l2_to_sm_read_bytes=total("l2_to_sm_read_bytes"), l1_global_load_bytes=total("l1_global_load_bytes"),
        gpu_time_us=total("gpu_time_us"), kernels=ks, kernels_lacking=lacking,
    )



def attach_counters(run: RunResult, kernels: pd.DataFrame, info: CountersInfo) -> RunResult:
    """``run`` with each cell's :class:`CounterSummary` (kernels whose NVTX ``range`` is the cell id)."""
    out = replace(run, counters_info=info)
    for cell in run.cells:
        rows = kernels[kernels["range"] == cell.cell_id] if len(kernels) else kernels
        summary = counter_summary(rows)
        if summary is not None:
            out = out.with_cell(replace(cell, counters=summary))
    return out


@dataclass(frozen=True)
class ByteLedger:
    """Cache traffic of one call: requested (the workload's minimum) against measured.

    ``dram_ratio`` = DRAM bytes (read + write) / requested; ``l2_ratio`` = L2→SM read bytes / requested.
    ``redundant``: DRAM above :data:`REDUNDANT_DRAM_RATIO` × requested; ``l2_rereads``: L2→SM above
    :data:`L2_REREAD_RATIO` × requested while DRAM is not (rereads, e.g. per query head, served by L2).
    Measured fields are None when no counters were read — never estimated.
    """

    requested_bytes: int
    kv_bytes: int
    dram_bytes: float | None
    dram_read_bytes: float | None
    l2_to_sm_bytes: float | None
    dram_ratio: float | None
    l2_ratio: float | None
    redundant: bool | None
    l2_rereads: bool | None
    note: str


def byte_ledger(cell: CellResult) -> ByteLedger:
    """The :class:`ByteLedger` of ``cell`` (requested only when it has no counters)."""
    w = cell.workload
    req = w.requested_bytes
    c = cell.counters
    if c is None:
        return ByteLedger(req, w.kv_bytes, None, None, None, None, None, None, None, "no counters measured")
    dram_ratio = c.dram_bytes / req
    l2_ratio = c.l2_to_sm_read_bytes / req
    redundant = dram_ratio > REDUNDANT_DRAM_RATIO
    l2_rereads = (not redundant) and l2_ratio > L2_REREAD_RATIO
    if redundant:
        note = f"DRAM traffic {dram_ratio:.2f}× the requested bytes: redundant reads (or materialised copies)"
    elif l2_rereads:
        note = f"DRAM ≈ requested ({dram_ratio:.2f}×) but L2→SM traffic {l2_ratio:.2f}×: rereads served from L2"
    else:
        note = f"DRAM {dram_ratio:.2f}× requested: each byte moved about once"
    return ByteLedger(req, w.kv_bytes, c.dram_bytes, c.dram_read_bytes, c.l2_to_sm_read_bytes, dram_ratio, l2_ratio,
                      redundant, l2_rereads, note)


@dataclass(frozen=True)
class FlopLedger:
    """Arithmetic of one call: FLOPs from query heads (GQA does not shrink them), achieved rate."""

    flops: int
    achieved_tflops: float | None
    fraction_of_ceiling: float | None


def flop_ledger(cell: CellResult, run: RunResult) -> FlopLedger:
    """The :class:`FlopLedger` of ``cell`` against the run's measured GEMM ceiling."""
    t = cell.achieved_tflops
    ceil = run.ceilings.matmul_tflops if run.ceilings else None
    return FlopLedger(cell.workload.flops, t, t / ceil if t is not None and ceil else None)


def kernel_stem(name: str) -> str:
    """A kernel's unqualified function name, without template arguments, parameters or ``void``.

    Kineto and ncu demangle the same kernel differently (``at::native::(anonymous namespace)::f<false>``
    against ``at::<unnamed>::f<0>``), so launch shapes are matched on this stem plus the shape itself.
    """
    n = name.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon").strip()
    n = n.removeprefix("void ").strip()
    head = re.split(r"[<(]", n, maxsplit=1)[0].strip()
    return head.rsplit("::", 1)[-1]
