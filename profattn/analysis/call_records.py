"""The records :func:`profattn.analysis.calls.find_attention_calls` returns: attention calls, their kernels
and shapes, GPU time by kernel, launch shape and op, ``ProfilerStep`` windows, and :class:`TraceCalls`,
all of one trace file. Typed values only (enums, numbers); the report layer words them.

Units: times in µs (as Kineto writes them), sizes in bytes.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from profattn.workload import Phase, Workload

if TYPE_CHECKING:  # an annotation only: importing the trace package loads the parser (and pandas) for every reader
    from profattn.trace.columns import TraceWarning

__all__ = [
    "AttentionCall",
    "AttentionShape",
    "CallKernel",
    "CausalAlignment",
    "KernelTime",
    "LaunchShape",
    "OmittedKernels",
    "OpTime",
    "PackedBatch",
    "RecordedWindow",
    "StepWindow",
    "TraceCalls",
]


class CausalAlignment(str, enum.Enum):
    """Where a causal mask's diagonal sits: ``TOP_LEFT`` (SDPA's ``is_causal``: query i sees keys
    ``j <= i``), ``BOTTOM_RIGHT`` (flash-attn's and profattn's: query i sees keys ``j <= i + Lk - Lq``);
    ``NONE``: no causal mask; ``UNKNOWN``: not recorded. The two causal alignments agree when ``Lq == Lk``."""

    TOP_LEFT = "top-left"
    BOTTOM_RIGHT = "bottom-right"
    NONE = "none"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class AttentionShape:
    """Shapes of one attention call as recorded: q ``[batch, num_q_heads, q_len, head_dim]``, k/v
    ``[batch, num_kv_heads, kv_len, head_dim]``; ``dtype`` is q's (``bfloat16``, ``float16``,
    ``float32``, or the trace's own type name when it is none of those; None when not recorded).

    A dimension recorded beyond its plausible limit (:data:`profattn.analysis.call_shapes.SHAPE_LIMITS`,
    e.g. a batch of 1e19) is None (unknown) and listed in ``beyond_limits`` as ``(field, recorded value)``:
    nothing is sized by it."""

    batch: int | None
    num_q_heads: int | None
    num_kv_heads: int | None
    q_len: int | None
    kv_len: int | None
    head_dim: int | None
    dtype: str | None
    beyond_limits: tuple[tuple[str, int], ...] = ()

    def key(self) -> tuple[int | None, ...]:
        """The dimensions alone, to match a forward call with its backward."""
        return (self.batch, self.num_q_heads, self.num_kv_heads, self.q_len, self.kv_len, self.head_dim)


@dataclass(frozen=True)
class PackedBatch:
    """What a packed variable-length call (``cu_seqlens`` passed) records about its sequences.

    ``sequences`` = ``len(cu_seqlens_q) - 1`` (None when beyond the batch limit); ``q_tokens``/``kv_tokens``
    the packed totals (q/k's token dimension); ``max_q``/``max_k`` the recorded longest sequence
    (``max_q``/``max_k`` or ``max_seqlen_q``/``max_seqlen_k`` in ``Concrete Inputs``), None when not recorded;
    ``seqs`` every sequence's ``(q_len, kv_len)`` when the recorded numbers determine them — one sequence
    (the totals), or totals equal to ``sequences ×`` the longest (every sequence that long), or every q_len 1
    (``q_tokens == sequences``) with uniform keys — else None: the per-sequence lengths are the values of
    the ``cu_seqlens`` tensors, which a trace does not record. ``paged``: a ``block_table`` was passed (K/V
    are pages of a cache); ``seqused_k``: per-sequence KV lengths were passed as a tensor. Either leaves
    the KV lengths undetermined."""

    sequences: int | None
    q_tokens: int
    kv_tokens: int
    max_q: int | None
    max_k: int | None
    seqs: tuple[tuple[int, int], ...] | None
    paged: bool = False
    seqused_k: bool = False


@dataclass(frozen=True)
class RecordedWindow:
    """A local (sliding) window as the op recorded it, in flash-attn's convention: query row i (bottom-right
    aligned) sees keys ``[i - left, i + right]``; -1 is unbounded. xformers' ``window_size`` W (its last W
    keys, causal masks only) is recorded as ``left = W - 1, right = 0``. ``arg`` names the recorded argument
    (``window_size_left/right`` or ``window_size``).

    ``keys``: profattn's :attr:`~profattn.workload.Workload.window` (each query sees at most its last
    ``keys`` keys) = ``left + 1`` for a causal window (``right == 0``, ``left >= 0``); None for a two-sided or
    unbounded one."""

    left: int
    right: int
    arg: str

    @property
    def keys(self) -> int | None:
        """profattn's window (keys each query sees), or None when this is not a causal sliding window."""
        return self.left + 1 if self.left >= 0 and self.right == 0 else None


