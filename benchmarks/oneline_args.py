"""Bad input to a benchmark script as one line on stderr and exit 2 — the project's rule: :func:`fail`, and argparse
with a bad argument reported that way (no usage block; ``--help`` is argparse's own)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn


def fail(prog: str, message: str) -> NoReturn:
    """Print ``PROG: MESSAGE`` alone on stderr and exit 2."""
    print(f"{prog}: {message}", file=sys.stderr)
    raise SystemExit(2)


class Parser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose :meth:`error` prints ``PROG: error: MESSAGE`` alone and exits 2."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        fail(os.path.basename(self.prog), f"error: {message}")
