"""Attention calls in any PyTorch profiler (Kineto) trace, and where the trace's GPU time went.

Pure analysis over a parsed :class:`~profattn.trace.Trace` (no HTML: :mod:`profattn.report.analyze` renders).
Units: times in µs (as Kineto writes them), sizes in bytes.

**Attention calls.** An attention call is the *outermost* attention operator on its thread: the SDPA front
door ``aten::scaled_dot_product_attention`` (or a backend op called directly, a ``_backward`` op, a
FlexAttention op — see :data:`ATTENTION_OPS`); attention ops nested inside it in time on the same
``pid``/``tid`` belong to the same call, and the first backend-specific one names the dispatched backend
(``aten::_scaled_dot_product_flash_attention`` → ``flash``). Attention kernels that no such call launched
(flash-attn's own extension, FlashInfer, cuDNN or Inductor kernels, kernels replayed from a CUDA graph)
become *kernel-only* calls, grouped by the CPU op that launched them (``External id``) or, for CUDA graph
replays, by the graph launch; they have no recorded shapes.

**Workload.** Read from the call op's ``Input Dims`` (``q [B, Hq, Lq, d]``, ``k [B, Hkv, Lk, d]`` for the
SDPA ops; ``[B, L, H, d]`` for ``_flash_attention_*``/``_efficient_attention_*``) and ``Input type``.
``is_causal`` is read from the op's ``Concrete Inputs`` (kept by the trace parser); without them, causal
is unknown.
SDPA's ``is_causal`` is top-left aligned; profattn's causal mask is bottom-right (see
:mod:`profattn.workload`): the two agree only when ``Lq == Lk``, so a top-left causal call with
``Lq != Lk`` gets its fields reported but no :class:`~profattn.workload.Workload`.

**Phase.** ``train`` for a backward call, and for a forward call when the trace holds a backward attention
op of the same backend and shapes (or, when no backward op of that backend has recorded shapes, an
autograd ``ScaledDotProduct…Backward`` node or a shapeless backward op of that backend); else ``decode`` when ``Lq == 1`` or (``Lq <= 16`` and ``Lk >= 8 · Lq``); else ``prefill``. A math-backend
call is never seen as ``train``: its backward is generic matmul autograd with no attention op to match;
when such autograd nodes (``BmmBackward0``, ``SafeSoftmaxBackward0``) are in the trace, the call carries a
note that it may be training.

**Kernels of a call.** Kernels whose launching runtime/driver call (``launch_ts_us``) falls inside the
call op's ``[ts, ts + dur]`` on the same ``pid`` *and* ``tid`` (an aten op launches its kernels from its
own thread; matching the thread keeps kernels that other threads launch meanwhile out); kernels without
a recorded launcher join the call when their ``External id`` is one of the ops inside its window.

**GPU time by op.** Each kernel is charged to the *top-level* CPU op (one not nested in another op on its
thread) whose window holds its launch on the launching thread; kernels without a launcher go through their
``External id`` to the op that launched them, then to that op's top-level op. Kernels replayed from a CUDA
graph are charged to the op around the graph launch. GPU time throughout is summed kernel time (kernels
that overlap on different streams count twice); ``gpu_busy_us`` is the union of kernel intervals.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from profattn.errors import TraceError, WorkloadError
from profattn.families import ATTENTION_FAMILIES, KernelFamily
from profattn.trace.kineto import Trace, TraceWarning
from profattn.trace.windows import IntervalIndex, group_keys
from profattn.workload import Phase, Workload

__all__ = [
    "ATTENTION_KERNEL_FAMILIES",
    "ATTENTION_OPS",
    "AttentionCall",
    "AttentionShape",
    "CallKernel",
    "FileAnalysis",
    "KernelTime",
    "LaunchShape",
    "OpSignature",
    "OpTime",
    "StepWindow",
    "analyze_trace",
    "attention_family",
    "is_attention_op",
]

#: FlashInfer's kernels (``BatchDecodeWithPagedKVCacheKernel``, ``BatchPrefillWith…``, ``SinglePrefill…``),
#: which :data:`profattn.families.ATTENTION_FAMILIES` does not list (profattn does not run them).
FLASHINFER = KernelFamily(
    "flashinfer",
    kernel_patterns=(r"flashinfer", r"Batch(Decode|Prefill)With", r"Single(Decode|Prefill)With"),
    op_patterns=(r"flashinfer",),
)
#: Kernel families that identify a fused attention kernel by name, checked in this order.
ATTENTION_KERNEL_FAMILIES: tuple[KernelFamily, ...] = (*ATTENTION_FAMILIES, FLASHINFER)

#: Names that mark a fused attention kernel in an arbitrary trace. The family patterns are written for
#: profattn's own cells, where only attention runs (``cudnn`` there is cuDNN's SDPA engine, ``triton_tem``
#: Inductor's FlexAttention template); in any other trace they also match cuDNN convolutions and batch norms
#: and Inductor's GEMM templates, so a kernel must match this as well to count as attention.
_ATTENTION_KERNEL = re.compile(
    r"flash_fwd|flash_bwd|flash_attn|pytorch_flash|fmha|AttentionKernel|AttentionBackwardKernel|mem_eff|sdpa"
    r"|sm\d+_flash_(fprop|bprop)|flex_attention|flex_decoding|flashinfer|Batch(Decode|Prefill)With"
    r"|Single(Decode|Prefill)With|_paged_decode",
    re.IGNORECASE,
)
_DTYPES = {"c10::BFloat16": "bfloat16", "c10::Half": "float16", "float": "float32", "double": "float64"}
_STEP = re.compile(r"^ProfilerStep#\d+$")
_AUTOGRAD_SDPA_BACKWARD = re.compile(r"ScaledDotProduct(Flash|Efficient|Cudnn)Attention\w*Backward", re.IGNORECASE)
_NO_OP = "(no enclosing CPU op)"


# ----------------------------------------------------------------------------------------------------
# Attention operators
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpSignature:
    """Where an attention operator's arguments sit in its recorded ``Input Dims``/``Concrete Inputs``.

    ``backend`` is the kernel family the op commits to (None for the SDPA front door, which dispatches);
    ``layout`` is ``"BHLD"`` (q ``[B, H, L, d]``) or ``"BLHD"`` (q ``[B, L, H, d]``); ``causal_index``
    points at ``is_causal`` (``causal_kind="bool"``) or at xformers' ``custom_mask_type``
    (``"mask_type"``: 0 none, 1 top-left causal, 2 bottom-right causal); ``causal_alignment`` is what a
    true ``is_causal`` means; ``mask_index`` is the optional mask/bias tensor and ``varlen_index`` the
    optional ``cu_seqlens_q`` tensor (present: packed variable-length batch).
    """

    backend: str | None
    direction: str
    layout: str = "BHLD"
    q_index: int = 0
    k_index: int = 1
    causal_index: int | None = None
    causal_kind: str = "bool"
    causal_alignment: str = "top-left"
    mask_index: int | None = None
    varlen_index: int | None = None


#: Attention operators by exact name, with their argument positions (PyTorch ``native_functions.yaml``).
ATTENTION_OPS: dict[str, OpSignature] = {
    "aten::scaled_dot_product_attention": OpSignature(None, "forward", causal_index=5, mask_index=3),
    "aten::_scaled_dot_product_attention_math": OpSignature("math", "forward", causal_index=5, mask_index=3),
    "aten::_scaled_dot_product_flash_attention": OpSignature("flash", "forward", causal_index=4),
    "aten::_scaled_dot_product_flash_attention_for_cpu": OpSignature("flash-cpu", "forward", causal_index=4, mask_index=5),
    "aten::_scaled_dot_product_efficient_attention": OpSignature("efficient", "forward", causal_index=6, mask_index=3),
    "aten::_scaled_dot_product_cudnn_attention": OpSignature("cudnn", "forward", causal_index=6, mask_index=3),
    "aten::_flash_attention_forward": OpSignature(
        "flash", "forward", layout="BLHD", causal_index=8, causal_alignment="bottom-right", varlen_index=3
    ),
    "aten::_efficient_attention_forward": OpSignature(
        "efficient", "forward", layout="BLHD", causal_index=9, causal_kind="mask_type", mask_index=3, varlen_index=4
    ),
    "aten::_scaled_dot_product_flash_attention_backward": OpSignature(
        "flash", "backward", q_index=1, k_index=2, causal_index=11, varlen_index=6
    ),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": OpSignature(
        "flash-cpu", "backward", q_index=1, k_index=2, causal_index=7, mask_index=8
    ),
    "aten::_scaled_dot_product_efficient_attention_backward": OpSignature(
        "efficient", "backward", q_index=1, k_index=2, causal_index=11, mask_index=4
    ),
    "aten::_scaled_dot_product_cudnn_attention_backward": OpSignature(
        "cudnn", "backward", q_index=1, k_index=2, causal_index=14, mask_index=8, varlen_index=9
    ),
    "aten::_flash_attention_backward": OpSignature(
        "flash", "backward", layout="BLHD", q_index=1, k_index=2, causal_index=11, causal_alignment="bottom-right",
        varlen_index=6,
    ),
    "aten::_efficient_attention_backward": OpSignature(
        "efficient", "backward", layout="BLHD", q_index=1, k_index=2, causal_index=14, causal_kind="mask_type",
        mask_index=4, varlen_index=6,
    ),
}
_FLEX_FORWARD = OpSignature("flex", "forward")
_FLEX_BACKWARD = OpSignature("flex", "backward", q_index=0, k_index=1)


def is_attention_op(name: str) -> bool:
    """Whether a CPU operator name is an attention operator (:data:`ATTENTION_OPS` or FlexAttention)."""
    return name in ATTENTION_OPS or "flex_attention" in name.lower()


def _signature(name: str) -> OpSignature:
    """The :class:`OpSignature` of an attention operator (FlexAttention: q, k first; mask unknown)."""
    if name in ATTENTION_OPS:
        return ATTENTION_OPS[name]
    return _FLEX_BACKWARD if "backward" in name.lower() else _FLEX_FORWARD


def attention_family(kernel_name: str) -> str | None:
    """The attention family of a kernel: None unless the name marks a fused attention kernel
    (:data:`_ATTENTION_KERNEL`); then the first :data:`ATTENTION_KERNEL_FAMILIES` family whose patterns
    match, or ``attention`` when none does."""
    if not _ATTENTION_KERNEL.search(kernel_name):
        return None
    return next((f.name for f in ATTENTION_KERNEL_FAMILIES if f.matches_kernel(kernel_name)), "attention")


def _kernel_direction(names: Iterable[str]) -> str:
    """``backward`` when any kernel name says so (``flash_bwd``, ``bprop``, ``Backward``), else ``forward``."""
    return "backward" if any(re.search(r"bwd|bprop|backward", n, re.IGNORECASE) for n in names) else "forward"


# ----------------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionShape:
    """Shapes of one attention call as recorded: q ``[batch, num_q_heads, q_len, head_dim]``, k/v
    ``[batch, num_kv_heads, kv_len, head_dim]``; ``dtype`` is q's (``bfloat16``, ``float16``,
    ``float32``, or the trace's own type name when it is none of those; None when not recorded)."""

    batch: int
    num_q_heads: int
    num_kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    dtype: str | None

    def key(self) -> tuple[int, int, int, int, int, int]:
        """The dimensions alone, to match a forward call with its backward."""
        return (self.batch, self.num_q_heads, self.num_kv_heads, self.q_len, self.kv_len, self.head_dim)


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
        mask: ``none``, ``causal (top-left)``, ``causal (bottom-right)``, ``attn_mask tensor [...]`` or
            ``unknown``.
        phase: inferred regime (see the module docstring), None without shapes.
        workload: the call as a profattn :class:`Workload` when every field is known and profattn's
            semantics can express it, else None (``notes`` says why).
        kernels: the kernels the call launched, in GPU start order.
        graph_launched: the kernels were replayed from a CUDA graph (attributed to the graph launch).
        notes: caveats, one line each.
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
    mask: str
    phase: Phase | None
    workload: Workload | None
    kernels: tuple[CallKernel, ...]
    graph_launched: bool
    notes: tuple[str, ...] = ()

    @property
    def gpu_time_us(self) -> float:
        """Summed duration of the call's kernels (µs)."""
        return float(sum(k.dur_us for k in self.kernels))

    @property
    def kernel_families(self) -> tuple[str, ...]:
        """Attention families of the call's kernels, in first-seen order."""
        return tuple(dict.fromkeys(k.family for k in self.kernels if k.family))

    @property
    def workload_constructor(self) -> str | None:
        """The exact ``Workload(...)`` expression for this call (valid Python), or None."""
        w = self.workload
        if w is None:
            return None
        return (
            f'Workload(phase="{w.phase.value}", batch={w.batch}, q_len={w.q_len}, kv_len={w.kv_len}, '
            f"num_q_heads={w.num_q_heads}, num_kv_heads={w.num_kv_heads}, head_dim={w.head_dim}, "
            f'dtype="{w.dtype}", mask="{w.mask.value}")'
        )

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
class FileAnalysis:
    """Everything :func:`analyze_trace` read from one trace file.

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


# ----------------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------------


def analyze_trace(trace: Trace) -> FileAnalysis:
    """Analyze one parsed trace: GPU time by kernel and by op, launch shapes, ProfilerStep windows, and
    every attention call with its workload, regime and kernels.

    Raises:
        TraceError: the trace's ``traceEvents`` is empty (nothing to analyze).
    """
    if trace.event_count == 0:
        raise TraceError(f"{trace.path}: 'traceEvents' is empty: nothing to analyze")
    kernels = trace.kernels
    num_sms = trace.num_sms
    names = kernels["name"].tolist()
    family_of = {name: attention_family(name) for name in set(names)}  # names repeat: match each once
    families = [family_of[n] for n in names]
    records = _KernelRecords(kernels, families, num_sms)
    notes = _file_notes(trace)

    attention = _attention_op_groups(trace.ops)
    calls, used = _op_calls(trace, attention, records)
    calls += _kernel_only_calls(trace, records, families, used)
    calls = _with_phases(calls, trace.ops)
    calls = [replace(c, index=i) for i, c in enumerate(sorted(calls, key=lambda c: c.ts_us))]

    total_us = float(kernels["dur_us"].sum())
    return FileAnalysis(
        path=trace.path,
        rank=_rank(trace.metadata),
        device_name=trace.device_name,
        num_sms=num_sms,
        kernel_count=len(kernels),
        gpu_time_us=total_us,
        gpu_busy_us=_busy_us(kernels),
        kernels=_kernel_times(kernels, families, total_us),
        launch_shapes=_launch_shapes(kernels, num_sms),
        ops=_op_times(trace),
        steps=_steps(trace, calls),
        calls=tuple(calls),
        notes=tuple(notes),
        warnings=_warnings(trace),
    )


# ----------------------------------------------------------------------------------------------------
# File-level facts
# ----------------------------------------------------------------------------------------------------


def _rank(metadata: Mapping[str, Any]) -> int | None:
    info = metadata.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def _warnings(trace: Trace) -> tuple[TraceWarning, ...]:
    if trace.kernels.empty:
        return (TraceWarning("no_gpu_kernels", 0, "no GPU kernels in this trace (CPU-only, or recorded without GPU "
                             "activity): only CPU operators are analyzed"), *trace.warnings)
    return trace.warnings


def _file_notes(trace: Trace) -> list[str]:
    notes: list[str] = []
    k = trace.kernels
    if k.empty:
        return notes
    if trace.num_sms is None:
        notes.append("no deviceProperties (SM count unknown): CTAs per SM are not computed")
    if k["grid_x"].isna().all():
        notes.append("kernel events carry no grid/block (as in ROCm traces): launch shapes are n/a")
    graph = int(k["graph_launched"].sum())
    if graph:
        notes.append(f"{graph} kernel(s) were replayed from CUDA graphs: they are attributed to the graph launch")
    return notes


def _busy_us(kernels: pd.DataFrame) -> float:
    """Length of the union of kernel intervals ``[ts, ts + dur]`` (µs), all devices of the file together."""
    busy, end = 0.0, -math.inf
    for ts, dur in zip(kernels["ts_us"].to_numpy(), kernels["dur_us"].to_numpy()):  # sorted by ts
        stop = ts + dur
        if stop <= end:
            continue
        busy += stop - max(ts, end)
        end = stop
    return busy


# ----------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------


def _opt_int(v: Any) -> int | None:
    return None if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else int(v)


def _triple(row: Mapping[str, Any], prefix: str) -> tuple[int, int, int] | None:
    vals = [_opt_int(row[f"{prefix}_{a}"]) for a in "xyz"]
    return None if None in vals else (vals[0], vals[1], vals[2])  # type: ignore[return-value]


_RECORD_INTS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
                "shared_mem_bytes", "ctas", "stream")


class _KernelRecords:
    """``records[i]``: the :class:`CallKernel` of row ``i`` of ``kernels``, built when first asked for
    (only the kernels of attention calls ever are)."""

    def __init__(self, kernels: pd.DataFrame, families: Sequence[str | None], num_sms: int | None) -> None:
        self._names = kernels["name"].to_numpy(dtype=object)
        self._ts = kernels["ts_us"].to_numpy(dtype="float64")
        self._dur = kernels["dur_us"].to_numpy(dtype="float64")
        self._graph = kernels["graph_launched"].to_numpy(dtype=bool)
        self._ints = {c: (kernels[c].to_numpy(dtype="int64", na_value=0), kernels[c].isna().to_numpy()) for c in _RECORD_INTS}
        self._families = families
        self._num_sms = num_sms
        self._built: dict[int, CallKernel] = {}

    def __getitem__(self, i: int) -> CallKernel:
        record = self._built.get(i)
        if record is None:
            record = self._built[i] = self._build(int(i))
        return record

    def _int(self, column: str, i: int) -> int | None:
        values, missing = self._ints[column]
        return None if missing[i] else int(values[i])

    def _build(self, i: int) -> CallKernel:
        grid = tuple(self._int(c, i) for c in ("grid_x", "grid_y", "grid_z"))
        block = tuple(self._int(c, i) for c in ("block_x", "block_y", "block_z"))
        ctas = self._int("ctas", i)
        num_sms = self._num_sms
        return CallKernel(
            name=str(self._names[i]),
            family=self._families[i],
            ts_us=float(self._ts[i]),
            dur_us=float(self._dur[i]),
            grid=None if None in grid else grid,  # type: ignore[arg-type]
            block=None if None in block else block,  # type: ignore[arg-type]
            registers_per_thread=self._int("registers_per_thread", i),
            shared_mem_bytes=self._int("shared_mem_bytes", i),
            ctas=ctas,
            ctas_per_sm=ctas / num_sms if ctas is not None and num_sms else None,
            stream=self._int("stream", i),
            graph_launched=bool(self._graph[i]),
        )


def _kernel_times(kernels: pd.DataFrame, families: Sequence[str | None], total_us: float) -> tuple[KernelTime, ...]:
    if kernels.empty:
        return ()
    family_of = dict(zip(kernels["name"].tolist(), families))
    grouped = kernels.groupby("name", sort=False)["dur_us"].agg(["count", "sum"])
    grouped = grouped.sort_values("sum", ascending=False, kind="stable")
    return tuple(
        KernelTime(str(name), family_of[name], int(n), float(s), float(s) / int(n), float(s) / total_us if total_us > 0 else 0.0)
        for name, n, s in zip(grouped.index, grouped["count"], grouped["sum"])
    )


def _launch_shapes(kernels: pd.DataFrame, num_sms: int | None) -> tuple[LaunchShape, ...]:
    if kernels.empty:
        return ()
    keys = ["name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread", "shared_mem_bytes"]
    grouped = kernels.groupby(keys, sort=False, dropna=False).agg(
        count=("dur_us", "size"), total_us=("dur_us", "sum"), ctas=("ctas", "first"), blocks_per_sm=("blocks_per_sm", "first")
    ).reset_index()
    grouped = grouped.sort_values("total_us", ascending=False, kind="stable")
    out = []
    for row in grouped.to_dict("records"):
        ctas = _opt_int(row["ctas"])
        bps = row["blocks_per_sm"]
        out.append(LaunchShape(
            name=str(row["name"]), grid=_triple(row, "grid"), block=_triple(row, "block"),
            registers_per_thread=_opt_int(row["registers_per_thread"]), shared_mem_bytes=_opt_int(row["shared_mem_bytes"]),
            ctas=ctas, ctas_per_sm=ctas / num_sms if ctas is not None and num_sms else None,
            blocks_per_sm=None if pd.isna(bps) else float(bps), count=int(row["count"]), total_us=float(row["total_us"]),
        ))
    return tuple(out)


# ----------------------------------------------------------------------------------------------------
# Attention calls from operators
# ----------------------------------------------------------------------------------------------------


def _attention_op_groups(ops: pd.DataFrame) -> list[list[dict[str, Any]]]:
    """Attention ops grouped into calls: per thread, each top-level attention op (see
    :meth:`IntervalIndex.top_level`) followed by the attention ops that belong to it, in start order
    (ties: the longer first); a missing ``dur`` counts as 0. Groups are ordered by thread (first seen)
    and then by start."""
    mask = ops["name"].map(is_attention_op).to_numpy(dtype=bool)
    if not mask.any():
        return []
    att = ops[mask].assign(_dur=ops.loc[mask, "dur_us"].fillna(0.0))
    att = att.sort_values(["ts_us", "_dur"], ascending=[True, False], kind="stable", ignore_index=True)
    start = att["ts_us"].to_numpy(dtype="float64")
    keys = group_keys(att["pid"], att["tid"])
    owner = IntervalIndex(start, start + att["_dur"].to_numpy(dtype="float64"), keys).top_level()
    thread, _ = pd.factorize(pd.Series(keys, dtype=object), use_na_sentinel=False)
    rows = att.to_dict("records")
    groups: dict[int, list[dict[str, Any]]] = {}
    for pos in np.lexsort((np.arange(len(att)), thread)):
        groups.setdefault(int(owner[pos]), []).append(rows[pos])
    return list(groups.values())


def _dims(op: Mapping[str, Any], index: int) -> list[Any] | None:
    dims = op.get("input_dims")
    if not isinstance(dims, list) or index >= len(dims) or not isinstance(dims[index], list):
        return None
    return dims[index]


def _shape(op: Mapping[str, Any], sig: OpSignature) -> AttentionShape | None:
    """The call's shapes from ``Input Dims``/``Input type``; None unless q and k are 4-D int lists that agree."""
    q, k = _dims(op, sig.q_index), _dims(op, sig.k_index)
    if q is None or k is None or len(q) != 4 or len(k) != 4:
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (*q, *k)):
        return None
    if sig.layout == "BLHD":
        (b, lq, hq, d), (bk, lk, hkv, dk) = q, k
    else:
        (b, hq, lq, d), (bk, hkv, lk, dk) = q, k
    if b != bk or d != dk:
        return None
    types = op.get("input_types")
    raw = types[sig.q_index] if isinstance(types, list) and sig.q_index < len(types) else None
    dtype = _DTYPES.get(raw, raw) if isinstance(raw, str) and raw else None
    return AttentionShape(batch=b, num_q_heads=hq, num_kv_heads=hkv, q_len=lq, kv_len=lk, head_dim=d, dtype=dtype)


