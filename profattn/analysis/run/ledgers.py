"""Byte and FLOP ledgers of one cell: what the workload requests against what was measured.

Typed records only; the report layer turns them into text (:func:`profattn.report.verdict.ledger_note`).
"""

from __future__ import annotations

from collections.abc import Sequence
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
    return summed_ledger([cell])


def summed_ledger(cells: "Sequence[CellResult]") -> ByteLedger:
    """One :class:`ByteLedger` over ``cells`` run one after another (a prompt's chunks): requested, K/V and scale
    bytes summed; a measured sum only when every cell has that counter (a counter some cell lacks stays missing, so
    its ratio and flag are unknown, never a partial sum)."""
    ws = [c.workload for c in cells]
    req = sum(w.requested_bytes for w in ws)
    kv = sum(w.kv_bytes for w in ws)
    scales = sum(t.bytes_total for w in ws for t in w.traffic() if t.name in ("k_scale", "v_scale"))
    cs = [c.counters for c in cells]
    if any(c is None for c in cs):
        return ByteLedger(req, kv, None, None, None, None, None, None, None, scales)

    def total(field: str) -> float | None:
        vals = [getattr(c, field) for c in cs]
        return None if any(v is None for v in vals) else sum(vals)

    dram, dram_read, l2 = total("dram_bytes"), total("dram_read_bytes"), total("l2_to_sm_read_bytes")
    dram_ratio = dram / req if dram is not None else None
    l2_ratio = l2 / req if l2 is not None else None
    redundant = dram_ratio > REDUNDANT_DRAM_RATIO if dram_ratio is not None else None
    l2_rereads = ((not redundant) and l2_ratio > L2_REREAD_RATIO
                  if redundant is not None and l2_ratio is not None else None)
    return ByteLedger(req, kv, dram, dram_read, l2, dram_ratio, l2_ratio, redundant, l2_rereads, scales)


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
