"""Typed records of a run: cells, timings, correctness, trace and counter evidence, environment, ceilings."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Iterable

from profattn.interfaces import Adoption
from profattn.values import MAX_DURATION_US, number_problem, short_number
from profattn.workload import Workload

SCHEMA = "profattn.results"
SCHEMA_VERSION = 4
#: Versions this code reads: v1 (no graph timing, no counters), v2 (one timing sample per cell) and v3 (no host
#: time per call: latencies timed without the host's stalls hidden, :attr:`Timing.host_us`) are read with the
#: missing fields empty.
READABLE_VERSIONS = (1, 2, 3, 4)


class StrEnum(str, Enum):
    """A closed set of strings: members compare equal to their value, and ``str()``/``format()`` give the
    value on every Python version (``enum.StrEnum`` needs 3.11)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class CellStatus(StrEnum):
    """Closed set of cell outcomes; the value is the string stored in results.json (``"ok"``, ...).

    A ``str`` enum, so ``status == "ok"`` still holds and JSON carries the plain string.
    """

    OK = "ok"  #: ran, timed, passed correctness
    INCORRECT = "incorrect"  #: ran and timed, failed correctness (never wins)
    UNSUPPORTED = "unsupported"  #: the backend cannot run this workload (reason given)
    ERROR = "error"  #: raised while running (out of memory included); message given
    PENDING = "pending"  #: not run yet (a run interrupted before reaching it)

    @property
    def ran(self) -> bool:
        """The cell executed and was timed (``ok`` or ``incorrect``)."""
        return self in (CellStatus.OK, CellStatus.INCORRECT)


class Damage(StrEnum):
    """A cell whose own numbers disagree (:attr:`CellResult.damage`): the value says what, in a message."""

    PASSED_ABOVE_TOLERANCE = "marked passed with an error above its tolerance"
    QUANTILES_OUT_OF_ORDER = "a timing whose p10, median and p90 are out of order"


@dataclass(frozen=True)
class Timing:
    """Latency of one call, from ``reps`` timed repetitions after warm-up.

    ``method`` says how (e.g. "CUDA events via triton.testing.do_bench, L2 flushed before each rep").
    ``host_us``: the host's time to issue one call (µs, ``time.perf_counter`` around the call, the median of calls
    each issued to an idle GPU: :func:`profattn.harness.timing.time_cuda`) — what an eager loop pays per call when it exceeds the GPU time; None where not measured (CPU
    timings, runs of schema ≤ 3, whose CUDA latencies also include any host stall longer than the L2 flush).
    """

    median_us: float
    p10_us: float
    p90_us: float
    min_us: float
    reps: int
    method: str
    host_us: float | None = None

    def __post_init__(self) -> None:
        """Raises ValueError for a latency that is not a positive finite number of at most
        :data:`~profattn.values.MAX_DURATION_US` (e.g. a hand-edited or corrupted results.json with NaN, inf, −1,
        "12" or 10**400): such a cell must never be ranked or compared."""
        for name in ("median_us", "p10_us", "p90_us", "min_us"):
            v = getattr(self, name)
            if (number_problem(v, limit=MAX_DURATION_US) is not None or v < 0 or (name == "median_us" and v == 0)):
                raise ValueError(f"Timing.{name} must be a positive finite number of µs (at most "
                                 f"{MAX_DURATION_US:g}), got {short_number(v)}")
        if number_problem(self.reps, integer=True) is not None or not isinstance(self.reps, int) or self.reps < 1:
            raise ValueError(f"Timing.reps must be a positive integer, got {short_number(self.reps)}")
        if self.host_us is not None and (number_problem(self.host_us, limit=MAX_DURATION_US) is not None
                                         or self.host_us < 0):
            raise ValueError(f"Timing.host_us must be a non-negative finite number of µs (at most "
                             f"{MAX_DURATION_US:g}) or null, got {short_number(self.host_us)}")