@dataclass(frozen=True)
class CallKernel:
    """One kernel a call launched, with its launch shape.

    ``ts_us``/``dur_us``: GPU start and duration (µs); ``grid``/``block``: ``(x, y, z)`` or None when the
    trace does not record them (ROCm); ``ctas`` = grid product; ``ctas_per_sm`` = ``ctas / num_sms``
    (None without the SM count); ``shared_mem_bytes`` in bytes; ``family``: the attention family its
    name matches (None for GEMMs, softmax, copies, ...); ``graph_launched``: replayed from a CUDA graph
    (its launch is the ``cudaGraphLaunch``, not this kernel's own).
    """

    name: str
    family: str | None
    ts_us: float
    dur_us: float
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    registers_per_thread: int | None
    shared_mem_bytes: int | None
    ctas: int | None
    ctas_per_sm: float | None
    stream: int | None
    graph_launched: bool

    @property
    def launch_shape(self) -> str:
        """``grid [x, y, z] block [x, y, z]``, or ``n/a`` when the trace has no launch shape."""
        if self.grid is None or self.block is None:
            return "n/a"
        return f"grid {list(self.grid)} block {list(self.block)}"


@dataclass(frozen=True)
class OmittedKernels:
    """The kernels of one call beyond the per-call cap (:data:`profattn.analysis.calls.CALL_KERNEL_LIMIT`: the call
    keeps its heaviest kernels as :class:`CallKernel` records), summarised: ``count`` kernels, ``gpu_time_us`` summed
    (µs), ``families`` (attention families among them), ``names`` the heaviest kernel names among them as ``(name,
    launches, total µs)`` (at most 10), their GPU span ``first_ts_us`` … ``last_end_us``, and whether any was
    ``graph_launched``."""

    count: int
    gpu_time_us: float
    families: tuple[str, ...]
    names: tuple[tuple[str, int, float], ...]
    first_ts_us: float
    last_end_us: float
    graph_launched: bool


