"""``profattn simulate`` on the one-hour Azure conversation trace: how long a simulation takes.

Imports the committed H200 runs into a temporary results store (or reads ``--db``), then, in this process (no
interpreter start-up, no click), replays the whole trace through the scheduler once per backend at the trace's
own rate — Llama-3-8B, the defaults of ``profattn simulate`` (block size 16, 8,192 batched tokens, 1,024
sequences, the H200's memory × 0.9) — and prints requests, steps, simulated seconds, wall and CPU seconds and
CPU seconds per simulated hour per backend, with the machine's load average before and after (CPU timings on a
shared machine: read them with the load). ``--search`` also times the rate search of ``simulate``'s default.

Usage: ``python benchmarks/simulate.py [--requests FILE] [--db PATH] [--backend NAME]... [--search]``.
Target: the whole trace for two backends in under 10 s on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profattn.analysis.simulation.rates import search_rate
from profattn.analysis.simulation.replay import SLO, BackendPair, Deployment, run_simulation  # noqa: E402
from profattn.analysis.simulation.scheduler import SchedulerConfig, kv_capacity  # noqa: E402
from profattn.cli.simulate import DEFAULT_PREFILL, simulation_inputs  # noqa: E402
from profattn.store import import_runs, open_store  # noqa: E402
from profattn.workload.models import MODELS  # noqa: E402
from profattn.workload.requests import load_requests  # noqa: E402

RUNS = ("h200-sweep", "h200-serving", "h200-seed", "h200-seed-2026-12-01", "h200-gqa", "h200-variants",
        "h200-packed-train", "h200-sweep-wave-rule", "h200-seed-wave-rule")
TRACE = REPO.parent / "shared" / "requests" / "azure-llm-2023-conv.csv"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=Path, default=TRACE, help="request trace CSV (default: the one-hour Azure trace)")
    ap.add_argument("--db", type=Path, default=None, help="results store (default: the committed H200 runs, imported now)")
    ap.add_argument("--backend", action="append", default=None, help="decode backends (default: triton-paged-decode, "
                    "flashinfer-decode-tc)")
    ap.add_argument("--search", action="store_true", help="also time the rate search")
    args = ap.parse_args()
    if not args.requests.is_file():
        print(f"benchmarks/simulate.py: error: no request trace at {args.requests} (give --requests)", file=sys.stderr)
        return 2
    backends = args.backend or ["triton-paged-decode", "flashinfer-decode-tc"]
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db
        if db is None:
            db = Path(tmp) / "results.sqlite"
            with open_store(db) as store:
                import_runs(store, [REPO / "examples" / r for r in RUNS])
        model = MODELS["llama-3-8b"]
        t = time.perf_counter()
        trace = load_requests(args.requests)
        gpu, _, _, memory, sources, rest, shapes = simulation_inputs(str(db), None, model, [None], 8192, 1024)
        setup = time.perf_counter() - t
        cap = kv_capacity(model, block_size=16, gpu_memory_bytes=memory)
        cfg = SchedulerConfig(num_gpu_blocks=cap.num_blocks)
        load0 = os.getloadavg()
        print(f"{len(trace):,} requests over {trace.duration_s:,.0f} s ({args.requests.name}), {model.label} on {gpu}; "
              f"read the trace and the store in {setup:.2f} s; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} "
              f"on {os.cpu_count()} CPUs")
        print(f"{'backend':<24} {'requests':>9} {'steps':>9} {'simulated s':>12} {'wall s':>8} {'CPU s':>7} "
              f"{'CPU s / simulated h':>20}")
        total_wall = total_cpu = 0.0
        for name in backends:
            d = Deployment(BackendPair(name, DEFAULT_PREFILL), cfg, cap)
            sources[None].provenance(name, "decode")  # the surfaces and their validation, outside the timing
            sources[None].provenance(DEFAULT_PREFILL, "prefill")
            w, c = time.perf_counter(), time.process_time()
            run = run_simulation(trace, d, sources[None], rest[None], model, shapes[None])
            w, c = time.perf_counter() - w, time.process_time() - c
            total_wall += w
            total_cpu += c
            print(f"{name:<24} {len(trace):>9,} {len(run.steps):>9,} {run.makespan_s:>12,.0f} {w:>8.2f} {c:>7.2f} "
                  f"{c / (run.makespan_s / 3600):>20.2f}")
            if args.search:
                w, c = time.perf_counter(), time.process_time()
                found = search_rate(lambda x, d=d: run_simulation(trace.scaled(x), d, sources[None], rest[None], model,
                                                                  shapes[None], slo=SLO(), stop_on_failure=True),
                                    trace, SLO(), first=run)
                w, c = time.perf_counter() - w, time.process_time() - c
                print(f"{'  + rate search':<24} {len(found.points) - 1:>6} runs, best {found.best_scale:.3g}× "
                      f"({found.best_rate_per_s:.3g} req/s) in {w:.2f} s wall, {c:.2f} s CPU")
        load1 = os.getloadavg()
        print(f"{'all':<24} {'':>9} {'':>9} {'':>12} {total_wall:>8.2f} {total_cpu:>7.2f}    "
              f"load average after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
