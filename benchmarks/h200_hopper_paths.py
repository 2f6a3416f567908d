"""FlashInfer's other Hopper paths and CUDA-graph traces on one GPU, in one short job.

On the GPU machine, from the repository root (wheels carried in ``.whl/``, README "FlashInfer on a GPU machine without
internet" and NOTES "Running on a GPU machine without internet"):

    python benchmarks/h200_hopper_paths.py --out "$OUT"

1. installs ``.whl/*.whl`` with ``pip install --no-index --no-deps --target /tmp/site`` (``--wheels``, ``--site``);
   every child process runs with ``PYTHONPATH=/tmp/site:<repo>``;
2. at once, in processes of their own: FlashInfer's JIT modules for the seed shape, one process per backend (each
   runs the backend's ``prepare()`` on a decode or prefill workload — the tiny first call that compiles — and one
   FlashInfer's own cache append), and ``tests/data/scripts/graph_traces.py`` (the CUDA-graph decode traces for the
   engine-trace analysis; its timings do not matter, its traces' structure does);
3. then, alone on the GPU (nothing left to compile), ``profattn profile`` of the new backends (cuDNN paged decode and
   prefill, XQA decode, paged prefill ``backend="fa2"`` and ``"fa3"``) beside the kernels they are compared with, on
   the seed shape (B 8, Hq 16, Hkv 4, d 128, bf16, page 16): decode at kv 512 / 2048 / 8192, a 2048-token prefill, the
   last 2048-token chunk of an 8192-token prompt and a mixed step (2 chunks + 32 decodes), counters off
   (``--counters`` turns them on). A cell that fails is an error cell of that run; if the run itself dies, or a
   sticky CUDA error (an illegal address, a launch failure) poisons the cells after it, every backend with a cell it
   lost is profiled again in a run of its own (``runs/isolated-<backend>``), as far as the time budget allows;
4. writes to ``--out`` (at most 8 files, ≤ 16 MiB each, as the GPU job's output allows): ``hopper-runs.tar.gz`` (the
   run directories: results.json, traces, report.html), ``graph-traces.tar.gz`` (traces + manifest.json),
   ``summary.txt`` (the table printed at the end) and ``driver.log`` (every child's output) — also when a step fails.

``--device cpu`` dry-runs the same pipeline on a CPU (small shapes; the FlashInfer backends are unsupported there, each
cell says why; the graph traces run eagerly) — what CI can check of it. ``--plan`` prints the commands and
exits. Bad arguments: one line, exit 2. Exit status 0 once the outputs are written, whatever cells failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # oneline_args
from oneline_args import Parser  # noqa: E402
#: The backends this job is for, and the ones they are compared with.
NEW = ("flashinfer-cudnn-decode", "flashinfer-cudnn-prefill", "flashinfer-xqa-decode", "flashinfer-prefill-paged-fa2",
       "flashinfer-prefill-paged-fa3")
COMPARED = ("flashinfer-decode", "flashinfer-decode-tc", "flashinfer-prefill-paged", "sdpa-cudnn", "triton-paged-decode",
            "triton-paged-prefill")
_SEED = "hq=16,hkv=4,d=128,page=16"
#: The seed shape's decode, prefill, chunked-prefill and mixed calls (``profattn profile --workload`` specs).
GPU_WORKLOADS = (
    f"phase=decode,b=8,q=1,kv=512,{_SEED}",
    f"phase=decode,b=8,q=1,kv=2048,{_SEED}",
    f"phase=decode,b=8,q=1,kv=8192,{_SEED}",
    f"phase=prefill,b=8,q=2048,kv=2048,{_SEED}",
    f"phase=prefill,b=8,q=2048,kv=8192,{_SEED},append=true",
    f"mix=2x(q2048,kv8192)+32x(q1,kv4096),{_SEED},append=true",
)
#: The same structure at CPU size (the dry run).
CPU_WORKLOADS = (
    "phase=decode,b=2,q=1,kv=64,hq=4,hkv=2,d=32,page=16",
    "phase=prefill,b=2,q=32,kv=64,hq=4,hkv=2,d=32,page=16,append=true",
    "mix=1x(q32,kv64)+2x(q1,kv48),hq=4,hkv=2,d=32,page=16,append=true",
)
#: Backends a CPU dry run adds so that its cells are not all unsupported.
CPU_COMPARED = ("torch-paged-reference", "eager")
#: What a prewarm process prepares per backend (FlashInfer's JIT compiles in ``prepare``): a decode or prefill call.
PREWARM = {
    "flashinfer-decode": GPU_WORKLOADS[0], "flashinfer-decode-tc": GPU_WORKLOADS[0],
    "flashinfer-prefill-paged": GPU_WORKLOADS[3], "flashinfer-prefill-paged-fa2": GPU_WORKLOADS[3],
    "flashinfer-prefill-paged-fa3": GPU_WORKLOADS[3], "flashinfer-cudnn-decode": GPU_WORKLOADS[0],
    "flashinfer-cudnn-prefill": GPU_WORKLOADS[3], "flashinfer-xqa-decode": GPU_WORKLOADS[0],
}
#: A prewarm target that is not a backend: FlashInfer's own cache append (``append_paged_kv_cache``, JIT-compiled).
APPEND = "flashinfer-append"
#: Error text of a sticky CUDA error: every later CUDA call of the process fails with it.
STICKY = ("illegal memory access", "unspecified launch failure", "misaligned address", "device-side assert",
          "an illegal instruction", "CUDA error: unknown error", "cudaErrorLaunchFailure", "CUDA_ERROR_ILLEGAL_ADDRESS")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = Parser(prog=Path(__file__).name, description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="where the tarballs, summary.txt and driver.log go (created; must be empty)")
    p.add_argument("--work", type=Path, default=Path("/tmp/h200-hopper"), help="scratch directory (default %(default)s)")
    p.add_argument("--wheels", type=Path, default=REPO / ".whl", help="wheels to install (default: the repo's .whl/)")
    p.add_argument("--site", type=Path, default=Path("/tmp/site"), help="pip --target of the wheels (default %(default)s)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--backend", action="append", metavar="NAME", help="profile only these (repeatable; default: the new "
                   "paths and what they are compared with)")
    p.add_argument("--budget-s", type=float, default=360.0, help="time for the whole job; later steps are shortened or "
                   "skipped to fit (default %(default)s)")
    p.add_argument("--counters", action="store_true", help="Nsight Compute counters for the profile run")
    p.add_argument("--no-graph-traces", action="store_true", help="skip the CUDA-graph traces")
    p.add_argument("--graph-backend", action="append", metavar="NAME", choices=("sdpa", "flashinfer", "flex", "triton"),
                   help="the graph traces' backends (repeatable; default: all four)")
    p.add_argument("--plan", action="store_true", help="print the commands and exit")
    p.add_argument("--prewarm", metavar="NAME", help=argparse.SUPPRESS)  # a child: compile one backend's JIT modules
    args = p.parse_args(argv)
    if args.prewarm is None and args.out is None:
        p.error("--out is required")
    if args.budget_s <= 0:
        p.error(f"--budget-s must be positive, got {args.budget_s}")
    return args


@dataclass(frozen=True)
class Plan:
    """What the job runs: the profile command's backends and workloads, the prewarm targets, the graph-trace command."""

    backends: tuple[str, ...]
    workloads: tuple[str, ...]
    prewarm: tuple[str, ...]
    device: str
    counters: bool
    graph_traces: bool
    graph_backends: tuple[str, ...] = ()

    def profile_command(self, out_dir: Path, backends: tuple[str, ...] | None = None, *, db: Path) -> list[str]:
        """``python -m profattn.cli profile`` of ``backends`` (default: all of the plan's) into ``out_dir``, its cells
        added to the results store ``db`` (the job's own, not the user's)."""
        cmd = [sys.executable, "-m", "profattn.cli", "profile", "--device", self.device, "--out", str(out_dir),
               "--counters" if self.counters else "--no-counters", "--db", str(db)]
        for b in backends or self.backends:
            cmd += ["--backend", b]
        for w in self.workloads:
            cmd += ["--workload", w]
        return cmd

    def graph_command(self, out_dir: Path) -> list[str]:
        cmd = [sys.executable, str(REPO / "tests" / "data" / "scripts" / "graph_traces.py"), "--out", str(out_dir),
               "--device", self.device]
        for b in self.graph_backends:
            cmd += ["--backend", b]
        return cmd