@dataclass(frozen=True)
class Correctness:
    """‖out − ref‖₂ / ‖ref‖₂ against a high-precision reference (fp32 on CUDA, fp64 on CPU).

    ``grad_rel_err`` holds ``dq``/``dk``/``dv`` for train cells. ``passed`` is False when any error is
    above ``tolerance`` or NaN/inf.
    """

    out_rel_err: float
    tolerance: float
    passed: bool
    reference: str
    grad_rel_err: dict[str, float] | None = None
    #: Appending calls: the paged cache held exactly the reference K/V through the block table afterwards, and
    #: unused slots their fill (None: the call does not append; the cell's reason says what differed).
    cache_ok: bool | None = None
    #: Quantized-cache calls (``Workload.kv_dtype``): ‖out − ref_unquantized‖/‖ref_unquantized‖, this cell's output
    #: against the reference over the *unquantized* cache — the quantization's cost as a user sees it, beside
    #: ``out_rel_err`` (against the dequantized cache, which decides ``passed``). None otherwise.
    quant_rel_err: float | None = None
    #: Packed calls of two or more documents (``Workload.is_packed``): after one document's q, k, v (and dO) were
    #: replaced, every other document's output rows (and dq, dk, dv) stayed bit-for-bit equal; False makes the cell
    #: incorrect (its reason names the first difference). None: not checked (not a packed call).
    isolated: bool | None = None


@dataclass(frozen=True)
class KernelLaunch:
    """One distinct kernel a cell launched, from the Kineto trace (per call of the cell).

    ``grid``/``block`` are ``(x, y, z)`` or None (e.g. AMD or CPU traces); ``blocks_per_sm`` is Kineto's
    ``blocks per SM`` (CTAs / SMs); ``dur_us_per_call`` is its GPU time per cell call.
    """

    name: str
    count_per_call: float
    dur_us_per_call: float
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    registers_per_thread: int | None
    shared_mem_bytes: int | None
    ctas: int | None
    blocks_per_sm: float | None
    est_occupancy_pct: float | None
    shapes: tuple[tuple[tuple[int, int, int], tuple[int, int, int]], ...] = ()  #: distinct (grid, block) launched


@dataclass(frozen=True)
class GraphReplaySummary:
    """What the profiler pass saw of a graph-timed cell's profiled CUDA-graph replays (ranges
    ``<cell id>::graph-replay``, :func:`profattn.families.graph_replay_range`): the kernels the replayed graph ran,
    per replay — the evidence behind the cell's graph latency.

    ``kernels``: distinct kernel names, most GPU time first; ``graph_launched``: every one of them was launched by a
    graph launch (``cudaGraphLaunch``), not by an eager launch inside the range; ``family_ok``: as
    :attr:`TraceSummary.family_ok` for the replayed kernels, except that a trace holding no replayed kernel (a
    profiler that does not record graph kernels) is None, not False; ``same_kernels``: the replays ran the same
    kernel names as the cell's eager calls (None when either side recorded none).
    """

    replays: int
    kernels_per_replay: float
    gpu_time_per_replay_us: float | None
    kernels: tuple[str, ...]
    graph_launched: bool
    family_ok: bool | None
    family_note: str
    same_kernels: bool | None


@dataclass(frozen=True)
class TraceSummary:
    """What the profiler pass saw of one cell: the kernels that actually ran, per call.

    ``family_ok`` is None when the trace gives no evidence either way (e.g. no events recorded),
    False when kernels of another family ran or none of the backend's own did (``family_note`` says which).
    """

    trace_file: str
    calls: int
    kernels_per_call: float
    gpu_time_per_call_us: float | None
    ctas_per_call: float | None
    ctas_per_sm: float | None
    dominant_kernel: str | None
    dominant_share: float | None
    kernels: tuple[KernelLaunch, ...]
    family_ok: bool | None
    family_note: str
    ops: tuple[str, ...] = ()
    #: The profiled CUDA-graph replays of a graph-timed cell (None: not graph-timed, or a run made before they
    #: were profiled).
    graph: GraphReplaySummary | None = None


