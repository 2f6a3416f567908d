"""argparse for the benchmark scripts, with a bad argument as one line on stderr (no usage block) and exit 2 — the
project's rule for bad input. ``--help`` is argparse's own."""

from __future__ import annotations

import argparse
import os
import sys


class Parser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose :meth:`error` prints ``PROG: error: MESSAGE`` alone and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{os.path.basename(self.prog)}: error: {message}", file=sys.stderr)
        raise SystemExit(2)
