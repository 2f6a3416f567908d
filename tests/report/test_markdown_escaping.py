"""Markdown from runs is inert, tested like the HTML: every field that comes from a file — the environment's device
name and versions, the preset, backend names, reasons — renders as the text it is (no link, image, emphasis, HTML
or mention), checked by rendering the summary with a CommonMark parser (markdown-it-py, as rich ships it) with
GitHub's tables and strikethrough."""

from __future__ import annotations

import html
import re
from dataclasses import replace

import pytest
from factories import SEED, cell, run
from markdown_it import MarkdownIt

from profattn.analysis.comparison.compare import compare_runs
from profattn.analysis.run.analyze import analyze_run
from profattn.report.format import md_code, md_text
from profattn.report.markdown import comparison_markdown, run_markdown

#: Each is markup in GitHub Markdown: a link, an image, emphasis, raw HTML, a mention, a reference, code, a list.
HOSTILE = "[x](https://evil.example) ![i](https://evil.example/p.png) **bold** _em_ ~~s~~ <b>b</b> @alice #12 `c` | pipe"


def _rendered(md: str) -> str:
    return MarkdownIt("commonmark").enable("table").enable("strikethrough").render(md)


#: What :data:`HOSTILE` would become if it were interpreted.
INJECTED = ('href="https://evil', 'src="https://evil', "<strong>bold</strong>", "<em>em</em>", "<s>s</s>", "<del>s</del>",
            "<b>b</b>", "<code>c</code>", "<script>")


def _no_injected_markup(out: str) -> None:
    for markup in INJECTED:
        assert markup not in out, (markup, out[:3000])


def _plain(out: str) -> str:
    """The rendered text: tags dropped, entities decoded, word joiners removed."""
    return html.unescape(re.sub(r"<[^>]+>", "", out)).replace("\u2060", "")


def test_environment_fields_in_the_summary_header_are_inert():
    """issue 26: summary wrote device_name, torch and triton raw into the header: a results.json attached to a PR put
    markup into the comment."""
    r = run([cell(w, "eager", 10.0 + i) for i, w in enumerate(SEED.workloads)])
    env = replace(r.environment, device_name="GPU " + HOSTILE, torch="2.11 " + HOSTILE, triton="3.6 <script>x</script>")
    md = run_markdown(analyze_run(replace(r, environment=env, preset="seed`x` " + HOSTILE)))
    header = "\n".join(md.splitlines()[:4])
    out = _rendered(header)
    _no_injected_markup(out)
    assert "<a " not in out and "<img" not in out and "<strong>" not in out and "<code>" in out  # the preset: a code span
    plain = _plain(out)
    assert "GPU " + HOSTILE in plain and "2.11 " + HOSTILE in plain and "3.6 <script>x</script>" in plain
    assert "seed`x` " + HOSTILE in plain
    assert "@\u2060alice" in md and "#\u206012" in md  # no mention, no issue link on GitHub


@pytest.mark.parametrize("field", ["backend", "reason"])
def test_table_cells_from_a_run_are_inert(field: str):
    w = SEED.workloads[0]
    value = "x " + HOSTILE
    c = cell(w, "eager" if field == "reason" else value, 10.0, reason=value if field == "reason" else "")
    md = run_markdown(analyze_run(run([c])))
    out = _rendered(md)
    table = out[out.index("<table>"):]
    _no_injected_markup(out)
    assert table.count("<td>") == 8  # the pipe in the value did not split the row
    plain = _plain(table)
    assert value[:120] in plain
    if field == "backend":  # the winner stays bold: profattn's own markup around the escaped name
        assert "<strong>x [x](https://evil.example)" in table


def test_comparison_labels_and_backends_are_inert():
    w = SEED.workloads[0]
    evil = "b " + HOSTILE
    base, head = run([cell(w, evil, 10.0)]), run([cell(w, evil, 10.0)])
    md = comparison_markdown(compare_runs(base, head, base_label="base " + HOSTILE, head_label="head"))
    out = _rendered(md)
    _no_injected_markup(out)
    plain = _plain(out)
    assert "base " + HOSTILE in plain and evil in plain


def test_the_escapes_themselves():
    assert md_text("1. x") == "1\\. x" and md_text("- x") == "\\- x" and md_text("200.0 µs") == "200.0 µs"
    assert md_text("a\nb|c") == "a b\\|c" and md_text("<b>&") == "&lt;b&gt;&amp;"
    assert md_code("a`b") == "``a`b``" and md_code("`x") == "`` `x ``" and md_code("") == "`  `"