def _causal(concrete: list[Any] | None, sig: OpSignature) -> tuple[bool | None, str | None]:
    """(is_causal, alignment when causal) from ``Concrete Inputs``; (None, None) when not recorded."""
    if concrete is None or sig.causal_index is None or sig.causal_index >= len(concrete):
        return None, None
    value = str(concrete[sig.causal_index]).strip()
    if sig.causal_kind == "mask_type":
        return {"0": (False, None), "1": (True, "top-left"), "2": (True, "bottom-right")}.get(value, (None, None))
    if value in ("True", "False"):
        return value == "True", (sig.causal_alignment if value == "True" else None)
    return None, None


def _op_calls(
    trace: Trace, groups: list[list[dict[str, Any]]], records: _KernelRecords
) -> tuple[list[AttentionCall], set[int]]:
    """One :class:`AttentionCall` per group; also the kernel rows they took.

    A group's window is its outermost op's ``[ts, ts + dur]`` on its ``(pid, tid)``; the windows of one
    thread do not overlap (see :func:`_attention_op_groups`), so each launch lies in at most one of them
    (:meth:`IntervalIndex.innermost` over the windows)."""
    kernels, ops = trace.kernels, trace.ops
    outers = [g[0] for g in groups]
    start = np.array([o["ts_us"] for o in outers], dtype="float64")
    windows = IntervalIndex(start, start + np.array([o["_dur"] for o in outers], dtype="float64"),
                            [(o["pid"], o["tid"]) for o in outers])
    k_group = windows.innermost(group_keys(kernels["launch_pid"], kernels["launch_tid"]),
                                kernels["launch_ts_us"].to_numpy(dtype="float64"))
    taken: list[list[int]] = [[] for _ in groups]
    for pos in np.flatnonzero(k_group >= 0):
        taken[k_group[pos]].append(int(pos))
    # Kernels without a recorded launcher join the call whose window holds an op with their External id.
    k_ext = kernels["external_id"]
    no_launcher = kernels["launch_ts_us"].isna().to_numpy() & k_ext.notna().to_numpy()
    if no_launcher.any():
        by_ext: dict[int, list[int]] = {}
        for pos, ext in zip(np.flatnonzero(no_launcher), k_ext[no_launcher].tolist()):
            by_ext.setdefault(int(ext), []).append(int(pos))
        o_group = windows.innermost(group_keys(ops["pid"], ops["tid"]), ops["ts_us"].to_numpy(dtype="float64"))
        o_ext = ops["external_id"].to_numpy(dtype=object)
        seen: set[int] = set()
        for pos in np.flatnonzero(o_group >= 0)[np.argsort(o_group[o_group >= 0], kind="stable")]:
            ext = o_ext[pos]
            if ext is pd.NA or int(ext) not in by_ext:
                continue
            fresh = [k for k in by_ext[int(ext)] if k not in seen]
            seen.update(fresh)
            taken[o_group[pos]].extend(fresh)
    calls, used = [], set()
    for group, rows in zip(groups, taken):
        used.update(rows)
        call_kernels = tuple(sorted((records[i] for i in set(rows)), key=lambda r: r.ts_us))
        calls.append(_call_from_ops(group, call_kernels))
    return calls, used


