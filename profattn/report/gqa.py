"""The run report's GQA section: cache traffic against arithmetic across KV-head counts — display rows and
sentences from :mod:`profattn.analysis.run.gqa`, rendered by ``templates/gqa.html.j2`` and in the Markdown summary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from profattn.analysis.common.bounds import LAUNCH_BOUND_FRACTION
from profattn.analysis.run.gqa import (
    BANDWIDTH_BOUND_FRACTION, LAUNCH_FLOOR_RATIO, REDUNDANT_DRAM_RATIO, Bound, CacheSaving, GqaComparison, HeadsCell,
    SavingOutcome,
)
from profattn.report.format import MISSING, fmt_bytes, fmt_count, fmt_rate, fmt_sig, fmt_us
from profattn.report.verdict import noise_text

if TYPE_CHECKING:  # pragma: no cover
    from profattn.analysis.run.analyze import RunAnalysis


def gqa_section(a: "RunAnalysis") -> dict[str, Any] | None:
    """``{"tables": [...], "sentences": [...], "flags": [...], "rules": str}`` for ``templates/gqa.html.j2``, or
    None when the run has no workloads that differ only in ``num_kv_heads`` (the section is then left out).
    ``tables``: one per shape (``title``, ``flops`` text, ``rows`` from :func:`heads_rows`)."""
    comps = a.gqa
    if not comps:
        return None
    return {
        "tables": [{"title": comparison_title(c), "flops": flops_text(c), "top": c.heads[0], "rows": heads_rows(c)}
                   for c in comps],
        "sentences": [s for c in comps for s in saving_sentences(c)],
        "flags": [flag_sentence(c, x) for c in comps for x in c.flagged],
        "measured": any(x.ledger.measured for c in comps for r in c.rows for x in r.cells),
        "rules": rules_text(),
    }


def rules_text() -> str:
    """The section's rules in one paragraph (thresholds from :mod:`profattn.analysis.run.gqa`)."""
    return (f"A cell is flagged when its DRAM traffic exceeds the requested bytes by more than "
            f"{(REDUNDANT_DRAM_RATIO - 1) * 100:.0f} % (the ledger rule): a smaller allocation alone does not prove that the "
            f"kernel avoided redundant reads. A saving counts only beyond noise (the verdict's rule). Bandwidth-bound: achieved "
            f"GB/s (requested bytes / latency) at least {BANDWIDTH_BOUND_FRACTION * 100:.0f} % of the run's memory roof; launch-bound: "
            f"latency within {LAUNCH_FLOOR_RATIO:g}× of the backend's fastest call of that phase in the run, or kernels "
            f"under {LAUNCH_BOUND_FRACTION * 100:.0f} % of the latency.")


def comparison_title(c: GqaComparison) -> str:
    """``"decode kv 8192: B=8, Hq=32, d=128, bfloat16, page 16 — Hkv 32 / 8 / 1"``."""
    w = c.workload
    page = f", page {w.page_size}" if w.page_size else ""
    return (f"{w.phase.value} kv {w.kv_len}: B={w.batch}, Hq={w.num_q_heads}, d={w.head_dim}, {w.dtype}{page} — "
            f"Hkv {' / '.join(str(h) for h in c.heads)}")


def flops_text(c: GqaComparison) -> str:
    """The arithmetic ledger of the shape: ``"FLOPs per call: 2.15 G at every Hkv (query heads)"`` — or each head
    count's when they differ (they should not: FLOPs come from the query heads)."""
    fl = {c.workload.with_(num_kv_heads=h).flops for h in c.heads}
    if len(fl) == 1:
        return f"FLOPs per call: {fmt_count(fl.pop())} at every Hkv (from the {c.workload.num_q_heads} query heads)"
    return "FLOPs per call: " + ", ".join(f"Hkv {h}: {fmt_count(c.workload.with_(num_kv_heads=h).flops)}" for h in c.heads)


def heads_rows(c: GqaComparison) -> list[dict[str, Any]]:
    """One row per (backend, Hkv), the backend's head counts largest first: cache bytes requested and × fewer than
    the largest Hkv, DRAM bytes transferred and their ratio to requested (``flag``: over the 20 % rule), FLOPs,
    latency, achieved GB/s with the roof fraction, the latency saving against the largest Hkv and what bounds the
    call."""
    sav = {(s.backend, s.smaller.num_kv_heads): s for s in c.savings}
    rows = []
    for r in c.rows:
        for i, x in enumerate(r.cells):
            s = sav.get((r.backend, x.num_kv_heads))
            rows.append({
                "backend": r.backend if i == 0 else "",
                "heads": f"{x.num_kv_heads} (group {x.workload.group_size})",
                "cache": fmt_bytes(x.cache_bytes),
                "fewer": f"{c.workload.kv_bytes / x.cache_bytes:.1f}×",
                "dram": fmt_bytes(x.ledger.dram_bytes) if x.ledger.measured else "not measured",
                "dram_ratio": f"{x.ledger.dram_ratio:.2f}×" if x.ledger.dram_ratio is not None else MISSING,
                "flag": x.flagged,
                "flops": fmt_count(x.flops),
                "latency": fmt_us(x.latency_us) if x.latency_us is not None else f"{MISSING} ({x.status.value})",
                "gbps": fmt_rate(x.achieved_gbps, "GB/s"),
                "saving": saving_cell(s) if s is not None else "",
                "bound": x.bound.value if x.latency_us is not None else "",
            })
    return rows


