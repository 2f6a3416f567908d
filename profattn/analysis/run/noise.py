"""Was the machine quiet enough to trust this run's timings? Typed findings from the recorded machine state
and the cells' own spreads; the report and the command line turn them into warnings.

Two signs are checked: the spread of each cell's timing samples (``p90 / p10`` of the reps behind its
median; a quiet GPU gives 1.00–1.05, a loaded 2-core CPU 1.5 and more), and the CPU load average against the
logical CPUs (a load above the core count means other processes competed for the cores the timing loop used).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from profattn.results import RunResult

#: A cell whose p90 / p10 exceeds this is "spread".
SPREAD_RATIO = 1.5
#: Warn when at least this fraction of the timed cells (and at least two) are spread.
SPREAD_FRACTION = 0.25


class NoiseKind(str, enum.Enum):
    """What made a run's timings suspect."""

    SPREAD = "spread"  #: many cells' p90/p10 above :data:`SPREAD_RATIO`
    LOAD = "load"  #: the load average exceeded the logical CPUs at the start or the end of the run


@dataclass(frozen=True)
class NoiseFinding:
    """One reason to distrust a run's timings, with its numbers.

    ``SPREAD``: ``count`` cells of ``of`` timed ones had p90/p10 above ``threshold``; ``worst`` is the largest
    ratio seen. ``LOAD``: ``worst`` is the highest 1-minute load average recorded (start or end),
    ``threshold`` the logical CPU count.
    """

    kind: NoiseKind
    count: int
    of: int
    worst: float
    threshold: float


def noise_findings(run: RunResult) -> tuple[NoiseFinding, ...]:
    """The run's noise findings (empty for a quiet run)."""
    out: list[NoiseFinding] = []
    ratios = []
    for c in run.cells:
        t = c.graph_timing or c.timing
        if t is not None and t.p10_us and t.p10_us > 0 and t.p90_us is not None:
            ratios.append(t.p90_us / t.p10_us)
    spread = [r for r in ratios if r > SPREAD_RATIO]
    if len(spread) >= 2 and len(spread) >= SPREAD_FRACTION * len(ratios):
        out.append(NoiseFinding(NoiseKind.SPREAD, len(spread), len(ratios), max(spread), SPREAD_RATIO))
    env = run.environment
    loads = [la[0] for la in (env.load_avg_start, env.load_avg_end) if la]
    if env.cpu_count and loads and max(loads) > env.cpu_count:
        out.append(NoiseFinding(NoiseKind.LOAD, sum(1 for x in loads if x > env.cpu_count), len(loads), max(loads),
                                float(env.cpu_count)))
    return tuple(out)
