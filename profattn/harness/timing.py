"""Latency and peak memory of one cell.

CUDA: CUDA events around each rep after warm-up, the L2 evicted before every rep by reading a 256 MB
buffer, so cache-resident KV cannot inflate bandwidth; median and spread of all reps. This is
``triton.testing.do_bench``'s method except for the flush (do_bench zero-fills its buffer, which leaves
the L2 dirty: see :func:`l2_flusher`) and the host's stalls: a GPU spin before each rep's start event keeps
the host ahead, so the events time the kernels alone, and the host's own time per call is measured beside them
(:func:`time_cuda`). CPU: ``time.perf_counter`` around each call after warm-up.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import replace
from typing import Callable, ContextManager, Sequence

import torch

from profattn.results import Timing


def summarize(samples_us: Sequence[float], method: str) -> Timing:
    """A :class:`Timing` (median, p10, p90, min, count) of timed samples (µs); ``method`` says how they were taken.

    Raises:
        IndexError: no sample.
    """
    s = sorted(samples_us)
    q = statistics.quantiles(s, n=10, method="inclusive") if len(s) >= 2 else [s[0]] * 9
    return Timing(
        median_us=statistics.median(s), p10_us=q[0], p90_us=q[-1], min_us=s[0], reps=len(s), method=method
    )


_summarize = summarize


#: Bytes of the buffer read between reps to evict the L2 (H200 L2: 60 MB; triton's do_bench uses 256 MB).
FLUSH_BYTES = 256 << 20
_FLUSH: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def l2_flusher(device: torch.device, mode: str = "read") -> Callable[[], None]:
    """A callable that evicts the L2 before a timed rep.

    ``read`` (default) sums a 256 MB buffer: the L2 is left holding clean lines, which the timed kernel
    evicts for free. ``write`` zeroes the buffer, as ``triton.testing.do_bench`` does: the L2 is left
    full of dirty lines, so the timed kernel also pays for writing up to 60 MB back to DRAM — about 14 µs
    at 4.3 TB/s, which caps every decode kernel near the same time (measured on the H200, see NOTES.md).
    """
    if mode not in ("read", "write"):
        raise ValueError(f"flush mode must be 'read' or 'write', got {mode!r}")
    if device not in _FLUSH:
        _FLUSH[device] = (torch.ones(FLUSH_BYTES // 4, dtype=torch.float32, device=device),
                          torch.empty((), dtype=torch.float32, device=device))
    buf, out = _FLUSH[device]
    if mode == "write":
        return buf.zero_
    return lambda: torch.sum(buf, dim=0, out=out)


#: The spin before each timed rep lasts this many times the longest host time per call (:data:`HOST_CALLS`), plus
#: :data:`SPIN_PAD_US` (µs), and at most :data:`MAX_SPIN_US`.
SPIN_FACTOR = 2.0
SPIN_PAD_US = 20.0
MAX_SPIN_US = 20_000.0
#: Calls timed on the host alone, each from an idle GPU (:attr:`~profattn.results.Timing.host_us` is their median).
HOST_CALLS = 11
_CYCLES_PER_US: dict[torch.device, float] = {}


def spin_cycles_per_us(device: torch.device) -> float:
    """Clock cycles per µs of ``torch.cuda._sleep`` on ``device``, measured once (a 1 ms-long spin timed by CUDA
    events; the SM clock the spin counts differs from the nominal one under boost)."""
    if device not in _CYCLES_PER_US:
        cycles = 2_000_000
        torch.cuda._sleep(cycles // 10)  # warm the spin kernel
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        torch.cuda._sleep(cycles)
        t1.record()
        torch.cuda.synchronize()
        _CYCLES_PER_US[device] = cycles / max(t0.elapsed_time(t1) * 1e3, 1.0)
    return _CYCLES_PER_US[device]


def time_cuda(fn: Callable[[], object], *, grad_to_none: Sequence[torch.Tensor] | None = None,
              min_reps: int = 20, target_ms: float = 300.0, flush: str = "read",
              before: Callable[[], None] | None = None, hide_host: bool = True) -> Timing:
    """Median latency of ``fn`` on the current CUDA device, the L2 evicted before each rep (µs), and the host's
    time to issue one call (:attr:`~profattn.results.Timing.host_us`).

    Method (as ``triton.testing.do_bench``, with a clean-line flush instead of its zero-fill, see
    :func:`l2_flusher`): warm up, estimate one call, then time ``reps`` calls, each between its own pair of
    CUDA events recorded after the flush, enough reps for ``target_ms`` of GPU time *including the flush*
    (at least ``min_reps``, at most 10 000, capped at 5 s). ``before`` (like ``grad_to_none``) runs untimed before every call.

    Host stalls hidden: after each flush a GPU spin (``torch.cuda._sleep``) of :data:`SPIN_FACTOR` × the longest
    host time per call (the :data:`HOST_CALLS` below; + :data:`SPIN_PAD_US`) holds the stream, so the call's kernels are queued
    before its start event fires and the events time the GPU work alone — without it a call whose host side
    (Python dispatch, autograd, a library's graph lookup) outlasts the flush is timed with the host's stall inside
    (Speechmatics, "Timing operations in PyTorch", 2023, on ``torch.cuda._sleep`` for exactly this). The host's
    own time is measured beside it: ``time.perf_counter`` around :data:`HOST_CALLS` calls after warm-up, each issued
    to an idle GPU (synchronized first; in the timed loop the full launch queue would pace the host at the GPU's
    rate), the median of them; the spin is sized by the longest.
    ``hide_host=False`` leaves the spin out (the method of schema ≤ 3 runs: ``benchmarks/host_stall.py`` compares).
    """
    device = torch.device("cuda", torch.cuda.current_device())
    evict = l2_flusher(device, flush)

    def reset() -> None:
        if grad_to_none:
            for t in grad_to_none:
                t.grad = None
        if before is not None:
            before()

    def once() -> None:
        reset()
        fn()

    once()
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(5):
        once()
    t1.record()
    torch.cuda.synchronize()
    est_ms = max(t0.elapsed_time(t1) / 5, 1e-3)
    for _ in range(max(1, min(int(25 / est_ms), 1000))):  # ~25 ms of warm-up
        once()
    # The host's time to issue one call, each timed from an idle GPU: in a loop that runs ahead of the GPU the launch
    # queue fills and the host's time per call becomes the GPU's (back-pressure), which is not the host's own cost.
    host: list[float] = []
    for _ in range(HOST_CALLS):
        reset()
        torch.cuda.synchronize()
        h = time.perf_counter()
        fn()
        host.append((time.perf_counter() - h) * 1e6)
    torch.cuda.synchronize()
    spin_us = min(SPIN_FACTOR * max(host) + SPIN_PAD_US, MAX_SPIN_US) if hide_host else 0.0
    cycles = int(spin_us * spin_cycles_per_us(device)) if hide_host else 0
    # What one timed rep costs on the GPU's timeline: the flush, the spin, the call (a 12 µs decode kernel costs
    # ~90 µs a rep with the 256 MB flush; budgeting by the call alone made every decode sample 10 000 reps and ~1 s).
    t0.record()
    for _ in range(5):
        evict()
        if cycles:
            torch.cuda._sleep(cycles)
        once()
    t1.record()
    torch.cuda.synchronize()
    rep_ms = max(t0.elapsed_time(t1) / 5, est_ms)
    reps = int(min(max(min_reps, target_ms / rep_ms), 10_000, max(min_reps, 5000 / rep_ms)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        reset()
        evict()
        if cycles:
            torch.cuda._sleep(cycles)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    hidden = (f", host stalls hidden by a {spin_us:.0f} µs GPU spin before each start event" if cycles else
              ", no GPU spin (host stalls longer than the flush are timed)")
    t = _summarize(samples, f"CUDA events per rep after warm-up, L2 evicted before each rep ({flush} flush of 256 MB){hidden}")
    return replace(t, host_us=statistics.median(host))


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


def time_cpu_pair(calls: Sequence[tuple[Callable[[], object], Callable[[], ContextManager[object]], Callable[[], None] | None]],
                  *, warmup: int = 2, min_reps: int = 5, max_reps: int = 100, target_s: float = 0.6) -> tuple[Timing, Timing]:
    """Two calls timed alternately on the CPU, rep by rep — ``a, b, b, a, a, b, …`` (the order flips every pair, so
    neither call always runs second) — each rep inside its own backend context (entered and left outside the timed
    window) with its ``before`` untimed: one :class:`Timing` per call from reps taken at the same moments, so a load
    burst or a frequency change hits both alike (an A/B round: :func:`profattn.harness.session.ab_rounds`).
    ``calls``: two ``(fn, context, before)``. Stops after ``min_reps`` pairs once ``target_s`` has passed, or at
    ``max_reps`` pairs."""
    (fa, ca, ba), (fb, cb, bb) = calls

    def once(fn: Callable[[], object], ctx: Callable[[], ContextManager[object]], before: Callable[[], None] | None) -> float:
        with ctx():
            if before:
                before()
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e6

    for _ in range(warmup):
        once(fa, ca, ba)
        once(fb, cb, bb)
    sa: list[float] = []
    sb: list[float] = []
    start = time.perf_counter()
    while len(sa) < min_reps or (len(sa) < max_reps and time.perf_counter() - start < target_s):
        if len(sa) % 2 == 0:
            sa.append(once(fa, ca, ba))
            sb.append(once(fb, cb, bb))
        else:
            sb.append(once(fb, cb, bb))
            sa.append(once(fa, ca, ba))
    method = "time.perf_counter after warm-up (CPU), reps alternating with the other side of the A/B pair"
    return _summarize(sa, method), _summarize(sb, method)


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


def capture_graph(fn: Callable[[], object], device: torch.device, *, warmup_calls: int = 3) -> "torch.cuda.CUDAGraph":
    """A CUDA graph holding one call of ``fn``; ``warmup_calls`` calls run first on a side stream, as
    ``torch.cuda.graphs`` requires.

    Raises:
        RuntimeError: the call cannot be captured (e.g. it synchronizes with the host).
    """
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(warmup_calls):
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize(device)
    return graph


def time_cuda_graph(fn: Callable[[], object], device: torch.device, *, warmup_calls: int = 3, flush: str = "read",
                    target_ms: float = 300.0) -> Timing:
    """Median latency of replaying a CUDA graph that captured one call of ``fn`` (:func:`capture_graph`), L2
    flushed before each replay (:func:`time_cuda`, ``target_ms`` of GPU time) — how a serving engine runs decode
    steps (no per-kernel launch cost).

    Raises:
        RuntimeError: the call cannot be captured (e.g. it synchronizes with the host).
    """
    graph = capture_graph(fn, device, warmup_calls=warmup_calls)
    timing = time_cuda(graph.replay, flush=flush, target_ms=target_ms)
    return replace(timing, method="CUDA-graph replay, CUDA events per replay, L2 evicted before each "
                                  f"({flush} flush of 256 MB), host stalls hidden as in time_cuda")
