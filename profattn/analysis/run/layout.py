"""Which cache layout a cell's kernel read: the one place the analysis answers it. Torch-free.

A paged workload's K/V live in a page pool addressed through a block table (``workload.paged``). The paged
kernels read that pool; the dense kernels (SDPA, cuDNN, FlexAttention's dense path, eager) cannot, so the harness
hands them a contiguous ``[B, Hkv, L, d]`` copy made outside the timed window — their time leaves out what getting
that copy costs a server, which ``torch-paged-reference`` (gather + SDPA) measures. A variable-length call reaches a
packed-layout backend as packed rows (``[Σ len, H, d]``: jagged nested tensors, FlashInfer's ragged prefill).

Each backend declares what its kernel reads (:class:`~profattn.interfaces.Adoption`, recorded on every cell since
it was introduced; older cells use the built-in declarations, :data:`profattn.interfaces.ADOPTIONS`), and
:func:`cache_layout` reads that declaration with the workload: a backend that reads a paged cache reads a dense
workload's contiguous tensors, one that reads packed rows reads a uniform call's dense tensors. A plugin that declares
nothing reads an unknown layout (None).
"""

from __future__ import annotations

from profattn.interfaces import Adoption, Layout, adoption_of
from profattn.results import CellResult
from profattn.workload import KVLayout, Workload


#: What a kernel read its K/V from: :class:`profattn.interfaces.Layout` (``CONTIGUOUS``: dense ``[B, Hkv, L, d]``, on a
#: paged workload a copy made outside the timing; ``PAGED``: the page pool through the block table; ``PACKED``: packed
#: rows ``[Σ len, H, d]`` with cumulative offsets). One enum for the backends' declarations and the analysis.
CacheLayout = Layout
#: The backend whose call is gather + SDPA: its layout-copy kernels are what a dense kernel costs on a paged cache.
GATHER_BACKEND = "torch-paged-reference"


def cache_layout(backend: str, workload: Workload, adoption: Adoption | None = None) -> CacheLayout | None:
    """The layout ``backend``'s kernel read on ``workload``, from its declared ``adoption`` (else the built-in
    declaration): the page pool (:attr:`CacheLayout.PAGED`) for a paged reader on a paged workload; packed rows for a
    packed reader on a variable-length call; contiguous K/V otherwise (on a paged workload, the harness's copy). None
    for a backend nobody declared (a plugin)."""
    a = adoption_of(backend, adoption)
    if a is None:
        return None
    if a.reads is Layout.PAGED:
        return CacheLayout.PAGED if workload.kv_layout is KVLayout.PAGED else CacheLayout.CONTIGUOUS
    if a.reads is Layout.PACKED:
        return CacheLayout.PACKED if workload.is_varlen else CacheLayout.CONTIGUOUS
    return CacheLayout.CONTIGUOUS


def cell_layout(cell: CellResult) -> CacheLayout | None:
    """:func:`cache_layout` of a cell (its recorded adoption, else the built-in one)."""
    return cache_layout(cell.backend, cell.workload, cell.adoption)


#: Built-in SDPA backends that pass a sliding window or a variable-length call's per-sequence lengths to SDPA as an
#: explicit boolean mask (which SDPA path then runs is read from the trace).
MASKED_SDPA_BACKENDS = frozenset({"sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn"})


def passes_explicit_mask(backend: str, workload: Workload) -> bool:
    """Whether ``backend`` hands ``workload``'s window or per-sequence lengths to SDPA as an explicit boolean mask."""
    return backend in MASKED_SDPA_BACKENDS and (workload.window is not None or workload.is_varlen)
