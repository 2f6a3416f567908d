"""``profattn analyze``'s serving-engine output: one section per annotated step (its prefill and decode parts, the
attention share of its GPU time, the calls' achieved rates), the graph replays merged with their capture, and the
recipe to record a capture where none was given. Rows of display strings (tests assert on them), lines for the
terminal, and the JSON of the records (:mod:`profattn.report.analyze` embeds them).

Rates are the step ledger's FLOPs and minimum bytes over each call's GPU time (summed kernel time):
TFLOP/s = 1e12 FLOP/s, GB/s = 1e9 B/s; with ``ceilings`` (a profattn run's measured GEMM and read-stream rates,
``analyze --ceilings RUN``), also their fraction of the roof.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from profattn.analysis.calls.call_records import (
    AttentionCall, CallStepShare, EngineCall, GraphMerge, KVCacheShape, PartLedger, PhaseSums, TraceCalls,
)
from profattn.report.format import MISSING, fmt_bytes, fmt_count, fmt_flops_rate, fmt_rate, fmt_us, short_kernel_name
from profattn.results import Ceilings

__all__ = [
    "ABOVE_ROOF",
    "RECIPE",
    "ROOF_NOTE",
    "above_roof",
    "achieved_text",
    "call_engine_dict",
    "engine_call_text",
    "engine_dict",
    "engine_lines",
    "engine_section",
    "graph_text",
    "kv_cache_text",
    "step_rows",
]

#: How to record a graph capture beside the replays, for each way a trace is made (printed where replayed kernels
#: could not be given their ops). vLLM ≥ 0.26: ``ProfilerConfig.capture_torch_profiler`` writes
#: ``<torch_profiler_dir>/capture_traces/graph_capture_rank_<r>.<ts>.pt.trace.json.gz`` per captured size
#: (``vllm/compilation/graph_capture_profiler.py``), ``detailed_trace_annotation`` the step sums
#: (vllm-project/vllm#37524); SGLang: ``--enable-profile-cuda-graph``.
RECIPE: tuple[str, ...] = (
    "vLLM (>= 0.26): vllm serve MODEL --profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": \"traces\", "
    "\"capture_torch_profiler\": true, \"detailed_trace_annotation\": true, \"delay_iterations\": 20, "
    "\"max_iterations\": 4}'  then  curl -X POST localhost:8000/start_profile  ... /stop_profile;  "
    "profattn analyze traces  (its capture_traces/ holds the captures)",
    "SGLang: launch the server with --enable-profile-cuda-graph (graph capture traced) and profile with "
    "/start_profile as usual; pass the capture trace with --capture",
    "torch.profiler: with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], "
    "record_shapes=True) as prof: (1) capture once: with torch.cuda.graph(g): out = step(static_inputs)  "
    "(2) replay: for _ in range(3): g.replay();  torch.cuda.synchronize()  — then prof.export_chrome_trace("
    "\"capture_and_replay.json\"): the capture (CPU ops with shapes launching the kernels) and the replays "
    "(kernels with graph id / graph node id on CUDA >= 12 builds of Kineto) in one file; a capture profiled in "
    "another session goes in with --capture FILE",
)


def kv_cache_text(cache: KVCacheShape | None) -> str:
    """The paged cache as shown: ``page 32 tokens; [2, 224304, 32, 8, 64] ([2, num_blocks, block_size, ...]):
    224,304 pages, 7,177,728 token slots, bfloat16 (from aten::unbind)``; ``not recorded`` for None."""
    if cache is None:
        return "not recorded"
    dims = ", ".join(str(d) for d in cache.dims)
    dtype = f", {cache.dtype}" if cache.dtype else ""
    return (f"page {cache.block_size:,} tokens; [{dims}] ({cache.layout.value}): {cache.num_blocks:,} pages, "
            f"{cache.capacity_tokens:,} token slots{dtype} (from {cache.source})")


def engine_call_text(e: EngineCall | None) -> str | None:
    """What an engine op recorded, in one line: ``vllm op vllm::unified_attention_with_output: 8,192 query tokens,
    8,192 new K/V tokens; KV cache page 32 tokens; ...``; None for another call."""
    if e is None:
        return None
    parts = [f"{e.engine.value} op {e.entry_op}" + (f" → {e.backend_op}" if e.backend_op else "")]
    if e.q_tokens is not None:
        parts.append(f"{e.q_tokens:,} query token rows" + (f", {e.kv_new_tokens:,} new K/V rows"
                                                           if e.kv_new_tokens is not None else ""))
    if e.sequences is not None:
        parts.append(f"{e.sequences:,} sequences (cu_seqlens_q)")
    if e.max_q is not None or e.max_k is not None:
        parts.append(f"longest q {e.max_q if e.max_q is not None else '?'}, kv {e.max_k if e.max_k is not None else '?'}")
    parts.append(f"KV cache {kv_cache_text(e.kv_cache)}")
    if e.mla:
        parts.append("latent attention (MLA)")
    return "; ".join(parts)


def _part_text(p: PartLedger | None) -> str:
    if p is None:
        return MISSING
    return (f"{p.pairs:,} pairs/head, {fmt_count(p.flops)}FLOP, {fmt_bytes(p.total_bytes)} "
            f"(Q {fmt_bytes(p.q_bytes)}, O {fmt_bytes(p.o_bytes)}, K/V {fmt_bytes(p.kv_bytes)})")


def _sums_text(s: PhaseSums) -> str:
    if not s.requests:
        return "none"
    text = f"{s.requests:,} seq, Σq {s.sum_q:,}"
    if s.has_sums:
        text += f", Σk {s.sum_k:,}, Σq² {s.sum_q2:,}, Σq·k {s.sum_qk:,}"
    return text


#: A rate this far above the measured roof cannot be the call's own: the ledger counts more work than it did.
ABOVE_ROOF = 1.05


def above_roof(tflops: float | None, gbps: float | None, ceilings: Ceilings | None) -> bool:
    """Whether an achieved rate exceeds the measured roof by more than :data:`ABOVE_ROOF` (so the step ledger
    overcounts this call: a layer with a sliding window, say, which the trace does not record)."""
    if ceilings is None:
        return False
    return bool((tflops is not None and tflops > ABOVE_ROOF * ceilings.matmul_tflops)
                or (gbps is not None and gbps > ABOVE_ROOF * ceilings.bandwidth_gbps))


#: Said of a call whose achieved rate is above the roof.
ROOF_NOTE = ("above the measured roof: this call did less work than the step ledger counts (a layer with a sliding "
             "window, say: the window is not in the trace)")


def achieved_text(share: CallStepShare | None, ceilings: Ceilings | None = None) -> str:
    """A call's step ledger against its GPU time: ``0.903 GFLOP, 113.3 MB → 19.3 TFLOP/s, 2,418 GB/s``; with
    ``ceilings`` each rate with its fraction of the run's GEMM / read roof (and :data:`ROOF_NOTE` above it). "–"
    without a ledger."""
    if share is None or share.ledger is None:
        return MISSING
    led = share.ledger
    roof_f = ceilings.matmul_tflops if ceilings else None
    roof_b = ceilings.bandwidth_gbps if ceilings else None
    rates = (f" → {fmt_flops_rate(share.tflops, roof_f)}, {fmt_rate(share.gbps, 'GB/s', roof_b)}"
             if share.tflops is not None else "")
    over = f" — {ROOF_NOTE}" if above_roof(share.tflops, share.gbps, ceilings) else ""
    return f"{fmt_count(led.flops)}FLOP, {fmt_bytes(led.total_bytes)} minimum{rates}{over}"


def _spread(values: Sequence[float], fmt, fmt_range=None) -> str:  # type: ignore[no-untyped-def]
    """``<median> median (<min> – <max>)`` of ``values``, the median by ``fmt`` (it may carry a ceiling fraction),
    the range by ``fmt_range`` (default ``fmt``); the value alone for one; "–" for none."""
    if not values:
        return MISSING
    med = statistics.median(values)
    if len(values) == 1:
        return fmt(med)
    rng = fmt_range or fmt
    return f"{fmt(med)} median ({rng(min(values))} – {rng(max(values))})"


def step_rows(fa: TraceCalls, ceilings: Ceilings | None = None, *, limit: int | None = None) -> list[dict[str, Any]]:
    """One row per annotated step (the first ``limit`` only, when given): its name, prefill (context) and decode
    (generation) composition and ledgers, GPU time, attention GPU time and share, attention calls and their achieved
    rates (median and range)."""
    rows = []
    calls = {c.index: c for c in fa.calls}
    for s in fa.serving_steps[:limit]:
        a = s.annotation
        mine = [calls[i] for i in s.attention_calls if i in calls]
        tflops = [c.step.tflops for c in mine if c.step is not None and c.step.tflops is not None]
        gbps = [c.step.gbps for c in mine if c.step is not None and c.step.gbps is not None]
        roof_f = ceilings.matmul_tflops if ceilings else None
        roof_b = ceilings.bandwidth_gbps if ceilings else None
        share = s.attention_share
        rows.append({
            "index": s.index, "name": a.name, "format": a.format.value, "engine": a.engine.value,
            "tokens": "–" if a.tokens is None else f"{a.tokens:,}", "requests": a.requests,
            "prefill": _sums_text(a.context), "decode": _sums_text(a.generation),
            "prefill_ledger": _part_text(s.ledger.prefill if s.ledger else None),
            "decode_ledger": _part_text(s.ledger.decode if s.ledger else None),
            "kernels": s.kernels, "gpu_time": fmt_us(s.gpu_time_us) if s.kernels else MISSING,
            "attention_calls": len(s.attention_calls), "attention_time": fmt_us(s.attention_gpu_us),
            "attention_share": MISSING if share is None else f"{100 * share:.1f} %",
            "tflops": _spread(tflops, lambda v: fmt_flops_rate(v, roof_f), fmt_flops_rate),
            "gbps": _spread(gbps, lambda v: fmt_rate(v, "GB/s", roof_b), lambda v: fmt_rate(v, "GB/s")),
            "call_gpu_time": _spread([c.gpu_time_us for c in mine if c.kernels], fmt_us),
        })
    return rows


def graph_text(merge: GraphMerge | None, *, most: int | None = None) -> list[str]:
    """The graph replays against their captures, as sentences: placed kernels per rule, and per graph launch what
    could not be placed (at most ``most`` such lines, then how many more). Empty without graph launches."""
    if merge is None or not merge.launches:
        return []
    lines = []
    n = len(merge.launches)
    if not merge.capture_files:
        lines.append(f"{merge.replayed_kernels:,} kernel(s) ({merge.attention_kernels:,} attention) replayed by {n:,} "
                     "graph launch(es), no capture trace given: their ops and input shapes are unknown")
        return lines
    rules = ", ".join(f"{k:,} by {rule.value}" for rule, k in merge.rule_counts().items())
    lines.append(f"{merge.placed_kernels:,} of {merge.replayed_kernels:,} replayed kernel(s) matched to their "
                 f"capture-time launches ({n:,} graph launch(es){': ' + rules if rules else ''}; captures from "
                 f"{', '.join(merge.capture_files)})")
    partial = [m for m in merge.launches if m.rule is None or m.placed < m.kernels]
    for m in partial[:most]:
        if m.rule is None:
            size = f"; closest capture: {m.capture_launches:,} launches" if m.capture_launches else ""
            lines.append(f"graph launch at {m.launch_ts_us:.0f} µs: {m.kernels:,} kernel(s) ({m.attention_kernels:,} "
                         f"attention) not placed: {m.gap.value if m.gap else 'unknown'}{size}")
        elif m.placed < m.kernels:
            lines.append(f"graph launch at {m.launch_ts_us:.0f} µs: {m.kernels - m.placed:,} of {m.kernels:,} kernel(s) "
                         f"not placed ({m.rule.value})")
    if most is not None and len(partial) > most:
        lines.append(f"… and {len(partial) - most:,} more graph launch(es) not wholly placed")
    return lines


def _group_key(c: AttentionCall) -> tuple[Any, ...]:
    return (c.op_name, c.backend, c.phase, c.shape, c.step.step if c.step else None, tuple(k.name for k in c.kernels),
            c.source)


def _launch_text(c: AttentionCall, most: int = 4) -> str:
    """The call's kernels with their launch shapes, equal ones counted: ``kernel_unified_attention_3d grid [48, 8, 8]
    block [128, 1, 1]; reduce_segments grid [32, 64, 1] block [64, 1, 1]``; at most ``most`` distinct ones."""
    seen: dict[tuple[str, str], int] = {}
    for k in c.kernels:
        key = (short_kernel_name(k.name, 40), k.launch_shape)
        seen[key] = seen.get(key, 0) + 1
    parts = [f"{name} {shape}" + (f" ×{n}" if n > 1 else "") for (name, shape), n in list(seen.items())[:most]]
    if len(seen) > most:
        parts.append(f"… {len(seen) - most} more")
    return "; ".join(parts) if parts else "no kernels"


def engine_lines(fa: TraceCalls, ceilings: Ceilings | None = None, *, limit: int = 20, steps: int = 10) -> list[str]:
    """Terminal lines for one file: each step (composition, GPU time, attention share; at most ``steps``), then its
    attention calls grouped by what they are (count, op, backend, phase, shape, kernels with launch shapes, GPU time,
    achieved rates, workload; at most ``limit`` groups), then the graph merge. The JSON and HTML have every call."""
    lines: list[str] = []
    if fa.captures:
        held = sum(1 for c in fa.calls if c.captured_in is not None)
        lines.append(f"  capture trace: {fa.captures} graph capture(s); {held} attention op call(s) made while capturing "
                     "(their kernels run at replay)")
    rows = step_rows(fa, ceilings, limit=steps)
    for r in rows:
        lines.append(f"  step {r['index']} ({r['format']}): {r['requests']} sequence(s) — prefill {r['prefill']}; decode "
                     f"{r['decode']}; GPU {r['gpu_time']}, attention {r['attention_time']} ({r['attention_share']}) in "
                     f"{r['attention_calls']} call(s)")
        if r["prefill_ledger"] != MISSING:
            lines.append(f"    prefill part per call: {r['prefill_ledger']}")
        if r["decode_ledger"] != MISSING:
            lines.append(f"    decode part per call: {r['decode_ledger']}")
    if len(fa.serving_steps) > steps:
        lines.append(f"  … and {len(fa.serving_steps) - steps} more step(s) (see the HTML/JSON)")
    groups: dict[tuple[Any, ...], list[AttentionCall]] = {}
    for c in fa.calls:
        if c.captured_in is None:
            groups.setdefault(_group_key(c), []).append(c)
    shown = 0
    for members in sorted(groups.values(), key=lambda g: -sum(c.gpu_time_us for c in g)):
        if shown == limit:
            lines.append(f"  … and {len(groups) - limit} more group(s) of calls (see the HTML/JSON)")
            break
        shown += 1
        c = members[0]
        s = c.shape
        shape = (f"Hq {s.num_q_heads}/Hkv {s.num_kv_heads}/d {s.head_dim} {s.dtype or '?'}" if s is not None
                 else "shape not recorded")
        times = [m.gpu_time_us for m in members if m.kernels]
        gpu = _spread(times, fmt_us) if times else "no kernels"
        where = f" [graph: {c.graph.rule.value}]" if c.graph is not None else ""
        lines.append(f"  {len(members)} × {c.op_name or '(no op)'} → {c.backend}, {c.phase.value if c.phase else 'phase unknown'}"
                     f", {shape}{where}: GPU {gpu} per call; {_launch_text(c)}")
        if c.engine is not None and c.engine.kv_cache is not None:
            lines.append(f"    KV cache {kv_cache_text(c.engine.kv_cache)}")
        if c.step is not None and c.step.ledger is not None:
            tf = [m.step.tflops for m in members if m.step and m.step.tflops is not None]
            gb = [m.step.gbps for m in members if m.step and m.step.gbps is not None]
            roof_f = ceilings.matmul_tflops if ceilings else None
            roof_b = ceilings.bandwidth_gbps if ceilings else None
            lines.append(f"    step {c.step.step} ledger per call: {fmt_count(c.step.ledger.flops)}FLOP, "
                         f"{fmt_bytes(c.step.ledger.total_bytes)} minimum → "
                         f"{_spread(tf, lambda v: fmt_flops_rate(v, roof_f), fmt_flops_rate)}, "
                         f"{_spread(gb, lambda v: fmt_rate(v, 'GB/s', roof_b), lambda v: fmt_rate(v, 'GB/s'))}")
            over = sum(above_roof(m.step.tflops, m.step.gbps, ceilings) for m in members if m.step)
            if over:
                lines.append(f"    {over} of these {len(members)} call(s) {ROOF_NOTE}")
        lines.append(f"    {c.profile_hint}")
    for text in graph_text(fa.graph_merge, most=limit):
        lines.append(f"  graphs: {text}")
    return lines


def engine_section(fa: TraceCalls, ceilings: Ceilings | None = None, *, limit: int | None = None
                   ) -> dict[str, Any] | None:
    """The HTML context of the serving-engine section of one file (``engine.html.j2``); None when the file has no
    step annotation, no engine call and no graph replay. With ``limit``, rows are built for the first ``limit``
    steps and graph launches only (``steps_more``: how many steps were left out)."""
    if not fa.serving_steps and not any(c.engine is not None for c in fa.calls) and fa.graph_merge is None \
            and not fa.captures:
        return None
    merge = fa.graph_merge
    return {
        "steps": step_rows(fa, ceilings, limit=limit),
        "steps_more": max(0, len(fa.serving_steps) - limit) if limit is not None else 0,
        "graphs": graph_text(merge, most=limit),
        "recipe": list(RECIPE) if merge is not None and merge.unplaced_attention_kernels else [],
        "captures": fa.captures,
        "ceilings": None if ceilings is None else (f"GEMM {fmt_flops_rate(ceilings.matmul_tflops)}, "
                                                   f"{ceilings.bandwidth_kind} {fmt_rate(ceilings.bandwidth_gbps, 'GB/s')}"),
    }


def engine_dict(fa: TraceCalls) -> dict[str, Any]:
    """The JSON of a file's serving steps, graph merge and captures (times µs, bytes, FLOPs; enums as values)."""
    return _plain({
        "captures": fa.captures,
        "serving_steps": [asdict(s) for s in fa.serving_steps],
        "graph_merge": None if fa.graph_merge is None else {**asdict(fa.graph_merge),
                                                            "placed_kernels": fa.graph_merge.placed_kernels,
                                                            "replayed_kernels": fa.graph_merge.replayed_kernels},
    })


def call_engine_dict(c: AttentionCall) -> dict[str, Any]:
    """The JSON of one call's engine fields: ``engine``, ``step``, ``graph``, ``launch_ts_us``, ``captured_in``."""
    return _plain({
        "engine": asdict(c.engine) if c.engine else None, "step": asdict(c.step) if c.step else None,
        "graph": asdict(c.graph) if c.graph else None, "launch_ts_us": c.launch_ts_us, "captured_in": c.captured_in,
    })


def _plain(value: Any) -> Any:
    """Enums as their values, tuples as lists (JSON-ready)."""
    import enum

    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
