"""The ``profattn`` command line (click): ``profile``, ``sweep``, ``report``, ``counters``, ``analyze``,
``compare``, ``summary``, ``backends``.

Bad input — an unknown name, a missing or malformed results file or trace — prints one line and exits
with code 2; no traceback. ``compare`` exits 1 when it finds a regression beyond its threshold.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from profattn.errors import ProfattnError

REGIMES = ("train", "prefill", "decode", "all")


class _Group(click.Group):
    """Turns usage errors and :class:`ProfattnError` into one line ``profattn: error: ...`` and exit code 2."""

    def main(self, *args, **kwargs):  # type: ignore[override]
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help() if exc.ctx else self.get_help(click.Context(self)))
            sys.exit(0)
        except click.UsageError as exc:
            click.echo(f"profattn: error: {exc.format_message()} (see 'profattn --help')", err=True)
            sys.exit(2)
        except ProfattnError as exc:
            click.echo(f"profattn: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"profattn: error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("profattn: aborted", err=True)
            sys.exit(130)
        except OSError as exc:  # the file system refused: unwritable --out, full disk, ...
            where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
            click.echo(f"profattn: error: {exc.strerror or exc}{where}", err=True)
            sys.exit(2)
        sys.exit(rv if isinstance(rv, int) else 0)


def check_run_dir(out_dir: str | os.PathLike[str]) -> Path:
    """Validate ``--out`` of a run without touching the file system: it must be named (click turns ``""``
    into ``.``, so pass the raw string), not be a file, and be new, empty or a profattn run directory.

    Raises:
        ProfattnError: empty path, a non-directory (or one below a file), a foreign non-empty directory.
    """
    if not os.fspath(out_dir).strip():
        raise ProfattnError("--out must name a directory")
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ProfattnError(f"--out {out_dir} exists and is not a directory")
    _check_parents(out_dir, "--out")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / "results.json").exists():
        raise ProfattnError(f"--out {out_dir} is a non-empty directory that holds no profattn run; choose another")
    return out_dir


def _check_parents(path: Path, option: str) -> None:
    """Raise :class:`ProfattnError` when the nearest existing ancestor of ``path`` is not a directory."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ProfattnError(f"{option} {path}: parent {parent} is not a directory")
            return


def output_file(raw: str | os.PathLike[str], option: str = "--out", *, default_name: str | None = None) -> Path:
    """Validate an output file path before any work is done and return it.

    With ``default_name``, an existing directory or a path ending in ``/`` means ``<dir>/<default_name>``;
    without it, a directory is refused. Parents need not exist (they are created on writing), but none of
    them may be a file.

    Raises:
        ProfattnError: an empty path, a directory (without ``default_name``), or a parent that is a file.
    """
    text = os.fspath(raw)
    if not text.strip():
        raise ProfattnError(f"{option} must name a file")
    path = Path(text)
    if default_name is not None and (text.endswith(("/", os.sep)) or path.is_dir()):
        path = path / default_name
    elif path.is_dir():
        raise ProfattnError(f"{option} {path} is a directory")
    _check_parents(path, option)
    return path


