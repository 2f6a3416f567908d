"""Byte and FLOP ledgers of one cell: what the workload requests against what was measured.

Typed records only; the report layer turns them into text (:func:`profattn.report.verdict.ledger_note`).
"""

from __future__ import annotations

from dataclasses import dataclass

from profattn.results import CellResult, RunResult

#: DRAM traffic above this multiple of the requested bytes is flagged as redundant reads.
REDUNDANT_DRAM_RATIO = 1.2
#: L2→SM traffic above this multiple of the requested bytes means rereads served from L2.
L2_REREAD_RATIO = 1.5


@dataclass(frozen=True)
class ByteLedger:
    """Cache traffic of one call: requested (the workload's minimum) against measured.

    ``dram_ratio`` = DRAM bytes (read + write) / requested; ``l2_ratio`` = L2→SM read bytes / requested.
    ``redundant``: DRAM above :data:`REDUNDANT_DRAM_RATIO` × requested; ``l2_rereads``: L2→SM above
    :data:`L2_REREAD_RATIO` × requested while DRAM is not (rereads, e.g. per query head, served by L2).
    Measured fields are None when no counters were read — never estimated. ``scale_bytes``: a quantized
    cache's K and V scales (part of ``requested_bytes``, not of ``kv_bytes``, which counts K/V at the cache's
    bytes per element); 0 otherwise.
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
    scale_bytes: int = 0

    @property
    def measured(self) -> bool:
        """Counters were read for this cell (the measured fields are set)."""
        return self.dram_bytes is not None


def byte_ledger(cell: CellResult) -> ByteLedger:
    """The :class:`ByteLedger` of ``cell`` (requested only when it has no counters)."""
    w = cell.workload
    req = w.requested_bytes
    scales = sum(t.bytes_total for t in w.traffic() if t.name in ("k_scale", "v_scale"))
    c = cell.counters
    if c is None:
        return ByteLedger(req, w.kv_bytes, None, None, None, None, None, None, None, scales)
    # A counter some kernel lacks stays missing (None), so its ratio and flag are unknown, never a partial sum.
    dram_ratio = c.dram_bytes / req if c.dram_bytes is not None else None
    l2_ratio = c.l2_to_sm_read_bytes / req if c.l2_to_sm_read_bytes is not None else None
    redundant = dram_ratio > REDUNDANT_DRAM_RATIO if dram_ratio is not None else None
    l2_rereads = ((not redundant) and l2_ratio > L2_REREAD_RATIO
                  if redundant is not None and l2_ratio is not None else None)
    return ByteLedger(req, w.kv_bytes, c.dram_bytes, c.dram_read_bytes, c.l2_to_sm_read_bytes, dram_ratio, l2_ratio,
                      redundant, l2_rereads, scales)


@dataclass(frozen=True)
class FlopLedger:
    """Arithmetic of one call: FLOPs from query heads (GQA does not shrink them), achieved rate; ``dequant_ops``:
    a quantized cache's dequantization multiplies (``Workload.dequant_ops``), a line of their own, never in
    ``flops`` nor in the achieved rate."""

    flops: int
    achieved_tflops: float | None
    fraction_of_ceiling: float | None
    dequant_ops: int = 0
    #: FLOPs the backend executed when it padded a variable-length call (``CellResult.executed_pairs``, forward and
    #: for train backward: ``Workload.flops_for_pairs``); None when it computes only the call's own pairs. The rate
    #: stays ``flops`` (the work required) over the time.
    executed_flops: int | None = None


def flop_ledger(cell: CellResult, run: RunResult) -> FlopLedger:
    """The :class:`FlopLedger` of ``cell`` against the run's measured GEMM ceiling."""
    t = cell.achieved_tflops
    ceil = run.ceilings.matmul_tflops if run.ceilings else None
    pairs = cell.executed_pairs
    return FlopLedger(cell.workload.flops, t, t / ceil if t is not None and ceil else None, cell.workload.dequant_ops,
                      cell.workload.flops_for_pairs(pairs) if pairs is not None else None)
