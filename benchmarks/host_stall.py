"""Benchmark: how much of a CUDA-event latency is the host's stall, per (workload, backend) — GPU only.

Each cell is timed ``--rounds`` times both ways by :func:`profattn.harness.timing.time_cuda`: with the host's stalls
hidden (a GPU spin before each rep's start event, the method of results schema 4) and without (schema ≤ 3: the flush
alone before the start event, so a call whose host side outlasts the 256 MB flush is timed with the host inside).
Prints, per cell, the medians' range over the rounds each way, the host's time per call, and the spread
(max / min of the round medians): a method whose rounds of one cell differ by 2× is timing the host, not the kernel.

    python benchmarks/host_stall.py --workload SPEC [--workload SPEC ...] [--backend NAME ...] [--rounds 5]
                                    [--json PATH]

Exits 2 with one line for a bad spec or backend, or without CUDA.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's profattn, run from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))

from oneline_args import Parser, fail, new_file_problem  # noqa: E402


def measure(specs: list[str], backends: list[str], rounds: int) -> list[dict]:
    """Rows {workload, backend, hidden_us: [round medians], exposed_us: [...], host_us, status} (µs); a backend
    that refuses a workload gets its reason and no times."""
    import torch

    from profattn.backends import Unsupported, get_backend
    from profattn.backends.base import call_shape_reason
    from profattn.harness.cell import bind_calls
    from profattn.harness.inputs import make_inputs
    from profattn.harness.timing import time_cuda
    from profattn.workload.spec import parse_workload_spec

    device = torch.device("cuda", torch.cuda.current_device())
    rows = []
    for spec in specs:
        w = parse_workload_spec(spec)
        inputs = make_inputs(w, device, seed=0)
        for name in backends:
            backend = get_backend(name)
            row: dict = {"workload": spec, "backend": name}
            reason = call_shape_reason(backend, w) or backend.unsupported_reason(w, device)  # as run_cell asks
            try:
                if reason:
                    raise Unsupported(reason)
                prepared = backend.prepare(w, device)
                with prepared.context():
                    calls = bind_calls(prepared, w, inputs)
                    before = calls.zero_grads if calls.grads is not None else None
                    hidden, exposed, host = [], [], []
                    for _ in range(rounds):  # interleaved, so drift in clocks or load hits both ways alike
                        t = time_cuda(calls.timed, before=before)
                        hidden.append(t.median_us)
                        host.append(t.host_us)
                        exposed.append(time_cuda(calls.timed, before=before, hide_host=False).median_us)
                row.update(status="ok", hidden_us=hidden, exposed_us=exposed, host_us=statistics.median(host))
            except Unsupported as exc:
                row.update(status=f"unsupported: {exc}")
            inputs.zero_grads()
            rows.append(row)
            print(_line(row), flush=True)
        del inputs
        torch.cuda.empty_cache()
    return rows


def _line(r: dict) -> str:
    if r["status"] != "ok":
        return f"{r['backend']:<16} {r['workload']}: {r['status']}"
    h, e = r["hidden_us"], r["exposed_us"]
    return (f"{r['backend']:<16} hidden {statistics.median(h):9.1f} µs ({min(h):.1f}–{max(h):.1f}, spread "
            f"{max(h) / min(h):.2f}×)  exposed {statistics.median(e):9.1f} µs ({min(e):.1f}–{max(e):.1f}, spread "
            f"{max(e) / min(e):.2f}×)  host {r['host_us']:7.1f} µs  {r['workload']}")


def main() -> int:
    ap = Parser(prog="host_stall.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", action="append", required=True, help="workload spec (repeatable)")
    ap.add_argument("--backend", action="append", help="backend name (repeatable; default sdpa-cudnn, sdpa-flash)")
    ap.add_argument("--rounds", type=int, default=5, help="timings per cell each way (default 5)")
    ap.add_argument("--json", type=Path, help="also write the rows here (a new file)")
    args = ap.parse_args()
    import torch

    from profattn.backends import get_backend
    from profattn.errors import ProfattnError
    from profattn.workload.spec import parse_workload_spec

    if args.rounds < 1:
        fail(ap.prog, f"--rounds must be at least 1, got {args.rounds}")
    if args.json is not None and (why := new_file_problem(args.json, "--json")):
        fail(ap.prog, why)
    backends = args.backend or ["sdpa-cudnn", "sdpa-flash"]
    try:
        for spec in args.workload:
            parse_workload_spec(spec)
        for name in backends:
            get_backend(name)
    except (ProfattnError, ValueError, KeyError) as exc:
        fail(ap.prog, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    if not torch.cuda.is_available():
        fail(ap.prog, "needs a CUDA device (the host's stall is a CUDA-event effect)")
    rows = measure(args.workload, backends, args.rounds)
    if args.json is not None:
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