def make_plan(args: argparse.Namespace) -> Plan:
    cpu = args.device == "cpu"
    backends = tuple(dict.fromkeys(args.backend or (NEW + COMPARED + (CPU_COMPARED if cpu else ()))))
    prewarm = () if cpu else tuple(b for b in backends if b in PREWARM) + (APPEND,)
    return Plan(backends, CPU_WORKLOADS if cpu else GPU_WORKLOADS, prewarm, args.device, args.counters,
                not args.no_graph_traces, tuple(args.graph_backend or ()))


class Job:
    """The running job: its clock, its log, the children's environment."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.t0 = time.monotonic()
        self.budget = args.budget_s
        self.log_path = args.out / "driver.log"
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(args.site), str(REPO), os.environ.get("PYTHONPATH", "")) if p)

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)

    def say(self, text: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f} s] {text}"
        print(line, flush=True)
        with open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def start(self, cmd: list[str], label: str) -> subprocess.Popen:
        """Start ``cmd`` in the repository root with the job's environment, its output captured."""
        self.say(f"{label}: {' '.join(shlex.quote(c) for c in cmd)}")
        return subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait(self, proc: subprocess.Popen, *, timeout: float, label: str, echo: bool = True) -> int | None:
        """Wait for ``proc`` (its output appended to the log, and echoed); its exit status, None when it was stopped at
        the timeout."""
        try:
            out, _ = proc.communicate(timeout=max(timeout, 1.0))
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            rc = None
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write(out or "")
        if echo:
            for line in (out or "").splitlines():
                if not line.startswith("USDT:"):  # torch's profiler start/stop lines
                    print(f"  {line}", flush=True)
        self.say(f"{label}: " + (f"exit {rc}" if rc is not None else f"stopped after {timeout:.0f} s"))
        return rc

    def run(self, cmd: list[str], *, timeout: float, label: str) -> int | None:
        """Run ``cmd`` to the end (:meth:`start` + :meth:`wait`)."""
        return self.wait(self.start(cmd, label), timeout=timeout, label=label)