def _call_from_ops(group: list[dict[str, Any]], kernels: tuple[CallKernel, ...]) -> AttentionCall:
    """The call of one op group (outermost attention op first) and the kernels attributed to it."""
    outer = group[0]
    sig = _signature(outer["name"])
    backend_row = next((r for r in group if _signature(r["name"]).backend is not None), None)
    notes: list[str] = []
    if backend_row is not None:
        backend, backend_op = _signature(backend_row["name"]).backend or "unknown", backend_row["name"]
    else:
        family = next((k.family for k in kernels if k.family), None)
        backend, backend_op = family or "unknown", None
        notes.append(f"no nested backend op: backend {'read from the kernels' if family else 'unknown'}")

    # Shapes from the outer op; failing that, from the first nested op that has them.
    shape, shape_sig, shape_op = None, sig, outer
    for row in group:
        row_sig = _signature(row["name"])
        shape = _shape(row, row_sig)
        if shape is not None:
            shape_sig, shape_op = row_sig, row
            break
    if shape is None:
        notes.append("input shapes not recorded (record_shapes=False?) or not 4-D: no workload")
    recorded = shape_op.get("concrete_inputs")
    causal, alignment = _causal(recorded, shape_sig)
    mask_dims = _dims(shape_op, shape_sig.mask_index) if shape_sig.mask_index is not None else None
    varlen = _dims(shape_op, shape_sig.varlen_index) if shape_sig.varlen_index is not None else None
    if mask_dims:
        mask = f"attn_mask tensor {mask_dims}"
        notes.append("an explicit mask/bias tensor was passed: its pattern is not in the trace")
    elif causal is None:
        mask = "unknown"
        if shape_sig.causal_index is None:
            notes.append("FlexAttention's mask (block mask, score_mod) is not recorded in a trace: causal unknown")
        elif shape is not None:
            notes.append("is_causal not recorded (no Concrete Inputs): causal unknown" if recorded is None
                         else "is_causal not readable from Concrete Inputs: causal unknown")
    else:
        mask = f"causal ({alignment})" if causal else "none"
    if varlen:
        notes.append("packed variable-length batch (cu_seqlens): B and L are not per-sequence values")
    return AttentionCall(
        index=0, source="op", op_name=outer["name"], backend=backend, backend_op=backend_op, direction=sig.direction,
        ts_us=float(outer["ts_us"]), dur_us=float(outer["_dur"]), pid=outer["pid"], tid=outer["tid"], range=outer["range"],
        shape=shape, causal=None if mask_dims else causal, mask=mask, phase=None, workload=None, kernels=kernels,
        graph_launched=any(k.graph_launched for k in kernels), notes=tuple(notes),
    )


