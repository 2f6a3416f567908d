"""A run as a table: one flat row per cell (:meth:`profattn.results.RunResult.to_pandas`)."""

from __future__ import annotations

from typing import Any

from profattn.results.records import CellResult, KernelLaunch

#: Columns of :meth:`RunResult.to_pandas`, in order. Units in the names: ``_us`` µs, ``_bytes`` bytes,
#: ``_gbps`` GB/s (1e9 B/s), ``_tflops`` TFLOP/s (1e12 FLOP/s), ``_per_s`` per second.
CELL_COLUMNS: tuple[str, ...] = (
    "cell_id", "tag", "phase", "batch", "q_len", "kv_len", "num_q_heads", "num_kv_heads", "head_dim", "dtype",
    "mask", "kv_layout", "page_size", "kv_len_dist", "kv_len_seed", "shared_prefix_len",
    "backend", "family", "status", "error",
    "latency_us", "eager_median_us", "graph_median_us", "gpu_time_us",
    "tokens_per_s", "achieved_gbps", "achieved_tflops", "kv_gbps", "flops", "requested_bytes", "kv_bytes",
    "peak_mem_bytes", "out_rel_err", "correct",
    "kernels_per_call", "dominant_kernel", "dominant_share", "dominant_grid", "dominant_block",
    "dominant_registers_per_thread", "dominant_shared_mem_bytes", "dominant_ctas", "dominant_ctas_per_sm",
    "dram_bytes",
)
#: Integer columns of :meth:`RunResult.to_pandas` (nullable ``Int64``: ``<NA>`` when unknown).
CELL_INT_COLUMNS: tuple[str, ...] = (
    "batch", "q_len", "kv_len", "num_q_heads", "num_kv_heads", "head_dim", "page_size", "kv_len_seed",
    "shared_prefix_len", "flops", "requested_bytes", "kv_bytes", "peak_mem_bytes", "dominant_registers_per_thread",
    "dominant_shared_mem_bytes", "dominant_ctas",
)


def dominant_launch(cell: CellResult) -> KernelLaunch | None:
    """The :class:`KernelLaunch` of the cell's dominant kernel (most GPU time per call), or None without a
    trace or a dominant kernel."""
    t = cell.trace
    if t is None or t.dominant_kernel is None:
        return None
    return next((k for k in t.kernels if k.name == t.dominant_kernel), None)


def cell_row(cell: CellResult) -> dict[str, Any]:
    """One cell as a flat dict keyed by :data:`CELL_COLUMNS` (plain Python values, None when unknown).

    Workload fields as in ``results.json`` (enums as their text); ``status`` the cell outcome;
    ``error`` the reason of an ``error`` or ``unsupported`` cell (else None). ``latency_us`` the
    figure the cell is judged on (graph replay where captured, else eager); ``eager_median_us`` and
    ``graph_median_us`` the two medians; ``gpu_time_us`` summed kernel time per call from the trace.
    ``tokens_per_s``, ``achieved_gbps`` (requested bytes of the workload's byte ledger / latency),
    ``achieved_tflops`` (the FLOP ledger / latency) and ``kv_gbps`` (K/V bytes / latency) from
    ``latency_us``. ``flops``, ``requested_bytes``, ``kv_bytes``: the workload's ledgers for one call.
    ``dominant_*``: the dominant kernel's name, share of the cell's GPU time (0..1), ``grid``/``block``
    ``(x, y, z)`` tuples, registers per thread, shared memory (bytes), CTAs per launch and CTAs per SM
    (Kineto's ``blocks per SM``). ``dram_bytes``: DRAM read + write from Nsight Compute, None without
    counters.
    """
    w = cell.workload
    t = cell.trace
    k = dominant_launch(cell)
    status = getattr(cell.status, "value", cell.status)
    return {
        "cell_id": cell.cell_id,
        "tag": w.tag,
        "phase": w.phase.value,
        "batch": w.batch,
        "q_len": w.q_len,
        "kv_len": w.kv_len,
        "num_q_heads": w.num_q_heads,
        "num_kv_heads": w.num_kv_heads,
        "head_dim": w.head_dim,
        "dtype": w.dtype,
        "mask": w.mask.value,
        "kv_layout": w.kv_layout.value,
        "page_size": w.page_size,
        "kv_len_dist": w.kv_len_dist,
        "kv_len_seed": w.kv_len_seed,
        "shared_prefix_len": w.shared_prefix_len,
        "backend": cell.backend,
        "family": cell.family,
        "status": status,
        "error": (cell.reason or None) if status in ("error", "unsupported") else None,
        "latency_us": cell.latency_us,
        "eager_median_us": cell.timing.median_us if cell.timing else None,
        "graph_median_us": cell.graph_timing.median_us if cell.graph_timing else None,
        "gpu_time_us": t.gpu_time_per_call_us if t else None,
        "tokens_per_s": cell.tokens_per_s,
        "achieved_gbps": cell.achieved_gbps,
        "achieved_tflops": cell.achieved_tflops,
        "kv_gbps": cell.kv_gbps,
        "flops": w.flops,
        "requested_bytes": w.requested_bytes,
        "kv_bytes": w.kv_bytes,
        "peak_mem_bytes": cell.peak_mem_bytes,
        "out_rel_err": cell.correctness.out_rel_err if cell.correctness else None,
        "correct": cell.correctness.passed if cell.correctness else None,
        "kernels_per_call": t.kernels_per_call if t else None,
        "dominant_kernel": t.dominant_kernel if t else None,
        "dominant_share": t.dominant_share if t else None,
        "dominant_grid": k.grid if k else None,
        "dominant_block": k.block if k else None,
        "dominant_registers_per_thread": k.registers_per_thread if k else None,
        "dominant_shared_mem_bytes": k.shared_mem_bytes if k else None,
        "dominant_ctas": k.ctas if k else None,
        "dominant_ctas_per_sm": k.blocks_per_sm if k else None,
        "dram_bytes": cell.counters.dram_bytes if cell.counters else None,
    }
