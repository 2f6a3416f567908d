"""``profattn compare BASE HEAD``: what changed between two runs, cell by cell, beyond noise.

Cells are matched by (workload tag, backend). For each matched cell:

* **latency**: head / base from the cells' independent timing samples (``profile --repeat N``; one median
  per repeat, of the CUDA-graph replay for decode on CUDA, else of eager launches). Per cell: ``d`` = the
  Hodges–Lehmann estimate of ``ln(head/base)`` and its standard error ``se`` read off the exact Mann–Whitney
  interval (:func:`profattn.analysis.common.stats.log_se`; outlying samples widen it). Two runs are two processes, and a
  process-wide shift (the machine busier, clocks, memory placement) moves most cells together — so across the cells:

  - **drift** ``D`` = the median of the cells' ``d`` with its distribution-free interval
    (:func:`~profattn.analysis.common.stats.median_interval`), from at least :data:`MIN_DRIFT_CELLS` cells; a run-wide shift
    is *reported* (its size and interval), never a regression, and every cell is judged *relative to it*:
    ``r = d − D``;
  - the **scatter** ``σ`` of the cells around it, ``1.4826 · MAD(r)``: how far single cells move between two
    processes of identical code (placement, caches, a load burst over one cell's samples), which a cell's own samples
    cannot show;
  - per cell, *slower beyond the threshold* ``t`` is tested twice, against its own samples — ``(r − ln(1 + t)) / se``
    (``se`` read off the lower side of the rank interval, the upper side for *faster*: skewed noise widens one side)
    on Student's t with ``n_base + n_head − 2`` degrees of freedom (the error is itself estimated from few samples:
    the normal would flag 12–20 % of identical 5- and 3-sample comparisons at the boundary) — and against the other
    cells — ``(r − ln(1 + t)) / σ`` on Student's t with the MAD's ``0.37 (cells − 1)`` degrees of freedom (Rousseeuw
    & Croux 1993), or on the Cauchy (t with 1) when either run's machine was noisy (:mod:`profattn.analysis.run.noise`:
    load above the CPUs, or many spread cells: there whole cells are starved, 100× for all their samples) — and the
    larger p-value counts (an intersection–union test: a cell fails only when its own noise *and* the runs' scatter
    both put it beyond the threshold); *faster* alike. The p-values are **Holm**-adjusted over the tested cells
    (:func:`~profattn.analysis.common.stats.holm`): **slower** / **faster** when the adjusted p-value is below
    ``α = 1 − level`` (5 %), so the chance of *any* false alarm in a comparison of identical code stays at most α
    (family-wise), however many cells it has; otherwise **within noise**; ``too few repeats`` with fewer than 3
    samples a side (never a regression). The interval shown is, on each side, the wider of ``exp(r ± q·se)`` and
    ``exp(r ± q'·σ)``,
    ``q``, ``q'`` the t quantiles at ``1 − α/2m``: simultaneous (Bonferroni) at ``level`` over the ``m`` cells, so a
    cell whose interval lies beyond the threshold is always flagged.

  With fewer than :data:`MIN_DRIFT_CELLS` tested cells ``D = 0`` and only the cells' own samples count (said in a
  warning). An **A/B** run (:func:`compare_ab`: two backends timed alternately in one process, ``profattn compare
  --ab``) pairs the samples of each round instead (:func:`~profattn.analysis.common.stats.paired_ratio`, ``n − 1`` degrees of
  freedom): the drift cancels within a round, so no shift is applied and the cells' own pairs decide, Holm-adjusted.

* **correctness**: pass → fail is a regression even when the cell got faster; a cell that ran in the base
  and errors or is unsupported in the head is one too. Runs with different presets, with cells that never
  ran (interrupted), or a head lacking cells the base has are refused without ``--force``; with it, a
  cell only one run holds is listed, never a regression (a head may add cells: new backends).
* **launch shape**: per kernel (matched by unqualified name, :func:`profattn.analysis.common.names.kernel_stem`): grid,
  block, registers per thread, shared memory, launches per call — from the trace, or from Nsight Compute
  when a side has no trace kernels.
* **bytes**: DRAM read + write per call when both runs have counters (``bytes_ratio`` = head / base).

Per workload, the winner in each run and whether it flipped; the verdict of each run and what changed in
it. Everything is a typed record (:class:`CompareClass`, :class:`LaunchChange`, :class:`RegressionReason`,
:class:`VerdictChange`); :mod:`profattn.report.compare` turns them into rows, sentences and HTML. The
environment (GPU, driver, torch, CUDA, cuDNN, triton, preset, ...) is diffed at the top. Runs from
different GPU models are refused (:class:`CompareError`, exit 2) unless ``force``, which puts a warning
in every output. :attr:`Comparison.regression` decides the CLI's exit code 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import median
from typing import Any

from profattn.analysis.common.margins import within_noise
from profattn.analysis.common.names import kernel_stem
from profattn.analysis.common.stats import (RatioEstimate, hodges_lehmann_ratio, holm, log_se, median_interval, paired_ratio,
                                     student_t_quantile, student_t_sf)
from profattn.analysis.run.layout import CacheLayout
from profattn.analysis.run.noise import noise_findings
from profattn.analysis.run.verdict import Verdict, runner_up, verdict, winners
from profattn.errors import ProfattnError
from profattn.results import ABRun, CellResult, CellStatus, RunResult, StrEnum
from profattn.workload import Phase, Workload

DEFAULT_THRESHOLD = 0.05
#: Family-wise confidence: the chance that a comparison of identical code flags no cell is at least this.
LEVEL = 0.95
#: Fewest tested cells for estimating the run-wide drift and the between-run spread.
MIN_DRIFT_CELLS = 6
#: A tested cell that is neither slower nor faster but whose estimate (or its medians' ratio) lies beyond the
#: threshold is *inconclusive* when
#: its interval spans this factor or more (hi / lo): such a comparison could not tell a 2× regression from none.
INCONCLUSIVE_SPAN = 2.0
#: Fewest samples a side below which few samples are named as a cause of an inconclusive comparison.
CONCLUSIVE_SAMPLES = 5
#: Smallest standard error used (of a log ratio): identical samples on both sides would otherwise divide by zero.
_MIN_SE = 1e-6
#: Interval ends are kept within exp(±this) (a Cauchy quantile times a wide scatter would overflow a float).
_LOG_CAP = 700.0



class CompareClass(StrEnum):
    """How a matched cell's latency changed; members are listed in the order reports list them."""

    SLOWER = "slower"  #: the whole interval lies above a ``threshold`` slowdown
    FASTER = "faster"  #: the whole interval lies below a ``threshold`` speed-up
    NOISE = "within noise"  #: the interval reaches into the threshold band
    #: the estimate lies beyond the threshold but the interval spans :data:`INCONCLUSIVE_SPAN` or more: too noisy to judge
    INCONCLUSIVE = "inconclusive"
    FEW = "too few repeats"  #: fewer than 3 samples on a side: no interval
    UNTIMED = "not timed"  #: either side has no timing
    ONLY_BASE = "only in base"  #: the head run lacks this cell
    ONLY_HEAD = "only in head"  #: the base run lacks this cell


