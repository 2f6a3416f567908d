"""The time of a simulated serving step: its attention calls per backend (behind one interface,
:class:`StepCostSource`) and the rest of the step (projections, MLP, logits) as a declared estimate.

Torch-free. A step's attention is one call per layer for each *part* (:class:`CallPart`): the decoding sequences
(one query each) and the prefill chunks (a prompt's next tokens over its cached prefix). A part of ``k`` steps
travels as :class:`CallSums`: per step, sums over the call's sequences of their own physics — sequences, query
rows, K/V token slots read, causal (query, key) pairs, 128-row query tiles — plus its longest sequence; never a
mean length. :func:`call_physics` turns sums into the quantities a kernel's time follows: unique K/V bytes read,
FLOPs, work items, and the roofline time at the run's measured ceilings.

:class:`MeasuredCells` is the source built from a results store's measured cells (:class:`profattn.store.Measurement`):
*interpolation, not a fitted model*. Each backend's cells of a part become points (work items, roofline time →
measured latency); points with equal work items form a level; between levels the log latency is interpolated
linearly in log work items, along a level linearly in log roofline time; beyond a level's largest cell the latency
grows in proportion to the work (the largest cell's efficiency held), below its smallest it falls along the line to
the backend's small-call floor at zero work (the intercept of its two smallest-work cells of that phase, never under
its fastest measured call in any phase nor over its fastest of the phase: :func:`small_call_floor`); a call is never faster than its longest
sequence alone. Every estimate says where it extrapolates (:class:`Extrapolation`) and carries an uncertainty: the
cells' own p10–p90 spread combined with the interpolation's error on each cell left out (:class:`Validation`).

A per-backend cost model fitted on the same cells plugs in behind :class:`StepCostSource` (its ``attention_us``
evaluated on :class:`CallSums`, or on :meth:`CallSums.sequences` where it wants each sequence's lengths).
"""

from __future__ import annotations

import bisect
import enum
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from profattn.errors import ProfattnError
from profattn.results import Ceilings
from profattn.store.records import Measurement
from profattn.workload import DTYPE_BYTES, Phase, Workload
from profattn.workload.contract import KV_DTYPE_BYTES
from profattn.workload.models import Gemm, ModelConfig

__all__ = [
    "ROWS_PER_TILE", "AttentionEstimate", "AttentionShape", "CallPart", "CallSums", "CellPoint", "Extrapolation",
    "FloorRule", "MeasuredCells", "ONE_LAUNCH_MIXED", "Provenance", "RestOfStep", "StepCostError", "StepCostSource", "Validation",
    "call_physics", "causal_pairs_array", "median_ceilings", "small_call_floor",
]

#: Single calls remembered per source (a prompt's first chunk recurs with every request of its length).
_MEMO_CALLS = 1 << 17
#: Calls priced one by one in plain floats (fewer numpy calls than a vector's fixed cost); more go as arrays.
_SCALAR_CALLS = 3
#: Prefill backends that take a mixed step's decode rows and prefill chunks in one launch (our Triton paged prefill
#: kernel: one varlen grid over every sequence, a decode row a sequence of one query). A mixed step on them is one
#: :attr:`CallPart.MIXED` call; on any other pairing it is two calls, the decode and the prefill part, times added.
ONE_LAUNCH_MIXED: frozenset[str] = frozenset({"triton-paged-prefill"})
#: Query rows per work item of a prefill call: a 128-row query tile of one KV head's group (our prefill kernel's
#: tile; FlashAttention and FlashInfer use 64–128). A decode sequence (≤ 128 query heads per KV head) is one item.
ROWS_PER_TILE = 128


class StepCostError(ProfattnError):
    """A backend the store cannot price for this simulation (never measured in that phase, KV dtype or dtype);
    names the backend and what is missing; exit code 2."""


class CallPart(str, enum.Enum):
    """The part of a step one attention call serves: the decoding sequences or the prefill chunks."""

    DECODE = "decode"
    PREFILL = "prefill"
    #: a mixed step's decode rows and prefill chunks in one launch (:data:`ONE_LAUNCH_MIXED`), priced from the
    #: backend's prefill and mixed cells together
    MIXED = "mixed"

    def __str__(self) -> str:
        return self.value


class Extrapolation(enum.IntFlag):
    """Where an estimate leaves its measured cells (bits; ``NONE`` inside them)."""

    NONE = 0
    #: more work than the backend's largest cell at that parallelism (time ∝ work at that cell's efficiency)
    ABOVE = 1
    #: less work than its smallest cell at that parallelism (on the line from the backend's small-call floor at zero
    #: work to that cell: :func:`small_call_floor`)
    BELOW = 2
    #: more or fewer work items (sequences × KV heads, query tiles) than any cell of the backend
    PARALLELISM = 4
    #: priced from cells of another KV dtype (an FP8 cache: the bf16 interpolation × the backend's measured FP8
    #: factor for decode; its prefill as the bf16 call)
    KV_DTYPE = 8


class FloorRule(str, enum.Enum):
    """Where a backend's small-call floor (its price at zero work, :func:`small_call_floor`) came from."""

    #: the zero-work intercept of the line through its two smallest-work cells of the part
    SMALL_CELLS = "small cells"
    #: that intercept lay under the backend's fastest measured call in any phase: held there
    LAUNCH = "launch floor"
    #: no two small cells to draw the line through (or it did not fall): its fastest cell of the part
    FASTEST = "fastest cell"

    def __str__(self) -> str:
        return self.value


#: Knots added below each level's smallest cell (one per halving of the roofline time: down to 2^-24 of it)
_BELOW_KNOTS = 24
_BELOW_STEP = math.log(2.0)


