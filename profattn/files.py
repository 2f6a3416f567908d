"""Writing output files so a failure never leaves a half-written one at the final path."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from profattn.errors import ProfattnError


def check_parents(path: Path, option: str) -> None:
    """Raise :class:`ProfattnError` when the nearest existing ancestor of ``path`` is not a directory (so a
    path below a file is refused before any work is done; ``option`` names the flag in the message)."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ProfattnError(f"{option} {path}: parent {parent} is not a directory")
            return


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path``: into a temp file beside it, then ``os.replace`` — a full disk or
    an interrupt leaves the previous file (or none), never a truncated one. Parents are created. A target
    that exists and is not a regular file (``/dev/stdout``, a FIFO) is written in place.

    Raises:
        ProfattnError: the file cannot be written (message names the path and the OS error).
    """
    path = Path(path)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and not stat.S_ISREG(path.stat().st_mode):
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            return path
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; outputs are meant to be shared
        os.replace(tmp, path)
        tmp = None
        return path
    except OSError as exc:
        raise ProfattnError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def inside_run(run_dir: str | os.PathLike[str], relative: str) -> Path | None:
    """The file a results.json names, ``run_dir / relative``, or None when that path would leave the run
    directory: an absolute path, a ``..`` that climbs out, or a symbolic link (anywhere along the path) that
    resolves outside it. A run directory is a sandbox: a results.json attached to a pull request must never
    make a reviewer's machine read ``/etc/passwd``. The returned path may not exist (callers decide).
    """
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        return None
    rel = Path(relative)
    if rel.is_absolute() or rel.drive:
        return None
    root = Path(run_dir).resolve()
    target = (root / rel).resolve()
    try:
        target.relative_to(root)
    except ValueError:
        return None
    return root / rel
