"""``profattn profile``, ``sweep`` and ``counters``: the commands that measure (they need torch)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from profattn.cli.main import REGIMES, check_device_name, main, resolve_device
from profattn.errors import ProfattnError


@main.command()
@click.option("--regime", type=click.Choice(REGIMES), default="all", show_default=True, help="Which phase's workloads to run.")
@click.option("--backend", "backend_names", multiple=True, metavar="NAME", help="Backend to run (repeatable; default: every family once — the run says what it leaves out; "
              "`all`: every registered backend). See `profattn backends`.")
@click.option("--preset", default=None, metavar="NAME", help="Workload preset: seed, small, decode-sweep(-small), serving(-small) or gqa(-small) (default: seed on CUDA, small on CPU).")
@click.option("--workload", "workload_specs", multiple=True, metavar="SPEC",
              help="Instead of a preset, this workload (repeatable): field=value pairs, e.g. "
                   "phase=decode,batch=8,q_len=1,kv_len=8192,num_q_heads=16,num_kv_heads=4,head_dim=128,"
                   "dtype=bfloat16,kv_layout=paged,page_size=16 (what `profattn analyze` suggests for a traced call); "
                   "short names b, q, kv, hq, hkv, d, page; a variable-length or mixed call as "
                   "mix=2x(q2048,kv8192)+32x(q1,kv4096),hq=32,hkv=8,d=128,page=16[,append=true] (README: Workloads).")
@click.option("--device", "device_name", default=None, metavar="DEVICE", help="cuda or cpu (default: cuda when available).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Run directory (results.json, traces/, report.html); default: a new profattn-runs/run-<UTC time>. "
                   "A directory that holds a run is refused unless --resume or --force.")
@click.option("--resume", is_flag=True, help="Continue the interrupted run in --out: measured cells are kept, pending ones are measured.")
@click.option("--force", is_flag=True, help="--out holds a run: rename it aside (<name>.replaced-<UTC time>; nothing is deleted) and start anew.")
@click.option("--profile-calls", default=3, show_default=True, type=click.IntRange(1, 100), help="Calls per cell inside the profiler pass.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**31 - 1), help="Seed of the random inputs.")
@click.option("--counters/--no-counters", default=None, help="Nsight Compute counter pass (default: on when a GPU and ncu are present).")
@click.option("--repeat", default=1, show_default=True, type=click.IntRange(1, 100),
              help="Independent timing samples per cell (each a median of many reps); profattn compare needs >= 3 (5 recommended).")
@click.option("--keep-host-info", is_flag=True, help="Keep host name, user name, absolute paths and Python stacks in results, traces and report.")
@click.option("--db", default=None, metavar="PATH", help="Results store the run's cells are added to (default: $PROFATTN_DB, else the user's cache directory).")
@click.option("--threads", default=None, type=click.IntRange(1, 4096), metavar="N",
              help="torch's intra-op threads while timing (default: 1 on a CPU, where threads on shared cores time "
                   "scheduler quanta; torch's own on CUDA); recorded in results.json.")
def profile(regime: str, backend_names: tuple[str, ...], preset: str | None, device_name: str | None, out_dir: str | Path | None,
            profile_calls: int, seed: int, counters: bool | None, repeat: int = 1, keep_host_info: bool = False,
            workload_specs: tuple[str, ...] = (), resume: bool = False, force: bool = False, kind: str = "run",
            db: str | None = None, ab: tuple[str, str] | None = None, threads: int | None = None) -> None:
    """Run every backend on the preset's workloads; write results.json, traces and report.html.

    --backend takes a registered name (see `profattn backends`; installed plugins included) or a plugin
    object as package.module:object."""
    check_device_name(device_name)  # a bad --device is one line before torch and the backends are imported
    from rich.console import Console
    from rich.markup import escape

    from profattn.errors import message_text

    from profattn.backends import all_backends
    from profattn.backends.registry import ALL, default_backends, counter_pass_backends, left_out_of_default, resolve_backend
    from profattn.report.format import fmt_us_column
    from profattn.report.run import write_report
    from profattn.harness.session import SessionConfig, run_session
    from profattn.workload import Phase, default_preset_name, get_preset

    from profattn.cli.recommend import store_run
    from profattn.harness import rundir

    # Validate everything before the run directory is touched or anything is printed.
    if resume and out_dir is None:
        raise ProfattnError("--resume needs --out: the run directory to continue")
    out_dir, mode = rundir.check_run_dir(rundir.default_run_dir(kind=kind) if out_dir is None else out_dir,
                                         force=force, resume=resume)
    device = resolve_device(device_name)
    stored = None
    if mode is rundir.RunDirMode.RESUME:
        from profattn.harness.session import resume_config
        from profattn.results import read_results

        if workload_specs or preset or backend_names or regime != "all" or repeat != 1 or seed != 0 or threads:
            raise ProfattnError("--resume continues the run as it was planned: give no --preset, --workload, "
                                "--backend, --regime, --repeat, --seed or --threads with it")
        stored = read_results(out_dir)
    if stored is not None:
        cfg = resume_config(stored, out_dir, device, profile_calls=profile_calls, counters=counters,
                            keep_host_info=keep_host_info)
        preset_obj, backends, regimes = cfg.preset, cfg.backends, cfg.regimes
    elif workload_specs:
        from profattn.workload import Preset, parse_workload_spec

        if preset:
            raise ProfattnError("give --preset or --workload, not both")
        given = [parse_workload_spec(t) for t in workload_specs]
        # a context-parallel workload is measured beside the same global call on one process
        preset_obj = Preset("custom", "from --workload", tuple(dict.fromkeys(
            x for w in given for x in ((w.single_process, w) if w.is_context_parallel else (w,)))))
    else:
        preset_obj = get_preset(preset or default_preset_name(device.type))
    ab_names = None
    if stored is None:
        if ALL in backend_names:
            if len(set(backend_names)) > 1:
                raise ProfattnError(f"--backend {ALL} runs every backend: give it alone")
            backends = all_backends()
        else:
            backends = (tuple(dict.fromkeys(resolve_backend(n) for n in dict.fromkeys(backend_names)))  # one per plugin, however named
                        if backend_names else default_backends())
        regimes = tuple(Phase) if regime == "all" else (Phase(regime),)
        if ab is not None:  # `compare --ab BASE HEAD`: the two backends, by the names their cells carry
            pair = (resolve_backend(ab[0]), resolve_backend(ab[1]))
            if pair[0].name == pair[1].name:
                raise ProfattnError(f"--ab: BASE and HEAD are the same backend ({pair[0].name}); give two implementations "
                                    "(a plugin's base and head versions need different backend names)")
            backends, ab_names = pair, (pair[0].name, pair[1].name)
    if counters and device.type != "cuda":
        raise ProfattnError("--counters needs a CUDA device (hardware counters are read by Nsight Compute)")
    out_dir, mode, moved = rundir.prepare_run_dir(out_dir, force=force, resume=resume)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:  # released when the command ends (in-process callers such as tests run many)
        ctx.call_on_close(lambda: rundir.release_run_dir(out_dir))
    console = Console(stderr=True, highlight=False, emoji=False)
    if moved is not None:
        console.print(f"--force: the earlier run is now {moved}", markup=False, soft_wrap=True)
    verb = "resuming" if stored is not None else "preset"
    console.print(f"profattn: {verb} [b]{escape(message_text(preset_obj.name))}[/b] on {device} → "
                  f"{escape(message_text(out_dir))}/ ({len(backends)} backend{'s' if len(backends) != 1 else ''})")
    if stored is None and not backend_names and ab is None and device.type == "cuda" and left_out_of_default():
        console.print(f"default backends: every family once; left out: {', '.join(left_out_of_default())} "
                      f"(add one with --backend NAME, or run every backend with --backend {ALL})", markup=False, soft_wrap=True)

    from profattn.harness.session import ProgressEvent

    name_width = max([15, *(len(b.name) for b in backends)])  # one column for the longest backend name of this run

    started: dict[str, float] = {}  # cell id -> when its START came (the wall seconds each cell line shows)

    def progress(event: ProgressEvent, cell, done: int, total: int) -> None:
        if event is ProgressEvent.START:
            started[cell.cell_id] = time.perf_counter()
            return
        if event is ProgressEvent.COUNTERS:
            stages["counters_start"] = time.perf_counter()
            names = [b.name for b in cfg.backends]
            skipped = [n for n in names if n not in counter_pass_backends(names)]
            console.print("counter pass: re-running the timed cells under Nsight Compute"
                          + (f" (the unfused paths' cells left out: {', '.join(skipped)}; `profattn counters {out_dir} "
                             f"--backend NAME` adds one)" if skipped else "") + " ...", markup=False, soft_wrap=True)
            return
        if event is ProgressEvent.REPEAT:
            lat = fmt_us_column(cell.latency_samples_us[-1]) if cell.latency_samples_us else ""
            console.print(message_text(f"[repeat {done}/{total}] {cell.workload.tag:<43} {cell.backend:<{name_width}} {lat}"),
                          markup=False, soft_wrap=True)
            return
        lat = fmt_us_column(cell.latency_us)
        why = f"  {cell.reason[:160]}" if cell.reason else ""
        t0 = started.pop(cell.cell_id, None)
        took = f"  ({time.perf_counter() - t0:.1f} s)" if t0 is not None else ""
        console.print(message_text(f"[{done:>3}/{total}] {cell.workload.tag:<48} {cell.backend:<{name_width}} {lat}  "
                                   f"{cell.status}{took}{why}"), markup=False, soft_wrap=True)

    if stored is None:
        cfg = SessionConfig(preset=preset_obj, regimes=regimes, backends=backends, device=device, out_dir=out_dir,
                            profile_calls=profile_calls, seed=seed, counters=counters, repeat=repeat,
                            keep_host_info=keep_host_info, ab=ab_names, threads=threads)
    if cfg.intra_op_threads is not None:
        n = cfg.intra_op_threads
        console.print(f"timing with {n} intra-op thread{'s' if n != 1 else ''}" + (
            " (the CPU default; --threads N to change)" if threads is None and stored is None else ""),
            markup=False, soft_wrap=True)
    stages: dict[str, float] = {}
    t_start = time.perf_counter()
    _prewarm(cfg, console, stages)
    t_cells = time.perf_counter()
    try:
        run = run_session(cfg, progress, resume=stored)
    except KeyboardInterrupt:
        console.print(store_run(out_dir, db), markup=False, soft_wrap=True)
        console.print(f"interrupted: {out_dir / 'results.json'} holds the cells that finished; "
                      f"`profattn profile --resume --out {out_dir}` measures the rest", markup=False, soft_wrap=True)
        sys.exit(130)
    t_run = time.perf_counter()
    from profattn.report.run import noise_texts, report_analysis
    from profattn.report.verdict import summary as verdict_summary

    analysis = report_analysis(run, keep_host_info=keep_host_info)
    path = _report_or_warning(lambda: write_report(analysis, out_dir / "report.html"), out_dir)
    for warning in noise_texts(analysis):
        console.print(f"warning: {warning}", markup=False, soft_wrap=True)
    t_end = time.perf_counter()
    t_counters = stages.pop("counters_start", t_run)
    stages.update({"cells (timing, check, profiler)": t_counters - t_cells, "counters": t_run - t_counters,
                   "report": t_end - t_run})
    console.print("time: " + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items() if v >= 0.05)
                  + f"; total {t_end - t_start:.1f} s", markup=False, soft_wrap=True)
    console.print(message_text(f"verdict: {verdict_summary(analysis.verdict)}"), markup=False, soft_wrap=True)  # names are text
    console.print(store_run(out_dir, db), markup=False, soft_wrap=True)
    console.print(f"report: {path}", markup=False, soft_wrap=True)


def _prewarm(cfg, console, stages: dict[str, float]) -> None:  # noqa: ANN001
    """Compile the run's JIT modules (FlashInfer's) in parallel processes before the first cell
    (:mod:`profattn.harness.prewarm`); prints one line per build that did not succeed and adds ``stages['JIT
    builds']``. Nothing on a CPU run or when no backend of the run declares what it compiles."""
    from profattn.harness.prewarm import jit_targets, prewarm

    workloads = [w for p in cfg.regimes for w in cfg.preset.regime(p)]
    targets = jit_targets(cfg.backends, workloads, cfg.device.type)
    if not targets:
        return
    t0 = time.perf_counter()
    console.print(f"compiling {len(targets)} JIT module{'s' if len(targets) != 1 else ''} "
                  f"({', '.join(sorted({t.backend for t in targets}))}) in parallel processes before timing ...",
                  markup=False, soft_wrap=True)
    results = prewarm(targets)
    stages["JIT builds"] = time.perf_counter() - t0
    for r in results:
        if r.status not in ("ok", "unsupported"):
            console.print(f"  {r.target.backend} on {r.target.workload.tag}: {r.status} after {r.seconds:.0f} s "
                          f"({r.detail}); its cells build in the run", markup=False, soft_wrap=True)
    slowest = max(results, key=lambda r: r.seconds)
    console.print(f"  {sum(r.status == 'ok' for r in results)} of {len(results)} built in {stages['JIT builds']:.1f} s "
                  f"(slowest: {slowest.target.backend} on {slowest.target.workload.tag}, {slowest.seconds:.1f} s)",
                  markup=False, soft_wrap=True)


def _report_or_warning(write, run_dir: Path) -> str:  # noqa: ANN001
    """``write()``'s report path, or — when a package the report needs is not installed here (plotly, jinja2: a GPU
    image the project's set-up did not run on) — a one-line note: the run itself is complete, and ``profattn report``
    renders it where the package is."""
    try:
        return str(write())
    except ModuleNotFoundError as exc:
        return (f"not written ({exc.name} is not installed here); the run is complete: "
                f"`profattn report {run_dir}` renders it where {exc.name} is")


SWEEP_BACKENDS = ("triton-paged-decode", "torch-paged-reference", "sdpa-flash", "sdpa-cudnn")


@main.command()
@click.argument("regime", metavar="REGIME")
@click.option("--backend", "backend_names", multiple=True, metavar="NAME", help=f"Backend (repeatable; default: {', '.join(SWEEP_BACKENDS)}).")
@click.option("--preset", default=None, metavar="NAME", help="Sweep preset (default: decode-sweep on CUDA, decode-sweep-small on CPU).")
@click.option("--device", "device_name", default=None, metavar="DEVICE", help="cuda or cpu (default: cuda when available).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Run directory; default: a new profattn-runs/sweep-<UTC time>.")
@click.option("--resume", is_flag=True, help="Continue the interrupted sweep in --out.")
@click.option("--force", is_flag=True, help="--out holds a run: rename it aside and start anew.")
@click.option("--counters/--no-counters", default=False, show_default=True, help="Nsight Compute counter pass over every cell.")
@click.option("--db", default=None, metavar="PATH", help="Results store the sweep's cells are added to (default: the user's cache directory).")
@click.pass_context
def sweep(ctx: click.Context, regime: str, backend_names: tuple[str, ...], preset: str | None, device_name: str | None,
          out_dir: str | None, counters: bool, resume: bool = False, force: bool = False, db: str | None = None) -> None:
    """Sweep decode over kv_len x batch x page_size (+ ragged and shared-prefix batches): latency, GB/s, crossovers.

    REGIME must be decode (the only regime swept)."""
    from profattn.workload import SWEEP_PRESETS

    if regime != "decode":
        raise ProfattnError(f"sweep supports only 'decode', not {regime!r}")

    device = resolve_device(device_name)
    if resume:
        ctx.invoke(profile, regime="all", backend_names=(), preset=None, device_name=str(device), out_dir=out_dir,
                   profile_calls=1, seed=0, counters=counters, resume=True, kind="sweep", db=db)
        return
    names = backend_names or tuple(n for n in SWEEP_BACKENDS)
    ctx.invoke(profile, regime="decode", backend_names=names, preset=preset or SWEEP_PRESETS[device.type],
               device_name=str(device), out_dir=out_dir, profile_calls=1, seed=0, counters=counters, force=force, kind="sweep",
               db=db)


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--backend", "backends", multiple=True, metavar="NAME",
              help="Only this backend's cells (repeatable; default: every timed cell) — a shorter pass on a big run.")
