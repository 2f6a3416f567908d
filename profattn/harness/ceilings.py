"""Ceilings measured on the same GPU in the same run: copy bandwidth and dense GEMM rate."""

from __future__ import annotations

import torch

from profattn.results import Ceilings


def measure_ceilings(device: torch.device, *, copy_bytes: int = 2 << 30, n: int = 8192, dtype: str = "bfloat16") -> Ceilings | None:
    """Device-to-device copy of ``copy_bytes`` (GB/s counts bytes read + written, GB = 1e9) and an
    ``n×n×n`` GEMM in ``dtype`` (2n³ FLOPs), each the median of ``triton.testing.do_bench`` reps on
    random data. None on CPU.
    """
    if device.type != "cuda":
        return None
    from triton.testing import do_bench

    src = torch.randn(copy_bytes // 2, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    copy_ms = do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    copy_gbps = 2 * copy_bytes / (copy_ms * 1e-3) / 1e9
    del src, dst
    dt = getattr(torch, dtype)
    a = torch.randn(n, n, device=device, dtype=dt)
    b = torch.randn(n, n, device=device, dtype=dt)
    mm_ms = do_bench(lambda: torch.matmul(a, b), warmup=100, rep=500, return_mode="median")
    tflops = 2 * n**3 / (mm_ms * 1e-3) / 1e12
    del a, b
    torch.cuda.empty_cache()
    return Ceilings(
        copy_gbps=copy_gbps, copy_bytes=copy_bytes, matmul_tflops=tflops, matmul_n=n, dtype=dtype,
        method="triton.testing.do_bench median; copy counts read + write bytes; GEMM 2n^3 FLOPs; random data",
    )
