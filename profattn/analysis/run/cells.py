"""Cell evidence: the kernels each cell ran (from its trace), the family check, its measured counters.

Inputs are typed records (:mod:`profattn.results`) and parsed traces (:mod:`profattn.trace.kineto`); outputs are
typed records. Nothing here measures or renders. Winners and the verdict live in
:mod:`profattn.analysis.run.verdict`, the byte and FLOP ledgers in :mod:`profattn.analysis.run.ledgers`.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from profattn.families import ATTENTION_FAMILIES, KernelFamily, graph_replay_range
from profattn.results import (
    CellResult,
    CounterKernel,
    CountersInfo,
    CounterSummary,
    GraphReplaySummary,
    KernelLaunch,
    RunResult,
    TraceSummary,
)
from profattn.trace.counter_sums import SUMMED_COUNTERS, sum_counters
from profattn.trace.kineto import Trace, kernels_in_range, ops_in_range, ranges_in_range

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
    """The kernels that actually ran in ``cell``'s ``record_function`` ranges of ``trace``, per call.

    On a CPU trace (no GPU kernels) the evidence is the operators that ran, preceded by the names of the
    ranges nested in the cell's (a Triton kernel run by the interpreter has no operator of its own, only the
    ``triton-interpreter::<kernel>`` range its backend puts around the launch)."""
    rid = cell.cell_id
    ranges = trace.ranges
    calls = int((ranges["name"] == rid).sum()) if len(ranges) else 0
    k = kernels_in_range(trace, rid)
    ops = ops_in_range(trace, rid)["name"].tolist()
    if not trace.has_gpu_kernels:
        ops = ranges_in_range(trace, rid)["name"].tolist() + ops
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
    graph = graph_replays(trace, rid, family, eager_kernels=[kl.name for kl in launches])
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
        graph=graph,
    )


def graph_replays(trace: Trace, cell_id: str, family: KernelFamily, *, eager_kernels: list[str]) -> GraphReplaySummary | None:
    """The profiled CUDA-graph replays of ``cell_id`` in ``trace`` — the kernels launched inside its
    ``<cell id>::graph-replay`` ranges (:func:`profattn.families.graph_replay_range`; Kineto gives a replayed kernel the
    correlation of the ``cudaGraphLaunch`` that replayed it) — per replay, with the family check of those kernels and
    whether they are the eager calls' ``eager_kernels`` (names). None when the trace has no replay range for the cell
    (a cell not timed as a graph, or a run from before the replays were profiled). A replay range without kernels (a
    profiler that recorded no graph kernel) gives ``family_ok`` None and says so, rather than failing the cell."""
    name = graph_replay_range(cell_id)
    ranges = trace.ranges
    replays = int((ranges["name"] == name).sum()) if len(ranges) else 0
    if not replays:
        return None
    k = kernels_in_range(trace, name)
    names = k["name"].tolist()
    if names:
        ok, note = family_check(family, names, [], gpu=True)
    else:
        ok, note = None, f"no kernel was recorded for the {replays} profiled graph replay{'s' * (replays != 1)}"
    by_time = [str(n) for n, _ in sorted(k.groupby("name", sort=False)["dur_us"].sum().items(), key=lambda kv: -kv[1])]
    return GraphReplaySummary(
        replays=replays,
        kernels_per_replay=len(k) / replays,
        gpu_time_per_replay_us=float(k["dur_us"].sum()) / replays if len(k) else None,
        kernels=tuple(by_time),
        graph_launched=bool(len(k)) and bool(k["graph_launched"].all()),
        family_ok=ok,
        family_note=note,
        same_kernels=(set(by_time) == set(eager_kernels)) if by_time and eager_kernels else None,
    )


def attach_trace(cell: CellResult, trace: Trace, trace_file: str, family: KernelFamily) -> CellResult:
    """``cell`` with its :class:`TraceSummary` from ``trace``."""
    return replace(cell, trace=summarize_cell(trace, trace_file, cell, family))


# ---- counters ------------------------------------------------------------------------------------

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
