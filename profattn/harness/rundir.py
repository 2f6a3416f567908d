"""Run directories: where a ``profattn profile`` run writes, and the rule that no run ever overwrites or
deletes an earlier one or a user's file.

* The default ``--out`` is a fresh directory per run, ``profattn-runs/run-<UTC date>-<time>`` (with ``-2``,
  ``-3``… when two runs start in the same second), so back-to-back runs both survive.
* A ``--out`` that already holds a run (a ``results.json``) is refused, unless
  ``--resume`` (continue it: cells already measured are kept, the rest are measured) or ``--force`` (the old
  run directory is *renamed* aside to ``<name>.replaced-<UTC time>`` beside it, never deleted, and the new
  run starts in an empty directory).
* A non-empty directory that holds no run is refused: it is somebody's files.
* While a run writes, it holds an exclusive lock on the directory, so a second run into the same ``--out``
  is refused instead of interleaving with the first.

Torch-free: the command line validates ``--out`` before anything heavy is imported.
"""

from __future__ import annotations

import datetime as _dt
import enum
import os
from pathlib import Path

from profattn.errors import ProfattnError
from profattn.files import check_parents, is_results_file

#: Parent of the default per-run directories.
DEFAULT_PARENT = "profattn-runs"


class RunDirMode(str, enum.Enum):
    """How ``--out`` is used."""

    NEW = "new"  #: a new or empty directory
    RESUME = "resume"  #: continue the run already there
    REPLACE = "replace"  #: the run already there was moved aside (``--force``)


def _utc_stamp(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%d-%H%M%S")


def default_run_dir(parent: str | os.PathLike[str] = DEFAULT_PARENT, *, kind: str = "run",
                    now: _dt.datetime | None = None) -> Path:
    """A directory name no run has used yet: ``<parent>/<kind>-<YYYYmmdd-HHMMSS>`` (UTC; ``kind`` is ``run``
    or ``sweep``), ``-2``, ``-3``… appended while the name exists."""
    return _unused(Path(parent) / f"{kind}-{_utc_stamp(now)}")


def _unused(base: Path) -> Path:
    """``base``, or ``base-2``, ``base-3``… — the first name that does not exist."""
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def holds_run(path: Path) -> bool:
    """True when ``path`` is a directory holding a ``results.json`` that profattn wrote (its first 4 KiB name the
    schema ``profattn.results``): a user's file of that name is no run, so ``--force`` never moves it aside."""
    return is_results_file(path / "results.json")


def check_run_dir(out_dir: str | os.PathLike[str], *, force: bool = False, resume: bool = False) -> tuple[Path, RunDirMode]:
    """Validate ``--out`` of a run without touching the file system and say how it will be used.

    Raises:
        ProfattnError: an empty path; a non-directory (or one below a file); a non-empty directory that holds no
            run; a directory that holds a run without ``--force`` or ``--resume``; ``--resume`` where there is
            no run; ``--force`` together with ``--resume``.
    """
    if force and resume:
        raise ProfattnError("--force and --resume exclude each other: --resume continues the run in --out, "
                            "--force moves it aside and starts anew")
    if not os.fspath(out_dir).strip():
        raise ProfattnError("--out must name a directory")
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise ProfattnError(f"--out {path} exists and is not a directory")
    check_parents(path, "--out")
    if holds_run(path):
        if resume:
            return path, RunDirMode.RESUME
        if force:
            return path, RunDirMode.REPLACE
        raise ProfattnError(f"--out {path} already holds a run; use --resume to continue it, --force to move it "
                            "aside, or another --out")
    if resume:
        raise ProfattnError(f"--resume: --out {path} holds no run (no results.json) to continue")
    if path.is_dir() and any(path.iterdir()):
        raise ProfattnError(f"--out {path} is a non-empty directory that holds no profattn run; choose another")
    return path, RunDirMode.NEW


def move_aside(path: Path, *, now: _dt.datetime | None = None) -> Path:
    """Rename the run directory ``path`` to ``<name>.replaced-<UTC time>`` beside it (``-2``… if taken) and
    return the new path. Nothing is deleted.

    Raises:
        ProfattnError: the rename failed (e.g. no permission on the parent).
    """
    target = _unused(path.with_name(f"{path.name}.replaced-{_utc_stamp(now)}"))
    try:
        path.rename(target)
    except OSError as exc:
        raise ProfattnError(f"--force: cannot move the earlier run {path} aside: {exc.strerror or exc}") from None
    return target


def prepare_run_dir(out_dir: str | os.PathLike[str], *, force: bool = False, resume: bool = False) -> tuple[Path, RunDirMode, Path | None]:
    """Make ``--out`` ready (after the checks of :func:`check_run_dir`): move an earlier run aside for
    ``--force``, create the directory, lock it for this process and check that it is writable.

    Returns ``(directory, mode, where the earlier run was moved or None)``.

    Raises:
        ProfattnError: as :func:`check_run_dir`; the directory is locked by another run; it is not writable.
    """
    path, mode = check_run_dir(out_dir, force=force, resume=resume)
    moved = None
    if mode is RunDirMode.REPLACE:
        lock_run_dir(path)  # refuse to move a run that is still being written
        release_run_dir(path)
        moved = move_aside(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProfattnError(f"cannot write to --out {path}: {exc.strerror or exc}") from None
    lock_run_dir(path)
    try:
        probe = path / ".profattn-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ProfattnError(f"cannot write to --out {path}: {exc.strerror or exc}") from None
    return path, mode, moved


_LOCKS: dict[Path, int] = {}


def lock_run_dir(path: Path) -> None:
    """Hold an exclusive ``flock`` on the run directory for this process (released by the OS when the process
    ends, however it ends, or by :func:`release_run_dir`), so a second run into it is refused.

    Raises:
        ProfattnError: another process holds the lock.
    """
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return
    key = path.resolve()
    if key in _LOCKS:
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ProfattnError(f"--out {path} is in use by another profattn run; wait for it or choose another --out") from None
    _LOCKS[key] = fd


def release_run_dir(path: Path) -> None:
    """Release this process's lock on ``path`` (no-op when it holds none)."""
    fd = _LOCKS.pop(path.resolve(), None)
    if fd is not None:
        os.close(fd)
