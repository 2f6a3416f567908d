"""``profattn compare``: two runs, cell by cell; or, with ``--ab``, two backends timed alternately in one process."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from profattn.cli.main import REGIMES, distinct_outputs, main, output_file, read_run, run_inputs
from profattn.errors import ProfattnError, message_text
from profattn.files import resolve_path


#: A/B rounds when --repeat is not given: with Holm over a few workloads, about 8 pairs are needed for a 10 % change.
AB_ROUNDS = 10
#: Exit code of a comparison with no regression but cells too noisy to judge (0: pass, 1: regression, 2: bad input).
INCONCLUSIVE_EXIT = 3


@main.command()
@click.argument("base", metavar="BASE")
@click.argument("head", metavar="HEAD")
@click.option("--threshold", default="5%", show_default=True, metavar="PCT",
              help="Smallest latency change that counts, as a percent (5%) or a fraction below 1 (0.05).")
@click.option("--out", "out_path", type=click.Path(path_type=str), default="compare.html", show_default=True, help="HTML comparison to write (a directory: DIR/compare.html).")
@click.option("--markdown", "markdown_path", type=click.Path(path_type=str), default=None, help="Also write a GitHub-flavoured Markdown comment (a directory: DIR/compare.md).")
@click.option("--force", is_flag=True, help="Compare runs from different GPU models or presets, or an interrupted run (a warning goes into every output).")
@click.option("--keep-host-info", is_flag=True, help="Keep host name, user name and absolute paths in the outputs.")
@click.option("--ab", is_flag=True, help="A/B in one process: BASE and HEAD are backends (names or package.module:object), "
                                         "timed alternately, round by round and workload by workload, on the workloads "
                                         "chosen below; the recommended gate for a kernel change.")
@click.option("--preset", default=None, metavar="NAME", help="--ab: the workload preset (default: seed on CUDA, small on CPU).")
@click.option("--workload", "workload_specs", multiple=True, metavar="SPEC", help="--ab: a workload instead of a preset (repeatable; profile --workload grammar).")
@click.option("--regime", type=click.Choice(REGIMES), default="all", show_default=True, help="--ab: which phase's workloads.")
@click.option("--device", "device_name", default=None, metavar="DEVICE", help="--ab: cuda or cpu (default: cuda when available).")
@click.option("--repeat", "rounds", default=None, type=click.IntRange(3, 1000), metavar="N",
              help=f"--ab: interleaved timing rounds per workload (default {AB_ROUNDS}).")
@click.option("--run-dir", "run_dir", type=click.Path(file_okay=False, path_type=str), default=None,
              help="--ab: the run directory the measurement writes (default: a new profattn-runs/ab-<UTC time>).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**31 - 1), help="--ab: seed of the random inputs.")
@click.option("--db", default=None, metavar="PATH", help="--ab: results store the run's cells are added to.")
@click.pass_context
def compare(ctx: click.Context, base: str, head: str, threshold: str, out_path: str, markdown_path: str | None, force: bool,
            keep_host_info: bool, ab: bool = False, preset: str | None = None, workload_specs: tuple[str, ...] = (),
            regime: str = "all", device_name: str | None = None, rounds: int | None = None, run_dir: str | None = None,
            seed: int = 0, db: str | None = None) -> None:
    """Compare two runs (BASE_RUN HEAD_RUN) cell by cell: latency beyond noise, correctness, launch shape, bytes,
    winners; or, with --ab, two backends (BASE_BACKEND HEAD_BACKEND) timed alternately in one process.

    Exit code 0: no regression; 1: a regression beyond the threshold; 2: bad input; 3: inconclusive (no regression
    found, but cells too noisy to judge: compare --ab, more --repeat, fewer threads; or, with --force, the runs share
    no cell, so nothing was compared)."""
    from profattn.analysis.comparison import compare as comparison

    given = [name for name, v in (("--preset", preset), ("--workload", workload_specs), ("--device", device_name),
                                  ("--repeat", rounds), ("--run-dir", run_dir), ("--db", db),
                                  ("--regime", None if regime == "all" else regime), ("--seed", seed or None)) if v]
    if not ab and given:
        raise ProfattnError(f"{', '.join(given)} go with --ab (measuring two backends); two runs are compared as they are")
    inputs = [] if ab else run_inputs(base) + run_inputs(head)
    out_file = output_file(out_path, default_name="compare.html", inputs=inputs)
    md_file = output_file(markdown_path, "--markdown", default_name="compare.md", inputs=inputs) if markdown_path is not None else None
    distinct_outputs(("--out", out_file), ("--markdown", md_file))
    t = comparison.parse_threshold(threshold)
    if ab:
        cmp = _measure_ab(ctx, base, head, t, preset=preset, workload_specs=workload_specs, regime=regime,
                          device_name=device_name, rounds=rounds or AB_ROUNDS, run_dir=run_dir, seed=seed, db=db,
                          keep_host_info=keep_host_info, outputs=(out_file, md_file))
    else:
        cmp = _compare_runs(Path(base), Path(head), t, force=force, keep_host_info=keep_host_info)
    _report(cmp, out_file, md_file)


def _compare_runs(base_run: Path, head_run: Path, t: float, *, force: bool, keep_host_info: bool):
    from profattn.analysis.comparison import compare as comparison
    from profattn.report import compare as compare_report

    base, head = read_run(base_run, keep_host_info), read_run(head_run, keep_host_info)
    bl, hl = compare_report.run_label(base_run), compare_report.run_label(head_run)
    def results_file(p: Path) -> Path:  # a run directory and its results.json are one run
        return resolve_path(p / "results.json" if p.is_dir() else p)

    if results_file(base_run) == results_file(head_run):
        click.echo("warning: BASE_RUN and HEAD_RUN are the same run: every cell will be within noise", err=True)
    if bl == hl:
        bl, hl = f"base ({bl})", f"head ({hl})"
    return comparison.compare_runs(base, head, threshold=t, force=force, base_label=bl, head_label=hl)


def _measure_ab(ctx: click.Context, base: str, head: str, t: float, *, preset, workload_specs, regime, device_name,
                rounds: int, run_dir: str | None, seed: int, db: str | None, keep_host_info: bool, outputs):
    """``compare --ab``: one profile run of the two backends with ``rounds`` interleaved timing rounds
    (:func:`profattn.harness.session.ab_rounds`), then their paired comparison."""
    from profattn.analysis.comparison import compare as comparison
    from profattn.cli.measure import profile
    from profattn.harness import rundir

    directory = Path(run_dir) if run_dir is not None else rundir.default_run_dir(kind="ab")
    for option, path in (("--out", outputs[0]), ("--markdown", outputs[1])):
        if path is not None and path.resolve().parent == directory.resolve() and path.name in ("results.json", "report.html"):
            raise ProfattnError(f"{option} {path} is a file of the A/B run directory; choose another name")
    ctx.invoke(profile, regime=regime, backend_names=(base, head), preset=preset, device_name=device_name,
               out_dir=str(directory), profile_calls=3, seed=seed, counters=False, repeat=rounds + 1,
               keep_host_info=keep_host_info, workload_specs=workload_specs, kind="ab", db=db, ab=(base, head))
    click.echo(f"A/B run: {directory}")
    return comparison.compare_ab(read_run(directory, keep_host_info), threshold=t)


def _report(cmp, out_file: Path, md_file: Path | None) -> None:
    """Print the comparison's warnings, drift and regressions, write its HTML (and Markdown); exit 1 on a regression,
    3 when inconclusive or nothing was compared (:attr:`Comparison.passed` false without a regression), else 0."""
    from profattn.report import compare as compare_report
    from profattn.report.verdict import workload_label

    for w in cmp.warnings:
        click.echo(f"warning: {message_text(w)}", err=True)
    shift = compare_report.drift_text(cmp)
    if shift:
        click.echo(message_text(shift))
    for c in cmp.regressions:
        click.echo(message_text(f"regression: {workload_label(c.workload)} · {c.backend}: "
                                f"{'; '.join(compare_report.regression_texts(c))}"))
    click.echo(compare_report.summary_line(cmp))
    headline = compare_report.inconclusive_headline(cmp)
    if headline is not None:
        click.echo(f"{headline}: {compare_report.inconclusive_why(cmp)}")
    click.echo(f"compare: {compare_report.write_html(cmp, out_file)}")
    if md_file is not None:
        from profattn.report.markdown import comparison_markdown
        from profattn.report.render import write_html_file

        click.echo(f"markdown: {write_html_file(comparison_markdown(cmp), md_file)}")
    sys.exit(1 if cmp.regression else 0 if cmp.passed else INCONCLUSIVE_EXIT)