def install_wheels(job: Job, wheels: Path, site: Path) -> None:
    """``pip install --no-index --no-deps --target SITE WHEELS/*.whl`` (README: carrying the wheels); nothing to do
    when ``wheels`` holds none (e.g. FlashInfer already installed)."""
    found = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    if not found:
        job.say(f"no wheels in {wheels}: using what is installed")
        return
    site.mkdir(parents=True, exist_ok=True)
    job.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target", str(site),
             *map(str, found)], timeout=min(120.0, job.left()), label="install")


def prewarm_child(name: str) -> int:
    """The ``--prewarm NAME`` child: compile one backend's JIT modules by preparing it on its :data:`PREWARM` workload
    (or FlashInfer's append); prints the set-up notes. Exit 0 also when the backend is unsupported here."""
    import torch

    from profattn.backends import get_backend
    from profattn.backends.base import Unsupported
    from profattn.workload import parse_workload_spec

    dev = torch.device("cuda")
    t0 = time.perf_counter()
    if name == APPEND:
        from flashinfer.page import append_paged_kv_cache

        pages = torch.zeros(2, 16, 4, 128, device=dev, dtype=torch.bfloat16)
        new = torch.randn(3, 4, 128, device=dev, dtype=torch.bfloat16)
        i32 = lambda xs: torch.tensor(xs, dtype=torch.int32, device=dev)  # noqa: E731
        append_paged_kv_cache(new, new, i32([0, 0, 0]), i32([0, 1, 2]), (pages, pages), i32([1]), i32([0, 1]), i32([3]),
                              kv_layout="NHD")
        torch.cuda.synchronize()
        print(f"prewarm {name}: {time.perf_counter() - t0:.1f} s")
        return 0
    try:
        prepared = get_backend(name).prepare(parse_workload_spec(PREWARM[name]), dev)
    except Unsupported as exc:
        print(f"prewarm {name}: unsupported: {exc}")
        return 0
    print(f"prewarm {name}: {time.perf_counter() - t0:.1f} s; " + " | ".join(prepared.notes))
    return 0


