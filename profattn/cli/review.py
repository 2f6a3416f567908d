"""``profattn compare``: two runs, cell by cell."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from profattn.cli.main import distinct_outputs, main, output_file, read_run, run_inputs


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

    inputs = run_inputs(base_run) + run_inputs(head_run)
    out_path = output_file(out_path, default_name="compare.html", inputs=inputs)
    markdown_path = output_file(markdown_path, "--markdown", default_name="compare.md", inputs=inputs) if markdown_path is not None else None
    distinct_outputs(("--out", out_path), ("--markdown", markdown_path))

    t = comparison.parse_threshold(threshold)
    base, head = read_run(base_run, keep_host_info), read_run(head_run, keep_host_info)
    bl, hl = compare_report.run_label(base_run), compare_report.run_label(head_run)
    if base_run.resolve() == head_run.resolve():
        click.echo("warning: BASE_RUN and HEAD_RUN are the same run: every cell will be within noise", err=True)
    if bl == hl:
        bl, hl = f"base ({bl})", f"head ({hl})"
    cmp = comparison.compare_runs(base, head, threshold=t, force=force, base_label=bl, head_label=hl)
    for w in cmp.warnings:
        click.echo(f"warning: {w}", err=True)
    shift = compare_report.drift_text(cmp)
    if shift:
        click.echo(shift)
    for c in cmp.regressions:
        click.echo(f"regression: {workload_label(c.workload)} · {c.backend}: {'; '.join(compare_report.regression_texts(c))}")
    click.echo(compare_report.summary_line(cmp))
    click.echo(f"compare: {compare_report.write_html(cmp, out_path)}")
    if markdown_path is not None:
        from profattn.report.markdown import comparison_markdown
        from profattn.report.render import write_html_file

        click.echo(f"markdown: {write_html_file(comparison_markdown(cmp), markdown_path)}")
    sys.exit(1 if cmp.regression else 0)
