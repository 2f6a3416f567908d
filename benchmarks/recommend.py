"""``profattn recommend`` against a 100,000-cell results store: how long an answer takes.

Builds a synthetic store (``--cells`` cells: workloads over batch × kv_len × heads × head_dim × page size × dtype,
four backends each, times from a made-up cost model — the numbers only have to be plausible, not true) in a
temporary file, then times, in this process (no interpreter start-up, no click):

* an exact hit (a measured workload: one index lookup, the ranking, the winner's evidence);
* a prediction with the policy cached in the store (``db import``, ``profile``'s store hook and ``db forget``
  derive the policy after writing, so this is what every ``recommend`` costs);
* deriving the policy from every cell on the GPU (the cost those writes add);
* the export's policy with its leave-one-slice-out validation (``--validate``: one fit per held-out slice).

Usage: ``python benchmarks/recommend.py [--cells 100000] [--validate]``. Target: an answer in under 0.3 s end to end (the command-line start included; see README).
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profattn.analysis.selection.recommend import policy_for, recommend  # noqa: E402
from profattn.results import Environment, RunResult  # noqa: E402
from profattn.results import CellResult, Correctness, Timing  # noqa: E402
from profattn.store import measurements, open_store  # noqa: E402
from profattn.workload import Workload  # noqa: E402

BACKENDS = ("triton-paged-decode", "sdpa-cudnn", "sdpa-flash", "torch-paged-reference")


def synthetic_run(n_cells: int, seed: int = 0) -> RunResult:
    """A run of about ``n_cells`` decode cells on an H200-like GPU (132 SMs)."""
    rng = random.Random(seed)
    env = Environment(device="cuda", device_name="Synthetic GPU", num_sms=132, l2_cache_bytes=None,
                      total_memory_bytes=None, driver=None, torch="2.11", cuda="13.0", cudnn="91900", triton="3.6",
                      python="3.12", platform="Linux", profattn="0.1.0", created_utc="2026-12-01T00:00:00Z")
    grid = itertools.product((1, 2, 4, 8, 16, 32, 64, 128, 256), tuple(int(256 * 1.5 ** i) for i in range(19)),
                             ((8, 1), (16, 4), (32, 8), (64, 8), (32, 32)), (64, 128, 256), (16, 32, 64, 128, 256),
                             ("bfloat16", "float16"))
    cells = []
    for b, kv, (hq, hkv), d, page, dtype in grid:
        w = Workload(phase="decode", batch=b, q_len=1, kv_len=kv, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
                     dtype=dtype, kv_layout="paged", page_size=page)
        fill = min(1.0, b * hkv / 132)
        base = 2 * b * hkv * kv * d * 2 / 4.0e12 * 1e6 + 4.0  # bytes / 4 TB/s + launch, µs
        for name in BACKENDS:
            factor = {"triton-paged-decode": 1.0 if fill < 1 else 1.08, "sdpa-cudnn": 1.0 / max(fill, 0.35),
                      "sdpa-flash": 1.25 / max(fill, 0.5), "torch-paged-reference": 2.5}[name]
            t = base * factor * rng.uniform(0.98, 1.02)
            cells.append(CellResult(cell_id=f"{w.tag}.{name}", workload=w, backend=name, family=name, status="ok",
                                    correctness=Correctness(1e-3, 2e-2, True, "fp32"),
                                    timing=Timing(t * 1.1, t * 1.08, t * 1.12, t * 1.07, 100, "synthetic"),
                                    graph_timing=Timing(t, t * 0.99, t * 1.01, t * 0.98, 100, "synthetic")))
            if len(cells) >= n_cells:
                return RunResult(env, "synthetic", "benchmarks/recommend.py", tuple(cells))
    return RunResult(env, "synthetic", "benchmarks/recommend.py", tuple(cells))


def best_of(fn, repeat: int = 5) -> float:
    """Fastest of ``repeat`` calls, seconds."""
    out = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=100_000)
    ap.add_argument("--validate", action="store_true", help="also time the leave-one-workload-out validation")
    args = ap.parse_args()
    run = synthetic_run(args.cells)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "bench.sqlite")
        t = time.perf_counter()
        rows = measurements(run)
        store.add_run(run, tmp, cells=rows)
        print(f"store: {len(rows):,} cells in {time.perf_counter() - t:.1f} s ({(Path(tmp) / 'bench.sqlite').stat().st_size / 1e6:.1f} MB)")
        gpu = "Synthetic GPU"
        hit = run.cells[len(run.cells) // 2].workload
        miss = Workload(phase="decode", batch=24, q_len=1, kv_len=12000, num_q_heads=32, num_kv_heads=8, head_dim=128,
                        kv_layout="paged", page_size=16)
        t = time.perf_counter()
        first = recommend(store, miss, gpu)
        derive_s = time.perf_counter() - t
        exact_s = best_of(lambda: recommend(store, hit, gpu))
        cached_s = best_of(lambda: recommend(store, miss, gpu))
        print(f"exact hit ({recommend(store, hit, gpu).status.value}): {exact_s * 1e3:.1f} ms")
        print(f"predicted, policy cached ({first.status.value}: {first.best}): {cached_s * 1e3:.1f} ms")
        print(f"deriving the policy from {len(rows):,} cells (once per write, cached): {derive_s:.2f} s")
        policy = policy_for(store, gpu)
        anchors = sum(len(m.anchors) for m in policy.models.models.values())
        print(f"policy: {len(policy.models.models)} cost models over {policy.workloads:,} workloads, {anchors:,} anchors; "
              f"cached JSON {len(store.cached_policy(gpu) or ''):,} characters")
        if args.validate:
            from profattn.analysis.selection.policy import derive

            t = time.perf_counter()
            p = derive(store.cells_on(gpu), gpu, lowo=False)
            pooled = p.validation.pooled
            print(f"validation ({pooled.n:,} held out over {len(p.validation.slices)} slices): {time.perf_counter() - t:.1f} s; "
                  f"{pooled.hits}/{pooled.answered} hit")
        store.close()


if __name__ == "__main__":
    main()