@dataclass(frozen=True)
class CounterKernel:
    """One kernel of a cell as Nsight Compute measured it (one call, cold caches: see CountersInfo).

    ``l2_to_sm_read_bytes`` = ``lts__t_sectors_srcunit_tex_op_read.sum`` × 32 B; ``dram_*`` from
    ``dram__bytes_{read,write}.sum``; launch shape from ``launch__*`` metrics and ncu's Grid/Block Size.
    """

    name: str
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    registers_per_thread: int | None
    shared_mem_dynamic_bytes: float | None
    shared_mem_static_bytes: float | None
    waves_per_sm: float | None
    dram_read_bytes: float | None
    dram_write_bytes: float | None
    l2_to_sm_read_bytes: float | None
    l1_global_load_bytes: float | None
    gpu_time_us: float | None


@dataclass(frozen=True)
class CounterSummary:
    """A cell's measured traffic: sums over its kernels of one call (bytes; µs).

    A sum is None when any of the cell's kernels lacks that counter (a partial sum would understate it:
    :func:`profattn.trace.counters.sum_counters`); ``kernels_lacking`` says how many kernels lack which
    counter (only counters some kernel lacks; empty when every sum is complete — and in results.json
    written before this field existed, whose sums were partial: missing values counted as 0)."""

    dram_read_bytes: float | None
    dram_write_bytes: float | None
    l2_to_sm_read_bytes: float | None
    l1_global_load_bytes: float | None
    gpu_time_us: float | None
    kernels: tuple[CounterKernel, ...]
    kernels_lacking: dict[str, int] = field(default_factory=dict)

    @property
    def dram_bytes(self) -> float | None:
        """DRAM read + write bytes; None when either is unknown."""
        if self.dram_read_bytes is None or self.dram_write_bytes is None:
            return None
        return self.dram_read_bytes + self.dram_write_bytes


class CountersStatus(StrEnum):
    """Whether hardware counters were read for a run (the string stored in results.json)."""

    MEASURED = "measured"
    UNAVAILABLE = "unavailable"  #: ``reason`` says why: no ncu, no permission, CPU run...
    NOT_REQUESTED = "not requested"


@dataclass(frozen=True)
class CountersInfo:
    """How (and whether) hardware counters were read for a run. ``status``: :class:`CountersStatus`
    (a plain string is coerced; one outside the set raises ValueError).
    ``cache_control``/``replay_mode``/``clock_control`` are ncu's settings: they define what the bytes mean."""

    status: CountersStatus
    reason: str = ""
    ncu_version: str | None = None
    cache_control: str | None = None
    replay_mode: str | None = None
    clock_control: str | None = None
    wall_s: float | None = None
    csv_file: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.status, CountersStatus):
            object.__setattr__(self, "status", CountersStatus(self.status))


class RankStatus(StrEnum):
    """How one rank of a context-parallel cell ended (the string stored in results.json)."""

    OK = "ok"  #: wrote its results (its ``error`` may still say its trace was unreadable)
    FAILED = "failed"  #: ended the launch with its own error, or was stopped before writing its results


@dataclass(frozen=True)
class RankRecord:
    """One rank of a context-parallel cell (``workload.cp_ranks ≥ 2``).

    ``status``: :class:`RankStatus` (``ok``, or ``failed`` with ``error``, one line; a plain string is coerced, one
    outside the set raises ValueError); ``step_us``: the median of this rank's step times
    (forward, plus backward for train; wall clock around the step after a barrier); from its trace, per profiled call:
    ``compute_us`` (attention), ``comm_us`` (the process-group backend moving data), ``overlap_us`` (both at once),
    ``idle_us`` (neither), ``sent_bytes``/``received_bytes`` (the traced collectives' sizes,
    :mod:`profattn.analysis.calls.comm`); ``ledger_bytes``: what the formula says it sends
    (:func:`profattn.workload.cp.cp_ledger`; None where none is counted); ``peak_mem_bytes``: peak allocated during
    one step (CUDA; None on a CPU); ``trace_file``: relative to the run directory. Missing figures are None."""

    rank: int
    status: RankStatus = RankStatus.OK
    error: str = ""
    step_us: float | None = None
    compute_us: float | None = None
    comm_us: float | None = None
    overlap_us: float | None = None
    idle_us: float | None = None
    sent_bytes: float | None = None
    received_bytes: float | None = None
    ledger_bytes: int | None = None
    peak_mem_bytes: int | None = None
    trace_file: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.status, RankStatus):
            object.__setattr__(self, "status", RankStatus(self.status))

    @property
    def profiled_step_us(self) -> float | None:
        """The profiled call's step (µs) that ``compute_us``/``comm_us``/``overlap_us``/``idle_us`` divide:
        ``compute + comm − overlap + idle`` (its traced window); None without a trace. Not ``step_us``, the timed
        median of other calls."""
        parts = (self.compute_us, self.comm_us, self.overlap_us, self.idle_us)
        if any(p is None for p in parts):
            return None
        return self.compute_us + self.comm_us - self.overlap_us + self.idle_us  # type: ignore[operator]