class Side(StrEnum):
    """One of the two runs of a comparison."""

    BASE = "base"
    HEAD = "head"


class LaunchProperty(StrEnum):
    """A kernel property compared between the runs (the value is its name in reports)."""

    GRID = "grid"
    BLOCK = "block"
    REGISTERS = "registers"
    SHARED_MEMORY = "shared memory (bytes)"
    LAUNCHES = "launches per call"


class RegressionKind(StrEnum):
    """Why a cell fails the comparison."""

    SLOWER = "slower"  #: latency interval beyond the threshold
    CORRECTNESS = "correctness"  #: passed in the base, fails in the head
    BROKE = "broke"  #: ran in the base, errors or is unsupported in the head


class NoiseCause(StrEnum):
    """Why a comparison's intervals were too wide to judge its inconclusive cells."""

    FEW_SAMPLES = "few samples"  #: fewer than :data:`CONCLUSIVE_SAMPLES` samples a side
    NOISY_MACHINE = "noisy machine"  #: a run's machine was noisy: the cells' scatter read with Cauchy tails
    SCATTER = "scatter"  #: single cells scatter beyond the threshold between the two processes
    OWN_SPREAD = "own spread"  #: a cell's own samples spread over 2× (max / min)


@dataclass(frozen=True)
class Inconclusive:
    """The comparison could not judge ``cells`` cells (:attr:`CompareClass.INCONCLUSIVE`): ``widest`` is the widest
    of their intervals, ``fewest_samples`` the fewest samples a side among them, ``scatter`` the cells' scatter
    between the runs (exp(σ) − 1; None: not estimated), ``causes`` what made the intervals wide."""

    cells: int
    widest: RatioEstimate
    fewest_samples: int
    causes: tuple[NoiseCause, ...]
    scatter: float | None = None


class CompareError(ProfattnError):
    """Two runs that cannot be compared (different GPU models without ``--force``, a bad threshold)."""


class CompareMode(StrEnum):
    """What is compared: two runs (two processes), or two backends timed alternately in one run (A/B)."""

    RUNS = "runs"
    AB = "a/b"


@dataclass(frozen=True)
class Drift:
    """The run-wide shift between the runs: ``ratio`` = exp(median of the cells' log changes) with its
    distribution-free interval ``[lo, hi]`` at ``confidence``, over ``cells`` tested cells; ``spread`` = exp(σ) − 1,
    the scatter of single cells around it (σ = 1.4826 · MAD of the log changes; 0.08: ±8 % at one σ). ``applied``: the
    cells were judged relative to it and to the scatter (False: too few cells, or an A/B run). ``heavy``: a run's
    machine was noisy, so the scatter was read with the Cauchy's heavy tails."""

    ratio: float
    lo: float
    hi: float
    confidence: float
    cells: int
    spread: float
    applied: bool
    heavy: bool = False

    @property
    def detected(self) -> bool:
        """The interval excludes "no shift": most cells moved together."""
        return self.applied and (self.lo > 1 or self.hi < 1)

    @property
    def change(self) -> float:
        return self.ratio - 1.0


@dataclass(frozen=True)
class EnvDiff:
    """One environment field in both runs (values as text; "n/a" where a run did not record it)."""

    field: EnvField
    base: str
    head: str

    @property
    def differs(self) -> bool:
        return self.base != self.head