def compile_and_trace(job: Job, plan: Plan, graphs_dir: Path) -> None:
    """Step 2: every :attr:`Plan.prewarm` target in a process of its own (FlashInfer's JIT builds are serialized per
    module by its file locks) and the graph-trace program, all at once, waited for within the budget (leaving the
    profile run its share)."""
    procs = [(f"prewarm {name}", job.start([sys.executable, str(Path(__file__).resolve()), "--prewarm", name],
                                           f"prewarm {name}")) for name in plan.prewarm]
    if plan.graph_traces:
        procs.append(("graph traces", job.start(plan.graph_command(graphs_dir), "graph traces")))
    deadline = time.monotonic() + max(job.left() - 150.0, 30.0)
    for label, proc in procs:
        job.wait(proc, timeout=deadline - time.monotonic(), label=label, echo=label == "graph traces")
    with open(job.log_path, encoding="utf-8") as log:  # the prewarm lines: what compiled, how long it took
        for line in log:
            if line.startswith("prewarm "):
                print(f"  {line.rstrip()[:300]}", flush=True)


def lost_backends(results_path: Path, finished: bool) -> tuple[list[str], str | None]:
    """The backends whose cells a run lost — pending cells (the run died), or error cells after the first sticky CUDA
    error (:data:`STICKY`), which poisons every later cell of the process — and the first sticky error's cell id."""
    from profattn.results import CellStatus, read_results

    if not results_path.is_file():
        return [], None
    run = read_results(results_path)
    first = next((i for i, c in enumerate(run.cells) if c.status == CellStatus.ERROR and any(s in c.reason for s in STICKY)), None)
    lost = {c.backend for c in run.cells if c.status == CellStatus.PENDING and not finished}
    if first is not None:
        lost |= {c.backend for c in run.cells[first:] if c.status in (CellStatus.ERROR, CellStatus.PENDING)}
    order = list(dict.fromkeys(c.backend for c in run.cells))
    return [b for b in order if b in lost], (run.cells[first].cell_id if first is not None else None)


def profile(job: Job, plan: Plan, runs: Path) -> list[Path]:
    """The profile run, then isolated runs of the backends it lost (see :func:`lost_backends`). Returns the run
    directories written."""
    main, db = runs / "main", runs.parent / "profattn.sqlite"
    rc = job.run(plan.profile_command(main, db=db), timeout=max(job.left() - 15.0, 30.0), label="profile")
    dirs = [main]
    lost, sticky = lost_backends(main / "results.json", finished=rc == 0)
    if lost:
        job.say(f"profile: lost the cells of {', '.join(lost)}" + (f" after a sticky CUDA error in {sticky}" if sticky else
                                                                     " (the run did not finish)") + ": isolated runs follow")
    for b in lost:
        if job.left() < 40.0:
            job.say(f"isolated {b}: skipped, too little time left ({job.left():.0f} s)")
            continue
        d = runs / f"isolated-{b}"
        job.run(plan.profile_command(d, (b,), db=db), timeout=min(120.0, job.left() - 20.0), label=f"isolated {b}")
        dirs.append(d)
    return [d for d in dirs if (d / "results.json").is_file()]