@dataclass(frozen=True)
class CellResult:
    """One (workload, backend) cell: status, correctness, timing, memory and trace evidence."""

    cell_id: str
    workload: Workload
    backend: str
    family: str
    status: str
    reason: str = ""
    notes: tuple[str, ...] = ()
    correctness: Correctness | None = None
    timing: Timing | None = None
    graph_timing: Timing | None = None
    peak_mem_bytes: int | None = None
    peak_mem_over_inputs_bytes: int | None = None
    trace: TraceSummary | None = None
    counters: CounterSummary | None = None
    #: All N independent timing samples (``--repeat N``), each a median of many reps; ``timing`` is the
    #: first. Empty in v1/v2 files and for cells that were not timed.
    timing_repeats: tuple[Timing, ...] = ()
    #: The same for the CUDA-graph replay time (decode cells on CUDA).
    graph_timing_repeats: tuple[Timing, ...] = ()
    #: Appending workloads: the cache append's own time (new K/V written through the slot mapping), timed
    #: apart from the attention call, whose time is ``timing``; None otherwise (and in files written before).
    append_timing: Timing | None = None
    #: (query, key) pairs per query head the backend computed when it padded a variable-length call to
    #: ``B · Lq_max · Lk_max`` (None when it did not pad); ``workload.attended_pairs`` are those required.
    executed_pairs: int | None = None
    #: Context-parallel cells: one record per rank (empty otherwise, and in files written before).
    ranks: tuple[RankRecord, ...] = ()
    #: The interface the backend implements, the K/V layout its kernel read and how a caller switches to it
    #: (:class:`~profattn.interfaces.Adoption`, declared by the backend); None in files written before it was
    #: recorded (readers then use :func:`profattn.interfaces.adoption_of`).
    adoption: Adoption | None = None

    def __post_init__(self) -> None:
        """Coerce ``status`` to :class:`CellStatus`; raises ValueError for a string outside the closed set."""
        if not isinstance(self.status, CellStatus):
            object.__setattr__(self, "status", CellStatus(self.status))

    @property
    def judged_timing(self) -> Timing | None:
        """The timing this cell is ranked and judged on, over *all* its repeats (``--repeat N``): of the CUDA-graph
        replay where captured, else of the eager launches (:func:`pooled_timing`); None when not timed."""
        if self.graph_timing is not None:
            return pooled_timing(self.graph_timing, self.graph_timing_repeats)
        return pooled_timing(self.timing, self.timing_repeats) if self.timing is not None else None

    @property
    def latency_samples_us(self) -> tuple[float, ...]:
        """The independent latency samples (µs) of the figure this cell is judged on — one median per repeat,
        of the graph replay where captured, else of the eager launches; ``(latency_us,)`` for a run without
        repeats, ``()`` when not timed. ``profattn compare`` reasons with their spread."""
        reps = self.graph_timing_repeats if self.graph_timing is not None else self.timing_repeats
        if reps:
            return tuple(t.median_us for t in reps)
        t = self.graph_timing or self.timing
        return (t.median_us,) if t is not None else ()

    @property
    def latency_us(self) -> float | None:
        """Median latency of one call (µs) over all repeats (the median of the repeats' medians), or None when not
        timed: the CUDA-graph replay time where the cell was captured (decode, as serving runs it), else the
        eager-launch time."""
        t = self.judged_timing
        return t.median_us if t is not None else None

    @property
    def eager_latency_us(self) -> float | None:
        """Median latency with eager launches (µs) over all repeats, launch overhead included."""
        return pooled_timing(self.timing, self.timing_repeats).median_us if self.timing else None

    @property
    def host_us(self) -> float | None:
        """The host's time to issue one eager call (µs, median over all repeats: :attr:`Timing.host_us`); None where
        not measured (CPU runs, results schema ≤ 3)."""
        return pooled_timing(self.timing, self.timing_repeats).host_us if self.timing else None

    @property
    def tokens_per_s(self) -> float | None:
        """``B·Lq`` tokens per call over the median latency (decode: B new tokens per step)."""
        t = self.latency_us
        return self.workload.tokens_per_call / (t * 1e-6) if t else None

    @property
    def achieved_tflops(self) -> float | None:
        """Workload FLOPs (query heads, causal counted exactly) over the median latency, in TFLOP/s."""
        t = self.latency_us
        return self.workload.flops / (t * 1e-6) / 1e12 if t else None

    @property
    def achieved_gbps(self) -> float | None:
        """Requested bytes (the minimum traffic ledger) over the median latency, in GB/s (1e9 B/s)."""
        t = self.latency_us
        return self.workload.requested_bytes / (t * 1e-6) / 1e9 if t else None

    @property
    def kv_gbps(self) -> float | None:
        """K/V bytes over the median latency, GB/s: the decode bandwidth figure."""
        t = self.latency_us
        return self.workload.kv_bytes / (t * 1e-6) / 1e9 if t else None

    @property
    def damage(self) -> tuple[Damage, ...]:
        """What in this cell's own numbers disagrees (empty for a sound cell): a hand-edited or corrupted results file
        whose cell says it passed with an error above its tolerance, or a timing whose p10 lies above its p90 (or its
        median outside them). A damaged cell is never a winner (:attr:`eligible`)."""
        out = []
        c = self.correctness
        if c is not None and c.passed and not c.out_rel_err <= c.tolerance:
            out.append(Damage.PASSED_ABOVE_TOLERANCE)
        timings = [t for t in (self.timing, self.graph_timing, *self.timing_repeats, *self.graph_timing_repeats) if t]
        if any(not (t.p10_us <= t.median_us <= t.p90_us) for t in timings):
            out.append(Damage.QUANTILES_OUT_OF_ORDER)
        return tuple(out)

    @property
    def eligible(self) -> bool:
        """May win: timed, passed correctness, its own numbers agree (:attr:`damage`), and its trace does not
        contradict its backend's family — neither its eager calls' kernels nor, for a graph-timed cell, its profiled
        graph replays' (:class:`GraphReplaySummary`)."""
        return (
            self.status == CellStatus.OK
            and self.timing is not None
            and not self.damage
            and (self.trace is None or self.trace.family_ok is not False)
            and (self.trace is None or self.trace.graph is None or self.trace.graph.family_ok is not False)
        )


