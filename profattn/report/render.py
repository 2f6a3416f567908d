"""The one jinja2 environment of profattn's HTML pages and the one way to render them.

Every page (``report`` for ``profattn profile``/``report``, ``analyze`` for ``profattn analyze``,
``compare`` for ``profattn compare``) is ``templates/<kind>.html.j2`` inside this package; each extends
``templates/base.html.j2``, which holds the page head, the shared CSS and the plotly start-up once.
Templates are autoescaped (every string from a trace, a run or an exception is escaped) and strict (a
missing context key is an error, not an empty cell); chart data travels as JSON through ``|tojson``.
plotly.js is inlined once per page, so a page opens offline.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

__all__ = ["PAGE_KINDS", "environment", "plotly_js", "render", "templates_dir", "write_html_file"]

#: The pages :func:`render` knows: ``kind`` → template file in :func:`templates_dir`.
PAGE_KINDS: dict[str, str] = {
    "report": "report.html.j2",
    "analyze": "analyze.html.j2",
    "compare": "compare.html.j2",
}


def templates_dir() -> Path:
    """Where the page templates live: ``profattn/report/templates`` (package data, so a non-editable
    install renders too)."""
    return Path(str(resources.files("profattn.report").joinpath("templates")))


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The shared jinja2 environment (``templates/``, autoescaped, ``StrictUndefined``, block trimming);
    built once per process."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=jinja2.select_autoescape(["html", "j2"], default_for_string=True, default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


@functools.lru_cache(maxsize=1)
def plotly_js() -> str:
    """The plotly.js bundle shipped with the installed plotly (about 4.6 MB of JavaScript), read once."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def render(kind: str, context: Mapping[str, Any]) -> str:
    """One whole page as a self-contained HTML string: ``templates/<kind>.html.j2`` rendered with
    ``context`` plus ``plotly_js`` (the inline bundle the base template places once).

    Args:
        kind: ``"report"``, ``"analyze"`` or ``"compare"`` (:data:`PAGE_KINDS`).
        context: the template's variables (display-ready rows, chart dicts, records); ``plotly_js`` is
            added here and must not be in it.

    Raises:
        ValueError: an unknown ``kind``, or ``context`` already holds ``plotly_js``.
        jinja2.UndefinedError: the template uses a variable ``context`` lacks.
    """
    try:
        name = PAGE_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown page kind {kind!r}: expected one of {', '.join(PAGE_KINDS)}") from None
    if "plotly_js" in context:
        raise ValueError("render() adds plotly_js itself; leave it out of the context")
    return environment().get_template(name).render(**context, plotly_js=plotly_js())


def write_html_file(text: str, path: str | os.PathLike[str]) -> Path:
    """Write an HTML (or Markdown) string to ``path`` atomically (:func:`profattn.files.write_text_atomic`:
    parents created, never a truncated file); returns the path.

    Raises:
        ProfattnError: the file cannot be written (names the path)."""
    from profattn.files import write_text_atomic

    return write_text_atomic(path, text)
