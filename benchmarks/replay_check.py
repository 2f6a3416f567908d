"""The simulator's step prices against a GPU replay of the same steps: priced vs measured per part.

``profattn simulate --export-steps steps.txt`` writes sampled step shapes (each step whole, its decode part and its
prefill part, as ``--workload`` text), and ``simulation.json``'s ``sampled_steps`` holds each deployment's priced
attention per layer for each part (``priced_us_per_layer``: deployment → part → µs). A ``profattn profile`` of those
shapes with the deployments' backends (the replay) measures them. This script pairs every priced part with the cell
of the same workload and the backend that part runs on (the deployment's decode backend for a decode part, its
prefill backend for a prefill part) and prints one Markdown row per pair: priced µs, measured µs (the median of the
cell's repeat samples, ``latency_samples_us``: the CUDA-graph replay where captured), measured / priced, and whether
the cell's kernels were read from a trace; then the median and worst ratio and how many pairs lie within 10 % and
25 %. A part whose cell is missing, pending or failed is listed as "not measured", never dropped silently.

Usage: ``python benchmarks/replay_check.py SIMULATION_JSON RUN_DIR`` (exit 2 on unreadable input).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profattn.errors import ProfattnError  # noqa: E402
from profattn.results import read_results  # noqa: E402
from profattn.workload.spec import parse_workload_spec  # noqa: E402


def pairs(simulation: dict, run) -> list[dict]:  # noqa: ANN001
    """One record per (sampled step, deployment, part): priced and measured µs per layer (measured None when the
    replay has no timed cell of it)."""
    deployments = {d["deployment"]: (d["decode_backend"], d["prefill_backend"]) for d in simulation["deployments"]}
    cells = {c.cell_id: c for c in run.cells}
    out = []
    for step in simulation["sampled_steps"]:
        for dep, parts in step["priced_us_per_layer"].items():
            decode_b, prefill_b = deployments[dep]
            for part, priced in parts.items():
                tag = parse_workload_spec(step["workloads"][part]).tag
                backend = decode_b if part == "decode" else prefill_b
                c = cells.get(f"{tag}.{backend}")
                samples = c.latency_samples_us if c is not None and c.status == "ok" else ()
                out.append(dict(step=step["index"], kind=step["kind"], part=part, backend=backend, tag=tag, priced=priced,
                                measured=statistics.median(samples) if samples else None, samples=len(samples),
                                traced=c is not None and c.trace is not None,
                                status=str(c.status) if c is not None else "not in the run"))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python benchmarks/replay_check.py SIMULATION_JSON RUN_DIR", file=sys.stderr)
        return 2
    try:
        simulation = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
        if not isinstance(simulation, dict) or simulation.get("schema") != "profattn.simulation":
            raise ProfattnError(f"{argv[0]} is not a profattn simulation.json")
        run = read_results(argv[1])
        rows = pairs(simulation, run)
        for r in rows:  # a price must be a positive finite number of µs
            if not isinstance(r["priced"], (int, float)) or not 0 < r["priced"] < float("inf"):
                raise ProfattnError(f"step {r['step']}: priced {r['priced']!r} µs is not a positive number")
            r["step"] = int(r["step"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ProfattnError) as exc:
        print(f"replay_check: {argv[0]}: {type(exc).__name__ if not str(exc) else exc}".splitlines()[0], file=sys.stderr)
        return 2
    # the same shape and backend priced the same in two deployments (a prefill part): one row
    rows = list({(r["tag"], r["backend"], round(r["priced"], 3)): r for r in rows}.values())
    print("| step | part | backend | priced µs | measured µs (samples) | measured / priced | kernels read |")
    print("|---|---|---|---:|---:|---:|---|")
    for r in rows:
        if r["measured"] is None:
            print(f"| {r['step']:,} {r['kind']} | {r['part']} | {r['backend']} | {r['priced']:.1f} | not measured "
                  f"({r['status']}) | — | — |")
            continue
        print(f"| {r['step']:,} {r['kind']} | {r['part']} | {r['backend']} | {r['priced']:.1f} | {r['measured']:.1f} "
              f"({r['samples']}) | {r['measured'] / r['priced']:.2f} | {'yes' if r['traced'] else 'no (timed only)'} |")
    ratios = [r["measured"] / r["priced"] for r in rows if r["measured"] is not None]
    missing = len({(r["tag"], r["backend"]) for r in rows if r["measured"] is None})
    if ratios:
        within = lambda f: sum(abs(x - 1) <= f for x in ratios)  # noqa: E731
        print(f"\n{len(ratios)} priced parts measured ({missing} not): measured / priced median {statistics.median(ratios):.3f}, "
              f"min {min(ratios):.2f}, max {max(ratios):.2f}; {within(0.10)} within 10 %, {within(0.25)} within 25 %")
    else:
        print(f"\nno priced part was measured ({missing} not)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
