"""The verdict in words: typed :class:`profattn.analysis.verdict.Verdict` records → sentences.

One renderer for the HTML report, the Markdown summary, ``profattn profile``'s last line and
``profattn compare``. Latencies print with :func:`fmt_us`, as in the result matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

from profattn.analysis.ledgers import ByteLedger
from profattn.analysis.verdict import CellEvidence, Standing, TrainingOutcome, Verdict, WorkloadVerdict
from profattn.report.format import fmt_us
from profattn.workload import Phase, Workload


def workload_label(w: Workload) -> str:
    """A workload's short display label: ``"decode kv 8192 (B=4, page 16)"``, ``"train 2048/2048"``."""
    if w.phase is Phase.TRAIN:
        return f"train {w.q_len}/{w.kv_len}"
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


def ledger_note(bl: ByteLedger) -> str:
    """One sentence on a :class:`ByteLedger`: redundant reads, L2 rereads, or each byte moved about once."""
    if not bl.measured:
        return "no counters measured"
    if bl.redundant:
        return f"DRAM traffic {bl.dram_ratio:.2f}× the requested bytes: redundant reads (or materialised copies)"
    if bl.l2_rereads:
        return f"DRAM ≈ requested ({bl.dram_ratio:.2f}×) but L2→SM traffic {bl.l2_ratio:.2f}×: rereads served from L2"
    return f"DRAM {bl.dram_ratio:.2f}× requested: each byte moved about once"


def launch_phrase(e: CellEvidence) -> str:
    """``"sdpa-flash's main kernel launches 224 CTAs (1.70 CTAs per SM on 132 SMs, ...)"``."""
    if e.ctas is None:
        return f"{e.backend}: launch shape not recorded"
    fill = f"{e.ctas_per_sm:.2f} CTAs per SM on {e.num_sms} SMs" if e.ctas_per_sm is not None else "SM count unknown"
    rows = f", {e.rows_per_cta:,.2f} query rows per CTA" if e.rows_per_cta is not None else ""
    persistent = ": a persistent grid, one CTA per SM looping over tiles" if e.persistent_grid else ""
    return f"{e.backend}'s main kernel launches {e.ctas:,} CTAs ({fill}{rows}{persistent})"


def reasons(row: WorkloadVerdict, v: Verdict) -> tuple[str, ...]:
    """Why the winner of ``row`` is or is not the training winner, one sentence per piece of evidence."""
    out: list[str] = []
    cells = row.explained
    if not cells:
        return ()
    w = row.workload
    rows = cells[0].query_rows
    te = v.training_evidence
    if te is not None:
        trows = te.query_rows
        out.append(
            f"Query parallelism: this call has B·Hq·Lq = {rows:,} query rows against {trows:,} in training "
            f"({trows / rows:,.0f}× fewer)." if trows > rows else
            f"Query parallelism: this call has {rows:,} query rows, as many as training ({trows:,})."
        )
        if te.ctas is not None:
            out.append(f"In training, {launch_phrase(te)}.")
    for e in cells:
        if e.ctas is None:
            continue
        phrase = launch_phrase(e)
        if e.underfilled:
            phrase += " — fewer CTAs than SMs, so part of the GPU idles"
        out.append(f"Here, {phrase}.")
    measured = [e for e in cells if e.ledger is not None]
    if measured:
        out.append("Measured traffic (Nsight Compute, cold caches): " + "; ".join(
            f"{e.backend} moved {e.ledger.dram_bytes / 1e6:,.1f} MB from DRAM for {e.ledger.requested_bytes / 1e6:,.1f} MB requested "  # type: ignore[union-attr,operator]
            f"({e.ledger.dram_ratio:.2f}×{', redundant reads' if e.ledger.redundant else ''}), L2→SM {e.ledger.l2_ratio:.2f}×"  # type: ignore[union-attr]
            for e in measured) + ".")
    if w.phase is Phase.DECODE:
        kv_mb = w.kv_bytes / 1e6
        parts = []
        for e in cells:
            if e.kv_gbps is None:
                continue
            frac = f" ({e.copy_fraction:.0%} of the measured copy bandwidth)" if e.copy_fraction is not None else ""
            parts.append(f"{e.backend} streams them at {e.kv_gbps:,.0f} GB/s{frac}")
        floor = cells[0].floor_us
        floor_txt = f"; the byte floor at the copy ceiling is {fmt_us(floor)}" if floor is not None else ""
        out.append(
            f"KV access: K/V hold {kv_mb:,.1f} MB (Hkv = {w.num_kv_heads} heads, GQA group {w.group_size}); "
            + ("; ".join(parts) if parts else "no timing")
            + floor_txt + "."
        )
    for e in cells:
        if e.launch_bound:
            gpu, lat = e.gpu_time_us, e.latency_us
            where = ("launch latency and the gaps between its kernels, which graph replay does not remove"
                     if e.graph_replay else
                     "host-side dispatch and launch gaps (a CUDA graph would hide most of it)")
            out.append(
                f"{e.backend} is launch-bound here: its kernels run {fmt_us(gpu)} of the {fmt_us(lat)} median latency; "
                f"the other {fmt_us(lat - gpu)} is {where}."  # type: ignore[operator]
            )
    kpc = [(e.backend, e.kernels_per_call) for e in cells if e.kernels_per_call is not None]
    if kpc and any(k for _, k in kpc):
        out.append("Kernels per call: " + ", ".join(f"{b} {k:g}" for b, k in kpc) + ".")
    return tuple(out)