def counters(run_dir: Path, backends: tuple[str, ...]) -> None:
    """Add Nsight Compute counters (DRAM and L2 bytes per cell) to an existing GPU run, re-render its report."""
    from profattn.harness.ncu import find_ncu
    from profattn.report.run import write_report
    from profattn.results import read_results, write_results
    from profattn.harness.session import add_counters, reattach_traces

    run = read_results(run_dir)
    if run.environment.device != "cuda":
        raise ProfattnError(f"{run_dir} is a CPU run: hardware counters need a CUDA GPU and Nsight Compute")
    exe, reason = find_ncu()
    if exe is None:
        raise ProfattnError(reason)
    import torch

    if not torch.cuda.is_available():
        raise ProfattnError("torch sees no CUDA device here: run `profattn counters` on the GPU machine that made the run")
    unknown = sorted(set(backends) - {c.backend for c in run.cells})
    if unknown:
        raise ProfattnError(f"--backend {unknown[0]} has no cell in {run_dir}")
    run = add_counters(run, run_dir, backends or None)
    write_results(run, run_dir / "results.json")
    read = reattach_traces(run, run_dir)
    path = _report_or_warning(lambda: write_report(read.run, run_dir / "report.html", traces=read.problems), run_dir)
    info = run.counters_info
    from profattn.cli.recommend import store_run

    click.echo(store_run(run_dir))
    click.echo(f"counters: {info.status}{': ' + info.reason if info.reason else ''}")
    click.echo(f"report: {path}")
