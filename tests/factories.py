"""Input factories shared by tests: synthetic cells and runs with known numbers."""

from __future__ import annotations

from profattn.results import (
    CellResult, CellStatus, Correctness, Environment, KernelLaunch, RunResult, Timing, TraceSummary,
)
from profattn.workload import get_preset

SEED = get_preset("seed")


def environment(device: str = "cuda", num_sms: int | None = 132) -> Environment:
    return Environment(
        device=device, device_name="NVIDIA H200" if device == "cuda" else "x86_64", num_sms=num_sms,
        l2_cache_bytes=None, total_memory_bytes=None, driver=None, torch="2.11.0", cuda="13.0", cudnn=None,
        triton=None, python="3.12", platform="Linux x86_64", profattn="0.1.0", created_utc="2026-11-29T00:00:00Z",
    )


def kernel(name: str, ctas: int, dur_us: float, grid=None) -> KernelLaunch:
    return KernelLaunch(name=name, count_per_call=1, dur_us_per_call=dur_us, grid=grid or (ctas, 1, 1), block=(128, 1, 1),
                        registers_per_thread=128, shared_mem_bytes=1024, ctas=ctas, blocks_per_sm=ctas / 132, est_occupancy_pct=10)


def cell(workload, backend: str, latency_us: float | None, *, status: str = CellStatus.OK, family: str = "flash",
         kernels=(), family_ok: bool | None = True, err: float = 3e-3, reason: str = "") -> CellResult:
    timing = Timing(latency_us, latency_us * 0.98, latency_us * 1.02, latency_us * 0.97, 50, "test") if latency_us else None
    trace = None
    if kernels:
        total = sum(k.dur_us_per_call for k in kernels)
        trace = TraceSummary(
            trace_file="traces/x.pt.trace.json.gz", calls=3, kernels_per_call=len(kernels), gpu_time_per_call_us=total,
            ctas_per_call=sum(k.ctas for k in kernels), ctas_per_sm=sum(k.ctas for k in kernels) / 132,
            dominant_kernel=kernels[0].name, dominant_share=kernels[0].dur_us_per_call / total, kernels=tuple(kernels),
            family_ok=family_ok, family_note="test",
        )
    corr = Correctness(err, 2e-2, err <= 2e-2, "fp32") if timing else None
    return CellResult(
        cell_id=f"{workload.tag}.{backend}", workload=workload, backend=backend, family=family, status=status,
        reason=reason, correctness=corr, timing=timing, trace=trace,
    )


def run(cells, *, device: str = "cuda") -> RunResult:
    return RunResult(environment=environment(device), preset="seed", preset_description=SEED.description, cells=tuple(cells))


def repeated(c: CellResult, samples_us, *, graph: bool = False) -> CellResult:
    """``c`` with one timing sample per entry of ``samples_us`` (µs medians; the first becomes ``timing``)."""
    from dataclasses import replace

    ts = tuple(Timing(s, s * 0.98, s * 1.02, s * 0.97, 50, "test") for s in samples_us)
    if graph:
        return replace(c, graph_timing=ts[0], graph_timing_repeats=ts)
    return replace(c, timing=ts[0], timing_repeats=ts)


def with_repeat(r: RunResult, n: int) -> RunResult:
    from dataclasses import replace

    return replace(r, repeat=n)
