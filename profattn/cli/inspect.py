"""``profattn report``, ``analyze``, ``summary`` and ``backends``: the commands that read a run or a trace."""

from __future__ import annotations

from pathlib import Path

import click

from profattn.cli.main import check_device_name, distinct_outputs, main, output_file, read_run, resolve_device, run_inputs
from profattn.errors import ProfattnError, message_text


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--out", "out_path", type=click.Path(path_type=str), default=None,
              help="HTML path (default: RUN_DIR/report.html); an existing directory or a path ending in / means DIR/report.html.")
@click.option("--keep-host-info", is_flag=True, help="Keep host name, user name and absolute paths in the report.")
def report(run_dir: Path, out_path: str | None, keep_host_info: bool = False) -> None:
    """Re-render RUN_DIR/report.html from results.json and the traces it names."""
    from profattn.results import read_results

    root = run_dir if run_dir.is_dir() else run_dir.parent
    run = read_results(run_dir)
    target = output_file(out_path if out_path is not None else root / "report.html", default_name="report.html",
                         inputs=run_inputs(run_dir), own_report_of=root)
    from profattn.harness.session import reattach_traces  # torch and plotly: only once the inputs are good
    from profattn.report.run import trace_problem_text, write_report

    read = reattach_traces(run, root)
    path = write_report(read.run, target, traces=read.problems, keep_host_info=keep_host_info)
    if read.problems:  # said on the terminal too, not only inside the HTML
        first = read.problems[0]
        more = f" (and {len(read.problems) - 1} more: see the report's trace warnings)" if len(read.problems) > 1 else ""
        click.echo(f"warning: {first.cell_id}: {trace_problem_text(first)}{more}", err=True)
    click.echo(f"report: {path}")


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_path", type=click.Path(path_type=str), default=None, show_default="report.html",
              help="HTML report to write; an existing directory or a path ending in / means DIR/report.html. "
                   "Never a file that is not profattn's output, nor a run's report.html.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=str), default=None, help="Also write the analysis as versioned JSON.")
@click.option("--keep-host-info", is_flag=True, help="Keep absolute trace paths, host and user names in the report and JSON.")
@click.option("--recommend", "advise", is_flag=True, help="For each attention call: the measured or predicted best backend on the trace's GPU, from the results store, and the GPU time switching saves.")
@click.option("--db", default=None, metavar="PATH", help="Results store for --recommend (default: $PROFATTN_DB, else the user's cache directory).")
@click.option("--gpu", "gpu_name", default=None, metavar="NAME", help="GPU to look calls up on with --recommend (default: the trace's deviceProperties name).")
@click.option("--recommend-json", "advice_json", type=click.Path(dir_okay=False, path_type=str), default=None, help="Also write the --recommend advice as JSON.")
@click.option("--plan", "plan_n", default=0, type=click.IntRange(0, 1000), metavar="N",
              help="With --recommend: the N workloads whose measurement would most sharpen the calls' answers (expected "
                   "regret × GPU time), as `profattn profile --workload` lines.")
@click.option("--capture", "capture_paths", multiple=True, type=click.Path(path_type=Path), metavar="FILE",
              help="A trace that profiled the capture of the CUDA graphs the traces replay (repeatable; a directory's "
                   "capture traces are found by themselves).")
@click.option("--ceilings", "ceilings_run", type=click.Path(path_type=Path), default=None, metavar="RUN",
              help="A profattn run (directory or results.json) on the trace's GPU: its measured GEMM and read-stream "
                   "rates are the roof the serving steps' achieved rates are shown against.")
