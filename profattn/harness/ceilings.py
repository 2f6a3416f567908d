"""Ceilings measured on the same GPU in the same run: copy bandwidth, read-only streaming bandwidth and
dense GEMM rate."""

from __future__ import annotations

import torch

from profattn.harness.read_stream import DEFAULT_CONFIGS, read_buffer, stream_fn
from profattn.harness.timing import time_cuda
from profattn.results import Ceilings


def measure_ceilings(device: torch.device, *, copy_bytes: int = 2 << 30, read_bytes: int = 4 << 30, n: int = 8192,
                     dtype: str = "bfloat16") -> Ceilings | None:
    """Device-to-device copy of ``copy_bytes`` (GB/s counts bytes read + written, GB = 1e9), the fastest
    read-only stream over ``read_bytes`` (:mod:`profattn.harness.read_stream`; bytes read), and an
    ``n×n×n`` GEMM in ``dtype`` (2n³ FLOPs), each the median of :func:`~profattn.harness.timing.time_cuda`
    reps on random data. None on CPU.
    """
    if device.type != "cuda":
        return None
    copy_gbps = _copy_gbps(device, copy_bytes)
    read_gbps, read_label = _read_gbps(device, read_bytes)
    tflops = _matmul_tflops(device, n, getattr(torch, dtype))
    torch.cuda.empty_cache()
    return Ceilings(
        copy_gbps=copy_gbps, copy_bytes=copy_bytes, matmul_tflops=tflops, matmul_n=n, dtype=dtype,
        method="harness.timing.time_cuda median; copy counts read + write bytes; GEMM 2n^3 FLOPs; random data",
        read_gbps=read_gbps, read_bytes=read_bytes,
        read_method=f"fastest read-only stream: {read_label}" if read_label else "",
    )


def _read_gbps(device: torch.device, nbytes: int) -> tuple[float | None, str]:
    """(GB/s, variant label) of the fastest :data:`DEFAULT_CONFIGS` read stream; (None, "") where none ran."""
    buf = read_buffer(device, nbytes)
    best: tuple[float | None, str] = (None, "")
    for cfg in DEFAULT_CONFIGS:
        try:
            us = time_cuda(stream_fn(buf, cfg), min_reps=20, target_ms=200).median_us
        except Exception:  # noqa: BLE001 - e.g. no Triton: the other variants still measure
            continue
        gbps = buf.numel() * 4 / (us * 1e-6) / 1e9
        if best[0] is None or gbps > best[0]:
            best = (gbps, cfg.label)
    del buf
    return best


def _copy_gbps(device: torch.device, copy_bytes: int) -> float:
    src = torch.randn(copy_bytes // 2, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    copy_us = time_cuda(lambda: dst.copy_(src), min_reps=20, target_ms=300).median_us
    return 2 * copy_bytes / (copy_us * 1e-6) / 1e9


def _matmul_tflops(device: torch.device, n: int, dtype: torch.dtype) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    mm_us = time_cuda(lambda: torch.matmul(a, b), min_reps=50, target_ms=500).median_us
    return 2 * n**3 / (mm_us * 1e-6) / 1e12
