"""Start-up of the quick commands: ``profattn analyze`` of a small trace and ``profattn recommend``, end to end.

    python benchmarks/startup.py [--runs 7] [--trace TRACE]

Each command runs ``--runs`` times in a fresh process (the way a user runs it: interpreter start, imports, work,
output written); the table gives the median and the fastest wall time, the targets (analyze ≤ 0.6 s, recommend
≤ 0.3 s), the load average before and after (a loaded machine inflates every figure: say so when quoting them),
and what the command imports that costs most (``python -X importtime``, cumulative µs of the top-level packages).
The trace is ``--trace``, else a 4 MB trace written by ``benchmarks/many_calls_trace.py`` (2,000 SDPA calls of 2
kernels each). ``recommend`` answers from a store
the committed H200 runs are imported into (``examples/``), in a temporary directory; the first, untimed run of each
command fills the caches a user's first run fills (compiled templates, the gzipped plotly.js). A benchmark, not a
test: nothing here runs in CI.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = ("h200-sweep", "h200-serving", "h200-seed", "h200-seed-2026-12-01", "h200-gqa", "h200-variants",
            "h200-packed-train")
WORKLOAD = "phase=decode,b=64,q=1,kv=8192,hq=16,hkv=4,d=128,page=16"
TARGETS = {"analyze": 0.6, "recommend": 0.3}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "profattn.cli", *args]


def _time(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"startup.py: error: {' '.join(cmd[2:])} failed: {res.stderr.strip().splitlines()[-1:]}")
    return took


def _imports(cmd: list[str], env: dict[str, str], top: int = 6) -> str:
    """The costliest top-level imports of ``cmd`` (cumulative ms), from ``-X importtime``."""
    res = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], env=env, capture_output=True, text=True, check=False)
    rows = []
    for line in res.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (x.strip() for x in line.split(":", 1)[1].split("|"))
        if cumulative.isdigit() and not name.startswith(" ") and "." not in name:
            rows.append((int(cumulative), name))
    rows.sort(reverse=True)
    return ", ".join(f"{name} {us / 1000:.0f} ms" for us, name in rows[:top])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--trace", default=None, help="trace for analyze (default: a generated 4 MB trace)")
    args = ap.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        trace = Path(args.trace) if args.trace else work / "trace.json"
        if args.trace is None:
            sys.path.insert(0, str(REPO / "benchmarks"))
            from many_calls_trace import write_trace

            with open(trace, "w") as f:
                write_trace(f, 2_000, 2)
        gen_size = trace.stat().st_size
        db = work / "store.sqlite"
        subprocess.run(_cli("db", "import", *(str(REPO / "examples" / e) for e in EXAMPLES), "--db", str(db)), env=env,
                       capture_output=True, check=True)
        commands = {
            "analyze": _cli("analyze", str(trace), "--out", str(work / "analyze.html")),
            "recommend": _cli("recommend", "--workload", WORKLOAD, "--db", str(db)),
        }
        load_before = os.getloadavg()
        rows = []
        for name, cmd in commands.items():
            _time(cmd, env)  # fills the caches a first run fills
            times = [_time(cmd, env) for _ in range(args.runs)]
            rows.append((name, statistics.median(times), min(times), _imports(cmd, env)))
        load_after = os.getloadavg()
    size = trace.stat().st_size if args.trace else None
    print(f"profattn start-up, {args.runs} runs each, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; "
          f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after"
          + (f"; trace {size / 1e6:.1f} MB" if size else f"; trace: 2,000 generated SDPA calls ({gen_size / 1e6:.1f} MB)"))
    print(f"{'command':<10} {'median':>8} {'fastest':>8} {'target':>7}  costliest imports")
    for name, med, fast, imports in rows:
        print(f"{name:<10} {med:>7.2f}s {fast:>7.2f}s {TARGETS[name]:>6.1f}s  {imports}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
