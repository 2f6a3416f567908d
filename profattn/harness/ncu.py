"""The counter pass: re-run a run's cells under Nsight Compute in a separate process.

ncu and torch.profiler cannot attach to the same process (CUPTI allows one subscriber), so the counter
pass is its own process, after the profile run: ``ncu`` launches ``python -m profattn.harness.counter_child``,
which rebuilds each cell from ``results.json`` (same workload, backend and seeded inputs), warms it up,
then runs **one** call between ``cudaProfilerStart``/``cudaProfilerStop`` inside an NVTX start/end range
named after the cell. With ``--profile-from-start off`` ncu profiles only those windows, so input set-up
kernels (random fill, paging) are never charged to a cell, while every kernel the backend itself launches
(the math path's ``repeat_interleave`` copies, the backward on autograd's thread) is. Start/end ranges
are process-wide, so kernels launched from another thread still carry the cell's name.

Options (Nsight Compute CLI documentation): ``--csv --page raw --print-units base``; ``--nvtx``;
``--clock-control none`` (leave the GPU's clocks alone); ``--cache-control all`` and
``--replay-mode kernel`` (the defaults, written out because they define what the bytes mean: caches are
flushed before each kernel, so DRAM bytes are cold-cache bytes).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from profattn.trace.counters import METRICS

CACHE_CONTROL = "all"
REPLAY_MODE = "kernel"
CLOCK_CONTROL = "none"


@dataclass(frozen=True)
class NcuRun:
    """Outcome of one counter pass: where the CSV is, and what ncu said."""

    csv_path: Path | None
    version: str | None
    wall_s: float
    returncode: int | None
    errors: tuple[str, ...]
    reason: str  #: "" when counters were measured, else why not (one line)


def find_ncu() -> tuple[str | None, str]:
    """``(path, "")`` for the ncu on PATH (or ``$PROFATTN_NCU``), else ``(None, reason)``."""
    exe = os.environ.get("PROFATTN_NCU") or shutil.which("ncu")
    if not exe:
        return None, "ncu (Nsight Compute) is not on PATH"
    return exe, ""


def ncu_version(exe: str) -> str | None:
    """The version line of ``ncu --version`` (e.g. "Version 2025.3.1.0 (build ...)"), or None."""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [l.strip() for l in out.splitlines() if "version" in l.lower()]
    return lines[-1] if lines else None


def run_counter_pass(run_dir: Path, cell_ids: Sequence[str], *, timeout_s: float = 1800.0) -> NcuRun:
    """Profile ``cell_ids`` of the run in ``run_dir`` under ncu; the CSV lands in ``run_dir/counters/``.

    Never raises for an unusable ncu: the returned :class:`NcuRun` carries the reason (not on PATH,
    ``ERR_NVGPUCTRPERM``, ``LibraryNotLoaded``, a non-zero exit, a time-out).
    """
    exe, reason = find_ncu()
    if exe is None:
        return NcuRun(None, None, 0.0, None, (), reason)
    out_dir = run_dir / "counters"
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "ncu_raw.csv"
    cells_file = out_dir / "cells.txt"
    cells_file.write_text("\n".join(cell_ids) + "\n", encoding="utf-8")
    cmd = [
        exe, "--csv", "--page", "raw", "--print-units", "base", "--nvtx", "--profile-from-start", "off",
        "--clock-control", CLOCK_CONTROL, "--cache-control", CACHE_CONTROL, "--replay-mode", REPLAY_MODE,
        "--metrics", ",".join(METRICS), "--log-file", str(csv_path),
        sys.executable, "-m", "profattn.harness.counter_child", str(run_dir), str(cells_file),
    ]
    version = ncu_version(exe)
    start = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    except subprocess.TimeoutExpired:
        return NcuRun(None, version, time.perf_counter() - start, None, (), f"the counter pass took longer than {timeout_s:.0f} s")
    except OSError as exc:
        return NcuRun(None, version, time.perf_counter() - start, None, (), f"could not start ncu: {exc}")
    wall = time.perf_counter() - start
    (out_dir / "child.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    text = csv_path.read_text(encoding="utf-8", errors="replace") if csv_path.exists() else ""
    errors = tuple(l.strip() for l in (text + "\n" + proc.stdout + "\n" + proc.stderr).splitlines() if l.startswith("==ERROR=="))
    if errors:
        return NcuRun(csv_path if text else None, version, wall, proc.returncode, errors, _explain(errors[0]))
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
        return NcuRun(csv_path if text else None, version, wall, proc.returncode, (), f"ncu exited with {proc.returncode}: {tail[:300]}")
    if not text:
        return NcuRun(None, version, wall, proc.returncode, (), "ncu wrote no CSV")
    return NcuRun(csv_path, version, wall, proc.returncode, (), "")


def _explain(error: str) -> str:
    """One line for an ncu error, with the usual cause where known."""
    if "ERR_NVGPUCTRPERM" in error:
        return f"{error} (GPU performance counters are restricted to admin users on this machine)"
    if "LibraryNotLoaded" in error:
        return f"{error} (ncu cannot read hardware counters in this environment, e.g. a gVisor sandbox)"
    return re.sub(r"\s+", " ", error)[:400]
