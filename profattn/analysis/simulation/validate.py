"""The price checked: a simulation's sampled steps, priced per part, against a GPU run of the same steps
(``profattn simulate --validate RUN``).

Torch-free; typed records only. ``simulate --export-steps`` writes the sampled steps as ``--workload`` text (each
step whole, its decode and its prefill call) and ``simulation.json``'s ``sampled_steps`` holds each deployment's
priced attention per layer per part (``priced_us_per_layer``: deployment → part → µs). A ``profattn profile`` of those
shapes with the deployments' backends (the replay) measures them. :func:`check_prices` pairs every priced part with
the cell of the same workload on the backend that part runs on (the deployment's decode backend for a decode part,
its prefill backend for a prefill part): measured = the median of the cell's samples (``latency_samples_us``: the
CUDA-graph replay where captured). A part whose cell is missing, pending or failed is kept, unmeasured. The same
shape and backend priced the same in two deployments (a shared prefill part) is one :class:`PartCheck`.

A part is *off its band* when measured / priced lies beyond 1 ± the held-out interpolation error (p90) of that
backend's part (``priced_from[].validation.p90_error`` in the JSON: what leaving each cell out in turn gave).
Per step and deployment (:class:`StepCheck`) the parts' sums are compared, and the whole step's one-call cell
(``step`` workload) is shown beside them where the run measured it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from profattn.errors import ProfattnError
from profattn.workload.spec import parse_workload_spec

__all__ = ["PartCheck", "PriceCheck", "StepCheck", "check_prices"]


@dataclass(frozen=True)
class PartCheck:
    """One priced part: the sampled step's ``step`` index and ``kind``, ``part`` (decode / prefill), the ``backend``
    it runs on, its workload ``tag``, ``priced_us`` (one layer), ``measured_us`` (None when the run has no timed cell:
    ``status`` says why), the ``samples`` the median is over, ``traced`` (the cell's kernels were read from its trace)
    and ``band`` (the relative band it is judged against; None when the JSON gives none)."""

    step: int
    kind: str
    part: str
    backend: str
    tag: str
    priced_us: float
    measured_us: float | None
    samples: int
    traced: bool
    status: str
    band: float | None

    @property
    def ratio(self) -> float | None:
        """measured / priced (None unmeasured)."""
        return None if self.measured_us is None else self.measured_us / self.priced_us

    @property
    def off_band(self) -> bool:
        """The ratio lies beyond 1 ± ``band``."""
        r = self.ratio
        return r is not None and self.band is not None and abs(r - 1.0) > self.band


@dataclass(frozen=True)
class StepCheck:
    """One sampled step for one deployment: Σ of its parts priced and measured (µs per layer; measured None when a
    part is unmeasured), and the whole step measured as one call (``one_call_us`` on ``one_call_backend``), where the
    run has it."""

    step: int
    kind: str
    deployment: str
    priced_us: float
    measured_us: float | None
    one_call_us: float | None
    one_call_backend: str | None

    @property
    def ratio(self) -> float | None:
        return None if self.measured_us is None else self.measured_us / self.priced_us


@dataclass(frozen=True)
class PriceCheck:
    """Every :class:`PartCheck` (in the JSON's order) and :class:`StepCheck`, with the summary over the measured
    parts: their count, ``median_ratio``, ``min_ratio`` / ``max_ratio``, ``within_10`` / ``within_25`` (|ratio − 1| ≤
    10 % / 25 %), ``off_band`` (parts beyond their band) and ``unmeasured`` (distinct shapes × backends the run lacks);
    per step (Σ of parts) ``step_median_ratio`` and ``step_worst_ratio`` (the farthest from 1 in log)."""

    parts: tuple[PartCheck, ...]
    steps: tuple[StepCheck, ...]
    measured: int
    median_ratio: float | None
    min_ratio: float | None
    max_ratio: float | None
    within_10: int
    within_25: int
    off_band: int
    unmeasured: int
    step_median_ratio: float | None = None
    step_worst_ratio: float | None = None


def _num(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
        raise ProfattnError(f"{what}: priced {v!r} µs is not a positive number")
    return float(v)


def check_prices(simulation: Mapping[str, Any], cells: Sequence[Any]) -> PriceCheck:
    """Pair ``simulation`` (a ``profattn.simulation`` JSON document, as read) with ``cells`` (a run's
    :class:`~profattn.results.records.CellResult` list) as the module docstring says.

    Raises:
        ProfattnError: not a simulation document, or a field of it malformed (names it).
    """
    if not isinstance(simulation, Mapping) or simulation.get("schema") != "profattn.simulation":
        raise ProfattnError("not a profattn simulation.json (schema profattn.simulation)")
    try:
        deps = {d["deployment"]: (d["decode_backend"], d["prefill_backend"]) for d in simulation["deployments"]}
        bands: dict[tuple[str, str], float] = {}
        for d in simulation["deployments"]:
            for p in d.get("priced_from") or ():
                e = (p.get("validation") or {}).get("p90_error")
                if isinstance(e, (int, float)) and math.isfinite(e):
                    bands[(p["backend"], p["part"])] = float(e)
        steps = list(simulation["sampled_steps"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ProfattnError(f"simulation.json: {type(exc).__name__} {exc} (not the profattn.simulation layout)") from None
    by_id = {c.cell_id: c for c in cells}
    by_tag: dict[str, list[Any]] = {}
    for c in cells:
        by_tag.setdefault(c.cell_id.rsplit(".", 1)[0], []).append(c)

    def measured(tag: str, backend: str) -> tuple[float | None, int, bool, str]:
        c = by_id.get(f"{tag}.{backend}")
        if c is None:
            return None, 0, False, "not in the run"
        samples = c.latency_samples_us if str(c.status) == "ok" else ()
        return (statistics.median(samples) if samples else None), len(samples), c.trace is not None, str(c.status)

    parts: list[PartCheck] = []
    seen: set[tuple[str, str, float]] = set()
    step_checks: list[StepCheck] = []
    for st in steps:
        try:
            index, kind, workloads, priced = int(st["index"]), str(st["kind"]), st["workloads"], st["priced_us_per_layer"]
            tags = {k: parse_workload_spec(v).tag for k, v in workloads.items()}
            items = [(dep, part, _num(us, f"step {index}")) for dep, ps in priced.items() for part, us in ps.items()]
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ProfattnError(f"simulation.json sampled step: {type(exc).__name__} {exc}".splitlines()[0]) from None
        sums: dict[str, list[float | None]] = {}
        for dep, part, us in items:
            if dep not in deps or part not in tags:
                raise ProfattnError(f"simulation.json step {index}: {dep!r} {part!r} priced but not described")
            backend = deps[dep][0] if part == "decode" else deps[dep][1]
            m, n, traced, status = measured(tags[part], backend)
            s = sums.setdefault(dep, [0.0, 0.0])
            s[0] = s[0] + us  # type: ignore[operator]
            s[1] = None if m is None or s[1] is None else s[1] + m
            key = (tags[part], backend, round(us, 3))
            if key in seen:
                continue
            seen.add(key)
            parts.append(PartCheck(index, kind, part, backend, tags[part], us, m, n, traced, status,
                                   bands.get((backend, "mixed" if part == "step" else part))))
        one = None
        if "step" in tags:
            ok = [c for c in by_tag.get(tags["step"], []) if str(c.status) == "ok" and c.latency_samples_us]
            if ok:
                c = min(ok, key=lambda c: statistics.median(c.latency_samples_us))
                one = (statistics.median(c.latency_samples_us), c.cell_id.rsplit(".", 1)[1])
        for dep, (p_us, m_us) in sums.items():
            step_checks.append(StepCheck(index, kind, dep, p_us, m_us, one[0] if one else None,  # type: ignore[arg-type]
                                         one[1] if one else None))
    ratios = [p.ratio for p in parts if p.ratio is not None]
    missing = len({(p.tag, p.backend) for p in parts if p.measured_us is None})
    within = lambda f: sum(abs(x - 1) <= f for x in ratios)  # noqa: E731
    step_r = [s.ratio for s in step_checks if s.ratio is not None]
    return PriceCheck(tuple(parts), tuple(step_checks), len(ratios),
                      statistics.median(ratios) if ratios else None, min(ratios) if ratios else None,
                      max(ratios) if ratios else None, within(0.10), within(0.25),
                      sum(p.off_band for p in parts), missing,
                      statistics.median(step_r) if step_r else None,
                      max(step_r, key=lambda x: abs(math.log(x))) if step_r else None)
