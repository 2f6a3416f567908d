"""issue 33, items 4, 5 and 17: a name from a plugin or a file — quotes, rich markup, HTML, control characters — never
ends a command in a traceback, never injects markup (rich, plotly, Markdown), and never reaches a one-line message raw."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from profattn.cli import main
from profattn.results import read_results, write_results

PLUGIN = '''
from profattn.backends.registry import get_backend


class Named:
    def __init__(self, name):
        self._inner = get_backend("eager")
        self.name, self.family, self.description = name, self._inner.family, "eager under another name"

    def unsupported_reason(self, workload, device):
        return self._inner.unsupported_reason(workload, device)

    def prepare(self, workload, device):
        return self._inner.prepare(workload, device)


quoted = Named('my"kernel')
markup = Named("x[/]y")
link = Named("[link]z")
'''
ARGS = ["profile", "--device", "cpu", "--regime", "decode", "--preset", "small"]


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch):
    (tmp_path / "named_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "named_plugin"
    sys.modules.pop("named_plugin", None)


def test_a_quote_in_a_plugin_name_is_one_line(tmp_path: Path, plugin: str):
    """Before: a traceback from privacy.scrub_trace_file (torch writes the range name into the JSON unescaped)."""
    res = CliRunner().invoke(main, [*ARGS, "--backend", f"{plugin}:quoted", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    (line,) = [x for x in res.output.splitlines() if x.startswith("profattn: error:")]
    assert "my\"kernel" in line and "rename it" in line


def test_rich_markup_in_names_is_printed_as_written(tmp_path: Path, plugin: str):
    """Before: ``x[/]y`` ended profile in a rich MarkupError traceback, ``[link]`` vanished from the verdict line."""
    for obj, name in (("markup", "x[/]y"), ("link", "[link]z")):
        res = CliRunner().invoke(main, [*ARGS, "--backend", f"{plugin}:{obj}", "--backend", "sdpa-math",
                                        "--out", str(tmp_path / obj)])
        assert res.exit_code == 0 and "Traceback" not in res.output, res.output
        (verdict,) = [x for x in res.output.splitlines() if x.startswith("verdict: ")]
        assert name in verdict or "sdpa-math" in verdict
        assert any(name in x for x in res.output.splitlines() if x.startswith("[")), res.output


def test_html_in_names_is_escaped_in_every_chart():
    """Before: a backend named ``<a href=…>sdpa-flash</a>`` rendered as a link in every plotly legend and hover."""
    from factories import SEED, cell, run

    from profattn.analysis.run.analyze import analyze_run
    from profattn.report.run import chart_figures

    evil = '<a href="https://x.example">sdpa-flash</a>'
    cells = [cell(w, evil, 100.0 + i) for i, w in enumerate(SEED.workloads[:6])]
    cells += [cell(w, "eager", 300.0 + i, family="eager") for i, w in enumerate(SEED.workloads[:6])]
    figures = chart_figures(analyze_run(run(cells)))
    text = json.dumps([f["figure"] for f in figures])
    assert figures and "<a href" not in text and "&lt;a href=" in text
    for f in figures:
        for trace in f["figure"]["data"]:
            assert "<a" not in (trace.get("name") or "") and "<a" not in (trace.get("hovertemplate") or "")


def test_control_characters_never_reach_a_message_or_markdown_raw(tmp_path: Path):
    """Before: a newline, CR, BEL or ESC in a file name or a results field reached one-line messages raw (a forged
    ``profattn: error:`` line) and ESC reached compare's Markdown."""
    repo = Path(__file__).resolve().parents[2]
    base = read_results(repo / "tests" / "data" / "runs" / "cpu-aa" / "first")
    forged = "eager\x1b[31m\nprofattn: error: forged\x07\r"
    head = replace(base, preset=base.preset, cells=tuple(replace(c, reason=forged) if c.backend == "eager" else c
                                                          for c in base.cells))
    head = replace(head, environment=replace(head.environment, torch="2.13\x1b[2J\nprofattn: error: forged"))
    b = write_results(base, tmp_path / "b" / "results.json").parent
    h = write_results(head, tmp_path / "h" / "results.json").parent
    res = CliRunner().invoke(main, ["compare", str(b), str(h), "--out", str(tmp_path / "c.html"),
                                                    "--markdown", str(tmp_path / "c.md")])
    assert res.exit_code in (0, 1, 3), res.output
    for stream in (res.stdout, res.stderr):
        assert "\x1b" not in stream and "\x07" not in stream and "\r" not in stream
        assert not any(line.startswith("profattn: error: forged") for line in stream.splitlines())
    md = (tmp_path / "c.md").read_text()
    assert "\x1b" not in md and "\x07" not in md
    bad = tmp_path / "no\nprofattn: error: forged\x1b"
    res = CliRunner().invoke(main, ["report", str(bad)])
    assert res.exit_code == 2 and len(res.stderr.splitlines()) == 1 and "\x1b" not in res.stderr, res.stderr


def test_a_run_with_a_module_object_plugin_can_be_resumed(tmp_path: Path, plugin: str):
    """issue 33, item 6: before, "unknown backend 'my-kernel'" (and --backend is refused with --resume, so the interrupt
    message's own advice failed); the run records how to load its plugins."""
    from profattn.backends.registry import unregister
    from profattn.results import CellResult, CellStatus

    out = tmp_path / "r"
    (tmp_path / "named_plugin.py").write_text(PLUGIN + '\nmine = Named("my-kernel")\n')
    res = CliRunner().invoke(main, [*ARGS, "--backend", f"{plugin}:mine", "--out", str(out)])
    assert res.exit_code == 0, res.output
    run = read_results(out)
    assert run.plugins == (f"{plugin}:mine",)
    first = run.cells[-1]
    pending = CellResult(cell_id=first.cell_id, workload=first.workload, backend=first.backend, family=first.family,
                         status=CellStatus.PENDING)
    write_results(replace(run, cells=(*run.cells[:-1], pending)), out / "results.json")
    unregister("my-kernel")  # a fresh process knows only built-ins and entry points
    res = CliRunner().invoke(main, ["profile", "--resume", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert read_results(out).cells[-1].status is not CellStatus.PENDING


def test_analyze_lines_escape_control_characters_in_file_names(tmp_path: Path):
    """A trace file name holding a newline and ESC: analyze's per-file line stays one line, ESC escaped."""
    import shutil

    repo = Path(__file__).resolve().parents[2]
    src = repo / "tests" / "data" / "traces" / "h200_sdpa_decode_flash_gqa.pt.trace.json.gz"
    odd = tmp_path / "a\nprofattn: error: forged\x1b[2J.pt.trace.json.gz"
    shutil.copy(src, odd)
    res = CliRunner().invoke(main, ["analyze", str(odd), "--out", str(tmp_path / "a.html")])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.output and not any(x.startswith("profattn: error: forged") for x in res.output.splitlines())