@dataclass(frozen=True)
class CellChange:
    """One (workload, backend) cell in both runs.

    Latencies in µs (the median of the cell's repeat medians); ``estimate``: head/base ratio and interval
    (None when either side is untimed); ``launch_changes``: one record per changed kernel property;
    ``base_dram_bytes``/``head_dram_bytes``: DRAM read + write per call (bytes; None without counters);
    ``regression_reasons``: why this cell fails the comparison (empty when it does not).
    """

    cell_id: str
    workload: Workload
    backend: str
    classification: CompareClass
    base_status: CellStatus | None
    head_status: CellStatus | None
    base_latency_us: float | None
    head_latency_us: float | None
    estimate: RatioEstimate | None
    base_samples_us: tuple[float, ...]
    head_samples_us: tuple[float, ...]
    base_passed: bool | None
    head_passed: bool | None
    base_err: float | None
    head_err: float | None
    launch_changes: tuple[LaunchChange, ...]
    base_dram_bytes: float | None
    head_dram_bytes: float | None
    regression_reasons: tuple[RegressionReason, ...]
    threshold: float = DEFAULT_THRESHOLD
    #: Standard errors of ``ln(head/base)`` from this cell's own samples, below and above the estimate
    #: (:func:`~profattn.analysis.common.stats.log_se`; None: not tested).
    se_log: tuple[float, float] | None = None
    #: head / base relative to the run-wide drift, with the simultaneous interval the cell is judged by (None: not tested).
    judged: RatioEstimate | None = None
    #: Holm-adjusted p-values of "slower beyond the threshold" and "faster beyond it" (None: not tested).
    p_slower: float | None = None
    p_faster: float | None = None

    @property
    def phase(self) -> Phase:
        """The workload's regime."""
        return self.workload.phase

    @property
    def tested(self) -> bool:
        """The cell's latency was tested (at least 3 samples a side)."""
        return self.judged is not None

    @property
    def regression(self) -> bool:
        return bool(self.regression_reasons)

    @property
    def correctness_changed(self) -> bool:
        """The correctness outcome differs between the runs (pass → fail, fail → pass, or checked on one side only)."""
        return self.base_passed != self.head_passed

    @property
    def bytes_ratio(self) -> float | None:
        if self.base_dram_bytes and self.head_dram_bytes is not None:
            return self.head_dram_bytes / self.base_dram_bytes
        return None


@dataclass(frozen=True)
class LaunchChange:
    """One kernel (by unqualified name) whose launch differs: ``prop`` changed from ``base`` to ``head``,
    or (``prop`` None) the kernel ran on ``only`` one side."""

    kernel: str
    prop: LaunchProperty | None = None
    base: Any = None
    head: Any = None
    only: Side | None = None


@dataclass(frozen=True)
class RegressionReason:
    """One reason a cell fails: ``SLOWER`` (see the cell's ``estimate`` and ``threshold``), ``CORRECTNESS``
    (``reason``: the head's failure message) or ``BROKE`` (``head_status`` and the head's ``reason``)."""

    kind: RegressionKind
    head_status: CellStatus | None = None
    reason: str = ""


@dataclass(frozen=True)
class WinnerChange:
    """A workload's winner in both runs; ``close_*``: the winner was within noise of the runner-up there."""

    workload: Workload
    base_winner: str | None
    head_winner: str | None
    close_base: bool
    close_head: bool
    #: ``PAGED``: the winner among the kernels that read the page pool of a workload answered per layout (its overall
    #: winner is another record); None: the workload's winner.
    layout: CacheLayout | None = None

    @property
    def phase(self) -> Phase:
        """The workload's regime."""
        return self.workload.phase

    @property
    def flipped(self) -> bool:
        return self.base_winner != self.head_winner


@dataclass(frozen=True)
class VerdictChange:
    """The verdict differs between the runs: the training winner changed beyond noise (``workload`` None; two
    backends that tie in training and swap places are no change), or on ``workload`` the training winner is
    not beaten beyond noise in one run and is in the other (``*_stays``: :attr:`WorkloadVerdict.stays`)."""

    workload: Workload | None
    base_winner: str | None
    head_winner: str | None
    base_stays: bool | None = None
    head_stays: bool | None = None