# ----------------------------------------------------------------------------------------------------
# Kernel-only calls
# ----------------------------------------------------------------------------------------------------


def _kernel_only_calls(
    trace: Trace, records: _KernelRecords, families: Sequence[str | None], used: set[int]
) -> list[AttentionCall]:
    """Attention kernels no attention op launched, grouped by launching op (``External id``) or, for CUDA
    graph replays, by graph launch (``correlation``); other kernels of that op are not included."""
    kernels = trace.kernels
    orphans = [i for i, f in enumerate(families) if f is not None and i not in used]
    if not orphans:
        return []
    graph = kernels["graph_launched"].to_numpy(dtype=bool)
    ext = kernels["external_id"].to_numpy(dtype=object)
    corr = kernels["correlation"].to_numpy(dtype=object)
    groups: dict[tuple[str, Any], list[int]] = {}
    for i in orphans:
        if graph[i]:
            key = ("graph", corr[i] if corr[i] is not pd.NA else i)
        elif ext[i] is not pd.NA:
            key = ("ext", int(ext[i]))
        else:
            key = ("kernel", i)
        groups.setdefault(key, []).append(i)
    op_by_ext = {int(e): (n, r) for e, n, r in zip(trace.ops["external_id"], trace.ops["name"], trace.ops["range"]) if e is not pd.NA}
    calls = []
    for (kind, value), members in groups.items():
        ks = tuple(sorted((records[i] for i in members), key=lambda r: r.ts_us))
        first = kernels.iloc[members[0]]
        op_name, op_range = op_by_ext.get(value, (None, None)) if kind == "ext" else (None, None)
        family = next(f for f in (k.family for k in ks) if f is not None)
        notes = ["attention kernels without an attention op: shapes not recorded, no workload"]
        if kind == "graph":
            notes.append(f"replayed from a CUDA graph (launched by {first['launcher']}): the calls inside one graph "
                         "replay cannot be told apart")
        calls.append(AttentionCall(
            index=0, source="kernels", op_name=op_name, backend=family, backend_op=None,
            direction=_kernel_direction(k.name for k in ks), ts_us=ks[0].ts_us,
            dur_us=max(k.ts_us + k.dur_us for k in ks) - ks[0].ts_us,
            pid=first["launch_pid"], tid=first["launch_tid"], range=op_range if op_range is not None else first["range"],
            shape=None, causal=None, mask="unknown", phase=None, workload=None, kernels=ks,
            graph_launched=kind == "graph", notes=tuple(notes),
        ))
    return calls