def small_call_floor(smallest: Sequence[tuple[float, ...]], fastest_us: float,
                     launch_us: float | None = None) -> tuple[float, FloorRule]:
    """The time of a call with no work on one backend's part, ``(µs, rule)``, from its measured small cells.

    ``smallest``: per work-item level, ``(roof_us, latency_us)`` of its smallest cell, followed by its second's
    where it has one (latencies made non-decreasing along the level); ``fastest_us``: the part's fastest cell;
    ``launch_us``: the backend's fastest measured call in any phase (None: none known). The level whose smallest
    cell has the least roofline time gives the line ``t = t0 + s · roof`` through its two smallest cells (a fixed
    launch-and-tail cost plus time in proportion to work); ``t0`` is the floor, held at most at ``fastest_us`` (no
    call is priced above the fastest measured one for want of work) and at least at ``launch_us`` (rule
    :attr:`FloorRule.LAUNCH`). Without a second cell at that level, or with a line that does not rise or meets
    zero work at ≤ 0 µs, the floor is ``fastest_us`` (:attr:`FloorRule.FASTEST`, today's price kept).

    Below a level's smallest cell ``(r1, t1)`` a call of roofline time ``r`` is priced ``t0 + (t1 − t0) · r / r1``
    (:class:`_Surface`), flagged :attr:`Extrapolation.BELOW`. Raises nothing; ``smallest`` must not be empty.
    """
    first = min(smallest, key=lambda c: c[0])
    if len(first) < 4 or first[2] <= first[0] or first[3] <= first[1]:
        return fastest_us, FloorRule.FASTEST
    r1, t1, r2, t2 = first[:4]
    t0 = t1 - (t2 - t1) / (r2 - r1) * r1
    if t0 <= 0.0:
        return fastest_us, FloorRule.FASTEST
    if t0 >= fastest_us:
        return fastest_us, FloorRule.FASTEST
    if launch_us is not None and t0 < launch_us:
        return min(launch_us, fastest_us), FloorRule.LAUNCH
    return t0, FloorRule.SMALL_CELLS


@dataclass(frozen=True)
class AttentionShape:
    """The attention call's fixed shape on one GPU: query and KV heads, head_dim, the compute dtype and the cache's
    storage dtype (None: the compute dtype; ``float8_e4m3fn``: one byte per element)."""

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "bfloat16"
    kv_dtype: str | None = None

    @classmethod
    def of_model(cls, model: ModelConfig, kv_dtype: str | None = None) -> "AttentionShape":
        """The per-GPU attention shape of ``model`` (heads divided by its tensor-parallel size)."""
        return cls(model.q_heads_per_gpu, model.kv_heads_per_gpu, model.head_dim, model.dtype, kv_dtype)

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.num_q_heads // self.num_kv_heads

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def kv_itemsize(self) -> int:
        return KV_DTYPE_BYTES[self.kv_dtype] if self.kv_dtype else self.itemsize


def causal_pairs_array(q: np.ndarray, kv: np.ndarray) -> np.ndarray:
    """(query, key) pairs a bottom-right causal mask keeps per head, element-wise for ``q ≤ kv``:
    ``q · kv − q (q − 1) / 2`` (:func:`profattn.workload.causal_pairs` without a window; float64 arrays)."""
    return q * kv - q * (q - 1.0) * 0.5


def _tiles(q: np.ndarray, group: int) -> np.ndarray:
    return np.ceil(q * group / ROWS_PER_TILE)


Sums = "np.ndarray | float"