@dataclass(frozen=True)
class Comparison:
    """Everything ``profattn compare`` reports; rows and Markdown are computed from it."""

    base_label: str
    head_label: str
    threshold: float
    level: float
    environment: tuple[EnvDiff, ...]
    warnings: tuple[str, ...]
    cells: tuple[CellChange, ...]
    winners: tuple[WinnerChange, ...]
    base_verdict: Verdict
    head_verdict: Verdict
    base_training_winner: str | None
    head_training_winner: str | None
    verdict_changes: tuple[VerdictChange, ...]
    forced: bool = False
    mode: CompareMode = CompareMode.RUNS
    #: The run-wide shift (None: no cell was tested).
    drift: Drift | None = None
    #: An A/B comparison's pairing (None for two runs).
    ab: ABRun | None = None
    #: Cells too noisy to judge (None: every tested cell was judged).
    inconclusive: Inconclusive | None = None

    @property
    def alpha(self) -> float:
        """The family-wise false-alarm rate: ``1 − level``."""
        return 1 - self.level

    @property
    def tested(self) -> int:
        """Cells whose latency was tested (the family the false-alarm rate is controlled over)."""
        return sum(1 for c in self.cells if c.tested)

    @property
    def regressions(self) -> tuple[CellChange, ...]:
        return tuple(c for c in self.cells if c.regression)

    @property
    def regression(self) -> bool:
        """Any cell slower beyond the threshold, pass → fail, or ran → error: the CLI exits 1."""
        return bool(self.regressions)

    @property
    def shared(self) -> int:
        """Cells both runs hold (the others are only in one run: listed, not compared)."""
        return sum(c.classification not in (CompareClass.ONLY_BASE, CompareClass.ONLY_HEAD) for c in self.cells)

    @property
    def passed(self) -> bool:
        """No regression, no cell too noisy to judge, and at least one cell both runs hold: the CLI exits 0
        (inconclusive without a regression, or no cell shared — nothing compared, not a pass: 3)."""
        return not self.regression and self.inconclusive is None and self.shared > 0

    def count(self, classification: CompareClass) -> int:
        return sum(1 for c in self.cells if c.classification == classification)

    @property
    def verdict_flipped(self) -> bool:
        return bool(self.verdict_changes)


# ---- building ------------------------------------------------------------------------------------


def parse_threshold(text: str) -> float:
    """``"5%"`` or ``"0.05"`` → 0.05.

    Raises:
        CompareError: not a number, a bare number ≥ 1 (``"5"``: 5 % or 500 %? say which), or outside (0, 100 %).
    """
    s = str(text).strip()
    try:
        value = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise CompareError(f"--threshold {text!r} is not a number (e.g. 5% or 0.05)") from None
    if not s.endswith("%") and value >= 1:
        raise CompareError(f"--threshold {text!r} is ambiguous: write a percent ({s}%) or a fraction below 1 (e.g. 0.05)")
    if not 0 < value < 1:
        raise CompareError(f"--threshold {text!r} must be between 0 and 100%")
    return value


class EnvField(StrEnum):
    """The fields :func:`environment_diff` compares (the value is the field's name in reports)."""

    DEVICE_NAME = "device_name"
    DEVICE = "device"
    NUM_SMS = "num_sms"
    DRIVER = "driver"
    TORCH = "torch"
    CUDA = "cuda"
    CUDNN = "cudnn"
    TRITON = "triton"
    PYTHON = "python"
    PLATFORM = "platform"
    PROFATTN = "profattn"
    PRESET = "preset"
    SEED = "seed"
    CPUS = "CPUs"
    THREADS = "intra-op threads"
    LOAD = "load (1 min, start → end)"
    SAMPLES = "timing samples per cell"
    COUNTERS = "counters"
    MEASURED = "measured (UTC)"


#: The :class:`EnvField` members read from :class:`profattn.results.Environment` (attribute = value).
ENV_FIELDS = tuple(EnvField)[:11]
#: Differences that are expected or already refused/forced, so they are not repeated as warnings.
_NOT_WARNED = (EnvField.MEASURED, EnvField.DEVICE_NAME, EnvField.DEVICE, EnvField.PRESET, EnvField.LOAD)


def environment_diff(base: RunResult, head: RunResult) -> tuple[EnvDiff, ...]:
    """Environment fields, preset, seed, repeats and counter status of both runs (all, differing or not)."""
    def s(v: object) -> str:
        return "n/a" if v is None else str(v)
    rows = [EnvDiff(f, s(getattr(base.environment, f.value)), s(getattr(head.environment, f.value))) for f in ENV_FIELDS]
    rows += [
        EnvDiff(EnvField.PRESET, base.preset, head.preset),
        EnvDiff(EnvField.SEED, str(base.seed), str(head.seed)),
        EnvDiff(EnvField.CPUS, s(base.environment.cpu_count), s(head.environment.cpu_count)),
        EnvDiff(EnvField.THREADS, s(base.environment.torch_threads), s(head.environment.torch_threads)),
        EnvDiff(EnvField.LOAD, _load(base), _load(head)),
        EnvDiff(EnvField.SAMPLES, base.samples_text(), head.samples_text()),
        EnvDiff(EnvField.COUNTERS, base.counters_info.status, head.counters_info.status),
        EnvDiff(EnvField.MEASURED, base.environment.created_utc, head.environment.created_utc),
    ]
    return tuple(rows)


def _load(run: RunResult) -> str:
    """The 1-minute load at the run's start and end, as text ("n/a" where not recorded)."""
    e = run.environment
    loads = [f"{la[0]:.2f}" for la in (e.load_avg_start, e.load_avg_end) if la]
    return " → ".join(loads) if loads else "n/a"


def _median(xs: tuple[float, ...]) -> float | None:
    from statistics import median

    return median(xs) if xs else None