def saving_cell(s: CacheSaving) -> str:
    """``"3.6× (bytes 4.0×)"``, ``"1.01×, within noise (bytes 4.0×)"``, ``"0.83× slower (bytes 4.0×)"``, or "–"."""
    if s.latency_ratio is None:
        return MISSING
    tail = f" (bytes {s.bytes_ratio:.1f}×)"
    if s.outcome is SavingOutcome.SAVED:
        return f"{times(s.latency_ratio)}{tail}"
    if s.outcome is SavingOutcome.NO_SAVING:
        return f"{s.latency_ratio:.2f}×, within noise{tail}"
    return f"{s.latency_ratio:.2f}×, slower{tail}"


def times(ratio: float) -> str:
    """A latency ratio: ``"3.6×"`` from 2× up, ``"1.54×"`` below (so a 2.6 % saving is not printed as 1.0×)."""
    return f"{ratio:.1f}×" if ratio >= 2 else f"{ratio:.2f}×"


def article(number_text: str) -> str:
    """``"an"`` before a number read with a vowel sound (8, 11, 18, 80…: ``"an 18.3×"``), else ``"a"``."""
    head = number_text.replace(",", "").split(".")[0].rstrip("×")
    return "an" if head.startswith("8") or head in ("11", "18") else "a"


def bound_text(s: CacheSaving) -> str:
    """Why, in words: ``"bandwidth-bound: 4,410 GB/s of 4,603"``, ``"launch-bound: 7.10 µs against its floor of
    6.90 µs; the bytes need 3.66 µs at the read roof"``, ``"neither bandwidth- nor launch-bound: ..."``."""
    x = s.smaller
    gb = f"{fmt_sig(x.achieved_gbps)} GB/s of {fmt_sig(s.bandwidth_gbps)}" if s.bandwidth_gbps and x.achieved_gbps is not None else None
    floor = f"{fmt_us(x.latency_us)} against its floor of {fmt_us(s.floor_us)}" if s.floor_us is not None else fmt_us(x.latency_us)
    need = f"; the bytes need {fmt_us(s.byte_floor_us)} at the {s.bandwidth_kind} roof" if s.byte_floor_us is not None else ""
    if s.bound is Bound.BANDWIDTH:
        return f"bandwidth-bound: {gb}"
    if s.bound is Bound.LAUNCH:
        return f"launch-bound: {floor}{need}"
    if s.bound is Bound.NEITHER:
        return f"neither bandwidth- nor launch-bound: {gb}, {floor}"
    return f"bound unknown: no memory roof measured; {floor}"


def saving_sentence(s: CacheSaving, *, name_heads: bool = False) -> str:
    """One backend's step to fewer KV heads at one shape, e.g. ``"At kv 8192, sdpa-cudnn turned the 4.0× smaller
    cache into a 3.6× latency saving (bandwidth-bound: 4,410 GB/s of 4,603)."``; ``name_heads``: say the smaller
    head count (``"At kv 8192 with Hkv 1, ..."``)."""
    at = f"At kv {s.kv_len}" + (f" with Hkv {s.smaller.num_kv_heads}" if name_heads else "")
    cache = f"the {s.bytes_ratio:.1f}× smaller cache"
    if s.outcome is SavingOutcome.NOT_TIMED:
        return f"{at}, {s.backend} lacks an eligible time at Hkv {s.base.num_kv_heads} or {s.smaller.num_kv_heads}: {cache} is not judged."
    if s.outcome is SavingOutcome.SAVED:
        r = times(s.latency_ratio)  # type: ignore[arg-type]
        return f"{at}, {s.backend} turned {cache} into {article(r)} {r} latency saving ({bound_text(s)})."
    if s.outcome is SavingOutcome.NO_SAVING:
        noise = noise_text(s.margin) if s.margin is not None else "within noise"
        return (f"{at}, {s.backend} turned {cache} into no latency saving ({s.latency_ratio:.2f}×, {noise}; "
                f"{bound_text(s)}).")
    return (f"{at}, {s.backend} was {1 / s.latency_ratio:.2f}× slower with {cache} "  # type: ignore[operator]
            f"({bound_text(s)}).")


def saving_sentences(c: GqaComparison) -> list[str]:
    """The sentences of one shape: every backend's step from the largest head count to the next (MHA → GQA in the
    ``gqa`` preset: the 4× saving), then to each smaller one; a step without an eligible time at both head counts
    gets no sentence (its table row says why)."""
    out = []
    for h in c.heads[1:]:
        for s in c.savings_at(h):
            if s.outcome is not SavingOutcome.NOT_TIMED:  # the table shows why (unsupported, error, incorrect)
                out.append(saving_sentence(s, name_heads=h != c.heads[1]))
    return out


def flag_sentence(c: GqaComparison, x: HeadsCell) -> str:
    """``"sdpa-math at kv 8192, Hkv 8 moved 1.07 GB from DRAM for 269.0 MB requested (3.99×): traffic beyond
    the ledger (…)"``: the excess is named by what it can be, not guessed."""
    bl = x.ledger
    return (f"{x.backend} at kv {c.kv_len}, Hkv {x.num_kv_heads} moved {fmt_bytes(bl.dram_bytes)} from DRAM for "
            f"{fmt_bytes(bl.requested_bytes)} requested ({bl.dram_ratio:.2f}×): traffic beyond the ledger (re-reads of K/V, or scratch the kernel writes and reads back, such as "
            "split-KV partials), so the smaller allocation did not become proportionally fewer bytes moved.")
