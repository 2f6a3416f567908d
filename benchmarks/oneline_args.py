"""Bad input to a benchmark script as one line on stderr and exit 2 — the project's rule: :func:`fail`, and argparse
with a bad argument reported that way (no usage block; ``--help`` is argparse's own)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn


def fail(prog: str, message: str) -> NoReturn:
    """Print ``PROG: MESSAGE`` alone on stderr and exit 2."""
    print(f"{prog}: {message}", file=sys.stderr)
    raise SystemExit(2)


class Parser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose :meth:`error` prints ``PROG: error: MESSAGE`` alone and exits 2."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        fail(os.path.basename(self.prog), f"error: {message}")


def new_file_problem(path: Path, flag: str) -> str | None:
    """Why ``path`` cannot take a new output file (None: it can): its folder is missing, or something is already
    there — a benchmark never replaces an earlier result or a user's file (the project's trust rule)."""
    if path.is_dir():
        return f"{flag} {path}: a folder; give a file path"
    if path.exists():
        return f"{flag} {path}: exists; a benchmark never replaces a file: give a new path (or remove it yourself)"
    if not path.parent.is_dir():
        return f"{flag} {path}: its folder {path.parent} does not exist"
    return None