def _kernels(c: CellResult) -> dict[str, dict[LaunchProperty, Any]]:
    """Per kernel stem: grid, block, registers, shared memory, launches per call (trace, else counters)."""
    P = LaunchProperty
    out: dict[str, dict[LaunchProperty, Any]] = {}
    if c.trace is not None and c.trace.kernels:
        for k in c.trace.kernels:
            out.setdefault(kernel_stem(k.name), {
                P.GRID: k.grid, P.BLOCK: k.block, P.REGISTERS: k.registers_per_thread,
                P.SHARED_MEMORY: k.shared_mem_bytes, P.LAUNCHES: round(k.count_per_call, 3)})
    elif c.counters is not None:
        for k in c.counters.kernels:
            smem = None if k.shared_mem_dynamic_bytes is None and k.shared_mem_static_bytes is None else \
                int((k.shared_mem_dynamic_bytes or 0) + (k.shared_mem_static_bytes or 0))
            out.setdefault(kernel_stem(k.name), {P.GRID: k.grid, P.BLOCK: k.block, P.REGISTERS: k.registers_per_thread,
                                                 P.SHARED_MEMORY: smem})
    return out


def launch_changes(base: CellResult, head: CellResult) -> tuple[LaunchChange, ...]:
    """One :class:`LaunchChange` per kernel property that differs (e.g. grid (16, 4, 8) → (1, 4, 8)) and per
    kernel that appears on one side only, in the base's kernel order."""
    kb, kh = _kernels(base), _kernels(head)
    if not kb or not kh:
        return ()
    out = []
    for stem in dict.fromkeys([*kb, *kh]):
        if stem not in kh:
            out.append(LaunchChange(stem, only=Side.BASE))
        elif stem not in kb:
            out.append(LaunchChange(stem, only=Side.HEAD))
        else:
            for prop, v in kb[stem].items():
                w = kh[stem].get(prop)
                if v is not None and w is not None and v != w:
                    out.append(LaunchChange(stem, prop, v, w))
    return tuple(out)



def compare_cell(base: CellResult | None, head: CellResult | None, *, threshold: float, level: float = LEVEL,
                 paired: bool = False) -> CellChange:
    """One matched (or unmatched) cell before the comparison-wide judgement (:func:`judge_cells`): its raw
    head/base estimate (Hodges–Lehmann with the exact Mann–Whitney interval at the nominal ``level``; ``paired``: the
    samples are A/B rounds, :func:`~profattn.analysis.common.stats.paired_ratio`), its standard error, correctness and
    launch changes. A timed cell with enough samples is provisionally ``within noise``."""
    ref = head or base
    assert ref is not None
    bs = base.latency_samples_us if base else ()
    hs = head.latency_samples_us if head else ()
    if paired and bs and hs:
        n = min(len(bs), len(hs))
        est = paired_ratio(bs[:n], hs[:n], level=level)
    else:
        est = hodges_lehmann_ratio(bs, hs, level=level) if bs and hs else None
    C = CompareClass
    if base is None:
        cls = C.ONLY_HEAD
    elif head is None:
        cls = C.ONLY_BASE
    elif est is None:
        cls = C.UNTIMED
    elif est.lo is None:
        cls = C.FEW
    else:
        cls = C.NOISE
    reasons: list[RegressionReason] = []
    bp = base.correctness.passed if base and base.correctness else None
    hp = head.correctness.passed if head and head.correctness else None
    if bp is True and hp is False:
        reasons.append(RegressionReason(RegressionKind.CORRECTNESS, head.status, head.reason))  # type: ignore[union-attr]
    if (base is not None and base.status.ran and head is not None
            and not head.status.ran and head.status is not CellStatus.PENDING):
        # the head's kernel broke or now refuses the workload; a cell the head never reached (pending, or
        # outside its --regime/--backend selection) says nothing about the kernel and is no regression
        reasons.append(RegressionReason(RegressionKind.BROKE, head.status, head.reason))
    return CellChange(
        cell_id=ref.cell_id, workload=ref.workload, backend=ref.backend, classification=cls,
        base_status=base.status if base else None, head_status=head.status if head else None,
        base_latency_us=_median(bs), head_latency_us=_median(hs), estimate=est,
        base_samples_us=bs, head_samples_us=hs, base_passed=bp, head_passed=hp,
        base_err=base.correctness.out_rel_err if base and base.correctness else None,
        head_err=head.correctness.out_rel_err if head and head.correctness else None,
        launch_changes=launch_changes(base, head) if base and head else (),
        base_dram_bytes=base.counters.dram_bytes if base and base.counters else None,
        head_dram_bytes=head.counters.dram_bytes if head and head.counters else None,
        regression_reasons=tuple(reasons), threshold=threshold,
        se_log=log_se(est) if est is not None and cls is C.NOISE else None,
    )


def run_drift(cells: Sequence[CellChange], *, level: float = LEVEL, across_runs: bool = True,
              noisy: bool = False) -> Drift | None:
    """The run-wide shift and the cells' scatter around it (see the module docstring); None when no cell is testable.
    ``across_runs`` False (an A/B run: the pairs share a process) reports the median change but applies nothing;
    ``noisy``: a run's machine was noisy (the scatter is read with heavy tails)."""
    tested = [c for c in cells if c.se_log is not None and c.estimate is not None]
    if not tested:
        return None
    logs = [math.log(c.estimate.ratio) for c in tested]  # type: ignore[union-attr]
    lo, hi, coverage = median_interval(logs, level=level)
    centre = median(logs)
    applied = across_runs and len(tested) >= MIN_DRIFT_CELLS
    sigma = median(abs(x - centre) for x in logs) * 1.4826 if applied else 0.0
    return Drift(math.exp(centre), math.exp(lo), math.exp(hi), coverage, len(tested), math.expm1(sigma), applied,
                 heavy=applied and noisy)