def _quantile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``xs`` by linear interpolation between order statistics."""
    pos = q * (len(xs) - 1)
    i = int(pos)
    return xs[i] if i + 1 >= len(xs) else xs[i] + (xs[i + 1] - xs[i]) * (pos - i)


def pooled_timing(first: Timing, repeats: tuple[Timing, ...] = ()) -> Timing:
    """One :class:`Timing` over a cell's repeats (``first`` alone without them): the median of the repeats'
    medians; a p10–p90 band that holds both the repeats' own bands (the median of their p10s and of their p90s) and
    the spread between repeats (the 10th and 90th percentiles of their medians), so two cells whose repeats
    disagree tie instead of one of them winning on a lucky first sample; the fastest rep; all reps; the median of
    the repeats' host times (None when none has one)."""
    if len(repeats) < 2:
        return first
    medians = sorted(t.median_us for t in repeats)
    mid = _quantile(medians, 0.5)
    p10 = min(_quantile(sorted(t.p10_us for t in repeats), 0.5), _quantile(medians, 0.1), mid)
    p90 = max(_quantile(sorted(t.p90_us for t in repeats), 0.5), _quantile(medians, 0.9), mid)
    hosts = sorted(t.host_us for t in repeats if t.host_us is not None)
    return Timing(mid, p10, p90, min(t.min_us for t in repeats), sum(t.reps for t in repeats), first.method,
                  _quantile(hosts, 0.5) if hosts else None)