@dataclass(slots=True)
class CallSums:
    """``k`` attention calls of one part (one per step), each as sums over its sequences' own lengths (treated as
    immutable).

    Each field is float64 ``[k]``, or one float when every call has the same value (it broadcasts): ``num_seqs``;
    ``q_tokens`` = Σ q_len; ``kv_tokens`` = Σ kv_len (K/V token slots read: each sequence's cached prefix plus its
    new tokens); ``pairs`` = Σ causal pairs (bottom-right); ``tiles`` = Σ ⌈q_len · group / 128⌉ (work items per KV
    head, :data:`ROWS_PER_TILE`); ``top_q`` / ``top_kv``: the sequence with the most pairs (the longest). ``k``: the
    number of calls; ``group``: query heads per KV head the tiles were counted for. ``sequences``: optional,
    ``j → (q_lens, kv_lens)`` (int64 arrays) of call ``j`` for a source that wants every sequence's lengths (the
    simulation sets it; valid while the source prices the calls, as the scheduler moves on after). ``run``: the calls are
    consecutive decode steps of one unchanged set of sequences (``num_seqs``, ``q_tokens``, ``tiles``, ``top_q``
    constant floats; ``kv_tokens`` and ``top_kv`` growing by ``num_seqs`` and 1 per step), which a source may
    exploit (:meth:`decode_run`). ``shared_kv``: of ``kv_tokens``, the K/V token slots read from a page another
    sequence of the call also reads (prefix caching's shared blocks, each extra reader counted; 0: none shared).
    """

    k: int
    num_seqs: Sums
    q_tokens: Sums
    kv_tokens: Sums
    pairs: Sums
    tiles: Sums
    top_q: Sums
    top_kv: Sums
    group: int
    sequences: object = None
    run: bool = False
    shared_kv: Sums = 0.0

    def __len__(self) -> int:
        return self.k

    @classmethod
    def of(cls, q_lens: Sequence[int] | np.ndarray, kv_lens: Sequence[int] | np.ndarray, group: int) -> "CallSums":
        """One call (``k = 1``, float fields) over sequences with these ``q_lens`` and ``kv_lens`` (each ``q ≤ kv``).

        Raises:
            ValueError: no sequence, lengths of different counts, a length < 1 or ``q > kv``.
        """
        q = np.asarray(q_lens, dtype=np.float64)
        kv = np.asarray(kv_lens, dtype=np.float64)
        if q.size == 0 or q.shape != kv.shape or (q < 1).any() or (q > kv).any():
            raise ValueError("CallSums.of needs ≥ 1 sequence with 1 ≤ q_len ≤ kv_len each")
        p = causal_pairs_array(q, kv)
        top = int(np.argmax(p))
        return cls(1, float(q.size), float(q.sum()), float(kv.sum()), float(p.sum()), float(_tiles(q, group).sum()),
                   float(q[top]), float(kv[top]), group, lambda j: (q.astype(np.int64), kv.astype(np.int64)))

    @classmethod
    def decode(cls, num_seqs: np.ndarray, kv_tokens: np.ndarray, top_kv: np.ndarray, group: int,
               sequences: object = None, shared_kv: np.ndarray | float = 0.0) -> "CallSums":
        """``k`` decode calls: ``num_seqs`` sequences of one query each over ``kv_tokens`` K/V slots in all, the
        longest over ``top_kv`` (arrays ``[k]``; pairs = kv slots; one tile per sequence up to 128 query heads per
        KV head), ``shared_kv`` of the slots on pages another of them reads too."""
        n = np.asarray(num_seqs, dtype=np.float64)
        kv = np.asarray(kv_tokens, dtype=np.float64)
        sh = np.asarray(shared_kv, dtype=np.float64) if isinstance(shared_kv, np.ndarray) else float(shared_kv)
        return cls(int(n.shape[0]), n, n, kv, kv, n * math.ceil(group / ROWS_PER_TILE), 1.0,
                   np.asarray(top_kv, dtype=np.float64), group, sequences, shared_kv=sh)

    @classmethod
    def decode_run(cls, num_seqs: int, kv_tokens: int, top_kv: int, steps: int, group: int,
                   sequences: object = None, shared_kv: int = 0) -> "CallSums":
        """``steps`` consecutive decode steps of ``num_seqs`` sequences over ``kv_tokens`` K/V tokens in all at the
        first (the longest over ``top_kv``), each step every sequence one token longer (:attr:`run`); ``shared_kv``
        of the slots on shared pages, the same every step (new tokens go to each sequence's own pages)."""
        kv = np.arange(kv_tokens, kv_tokens + num_seqs * steps, num_seqs, dtype=np.float64)
        top = np.arange(top_kv, top_kv + steps, dtype=np.float64)
        n = float(num_seqs)
        return cls(steps, n, n, kv, kv, n * math.ceil(group / ROWS_PER_TILE), 1.0, top, group, sequences, True,
                   float(shared_kv))

    def column(self, name: str) -> np.ndarray:
        """Field ``name`` as float64 ``[k]`` (a float broadcast)."""
        v = getattr(self, name)
        return v if isinstance(v, np.ndarray) else np.full(self.k, float(v))

    def select(self, mask: np.ndarray) -> "CallSums":
        """The calls where the boolean ``mask`` ``[k]`` holds (``sequences`` and ``run`` dropped)."""
        pick = lambda v: v[mask] if isinstance(v, np.ndarray) else v  # noqa: E731
        return CallSums(int(np.count_nonzero(mask)), *(pick(getattr(self, f)) for f in _SUM_FIELDS), self.group,
                        shared_kv=pick(self.shared_kv))

    def joined(self, other: "CallSums") -> "CallSums":
        """One call per step over this call's sequences and ``other``'s (equal ``k`` and group): the sums added,
        the longest the one with more pairs (``sequences`` and ``run`` dropped).

        Raises:
            ValueError: different ``k`` or group.
        """
        if other.k != self.k or other.group != self.group:
            raise ValueError("CallSums.joined needs calls of equal k and group")
        mine = causal_pairs_array(self.top_q, self.top_kv) >= causal_pairs_array(other.top_q, other.top_kv)
        pick = lambda a, b: np.where(mine, a, b) if isinstance(mine, np.ndarray) else (a if mine else b)  # noqa: E731
        return CallSums(self.k, *(getattr(self, f) + getattr(other, f) for f in _SUM_FIELDS[:5]),
                        pick(self.top_q, other.top_q), pick(self.top_kv, other.top_kv), self.group,
                        shared_kv=self.shared_kv + other.shared_kv)

    def longest(self) -> "CallSums":
        """Each call's longest sequence alone, as calls of one sequence."""
        return CallSums(self.k, 1.0, self.top_q, self.top_kv, causal_pairs_array(self.top_q, self.top_kv),
                        _tiles(self.top_q, self.group), self.top_q, self.top_kv, self.group)


_SUM_FIELDS = ("num_seqs", "q_tokens", "kv_tokens", "pairs", "tiles", "top_q", "top_kv")


def call_physics(calls: CallSums, shape: AttentionShape, ceilings: Ceilings) -> tuple[Sums, Sums, Sums, Sums]:
    """``(kv_bytes, flops, items, roof_us)`` of one layer's calls (float64 ``[k]``, floats where the sums are).

    ``kv_bytes`` = 2 (K and V) · kv_tokens · Hkv · d · kv itemsize (unique K/V bytes read, as
    :attr:`profattn.workload.Workload.kv_bytes` counts them); ``flops`` = 4 · Hq · d · pairs (the forward rule of
    :attr:`Workload.forward_flops`); ``items`` = Hkv · tiles; ``roof_us`` = max(bytes / read ceiling, flops / GEMM
    ceiling) with bytes = kv_bytes + Q read and O written (2 · q_tokens · Hq · d · itemsize), the ceilings in GB/s
    (1e9) and TFLOP/s (:func:`_coefficients`).
    """
    a, b, c = _coefficients(shape, ceilings)
    roof = np.maximum(a * calls.kv_tokens + b * calls.q_tokens, c * calls.pairs)
    kv_bytes = 2.0 * shape.num_kv_heads * shape.head_dim * shape.kv_itemsize * calls.kv_tokens
    return kv_bytes, 4.0 * shape.num_q_heads * shape.head_dim * calls.pairs, shape.num_kv_heads * calls.tiles, roof


@dataclass(frozen=True)
class AttentionEstimate:
    """One layer's attention time of ``k`` calls: ``us`` (float64 ``[k]``, µs), where each left the measured cells
    (``extrapolation``: int8 ``[k]`` of :class:`Extrapolation` bits, or one int for all ``k``) and the e-fold
    half-width ``uncertainty`` of its ``lo_us``–``hi_us`` band."""

    us: np.ndarray
    extrapolation: np.ndarray | int
    uncertainty: float

    def flags(self) -> np.ndarray:
        """:attr:`extrapolation` as int8 ``[k]``."""
        x = self.extrapolation
        return x if isinstance(x, np.ndarray) else np.full(self.us.shape, x, dtype=np.int8)

    @property
    def lo_us(self) -> np.ndarray:
        return self.us * math.exp(-self.uncertainty)

    @property
    def hi_us(self) -> np.ndarray:
        return self.us * math.exp(self.uncertainty)


