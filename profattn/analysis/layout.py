"""Which cache layout a cell's kernel read: the one place the analysis answers it. Torch-free.

A paged workload's K/V live in a page pool addressed through a block table (``workload.paged``). The paged
kernels read that pool; the dense kernels (SDPA, cuDNN, FlexAttention's dense path, eager) cannot, so the harness
hands them a contiguous ``[B, Hkv, L, d]`` copy made outside the timed window — their time leaves out what getting
that copy costs a server, which ``torch-paged-reference`` (gather + SDPA) measures. A variable-length call reaches a
packed-layout backend as packed rows (``[Σ len, H, d]``: jagged nested tensors, FlashInfer's ragged prefill).

Backends do not declare what they read yet, so :func:`cache_layout` derives it from the backend's name (the built-in
backends below) and the workload; a backend it does not know (a plugin) reads an unknown layout (None). When the
backends declare their interface, this function reads the declaration instead and nothing else changes.
"""

from __future__ import annotations

from enum import Enum

from profattn.results import CellResult
from profattn.workload import KVLayout, Workload


class CacheLayout(Enum):
    """What a kernel read its K/V from."""

    CONTIGUOUS = "contiguous"  #: dense ``[B, Hkv, L, d]`` (on a paged workload: a copy made outside the timing)
    PAGED = "paged"  #: the page pool through the block table
    PACKED = "packed"  #: packed rows ``[Σ len, H, d]`` with cumulative offsets (variable-length calls)


#: Built-in backends that read the page pool through the block table (``torch-paged-reference`` gathers it first,
#: inside its timed call).
PAGED_READERS = frozenset({
    "triton-paged-decode", "triton-paged-prefill", "flex-paged-decode", "torch-paged-reference",
    "flashinfer-decode", "flashinfer-decode-tc", "flashinfer-prefill-paged",
})
#: Built-in backends that read a variable-length call as packed rows.
PACKED_READERS = frozenset({"sdpa-nested", "flashinfer-prefill-ragged"})
#: Built-in backends that read contiguous K/V (a paged workload's copy).
CONTIGUOUS_READERS = frozenset({"sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "eager", "flex"})
#: The backend whose call is gather + SDPA: its layout-copy kernels are what a dense kernel costs on a paged cache.
GATHER_BACKEND = "torch-paged-reference"


def cache_layout(backend: str, workload: Workload) -> CacheLayout | None:
    """The layout ``backend``'s kernel read on ``workload``: the page pool (:attr:`CacheLayout.PAGED`) for the paged
    backends on a paged workload; packed rows for the packed backends on a variable-length call; contiguous K/V
    otherwise (on a paged workload, the harness's copy). None for a backend profattn does not know (a plugin)."""
    if backend in PAGED_READERS:
        return CacheLayout.PAGED if workload.kv_layout is KVLayout.PAGED else CacheLayout.CONTIGUOUS
    if backend in PACKED_READERS:
        return CacheLayout.PACKED if workload.is_varlen else CacheLayout.CONTIGUOUS
    if backend in CONTIGUOUS_READERS:
        return CacheLayout.CONTIGUOUS
    return None


def cell_layout(cell: CellResult) -> CacheLayout | None:
    """:func:`cache_layout` of a cell."""
    return cache_layout(cell.backend, cell.workload)


#: Built-in SDPA backends that pass a sliding window or a variable-length call's per-sequence lengths to SDPA as an
#: explicit boolean mask (which SDPA path then runs is read from the trace).
MASKED_SDPA_BACKENDS = frozenset({"sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"})


def passes_explicit_mask(backend: str, workload: Workload) -> bool:
    """Whether ``backend`` hands ``workload``'s window or per-sequence lengths to SDPA as an explicit boolean mask."""
    return backend in MASKED_SDPA_BACKENDS and (workload.window is not None or workload.is_varlen)
