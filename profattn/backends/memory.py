"""Device memory: how much is free, and whether an allocation of a known size fits, checked *before*
anything is allocated so that a workload too large for the device becomes a one-line reason instead of an
out-of-memory error half-way through a run.

Sizes are bytes; figures in messages use decimal units (GB = 1e9, TB = 1e12) for the need and binary
units (GiB) for the device's memory, as ``nvidia-smi``/``free -g`` print them.
"""

from __future__ import annotations

import os

import torch

#: Fraction of the free memory a single cell may plan to use (the rest is left for the allocator's
#: fragmentation, the CUDA context, the L2 flush buffer and the profiler).
USABLE_FRACTION = 0.9


def free_bytes(device: torch.device) -> int | None:
    """Bytes that can be allocated on ``device`` now: ``torch.cuda.mem_get_info`` free memory plus what
    PyTorch's caching allocator holds but does not use (CUDA), or ``MemAvailable`` from ``/proc/meminfo``
    (CPU; ``os.sysconf`` available pages where there is no ``/proc``). None when it cannot be read."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + max(0, cached))
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def human_bytes(n: float) -> str:
    """``4.4 TB``, ``137 GB``, ``512 MB``: decimal units, 2 significant figures at least (for reasons)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            v = n / scale
            return f"{v:.2g} {unit}" if v < 10 else f"{v:.0f} {unit}"
    return f"{int(n)} B"


def fit_reason(need_bytes: int, device: torch.device, what: str) -> str | None:
    """None when ``need_bytes`` fits in :data:`USABLE_FRACTION` of the free memory of ``device``, else the
    reason, e.g. ``"inputs and reference need ~4.4 TB; cuda has 139 GiB free"``. Unknown free memory
    (None from :func:`free_bytes`) counts as fitting: the allocation itself then decides."""
    free = free_bytes(device)
    if free is None or need_bytes <= USABLE_FRACTION * free:
        return None
    return f"{what} need ~{human_bytes(need_bytes)}; {device.type} has {free / 2**30:.0f} GiB free"