# ----------------------------------------------------------------------------------------------------
# Phase and workload
# ----------------------------------------------------------------------------------------------------


#: Autograd nodes of the ops SDPA's math path is made of (``autograd::engine::evaluate_function: BmmBackward0``).
_MATH_BACKWARD = re.compile(r"(?:^|: )(?:Bmm|(?:Safe)?Softmax|UnsafeView|Baddbmm)Backward\d*$")


def _with_phases(calls: list[AttentionCall], ops: pd.DataFrame) -> list[AttentionCall]:
    """Calls with ``phase`` and ``workload`` filled in (see the module docstring)."""
    backward: set[tuple[str, Any]] = set()
    for c in calls:
        if c.direction == "backward":
            backward.add((c.backend, c.shape.key() if c.shape else None))
    shaped = {backend for backend, key in backward if key is not None}
    op_names = set(ops["name"].tolist())
    for name in op_names:
        m = _AUTOGRAD_SDPA_BACKWARD.search(name)
        if m and m.group(1).lower() not in shaped:  # the node stands for a backward op we could not match
            backward.add((m.group(1).lower(), None))
    # A math-path SDPA is bmm + softmax; its backward is their autograd nodes, not one attention op.
    math_grads = sorted(n for n in op_names if _MATH_BACKWARD.search(n))
    out = []
    for c in calls:
        if c.shape is None:
            out.append(c)
            continue
        s = c.shape
        if c.direction == "backward" or (c.backend, s.key()) in backward or (c.backend, None) in backward:
            phase = Phase.TRAIN
        elif s.q_len == 1 or (s.q_len <= 16 and s.kv_len >= 8 * s.q_len):
            phase = Phase.DECODE
        else:
            phase = Phase.PREFILL
        workload, notes = _workload(c, phase)
        if c.backend == "math" and phase is not Phase.TRAIN and math_grads:
            notes = (*notes, f"may be training: the trace holds the autograd backward nodes of a math-path SDPA's "
                             f"ops ({', '.join(n.rsplit(': ', 1)[-1] for n in math_grads[:3])}), which profattn "
                             "cannot pair with this call")
        out.append(replace(c, phase=phase, workload=workload, notes=notes))
    return out