def _mad_df(cells: int) -> float:
    """Degrees of freedom of a scale read from the median absolute deviation of ``cells`` values: the MAD's
    efficiency is 37 % of the standard deviation's at the normal (Rousseeuw & Croux, JASA 88 (1993) 1273–1283), so it
    carries about ``0.37 (n − 1)`` degrees of freedom, at least 1."""
    return max(1.0, 0.37 * (cells - 1))


def judge_cells(cells: Sequence[CellChange], *, threshold: float, level: float = LEVEL, paired: bool = False,
                noisy: bool = False) -> tuple[tuple[CellChange, ...], Drift | None]:
    """Classify every tested cell of one comparison together (see the module docstring): relative to the run-wide
    drift, against its own samples and against the other cells' scatter (``noisy``: with heavy tails), Holm-adjusted
    over the tested cells at ``α = 1 − level``; ``paired``: A/B rounds (no drift, own pairs only). Returns the cells
    (untested ones unchanged) and the drift."""
    drift = run_drift(cells, level=level, across_runs=not paired, noisy=noisy)
    tested = [i for i, c in enumerate(cells) if c.se_log is not None]
    if drift is None or not tested:
        return tuple(cells), drift
    alpha = 1 - level
    shift = math.log(drift.ratio) if drift.applied else 0.0
    sigma = max(math.log1p(drift.spread), _MIN_SE) if drift.applied else None
    cross_df = 1.0 if drift.heavy else _mad_df(drift.cells)
    band = math.log1p(threshold)
    tail = alpha / (2 * len(tested))
    rows = []
    for i in tested:
        c = cells[i]
        est = c.estimate
        own_df = (est.n_base - 1) if paired else (est.n_base + est.n_head - 2)  # type: ignore[union-attr]
        r = math.log(est.ratio) - shift  # type: ignore[union-attr]
        down, up = (max(x, _MIN_SE) for x in c.se_log)  # type: ignore[union-attr]
        p_slow = student_t_sf((r - band) / down, own_df)
        p_fast = student_t_sf(-(r + band) / up, own_df)
        q = student_t_quantile(1 - tail, own_df)
        below, above = q * down, q * up
        if sigma is not None:  # the intersection-union test: the cell's own noise and the runs' scatter both
            p_slow = max(p_slow, student_t_sf((r - band) / sigma, cross_df))
            p_fast = max(p_fast, student_t_sf(-(r + band) / sigma, cross_df))
            spread = student_t_quantile(1 - tail, cross_df) * sigma
            below, above = max(below, spread), max(above, spread)
        rows.append((r, below, above, p_slow, p_fast))
    slower = holm([row[3] for row in rows])
    faster = holm([row[4] for row in rows])
    out = list(cells)
    for i, (r, below, above, _, _), ps, pf in zip(tested, rows, slower, faster):
        c = cells[i]
        est = c.estimate
        judged = RatioEstimate(math.exp(r), math.exp(max(r - below, -_LOG_CAP)), math.exp(min(r + above, _LOG_CAP)), level,
                               est.n_base, est.n_head)  # type: ignore[union-attr]
        cls = CompareClass.SLOWER if ps < alpha else CompareClass.FASTER if pf < alpha else CompareClass.NOISE
        # the medians' ratio counts as much as the estimate: samples split between two levels (scheduler quanta) can
        # put the Hodges–Lehmann estimate at 1 while the medians moved 70× ("39.96 ms → 572.8 µs, +0.0 %")
        medians = (math.log(c.head_latency_us / c.base_latency_us) - shift
                   if c.base_latency_us and c.head_latency_us else r)
        if (cls is CompareClass.NOISE and max(abs(r), abs(medians)) > band
                and below + above >= math.log(INCONCLUSIVE_SPAN)):
            cls = CompareClass.INCONCLUSIVE
        reasons = c.regression_reasons
        if cls is CompareClass.SLOWER:
            reasons = (RegressionReason(RegressionKind.SLOWER), *reasons)
        out[i] = replace(c, classification=cls, judged=judged, p_slower=ps, p_faster=pf, regression_reasons=reasons)
    return tuple(out), drift


def inconclusive(cells: Sequence[CellChange], drift: Drift | None, threshold: float) -> Inconclusive | None:
    """What made the :attr:`CompareClass.INCONCLUSIVE` cells of one comparison too noisy to judge (None: none)."""
    bad = [c for c in cells if c.classification is CompareClass.INCONCLUSIVE and c.judged is not None]
    if not bad:
        return None
    widest = max((c.judged for c in bad), key=lambda e: math.log(e.hi) - math.log(max(e.lo, 1e-300)))  # type: ignore[arg-type,union-attr]
    fewest = min(min(len(c.base_samples_us), len(c.head_samples_us)) for c in bad)
    causes = []
    if fewest < CONCLUSIVE_SAMPLES:
        causes.append(NoiseCause.FEW_SAMPLES)
    if drift is not None and drift.heavy:
        causes.append(NoiseCause.NOISY_MACHINE)
    scatter = drift.spread if drift is not None and drift.applied else None
    if scatter is not None and scatter > threshold:
        causes.append(NoiseCause.SCATTER)
    if any(max(xs) > 2 * min(xs) for c in bad for xs in (c.base_samples_us, c.head_samples_us) if xs and min(xs) > 0):
        causes.append(NoiseCause.OWN_SPREAD)
    return Inconclusive(len(bad), widest, fewest, tuple(causes), scatter)  # type: ignore[arg-type]