@dataclass(frozen=True)
class Validation:
    """The interpolation judged on cells it did not see: each pooled cell left out in turn and predicted from the
    rest. ``held_out``: cells predicted; ``median_error`` / ``p90_error`` / ``worst_error``: |predicted / measured − 1|;
    ``worst``: the workload tag of the worst one (None without any)."""

    held_out: int
    median_error: float | None
    p90_error: float | None
    worst_error: float | None
    worst: str | None


@dataclass(frozen=True)
class Provenance:
    """What a source priced a backend's part from: ``source`` (its name), ``cells`` and ``runs`` used, their work
    items and roofline-time ranges (``items``, ``roof_us``: (min, max)), the small-call floor (µs; ``floor_rule``: where
    it came from, :func:`small_call_floor`), the relative
    uncertainty of an estimate (``uncertainty``: the e-fold half-width of ``lo``–``hi``), its :class:`Validation`,
    the KV dtype of the cells and, for an FP8 cache priced from bf16 cells, the FP8 factor and the cells behind it;
    for decode, ``shared_saving`` (:meth:`MeasuredCells.shared_saving`: the share of a read's cost a page shared with
    another sequence of the call saves; None: no shared-prefix cell, shared pages priced as unshared) and the
    ``shared_cells`` behind it."""

    source: str
    backend: str
    part: CallPart
    cells: int
    runs: tuple[str, ...]
    items: tuple[float, float]
    roof_us: tuple[float, float]
    floor_us: float
    uncertainty: float
    validation: Validation
    kv_dtype: str | None = None
    fp8_factor: float | None = None
    fp8_cells: int = 0
    notes: tuple[str, ...] = ()
    floor_rule: FloorRule = FloorRule.FASTEST
    shared_saving: float | None = None
    shared_cells: int = 0


class StepCostSource(Protocol):
    """Where a simulation gets one layer's attention time of a step's calls, per backend.

    ``attention_us(backend, part, calls)`` → :class:`AttentionEstimate` for every call in ``calls`` (vectorised:
    ``k`` steps at once); raises :class:`StepCostError` for a backend it cannot price in that part.
    ``provenance(backend, part)`` → :class:`Provenance` (what the numbers rest on, for the report).
    """

    name: str

    def attention_us(self, backend: str, part: CallPart, calls: CallSums) -> AttentionEstimate: ...

    def provenance(self, backend: str, part: CallPart) -> Provenance: ...


# ---- measured cells ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CellPoint:
    """One measured cell as a point of the interpolation: its backend, part, ``items`` and ``roof_us``
    (:func:`call_physics` of the cell's own workload at the simulation's ceilings), judged ``latency_us`` and the
    log half-width of its p10–p90 (``spread``), plus where it came from."""

    backend: str
    part: CallPart
    items: float
    roof_us: float
    latency_us: float
    spread: float
    kv_dtype: str | None
    run_id: str
    tag: str


@dataclass(frozen=True)
class _Curve:
    """The inverse-efficiency curve at one work-item count: log(latency / roofline time) at knots ``x`` (log roof),
    held constant past the ends (numpy and plain-list copies), the parallelism flag and the log-roof range measured
    at its levels (``lo``, ``hi``)."""

    x: np.ndarray
    e: np.ndarray
    xs: list[float]
    es: list[float]
    par: int
    lo: float
    hi: float


