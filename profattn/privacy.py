"""Privacy of attachments: what profattn writes carries no host name, user name or absolute path by default.

Reports, Markdown summaries, comparisons and traces are meant to be attached to pull requests. Three things
identify the machine that made them: the host name (torch names trace workers ``<host>_<pid>``), the user
name (e.g. Inductor's ``/tmp/torchinductor_<user>/…`` kernel files in Kineto's ``kernel_file`` args) and
absolute paths (Kineto's ``traceName``, Python stacks, exception messages). By default:

* absolute POSIX paths become their last component (``/tmp/torchinductor_alice/j2/cj2x.py`` → ``cj2x.py``),
  and so do ``file://`` URLs, marked as cut (``file:///tmp/w/x.py`` → ``file://…/x.py``);
* the host name and the user name, as whole words, become ``<host>`` and ``<user>``: a name is matched only
  where no letter, digit, ``-`` or ``_`` touches it, except that ``<name>_<digits>`` (torch's worker name
  ``<host>_<pid>``) counts; so a machine called ``vm`` is scrubbed from ``ran on vm`` and ``vm_4242``
  but ``kvm``, ``vmax``, ``vm-2`` and ``gvm_x`` are left alone. Names of any length of two or more
  characters are scrubbed; a one-character name is not (it would match ordinary words such as ``a``);
* the environment record drops ``hostname`` and ``user``.

``--keep-host-info`` turns all of it off.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import getpass
import gzip
import json
import os
import platform
import re
from pathlib import Path
from typing import Any, TypeVar

from profattn.errors import TraceError
from profattn.workload import Workload

T = TypeVar("T")

#: An absolute POSIX path of two or more components, not preceded by a word character, ``:`` or ``/``
#: (so ``a/b`` relative paths, URLs' ``//host`` and ``µs/call`` ratios are left alone). Group 1 is the
#: last component, which is kept.
_ABS_PATH = re.compile(r"(?<![\w:/.<>-])(?:/[\w.@+~-]+)+/([\w.@+~-]+)")
#: A ``file://`` URL (optional host) whose path has two or more components; group 1 is the last one.
_FILE_URL = re.compile(r"\bfile://[\w.-]*(?:/[\w.@+~%-]+)+/([\w.@+~%-]+)", re.IGNORECASE)
#: Shortest host or user name that is scrubbed; a one-letter name would match ordinary words.
MIN_NAME_LENGTH = 2


@functools.lru_cache(maxsize=1)
def host_identifiers() -> tuple[tuple[str, str], ...]:
    """``(value, placeholder)`` pairs to redact: this host's name (and its short form) and the user name.
    Names shorter than :data:`MIN_NAME_LENGTH` are skipped (a one-letter name is an ordinary word);
    longer ones first, so ``host.example.org`` is replaced whole before its short form ``host``."""
    pairs: list[tuple[str, str]] = []
    host = platform.node()
    for h in dict.fromkeys((host, host.split(".")[0])):
        if len(h) >= MIN_NAME_LENGTH:
            pairs.append((h, "<host>"))
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        user = os.environ.get("USER", "")
    if len(user) >= MIN_NAME_LENGTH:
        pairs.append((user, "<user>"))
    return tuple(sorted(pairs, key=lambda p: -len(p[0])))


@functools.lru_cache(maxsize=64)
def _name_pattern(value: str) -> re.Pattern[str]:
    """``value`` as a whole word: no letter, digit, ``-`` or ``_`` on either side, except ``_<digits>``
    after it (``<host>_<pid>``)."""
    return re.compile(rf"(?<![\w-]){re.escape(value)}(?=_\d|[^\w-]|$)")


@functools.lru_cache(maxsize=16384)
def scrub_text(text: str) -> str:
    """``text`` without absolute paths or ``file://`` URL paths (last component kept), host name or user name
    (see module docstring). Results are cached (a trace repeats its kernel and op names thousands of times), and a
    text holding no ``/`` and none of the names is returned without running a pattern."""
    if "/" not in text and not any(value in text for value, _ in host_identifiers()):
        return text
    out = _FILE_URL.sub("file://…/\\1", text)
    out = _ABS_PATH.sub(r"\1", out)
    for value, placeholder in host_identifiers():
        out = _name_pattern(value).sub(placeholder, out)
    return out


def scrub(obj: T) -> T:
    """A copy of ``obj`` (dataclass, tuple, list, dict or str, nested) with every string scrubbed; a
    :class:`~profattn.workload.Workload` (numbers and enums only) and non-string scalars are returned as is, and so
    is a dataclass or tuple in which nothing changed (they are immutable: sharing them is safe).
    Enum members (``Phase`` is a ``str`` enum) are returned as is. An environment record's ``hostname``
    and ``user`` are set to None."""
    kind = type(obj)
    if kind in _ATOMS:  # most of what a record holds: numbers and None (checked first: a trace's calls hold 10⁵ of them)
        return obj
    if kind is str:
        return scrub_text(obj)  # type: ignore[return-value]
    if isinstance(obj, enum.Enum):
        return obj
    if isinstance(obj, str):
        return scrub_text(obj)  # type: ignore[return-value]
    if isinstance(obj, Workload) or obj is None or isinstance(obj, (int, float, bool)):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for name in _field_names(type(obj)):
            v = getattr(obj, name)
            new = None if name in ("hostname", "user") else scrub(v)
            if new is not v and new != v:
                changes[name] = new
        return dataclasses.replace(obj, **changes) if changes else obj  # type: ignore[return-value]
    if isinstance(obj, tuple):  # the same (immutable) tuple back when nothing inside changed: no copies of clean records
        items = tuple(scrub(x) for x in obj)
        return obj if all(a is b for a, b in zip(items, obj)) else items  # type: ignore[return-value]
    if isinstance(obj, list):
        return [scrub(x) for x in obj]  # type: ignore[return-value]
    if isinstance(obj, dict):
        return {k: scrub(v) for k, v in obj.items()}  # type: ignore[return-value]
    return obj


_ATOMS = frozenset({int, float, bool, type(None)})


@functools.lru_cache(maxsize=None)
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _scrub_json(obj: Any) -> Any:
    if isinstance(obj, str):
        return scrub_text(obj)
    if isinstance(obj, list):
        return [_scrub_json(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _scrub_json(v) for k, v in obj.items()}
    return obj


def scrub_trace_file(path: str | os.PathLike[str]) -> Path:
    """Rewrite a (gzipped) Kineto trace in place with every string scrubbed and ``traceName`` set to the
    file's own name (torch writes the absolute path of a temporary file there). Returns the path."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
            data = json.load(fh)
    except (ValueError, EOFError, OSError) as exc:  # torch wrote a name it did not escape (a quote in a range name)
        raise TraceError(f"{path.name}: the profiler wrote a trace that is not JSON ({type(exc).__name__}: "
                         f"{str(exc)[:120]}); a range or backend name holding a quote or a backslash does this") from None
    data = _scrub_json(data)
    if isinstance(data, dict) and "traceName" in data:
        data["traceName"] = path.name
    tmp = path.with_name(path.name + ".tmp")
    with opener(tmp, "wt", encoding="utf-8") as fh:  # type: ignore[operator]
        json.dump(data, fh)
    os.replace(tmp, path)
    return path
