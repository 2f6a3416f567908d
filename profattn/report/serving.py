"""The run report's serving section: attention time per prompt against chunk size (the time-to-first-token
component), the cache append's time and bytes, and how each mixed step splits between its prefill and decode
parts — display rows from :mod:`profattn.analysis.run.serving`, rendered by ``templates/serving.html.j2``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from profattn.analysis.run.serving import MixedSplit, PartTime, PromptTime
from profattn.report.format import MISSING, fmt_bytes, fmt_count, fmt_us
from profattn.results import CellStatus
from profattn.workload import Workload
from profattn.workload.spec import seqs_spec

if TYPE_CHECKING:  # pragma: no cover
    from profattn.analysis.run.analyze import RunAnalysis


def serving_section(a: "RunAnalysis") -> dict[str, Any] | None:
    """``{"prompts": [...], "mixed": [...]}`` for the template (see :func:`prompt_rows`, :func:`mixed_rows`) from
    the analysis' serving views (:attr:`RunAnalysis.prompts`, :attr:`RunAnalysis.mixed`), or None when the run has
    neither a chunked prompt nor a mixed step (the section is then left out)."""
    times, splits = a.prompts, a.mixed
    if not times and not splits:
        return None
    shown_t = tuple(t for t in times if not _never_ran(t))
    shown_s = tuple(x for x in splits if not _split_never_ran(x))
    # "not shown" only for a backend absent from both tables (sdpa-flash was listed beside its own chunk rows)
    shown = {t.backend for t in shown_t} | {x.backend for x in shown_s}
    hidden = [b for b in dict.fromkeys([t.backend for t in times] + [x.backend for x in splits if x.backend])
              if b not in shown]
    return {"prompts": prompt_rows(shown_t), "mixed": mixed_rows(shown_s), "not_shown": hidden}


def _never_ran(t: PromptTime) -> bool:
    """Every chunk of the prompt is unsupported by the backend (it cannot take this call at all)."""
    return len(t.missing) == len(t.plan.workloads) and all(m.status is CellStatus.UNSUPPORTED for m in t.missing)


def _split_never_ran(x: MixedSplit) -> bool:
    """The backend took none of the step, its prefill part or its decode part (each unsupported or absent)."""
    parts = (x.step_time, x.prefill, x.decode)
    return all(p.latency_us is None and p.status in (CellStatus.UNSUPPORTED, None) for p in parts)


def prompt_rows(times: "tuple[PromptTime, ...]") -> list[dict[str, Any]]:
    """One row per (prompt, chunk size, backend), in the analysis' order: the prompt (``"8,192 tokens × B=8"``),
    the chunk size and count, Σ attention time, its ratio to the same backend's unchunked prompt, the mean per
    chunk, Σ append time and the append ledger's bytes, the status (the missing chunks and why), and ``best``:
    the fastest complete backend at that prompt and chunk size."""
    best: dict[Workload, float] = {}  # by the plan's first chunk (one plan per first chunk)
    unchunked: dict[tuple[Workload, str], float] = {}  # by the prompt as one chunk, and backend
    for t in times:
        if t.attention_us is not None:
            first = t.plan.workloads[0]
            best[first] = min(best.get(first, t.attention_us), t.attention_us)
            if t.plan.chunk_size == t.plan.prompt_len:
                unchunked[(first, t.backend)] = t.attention_us
    rows = []
    for t in times:
        p = t.plan
        key = p.workloads[0]
        base = unchunked.get((key.with_(q_len=p.prompt_len, kv_len=p.prompt_len), t.backend))
        rows.append({
            "prompt": f"{p.prompt_len:,} tokens × B={p.batch}",
            "chunk": "unchunked" if p.chunk_size == p.prompt_len else f"{p.chunk_size:,}",
            "chunks": len(p.workloads),
            "backend": t.backend,
            "attention": fmt_us(t.attention_us),
            "vs_unchunked": (f"{t.attention_us / base:.2f}×" if t.attention_us is not None and base else MISSING),
            "per_chunk": fmt_us(t.attention_us / len(p.workloads) if t.attention_us is not None else None),
            "append": fmt_us(t.append_us),
            "append_bytes": fmt_bytes(p.append_bytes),
            "flops": fmt_count(p.flops),
            "status": _missing_text(t),
            "best": t.attention_us is not None and t.attention_us == best.get(key),
        })
    return rows


def _missing_text(t: PromptTime) -> str:
    if t.complete:
        return "every chunk ok"
    statuses = {m.status for m in t.missing}
    if len(statuses) == 1:
        (st,) = statuses
        what = st.value if st is not None else "not measured"
        if len(t.missing) == len(t.plan.workloads):
            return f"all {len(t.missing)} chunks {what}"
        idx = ", ".join(str(m.index) for m in t.missing)
        return f"{len(t.missing)} of {len(t.plan.workloads)} chunks {what} (chunk{'s' if len(t.missing) > 1 else ''} {idx})"
    parts = [f"chunk {m.index} {m.status.value if m.status is not None else 'not measured'}" for m in t.missing]
    return f"{len(t.missing)} of {len(t.plan.workloads)} chunks missing: " + ", ".join(parts)


def mixed_rows(splits: "tuple[MixedSplit, ...]") -> list[dict[str, Any]]:
    """One row per mixed step and backend ("best per part" first): the step's sequences in words, the step's
    time, its prefill and decode parts' times (each with its backend in a best-per-part row), their sum, and
    step / (prefill + decode)."""
    rows = []
    for s in splits:
        rows.append({
            "step": describe_step(s.step),
            "tag": s.step.tag,
            "backend": s.backend or "fastest per part",
            "best": s.backend is None,
            "step_time": _part_text(s.step_time, s.backend is None),
            "prefill": _part_text(s.prefill, s.backend is None),
            "decode": _part_text(s.decode, s.backend is None),
            "parts": fmt_us(s.parts_us),
            "ratio": f"{s.step_over_parts:.2f}×" if s.step_over_parts is not None else MISSING,
        })
    return rows


def _part_text(p: PartTime, name_backend: bool) -> str:
    if p.latency_us is not None:
        return fmt_us(p.latency_us) + (f" ({p.backend})" if name_backend else "")
    return f"{MISSING} ({p.status.value})" if p.status is not None else f"{MISSING} (not measured)"


def describe_step(w: Workload) -> str:
    """A mixed step's sequences in words: ``"2x(q2048,kv8192) + 32 decodes (kv 1,041–8,192)"``."""
    pre = tuple(p for p in w.seqs if p[0] > 1)
    dec = [k for q, k in w.seqs if q == 1]
    text = seqs_spec(pre)
    if dec:
        lo, hi = min(dec), max(dec)
        span = f"kv {lo:,}" if lo == hi else f"kv {lo:,}–{hi:,}"
        text += f" + {len(dec)} decode{'s' if len(dec) > 1 else ''} ({span})"
    return text
