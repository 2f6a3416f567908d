"""Compile the run's JIT kernels once, in parallel processes, before anything is timed.

FlashInfer JIT-compiles a CUDA module on a backend's first ``prepare()`` for each configuration it has not built
before (18–21 s for the tensor-core decode module, 62–64 s for a batch-prefill module per head_dim on an H200
machine: NOTES, issue 23). Compiled inside the run, one after another, those builds were most of a fresh machine's
main job. Here every distinct configuration the run needs is prepared once in a process of its own, all at once
(at most ``max_procs``); each build lands in FlashInfer's cache directory, where the run's own ``prepare()`` finds
it (and the next run on the machine too).

A backend opts in by declaring ``jit_fields``: the :class:`~profattn.workload.Workload` attributes that decide which
module its ``prepare()`` builds (e.g. dtype, KV dtype, head_dim). Two workloads equal in those fields share one
build, so one of them — the one with the fewest requested bytes — is prepared. A backend without ``jit_fields``
compiles nothing ahead. A target that fails or times out is reported and left to the run: its cells prepare (and
fail, if they must) as they always did.

The child process is ``python -m profattn.harness.prewarm BACKEND SPEC`` (SPEC: a ``--workload`` text).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from profattn.backends import Backend
    from profattn.workload import Workload

#: At most this many children at once (each JIT build runs its own compiler processes).
MAX_PROCS = 8
#: A target still compiling after this many seconds is stopped (the run then prepares it in-process).
TIMEOUT_S = 240.0


@dataclass(frozen=True)
class PrewarmTarget:
    """One build: ``backend`` prepared on ``workload`` (the smallest of those sharing its ``jit_fields`` values)."""

    backend: str
    workload: "Workload"


@dataclass(frozen=True)
class PrewarmResult:
    """What one target's child did: ``status`` is ``ok``, ``unsupported``, ``failed`` or ``timeout``; ``seconds`` wall."""

    target: PrewarmTarget
    status: str
    seconds: float
    detail: str


def jit_targets(backends: Iterable["Backend"], workloads: Iterable["Workload"], device_type: str) -> list[PrewarmTarget]:
    """The distinct builds the run's ``backends`` need for ``workloads``: one target per backend and distinct value of
    its ``jit_fields``, keeping the workload with the fewest ``requested_bytes``; none on a CPU (nothing compiles
    there), none for a backend without ``jit_fields`` or for a workload its ``unsupported_reason`` refuses."""
    if device_type != "cuda":
        return []
    import torch

    device = torch.device(device_type)
    ws = list(workloads)
    out: list[PrewarmTarget] = []
    for b in backends:
        fields = tuple(getattr(b, "jit_fields", ()) or ())
        if not fields:
            continue
        chosen: dict[tuple, Workload] = {}
        for w in ws:
            if w.is_context_parallel or b.unsupported_reason(w, device) is not None:
                continue
            key = tuple(getattr(w, f) for f in fields)
            if key not in chosen or w.requested_bytes < chosen[key].requested_bytes:
                chosen[key] = w
        out.extend(PrewarmTarget(b.name, w) for w in chosen.values())
    return out


def prewarm(targets: Sequence[PrewarmTarget], *, max_procs: int = MAX_PROCS, timeout_s: float = TIMEOUT_S,
            python: str = sys.executable) -> list[PrewarmResult]:
    """Prepare every target in a child process, at most ``max_procs`` at once; wait for all (each at most
    ``timeout_s`` seconds, wall, from its start). Returns one :class:`PrewarmResult` per target, in order.
    Never raises for a child that fails: its result says so."""
    from profattn.workload.spec import workload_spec

    results: dict[int, PrewarmResult] = {}
    queue = list(enumerate(targets))
    running: list[tuple[int, subprocess.Popen, float, IO[str]]] = []
    while queue or running:
        while queue and len(running) < max(1, max_procs):
            i, t = queue.pop(0)
            log = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # a file, not a pipe: a chatty
            # build never blocks on a full pipe
            proc = subprocess.Popen([python, "-m", "profattn.harness.prewarm", t.backend, workload_spec(t.workload)],
                                    stdout=log, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)  # its own process group: a time-out stops the compilers too
            running.append((i, proc, time.perf_counter(), log))
        time.sleep(0.05)
        still = []
        for i, proc, t0, log in running:
            elapsed = time.perf_counter() - t0
            if proc.poll() is None and elapsed < timeout_s:
                still.append((i, proc, t0, log))
                continue
            status = None
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                status = "timeout"
            log.seek(0)
            line = _last_line(log.read())
            log.close()
            if status is None:
                status = ("ok" if proc.returncode == 0 and not line.startswith("unsupported")
                          else "unsupported" if proc.returncode == 0 else "failed")
            results[i] = PrewarmResult(targets[i], status, elapsed, line)
        running = still
    return [results[i] for i in range(len(targets))]


def _last_line(text: str | None) -> str:
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _child(argv: Sequence[str]) -> int:
    """``python -m profattn.harness.prewarm BACKEND SPEC``: prepare BACKEND on SPEC on the GPU; exit 0 when it
    prepared (last line ``prepared``) or refused (``unsupported: …``), 1 when it failed."""
    if len(argv) != 2:
        print("usage: python -m profattn.harness.prewarm BACKEND WORKLOAD_SPEC", file=sys.stderr)
        return 2
    import torch

    from profattn.backends import Unsupported, get_backend
    from profattn.workload.spec import parse_workload_spec

    try:
        get_backend(argv[0]).prepare(parse_workload_spec(argv[1]), torch.device("cuda"))
        torch.cuda.synchronize()
    except Unsupported as exc:
        print(f"unsupported: {exc}")
        return 0
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which carries on
        print(f"{type(exc).__name__}: {exc}")
        return 1
    print("prepared")
    return 0


if __name__ == "__main__":
    raise SystemExit(_child(sys.argv[1:]))
