"""Benchmark: each backend model's leave-one-out error on latency against the same on the trace's GPU time.

Per (backend, regime) of the committed GPU runs: the model fitted on latency (what the selection policy fits) and on
the trace's GPU time per call (the kernels alone).

Small dense calls — training steps above all — are often launch-bound: their latency is mostly host dispatch and
launch gaps, not kernel time (``benchmarks/heldout.py score`` lists them). A model of such latencies cannot pass the
policy's 25 % leave-one-out gate, so no pick is made there; this prints whether the same model on GPU time would.
The fit, the features and the leave-one-out protocol are :mod:`profattn.analysis.selection.costmodel`'s; only the
target changes. CPU, seconds.

    python benchmarks/loo_target.py [--exclude DIR ...] [--phase train prefill] [--min-workloads 3]
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's profattn, run from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))

from profattn.analysis.selection.costmodel import MIN_LOO_WORKLOADS, Sample, fit, sample  # noqa: E402
from profattn.errors import ProfattnError  # noqa: E402
from oneline_args import Parser, fail  # noqa: E402
from selection import add_gpu_option, committed_runs, one_gpu_store  # noqa: E402


def loo_by_target(runs: list[Path], phases: tuple[str, ...], min_workloads: int = MIN_LOO_WORKLOADS,
                  skipped: list[tuple[str, str, str]] | None = None) -> list[dict]:
    """Per (backend, regime) of ``phases`` with at least ``min_workloads`` workloads whose every cell has a trace GPU
    time: the leave-one-out median and worst (fractions) of the model fitted on latency and on GPU time. The groups
    left out are appended to ``skipped`` as (backend, regime key, why).

    Raises:
        ProfattnError: the runs hold no or several GPUs.
    """
    with one_gpu_store(runs) as (store, gpu):
        memo: dict = {}
        groups: dict[tuple[str, str], list[tuple[Sample, float | None]]] = {}
        for c in store.cells_on(gpu):
            s = sample(c, memo=memo)
            if s is not None and s.regime.key.split("/")[0] in phases:
                groups.setdefault((s.backend, s.regime.key), []).append((s, c.gpu_time_us))
    out = []
    for (backend, key), rows in sorted(groups.items()):
        n = len({s.key for s, _ in rows})
        missing = sum(g is None or g <= 0 for _, g in rows)
        if missing or n < min_workloads:
            if skipped is not None:
                skipped.append((backend, key, f"{missing} of its {len(rows)} cells have no trace GPU time" if missing
                                else f"{n} workloads, fewer than {min_workloads}"))
            continue
        lat = fit(backend, rows[0][0].regime, [s for s, _ in rows])
        kern = fit(backend, rows[0][0].regime, [replace(s, latency_us=g) for s, g in rows])
        out.append(dict(backend=backend, regime=key, workloads=len({s.key for s, _ in rows}),
                        latency=(lat.loo_median, lat.loo_worst), gpu=(kern.loo_median, kern.loo_worst)))
    return out


def main() -> int:
    ap = Parser(prog=Path(__file__).name, description=__doc__.splitlines()[0])
    ap.add_argument("--exclude", nargs="*", type=Path, default=[], help="run folders left out of the store")
    ap.add_argument("--phase", nargs="+", default=["train", "prefill"], choices=["train", "prefill", "decode"])
    ap.add_argument("--min-workloads", type=int, default=MIN_LOO_WORKLOADS)
    add_gpu_option(ap)
    a = ap.parse_args()
    if a.min_workloads < MIN_LOO_WORKLOADS:
        fail("loo_target", f"--min-workloads is at least {MIN_LOO_WORKLOADS} (a leave-one-out error is checked from "
             f"{MIN_LOO_WORKLOADS} workloads), not {a.min_workloads}")
    try:
        skipped: list[tuple[str, str, str]] = []
        rows = loo_by_target(committed_runs(a.exclude, a.gpu), tuple(a.phase), a.min_workloads, skipped)
    except ProfattnError as exc:
        fail("loo_target", str(exc))
    print("| backend | regime | workloads | LOO on latency (median / worst) | LOO on GPU time (median / worst) |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['backend']} | {r['regime']} | {r['workloads']} | {r['latency'][0]:.1%} / {r['latency'][1]:.0%} | "
              f"{r['gpu'][0]:.1%} / {r['gpu'][1]:.0%} |")
    if skipped:
        print(f"\nleft out ({len(skipped)}: a model on GPU time needs every cell's trace):")
        for backend, key, why in skipped:
            print(f"  {backend} {key}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