def analyze(paths: tuple[Path, ...], out_path: str | None, json_path: str | None, keep_host_info: bool = False,
            advise: bool = False, db: str | None = None, gpu_name: str | None = None, advice_json: str | None = None,
            capture_paths: tuple[Path, ...] = (), ceilings_run: Path | None = None, plan_n: int = 0) -> None:
    """Analyze any PyTorch profiler trace (file, or directory of *.json / *.json.gz, one per rank): GPU time, launch shapes, attention calls.

    In a directory (searched recursively, e.g. a profattn run directory) files that are not traces or
    cannot be read are skipped with a warning; a file named itself must be a readable trace. Paths are
    shown relative to the directory given (or as the file's name) unless --keep-host-info."""
    from profattn.analysis.calls.traces import analyze_paths
    from profattn.report.analyze import comm_lines, set_warnings, write_html, write_json
    from profattn.report.format import fmt_us

    if out_path is None and Path("results.json").is_file():
        raise ProfattnError("this directory holds a run (results.json): analyze would replace its report.html; "
                            "write elsewhere with --out PATH")
    html_path = output_file(out_path if out_path is not None else "report.html", default_name="report.html", inputs=paths)
    json_file = output_file(json_path, "--json", inputs=paths) if json_path is not None else None
    advice_file = output_file(advice_json, "--recommend-json", inputs=paths) if advice_json is not None else None
    distinct_outputs(("--out", html_path), ("--json", json_file), ("--recommend-json", advice_file))
    if (db or gpu_name or advice_file or plan_n) and not advise:
        raise ProfattnError("--db, --gpu, --recommend-json and --plan go with --recommend")
    store = None
    if advise:
        from profattn.store import open_store

        store = open_store(db, create=False)
    ceilings, ceilings_gpu = _ceilings(ceilings_run) if ceilings_run is not None else (None, None)
    analysis = analyze_paths(paths, keep_host_info=keep_host_info, captures=capture_paths)
    for f in analysis.files if ceilings is not None else ():
        if f.has_gpu_kernels and f.device_name != ceilings_gpu:
            click.echo(message_text(f"warning: {f.label}: the ceilings were measured on {ceilings_gpu or 'an unnamed GPU'}, "
                                    f"the trace ran on {f.device_name or 'a GPU it does not name'}: the fractions "
                                    "compare different machines"), err=True)
    from profattn.report.engine import RECIPE, engine_lines

    needs_recipe = False
    for f in analysis.files:
        other = any(getattr(w, "code", "") == "other_accelerator" for w in f.warnings)
        gpu = (f"{f.kernel_count} kernel{'' if f.kernel_count == 1 else 's'}, {fmt_us(f.gpu_time_us)} GPU" if f.has_gpu_kernels else
               "no CUDA/ROCm kernels (another accelerator's device events: see the warning)" if other else "no GPU kernels")
        click.echo(message_text(f"{f.label}: {len(f.calls)} attention call(s), {gpu} ({f.path})"))
        for line in engine_lines(f, ceilings):
            click.echo(message_text(line))
        for w in f.warnings:
            click.echo(message_text(f"warning: {f.label}: {w.message}"), err=True)
        needs_recipe |= bool(f.graph_merge is not None and f.graph_merge.unplaced_attention_kernels)
    if needs_recipe:
        click.echo("to give graph-replayed attention kernels their ops and shapes, profile the graphs' capture too:")
        for line in RECIPE:
            click.echo(f"  {line}")
    for line in comm_lines(analysis):
        click.echo(message_text(line))
    for warning in set_warnings(analysis):
        click.echo(message_text(f"warning: {warning}"), err=True)
    click.echo(f"report: {write_html(analysis, html_path, ceilings=ceilings)}")
    if json_file is not None:
        click.echo(f"json: {write_json(analysis, json_file)}")
    if store is not None:
        _advise(store, analysis, gpu_name, advice_file, plan_n)


def _ceilings(path: Path):
    """The measured ceilings of the profattn run at ``path`` (``--ceilings``) and the GPU they were measured on.

    Raises:
        ProfattnError: not a readable run, or a run without ceilings (a CPU run measures none)."""
    from profattn.results import read_results

    run = read_results(path)
    if run.ceilings is None:
        raise ProfattnError(f"{path}: this run measured no ceilings (a CPU run, or one made before they existed)")
    return run.ceilings, run.environment.device_name


def _advise(store, analysis, gpu: str | None, advice_file: Path | None, plan_n: int = 0) -> None:
    """``analyze --recommend``: advice per trace file from the store, printed (and written as JSON)."""
    import json

    from profattn.analysis.selection.recommend import advise_trace, trace_gpu
    from profattn.report.recommend import trace_advice_json, trace_advice_text

    with store:
        advice = [advise_trace(store, f, trace_gpu(store, f, gpu), plan_n=plan_n) for f in analysis.files]
    click.echo(trace_advice_text(advice), nl=False)
    if advice_file is not None:
        from profattn.files import write_text_atomic

        click.echo(f"recommend json: {write_text_atomic(advice_file, json.dumps(trace_advice_json(advice), indent=1) + chr(10))}")


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--out", "out_path", type=click.Path(path_type=str), default=None, help="Markdown file (default: print to stdout; a directory: DIR/summary.md).")
@click.option("--keep-host-info", is_flag=True, help="Keep host name, user name and absolute paths.")
def summary(run_dir: Path, out_path: str | None, keep_host_info: bool) -> None:
    """A run as GitHub-flavoured Markdown for a pull-request comment (under 65,536 characters)."""
    from profattn.analysis.run.analyze import analyze_run
    from profattn.report.markdown import run_markdown

    out_path = output_file(out_path, default_name="summary.md", inputs=run_inputs(run_dir)) if out_path is not None else None

    text = run_markdown(analyze_run(read_run(run_dir, keep_host_info)))
    if out_path is None:
        click.echo(text, nl=False)
    else:
        from profattn.report.render import write_html_file

        click.echo(f"summary: {write_html_file(text, out_path)}")


@main.command()
@click.option("--device", "device_name", default=None, metavar="DEVICE", help="cuda or cpu (default: cuda when available).")
def backends(device_name: str | None) -> None:
    """List backends and whether they can run here (and why not); installed plugins included."""
    check_device_name(device_name)  # before the backends' (torch's) import
    from profattn.backends import backend_info
    from profattn.workload import Phase

    device = resolve_device(device_name)
    for info in backend_info(device):
        only = f" ({', '.join(info.phases)} only)" if info.available and len(info.phases) < len(Phase) else ""
        state = f"available{only}" if info.available else f"unavailable: {info.reason}"
        click.echo(f"{message_text(info.name):<22} {message_text(info.family):<12} {state}\n{'':<22} "
                   f"{message_text(info.description)}")