def summary(dirs: list[Path]) -> str:
    """The table: per run and workload, each cell's status, latency (graph replay where captured), relative error,
    kernels that ran (from its trace) and the family checks; then the cells' set-up notes that say which library
    path ran (versions, ``auto``'s resolution)."""
    from profattn.results import CellStatus, read_results

    out = []
    for d in dirs:
        run = read_results(d / "results.json")
        e = run.environment
        out.append(f"## {d.name}: {e.device_name}, torch {e.torch}, CUDA {e.cuda}, cuDNN {e.cudnn}, FlashInfer {e.flashinfer}, "
                   f"cuDNN frontend {e.cudnn_frontend}")
        for w in dict.fromkeys(c.workload for c in run.cells):
            out.append(f"\n{w.tag}")
            out.append(f"  {'backend':<30} {'status':<11} {'latency µs':>11} {'timing':<6} {'rel err':>8}  kernels (family check; graph replays)")
            for c in (x for x in run.cells if x.workload == w):
                lat = c.latency_us
                kind = "graph" if c.graph_timing is not None else ("eager" if c.timing is not None else "")
                err = f"{c.correctness.out_rel_err:.1e}" if c.correctness is not None else ""
                if c.status in (CellStatus.OK, CellStatus.INCORRECT) and c.trace is not None:
                    t = c.trace
                    g = t.graph
                    gtext = "" if g is None else (f"; {g.replays} graph replays: {g.kernels_per_replay:g} kernels each, "
                                                  f"{_check(g.family_ok)}"
                                                  + (", NOT the eager kernels" if g.same_kernels is False else ""))
                    what = f"{', '.join(_short(k.name) for k in t.kernels[:2])} ({_check(t.family_ok)}{gtext})"
                else:
                    what = c.reason[:150]
                out.append(f"  {c.backend:<30} {str(c.status):<11} {f'{lat:,.1f}' if lat else '–':>11} {kind:<6} {err:>8}  {what}")
        notes = sorted({n for c in run.cells for n in c.notes if n.startswith("FlashInfer ") or "resolved" in n})
        if notes:
            out.append("\nlibrary paths (cell notes):")
            out += [f"  {n[:220]}" for n in notes]
        out.append("")
    return "\n".join(out)


def _check(ok: bool | None) -> str:
    return {True: "family ok", False: "FOREIGN kernels", None: "no evidence"}[ok]


def _short(kernel: str) -> str:
    """A kernel name without ``void``, namespaces' template arguments and parameters, at most 48 characters."""
    head = kernel.removeprefix("void ").split("(")[0].split("<")[0]
    return head[-48:]


def tar(src: Path, dest: Path, arcname: str) -> None:
    with tarfile.open(dest, "w:gz") as tf:
        tf.add(src, arcname=arcname)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.prewarm is not None:
        return prewarm_child(args.prewarm)
    for path in (str(REPO), str(args.site)):  # this process reads the runs' results.json with profattn
        if path not in sys.path:
            sys.path.insert(0, path)
    plan = make_plan(args)
    if args.plan:
        runs = args.work / "runs"
        for name in plan.prewarm:
            print(f"prewarm: {sys.executable} {Path(__file__).resolve()} --prewarm {name}")
        print("profile: " + " ".join(shlex.quote(c) for c in plan.profile_command(runs / "main", db=args.work / "profattn.sqlite")))
        if plan.graph_traces:
            print("graph traces: " + " ".join(shlex.quote(c) for c in plan.graph_command(args.work / "graph-traces")))
        return 0
    out: Path = args.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"h200_hopper_paths.py: error: --out {out} exists and is not an empty directory", file=sys.stderr)
        return 2
    if args.work.exists() and any(args.work.iterdir()):
        print(f"h200_hopper_paths.py: error: --work {args.work} exists and is not empty (a run is never overwritten)",
              file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    job = Job(args)
    job.say(f"plan: {len(plan.backends)} backends x {len(plan.workloads)} workloads on {plan.device}, budget {job.budget:.0f} s")
    runs, graphs = args.work / "runs", args.work / "graph-traces"
    dirs: list[Path] = []
    try:
        if plan.device == "cuda":
            install_wheels(job, args.wheels, args.site)
        compile_and_trace(job, plan, graphs)
        dirs = profile(job, plan, runs)
    finally:  # what was measured comes back, whatever failed
        table = summary(dirs) if dirs else "no run wrote results.json (driver.log says why)\n"
        (out / "summary.txt").write_text(table)
        if runs.is_dir():
            tar(runs, out / "hopper-runs.tar.gz", "hopper-runs")
        if graphs.is_dir():
            tar(graphs, out / "graph-traces.tar.gz", "graph-traces")
        job.say(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))} to {out}")
        print("\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