def prepare_run_dir(out_dir: str | os.PathLike[str]) -> None:
    """Make ``out_dir`` ready for a new run (after :func:`check_run_dir`): create it; refuse a non-empty
    directory that is not a profattn run; in an old run directory, remove the previous traces and counters
    so runs never mix.

    Raises:
        ProfattnError: empty path, a non-directory, a foreign non-empty directory, or not writable.
    """
    import shutil

    out_dir = check_run_dir(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProfattnError(f"cannot write to --out {out_dir}: {exc.strerror or exc}") from None
    _lock_run_dir(out_dir)
    if any(out_dir.iterdir()):
        for sub in ("traces", "counters"):
            shutil.rmtree(out_dir / sub, ignore_errors=True)
    try:
        probe = out_dir / ".profattn-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ProfattnError(f"cannot write to --out {out_dir}: {exc.strerror or exc}") from None


_RUN_DIR_LOCKS: list[int] = []


def _lock_run_dir(out_dir: Path) -> None:
    """Hold an exclusive ``flock`` on the run directory itself for the rest of this process, so a second
    ``profattn profile`` into the same ``--out`` is refused instead of silently replacing the first's
    results (released by the OS when the process ends, however it ends).

    Raises:
        ProfattnError: another process holds the lock."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ProfattnError(f"--out {out_dir} is in use by another profattn run; wait for it or choose another --out") from None
    _RUN_DIR_LOCKS.append(fd)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:  # released when the command ends (in-process callers such as tests run many)
        ctx.call_on_close(lambda: (_RUN_DIR_LOCKS.remove(fd), os.close(fd)))


def _device(name: str | None):
    import torch

    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cuda", "cpu") and not name.startswith("cuda:"):
        raise ProfattnError(f"unknown device {name!r}; valid: cuda, cuda:N, cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ProfattnError(f"invalid device {name!r}; valid: cuda, cuda:N, cpu") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ProfattnError(f"--device {name} was asked for, but torch sees no CUDA device here (use --device cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ProfattnError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


@click.group(cls=_Group, no_args_is_help=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="profattn")
def main() -> None:
    """profattn: for this attention workload, which kernel wins, and why?"""


@main.command()
@click.option("--regime", type=click.Choice(REGIMES), default="all", show_default=True, help="Which phase's workloads to run.")
@click.option("--backend", "backend_names", multiple=True, metavar="NAME", help="Backend to run (repeatable; default: all). See `profattn backends`.")
@click.option("--preset", default=None, metavar="NAME", help="Workload preset: seed or small (default: seed on CUDA, small on CPU).")
@click.option("--workload", "workload_specs", multiple=True, metavar="SPEC",
              help="Instead of a preset, this workload (repeatable): field=value pairs, e.g. "
                   "phase=decode,batch=8,q_len=1,kv_len=8192,num_q_heads=16,num_kv_heads=4,head_dim=128,"
                   "dtype=bfloat16,kv_layout=paged,page_size=16 (what `profattn analyze` suggests for a traced call).")
@click.option("--device", "device_name", default=None, metavar="DEVICE", help="cuda or cpu (default: cuda when available).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=str), default="profattn-run", show_default=True,
              help="Run directory (results.json, traces/, report.html); created when the run starts.")
@click.option("--profile-calls", default=3, show_default=True, type=click.IntRange(1, 100), help="Calls per cell inside the profiler pass.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**31 - 1), help="Seed of the random inputs.")
@click.option("--counters/--no-counters", default=None, help="Nsight Compute counter pass (default: on when a GPU and ncu are present).")
@click.option("--repeat", default=1, show_default=True, type=click.IntRange(1, 100),
              help="Independent timing samples per cell (each a median of many reps); profattn compare needs >= 3 (5 recommended).")
@click.option("--keep-host-info", is_flag=True, help="Keep host name, user name, absolute paths and Python stacks in results, traces and report.")
def profile(regime: str, backend_names: tuple[str, ...], preset: str | None, device_name: str | None, out_dir: str | Path, profile_calls: int, seed: int,
            counters: bool | None, repeat: int = 1, keep_host_info: bool = False, workload_specs: tuple[str, ...] = ()) -> None:
    """Run every backend on the preset's workloads; write results.json, traces and report.html.

    --backend takes a registered name (see `profattn backends`; installed plugins included) or a plugin
    object as package.module:object."""
    from rich.console import Console

    from profattn.backends import all_backends
    from profattn.backends.plugins import resolve_backend
    from profattn.report.run import write_report
    from profattn.harness.session import SessionConfig, run_session
    from profattn.workload import Phase, default_preset_name, get_preset

    # Validate everything before the run directory is touched or anything is printed.
    out_dir = check_run_dir(out_dir)
    device = _device(device_name)
    if workload_specs:
        from profattn.workload import Preset, parse_workload_spec

        if preset:
            raise ProfattnError("give --preset or --workload, not both")
        preset_obj = Preset("custom", "from --workload", tuple(dict.fromkeys(parse_workload_spec(t) for t in workload_specs)))
    else:
        preset_obj = get_preset(preset or default_preset_name(device.type))
    backends = (tuple(dict.fromkeys(resolve_backend(n) for n in dict.fromkeys(backend_names)))  # one per plugin, however named
                if backend_names else all_backends())
    regimes = tuple(Phase) if regime == "all" else (Phase(regime),)
    if counters and device.type != "cuda":
        raise ProfattnError("--counters needs a CUDA device (hardware counters are read by Nsight Compute)")
    prepare_run_dir(out_dir)
    console = Console(stderr=True, highlight=False, emoji=False)
    console.print(f"profattn: preset [b]{preset_obj.name}[/b] on {device} → {out_dir}/ ({len(backends)} backends)")

    def progress(event: str, cell, done: int, total: int) -> None:
        if event == "start":
            return
        if event == "counters":
            console.print("counter pass: re-running the timed cells under Nsight Compute ...", soft_wrap=True)
            return
        if event == "repeat":
            lat = f"{cell.latency_samples_us[-1]:10.1f} µs" if cell.latency_samples_us else ""
            console.print(f"[repeat {done}/{total}] {cell.workload.tag:<43} {cell.backend:<15} {lat}", markup=False, soft_wrap=True)
            return
        lat = f"{cell.latency_us:10.1f} µs" if cell.latency_us is not None else " " * 13
        why = f"  {cell.reason[:160]}" if cell.reason else ""
        console.print(f"[{done:>3}/{total}] {cell.workload.tag:<48} {cell.backend:<15} {lat}  {cell.status}{why}", markup=False, soft_wrap=True)

    cfg = SessionConfig(preset=preset_obj, regimes=regimes, backends=backends, device=device, out_dir=out_dir,
                        profile_calls=profile_calls, seed=seed, counters=counters, repeat=repeat, keep_host_info=keep_host_info)
    try:
        run = run_session(cfg, progress)
    except KeyboardInterrupt:
        console.print(f"interrupted: {out_dir / 'results.json'} holds the cells that finished")
        sys.exit(130)
    path = write_report(run, out_dir / "report.html", keep_host_info=keep_host_info)
    from profattn.analysis.verdict import verdict
    from profattn.report.verdict import summary as verdict_summary

    console.print(f"verdict: {verdict_summary(verdict(run))}", soft_wrap=True)
    console.print(f"report: {path}")


SWEEP_BACKENDS = ("triton-paged-decode", "torch-paged-reference", "sdpa-flash", "sdpa-cudnn")


@main.command()
@click.argument("regime", metavar="REGIME")
@click.option("--backend", "backend_names", multiple=True, metavar="NAME", help=f"Backend (repeatable; default: {', '.join(SWEEP_BACKENDS)}).")
@click.option("--preset", default=None, metavar="NAME", help="Sweep preset (default: decode-sweep on CUDA, decode-sweep-small on CPU).")
@click.option("--device", "device_name", default=None, metavar="DEVICE", help="cuda or cpu (default: cuda when available).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=str), default="profattn-sweep", show_default=True)
@click.option("--counters/--no-counters", default=False, show_default=True, help="Nsight Compute counter pass over every cell.")
@click.pass_context
def sweep(ctx: click.Context, regime: str, backend_names: tuple[str, ...], preset: str | None, device_name: str | None,
          out_dir: str, counters: bool) -> None:
    """Sweep decode over kv_len x batch x page_size (+ ragged and shared-prefix batches): latency, GB/s, crossovers.

    REGIME must be decode (the only regime swept)."""
    from profattn.workload import SWEEP_PRESETS

    if regime != "decode":
        raise ProfattnError(f"sweep supports only 'decode', not {regime!r}")

    device = _device(device_name)
    names = backend_names or tuple(n for n in SWEEP_BACKENDS)
    ctx.invoke(profile, regime="decode", backend_names=names, preset=preset or SWEEP_PRESETS[device.type],
               device_name=str(device), out_dir=out_dir, profile_calls=1, seed=0, counters=counters)


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--out", "out_path", type=click.Path(path_type=str), default=None,
              help="HTML path (default: RUN_DIR/report.html); an existing directory or a path ending in / means DIR/report.html.")
@click.option("--keep-host-info", is_flag=True, help="Keep host name, user name and absolute paths in the report.")
def report(run_dir: Path, out_path: str | None, keep_host_info: bool = False) -> None:
    """Re-render RUN_DIR/report.html from results.json and the traces it names."""
    from profattn.report.run import write_report
    from profattn.results import read_results
    from profattn.harness.session import reattach_traces

    target = output_file(out_path, default_name="report.html") if out_path is not None else None
    run = read_results(run_dir)
    run = reattach_traces(run, run_dir if run_dir.is_dir() else run_dir.parent)
    path = write_report(run, target or (run_dir if run_dir.is_dir() else run_dir.parent) / "report.html", keep_host_info=keep_host_info)
    click.echo(f"report: {path}")


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
def counters(run_dir: Path) -> None:
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
    run = add_counters(run, run_dir)
    write_results(run, run_dir / "results.json")
    path = write_report(reattach_traces(run, run_dir), run_dir / "report.html")
    info = run.counters_info
    click.echo(f"counters: {info.status}{': ' + info.reason if info.reason else ''}")
    click.echo(f"report: {path}")


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_path", type=click.Path(path_type=str), default="report.html", show_default=True,
              help="HTML report to write; an existing directory or a path ending in / means DIR/report.html.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=str), default=None, help="Also write the analysis as versioned JSON.")
@click.option("--keep-host-info", is_flag=True, help="Keep absolute trace paths, host and user names in the report and JSON.")
def analyze(paths: tuple[Path, ...], out_path: str, json_path: str | None, keep_host_info: bool = False) -> None:
    """Analyze any PyTorch profiler trace (file, or directory of *.json / *.json.gz, one per rank): GPU time, launch shapes, attention calls.

    In a directory (searched recursively, e.g. a profattn run directory) files that are not traces or
    cannot be read are skipped with a warning; a file named itself must be a readable trace. Paths are
    shown relative to the directory given (or as the file's name) unless --keep-host-info."""
    from profattn.report.analyze import analyze_paths, write_html, write_json
    from profattn.report.run import fmt_us

    html_path = output_file(out_path, default_name="report.html")
    json_file = output_file(json_path, "--json") if json_path is not None else None
    analysis = analyze_paths(paths, keep_host_info=keep_host_info)
    for f in analysis.files:
        gpu = f"{f.kernel_count} kernels, {fmt_us(f.gpu_time_us)} GPU" if f.has_gpu_kernels else "no GPU kernels"
        click.echo(f"{f.label}: {len(f.calls)} attention call(s), {gpu} ({f.path})")
        for w in f.warnings:
            click.echo(f"warning: {f.label}: {w.message}", err=True)
    for warning in analysis.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"report: {write_html(analysis, html_path)}")
    if json_file is not None:
        click.echo(f"json: {write_json(analysis, json_file)}")


def _read_run(path: Path, keep_host_info: bool):
    from profattn.results import read_results

    run = read_results(path)
    if keep_host_info:
        return run
    from profattn.privacy import scrub

    return scrub(run)


@main.command()
@click.argument("base_run", type=click.Path(path_type=Path))
@click.argument("head_run", type=click.Path(path_type=Path))
@click.option("--threshold", default="5%", show_default=True, metavar="PCT",
              help="Smallest latency change that counts, as a percent (5%) or a fraction below 1 (0.05): slower = the whole interval above +threshold.")
@click.option("--out", "out_path", type=click.Path(path_type=str), default="compare.html", show_default=True, help="HTML comparison to write (a directory: DIR/compare.html).")
@click.option("--markdown", "markdown_path", type=click.Path(path_type=str), default=None, help="Also write a GitHub-flavoured Markdown comment (a directory: DIR/compare.md).")
@click.option("--force", is_flag=True, help="Compare runs from different GPU models or presets, or an interrupted run (a warning goes into every output).")
@click.option("--keep-host-info", is_flag=True, help="Keep host name, user name and absolute paths in the outputs.")
def compare(base_run: Path, head_run: Path, threshold: str, out_path: str, markdown_path: str | None, force: bool, keep_host_info: bool) -> None:
    """Compare two runs cell by cell: latency beyond noise, correctness, launch shape, bytes, winners.

    Exit code 0: no regression; 1: a regression beyond the threshold; 2: bad input."""
    from profattn.analysis import compare as comparison
    from profattn.report import compare as compare_report
    from profattn.report.verdict import workload_label

    out_path = output_file(out_path, default_name="compare.html")
    markdown_path = output_file(markdown_path, "--markdown", default_name="compare.md") if markdown_path is not None else None

    t = comparison.parse_threshold(threshold)
    base, head = _read_run(base_run, keep_host_info), _read_run(head_run, keep_host_info)
    bl, hl = compare_report.run_label(base_run), compare_report.run_label(head_run)
    if base_run.resolve() == head_run.resolve():
        click.echo("warning: BASE_RUN and HEAD_RUN are the same run: every cell will be within noise", err=True)
    if bl == hl:
        bl, hl = f"base ({bl})", f"head ({hl})"
    cmp = comparison.compare_runs(base, head, threshold=t, force=force, base_label=bl, head_label=hl)
    for w in cmp.warnings:
        click.echo(f"warning: {w}", err=True)
    for c in cmp.regressions:
        click.echo(f"regression: {workload_label(c.workload)} · {c.backend}: {'; '.join(compare_report.regression_texts(c))}")
    click.echo(compare_report.summary_line(cmp))
    click.echo(f"compare: {compare_report.write_html(cmp, out_path)}")
    if markdown_path is not None:
        from profattn.report.run import write_html_file
        from profattn.report.markdown import comparison_markdown

        click.echo(f"markdown: {write_html_file(comparison_markdown(cmp), markdown_path)}")
    sys.exit(1 if cmp.regression else 0)


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--out", "out_path", type=click.Path(path_type=str), default=None, help="Markdown file (default: print to stdout; a directory: DIR/summary.md).")
@click.option("--keep-host-info", is_flag=True, help="Keep host name, user name and absolute paths.")
def summary(run_dir: Path, out_path: str | None, keep_host_info: bool) -> None:
    """A run as GitHub-flavoured Markdown for a pull-request comment (under 65,536 characters)."""
    from profattn.report.markdown import run_markdown

    out_path = output_file(out_path, default_name="summary.md") if out_path is not None else None

    text = run_markdown(_read_run(run_dir, keep_host_info))
    if out_path is None:
        click.echo(text, nl=False)
    else:
        from profattn.report.run import write_html_file

        click.echo(f"summary: {write_html_file(text, out_path)}")


@main.command()
@click.option("--device", "device_name", default=None, metavar="DEVICE", help="cuda or cpu (default: cuda when available).")
def backends(device_name: str | None) -> None:
    """List backends and whether they can run here (and why not); installed plugins included."""
    from profattn.backends import backend_info

    device = _device(device_name)
    for info in backend_info(device):
        only = f" ({', '.join(info.phases)} only)" if info.available and len(info.phases) < 3 else ""
        state = f"available{only}" if info.available else f"unavailable: {info.reason}"
        click.echo(f"{info.name:<22} {info.family:<12} {state}\n{'':<22} {info.description}")


if __name__ == "__main__":  # pragma: no cover
    main()
