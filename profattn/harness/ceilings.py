"""Ceilings measured on the same GPU in the same run: copy bandwidth and dense GEMM rate."""

from __future__ import annotations

import torch

from profattn.harness.timing import time_cuda
from profattn.results import Ceilings


def measure_ceilings(device: torch.device, *, copy_bytes: int = 2 << 30, n: int = 8192, dtype: str = "bfloat16") -> Ceilings | None:
    """Device-to-device copy of ``copy_bytes`` (GB/s counts bytes read + written, GB = 1e9) and an
    ``n×n×n`` GEMM in ``dtype`` (2n³ FLOPs), each the median of :func:`~profattn.harness.timing.time_cuda`
    reps on random data. None on CPU.
    """
    if device.type != "cuda":
        return None
    copy_gbps = _copy_gbps(device, copy_bytes)
    tflops = _matmul_tflops(device, n, getattr(torch, dtype))
    torch.cuda.empty_cache()
    return Ceilings(
        copy_gbps=copy_gbps, copy_bytes=copy_bytes, matmul_tflops=tflops, matmul_n=n, dtype=dtype,
        method="harness.timing.time_cuda median; copy counts read + write bytes; GEMM 2n^3 FLOPs; random data",
    )


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
