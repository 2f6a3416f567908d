"""Privacy of attachments: what profattn writes carries no host name, user name or absolute path by default.

Reports, Markdown summaries, comparisons and traces are meant to be attached to pull requests. Three things
identify the machine that made them: the host name (torch names trace workers ``<host>_<pid>``), the user
name (e.g. Inductor's ``/tmp/torchinductor_<user>/…`` kernel files in Kineto's ``kernel_file`` args) and
absolute paths (Kineto's ``traceName``, Python stacks, exception messages). By default:

* absolute POSIX paths become their last component (``/tmp/torchinductor_alice/j2/cj2x.py`` → ``cj2x.py``);
* the host name and the user name, as whole words, become ``<host>`` and ``<user>``;
* the environment record drops ``hostname`` and ``user``.

``--keep-host-info`` turns all of it off.
"""

from __future__ import annotations

import dataclasses
import functools
import getpass
import gzip
import json
import os
import platform
import re
from pathlib import Path
from typing import Any, TypeVar

from profattn.workload import Workload

T = TypeVar("T")

#: An absolute POSIX path of two or more components, not preceded by a word character, ``:`` or ``/``
#: (so ``a/b`` relative paths, URLs' ``//host`` and ``µs/call`` ratios are left alone). Group 1 is the
#: last component, which is kept.
_ABS_PATH = re.compile(r"(?<![\w:/.<>-])(?:/[\w.@+~-]+)+/([\w.@+~-]+)")


@functools.lru_cache(maxsize=1)
def host_identifiers() -> tuple[tuple[str, str], ...]:
    """``(value, placeholder)`` pairs to redact: this host's name (and its short form) and the user name.
    Names shorter than 3 characters are skipped (too likely to match ordinary text)."""
    pairs: list[tuple[str, str]] = []
    host = platform.node()
    for h in dict.fromkeys((host, host.split(".")[0])):
        if len(h) >= 3:
            pairs.append((h, "<host>"))
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        user = os.environ.get("USER", "")
    if len(user) >= 3:
        pairs.append((user, "<user>"))
    return tuple(pairs)


def scrub_text(text: str) -> str:
    """``text`` without absolute paths (last component kept), host name or user name (see module docstring)."""
    out = _ABS_PATH.sub(r"\1", text)
    for value, placeholder in host_identifiers():
        out = re.sub(rf"(?<![\w-]){re.escape(value)}(?![\w-])", placeholder, out)
    return out


def scrub(obj: T) -> T:
    """A copy of ``obj`` (dataclass, tuple, list, dict or str, nested) with every string scrubbed; a
    :class:`~profattn.workload.Workload` (numbers and enums only) and non-string scalars are returned as is.
    An environment record's ``hostname`` and ``user`` are set to None."""
    if isinstance(obj, str):
        return scrub_text(obj)  # type: ignore[return-value]
    if isinstance(obj, Workload) or obj is None or isinstance(obj, (int, float, bool)):
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            new = None if f.name in ("hostname", "user") else scrub(v)
            if new is not v:
                changes[f.name] = new
        return dataclasses.replace(obj, **changes) if changes else obj  # type: ignore[return-value]
    if isinstance(obj, tuple):
        return tuple(scrub(x) for x in obj)  # type: ignore[return-value]
    if isinstance(obj, list):
        return [scrub(x) for x in obj]  # type: ignore[return-value]
    if isinstance(obj, dict):
        return {k: scrub(v) for k, v in obj.items()}  # type: ignore[return-value]
    return obj


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
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        data = json.load(fh)
    data = _scrub_json(data)
    if isinstance(data, dict) and "traceName" in data:
        data["traceName"] = path.name
    tmp = path.with_name(path.name + ".tmp")
    with opener(tmp, "wt", encoding="utf-8") as fh:  # type: ignore[operator]
        json.dump(data, fh)
    os.replace(tmp, path)
    return path
