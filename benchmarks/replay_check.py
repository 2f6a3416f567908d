"""The simulator's step prices against a GPU replay of the same steps — a thin caller of
``profattn simulate --validate RUN --simulation SIMULATION_JSON`` (the one implementation:
``profattn/analysis/simulation/validate.py``, its table ``profattn.report.simulate.validation_lines``).

Usage: ``python benchmarks/replay_check.py SIMULATION_JSON RUN_DIR`` (exit 2 on unreadable input).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profattn.cli import main  # noqa: E402

if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python benchmarks/replay_check.py SIMULATION_JSON RUN_DIR", file=sys.stderr)
        sys.exit(2)
    main(["simulate", "--validate", sys.argv[2], "--simulation", sys.argv[1]])
