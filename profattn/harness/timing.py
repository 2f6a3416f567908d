"""Latency and peak memory of one cell.

CUDA: ``triton.testing.do_bench`` (CUDA events around each rep, its 256 MB buffer zeroed before every
rep, so the L2 is flushed and cache-resident KV cannot inflate bandwidth; see triton/testing.py),
median and spread of all reps. CPU: ``time.perf_counter`` around each call after warm-up.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Callable, Sequence

import torch

from profattn.results import Timing


def _summarize(samples_us: Sequence[float], method: str) -> Timing:
    s = sorted(samples_us)
    q = statistics.quantiles(s, n=10, method="inclusive") if len(s) >= 2 else [s[0]] * 9
    return Timing(
        median_us=statistics.median(s), p10_us=q[0], p90_us=q[-1], min_us=s[0], reps=len(s), method=method
    )


def time_cuda(fn: Callable[[], object], *, grad_to_none: Sequence[torch.Tensor] | None = None,
              min_reps: int = 20, target_ms: float = 300.0) -> Timing:
    """Median latency of ``fn`` on the current CUDA device, L2 flushed before each rep.

    A short first ``do_bench`` estimates one call; the second asks for enough wall time to hold at
    least ``min_reps`` reps (capped at 5 s). Units: µs.

    Raises:
        ImportError: triton is not installed (it ships with CUDA builds of torch).
    """
    from triton.testing import do_bench

    est_ms = do_bench(fn, warmup=10, rep=20, grad_to_none=grad_to_none, return_mode="median")
    rep_ms = min(max(target_ms, min_reps * est_ms * 1.2), 5000.0)
    times_ms = do_bench(fn, warmup=max(25, 3 * est_ms), rep=rep_ms, grad_to_none=grad_to_none, return_mode="all")
    return _summarize([t * 1e3 for t in times_ms], "CUDA events (triton.testing.do_bench), L2 flushed before each rep")


def time_cpu(fn: Callable[[], object], *, before: Callable[[], None] | None = None,
             warmup: int = 2, min_reps: int = 5, max_reps: int = 100, target_s: float = 0.3) -> Timing:
    """Median wall time of ``fn`` on the CPU (perf_counter), µs. ``before`` runs untimed before each call."""
    for _ in range(warmup):
        if before:
            before()
        fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < min_reps or (len(samples) < max_reps and time.perf_counter() - start < target_s):
        if before:
            before()
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    return _summarize(samples, "time.perf_counter after warm-up (CPU)")


def peak_memory(fn: Callable[[], object], device: torch.device) -> tuple[int | None, int | None]:
    """(peak allocated bytes during one call, peak minus bytes allocated before it) on CUDA.

    ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``; ``(None, None)`` on CPU, where
    PyTorch keeps no such counter (the report says "n/a" rather than guess).
    """
    if device.type != "cuda":
        return None, None
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    return int(peak), int(peak - base)