def _winner_changes(base: RunResult, head: RunResult) -> tuple[WinnerChange, ...]:
    wb, wh = winners(base), winners(head)
    workloads = {c.workload.tag: c.workload for c in (*base.cells, *head.cells)}
    out = []
    for tag, w in workloads.items():
        if tag not in wb or tag not in wh:
            continue
        def close(run: RunResult, win: CellResult | None, tag: str = tag) -> bool:
            second = runner_up(run, tag, win) if win else None
            return bool(win and second and within_noise(win, second))
        out.append(WinnerChange(w, wb[tag].backend if wb[tag] else None,
                                wh[tag].backend if wh[tag] else None, close(base, wb[tag]), close(head, wh[tag])))
    return tuple(out)


def _paged_winner_changes(vb: Verdict, vh: Verdict) -> tuple[WinnerChange, ...]:
    """The paged-cache winner of every workload both verdicts answer per layout (:class:`LayoutSplit`): a paged
    kernel that flips while the overall (contiguous-copy) winner stays is a change too."""
    heads = {r.workload_tag: r for r in vh.rows if r.layouts is not None}
    out = []
    for r in vb.rows:
        h = heads.get(r.workload_tag)
        if r.layouts is None or h is None or h.layouts is None:
            continue
        pb, ph = r.layouts.paged, h.layouts.paged
        out.append(WinnerChange(r.workload, pb.winner.backend, ph.winner.backend, bool(pb.tied), bool(ph.tied),
                                layout=CacheLayout.PAGED))
    return tuple(out)


def compare_runs(base: RunResult, head: RunResult, *, threshold: float = DEFAULT_THRESHOLD, force: bool = False,
                 base_label: str = "base", head_label: str = "head", level: float = LEVEL) -> Comparison:
    """Compare two runs (see the module docstring): ``level`` is the family-wise confidence (``α = 1 − level``).

    Raises:
        CompareError: ``force`` is False and the runs come from different GPU models (device names), use
            different presets, either holds cells that never ran (an interrupted run), or the head lacks
            cells the base has; or ``threshold`` is outside (0, 1).
    """
    if not 0 < threshold < 1:
        raise CompareError(f"threshold must be between 0 and 1 (a fraction), got {threshold}")
    warnings: list[str] = []

    def refuse_unless_forced(problem: str, refusal: str, forced_note: str) -> None:
        """Raise ``problem`` + ``refusal`` without --force; with it, record ``problem`` + ``forced_note``."""
        if not force:
            raise CompareError(problem + refusal)
        warnings.append(f"Forced comparison: {problem}{forced_note}")

    gb, gh = base.environment.device_name, head.environment.device_name
    if gb != gh:
        refuse_unless_forced(f"the runs come from different devices ({gb} vs {gh})",
                             ": latency changes would mix the kernel change with the hardware; pass --force to compare anyway",
                             ". Latency, launch-shape and byte changes mix the kernel change with the hardware.")
    if base.preset != head.preset:
        refuse_unless_forced(f"the runs use different presets ({base.preset} vs {head.preset}), so their cells do not match",
                             "; pass --force to compare the cells they share", ".")
    for label, run in ((base_label, base), (head_label, head)):
        pending = sum(c.status == CellStatus.PENDING for c in run.cells)
        if pending:
            refuse_unless_forced(f"the {label} run is incomplete: {pending} of {len(run.cells)} cells never ran (interrupted?)",
                                 "; finish it (profattn profile again) or pass --force to compare the cells both ran",
                                 "; those cells are not compared.")
    env = environment_diff(base, head)
    for d in env:
        if d.differs and d.field not in _NOT_WARNED:
            warnings.append(f"{d.field} differs: {d.base} → {d.head}")
    fewest = min((t[0] for t in (base.samples_taken(), head.samples_taken()) if t), default=0)
    if fewest < 3:
        warnings.append(f"timing samples per cell: base {base.samples_text()}, head {head.samples_text()}; latency "
                        "changes need at least 3 samples a side (profile --repeat 5) for an interval — cells with "
                        "fewer are 'too few repeats'")
    bmap = {(c.workload.tag, c.backend): c for c in base.cells}
    hmap = {(c.workload.tag, c.backend): c for c in head.cells}
    keys = list(dict.fromkeys([*bmap, *hmap]))
    lost = sum(k not in hmap for k in bmap)
    if lost and not force:  # a CI gate must not pass because the head measured less (forced: noted below)
        refuse_unless_forced(f"the {head_label} run lacks {lost} of the {base_label} run's {len(bmap)} cells (another "
                             "--regime or --backend selection?)",
                             "; profile the same selection, or pass --force to compare the cells both hold", "")
    for side, mine, other in ((base_label, bmap, hmap), (head_label, hmap, bmap)):
        only = sum(k not in other for k in mine)
        if only:
            warnings.append(f"{only} cell(s) only in the {side} run (a different --regime or --backend selection): "
                            "listed, not compared")
    phase_order = list(Phase)
    cells = sorted((compare_cell(bmap.get(k), hmap.get(k), threshold=threshold, level=level) for k in keys),
                   key=lambda c: (phase_order.index(c.phase), keys.index((c.workload.tag, c.backend))))
    judged, drift = judge_cells(cells, threshold=threshold, level=level,
                                noisy=bool(noise_findings(base) or noise_findings(head)))
    if drift is not None and not drift.applied:
        warnings.append(f"only {drift.cells} cell(s) with timing samples on both sides: the run-wide drift between the "
                        f"two processes is not estimated (it needs {MIN_DRIFT_CELLS}), so a shift of the whole machine "
                        "counts against each cell; compare --ab times both sides in one process")
    vb, vh = verdict(base), verdict(head)
    changes = []
    swapped_within_noise = vh.training_winner in vb.training_tied or vb.training_winner in vh.training_tied
    if vb.training_winner != vh.training_winner and not swapped_within_noise:
        changes.append(VerdictChange(None, vb.training_winner, vh.training_winner))
    hrows = {r.workload_tag: r for r in vh.rows}
    for r in vb.rows:
        h = hrows.get(r.workload_tag)
        if h is not None and r.stays is not None and h.stays is not None and r.stays != h.stays:
            changes.append(VerdictChange(r.workload, r.winner_backend, h.winner_backend, r.stays, h.stays))
    return Comparison(
        base_label=base_label, head_label=head_label, threshold=threshold, level=level, environment=env,
        warnings=tuple(warnings), cells=judged, winners=_winner_changes(base, head) + _paged_winner_changes(vb, vh),
        base_verdict=vb, head_verdict=vh, base_training_winner=vb.training_winner,
        head_training_winner=vh.training_winner, verdict_changes=tuple(changes), forced=force and gb != gh,
        drift=drift, inconclusive=inconclusive(judged, drift, threshold),
    )