@dataclass(frozen=True)
class AttentionCall:
    """One attention call found in a trace.

    Attributes:
        index: position among the file's calls, in start-time order (0-based).
        source: ``op`` (an attention operator) or ``kernels`` (attention kernels without one).
        op_name: the outermost attention operator; for kernel-only calls the CPU op that launched the
            kernels (by ``External id``), or None.
        backend: ``flash``, ``efficient``, ``cudnn``, ``math``, ``flash-cpu``, ``flex``, ``flashinfer``,
            ``triton`` — from the dispatched op, else from the kernels' family — or ``unknown``.
        backend_op: the op that names the backend (the nested SDPA backend op, or the call op itself).
        direction: ``forward`` or ``backward``.
        ts_us, dur_us: the call op's CPU window (kernel-only: its kernels' GPU span), µs.
        pid, tid: thread of the call op (kernel-only: of the launch), or None.
        range: innermost ``record_function`` range around the call, or None.
        shape: the recorded shapes, or None (not recorded, kernel-only call, unusable dims).
        causal: ``is_causal`` as recorded; None when unknown.
        causal_alignment: the causal mask's alignment (:class:`CausalAlignment`): ``TOP_LEFT`` or
            ``BOTTOM_RIGHT`` when causal, ``NONE`` when not, ``UNKNOWN`` when not recorded or when an
            explicit mask tensor was passed.
        mask_dims: the dims of the explicit mask/bias tensor passed (``attn_mask``), or None.
        varlen: a packed variable-length batch (``cu_seqlens`` passed): ``shape`` then holds the number of
            sequences as ``batch`` and the recorded longest as ``q_len``/``kv_len`` (None when not recorded).
        phase: inferred regime (see the module docstring), None without shapes.
        workload: the call as a profattn :class:`Workload` when every field is known and profattn's
            semantics can express it, else None (``notes`` says why).
        kernels: the kernels the call launched, in GPU start order — at most the heaviest
            :data:`~profattn.analysis.calls.CALL_KERNEL_LIMIT`; the rest are summarised in ``omitted``.
        graph_launched: the kernels were replayed from a CUDA graph (attributed to the graph launch).
        notes: caveats, one line each.
        packed: what a packed variable-length call records about its sequences (:class:`PackedBatch`), or None.
        window: the local window the op recorded (:class:`RecordedWindow`), or None (none passed, or unbounded).
        omitted: the kernels beyond the per-call cap (:class:`OmittedKernels`), or None when ``kernels`` holds all.
    """

    index: int
    source: str
    op_name: str | None
    backend: str
    backend_op: str | None
    direction: str
    ts_us: float
    dur_us: float
    pid: int | str | None
    tid: int | str | None
    range: str | None
    shape: AttentionShape | None
    causal: bool | None
    causal_alignment: CausalAlignment
    mask_dims: tuple[Any, ...] | None
    varlen: bool
    phase: Phase | None
    workload: Workload | None
    kernels: tuple[CallKernel, ...]
    graph_launched: bool
    notes: tuple[str, ...] = ()
    packed: PackedBatch | None = None
    window: RecordedWindow | None = None
    omitted: OmittedKernels | None = None

    @property
    def gpu_time_us(self) -> float:
        """Summed duration of all the call's kernels (µs), those beyond the cap included."""
        return float(sum(k.dur_us for k in self.kernels)) + (self.omitted.gpu_time_us if self.omitted else 0.0)

    @property
    def kernel_count(self) -> int:
        """Kernels the call launched, those beyond the cap included."""
        return len(self.kernels) + (self.omitted.count if self.omitted else 0)

    @property
    def kernel_families(self) -> tuple[str, ...]:
        """Attention families of the call's kernels (those beyond the cap included), in first-seen order."""
        kept = (k.family for k in self.kernels if k.family)
        return tuple(dict.fromkeys([*kept, *(self.omitted.families if self.omitted else ())]))

    @property
    def workload_constructor(self) -> str | None:
        """The exact ``Workload(...)`` expression for this call (valid Python; ``Workload.varlen(...)`` for a
        packed variable-length call), or None."""
        w = self.workload
        if w is None:
            return None
        rest = (f"num_q_heads={w.num_q_heads}, num_kv_heads={w.num_kv_heads}, head_dim={w.head_dim}, "
                f'dtype="{w.dtype}", mask="{w.mask.value}"' + (f", window={w.window}" if w.window is not None else ""))
        if w.seqs:
            runs: list[list] = []
            for p in w.seqs:
                if runs and runs[-1][0] == p:
                    runs[-1][1] += 1
                else:
                    runs.append([p, 1])
            seqs = " + ".join(f"[{p}] * {n}" if n > 1 else f"[{p}]" for p, n in runs)
            return f'Workload.varlen("{w.phase.value}", {seqs}, {rest})'
        return f'Workload(phase="{w.phase.value}", batch={w.batch}, q_len={w.q_len}, kv_len={w.kv_len}, {rest})'

    @property
    def profile_hint(self) -> str:
        """The ``profattn profile`` command that benchmarks this call's workload on every backend."""
        w = self.workload
        if w is None:
            return "no profattn Workload for this call: " + ("; ".join(self.notes) or "its shapes are not in the trace")
        from profattn.workload import workload_spec

        device = " --device cpu" if self.backend == "flash-cpu" else ""
        return f"profattn profile --workload {workload_spec(w)}{device} --out profattn-traced"