@dataclass(frozen=True)
class Environment:
    """Where a run happened: hardware and software versions (no host or user names)."""

    device: str
    device_name: str
    num_sms: int | None
    l2_cache_bytes: int | None
    total_memory_bytes: int | None
    driver: str | None
    torch: str
    cuda: str | None
    cudnn: str | None
    triton: str | None
    python: str
    platform: str
    profattn: str
    created_utc: str
    hostname: str | None = None  #: only with ``--keep-host-info``
    user: str | None = None  #: only with ``--keep-host-info``
    #: The machine's state: logical CPUs, torch's intra-op threads, ``$OMP_NUM_THREADS`` as set (None: unset),
    #: the 1/5/15-minute load averages at the start and the end of the run (``os.getloadavg``), and on a
    #: GPU the SM and memory clocks (MHz) and temperature (°C) at the start (``nvidia-smi``), where readable.
    cpu_count: int | None = None
    torch_threads: int | None = None
    omp_num_threads: str | None = None
    load_avg_start: tuple[float, float, float] | None = None
    load_avg_end: tuple[float, float, float] | None = None
    gpu_sm_clock_mhz: int | None = None
    gpu_mem_clock_mhz: int | None = None
    gpu_temperature_c: int | None = None
    #: Installed versions of the optional kernel packages (their distributions' metadata; None: not installed):
    #: ``flashinfer-python`` and the cuDNN frontend (``nvidia-cudnn-frontend``, through which FlashInfer runs cuDNN).
    flashinfer: str | None = None
    cudnn_frontend: str | None = None


@dataclass(frozen=True)
class Ceilings:
    """Rates measured on the same device in the same run (the roofline's roof).

    ``copy_gbps``: device-to-device copy, bytes read + written per second / 1e9. ``matmul_tflops``:
    an ``n×n×n`` GEMM in ``dtype``, 2n³ FLOPs per product.
    """

    copy_gbps: float
    copy_bytes: int
    matmul_tflops: float
    matmul_n: int
    dtype: str
    method: str
    #: Read-only streaming bandwidth (bytes read per second / 1e9): the roof for decode, which reads its K/V
    #: and writes almost nothing. The fastest of :data:`profattn.harness.read_stream.DEFAULT_CONFIGS`
    #: over ``read_bytes``; ``read_method`` names the variant. None in runs made before it was measured.
    read_gbps: float | None = None
    read_bytes: int | None = None
    read_method: str = ""

    @property
    def bandwidth_gbps(self) -> float:
        """The memory roof every bandwidth fraction uses: the read-only stream where measured (decode reads its
        K/V and writes almost nothing; a copy's read + write rate sits below what a reader reaches), else the
        copy bandwidth (runs made before the read ceiling existed)."""
        return self.read_gbps if self.read_gbps else self.copy_gbps

    @property
    def bandwidth_kind(self) -> str:
        """``"read"`` or ``"copy"``: which measurement :attr:`bandwidth_gbps` is."""
        return "read" if self.read_gbps else "copy"


@dataclass(frozen=True)
class ABRun:
    """An A/B run (``profattn compare --ab BASE HEAD``): two backends timed alternately in one process. After each
    cell's first sample (its measuring pass), ``rounds`` timing rounds go over the run's workloads, each round timing
    ``base`` then ``head`` (odd rounds) or ``head`` then ``base`` (even rounds) back to back; sample ``i`` (``i ≥ 1``) of
    one backend's cell is paired with sample ``i`` of the other's. A round either side of which failed is dropped
    from both (noted on the cells)."""

    base: str
    head: str
    rounds: int