def _workload(call: AttentionCall, phase: Phase) -> tuple[Workload | None, tuple[str, ...]]:
    """The call as a :class:`Workload`, or None with the reason appended to its notes."""
    notes = list(call.notes)
    s = call.shape
    assert s is not None
    reason = None
    if s.dtype is None:
        reason = "dtype not recorded"
    elif call.causal is None:
        reason = "mask unknown"
    elif call.mask == "causal (top-left)" and s.q_len != s.kv_len:
        reason = ("SDPA's is_causal is top-left aligned and profattn's causal mask bottom-right: they differ "
                  f"for Lq {s.q_len} != Lk {s.kv_len}")
    elif any("variable-length" in n for n in notes):
        reason = "packed variable-length batch"
    if reason is not None:
        return None, (*notes, f"no profattn Workload: {reason}")
    try:
        workload = Workload(phase=phase, batch=s.batch, q_len=s.q_len, kv_len=s.kv_len, num_q_heads=s.num_q_heads,
                            num_kv_heads=s.num_kv_heads, head_dim=s.head_dim, dtype=s.dtype, mask="causal" if call.causal else "none")
    except WorkloadError as e:
        return None, (*notes, f"no profattn Workload: {e}")
    if not call.causal and s.q_len == 1:
        notes.append("with Lq = 1 a bottom-right causal mask equals no mask (profattn's decode presets say causal)")
    if phase is Phase.TRAIN:
        notes.append("a train Workload times forward and backward together")
    return workload, tuple(notes)