def headline(row: WorkloadVerdict, v: Verdict) -> str:
    """The one-line answer for ``row``: who wins, at what latency, against the training winner."""
    label = workload_label(row.workload)
    cw, second, tw = row.winner, row.runner_up, v.training_winner
    noise = f" — within noise of {second.backend} ({fmt_us(second.latency_us)})" if cw and second and row.runner_up_within_noise else ""
    margin = f", {row.runner_up_ratio:.2f}× ahead of {second.backend}" if cw and second and not noise else ""
    if row.standing is Standing.NOT_RUN:
        return f"{label}: not run (the run was interrupted)"
    if row.standing is Standing.NO_WINNER:
        return f"{label}: no cell passed, so there is no winner"
    assert cw is not None
    if row.standing is Standing.UNCOMPARED:
        why = "this run has no training workload" if v.training is TrainingOutcome.NO_WORKLOAD else "no training cell passed"
        return f"{label}: {cw.backend} wins at {fmt_us(cw.latency_us)}{margin}{noise} ({why} to compare with)"
    if row.standing is Standing.STAYS:
        return f"{label}: the training winner {tw} stays the winner ({fmt_us(cw.latency_us)}{margin}){noise}"
    t = row.training_here
    if t is not None and t.eligible:
        near = " (within noise)" if row.training_here_within_noise else ""
        cmp = f"{row.training_here_ratio:.2f}× faster than {tw} ({fmt_us(t.latency_us)}){near}"
    else:
        status = t.status.value if t is not None else "absent"
        cmp = f"{tw} did not produce an eligible cell here ({status}{': ' + t.reason if t is not None and t.reason else ''})"
    return f"{label}: the training winner {tw} does not stay the winner — {cw.backend} wins at {fmt_us(cw.latency_us)}, {cmp}"


def summary(v: Verdict) -> str:
    """The run's verdict in one or two sentences (the report's bold line, ``profattn profile``'s last line)."""
    decode = v.decode_rows
    decided = [r for r in decode if r.stays is not None]
    tw = v.training_winner
    if v.training is TrainingOutcome.NO_WORKLOAD:
        won_rows = [r for r in decode if r.winner]
        won = "; ".join(f"{workload_label(r.workload)} → {r.winner_backend}" for r in won_rows[:12]) + (
            f"; and {len(won_rows) - 12} more" if len(won_rows) > 12 else "")
        text = "This run has no training workload" + (f"; decode winners: {won}." if won else ".")
    elif v.training is TrainingOutcome.NO_ELIGIBLE_CELL:
        text = "No training cell passed, so the question has no answer in this run."
    elif not decided:
        text = f"{tw} wins training; no decode workload has a winner in this run."
    else:
        kept = [r for r in decided if r.stays]
        lost = [r for r in decided if not r.stays]
        if not lost:
            text = f"{tw} wins training and stays the decode winner at every KV length measured ({', '.join(str(r.kv_len) for r in kept)})."
        elif not kept:
            text = f"{tw} wins training but not decode: " + "; ".join(f"kv {r.kv_len} → {r.winner_backend}" for r in lost) + "."
        else:
            text = (f"{tw} wins training; it stays the decode winner at kv {', '.join(str(r.kv_len) for r in kept)}, "
                    f"but not at " + ", ".join(f"kv {r.kv_len} ({r.winner_backend} wins)" for r in lost) + ": the verdict depends on context length.")
    close = [r for r in decided if r.close_call]
    if close and tw is not None:
        text += " Within noise at " + ", ".join(f"kv {r.kv_len}" for r in close) + ": there the ranking is a tie."
    return text


@dataclass(frozen=True)
class VerdictRowText:
    """One workload's verdict as display text (``stays`` kept for the page's colouring)."""

    workload_tag: str
    label: str
    winner: str | None
    stays: bool | None
    headline: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class VerdictText:
    """A :class:`Verdict` rendered: what the templates and the Markdown summary print."""

    training_winner: str | None
    training_tag: str | None
    summary: str
    rows: tuple[VerdictRowText, ...]


def render_verdict(v: Verdict) -> VerdictText:
    """All the sentences of ``v``: the summary, and per workload the headline and the reasons."""
    return VerdictText(
        v.training_winner, v.training_tag, summary(v),
        tuple(VerdictRowText(r.workload_tag, workload_label(r.workload), r.winner_backend, r.stays, headline(r, v), reasons(r, v))
              for r in v.rows),
    )
