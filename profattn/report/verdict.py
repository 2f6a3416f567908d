"""The verdict in words: typed :class:`profattn.analysis.run.verdict.Verdict` records → sentences.

One renderer for the HTML report, the Markdown summary, ``profattn profile``'s last line and
``profattn compare``. Latencies print with :func:`fmt_us`, as in the result matrix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace

from profattn.analysis.calls.comm import CpSummary
from profattn.analysis.common.margins import NOISE_FRACTION, Margin, TieReason
from profattn.analysis.run.ledgers import ByteLedger
from profattn.analysis.run.verdict import (
    CellEvidence, LayoutRanking, LayoutSplit, ServingCall, ServingRow, ServingVerdict, Standing, TrainingOutcome, Verdict, WorkloadVerdict,
)
from profattn.interfaces import Layout
from profattn.report.format import fmt_sig, fmt_us
from profattn.report.mechanisms import layout_name, mechanism_text
from profattn.workload import KVLayout, Phase, Workload


def workload_label(w: Workload) -> str:
    """A workload's short display label: ``"decode kv 8192 (B=4, page 16)"``, ``"train 2048/2048"``; a prefill
    chunk whose queries are fewer than its keys ``"prefill q 2048 kv 8192 (page 16)"``; a variable-length call
    by its sequences: ``"mixed 2×q2048 + 32×q1, kv ≤ 8192 (page 16)"``, ``"decode 32×q1, kv ≤ 8192 (page 16)"``; a
    sliding window adds ``"window 4096"`` to the parentheses; packed documents (:attr:`Workload.is_packed`) read
    ``"train 8 packed docs, 16,384 tokens (longest 4096)"``; a context-parallel call adds its ranks and scheme:
    ``"train 32/32 (cp 2 ring)"``, ``"prefill kv 4096 (B=1, cp 4 ulysses)"``."""
    win = f", window {w.window}" if w.window is not None else ""
    cp = f"cp {w.cp_ranks} {w.cp_scheme}" if w.is_context_parallel else None
    if w.is_packed:
        return f"{w.phase.value} {w.batch} packed docs, {w.q_tokens:,} tokens (longest {w.q_len}{win})"
    if w.phase is Phase.TRAIN:
        return f"train {w.q_len}/{w.kv_len}" + (" (variable lengths)" if w.is_varlen else "") + (
            f" (window {w.window})" if w.window is not None else "") + (f" ({cp})" if cp else "")
    extra = []
    if w.batch != 8 and not w.is_varlen:
        extra.append(f"B={w.batch}")
    if w.page_size:
        extra.append(f"page {w.page_size}")
    if w.kv_len_dist.drawn:
        extra.append(f"{w.kv_len_dist} lengths")
    if w.shared_prefix_len:
        extra.append(f"prefix {w.shared_prefix_len}")
    if w.window is not None:
        extra.append(f"window {w.window}")
    if cp:
        extra.append(cp)
    tail = f" ({', '.join(extra)})" if extra else ""
    if w.is_varlen:
        kv = f"kv {w.kv_len}" if len(set(w.kv_lens)) == 1 else f"kv ≤ {w.kv_len}"
        return f"{w.phase.value} {seqs_label(w)}, {kv}{tail}"
    if w.phase is Phase.PREFILL and w.q_len != w.kv_len:
        return f"prefill q {w.q_len} kv {w.kv_len}{tail}"
    return f"{w.phase.value} kv {w.kv_len}{tail}"


#: Fields that tell apart workloads sharing a :func:`workload_label`, and how each is spelled when it does.
_DISTINGUISHING = (
    (lambda w: (w.num_q_heads, w.num_kv_heads), lambda w: f"Hq {w.num_q_heads}/Hkv {w.num_kv_heads}"),
    (lambda w: w.head_dim, lambda w: f"d {w.head_dim}"),
    (lambda w: w.dtype, lambda w: w.dtype),
    (lambda w: getattr(w, "kv_dtype", None), lambda w: f"KV {getattr(w, 'kv_dtype', None) or w.dtype}"),
    (lambda w: w.mask, lambda w: f"mask {w.mask.value}"),
)


def distinct_labels(workloads: "Iterable[Workload]") -> dict[str, str]:
    """Workload tag → a label unique among ``workloads``: :func:`workload_label`, and where several share it,
    the fields that tell them apart appended (``"decode kv 8192 (page 16), Hq 32/Hkv 8"``); the full tag where
    even those do not."""
    ws = list({w.tag: w for w in workloads}.values())
    labels = {w.tag: workload_label(w) for w in ws}
    same: dict[str, list[Workload]] = {}
    for w in ws:
        same.setdefault(labels[w.tag], []).append(w)
    out = dict(labels)
    for label, group in same.items():
        if len(group) < 2:
            continue
        parts = [spell for key, spell in _DISTINGUISHING if len({key(w) for w in group}) > 1]
        for w in group:
            out[w.tag] = label + "".join(f", {p(w)}" for p in parts)
        if len({out[w.tag] for w in group}) < len(group):
            for w in group:
                out[w.tag] = w.tag
    return out


def seqs_label(w: Workload) -> str:
    """A call's sequences by query length, longest first: ``"2×q2048 + 32×q1"`` (``"8×q512"`` for a uniform
    batch)."""
    groups: dict[int, int] = {}
    for q in w.q_lens:
        groups[q] = groups.get(q, 0) + 1
    return " + ".join(f"{n}×q{q}" for q, n in sorted(groups.items(), reverse=True))


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
            frac = (f" ({e.bandwidth_fraction:.0%} of the measured {e.bandwidth_kind} bandwidth)"
                    if e.bandwidth_fraction is not None else "")
            parts.append(f"{e.backend} streams them at {fmt_sig(e.kv_gbps)} GB/s{frac}")
        floor = cells[0].floor_us
        floor_txt = f"; the byte floor at the {cells[0].bandwidth_kind} ceiling is {fmt_us(floor)}" if floor is not None else ""
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


#: Winners the summary of a run without training names before "and N more".
SUMMARY_WINNERS = 8


def margin_text(m: Margin) -> str:
    """How far the slower cell of ``m`` trails: ``"1.47×"`` from 1.10× up, ``"4.2 %"`` below (``"0.0 %"`` for
    an exact tie)."""
    return f"{m.ratio:.2f}×" if m.ratio >= 1.10 else f"{m.percent:.1f} %"


def noise_text(m: Margin) -> str:
    """``"within noise"``, naming the part of the rule when it is not the 2 % threshold (a 2.9 % gap whose
    spreads overlap reads ``"within noise: the spreads overlap"``)."""
    why = {TieReason.SPREADS_OVERLAP: ": the spreads overlap",
           TieReason.INTERVAL_REACHES_ONE: f": the repeats' 95 % interval reaches {1 + NOISE_FRACTION:g}×"}.get(m.why, "")  # type: ignore[arg-type]
    return "within noise" + why


def _names(names: tuple[str, ...] | list[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _tie_phrase(row: WorkloadVerdict) -> str:
    """``"a tie with b (12.4 µs, 0.3 % slower, within noise)"`` for the runner-up; more names when several tie."""
    m = row.margin
    assert m is not None and m.tie
    more = [b for b in row.tied if b != m.behind]
    extra = f"; {_names(more)} also within noise" if more else ""
    return f"a tie with {m.behind} ({fmt_us(m.behind_us)}, {margin_text(m)} slower, {noise_text(m)}{extra})"


def _vs_runner_up(row: WorkloadVerdict) -> str:
    m = row.margin
    if m is None:
        return ", the only eligible cell"
    if m.tie:
        return f" — {_tie_phrase(row)}"
    return f", {margin_text(m)} ahead of {m.behind} ({fmt_us(m.behind_us)})"


def headline(row: WorkloadVerdict, v: Verdict, label: str | None = None) -> str:
    """The one-line answer for ``row``: who is fastest, by how much over the runner-up (or a tie, with both
    names and the margin), and what that means for the training winner. A tie never reads as a win.
    ``label``: the workload's name in the run (default :func:`workload_label`; :func:`render_verdict` passes
    :func:`distinct_labels`)."""
    label = label or workload_label(row.workload)
    cw, tw = row.winner, v.training_winner
    if row.standing is Standing.NOT_RUN:
        return f"{label}: not run (the run was interrupted)"
    if row.standing is Standing.NO_WINNER:
        return f"{label}: no cell passed, so there is no winner"
    assert cw is not None
    if row.layouts is not None:
        return f"{label}: " + layout_headline(row.layouts, v, row)
    tied = row.margin is not None and row.margin.tie
    verb = "is fastest" if tied else "wins"
    if row.standing is Standing.UNCOMPARED:  # the summary says once that there is no training winner
        return f"{label}: {cw.backend} {verb} at {fmt_us(cw.latency_us)}{_vs_runner_up(row)}"
    if row.standing is Standing.STAYS:
        if tied:
            return f"{label}: the training winner {tw} is fastest here too ({fmt_us(cw.latency_us)}) — {_tie_phrase(row)}"
        return f"{label}: the training winner {tw} stays the winner ({fmt_us(cw.latency_us)}{_vs_runner_up(row)})"
    tm = row.training_margin
    if row.standing is Standing.TIES:
        assert tm is not None
        return (f"{label}: {cw.backend} is fastest ({fmt_us(cw.latency_us)}) but only {margin_text(tm)} ahead of the "
                f"training winner {tw} ({fmt_us(tm.behind_us)}), {noise_text(tm)}: a tie — the training winner is not beaten here")
    t = row.training_here
    if tm is not None:
        cmp = f"{margin_text(tm)} faster than {tw} ({fmt_us(tm.behind_us)})"
    else:
        status = t.status.value if t is not None else "absent"
        cmp = f"{tw} did not produce an eligible cell here ({status}{': ' + t.reason if t is not None and t.reason else ''})"
    others = [b for b in row.tied if b != tw]
    tie_note = f"; {cw.backend} ties {_names(others)} (within noise)" if others else ""
    return f"{label}: the training winner {tw} does not stay the winner — {cw.backend} wins at {fmt_us(cw.latency_us)}, {cmp}{tie_note}"


def _ranking_text(r: LayoutRanking) -> str:
    """``"triton-paged-decode wins (40.7 µs, 2.27× ahead of flex-paged-decode)"`` or a tie, for one layout."""
    m = r.margin
    if m is None:
        return f"{r.winner.backend} ({fmt_us(r.winner.latency_us)}, the only eligible kernel)"
    if m.tie:
        more = [b for b in r.tied if b != m.behind]
        extra = f"; {_names(more)} also within noise" if more else ""
        return f"{r.winner.backend} ({fmt_us(r.winner.latency_us)}) ties {m.behind} ({margin_text(m)}, {noise_text(m)}{extra})"
    return f"{r.winner.backend} ({fmt_us(r.winner.latency_us)}, {margin_text(m)} ahead of {m.behind})"


def gather_text(s: LayoutSplit) -> str:
    """What a contiguous-cache kernel costs on the paged cache: ``"gathering the pages into a contiguous copy takes
    70.3 µs per call (torch-paged-reference's gather kernels), so sdpa-cudnn over the paged cache ≈ 111.1 µs, 2.73×
    the paged winner"``; ``""`` where the gather was not measured."""
    if s.gather_us is None or s.dense_on_paged_us is None:
        return ""
    paged = s.paged.winner.latency_us
    ratio = f", {s.dense_on_paged_us / paged:.2f}× the paged winner" if paged else ""
    return (f"gathering the pages into a contiguous copy takes {fmt_us(s.gather_us)} per call ({s.gather_backend}'s "
            f"gather kernels), so {s.contiguous.winner.backend} over the paged cache ≈ {fmt_us(s.dense_on_paged_us)}{ratio}")


def layout_headline(s: LayoutSplit, v: Verdict, row: WorkloadVerdict) -> str:
    """A paged decode row answered per layout: the paged kernels' winner, the contiguous-copy kernels' winner (and the
    training winner's standing there), and what the gather costs."""
    tw = v.training_winner
    standing = ""
    if tw is not None and row.standing is Standing.STAYS:
        standing = f", the training winner {tw} stays the winner here"
    elif tw is not None and row.standing is Standing.TIES and row.training_margin is not None:
        standing = f"; the training winner {tw} ties it ({margin_text(row.training_margin)}, {noise_text(row.training_margin)})"
    elif tw is not None and row.standing is Standing.CHANGES:
        tm = row.training_margin
        standing = (f"; the training winner {tw} is {margin_text(tm)} slower ({fmt_us(tm.behind_us)})" if tm is not None
                    else f"; the training winner {tw} has no eligible cell here")
    gather = gather_text(s)
    return (f"over the paged cache {_ranking_text(s.paged)}; over a contiguous copy {_ranking_text(s.contiguous)}{standing}"
            + (f"; {gather}" if gather else ""))


def _differ_in_kv_only(rows: "list[WorkloadVerdict]") -> bool:
    """Whether ``rows``' workloads share every contract field but ``kv_len``."""
    def rest(w: Workload) -> tuple:
        return tuple(getattr(w, f.name) for f in fields(Workload) if f.name != "kv_len")

    return len({rest(r.workload) for r in rows}) <= 1


def _where(rows: "list[WorkloadVerdict]") -> "Callable[[WorkloadVerdict], str]":
    """How a phase sentence names each of ``rows``: ``"kv 8192"`` when they differ in their KV length only, else their
    distinct label without the phase word (``"kv 512 (page 16), KV float8_e4m3fn"``, ``"kv 32768 (page 16, window
    4096)"``): a window or an FP8 cache is not a context length."""
    if _differ_in_kv_only(rows):
        return lambda r: f"kv {r.kv_len}"
    labels = distinct_labels(r.workload for r in rows)
    return lambda r: labels[r.workload.tag].removeprefix(f"{r.workload.phase.value} ")


def _phase_sentence(phase: Phase, rows: tuple[WorkloadVerdict, ...], tw: str) -> str | None:
    """One sentence on whether ``tw`` stays the winner of ``phase``'s workloads (None when none is decided).
    Workloads where ``tw`` has no eligible cell (unsupported there, failed) are said apart — it is not beaten there —
    and "depends on context length" needs held and beaten workloads that differ in their KV length only. Where every
    decided workload is answered per layout, the sentence is about the contiguous-copy ranking the (dense) training
    winner competes in, and says so."""
    decided = [r for r in rows if r.stays is not None]
    if not decided:
        return None
    if all(r.layouts is not None for r in decided):  # the contiguous-copy ranking: say so where the phase is named
        plain = _phase_sentence(phase, tuple(replace(r, layouts=None) for r in rows), tw)
        q = " over a contiguous copy of the cache"
        return plain.replace(f"the {phase.value} winner", f"the {phase.value} winner{q}").replace(  # type: ignore[union-attr]
            f"At {phase.value} it", f"At {phase.value}{q} it").replace(f"eligible {phase.value} cell", f"eligible {phase.value} cell{q}")
    name = phase.value
    where = _where(decided)
    kept = [r for r in decided if r.standing is Standing.STAYS]
    tied = [r for r in decided if r.standing is Standing.TIES]
    changed = [r for r in decided if r.standing is Standing.CHANGES]
    lost = [r for r in changed if r.training_margin is not None]
    absent = [r for r in changed if r.training_margin is None]

    def kept_text(rs: list[WorkloadVerdict]) -> str:
        return ", ".join(where(r) + (f" ({_names(r.tied)} within noise)" if r.tied else "") for r in rs)

    def tied_text(rs: list[WorkloadVerdict]) -> str:
        return ", ".join(f"{where(r)} ({r.winner_backend} {margin_text(r.training_margin)} faster)" for r in rs)  # type: ignore[arg-type]

    def lost_text(rs: list[WorkloadVerdict]) -> str:
        return ", ".join(f"{where(r)} ({r.winner_backend}, {margin_text(r.training_margin)} faster)" for r in rs)  # type: ignore[arg-type]

    cannot = (f" It has no eligible cell at {', '.join(f'{where(r)} ({r.winner_backend} wins there)' for r in absent)}."
              if absent else "")
    if not lost and not tied:
        if not kept:
            return f"It has no eligible {name} cell: {', '.join(f'{where(r)} → {r.winner_backend}' for r in absent)}."
        if not absent and _differ_in_kv_only(kept):
            return f"It stays the {name} winner at every KV length measured ({', '.join(str(r.kv_len) for r in kept)})."
        return f"It stays the {name} winner wherever it ran ({kept_text(kept)}).{cannot}"
    if not lost:
        won = f"fastest at {kept_text(kept)}; " if kept else ""
        return (f"At {name} it is never beaten beyond noise: {won}at {tied_text(tied)} another backend is faster "
                f"only within noise — {'a tie' if len(tied) == 1 else 'ties'}.{cannot}")
    if not kept and not tied:
        return f"It does not stay the {name} winner: beaten beyond noise at {lost_text(lost)}.{cannot}"
    held_rows = kept + tied
    held = ", ".join(x for x in (kept_text(kept), tied_text(tied) + " within noise" if tied else "") if x)
    why = ("the verdict depends on context length" if _differ_in_kv_only(held_rows + lost)
           else "the verdict depends on the workload")
    return f"At {name} it holds at {held}, but is beaten beyond noise at {lost_text(lost)}: {why}.{cannot}"


def _winner_text(row: WorkloadVerdict, label: str) -> str:
    if row.layouts is not None:
        s = row.layouts
        return f"{label} → paged: {s.paged.winner.backend}, contiguous copy: {s.contiguous.winner.backend}"
    m = row.margin
    if m is not None and m.tie:
        return f"{label} → {row.winner_backend} ≈ {_names(row.tied)} (a tie)"
    return f"{label} → {row.winner_backend}"


#: The code spans the verdict's sentences write themselves (what :func:`~profattn.report.format.md_bold` keeps as code).
COMMAND_SPANS = ("profattn profile --regime all", "--threads 1", "--repeat")


def summary(v: Verdict) -> str:
    """The run's verdict in a few sentences (the report's bold line, ``profattn profile``'s last line),
    derived from the typed standings: "depends on context length" only when some KV length is held and
    another is lost beyond noise; a tie is never called a win. Serving calls follow (:func:`serving_text`);
    a run without training but with serving calls leads with them instead of a list of per-workload winners."""
    serving = [serving_text(s) for s in v.serving]
    if v.cp and (cp := cp_text(v.cp)):
        serving.append(cp)
    if serving and v.training is TrainingOutcome.NO_WORKLOAD:  # a serving run: its own question first, not a list
        return " ".join(["This run has no training workload.", *serving])
    return " ".join([_training_summary(v), *serving])


def cp_text(summaries: "Sequence[CpSummary]") -> str:
    """One sentence on the context-parallel cells (a question of their own, kept out of the winners): per
    workload, scheme and rank count, the step against the same call on one process and the scaling efficiency
    (one-process time / (ranks × step)); only cells that passed (the section lists the others); ``""`` when none
    did. ``"Context parallelism (see its
    section): train 32/32 ring on 2 ranks (sdpa-flash) 80.0 µs per step vs 100.0 µs on one process, scaling
    efficiency 62 %."``"""
    labels = distinct_labels(s.workload.single_process for s in summaries if s.workload is not None)
    parts = []
    for s in summaries:
        where = labels.get(s.workload.single_process.tag, s.cell_id) if s.workload is not None else s.cell_id
        if s.step_us is None or s.status != "ok":
            continue
        text = f"{where} {s.scheme} on {s.ranks} ranks ({s.backend}) {fmt_us(s.step_us)} per step"
        if s.single_us is not None and s.efficiency is not None:
            text += f" vs {fmt_us(s.single_us)} on one process, scaling efficiency {100 * s.efficiency:.0f} %"
        else:
            text += " (no one-process call to compare)"
        parts.append(text)
    return "Context parallelism (see its section): " + "; ".join(parts) + "." if parts else ""


def _training_summary(v: Verdict) -> str:
    tw = v.training_winner
    if v.training is TrainingOutcome.NO_WORKLOAD:
        won_rows = [r for r in v.rows if r.winner]
        labels = distinct_labels(r.workload for r in v.rows)
        won = "; ".join(_winner_text(r, labels[r.workload.tag]) for r in won_rows[:SUMMARY_WINNERS]) + (
            f"; and {len(won_rows) - SUMMARY_WINNERS} more (one line each below)" if len(won_rows) > SUMMARY_WINNERS else "")
        layouts = layout_sentence(v.rows)
        phases = {r.phase for r in v.rows}
        regime = (f" Only {next(iter(phases)).value} was measured: `profattn profile --regime all` adds the other regimes, "
                  "training among them, whose winner the verdict asks about." if len(phases) == 1 else "")
        return "This run has no training workload" + (f"; winners: {won}." if won else "; no workload has a winner.") + (
            f" {layouts}" if layouts else "") + regime
    if v.training is TrainingOutcome.NO_ELIGIBLE_CELL:
        return "No training cell passed, so the question has no answer in this run."
    m = v.training_margin
    if m is None:
        text = f"{tw} wins training (the only eligible training cell)."
    elif m.tie and m.why is not TieReason.CLOSE_MEDIANS:  # the spread swamps the gap: nobody can be named
        text = (f"No training winner can be called: {_names((tw, *v.training_tied))} are {margin_text(m)} apart, but "  # type: ignore[arg-type]
                f"their timings are {noise_text(m)} (on a CPU: time with one thread, `--threads 1`, more `--repeat`, "
                f"a quieter machine); the comparisons below use {tw}, the faster median.")
    elif m.tie:
        text = (f"{_names((tw, *v.training_tied))} tie in training ({margin_text(m)} apart, within noise); "  # type: ignore[arg-type]
                f"the comparisons below use {tw}, the faster median.")
    else:
        text = f"{tw} wins training, {margin_text(m)} ahead of {m.behind}."
    sentences = [s for s in (_phase_sentence(p, v.phase_rows(p), tw) for p in (Phase.PREFILL, Phase.DECODE)) if s]  # type: ignore[arg-type]
    if not sentences:
        sentences = ["No other workload has a winner in this run."]
    layouts = layout_sentence(v.rows, tw)
    return " ".join([text, *sentences, *([layouts] if layouts else [])])


def layout_sentence(rows: "Sequence[WorkloadVerdict]", tw: str | None = None) -> str:
    """One sentence on the workloads answered per layout (paged decode with paged and contiguous-copy kernels): who
    is fastest over the paged cache and over a contiguous copy at each, and what gathering the pages costs, e.g.
    ``"Over the paged cache a serving engine holds, triton-paged-decode is fastest at kv 512 (12.4 µs), 2048 and 8192;
    over a contiguous copy sdpa-cudnn at every one; a contiguous kernel on the paged cache first gathers it: 7.20 µs,
    18.5 µs and 70.3 µs per call measured (torch-paged-reference), so sdpa-cudnn there ≈ 19.6, 37.2 and 111.1 µs."``;
    ``""`` when no row is split. ``tw``: the training winner; when it is the contiguous-copy winner everywhere (the
    phase sentence said so), the contiguous clause is left out."""
    split = [r for r in rows if r.layouts is not None]
    if not split:
        return ""
    where = _where(split)

    many = len(split) > SUMMARY_WINNERS  # a sweep: counts, not a list

    def by_winner(pick: "Callable[[LayoutSplit], LayoutRanking]") -> str:
        groups: dict[str, list[str]] = {}
        for r in split:
            rk = pick(r.layouts)  # type: ignore[arg-type]
            tie = f" ≈ {_names(rk.tied)}" if rk.tied else ""
            groups.setdefault(rk.winner.backend, []).append(f"{where(r)}: {fmt_us(rk.winner.latency_us)}{tie}")
        if len(groups) == 1 and len(split) > 1:
            ((b, ws),) = groups.items()
            return f"{b} at every one ({', '.join(ws)})" if not many else f"{b} at all {len(ws)}"
        if many:
            return ", ".join(f"{b} at {len(ws)} of {len(split)}" for b, ws in groups.items())
        return "; ".join(f"{b} at {_names(ws)}" for b, ws in groups.items())

    text = f"Over the paged cache a serving engine holds, the fastest paged kernel is {by_winner(lambda s: s.paged)}"
    level = [r for r in split if r.layouts.between.tie]  # type: ignore[union-attr]
    if level:
        at = ("at every one" if len(level) == len(split) and len(split) > 1 else
              f"at {len(level)} of them" if many else f"at {_names([where(r) for r in level])}")
        text += f", within noise of the contiguous-copy winner {at}"
    if not (tw is not None and all(r.layouts.contiguous.winner.backend == tw for r in split)):  # type: ignore[union-attr]
        text += f"; over a contiguous copy (made outside the dense kernels' timing), {by_winner(lambda s: s.contiguous)}"
    gathered = [r for r in split if r.layouts.gather_us is not None]  # type: ignore[union-attr]
    if gathered:
        g = gathered[0].layouts
        gs = [r.layouts.gather_us for r in gathered]  # type: ignore[union-attr]
        ratios = [r.layouts.dense_on_paged_us / r.layouts.paged.winner.latency_us for r in gathered]  # type: ignore[union-attr, operator]
        if many:
            costs = f"{fmt_us(min(gs))} to {fmt_us(max(gs))}"  # type: ignore[type-var]
            totals = f"{min(ratios):.2f}× to {max(ratios):.2f}× the paged winner's time"
        else:
            costs = _names([fmt_us(x) for x in gs])
            totals = _names([f"{fmt_us(r.layouts.dense_on_paged_us)}" for r in gathered])  # type: ignore[union-attr]
        winners_ = {r.layouts.contiguous.winner.backend for r in gathered}  # type: ignore[union-attr]
        who = winners_.pop() if len(winners_) == 1 else "the contiguous winner"
        at = ("" if len(gathered) == len(split) and len(gathered) > 1 else
              f" at {len(gathered)} of them" if many else f" at {_names([where(r) for r in gathered])}")
        text += (f". A contiguous kernel on the paged cache first gathers it{at}: {costs} per call measured "
                 f"({g.gather_backend}'s gather kernels), so {who} there ≈ {totals}")  # type: ignore[union-attr]
    return text + "."


def _serving_where(rows: "list[ServingRow]", note: "Callable[[ServingRow], str]") -> str:
    """Where ``rows`` are, each with its ``note``: ``"per prompt at chunk 2048 (…) and 512 (…), and in the mixed
    batches 2×q2048 + 32×q1 (…) and 1×q512 + 64×q1 (…)"``."""
    chunked = [r for r in rows if r.call is ServingCall.CHUNKED]
    mixed = [r for r in rows if r.call is ServingCall.MIXED]
    parts = []
    if chunked:
        parts.append("per prompt at chunk " + _names([f"{r.chunk_size}{note(r)}" for r in chunked]))
    if mixed:
        parts.append(f"in the mixed batch{'es' if len(mixed) > 1 else ''} "
                     + _names([f"{seqs_label(r.workload)}{note(r)}" for r in mixed]))
    return (", and " if len(chunked) > 1 else " and ").join(parts)


def serving_text(s: ServingVerdict) -> str:
    """One or two sentences on a :class:`ServingVerdict`: who wins the unchunked prompt (by how much, or a tie; what
    it read, and what each new winner read, where profattn knows the backend),
    whether it stays the winner per prompt at each chunk size and in each mixed step (stays / ties within noise
    / who wins instead and how much faster, by :func:`margin_text`), and, when a chunk size changes the winner,
    what chunking costs the unchunked winner and the new one per prompt (their time over their unchunked time).
    Calls without a winner are left out."""
    prompt = f"the unchunked {s.prompt_len:,}-token prompt"
    batch = f"B={s.prompt.batch}, " if s.prompt.batch != 8 else ""  # as workload_label: the seed batch goes unsaid
    ref = s.reference_backend
    if s.reference is None:
        return (f"No backend has an eligible time for {prompt}{f' ({batch[:-2]})' if batch else ''}, so its chunks "
                "and the mixed steps are not compared.")
    m = s.reference_margin
    tie = m is not None and m.tie
    paged = s.prompt.kv_layout is KVLayout.PAGED

    def reads(layout: Layout | None) -> str:  # what a winner read, where profattn knows it
        return "" if layout is None else layout_name(layout, paged_workload=paged)

    read = f" on a {reads(s.reference_layout)}" if s.reference_layout is not None else ""
    if m is None:
        head = f"{ref} wins {prompt} ({batch}{fmt_us(s.reference.median_us)}{read}, the only eligible backend)"
    elif tie:
        head = (f"{_names((ref, *s.reference_tied))} tie on {prompt} ({batch}{margin_text(m)} apart, {noise_text(m)}; "  # type: ignore[arg-type]
                f"compared as {ref}, the faster median)")
    else:
        head = f"{ref} wins {prompt} ({batch}{fmt_us(s.reference.median_us)}{read}, {margin_text(m)} ahead of {m.behind})"
    kept = [r for r in s.rows if r.standing is Standing.STAYS]
    tied = [r for r in s.rows if r.standing is Standing.TIES]
    lost = [r for r in s.rows if r.standing is Standing.CHANGES]
    if not (kept or tied or lost):
        return f"{head}; no chunk size or mixed step has a winner to compare."

    def stay_note(r: ServingRow) -> str:
        return f" ({_names(r.tied)} within noise)" if r.tied else ""

    def tie_note(r: ServingRow) -> str:
        rm = r.reference_margin
        return f" ({r.winner_backend} {margin_text(rm)} faster, {noise_text(rm)})"  # type: ignore[arg-type]

    held = " and ".join(([f"stays the winner {_serving_where(kept, stay_note)}"] if kept else [])
                        + ([f"ties {_serving_where(tied, tie_note)}"] if tied else []))
    winners: dict[str, list[ServingRow]] = {}
    for r in lost:
        winners.setdefault(r.winner_backend, []).append(r)  # type: ignore[arg-type]

    def change_note(r: ServingRow) -> str:
        rm = r.reference_margin
        if rm is None:
            return f" ({ref}: no eligible time)"
        first = winners[r.winner_backend][0] is r  # type: ignore[index]
        return f" ({margin_text(rm)} faster than {ref})" if first else f" ({margin_text(rm)})"

    layouts = {r.winner_backend: r.winner_layout for r in lost}
    beaten = "; ".join(f"{w}{f' ({reads(layouts[w])})' if layouts.get(w) is not None else ''} wins {_serving_where(rs, change_note)}"
                       for w, rs in winners.items())
    if not lost:
        rest = f"is never beaten beyond noise: it {held}" if tied else held
        text = f"{head}; {ref} {rest}" if tie else f"{head} and {rest}"
    elif held:
        text = f"{head}; {ref if tie else 'it'} {held}, but {beaten}"
    else:
        text = f"{head}; {ref} does not stay the winner: {beaten}" if tie else f"{head} but does not stay the winner: {beaten}"
    return text + "." + _chunking_cost(s, lost)


def _chunking_cost(s: ServingVerdict, lost: "list[ServingRow]") -> str:
    """``" Chunked, a needs 2.00× (chunk 2048) and 1.85× (chunk 512) its unchunked time per prompt, b 1.02× and
    1.07×: <why, at the largest chunk size>."``, when a chunk size changes the winner ("" otherwise). The why is the
    reference backend's prompt chunked against the same prompt whole (:attr:`ServingRow.chunking`), from the run's
    traces and counters (:func:`profattn.report.mechanisms.mechanism_text`)."""
    rows = [r for r in s.call_rows(ServingCall.CHUNKED) if r.reference_vs_unchunked is not None]
    if not any(r.standing is Standing.CHANGES for r in rows):
        return ""
    text = (f" Chunked, {s.reference_backend} needs "
            + _names([f"{r.reference_vs_unchunked:.2f}× (chunk {r.chunk_size})" for r in rows]) + " its unchunked time per prompt")
    new: dict[str, list[ServingRow]] = {}
    for r in lost:
        if r.call is ServingCall.CHUNKED and r.winner_vs_unchunked is not None:
            new.setdefault(r.winner_backend, []).append(r)  # type: ignore[arg-type]
    for w, rs in new.items():
        same = [r.chunk_size for r in rs] == [r.chunk_size for r in rows]
        text += f", {w} " + _names([f"{r.winner_vs_unchunked:.2f}×" + ("" if same else f" (chunk {r.chunk_size})") for r in rs])
    why = next((r for r in rows if r.chunking is not None and r.reference_vs_unchunked is not None
                and r.reference_vs_unchunked >= 1 + NOISE_FRACTION), None)
    mech = mechanism_text(why.chunking, why.workload.phase, chunking=True) if why is not None else ""
    if mech:
        text += f". Why, at chunk {why.chunk_size} ({why.chunks} chunks): {mech}"  # type: ignore[union-attr]
    return text + "."


def serving_call_label(r: ServingRow) -> str:
    """``"chunk 2048 (4 chunks)"`` or ``"mixed 2×q2048 + 32×q1"``."""
    if r.call is ServingCall.CHUNKED:
        return f"chunk {r.chunk_size:,} ({r.chunks} chunks)"
    return f"mixed {seqs_label(r.workload)}"


def serving_rows(s: ServingVerdict) -> list[dict[str, str]]:
    """One display row per serving call of ``s`` (chunk sizes, then mixed steps): ``call``, ``winner`` (with what it
    read), ``time`` (per prompt), ``margin`` over the runner-up, ``vs`` the unchunked winner here (stays, ties, or how
    much faster the winner is), ``mechanism`` (why the unchunked winner trails here, or why the runner-up trails),
    ``chunking`` (chunked rows: the unchunked winner's time per prompt over its unchunked time, and why)."""
    ref = s.reference_backend
    paged = s.prompt.kv_layout is KVLayout.PAGED
    out = []
    for r in s.rows:
        if r.winner is None:
            out.append({"call": serving_call_label(r), "winner": "none", "time": "", "margin": "", "runner_up": "",
                        "runner_up_time": "",
                        "vs": "no eligible time", "mechanism": "", "chunking": "", "stays": ""})
            continue
        m = r.margin
        margin = _margin_cell(m)
        runner = m.behind if m is not None else ""
        if r.standing is Standing.STAYS:
            vs, why = "stays", mechanism_text(r.gap, r.workload.phase) if m is not None and not m.tie else ""
        elif r.standing is Standing.TIES:
            vs, why = f"ties {ref} ({margin_text(r.reference_margin)})", ""  # type: ignore[arg-type]
        else:
            rm = r.reference_margin
            vs = f"{margin_text(rm)} faster than {ref}" if rm is not None else f"{ref}: no eligible time"
            why = mechanism_text(r.reference_gap, r.workload.phase)
        chunking = ""
        if r.call is ServingCall.CHUNKED and r.reference_vs_unchunked is not None:
            chunking = f"{ref} {r.reference_vs_unchunked:.2f}× its unchunked time"
            mech = mechanism_text(r.chunking, r.workload.phase, chunking=True)
            if mech and r.reference_vs_unchunked >= 1 + NOISE_FRACTION:
                chunking += ": " + mech
        out.append({"call": serving_call_label(r), "runner_up_time": fmt_us(m.behind_us) if m is not None else "",
                    "winner": f"{r.winner.backend} ({layout_name(r.winner_layout, paged_workload=paged)})",
                    "time": fmt_us(r.winner.median_us), "margin": margin, "runner_up": runner, "vs": vs,
                    "mechanism": why, "chunking": chunking,
                    "stays": {True: "stays", False: "changes"}.get(r.stays, "")})  # type: ignore[arg-type]
    return out


@dataclass(frozen=True)
class VerdictRowText:
    """One row of the compact verdict table (``stays`` kept for the page's colouring): the workload, ``layout`` (which
    ranking: ``""``, or for a workload answered per layout ``"over the paged cache"`` / ``"over a contiguous copy"``,
    one row each), the winner with what it read, its latency, the margin over the runner-up (or the tie), the
    runner-up, the mechanism (why the runner-up — or the training winner, when it lost — trails), the training
    winner's standing here (``""`` without a training winner), the full headline and the evidence bullets."""

    workload_tag: str
    label: str
    winner: str | None
    stays: bool | None
    headline: str
    reasons: tuple[str, ...]
    layout: str = ""
    winner_text: str = ""
    latency: str = ""
    margin: str = ""
    runner_up: str = ""
    runner_up_latency: str = ""
    mechanism: str = ""
    standing: str = ""


@dataclass(frozen=True)
class VerdictText:
    """A :class:`Verdict` rendered: what the templates and the Markdown summary print. ``serving``: per prompt, its
    title and the rows of :func:`serving_rows`."""

    training_winner: str | None
    training_tag: str | None
    summary: str
    rows: tuple[VerdictRowText, ...]
    serving: tuple[tuple[str, tuple[dict[str, str], ...]], ...] = ()
    has_training: bool = False


def _standing_text(row: WorkloadVerdict, v: Verdict) -> str:
    tw, tm = v.training_winner, row.training_margin
    if tw is None or row.stays is None:
        return ""
    if row.standing is Standing.STAYS:
        return "stays"
    if row.standing is Standing.TIES:
        return f"ties ({margin_text(tm)}, {noise_text(tm)})"  # type: ignore[arg-type]
    if tm is not None:
        return f"beaten: {tw} {margin_text(tm)} slower"
    t = row.training_here
    return f"{tw}: {t.status.value if t is not None else 'absent'}"


def _margin_cell(m: Margin | None) -> str:
    """A margin as a table cell: ``1.47×``; ``tie (1.2 %)`` when the medians are close; ``14.04× apart, within
    noise: the spreads overlap`` when the spread swamps a real gap (never "tie (14.04×)")."""
    if m is None:
        return "only eligible"
    if not m.tie:
        return margin_text(m)
    if m.why is TieReason.CLOSE_MEDIANS:
        return f"tie ({margin_text(m)})"
    return f"no winner: {margin_text(m)} apart, {noise_text(m)}"


def _table_rows(row: WorkloadVerdict, v: Verdict, label: str) -> list[VerdictRowText]:
    """The compact table's row(s) for one workload: one, or two for a workload answered per layout."""
    head, why = headline(row, v, label), reasons(row, v)
    standing = _standing_text(row, v)
    paged = row.workload.kv_layout is KVLayout.PAGED

    def mech(r_gap, m: Margin | None, phase: Phase) -> str:
        return mechanism_text(r_gap, phase) if m is not None and not m.tie else ""

    if row.layouts is not None:
        s = row.layouts
        out = []
        for name, rk in (("over the paged cache", s.paged), ("over a contiguous copy", s.contiguous)):
            # each row's evidence is its own pair's: the paged row's is the paged winner and its runner-up (before,
            # both rows described the contiguous-copy pair)
            pair = tuple(e for e in (rk.winner, rk.runner_up) if e is not None)
            evidence = why if rk is s.contiguous else reasons(replace(row, explained=pair), v)
            lost = rk is s.contiguous and row.standing is Standing.CHANGES and row.training_gap is not None
            mechanism = mechanism_text(row.training_gap, row.phase) if lost else mech(rk.gap, rk.margin, row.phase)
            if rk is s.contiguous and (g := gather_text(s)):
                mechanism = (mechanism + "; " if mechanism else "") + "on the paged cache: " + g
            out.append(VerdictRowText(
                row.workload_tag, label, rk.winner.backend, row.stays if rk is s.contiguous else None, head, evidence,
                layout=name, winner_text=f"{rk.winner.backend} ({layout_name(rk.layout, paged_workload=paged)})",
                latency=fmt_us(rk.winner.latency_us), margin=_margin_cell(rk.margin),
                runner_up=rk.runner_up.backend if rk.runner_up else "",
                runner_up_latency=fmt_us(rk.runner_up.latency_us) if rk.runner_up else "",
                mechanism=mechanism, standing=standing if rk is s.contiguous else ""))
        return out
    w = row.winner
    if w is None:
        return [VerdictRowText(row.workload_tag, label, None, row.stays, head, why, winner_text="none",
                               mechanism=head.removeprefix(f"{label}: "))]
    mechanism = (mechanism_text(row.training_gap, row.phase) if row.standing is Standing.CHANGES and row.training_gap
                 else mech(row.gap, row.margin, row.phase))
    return [VerdictRowText(
        row.workload_tag, label, w.backend, row.stays, head, why,
        winner_text=f"{w.backend} ({layout_name(w.layout, paged_workload=paged)})", latency=fmt_us(w.latency_us),
        margin=_margin_cell(row.margin), runner_up=row.runner_up.backend if row.runner_up else "",
        runner_up_latency=fmt_us(row.runner_up.latency_us) if row.runner_up else "",
        mechanism=mechanism, standing=standing)]


def render_verdict(v: Verdict, labels: "dict[str, str] | None" = None) -> VerdictText:
    """All the sentences of ``v``: the summary, and per workload the compact table's row(s) (headline, winner, margin,
    runner-up, mechanism, standing, evidence); per serving prompt its call rows. ``labels``: workload tag → the
    run's distinct label (default :func:`distinct_labels` of the verdict's rows)."""
    labels = labels or distinct_labels(r.workload for r in v.rows)
    rows = tuple(t for r in v.rows for t in _table_rows(r, v, labels.get(r.workload_tag, workload_label(r.workload))))
    serving = tuple((f"the {sv.prompt_len:,}-token prompt" + (f", B={sv.prompt.batch}" if sv.prompt.batch != 8 else "")
                     + (f" (unchunked winner {sv.reference_backend}, reading a "
                        f"{layout_name(sv.reference_layout, paged_workload=sv.prompt.kv_layout is KVLayout.PAGED)})"
                        if sv.reference else ""),
                     tuple(serving_rows(sv))) for sv in v.serving if sv.rows)
    return VerdictText(v.training_winner, v.training_tag, summary(v), rows, serving,
                       has_training=v.training is not TrainingOutcome.NO_WORKLOAD)