@dataclass(frozen=True)
class RunResult:
    """A whole run: environment, preset, measured ceilings and every cell."""

    environment: Environment
    preset: str
    preset_description: str
    cells: tuple[CellResult, ...]
    ceilings: Ceilings | None = None
    schema_version: int = SCHEMA_VERSION
    seed: int = 0
    counters_info: CountersInfo = CountersInfo(CountersStatus.NOT_REQUESTED)
    repeat: int = 1  #: timing samples per cell asked for (``--repeat``); see :meth:`samples_taken`
    ab: ABRun | None = None  #: an A/B run's pairing (None: an ordinary run)
    #: The ``module:object`` specs of the run's ``--backend`` plugins (``profile --resume`` loads them again; installed
    #: entry points load themselves); empty in files written before it was recorded.
    plugins: tuple[str, ...] = ()

    def samples_taken(self) -> tuple[int, int] | None:
        """(fewest, most) timing samples any timed cell holds — what was measured, which is less than
        :attr:`repeat` when the run was interrupted during its repeats; None when no cell was timed."""
        counts = [len(c.latency_samples_us) for c in self.cells if c.latency_samples_us]
        return (min(counts), max(counts)) if counts else None

    def samples_text(self) -> str:
        """``"5"``, ``"3–5 (of 5 asked; interrupted?)"`` or ``"none"``: timing samples per cell, for reports."""
        taken = self.samples_taken()
        if taken is None:
            return "none"
        lo, hi = taken
        span = str(lo) if lo == hi else f"{lo}–{hi}"
        return span if lo == hi == self.repeat else f"{span} (of {self.repeat} asked; the run stopped early)"

    def with_cell(self, cell: CellResult) -> "RunResult":
        """A copy in which the cell with ``cell.cell_id`` is replaced (or appended)."""
        cells = [c for c in self.cells if c.cell_id != cell.cell_id]
        if len(cells) == len(self.cells):
            return replace(self, cells=(*self.cells, cell))
        return replace(self, cells=tuple(cell if c.cell_id == cell.cell_id else c for c in self.cells))

    def to_pandas(self):
        """The run as a ``pandas.DataFrame``, one row per cell in run order, columns :data:`CELL_COLUMNS`
        (see :func:`cell_row` for each column's meaning and unit)."""
        import pandas as pd

        frame = pd.DataFrame([cell_row(c) for c in self.cells], columns=list(CELL_COLUMNS))
        return frame.astype({c: "Int64" for c in CELL_INT_COLUMNS})


#: Columns of :meth:`RunResult.to_pandas`, in order. Units in the names: ``_us`` µs, ``_bytes`` bytes,
#: ``_gbps`` GB/s (1e9 B/s), ``_tflops`` TFLOP/s (1e12 FLOP/s), ``_per_s`` per second.
CELL_COLUMNS: tuple[str, ...] = (
    "cell_id", "tag", "phase", "batch", "q_len", "kv_len", "num_q_heads", "num_kv_heads", "head_dim", "dtype",
    "mask", "kv_layout", "page_size", "kv_len_dist", "kv_len_seed", "shared_prefix_len",
    "backend", "family", "status", "error",
    "latency_us", "eager_median_us", "graph_median_us", "gpu_time_us",
    "tokens_per_s", "achieved_gbps", "achieved_tflops", "kv_gbps", "flops", "requested_bytes", "kv_bytes",
    "peak_mem_bytes", "out_rel_err", "correct",
    "kernels_per_call", "dominant_kernel", "dominant_share", "dominant_grid", "dominant_block",
    "dominant_registers_per_thread", "dominant_shared_mem_bytes", "dominant_ctas", "dominant_ctas_per_sm",
    "dram_bytes",
)
#: Integer columns of :meth:`RunResult.to_pandas` (nullable ``Int64``: ``<NA>`` when unknown).
CELL_INT_COLUMNS: tuple[str, ...] = (
    "batch", "q_len", "kv_len", "num_q_heads", "num_kv_heads", "head_dim", "page_size", "kv_len_seed",
    "shared_prefix_len", "flops", "requested_bytes", "kv_bytes", "peak_mem_bytes", "dominant_registers_per_thread",
    "dominant_shared_mem_bytes", "dominant_ctas",
)


def dominant_launch(cell: CellResult) -> KernelLaunch | None:
    """The :class:`KernelLaunch` of the cell's dominant kernel (most GPU time per call), or None without a
    trace or a dominant kernel."""
    t = cell.trace
    if t is None or t.dominant_kernel is None:
        return None
    return next((k for k in t.kernels if k.name == t.dominant_kernel), None)


