"""The operating point: which scheduler setting lets a deployment serve the highest rate within the SLO, beside
vLLM's defaults, and what stops it there.

Torch-free; typed records only. The knobs are vLLM's (:data:`AXES`): ``max_num_batched_tokens``, ``max_num_seqs``,
``chunked_prefill``, ``page_size`` (``block_size``) and ``kv_dtype``; each axis has a grid (:data:`DEFAULT_GRID`,
tokens 512–16,384, sequences 32–1,024). The search goes **one axis at a time**, in the order asked, from the
defaults: every value of the axis with the other knobs at the best found so far, the best kept before the next
axis (a coordinate search: ``1 + Σ (values − 1)`` settings, not the grid's product; an interaction between two axes
that only their joint change would reveal is not looked for).

Each setting costs one *probe*: a simulation at the best rate scale found so far × (1 + resolution), stopped as soon
as the SLO is lost (:func:`~profattn.analysis.simulation.replay.run_simulation`'s ``stop_on_failure``). A setting
that fails it cannot beat the best (its max rate lies below the probe: recorded as such, not searched further);
one that meets it is searched upward from there (:func:`~profattn.analysis.simulation.rates.search_rate`, the
probe's run reused). Where the best so far meets the SLO nowhere (the defaults fail down to the rate search's
floor, :data:`~profattn.analysis.simulation.rates.SEARCH_FLOOR`), the probe is one run at that floor: a setting that
fails it meets the SLO nowhere ≥ the floor either (recorded, ``below_scale`` = the floor); one that meets it is
searched upward from there. Runs are cached by (setting, scale). The KV capacity follows each setting (an FP8 cache holds
twice the tokens; a larger token budget reserves a larger activation peak: :func:`kv_capacity`).

The *binding constraint* (:class:`Binding`) of a setting is read off the lowest rate it failed above its best: the
KV cache (it preempted, or its pages were ≥ 98 % in use), a stalled decode (more requests missed TPOT than TTFT:
decodes waited behind the prefill chunks sharing their steps), ``max_num_seqs`` (the running count reached it), else
compute (requests queued past their TTFT: the steps could not keep up).
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from profattn.analysis.simulation.rates import SEARCH_FLOOR, RatePoint, RateSearch, rate_point, search_rate
from profattn.analysis.simulation.replay import SLO, Deployment, SimulationError, SimulationRun, run_simulation
from profattn.analysis.simulation.scheduler import SchedulerConfig, SchedulerError, kv_capacity
from profattn.analysis.simulation.stepcost import AttentionShape, RestOfStep, StepCostSource
from profattn.workload.models import ModelConfig
from profattn.workload.requests import RequestTrace

__all__ = ["AXES", "DEFAULT_GRID", "Binding", "Knobs", "OperatingPoint", "OperatingVerdict", "SettingResult",
           "binding_of", "compare_operating", "parse_axes", "search_operating_point"]

#: The knobs ``--search`` may vary, in vLLM's names (``page_size`` is its ``block_size``).
AXES = ("max_num_batched_tokens", "max_num_seqs", "chunked_prefill", "page_size", "kv_dtype")
#: The values tried per axis.
DEFAULT_GRID: dict[str, tuple] = {
    "max_num_batched_tokens": (512, 1024, 2048, 4096, 8192, 16384),
    "max_num_seqs": (32, 64, 128, 256, 512, 1024),
    "chunked_prefill": (True, False),
    "page_size": (16, 32, 64, 128),
    "kv_dtype": (None, "float8_e4m3fn"),
}
#: Pages in use from which the cache counts as full.
FULL_SHARE = 0.98


class Binding(str, enum.Enum):
    """What stops a setting above its best rate (module docstring)."""

    KV_CAPACITY = "kv capacity"
    STALLED_DECODE = "stalled decode"
    MAX_NUM_SEQS = "max_num_seqs"
    COMPUTE = "compute"
    NONE = "none found"  # it met the SLO at the highest scale tried

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Knobs:
    """One scheduler setting: vLLM's ``max_num_batched_tokens``, ``max_num_seqs``, ``enable_chunked_prefill``,
    ``block_size`` (tokens per page) and the KV dtype (None: the model's)."""

    max_num_batched_tokens: int
    max_num_seqs: int
    chunked_prefill: bool
    page_size: int
    kv_dtype: str | None

    @classmethod
    def of(cls, d: Deployment) -> "Knobs":
        s = d.scheduler
        return cls(s.max_num_batched_tokens, s.max_num_seqs, s.enable_chunked_prefill, s.block_size, d.kv_dtype)

    def with_axis(self, axis: str, value) -> "Knobs":  # noqa: ANN001
        """This setting with ``axis`` at ``value``; ``max_num_seqs`` is cut to the token budget (vLLM refuses a
        budget below it)."""
        k = replace(self, **{"chunked_prefill" if axis == "chunked_prefill" else axis: value})
        return replace(k, max_num_seqs=min(k.max_num_seqs, k.max_num_batched_tokens))


@dataclass(frozen=True)
class SettingResult:
    """One setting tried: ``knobs``, the deployment it made (None when it cannot serve the trace: ``refused`` says
    why), ``best_scale`` (the highest rate scale found within the SLO; None when it failed its probe or everything),
    ``below_scale`` (it failed at this scale: its best lies below it; at the search's floor: it meets the SLO
    nowhere at or above it), ``points`` (its runs, in order), the
    ``binding`` constraint at the lowest failing rate above its best (:func:`binding_of`), and ``at_best``: its point
    at ``best_scale``."""

    knobs: Knobs
    deployment: Deployment | None
    best_scale: float | None
    below_scale: float | None
    points: tuple[RatePoint, ...]
    binding: Binding | None
    at_best: RatePoint | None
    refused: str | None = None


@dataclass(frozen=True)
class OperatingPoint:
    """The search of one backend pair: the ``defaults`` (vLLM's setting as given), the ``best`` setting found, every
    setting ``tried`` in order, ``axes`` searched, the runs simulated (``runs``) and their CPU ``wall_s``;
    ``at_trace_defaults`` / ``at_trace_best``: both settings at the trace's own rate (1×, run to the end);
    ``floor``: the lowest rate scale searched (a setting failing there meets the SLO nowhere at or above it)."""

    label: str
    axes: tuple[str, ...]
    defaults: SettingResult
    best: SettingResult
    tried: tuple[SettingResult, ...]
    at_trace_defaults: RatePoint
    at_trace_best: RatePoint
    runs: int
    wall_s: float
    floor: float = SEARCH_FLOOR


def parse_axes(text: str) -> tuple[str, ...]:
    """The axes of ``--search max_num_batched_tokens,max_num_seqs[,chunked_prefill][,page_size][,kv_dtype]`` (dashes
    accepted for underscores), each once.

    Raises:
        SimulationError: an unknown or repeated axis.
    """
    out: list[str] = []
    for raw in (s.strip() for s in text.split(",") if s.strip()):
        a = raw.replace("-", "_")
        if a not in AXES:
            raise SimulationError(f"--search {raw!r}: unknown knob; the knobs are {', '.join(AXES)}")
        if a in out:
            raise SimulationError(f"--search {raw!r}: given twice; give each of {', '.join(AXES)} at most once")
        out.append(a)
    if not out:
        raise SimulationError(f"--search: name at least one of {', '.join(AXES)}")
    return tuple(out)


def binding_of(point: RatePoint | None, deployment: Deployment) -> Binding:
    """What made ``point`` (a failing run) miss the SLO (module docstring); NONE for no failing point."""
    if point is None:
        return Binding.NONE
    cfg = deployment.scheduler
    if point.preemptions > 0 or point.peak_pages >= FULL_SHARE * cfg.num_gpu_blocks:
        return Binding.KV_CAPACITY
    if point.tpot_failed > point.ttft_failed:
        return Binding.STALLED_DECODE
    if point.peak_running >= cfg.max_num_seqs:
        return Binding.MAX_NUM_SEQS
    return Binding.COMPUTE


def deployment_for(base: Deployment, knobs: Knobs, model: ModelConfig) -> Deployment:
    """``base``'s pair and prefix caching with ``knobs``, its KV capacity recomputed from the same memory (or the same
    token budget).

    Raises:
        SchedulerError: the setting leaves no room for the cache, or a knob out of bounds.
    """
    cap = base.capacity
    budget = cap.tokens if cap.gpu_memory_bytes is None else None
    new = kv_capacity(model, block_size=knobs.page_size, kv_dtype=knobs.kv_dtype, gpu_memory_bytes=cap.gpu_memory_bytes,
                      gpu_memory_utilization=cap.gpu_memory_utilization or 0.9, kv_budget_tokens=budget,
                      max_num_batched_tokens=knobs.max_num_batched_tokens, max_num_seqs=knobs.max_num_seqs)
    cfg = SchedulerConfig(num_gpu_blocks=new.num_blocks, max_num_batched_tokens=knobs.max_num_batched_tokens,
                          max_num_seqs=knobs.max_num_seqs, enable_chunked_prefill=knobs.chunked_prefill,
                          block_size=knobs.page_size, enable_prefix_caching=base.scheduler.enable_prefix_caching)
    return Deployment(base.pair, cfg, new, knobs.kv_dtype)


def search_operating_point(base_trace: RequestTrace, defaults: Deployment, axes: Sequence[str],
                           sources: dict[str | None, StepCostSource], rest: dict[str | None, RestOfStep],
                           shapes: dict[str | None, AttentionShape], model: ModelConfig, slo: SLO, *,
                           resolution: float = 0.05, floor: float = SEARCH_FLOOR,
                           grid: dict[str, tuple] | None = None, defaults_search: RateSearch | None = None, defaults_at_trace: SimulationRun | None = None,
                           progress: Callable[[str, float], None] | None = None) -> OperatingPoint:
    """The coordinate search of the module docstring for ``defaults``' backend pair over ``base_trace`` (at its own
    rate, scale 1). ``sources`` / ``rest`` / ``shapes``: per KV dtype (every dtype the ``kv_dtype`` axis tries must
    be there); ``defaults_search`` / ``defaults_at_trace``: the defaults' rate search and full run at 1× when already
    made (reused); ``floor``: the lowest rate scale searched (:data:`~profattn.analysis.simulation.rates.SEARCH_FLOOR`);
    ``progress(label, fraction of settings done)``.

    Raises:
        SimulationError: an unknown axis; StepCostError: a backend the source cannot price.
    """
    t0 = time.perf_counter()
    grid = {**DEFAULT_GRID, **(grid or {})}
    cache: dict[tuple[Knobs, float], SimulationRun] = {}
    label = defaults.label  # unique per deployment (its KV dtype, page size and prefix caching named)
    for a in axes:
        if a not in AXES:
            raise SimulationError(f"unknown search axis {a!r}")
    planned = 1 + sum(len(grid[a]) for a in axes)
    done = [0]

    def tick(what: str) -> None:
        done[0] += 1
        if progress:
            progress(f"{label}: {what}", min(done[0] / planned, 1.0))

    def simulate(d: Deployment, k: Knobs, scale: float, stop: bool = True) -> SimulationRun:
        key = (k, round(scale, 12))
        run = cache.get(key)
        if run is None or (run.stopped and not stop):
            run = run_simulation(base_trace.scaled(scale) if scale != 1.0 else base_trace, d, sources[k.kv_dtype],
                                 rest[k.kv_dtype], model, shapes[k.kv_dtype], slo=slo, stop_on_failure=stop)
            cache[key] = run
        return run

    def result(k: Knobs, d: Deployment, found: RateSearch | None, below: float | None,
               points: tuple[RatePoint, ...]) -> SettingResult:
        best = found.best_scale if found is not None else None
        if found is not None and best is None:
            below = found.floor
        above = [p for p in points if not p.meets and (best is None or p.scale > best)]
        fail = min(above, key=lambda p: p.scale) if above else None
        at_best = next((p for p in points if best is not None and p.scale == best), None)
        return SettingResult(k, d, best, below, points, binding_of(fail, d), at_best)

    k0 = Knobs.of(defaults)
    given = defaults_search is not None
    if defaults_search is None:
        defaults_search = search_rate(lambda s: simulate(defaults, k0, s), base_trace, slo, start=1.0,
                                      resolution=resolution, min_scale=floor)
    first = result(k0, defaults, defaults_search, None, defaults_search.points)
    tick("vLLM's defaults")
    tried = [first]
    seen = {k0: first}
    best = first
    for axis in axes:
        for value in grid[axis]:
            k = best.knobs.with_axis(axis, value)
            if k in seen:
                tick(f"{axis}={value} (tried)")
                continue
            try:
                d = deployment_for(defaults, k, model)
                if k.kv_dtype not in sources:
                    raise SimulationError(f"no step-cost source for a {k.kv_dtype} cache")
                nowhere = best.best_scale is None  # the best so far fails down to the floor: probe there
                probe = floor if nowhere else best.best_scale * (1.0 + resolution)
                run = simulate(d, k, probe)
                p = rate_point(run, slo, base_trace.scaled(probe))
                if not p.meets:
                    r = result(k, d, None, probe, (p,))
                else:
                    found = search_rate(lambda s, d=d, k=k: simulate(d, k, s), base_trace, slo, start=probe,
                                        resolution=resolution, min_scale=floor, first=run,
                                        hint=None if nowhere else probe * (1.0 + 2.0 * resolution))
                    r = result(k, d, found, None, found.points)
            except SchedulerError as exc:  # a setting that cannot serve the trace (a prompt over the budget unchunked)
                r = SettingResult(k, None, None, None, (), None, None, str(exc))
            seen[k] = r
            tried.append(r)
            if r.best_scale is not None and (best.best_scale is None or r.best_scale > best.best_scale):
                best = r
            tick(f"{axis}={value}")

    def at_trace(r: SettingResult) -> RatePoint:
        if r is first and defaults_at_trace is not None:
            return rate_point(defaults_at_trace, slo, base_trace)
        assert r.deployment is not None
        return rate_point(simulate(r.deployment, r.knobs, 1.0, stop=False), slo, base_trace)

    at_d = at_trace(first)
    at_b = at_d if best is first else at_trace(best)
    runs = len(cache) + (len(defaults_search.points) if given else 0)  # a given search ran outside the cache
    return OperatingPoint(label, tuple(axes), first, best, tuple(tried), at_d, at_b, runs, time.perf_counter() - t0,
                          floor)


@dataclass(frozen=True)
class OperatingVerdict:
    """Whether the faster kernel moves the operating point: the pair serving the most at its own best setting
    (``winner``, None when the top two are within ``resolution``: ``tie``), ``runner_up``, the ratio of their best
    rates (``best_ratio``) and of their defaults' (``defaults_ratio``; None where a side met the SLO nowhere),
    ``same_knobs`` (both best settings equal), and per label the gain of its best over its defaults (``gain``: best
    scale / defaults' scale, inf where the defaults met the SLO nowhere)."""

    winner: str | None
    runner_up: str | None
    tie: bool
    best_ratio: float | None
    defaults_ratio: float | None
    same_knobs: bool | None
    gain: dict[str, float | None]


def compare_operating(points: Sequence[OperatingPoint], resolution: float) -> OperatingVerdict | None:
    """:class:`OperatingVerdict` over the searched pairs (None for none)."""
    if not points:
        return None

    def gain(p: OperatingPoint) -> float | None:
        b, d = p.best.best_scale, p.defaults.best_scale
        if b is None:
            return None
        return b / d if d else float("inf")

    gains = {p.label: gain(p) for p in points}
    ranked = sorted(points, key=lambda p: p.best.best_scale or 0.0, reverse=True)
    if len(ranked) < 2:
        return OperatingVerdict(ranked[0].label, None, False, None, None, None, gains)
    a, b = ranked[0], ranked[1]
    ratio = (a.best.best_scale / b.best.best_scale) if a.best.best_scale and b.best.best_scale else None
    da, db = a.defaults.best_scale, b.defaults.best_scale
    tie = ratio is not None and ratio <= 1.0 + resolution + 1e-9 or (not a.best.best_scale and not b.best.best_scale)
    same = (replace(a.best.knobs, kv_dtype=None) == replace(b.best.knobs, kv_dtype=None)
            and a.best.knobs.kv_dtype == b.best.knobs.kv_dtype)
    return OperatingVerdict(None if tie else a.label, b.label, tie, ratio, (da / db) if da and db else None, same, gains)