@dataclass(frozen=True)
class KernelTime:
    """GPU time of one kernel name: ``count`` launches, ``total_us`` summed (µs), ``mean_us`` per launch,
    ``share`` of the file's summed kernel time (0..1), ``family`` its attention family or None."""

    name: str
    family: str | None
    count: int
    total_us: float
    mean_us: float
    share: float


@dataclass(frozen=True)
class LaunchShape:
    """One distinct launch shape of one kernel name: ``count`` launches of it, ``total_us`` (µs); grid and
    block ``(x, y, z)`` or None (not recorded); ``shared_mem_bytes`` in bytes; ``ctas_per_sm`` =
    ``ctas / num_sms``; ``blocks_per_sm`` is Kineto's own figure."""

    name: str
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    registers_per_thread: int | None
    shared_mem_bytes: int | None
    ctas: int | None
    ctas_per_sm: float | None
    blocks_per_sm: float | None
    count: int
    total_us: float


@dataclass(frozen=True)
class OpTime:
    """GPU time charged to one top-level CPU op name (see the module docstring): ``op_calls`` instances
    that launched kernels, ``kernels`` launched, ``total_us`` summed kernel time (µs), ``mean_us`` per
    op call, ``graph_kernels`` of them replayed from CUDA graphs. Kernels no op encloses are gathered
    under the name ``(no enclosing CPU op)``, with ``op_calls`` 0 and ``mean_us`` None."""

    name: str
    op_calls: int
    kernels: int
    total_us: float
    mean_us: float | None
    graph_kernels: int


@dataclass(frozen=True)
class StepWindow:
    """One ``ProfilerStep#N`` range: its CPU window (``ts_us``, ``dur_us``), the kernels launched inside it
    from its process (any thread), their summed time ``gpu_time_us`` (µs), and the attention calls that
    start inside it."""

    name: str
    ts_us: float
    dur_us: float
    kernels: int
    gpu_time_us: float
    attention_calls: int


@dataclass(frozen=True)
class TraceCalls:
    """Everything :func:`~profattn.analysis.calls.find_attention_calls` read from one trace file.

    ``rank`` is ``distributedInfo.rank`` when the trace records it; ``gpu_time_us`` the summed kernel time
    and ``gpu_busy_us`` the union of kernel intervals (µs); ``kernels`` by name (largest total first),
    ``launch_shapes`` per (name, shape), ``ops`` by top-level op (largest first), ``steps`` the
    ``ProfilerStep`` windows, ``calls`` the attention calls, ``notes`` caveats about the analysis of the
    whole file, ``warnings`` the recoverable oddities of the file itself (the parser's
    :attr:`~profattn.trace.Trace.warnings`, and ``no_gpu_kernels`` for a trace without GPU kernels).
    """

    path: str
    rank: int | None
    device_name: str | None
    num_sms: int | None
    kernel_count: int
    gpu_time_us: float
    gpu_busy_us: float
    kernels: tuple[KernelTime, ...]
    launch_shapes: tuple[LaunchShape, ...]
    ops: tuple[OpTime, ...]
    steps: tuple[StepWindow, ...]
    calls: tuple[AttentionCall, ...]
    notes: tuple[str, ...] = field(default=())
    warnings: tuple[TraceWarning, ...] = field(default=())

    @property
    def label(self) -> str:
        """``rank N`` when the rank is known, else the file name."""
        return f"rank {self.rank}" if self.rank is not None else os.path.basename(self.path)

    @property
    def has_gpu_kernels(self) -> bool:
        """Whether the trace held any GPU kernel."""
        return self.kernel_count > 0