# ----------------------------------------------------------------------------------------------------
# GPU time by op, ProfilerStep windows
# ----------------------------------------------------------------------------------------------------


def _op_times(trace: Trace) -> tuple[OpTime, ...]:
    kernels, ops = trace.kernels, trace.ops
    if kernels.empty:
        return ()
    start = ops["ts_us"].to_numpy(dtype="float64")
    end = start + np.nan_to_num(ops["dur_us"].to_numpy(dtype="float64"), nan=0.0)
    index = IntervalIndex(start, end, group_keys(ops["pid"], ops["tid"]))
    charged = index.outermost(group_keys(kernels["launch_pid"], kernels["launch_tid"]),
                              kernels["launch_ts_us"].to_numpy(dtype="float64"))
    # Kernels no op window holds: through their External id to the op that launched them, then to its
    # top-level op.
    miss = np.flatnonzero((charged < 0) & kernels["external_id"].notna().to_numpy())
    if len(miss):
        owner = np.where(ops["pid"].notna().to_numpy() & ops["tid"].notna().to_numpy(), index.top_level(), -1)
        ext_to_op = {int(e): i for i, e in enumerate(ops["external_id"].tolist()) if e is not pd.NA}
        for i, ext in zip(miss, kernels["external_id"].to_numpy(dtype=object)[miss]):
            op = ext_to_op.get(int(ext))
            if op is not None:
                charged[i] = owner[op]
    names = ops["name"].to_numpy(dtype=object)
    frame = pd.DataFrame({
        "op": np.where(charged >= 0, names[np.maximum(charged, 0)] if len(names) else _NO_OP, _NO_OP),
        "instance": charged,
        "dur_us": kernels["dur_us"].to_numpy(),
        "graph": kernels["graph_launched"].to_numpy(dtype=bool),
    })
    grouped = frame.groupby("op", sort=False).agg(
        op_calls=("instance", "nunique"), kernels=("dur_us", "size"), total_us=("dur_us", "sum"), graph_kernels=("graph", "sum")
    ).sort_values("total_us", ascending=False, kind="stable")
    out = []
    for name, r in grouped.iterrows():
        op_calls = 0 if name == _NO_OP else int(r.op_calls)
        mean = float(r.total_us) / op_calls if op_calls else None
        out.append(OpTime(str(name), op_calls, int(r.kernels), float(r.total_us), mean, int(r.graph_kernels)))
    return tuple(out)


def _steps(trace: Trace, calls: Sequence[AttentionCall]) -> tuple[StepWindow, ...]:
    """The ``ProfilerStep#N`` windows: kernels launched inside each from its process (any thread, any
    nesting; :meth:`IntervalIndex.points_inside`) and the attention calls that start inside it."""
    ranges = trace.ranges
    steps = ranges[ranges["name"].map(lambda n: bool(_STEP.match(str(n))))]
    if steps.empty:
        return ()
    k = trace.kernels
    start = steps["ts_us"].to_numpy(dtype="float64")
    index = IntervalIndex(start, start + steps["dur_us"].to_numpy(dtype="float64"), group_keys(steps["pid"]))
    n_kernels, gpu_us = index.points_inside(group_keys(k["launch_pid"]), k["launch_ts_us"].to_numpy(dtype="float64"),
                                            k["dur_us"].to_numpy(dtype="float64"))
    n_calls, _ = index.points_inside([c.pid for c in calls], np.array([c.ts_us for c in calls], dtype="float64"))
    return tuple(
        StepWindow(str(name), float(ts), float(dur), int(n), float(us), int(nc))
        for name, ts, dur, n, us, nc in zip(steps["name"], start, steps["dur_us"], n_kernels, gpu_us, n_calls)
    )