def cell_row(cell: CellResult) -> dict[str, Any]:
    """One cell as a flat dict keyed by :data:`CELL_COLUMNS` (plain Python values, None when unknown).

    Workload fields as in ``results.json`` (enums as their text); ``status`` the cell outcome;
    ``error`` the reason of an ``error`` or ``unsupported`` cell (else None). ``latency_us`` the
    figure the cell is judged on (graph replay where captured, else eager); ``eager_median_us`` and
    ``graph_median_us`` the two medians; ``gpu_time_us`` summed kernel time per call from the trace.
    ``tokens_per_s``, ``achieved_gbps`` (requested bytes of the workload's byte ledger / latency),
    ``achieved_tflops`` (the FLOP ledger / latency) and ``kv_gbps`` (K/V bytes / latency) from
    ``latency_us``. ``flops``, ``requested_bytes``, ``kv_bytes``: the workload's ledgers for one call.
    ``dominant_*``: the dominant kernel's name, share of the cell's GPU time (0..1), ``grid``/``block``
    ``(x, y, z)`` tuples, registers per thread, shared memory (bytes), CTAs per launch and CTAs per SM
    (Kineto's ``blocks per SM``). ``dram_bytes``: DRAM read + write from Nsight Compute, None without
    counters.
    """
    w = cell.workload
    t = cell.trace
    k = dominant_launch(cell)
    status = getattr(cell.status, "value", cell.status)
    return {
        "cell_id": cell.cell_id,
        "tag": w.tag,
        "phase": w.phase.value,
        "batch": w.batch,
        "q_len": w.q_len,
        "kv_len": w.kv_len,
        "num_q_heads": w.num_q_heads,
        "num_kv_heads": w.num_kv_heads,
        "head_dim": w.head_dim,
        "dtype": w.dtype,
        "mask": w.mask.value,
        "kv_layout": w.kv_layout.value,
        "page_size": w.page_size,
        "kv_len_dist": w.kv_len_dist,
        "kv_len_seed": w.kv_len_seed,
        "shared_prefix_len": w.shared_prefix_len,
        "backend": cell.backend,
        "family": cell.family,
        "status": status,
        "error": (cell.reason or None) if status in ("error", "unsupported") else None,
        "latency_us": cell.latency_us,
        "eager_median_us": cell.eager_latency_us,
        "graph_median_us": cell.latency_us if cell.graph_timing else None,
        "gpu_time_us": t.gpu_time_per_call_us if t else None,
        "tokens_per_s": cell.tokens_per_s,
        "achieved_gbps": cell.achieved_gbps,
        "achieved_tflops": cell.achieved_tflops,
        "kv_gbps": cell.kv_gbps,
        "flops": w.flops,
        "requested_bytes": w.requested_bytes,
        "kv_bytes": w.kv_bytes,
        "peak_mem_bytes": cell.peak_mem_bytes,
        "out_rel_err": cell.correctness.out_rel_err if cell.correctness else None,
        "correct": cell.correctness.passed if cell.correctness else None,
        "kernels_per_call": t.kernels_per_call if t else None,
        "dominant_kernel": t.dominant_kernel if t else None,
        "dominant_share": t.dominant_share if t else None,
        "dominant_grid": k.grid if k else None,
        "dominant_block": k.block if k else None,
        "dominant_registers_per_thread": k.registers_per_thread if k else None,
        "dominant_shared_mem_bytes": k.shared_mem_bytes if k else None,
        "dominant_ctas": k.ctas if k else None,
        "dominant_ctas_per_sm": k.blocks_per_sm if k else None,
        "dram_bytes": cell.counters.dram_bytes if cell.counters else None,
    }


def cells_by_workload(cells: Iterable[CellResult]) -> dict[str, list[CellResult]]:
    """Group cells by workload tag, preserving order."""
    out: dict[str, list[CellResult]] = {}
    for c in cells:
        out.setdefault(c.workload.tag, []).append(c)
    return out