def _rounds(cell: CellResult | None) -> CellResult | None:
    """``cell`` with only its A/B-round samples (every sample after its first: :class:`~profattn.results.ABRun`)."""
    if cell is None:
        return None
    if cell.graph_timing is not None:
        return replace(cell, graph_timing_repeats=cell.graph_timing_repeats[1:])
    return replace(cell, timing_repeats=cell.timing_repeats[1:])


def compare_ab(run: RunResult, *, threshold: float = DEFAULT_THRESHOLD, level: float = LEVEL) -> Comparison:
    """Compare the two backends of an A/B run (``run.ab``), workload by workload, on their paired rounds: each cell's
    change is the paired Hodges–Lehmann ratio of the head's samples over the base's, round by round
    (:func:`~profattn.analysis.common.stats.paired_ratio`), tested against its pairs and Holm-adjusted over the workloads
    (see the module docstring); correctness and breakage as in :func:`compare_runs` (base = the base backend's cell).

    Raises:
        CompareError: ``run`` is not an A/B run, or ``threshold`` is outside (0, 1).
    """
    if not 0 < threshold < 1:
        raise CompareError(f"threshold must be between 0 and 1 (a fraction), got {threshold}")
    ab = run.ab
    if ab is None:
        raise CompareError("not an A/B run (its results.json has no 'ab'): compare two runs, or measure one with "
                           "compare --ab BASE_BACKEND HEAD_BACKEND")
    warnings: list[str] = []
    by = {(c.workload.tag, c.backend): c for c in run.cells}
    phase_order = list(Phase)
    cells = []
    for w in sorted(dict.fromkeys(c.workload for c in run.cells), key=lambda w: phase_order.index(w.phase)):
        a, b = by.get((w.tag, ab.base)), by.get((w.tag, ab.head))
        if a is None and b is None:
            continue
        change = compare_cell(_rounds(a), _rounds(b), threshold=threshold, level=level, paired=True)
        cells.append(replace(change, backend=f"{ab.base} → {ab.head}"))
    pending = sum(c.status == CellStatus.PENDING for c in run.cells)
    if pending:
        warnings.append(f"the A/B run is incomplete: {pending} of {len(run.cells)} cells never ran (interrupted?)")
    short = [c for c in cells if c.base_samples_us and c.head_samples_us and
             min(len(c.base_samples_us), len(c.head_samples_us)) < ab.rounds]
    if short:
        warnings.append(f"{len(short)} workload(s) have fewer than the {ab.rounds} A/B rounds planned (a round "
                        "dropped, or the run stopped early): see the cells' notes")
    judged, drift = judge_cells(cells, threshold=threshold, level=level, paired=True)
    v = verdict(run)
    return Comparison(
        base_label=ab.base, head_label=ab.head, threshold=threshold, level=level, environment=environment_diff(run, run),
        warnings=tuple(warnings), cells=judged, winners=(), base_verdict=v, head_verdict=v,
        base_training_winner=v.training_winner, head_training_winner=v.training_winner, verdict_changes=(),
        mode=CompareMode.AB, drift=drift, ab=ab, inconclusive=inconclusive(judged, drift, threshold),
    )
