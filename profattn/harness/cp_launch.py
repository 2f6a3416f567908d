"""Launching a context-parallel cell's ranks, and the cell made of what they measured.

:func:`launch_ranks` starts one process per rank (``python -m profattn.harness.cp_worker``) with torchrun's
environment — ``MASTER_ADDR=127.0.0.1``, a free ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` — so the
rank code is the one ``torchrun`` would run; NCCL on CUDA (one GPU per rank), gloo on a CPU. A rank that fails ends
the cell with one line (its own); the other ranks get ``grace_s`` to finish and are then terminated (a rank blocked
in a collective whose peer died never returns by itself); the whole launch is bounded by ``timeout_s``. Whatever a
rank wrote before (its timing samples and trace) is kept.

:func:`run_cp_cell` turns the ranks' files into one :class:`~profattn.results.CellResult`: the step time (per
repetition the slowest rank's, then the median), one :class:`~profattn.results.RankRecord` per rank from its trace
(:func:`profattn.analysis.calls.comm.rank_timeline`: compute, communication, overlap, idle, traced bytes) beside the
formula's bytes (:func:`profattn.workload.cp.cp_ledger`), the peak memory (the largest rank's), and rank 0's
correctness check of the gathered output and gradients.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from profattn.analysis.calls.comm import rank_timeline
from profattn.backends import Backend
from profattn.errors import ProfattnError
from profattn.harness.cp_schemes import TORCH_CP_BACKENDS, ring_backend, torch_cp_reason
from profattn.harness.timing import summarize
from profattn.results import CellResult, CellStatus, Correctness, RankRecord, RankStatus
from profattn.trace.kineto import load_trace
from profattn.workload import Workload
from profattn.workload.contract import CpScheme
from profattn.workload.cp import cp_ledger


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class LaunchOutcome:
    """What the ranks left for each cell ``i`` of the spec: ``results[i][r]`` (rank r's ``rank<r>.<i>.json``, or
    None), ``checks[i]`` (rank 0's ``check.<i>.json``, or None), ``unsupported[i]`` (the reason, or None); ``error``:
    None, or the one line that ended the launch (a rank's own error, prefixed ``rank r:``, or a time-out);
    ``failed_rank``: the rank that line is about (the first rank that failed, or the first still waiting at the
    time-out), None when the launch ended cleanly."""

    results: tuple[tuple[dict | None, ...], ...]
    checks: tuple[dict | None, ...]
    unsupported: tuple[str | None, ...]
    error: str | None
    failed_rank: int | None = None


def launch_ranks(spec: dict, ranks: int, work_dir: Path, *, timeout_s: float = 600.0, grace_s: float = 10.0,
                 env: dict[str, str] | None = None) -> LaunchOutcome:
    """Run ``ranks`` processes of :mod:`profattn.harness.cp_worker` on ``spec`` (its ``cells`` in order) in
    ``work_dir`` (module docstring).
    ``env`` is added to each rank's environment. Never raises for a failing rank; raises ``OSError`` only when a
    process cannot be started."""
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "spec.json").write_text(json.dumps(spec))
    port = free_port()
    procs = []
    for r in range(ranks):
        e = {**os.environ, **(env or {}), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
             "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(ranks),
             # NVLink multicast (NVLS) off unless asked for: the machines' notes require it
             "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE", "0")}
        log = open(work_dir / f"rank{r}.log", "wb")
        procs.append((subprocess.Popen([sys.executable, "-m", "profattn.harness.cp_worker", str(work_dir)], env=e,
                                       stdout=log, stderr=subprocess.STDOUT), log))
    start, deadline, stuck = time.monotonic(), None, None
    exited: set[int] = set()  # ranks that exited non-zero on their own (not the ones stopped below)
    try:
        while True:
            codes = [p.poll() for p, _ in procs]
            exited |= {r for r, c in enumerate(codes) if c not in (None, 0)}
            if exited and deadline is None:
                deadline = time.monotonic() + grace_s
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            if deadline is not None and now > deadline:
                break
            if now - start > timeout_s:
                if not exited:
                    stuck = [r for r, c in enumerate(codes) if c is None]
                break
            time.sleep(0.05)
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            log.close()
    error, failed = None, None
    if exited:
        # a peer's failure makes the other ranks fail too ("Connection closed by peer"): the cause is the rank whose
        # error was written first, which may have been found exited after the rank it brought down
        failed = first_failure(work_dir, sorted(exited))
        error = f"rank {failed}: {_rank_error(work_dir, failed, procs[failed][0].returncode)}"
    elif stuck:
        failed = stuck[0]
        error = f"rank {failed}: no result after {timeout_s:g} s (ranks {stuck} stopped)"
    n = len(spec["cells"])
    results = tuple(tuple(_read_json(work_dir / f"rank{r}.{i}.json") for r in range(ranks)) for i in range(n))
    checks = tuple(_read_json(work_dir / f"check.{i}.json") for i in range(n))
    unsupported = tuple(_read_text(work_dir / f"unsupported.{i}.rank0") for i in range(n))
    return LaunchOutcome(results, checks, unsupported, error, failed)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def first_failure(work_dir: Path, ranks: list[int]) -> int:
    """Of the failed ``ranks``, the one whose ``rank{r}.error`` was written first (ranks without one last, then by
    rank)."""
    def when(r: int) -> tuple[int, int]:
        try:
            return (0, (work_dir / f"rank{r}.error").stat().st_mtime_ns)
        except OSError:
            return (1, 0)
    return min(ranks, key=lambda r: (when(r), r))


def _rank_error(work_dir: Path, rank: int, code: int | None) -> str:
    path = work_dir / f"rank{rank}.error"
    if path.exists():
        return path.read_text().strip()
    tail = ""
    log = work_dir / f"rank{rank}.log"
    if log.exists():
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        tail = lines[-1][:400] if lines else ""
    return f"exited with status {code}" + (f": {tail}" if tail else "")


def static_reason(w: Workload, backend: Backend, device: torch.device) -> str | None:
    """Why this machine cannot run the context-parallel cell at all (checked before launching), or None."""
    if device.type == "cuda":
        have = torch.cuda.device_count()
        if have < w.cp_ranks:
            return f"cp_ranks {w.cp_ranks} needs {w.cp_ranks} GPUs (one per rank); this machine has {have}"
        if not torch.distributed.is_nccl_available():
            return "this torch has no NCCL"
    elif not torch.distributed.is_gloo_available():
        return "this torch has no gloo"
    if w.cp_scheme is CpScheme.RING and backend.name != ring_backend(device):
        return (f"ring merges partial outputs by their log-sum-exp: its blocks run {ring_backend(device)}'s kernels "
                f"on {device.type} (run it with --backend {ring_backend(device)})")
    if w.cp_scheme is CpScheme.TORCH_CP and backend.name not in TORCH_CP_BACKENDS:
        return torch_cp_reason()
    return None


def run_cp_cells(cells: "list[tuple[Workload, Backend, str]]", device: torch.device, run_dir: Path, *, seed: int,
                 profile_calls: int = 3, reps: int | None = None, timeout_s: float = 600.0,
                 env: dict[str, str] | None = None) -> list[CellResult]:
    """Measure context-parallel cells ``(workload, backend, cell id)`` of one rank count in one launch (module
    docstring; each ``torch-cp`` cell in a launch of its own, so that no cell's outcome depends on another's), in order; never raises for a failing or unsupported rank. Traces go to
    ``run_dir/traces/cp/<cell id>/rank<r>.pt.trace.json.gz``.

    Raises:
        ValueError: the cells' ``cp_ranks`` differ.
    """
    if len({w.cp_ranks for w, _, _ in cells}) > 1:
        raise ValueError("one launch runs cells of one rank count")
    out: list[CellResult | None] = []
    todo = []
    for w, backend, cid in cells:
        reason = static_reason(w, backend, device)
        base = dict(cell_id=cid, workload=w, backend=backend.name, family=backend.family.name)
        out.append(CellResult(status=CellStatus.UNSUPPORTED, reason=reason, **base) if reason else None)
        if not reason:
            todo.append((len(out) - 1, w, backend, cid))
    if not todo:
        return out  # type: ignore[return-value]
    # torch-cp patches torch's SDPA dispatch inside each rank: every such cell has a launch of its own, so no cell's
    # outcome can depend on the one before it; the other schemes share one launch
    shared = [t for t in todo if t[1].cp_scheme is not CpScheme.TORCH_CP]
    batches = ([shared] if shared else []) + [[t] for t in todo if t[1].cp_scheme is CpScheme.TORCH_CP]
    for batch in batches:
        for pos, cell in zip((t[0] for t in batch), _launch(batch, device, run_dir, seed=seed,
                                                           profile_calls=profile_calls, reps=reps,
                                                           timeout_s=timeout_s, env=env)):
            out[pos] = cell
    return out  # type: ignore[return-value]


def _launch(todo: list, device: torch.device, run_dir: Path, *, seed: int, profile_calls: int, reps: int | None,
            timeout_s: float, env: dict[str, str] | None) -> list[CellResult]:
    """The cells ``(position, workload, backend, cell id)`` of one launch, in order."""
    ranks = todo[0][1].cp_ranks
    specs = []
    for _, w, backend, cid in todo:
        trace_dir = run_dir / "traces" / "cp" / cid
        if trace_dir.exists():
            shutil.rmtree(trace_dir)  # an earlier, interrupted attempt of this cell (profattn wrote it)
        specs.append({"workload": w.to_dict(), "backend": backend.name, "seed": seed, "cell_id": cid,
                      "trace_pattern": str(trace_dir.resolve() / "rank{rank}.pt.trace.json.gz")})
    spec = {"device": device.type, "profile_calls": profile_calls, "cells": specs,
            "reps": reps if reps is not None else (20 if device.type == "cuda" else 5),
            "threads": max(1, (os.cpu_count() or 1) // ranks), "collective_timeout_s": max(30, int(timeout_s))}
    with _sigterm_interrupts(), tempfile.TemporaryDirectory(prefix="profattn-cp-") as tmp:
        try:
            outcome = launch_ranks(spec, ranks, Path(tmp), timeout_s=timeout_s, env=env)
        except OSError as exc:
            outcome = None
            start_error = f"could not start the ranks: {exc}"
    cells = []
    for i, (pos, w, backend, cid) in enumerate(todo):
        base = dict(cell_id=cid, workload=w, backend=backend.name, family=backend.family.name)
        if outcome is None:
            cells.append(CellResult(status=CellStatus.ERROR, reason=start_error, **base))
        else:
            cells.append(_cell(w, base, device, run_dir, outcome.results[i], outcome.checks[i],
                               outcome.unsupported[i], outcome.error, outcome.failed_rank))
    return cells


@contextlib.contextmanager
def _sigterm_interrupts():
    """While a launch runs (main thread only): SIGTERM raises ``KeyboardInterrupt``, so the ranks are stopped and the
    launch's temporary directory removed, and the run saves what finished as on Ctrl-C (exit 130)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_cp_cell(w: Workload, backend: Backend, device: torch.device, run_dir: Path, cell_id: str, *, seed: int,
                profile_calls: int = 3, reps: int | None = None, timeout_s: float = 600.0,
                env: dict[str, str] | None = None) -> CellResult:
    """One context-parallel cell: :func:`run_cp_cells` of one."""
    return run_cp_cells([(w, backend, cell_id)], device, run_dir, seed=seed, profile_calls=profile_calls, reps=reps,
                        timeout_s=timeout_s, env=env)[0]


def _cell(w: Workload, base: dict, device: torch.device, run_dir: Path, results: tuple, check: dict | None,
          unsupported: str | None, error: str | None, failed_rank: int | None = None) -> CellResult:
    if unsupported is not None:
        return CellResult(status=CellStatus.UNSUPPORTED, reason=unsupported, **base)
    if check is not None:
        error = failed_rank = None  # the cell finished (rank 0 checked it) before the launch ended
    got = [res for res in results if res is not None]
    if error is not None and not got:
        return CellResult(status=CellStatus.ERROR, reason=error, **base)
    records = tuple(_rank_record(w, r, res, run_dir, error if r == failed_rank else None) for r, res in enumerate(results))
    timing = None
    if len(got) == w.cp_ranks:
        steps = [max(vals) for vals in zip(*(res["samples_us"] for res in got))]
        timing = summarize(steps, f"wall clock per step after a barrier, slowest of {w.cp_ranks} ranks "
                                  f"({'gloo' if device.type == 'cpu' else 'NCCL'})")
    peaks = [res["peak_mem_bytes"] for res in got if res.get("peak_mem_bytes") is not None]
    notes = tuple(_ledger_notes(w, records))
    common = dict(ranks=records, notes=notes, timing=timing, timing_repeats=(timing,) if timing else (),
                  peak_mem_bytes=max(peaks) if peaks else None)
    if check is None:
        return CellResult(status=CellStatus.ERROR, reason=error or "rank 0 wrote no correctness check", **common,
                          **base)
    correctness = Correctness(**check)
    status = CellStatus.OK if correctness.passed else CellStatus.INCORRECT
    reason = "" if correctness.passed else (f"failed correctness: out rel err {correctness.out_rel_err:.3g}, grad rel "
                                            f"err {correctness.grad_rel_err} (tolerance {correctness.tolerance:g})")
    return CellResult(status=status, reason=reason, correctness=correctness, **common, **base)


def _rank_record(w: Workload, rank: int, res: dict | None, run_dir: Path, error: str | None) -> RankRecord:
    """One rank's record; ``error``: the line that ended the launch when this rank is the one it names
    (:attr:`LaunchOutcome.failed_rank`), else None."""
    ledger = cp_ledger(w)
    ledger_bytes = ledger.sent_bytes if ledger.counted else None
    if res is None:
        return RankRecord(rank=rank, status=RankStatus.FAILED, error=error or "stopped before its results",
                          ledger_bytes=ledger_bytes)
    path = Path(res["trace_file"])
    rel = str(path.relative_to(run_dir.resolve())) if path.is_relative_to(run_dir.resolve()) else str(path)
    try:
        tl = rank_timeline(load_trace(path), window=res.get("cell_id") or _cell_of(path), world_size=w.cp_ranks,
                           itemsize=w.itemsize)
    except ProfattnError as exc:
        return RankRecord(rank=rank, status=RankStatus.OK, error=f"trace unreadable: {exc}", step_us=_median(res["samples_us"]),
                          ledger_bytes=ledger_bytes, peak_mem_bytes=res.get("peak_mem_bytes"), trace_file=rel)
    return RankRecord(rank=rank, status=RankStatus.FAILED if error is not None else RankStatus.OK, error=error or "",
                      step_us=_median(res["samples_us"]), compute_us=tl.compute_us, comm_us=tl.comm_us,
                      overlap_us=tl.overlap_us, idle_us=tl.idle_us, sent_bytes=tl.sent_bytes,
                      received_bytes=tl.received_bytes, ledger_bytes=ledger_bytes,
                      peak_mem_bytes=res.get("peak_mem_bytes"), trace_file=rel)


def _cell_of(trace_path: Path) -> str:
    return trace_path.parent.name


def _median(xs: list[float]) -> float | None:
    return summarize(xs, "").median_us if xs else None


def _ledger_notes(w: Workload, records: tuple[RankRecord, ...]):
    for r in records:
        if r.ledger_bytes is not None and r.sent_bytes is not None and round(r.sent_bytes) != r.ledger_bytes:
            yield (f"rank {r.rank}: traced collectives sent {r.sent_bytes:,.0f} B per call, the ledger says "
                   f"{r.ledger_bytes:,} B")
