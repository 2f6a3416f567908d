"""The one jinja2 environment of profattn's HTML pages and the one way to render them.

Every page (``report`` for ``profattn profile``/``report``, ``analyze`` for ``profattn analyze``,
``compare`` for ``profattn compare``) is ``templates/<kind>.html.j2`` inside this package; each extends
``templates/base.html.j2``, which holds the page head, the shared CSS and the plotly start-up once.
Templates are autoescaped (every string from a trace, a run or an exception is escaped) and strict (a
missing context key is an error, not an empty cell); chart data travels as JSON through ``|tojson``.
plotly.js is inlined once per page, gzipped and base64-encoded (4.6 MB of JavaScript → about 1.9 MB),
and unpacked in the browser with ``DecompressionStream("gzip")`` before the charts are drawn, so a page
stays small and still opens offline.
"""

from __future__ import annotations

import base64
import functools
import gzip
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2

__all__ = ["PAGE_KINDS", "cache_dir", "environment", "plotly_js", "plotly_js_gzip_base64", "render", "templates_dir",
           "write_html_file"]

#: The pages :func:`render` knows: ``kind`` → template file in :func:`templates_dir`.
PAGE_KINDS: dict[str, str] = {
    "report": "report.html.j2",
    "analyze": "analyze.html.j2",
    "compare": "compare.html.j2",
    "simulate": "simulate.html.j2",
}


def templates_dir() -> Path:
    """Where the page templates live: ``profattn/report/templates`` (package data, so a non-editable
    install renders too)."""
    return Path(str(resources.files("profattn.report").joinpath("templates")))


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The shared jinja2 environment (``templates/``, autoescaped, ``StrictUndefined``, block trimming);
    built once per process. Compiled templates are kept in ``cache_dir()/jinja2`` (jinja2's
    ``FileSystemBytecodeCache``, keyed by each template's source: an edited template is compiled again), since
    compiling the page templates takes a process 0.15 s; without a writable cache directory they are compiled each
    time."""
    import jinja2

    directory = cache_dir() / "jinja2"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        bytecode = jinja2.FileSystemBytecodeCache(str(directory)) if os.access(directory, os.W_OK) else None
    except OSError:
        bytecode = None
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=jinja2.select_autoescape(["html", "j2"], default_for_string=True, default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        bytecode_cache=bytecode,
    )


def _plotly_bundle() -> Path:
    """The plotly.js file the installed plotly ships (``plotly/package_data/plotly.min.js``), found without importing
    plotly (its import costs a tenth of a second)."""
    from importlib.util import find_spec

    spec = find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("plotly is not installed (pip install plotly)")
    return Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"


@functools.lru_cache(maxsize=1)
def plotly_js() -> str:
    """The plotly.js bundle shipped with the installed plotly (about 4.6 MB of JavaScript), read once."""
    bundle = _plotly_bundle()
    if bundle.is_file():
        return bundle.read_text(encoding="utf-8")
    from plotly.offline import get_plotlyjs  # another layout of the package: ask plotly

    return get_plotlyjs()


def cache_dir() -> Path:
    """Where profattn keeps what it can rebuild: ``$XDG_CACHE_HOME/profattn``, else ``~/.cache/profattn``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "profattn"


@functools.lru_cache(maxsize=1)
def plotly_js_gzip_base64() -> str:
    """:func:`plotly_js` gzipped (level 9, no timestamp, so the same bundle always gives the same page) and
    base64-encoded: about 1.9 MB of ASCII instead of 4.6 MB, placed once by the base template, which
    unpacks it with the browser's ``DecompressionStream("gzip")``.

    Compressing takes 0.3 s, which is most of what ``profattn analyze`` of a small trace spends, so the result is kept
    in :func:`cache_dir` under the bundle's SHA-256 (``plotly-<hash>.js.gz.b64``: another plotly, another file) and read
    back by later processes; a cache that cannot be read or written is only a slower page."""
    import hashlib

    js = plotly_js().encode("utf-8")
    cached = cache_dir() / f"plotly-{hashlib.sha256(js).hexdigest()[:16]}.js.gz.b64"
    try:
        text = cached.read_text(encoding="ascii")
        if text and text.isascii():
            return text
    except (OSError, UnicodeDecodeError):
        pass
    text = base64.b64encode(gzip.compress(js, compresslevel=9, mtime=0)).decode("ascii")
    try:
        from profattn.files import write_text_atomic

        write_text_atomic(cached, text)
    except Exception:  # noqa: BLE001 - a read-only home, a full disk: the page is written all the same
        pass
    return text


def render(kind: str, context: Mapping[str, Any]) -> str:
    """One whole page as a self-contained HTML string: ``templates/<kind>.html.j2`` rendered with
    ``context`` plus ``plotly_js_gz`` (the gzipped, base64-encoded bundle the base template places once).

    Args:
        kind: ``"report"``, ``"analyze"`` or ``"compare"`` (:data:`PAGE_KINDS`).
        context: the template's variables (display-ready rows, chart dicts, records); ``plotly_js_gz`` is
            added here, and neither it nor ``plotly_js`` may be in it.

    Raises:
        ValueError: an unknown ``kind``, or ``context`` already holds ``plotly_js`` or ``plotly_js_gz``.
        jinja2.UndefinedError: the template uses a variable ``context`` lacks.
    """
    try:
        name = PAGE_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown page kind {kind!r}: expected one of {', '.join(PAGE_KINDS)}") from None
    if "plotly_js" in context or "plotly_js_gz" in context:
        raise ValueError("render() adds plotly_js_gz itself; leave plotly_js and plotly_js_gz out of the context")
    return environment().get_template(name).render(**context, plotly_js_gz=plotly_js_gzip_base64())


def write_html_file(text: str, path: str | os.PathLike[str]) -> Path:
    """Write an HTML (or Markdown) string to ``path`` atomically (:func:`profattn.files.write_text_atomic`:
    parents created, never a truncated file); returns the path.

    Raises:
        ProfattnError: the file cannot be written (names the path)."""
    from profattn.files import write_text_atomic

    return write_text_atomic(path, text)
