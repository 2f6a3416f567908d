"""Read-only streaming kernels: the read-bandwidth ceiling a decode kernel is held against.

A decode step reads its K/V once and writes almost nothing, so the device-to-device copy (which pays for
as many bytes written as read) is the wrong roof: vendor decode kernels read faster than a copy moves
data. The read ceiling is the fastest of a few read-only streams over a buffer many times the L2, each
reducing what it reads to one value per program (so writes are negligible):

* ``torch-sum``: ``torch.sum`` of an fp32 buffer (PyTorch's reduction kernel).
* ``triton-grid``: one program per ``block_bytes`` chunk (a grid of tens of thousands of programs; the
  hardware keeps as many in flight as fit), 16-byte vector loads, optionally ``.cg`` (bypass L1).
* ``triton-persistent``: ``programs_per_sm × SMs`` programs, each striding over the buffer with
  ``unroll`` independent loads per iteration (more bytes in flight per SM).

Bytes counted: the buffer's size (read once); GB/s with GB = 1e9. Timing: CUDA events, median of reps
(:func:`profattn.harness.timing.time_cuda`; the L2 flush between reps is irrelevant next to a buffer of
gigabytes but keeps the method the same).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StreamConfig:
    """One read-stream variant (see the module docstring)."""

    kind: str  #: "torch-sum", "triton-grid" or "triton-persistent"
    block_bytes: int = 0  #: bytes one program loads per step
    num_warps: int = 4
    unroll: int = 1  #: independent loads per loop iteration (persistent only)
    programs_per_sm: int = 0  #: persistent only
    cache: str = ""  #: "" or ".cg"

    @property
    def label(self) -> str:
        if self.kind == "torch-sum":
            return "torch-sum"
        extra = f" ppsm{self.programs_per_sm} x{self.unroll}" if self.kind == "triton-persistent" else ""
        return f"{self.kind} {self.block_bytes // 1024}KiB w{self.num_warps}{extra}{' ' + self.cache if self.cache else ''}"


#: Variants a run tries for its read ceiling (the best of them is kept). On the H200 (4 GiB buffer, 67
#: variants, ``examples/h200-seed/benchmark_read_ceiling.txt``): a grid of 64 KiB programs with 8 warps read
#: 4,697 GB/s, 32 KiB 4,690, 16 KiB 4,677; the best persistent grid 4,649; ``torch.sum`` 4,463; the copy
#: moved 4,263 GB/s (read + write).
DEFAULT_CONFIGS: tuple[StreamConfig, ...] = (
    StreamConfig("triton-grid", block_bytes=65536, num_warps=8),
    StreamConfig("triton-grid", block_bytes=32768, num_warps=8),
    StreamConfig("triton-grid", block_bytes=16384, num_warps=4),
    StreamConfig("torch-sum"),
)


@functools.lru_cache(maxsize=1)
def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def grid_read(x_ptr, out_ptr, n, BLOCK: tl.constexpr, CG: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        if CG:
            x = tl.load(x_ptr + offs, mask=offs < n, other=0, cache_modifier=".cg")
        else:
            x = tl.load(x_ptr + offs, mask=offs < n, other=0)
        tl.store(out_ptr + pid, tl.sum(x, axis=0))

    @triton.jit
    def persistent_read(x_ptr, out_ptr, n, BLOCK: tl.constexpr, UNROLL: tl.constexpr, CG: tl.constexpr):
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        acc = tl.zeros([BLOCK], dtype=tl.int32)
        step = nprog.to(tl.int64) * BLOCK * UNROLL
        start = pid.to(tl.int64) * BLOCK * UNROLL
        for base in range(start, n, step):
            for u in tl.static_range(UNROLL):
                offs = base + u * BLOCK + tl.arange(0, BLOCK)
                if CG:
                    acc += tl.load(x_ptr + offs, mask=offs < n, other=0, cache_modifier=".cg")
                else:
                    acc += tl.load(x_ptr + offs, mask=offs < n, other=0)
        tl.store(out_ptr + pid, tl.sum(acc, axis=0))

    return grid_read, persistent_read


def stream_fn(buf: torch.Tensor, cfg: StreamConfig):
    """A zero-argument callable that reads all of ``buf`` (int32, 1-D, on CUDA) once with variant ``cfg``.

    Raises:
        ValueError: an unknown ``cfg.kind``.
    """
    n = buf.numel()
    if cfg.kind == "torch-sum":
        f = buf.view(torch.float32)
        out = torch.empty((), dtype=torch.float32, device=buf.device)
        return lambda: torch.sum(f, dim=0, out=out)
    grid_read, persistent_read = _kernels()
    block = cfg.block_bytes // 4
    cg = cfg.cache == ".cg"
    if cfg.kind == "triton-grid":
        programs = -(-n // block)
        out = torch.empty(programs, dtype=torch.int32, device=buf.device)
        return lambda: grid_read[(programs,)](buf, out, n, BLOCK=block, CG=cg, num_warps=cfg.num_warps)
    if cfg.kind == "triton-persistent":
        sms = torch.cuda.get_device_properties(buf.device).multi_processor_count
        programs = cfg.programs_per_sm * sms
        out = torch.empty(programs, dtype=torch.int32, device=buf.device)
        return lambda: persistent_read[(programs,)](buf, out, n, BLOCK=block, UNROLL=cfg.unroll, CG=cg,
                                                    num_warps=cfg.num_warps)
    raise ValueError(f"unknown stream kind {cfg.kind!r}")


def read_buffer(device: torch.device, nbytes: int) -> torch.Tensor:
    """A 1-D int32 buffer of ``nbytes`` (rounded down to 4) filled with random bits (never zeros)."""
    return torch.randint(-(2**31), 2**31 - 1, (nbytes // 4,), dtype=torch.int32, device=device)