class _Surface:
    """Log latency over (log work items, log roofline time) through one backend's pooled points of one part (module
    docstring). Along a level the log of latency / roofline time (the inverse efficiency) is piecewise linear in
    log roofline time and held constant past the level's first and last cells — time in proportion to work there;
    between levels it is blended linearly in log items (a piecewise-linear curve again, on the union of both
    levels' knots); past the first and last level it is the nearest level's. Along a level the latency is made
    non-decreasing in work (a cell that did more work faster than a smaller one is raised to it: more work never
    takes less time), so it is monotone in work at any item count. Below a level's smallest cell the latency follows
    the line from the small-call floor at zero work to that cell (:func:`small_call_floor`; the launch floor: the
    fastest of these points and ``other_us``, the backend's fastest call in its other phases), and the floor bounds it.

    Two evaluators read the same curves: :meth:`scalar` (one call, plain floats) and :meth:`log_time` /
    :meth:`sorted_run` (many calls, numpy); tests hold them equal."""

    def __init__(self, points: Sequence[CellPoint], other_us: float | None = None) -> None:
        pooled: dict[tuple[float, float], list[CellPoint]] = {}
        for p in points:
            pooled.setdefault((p.items, round(math.log(p.roof_us), 6)), []).append(p)
        self.points = [(k[0], math.log(ps[0].roof_us), math.log(statistics.median(q.latency_us for q in ps)),
                        statistics.median(q.spread for q in ps), ps) for k, ps in sorted(pooled.items())]
        self.fastest_log = min(lt for _, _, lt, _, _ in self.points)
        self.levels = sorted({it for it, *_ in self.points})
        self.level_logs = [math.log(it) for it in self.levels]
        measured: list[tuple[np.ndarray, np.ndarray]] = []
        for it in self.levels:
            pts = sorted((lr, lt) for i, lr, lt, _, _ in self.points if i == it)
            xr = np.array([p[0] for p in pts])
            lt = np.maximum.accumulate(np.array([p[1] for p in pts]))
            measured.append((xr, lt))
        self.floor_us, self.floor_from = small_call_floor(
            [(math.exp(xr[0]), math.exp(lt[0])) + ((math.exp(xr[1]), math.exp(lt[1])) if len(xr) > 1 else ())
             for xr, lt in measured], math.exp(self.fastest_log),
            min(math.exp(self.fastest_log), other_us) if other_us is not None else math.exp(self.fastest_log))
        self.floor_log = math.log(self.floor_us)
        #: per level: knots (log roof, inverse efficiency), below the measured ones the line from the floor at zero
        #: work to the level's smallest cell (:func:`small_call_floor`), and the measured log-roof range
        self.knots: list[tuple[np.ndarray, np.ndarray]] = []
        self.measured_range: list[tuple[float, float]] = []
        for xr, lt in measured:
            r1, t1 = math.exp(xr[0]), math.exp(lt[0])
            xs = xr[0] - _BELOW_STEP * np.arange(_BELOW_KNOTS, 0, -1)
            rs = np.exp(xs)
            ext = np.log(self.floor_us + (t1 - self.floor_us) * rs / r1) - xs
            self.knots.append((np.concatenate([xs, xr]), np.concatenate([ext, lt - xr])))
            self.measured_range.append((float(xr[0]), float(xr[-1])))
        self._curves: dict[float, _Curve] = {}

    def curve(self, items: float) -> _Curve:
        """The :class:`_Curve` at ``items`` work items (cached per value)."""
        got = self._curves.get(items)
        if got is not None:
            return got
        li = math.log(items)
        ls = self.level_logs
        n = len(ls) - 1
        if li <= ls[0] + 1e-9:
            a = b = 0
            w, par = 0.0, int(Extrapolation.PARALLELISM) if li < ls[0] - 1e-9 else 0
        elif li >= ls[n] - 1e-9:
            a = b = n
            w, par = 0.0, int(Extrapolation.PARALLELISM) if li > ls[n] + 1e-9 else 0
        else:
            b = bisect.bisect_right(ls, li)
            a = b - 1
            w, par = (li - ls[a]) / (ls[b] - ls[a]), 0
        (xa, ea), (xb, eb) = self.knots[a], self.knots[b]
        if w:
            x = np.union1d(xa, xb)
            e = (1.0 - w) * np.interp(x, xa, ea) + w * np.interp(x, xb, eb)
        else:
            x, e = xa, ea
        (loa, hia), (lob, hib) = self.measured_range[a], self.measured_range[b]
        got = _Curve(x, e, x.tolist(), e.tolist(), par, min(loa, lob), max(hia, hib))
        self._curves[items] = got
        return got

    def scalar(self, items: float, roof_us: float) -> tuple[float, int]:
        """Log latency (µs) and :class:`Extrapolation` bits of one call."""
        cv = self.curve(items)
        lr = math.log(roof_us)
        lt = lr + _interp(lr, cv.xs, cv.es)
        if lt < self.floor_log:
            lt = self.floor_log
        return lt, cv.par | (int(Extrapolation.ABOVE) if lr > cv.hi else 0) | (int(Extrapolation.BELOW) if lr < cv.lo else 0)

    def log_time(self, items: np.ndarray | float, log_roof: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log latency (µs) and :class:`Extrapolation` bits of many calls: float64 / int8 ``[k]`` (``items`` one
        float for all, or one per call)."""
        if not isinstance(items, np.ndarray):
            return self._at(float(items), log_roof)
        first = float(items[0])
        if first == items[-1] and (items == first).all():
            return self._at(first, log_roof)
        lt = np.empty(log_roof.shape)
        flags = np.empty(log_roof.shape, dtype=np.int8)
        uniq, inv = np.unique(items, return_inverse=True)
        for i, it in enumerate(uniq):
            m = inv == i
            lt[m], flags[m] = self._at(float(it), log_roof[m])
        return lt, flags

    def _flags(self, cv: _Curve, lr: np.ndarray) -> np.ndarray:
        return ((lr > cv.hi) * int(Extrapolation.ABOVE) + (lr < cv.lo) * int(Extrapolation.BELOW) + cv.par).astype(np.int8)

    def sorted_run(self, items: float, lr: np.ndarray) -> tuple[np.ndarray, np.ndarray | int]:
        """:meth:`log_time` at one ``items`` for non-decreasing ``lr`` (a decode run): the latency is monotone in
        work, so the floor and the flags are decided at the two ends (the flags one int when all are equal)."""
        cv = self.curve(items)
        e = np.interp(lr, cv.x, cv.e)
        e += lr
        if e[0] < self.floor_log:
            np.maximum(e, self.floor_log, out=e)
        if lr[-1] <= cv.hi and lr[0] >= cv.lo:
            return e, cv.par
        return e, self._flags(cv, lr)

    def _at(self, items: float, lr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cv = self.curve(items)
        e = np.interp(lr, cv.x, cv.e)
        e += lr
        return np.maximum(e, self.floor_log, out=e), self._flags(cv, lr)


def _interp(x: float, xs: list[float], ys: list[float]) -> float:
    """``np.interp(x, xs, ys)`` for one float (the ends held)."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    j = bisect.bisect_right(xs, x)
    x0, x1 = xs[j - 1], xs[j]
    return ys[j - 1] + (ys[j] - ys[j - 1]) * (x - x0) / (x1 - x0)


def _validation(points: Sequence[CellPoint], other_us: float | None = None) -> Validation:
    """Leave each pooled point of ``points`` out, predict it from the rest (:class:`_Surface`)."""
    surf = _Surface(points, other_us)
    errs: list[tuple[float, str]] = []
    if len(surf.points) < 3:
        return Validation(0, None, None, None, None)
    for items, lr, lt, _, ps in surf.points:
        rest = [p for p in points if p not in ps]
        pred, _ = _Surface(rest, other_us).scalar(items, math.exp(lr))
        errs.append((abs(math.exp(pred - lt) - 1.0), ps[0].tag))
    vals = sorted(e for e, _ in errs)
    worst = max(errs)
    return Validation(len(errs), statistics.median(vals), float(np.quantile(vals, 0.9)), worst[0], worst[1])


def median_ceilings(ceilings: Iterable[Ceilings]) -> Ceilings:
    """One set of ceilings from several runs on one GPU: the median read (or copy) bandwidth and GEMM rate. The
    same ceilings place the measured cells and the simulated steps on the roofline, so the interpolation's
    coordinate means the same on both sides.

    Raises:
        StepCostError: no ceilings at all.
    """
    cs = list(ceilings)
    if not cs:
        raise StepCostError("no run in the store recorded its ceilings (copy, read, GEMM); re-import the runs")
    bw = statistics.median(c.bandwidth_gbps for c in cs)
    mm = statistics.median(c.matmul_tflops for c in cs)
    return Ceilings(copy_gbps=statistics.median(c.copy_gbps for c in cs), copy_bytes=0, matmul_tflops=mm, matmul_n=0,
                    dtype=cs[0].dtype, method=f"median of {len(cs)} runs' ceilings", read_gbps=bw, read_bytes=0,
                    read_method="median of the runs' read ceilings")


def _part_of(w: Workload) -> CallPart | None:
    if w.phase is Phase.DECODE:
        return CallPart.DECODE
    if w.phase is Phase.PREFILL:
        return CallPart.PREFILL
    if w.phase is Phase.MIXED:
        return CallPart.MIXED
    return None


def _usable(m: Measurement, w: Workload) -> bool:
    """A cell whose every sequence's lengths are known without torch and whose K/V reads are each sequence's own:
    eligible, timed, causal, no window, no shared prefix, uniform or given lengths, not packed documents."""
    return (m.eligible and m.latency_us is not None and m.latency_us > 0 and w.mask.value == "causal"
            and w.window is None and w.shared_prefix_len == 0 and not w.kv_len_dist.drawn and not w.is_packed
            and w.cp_ranks == 1)


class MeasuredCells:
    """:class:`StepCostSource` from measured cells: each backend's cells of the simulation's dtype interpolated by
    physics (module docstring). ``cells``: the store's measurements on one GPU; ``shape``: the simulated call's
    per-GPU attention shape; ``ceilings``: the ceilings that place cells and steps on the roofline
    (:func:`median_ceilings`).

    Cells of any head count take part (the physics, not the head count, is the coordinate; group sizes absent from a
    backend's cells are named in its provenance notes); page sizes are pooled (the committed decode sweep measured
    16, 64 and 256 within 2 % of each other). A cell must be eligible, causal, without window, shared prefix or
    drawn lengths (:func:`_usable`). For an FP8 cache, decode is the bf16 interpolation at the FP8 call's physics
    times the backend's FP8 factor: the median over its FP8 cells of measured / interpolated; prefill is priced as
    its bf16 call (no prefill backend has FP8 cells). A decode call with K/V on pages shared between its sequences
    (:attr:`CallSums.shared_kv`, prefix caching) is its unshared price × (1 − s · shared_kv / kv_tokens), ``s`` the
    backend's :meth:`shared_saving` from its shared-prefix decode cells (none: priced as unshared).
    """

    name = "measured cells (interpolated)"

    def __init__(self, cells: Iterable[Measurement], shape: AttentionShape, ceilings: Ceilings) -> None:
        self.shape = shape
        self.ceilings = ceilings
        self.points: dict[tuple[str, CallPart, str | None], list[CellPoint]] = {}
        self.groups: dict[tuple[str, CallPart], set[int]] = {}
        #: per backend, its shared-prefix decode cells: (work items, unshared roofline µs, latency µs, duplicate share)
        self.shared_points: dict[str, list[tuple[float, float, float, float]]] = {}
        for m in cells:
            w = m.workload()
            part = _part_of(w)
            if part is None or w.dtype != shape.dtype:
                continue
            if part is CallPart.DECODE and w.shared_prefix_len and w.kv_dtype is None and w.batch > 1 \
                    and _usable(m, replace(w, shared_prefix_len=0)):
                cell_shape = AttentionShape(w.num_q_heads, w.num_kv_heads, w.head_dim, w.dtype, None)
                _, _, items, roof = call_physics(CallSums.of(w.q_lens, w.kv_lens, w.group_size), cell_shape, ceilings)
                dup = (w.batch - 1) * w.shared_prefix_len / float(sum(w.kv_lens))
                self.shared_points.setdefault(m.backend, []).append((float(items), float(roof), float(m.latency_us), dup))
                continue
            if not _usable(m, w):
                continue
            cell_shape = AttentionShape(w.num_q_heads, w.num_kv_heads, w.head_dim, w.dtype, w.kv_dtype)
            sums = CallSums.of(w.q_lens, w.kv_lens, w.group_size)
            _, _, items, roof = call_physics(sums, cell_shape, ceilings)
            lo, hi = m.p10_us or m.latency_us, m.p90_us or m.latency_us
            spread = 0.5 * math.log(max(hi, lo) / max(min(hi, lo), 1e-9)) if lo and hi else 0.0
            self.points.setdefault((m.backend, part, w.kv_dtype), []).append(
                CellPoint(m.backend, part, float(items), float(roof), float(m.latency_us), spread, w.kv_dtype,
                          m.run_id, m.workload_key))
            self.groups.setdefault((m.backend, part), set()).add(w.group_size)
        self._surfaces: dict[tuple[str, CallPart], tuple[_Surface, float, float | None, int, Validation]] = {}
        self._memo: dict[tuple, tuple[float, int]] = {}
        self._savings: dict[str, tuple[float, int] | None] = {}
        fp8 = int(Extrapolation.KV_DTYPE) if shape.kv_dtype else 0
        prefill_shape = AttentionShape(shape.num_q_heads, shape.num_kv_heads, shape.head_dim, shape.dtype, None)
        self._coef = {CallPart.DECODE: (*_coefficients(shape, ceilings), shape.num_kv_heads, fp8),
                      CallPart.PREFILL: (*_coefficients(prefill_shape, ceilings), shape.num_kv_heads, fp8),
                      CallPart.MIXED: (*_coefficients(prefill_shape, ceilings), shape.num_kv_heads, fp8)}

    def shared_saving(self, backend: str) -> tuple[float, int] | None:
        """``(s, cells)``: the share of a K/V read's cost that a page shared with another sequence of the call saves
        on ``backend``'s decode, from its shared-prefix cells (``batch`` sequences over ``kv_len``, the first
        ``shared_prefix_len`` tokens on one set of pages): per cell ``(1 − measured / unshared price) / duplicate
        share`` (duplicate share = (batch − 1) · shared_prefix_len / Σ kv_len: the reads another sequence already
        made), the median over its cells, clamped to [0, 1] (0: sharing buys nothing; 1: a shared read is free).
        None: no such cell (shared pages are priced as unshared). Computed once per backend."""
        if backend in self._savings:
            return self._savings[backend]
        pts = self.shared_points.get(backend)
        got = None
        if pts and self.points.get((backend, CallPart.DECODE, None)):
            surf = self._surface(backend, CallPart.DECODE)[0]
            vals = [(1.0 - lat / math.exp(surf.scalar(items, roof)[0])) / dup for items, roof, lat, dup in pts if dup > 0]
            if vals:
                got = min(1.0, max(0.0, float(statistics.median(vals)))), len(vals)
        self._savings[backend] = got
        return got

    def other_phases_us(self, backend: str, part: CallPart) -> float | None:
        """The fastest usable cell of ``backend`` in a phase other than ``part`` at the compute dtype's cache (µs;
        None: none). With its fastest cell of ``part`` it is the measured launch floor no small call is priced under
        (:func:`small_call_floor`)."""
        lats = [p.latency_us for (b, q, k), pts in self.points.items() if b == backend and q is not part and k is None
                for p in pts]
        return min(lats) if lats else None

    def backends(self, part: CallPart, kv_dtype: str | None = None) -> tuple[str, ...]:
        """Backends with usable cells of ``part`` (in ``kv_dtype``: None is the compute dtype)."""
        return tuple(sorted({b for b, p, k in self.points if p is part and k == kv_dtype}))

    def _surface(self, backend: str, part: CallPart) -> tuple[_Surface, float, float | None, int, Validation]:
        key = (backend, part)
        if key in self._surfaces:
            return self._surfaces[key]
        pts = self._part_points(backend, part)
        if not pts:
            have = sorted({p.value for b, p, k in self.points if b == backend and k is None})
            hint = (" (measured only in " + ", ".join(have) + ")") if have else " (no usable cell at all)"
            pair = "; pair it with a prefill backend: --backend DECODE+PREFILL" if part is CallPart.PREFILL else ""
            raise StepCostError(f"backend {backend} was never measured in phase {part} at dtype {self.shape.dtype} "
                                f"in this store{hint}{pair}")
        other = self.other_phases_us(backend, part)
        surf = _Surface(pts, other)
        noise = statistics.median(p.spread for p in pts)
        val = _validation(pts, other)
        unc = math.hypot(noise, math.log1p(val.median_error) if val.median_error is not None else 0.0)
        factor, n8 = None, 0
        if self.shape.kv_dtype is not None and part is CallPart.DECODE:
            fp8 = self.points.get((backend, part, self.shape.kv_dtype))
            if not fp8:
                raise StepCostError(f"backend {backend} was never measured with kv_dtype {self.shape.kv_dtype} in "
                                    f"phase decode in this store (measure it: --workload ...,kv_dtype=fp8)")
            factor = float(statistics.median(p.latency_us / math.exp(surf.scalar(p.items, p.roof_us)[0]) for p in fp8))
            n8 = len(fp8)
        self._surfaces[key] = (surf, unc, factor, n8, val)
        return self._surfaces[key]

    def _part_points(self, backend: str, part: CallPart) -> list[CellPoint]:
        """The points a part is interpolated through: a one-launch mixed call's are the backend's prefill cells and
        its mixed cells (the same kernel over the same coordinates), every other part's its own cells."""
        if part is CallPart.MIXED:
            return self.points.get((backend, CallPart.PREFILL, None), []) + self.points.get((backend, part, None), [])
        return self.points.get((backend, part, None), [])

    def attention_us(self, backend: str, part: CallPart, calls: CallSums) -> AttentionEstimate:
        """One layer's attention of each call of ``calls`` on ``backend`` (:class:`StepCostSource`): the larger of
        the call's interpolated time and its longest sequence's alone.

        Raises:
            StepCostError: ``backend`` has no usable cell in ``part`` (or, for an FP8 cache's decode, no FP8 cell).
        """
        surf, unc, factor, _, _ = self._surface(backend, part)
        a, b, c, hkv, bits = self._coef[part]
        shift = math.log(factor) if factor is not None else 0.0
        g = calls.group
        if calls.k <= _SCALAR_CALLS:
            cols = (calls.num_seqs, calls.kv_tokens, calls.q_tokens, calls.pairs, calls.tiles, calls.top_q, calls.top_kv)
            if calls.k == 1 and type(calls.kv_tokens) is float and type(calls.num_seqs) is float:
                rows = [cols]
            elif calls.k == 1:
                rows = [tuple(v if type(v) is float else float(v[0]) for v in cols)]
            else:
                rows = list(zip(*(_floats(v, calls.k) for v in cols)))
            memo = self._memo
            out = []
            for row in rows:
                key = (backend, part, *row)
                got = memo.get(key)
                if got is None:
                    n, kv, q, p, tiles, tq, tk = row
                    lt, fl = surf.scalar(hkv * tiles, max(a * kv + b * q, c * p))
                    if n > 1.0:  # the longest sequence alone (a call of one sequence is itself)
                        lt1, fl1 = surf.scalar(hkv * math.ceil(tq * g / ROWS_PER_TILE),
                                               max(a * tk + b * tq, c * (tq * tk - 0.5 * tq * (tq - 1.0))))
                        if lt1 > lt:
                            lt, fl = lt1, fl1
                    got = (math.exp(lt + shift), fl | bits)
                    if len(memo) >= _MEMO_CALLS:
                        memo.clear()
                    memo[key] = got
                out.append(got)
            us = np.array([u for u, _ in out])
            flags = np.array([f for _, f in out], dtype=np.int8)
        elif calls.run:
            n = float(calls.num_seqs)
            kv = calls.kv_tokens
            lr = np.log(a * kv + b * n) if a >= c else np.log(np.maximum(a * kv + b * n, c * kv))
            lt, flags = surf.sorted_run(hkv * float(calls.tiles), lr)
            tk = float(calls.top_kv[-1])  # the longest sequence alone, at its longest
            if surf.scalar(hkv * math.ceil(g / ROWS_PER_TILE), max(a * tk + b, c * tk))[0] > float(lt[0]):
                tkv = calls.top_kv
                lt1, flags1 = surf.log_time(hkv * math.ceil(g / ROWS_PER_TILE), np.log(np.maximum(a * tkv + b, c * tkv)))
                if isinstance(flags, int):
                    flags = np.full(lt.shape, flags, dtype=np.int8)
                pick = lt1 > lt
                lt = np.where(pick, lt1, lt)
                flags = np.where(pick, flags1, flags)
            if bits:
                flags = flags | bits if isinstance(flags, int) else flags | np.int8(bits)
            us = np.exp(lt + shift if shift else lt)
        else:
            col = calls.column
            roof = np.maximum(a * col("kv_tokens") + b * col("q_tokens"), c * col("pairs"))
            lt, flags = surf.log_time(hkv * col("tiles"), np.log(roof))
            tq, tk = col("top_q"), col("top_kv")
            lt1, flags1 = surf.log_time(hkv * _tiles(tq, g), np.log(np.maximum(a * tk + b * tq, c * causal_pairs_array(tq, tk))))
            pick = lt1 > lt
            lt = np.where(pick, lt1, lt)
            flags = np.where(pick, flags1, flags)
            if bits:
                flags = flags | np.int8(bits)
            us = np.exp(lt + shift if shift else lt)
        if part is CallPart.DECODE and (type(calls.shared_kv) is not float or calls.shared_kv > 0.0):
            saving = self.shared_saving(backend)
            if saving is not None and saving[0] > 0.0:
                us = us * (1.0 - saving[0] * np.minimum(calls.column("shared_kv") / calls.column("kv_tokens"), 1.0))
        return AttentionEstimate(us, flags, unc)

    def provenance(self, backend: str, part: CallPart) -> Provenance:
        """What ``backend``'s ``part`` is priced from (:class:`StepCostSource`).

        Raises:
            StepCostError: as :meth:`attention_us`.
        """
        surf, unc, factor, n8, val = self._surface(backend, part)
        pts = self._part_points(backend, part)
        notes = []
        if part is CallPart.MIXED:
            n_mixed = len(self.points.get((backend, part, None), []))
            notes.append(f"mixed steps in one launch: {len(pts) - n_mixed} prefill and {n_mixed} mixed cells")
        groups = self.groups.get((backend, part), set())
        if self.shape.group not in groups:
            notes.append(f"GQA group {self.shape.group} not among its cells' ({', '.join(map(str, sorted(groups)))})")
        if self.shape.kv_dtype is not None and part is CallPart.PREFILL:
            notes.append(f"prefill over a {self.shape.kv_dtype} cache priced as its bf16 call (no FP8 prefill cell)")
        shared = self.shared_saving(backend) if part is CallPart.DECODE else None
        return Provenance(self.name, backend, part, len(pts), tuple(sorted({p.run_id for p in pts})),
                          (min(p.items for p in pts), max(p.items for p in pts)),
                          (min(p.roof_us for p in pts), max(p.roof_us for p in pts)), surf.floor_us, unc,
                          val, None, factor, n8, tuple(notes), surf.floor_from,
                          shared[0] if shared else None, shared[1] if shared else 0)


def _floats(v: Sums, k: int) -> list[float]:
    return v.tolist() if isinstance(v, np.ndarray) else [float(v)] * k


def _coefficients(shape: AttentionShape, ceilings: Ceilings) -> tuple[float, float, float]:
    """µs per K/V token slot, per query row and per causal pair at the ceilings (:func:`call_physics`'s terms)."""
    bw = ceilings.bandwidth_gbps * 1e3
    return (2.0 * shape.num_kv_heads * shape.head_dim * shape.kv_itemsize / bw,
            2.0 * shape.num_q_heads * shape.head_dim * shape.itemsize / bw,
            4.0 * shape.num_q_heads * shape.head_dim / (ceilings.matmul_tflops * 1e6))


# ---- the rest of the step ------------------------------------------------------------------------------------


class RestOfStep:
    """The rest of a step on one GPU — Q/K/V and output projections, MLP, logits — from the model's weight products
    at the step's rows against the measured ceilings: each product takes max(FLOPs / GEMM ceiling, bytes / read
    ceiling), bytes = its weights once plus its input and output rows (:meth:`ModelConfig.gemms`). A floor, declared
    as an estimate and shown apart from attention: no GEMM reaches the 8192³ ceiling at a step's shapes, and
    norms, rotary embedding, activation, sampling, CUDA-graph launch and (tp > 1) the all-reduces are not counted.
    Tabulated once per row count: ``us(tokens, sampled)`` is two look-ups.

    ``max_tokens``: the most new tokens a step schedules (``max_num_batched_tokens``); ``max_sampled``: the most
    sequences that sample in one step.
    """

    def __init__(self, model: ModelConfig, ceilings: Ceilings, max_tokens: int, max_sampled: int) -> None:
        self.model = model
        w = model.itemsize
        flops_per_us = ceilings.matmul_tflops * 1e6
        bytes_per_us = ceilings.bandwidth_gbps * 1e3

        def table(gemms: Sequence[Gemm], rows: int) -> np.ndarray:
            m = np.arange(rows + 1, dtype=np.float64)
            out = np.zeros(rows + 1)
            for g in gemms:
                t = np.maximum(2.0 * m * g.k * g.n / flops_per_us, (g.k * g.n * w + m * (g.k + g.n) * w) / bytes_per_us)
                out += g.per_step * t
            out[0] = 0.0
            return out

        gemms = model.gemms()
        self.token_us = table([g for g in gemms if g.rows == "tokens"], max_tokens)
        self.sampled_us = table([g for g in gemms if g.rows == "sampled"], max_sampled)
        self._token_list = self.token_us.tolist()
        self._sampled_list = self.sampled_us.tolist()

    def us(self, tokens: np.ndarray, sampled: np.ndarray) -> np.ndarray:
        """µs of the rest of steps with ``tokens`` new tokens of which ``sampled`` sample (int arrays ``[k]``)."""
        return self.token_us[tokens] + self.sampled_us[sampled]

    def at(self, tokens: int, sampled: int) -> float:
        """µs of the rest of one step (:meth:`us` for plain ints)."""
        return self._token_list[tokens] + self._sampled_list[sampled]
