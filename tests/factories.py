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


def gqa_run() -> RunResult:
    """A synthetic ``gqa``-shaped run (decode, B=8, Hq=32, d=128, bf16, paged 16; Hkv 32 / 8 / 1 at kv 512 and 8192)
    with a read roof of 4,603 GB/s and hand-picked medians (µs) for sdpa-cudnn and eager — picked for the rules, not
    physics (the Hkv-32 kv-512 call at 8.0 µs would stream 8,405 GB/s, above the roof):

    - kv 8192, sdpa-cudnn: Hkv 32 219.24, Hkv 8 60.9 (a 3.6× saving at 4,410 GB/s: bandwidth-bound), Hkv 1 12.0;
      counters at Hkv 8: 270,000,000 B read + 65,536 written (1.01× requested, not flagged);
    - kv 512, sdpa-cudnn: 8.0 / 7.9 / 7.8 (Hkv 8 within 2 % of Hkv 32: no saving; launch-bound at its 7.8 floor);
    - kv 8192, eager: 1,100 / 1,090 / 1,085 (within noise) with counters at Hkv 8 of 1,342,177,280 B read +
      1,073,741,824 written (K/V expanded to 32 heads: 9.00× requested, flagged);
    - kv 512, eager: 40 / 42 / 38 (Hkv 8 slower beyond noise; launch-bound at its 38.0 floor).
    """
    from dataclasses import replace

    from profattn.results import Ceilings, CounterSummary, CountersInfo
    from profattn.workload import Workload

    def w(kv: int, hkv: int) -> Workload:
        return Workload(phase="decode", batch=8, q_len=1, kv_len=kv, num_q_heads=32, num_kv_heads=hkv, head_dim=128,
                        kv_layout="paged", page_size=16)

    def counted(c: CellResult, read: int, write: int) -> CellResult:
        return replace(c, counters=CounterSummary(dram_read_bytes=read, dram_write_bytes=write, l2_to_sm_read_bytes=read,
                                                  l1_global_load_bytes=None, gpu_time_us=None, kernels=()))

    lat = {("sdpa-cudnn", 512): (8.0, 7.9, 7.8), ("sdpa-cudnn", 8192): (219.24, 60.9, 12.0),
           ("eager", 512): (40.0, 42.0, 38.0), ("eager", 8192): (1100.0, 1090.0, 1085.0)}
    cells = []
    for kv in (512, 8192):
        for b in ("sdpa-cudnn", "eager"):
            for h, t in zip((32, 8, 1), lat[(b, kv)]):
                c = cell(w(kv, h), b, t, family="cudnn" if b == "sdpa-cudnn" else "dense")
                if (b, kv, h) == ("sdpa-cudnn", 8192, 8):
                    c = counted(c, 270_000_000, 65_536)
                if (b, kv, h) == ("eager", 8192, 8):
                    c = counted(c, 1_342_177_280, 1_073_741_824)
                cells.append(c)
    return replace(run(cells), preset="gqa", ceilings=Ceilings(4000.0, 2 << 30, 790.0, 8192, "bfloat16", "test", read_gbps=4603.0),
                   counters_info=CountersInfo("measured", ncu_version="test", cache_control="all", replay_mode="kernel",
                                               clock_control="base", wall_s=12.0))


# ---- simulate: a step-cost source with a known price, and a small simulation -------------------------------


class LinearAttention:
    """A step-cost source (``profattn.analysis.simulation.stepcost.StepCostSource``) whose attention takes ``us_per_token[b]``
    µs per K/V token read (decode) or per query row (prefill) of backend ``b``, in one layer."""

    name = "linear (test)"

    def __init__(self, us_per_token: dict[str, float]) -> None:
        self.us = us_per_token

    def attention_us(self, backend, part, calls):  # noqa: ANN001, ANN201
        import numpy as np

        from profattn.analysis.simulation.stepcost import AttentionEstimate, CallPart

        x = calls.kv_tokens if part is CallPart.DECODE else calls.q_tokens
        return AttentionEstimate(np.asarray(x, dtype=np.float64) * self.us[backend] + np.zeros(calls.k), 0, 0.0)

    def provenance(self, backend, part):  # noqa: ANN001, ANN201
        from profattn.analysis.simulation.stepcost import Provenance, Validation

        return Provenance(self.name, backend, part, 1, ("run",), (1, 1), (1, 1), 1.0, 0.0,
                          Validation(0, None, None, None, None))


def simulation(us_per_token: dict[str, float], decoders=("A", "B"), *, search: bool = True, blocks: int = 3000,
               scale: float = 2.0, sample: int = 6):
    """``profattn.analysis.simulation.simulate.simulate`` of the committed 400-request slice at ``scale`` × its rate on a small
    model, one deployment per decode backend (each paired with prefill backend ``P``), priced by
    :class:`LinearAttention`."""
    from pathlib import Path

    from profattn.analysis.simulation.replay import SLO, BackendPair, Deployment
    from profattn.analysis.simulation.scheduler import SchedulerConfig, kv_capacity
    from profattn.analysis.simulation.simulate import simulate
    from profattn.analysis.simulation.stepcost import AttentionShape, RestOfStep
    from profattn.results import Ceilings
    from profattn.workload.models import parse_model_spec
    from profattn.workload.requests import load_requests

    model = parse_model_spec("layers=4,hq=8,hkv=2,d=64,hidden=512,intermediate=1024,vocab=1000")
    shape = AttentionShape.of_model(model)
    ceil = Ceilings(copy_gbps=100.0, copy_bytes=0, matmul_tflops=10.0, matmul_n=0, dtype="bfloat16", method="t",
                    read_gbps=100.0)
    tr = load_requests(Path(__file__).resolve().parent / "data" / "requests" / "azure_conv_first400.csv").scaled(scale)
    cfg = SchedulerConfig(num_gpu_blocks=blocks, max_num_batched_tokens=2048, max_num_seqs=64, block_size=16)
    cap = kv_capacity(model, block_size=16, kv_budget_tokens=blocks * 16)
    deps = [Deployment(BackendPair(d, "P"), cfg, cap) for d in decoders]
    return simulate(tr, deps, {None: LinearAttention(us_per_token)}, model, rest={None: RestOfStep(model, ceil, 2048, 64)},
                    shapes={None: shape}, slo=SLO(ttft_s=0.5, tpot_s=0.02), search=search, resolution=0.05,
                    sample=sample, gpu="test GPU", ceilings=ceil)


def drive(s, dt: float = 0.01):
    """Run the scheduler ``s`` (:class:`~profattn.analysis.simulation.scheduler.Scheduler`) to the end, each step
    ``dt`` s long, yielding every plan before it completes."""
    now = 0.0
    while not s.done:
        s.arrive(now)
        p = s.schedule(now)
        if p is None:
            now = s.next_arrival()
            continue
        yield p
        s.complete(p, now + dt)
        now += dt
