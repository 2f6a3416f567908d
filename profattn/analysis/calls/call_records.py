"""The records :func:`profattn.analysis.calls.find.find_attention_calls` returns: attention calls, their kernels
and shapes, GPU time by kernel, launch shape and op, ``ProfilerStep`` windows, and :class:`TraceCalls`,
all of one trace file. Typed values only (enums, numbers); the report layer words them.

Units: times in µs (as Kineto writes them), sizes in bytes.
"""

from __future__ import annotations

import enum
import os
import shlex
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from profattn.workload import Phase, Workload

if TYPE_CHECKING:  # an annotation only: importing the trace package loads the parser (and pandas) for every reader
    from profattn.trace.columns import TraceWarning

__all__ = [
    "AttentionCall",
    "AttentionShape",
    "CallKernel",
    "CallStepShare",
    "CausalAlignment",
    "Engine",
    "EngineCall",
    "GraphGap",
    "GraphLaunchMatch",
    "GraphMatchRule",
    "GraphMerge",
    "GraphOrigin",
    "KVCacheLayout",
    "KVCacheShape",
    "KernelTime",
    "LaunchShape",
    "OmittedKernels",
    "OpTime",
    "PackedBatch",
    "PartLedger",
    "PhaseSums",
    "RecordedWindow",
    "ServingStep",
    "StepAnnotation",
    "StepFormat",
    "StepLedger",
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

    A dimension recorded beyond its plausible limit (:data:`profattn.analysis.calls.call_shapes.SHAPE_LIMITS`,
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


class Engine(str, enum.Enum):
    """The serving engine an attention op or a step annotation comes from."""

    VLLM = "vllm"
    SGLANG = "sglang"
    ATOM = "atom"


class KVCacheLayout(str, enum.Enum):
    """How a paged KV cache tensor is laid out, as its recorded dims show (``value``: the dims by name).

    ``KV_FIRST`` is vLLM's FlashAttention / Triton / FlexAttention backends' ``[2, num_blocks, block_size, Hkv, d]``
    (``kv_cache.unbind(0)``), ``BLOCKS_FIRST`` its FlashInfer backend's ``[num_blocks, 2, block_size, Hkv, d]``
    (``vllm/v1/attention/backends/*.py``, ``get_kv_cache_shape``); ``SEPARATE`` one of K or V as a cache op takes it
    (``_C_cache_ops::reshape_and_cache_flash``'s ``key_cache [num_blocks, block_size, Hkv, d]``); ``SPLIT_X`` vLLM's
    original paged-attention key cache ``[num_blocks, Hkv, d / x, block_size, x]`` (``_C_cache_ops::reshape_and_cache``,
    ``_C::paged_attention_v1``); ``TOKENS`` a pool of token slots, page size 1 (SGLang's ``MHATokenToKVPool`` buffers
    ``[num_tokens, Hkv, d]`` as ``aiter::mha_batch_prefill`` takes them)."""

    KV_FIRST = "[2, num_blocks, block_size, num_kv_heads, head_dim]"
    BLOCKS_FIRST = "[num_blocks, 2, block_size, num_kv_heads, head_dim]"
    SEPARATE = "[num_blocks, block_size, num_kv_heads, head_dim]"
    SPLIT_X = "[num_blocks, num_kv_heads, head_dim / x, block_size, x]"
    TOKENS = "[num_tokens, num_kv_heads, head_dim]"


@dataclass(frozen=True)
class KVCacheShape:
    """A paged KV cache as one recorded tensor shows it: ``dims`` as recorded, its :class:`KVCacheLayout`,
    ``num_blocks`` pages in the pool, ``block_size`` tokens per page (the page size), ``num_kv_heads``, ``head_dim``,
    ``dtype`` of its elements (None when not recorded) and ``source``, the op whose input it was (e.g.
    ``_C_cache_ops::reshape_and_cache_flash``, or ``aten::unbind`` nested in the attention op)."""

    dims: tuple[int, ...]
    layout: KVCacheLayout
    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    dtype: str | None
    source: str

    @property
    def capacity_tokens(self) -> int:
        """Token slots of the whole pool: ``num_blocks · block_size``."""
        return self.num_blocks * self.block_size


@dataclass(frozen=True)
class EngineCall:
    """What a serving engine's attention op records (vLLM's ``vllm::unified_attention[_with_output]``, SGLang's
    ``sglang::unified_attention_with_output``, the backend ops beneath them), beside the call's
    :class:`AttentionShape` (heads, head_dim, dtype).

    ``q_tokens``: rows of q (the step's query tokens, all sequences packed: ``[T, Hq, d]``); ``kv_new_tokens``: rows
    of the k passed (the new tokens' keys, written to the cache beside the call), None when k is the cache itself;
    ``sequences``: ``len(cu_seqlens_q) − 1`` where a backend op records the offsets tensor, else None;
    ``max_q``/``max_k``: the recorded ``max_seqlen_q``/``max_seqlen_k`` scalars, None when not recorded;
    ``kv_cache``: the paged cache's shape (:class:`KVCacheShape`) from the op's inputs or the cache op that wrote it;
    ``mla``: a latent (multi-head latent attention) op, whose query/key head dims differ from the value's.
    Per-sequence query and KV lengths are not among any of these ops' inputs: they are the engine's attention
    metadata (``query_start_loc``, ``seq_lens`` tensors), whose values a trace does not record."""

    engine: Engine
    entry_op: str
    backend_op: str | None
    q_tokens: int | None
    kv_new_tokens: int | None
    sequences: int | None = None
    max_q: int | None = None
    max_k: int | None = None
    kv_cache: KVCacheShape | None = None
    mla: bool = False


class StepFormat(str, enum.Enum):
    """The step-annotation formats read (``record_function`` ranges around one forward step):

    ``VLLM_DETAILED``: ``execute_<tokens>_context_<n>(sq…sk…sqsq…sqsk…)_generation_<n>(sq…sk…sqsq…sqsk…)``
    (vLLM ≥ 0.26 with ``detailed_trace_annotation``, vllm-project/vllm#37524; SGLang's roofline annotations use it
    too); ``VLLM_NATIVE``: ``execute_context_<n>(<Σq>)_generation_<n>(<Σq>)``; ``SGLANG_DETAILED`` /
    ``SGLANG_NATIVE``: ``step[EXTEND|DECODE|MIXED bs=… c_sq=… c_sk=… c_sqsq=… c_sqsk=… g_…]`` (sgl-project/sglang#24911)
    and without the sums; ``ATOM_DETAILED`` / ``ATOM_NATIVE``: ``prefill[bs=… tok=… sqsq=… sqsk=… sk=…]`` /
    ``decode[…]`` (ROCm/ATOM#477). Formats as AMD-AGI/TraceLens ``TraceUtils/annotation_utils.py`` lists them."""

    VLLM_DETAILED = "vllm-detailed"
    VLLM_NATIVE = "vllm-native"
    SGLANG_DETAILED = "sglang-detailed"
    SGLANG_NATIVE = "sglang-native"
    ATOM_DETAILED = "atom-detailed"
    ATOM_NATIVE = "atom-native"


@dataclass(frozen=True)
class PhaseSums:
    """One phase of a step as its annotation records it, summed over the phase's sequences ``i``:
    ``requests`` (sequences), ``sum_q`` = Σ q_i (new query tokens), ``sum_k`` = Σ k_i (keys each sees: cached
    prefix plus the new tokens), ``sum_q2`` = Σ q_i², ``sum_qk`` = Σ q_i·k_i; None where the format records no such
    sum (a native annotation)."""

    requests: int
    sum_q: int
    sum_k: int | None = None
    sum_q2: int | None = None
    sum_qk: int | None = None

    @property
    def has_sums(self) -> bool:
        """Whether Σk, Σq² and Σq·k are recorded (what the exact ledger needs)."""
        return self.sum_k is not None and self.sum_q2 is not None and self.sum_qk is not None

    @property
    def causal_pairs(self) -> int | None:
        """Exact (query, key) pairs per query head under the bottom-right causal mask, summed over the phase:
        ``Σ (q_i·k_i − q_i(q_i − 1)/2) = Σq·k − (Σq² − Σq)/2``. Query row ``j`` (0-based) of sequence ``i`` sits at
        position ``k_i − q_i + j`` and sees ``k_i − q_i + j + 1`` keys; summing ``j = 0 … q_i − 1`` gives
        ``q_i·k_i − q_i(q_i − 1)/2`` (:func:`profattn.workload.causal_pairs` per sequence). ``q_i² − q_i`` is even,
        so the sum is an integer. None without the sums."""
        if not self.has_sums:
            return None
        return self.sum_qk - (self.sum_q2 - self.sum_q) // 2  # type: ignore[operator]


@dataclass(frozen=True)
class StepAnnotation:
    """One step annotation read from a ``user_annotation`` range: ``name`` as recorded, its :class:`StepFormat`
    and :class:`Engine`, ``tokens`` (the step's scheduled tokens as the name states them: ``execute_<tokens>``,
    ``toks=``/``tok=``; None when not stated), the ``context`` (prefill chunks) and ``generation`` (decoding)
    :class:`PhaseSums`, and the range's CPU window (µs) and thread. ``merged``: where two or more ranges describing
    the same step were merged into this one (:func:`profattn.analysis.calls.steps.merge_steps`), which field came from
    which range, as ``(field, range name)`` pairs — ``name``/``format`` are the most detailed range's, the window
    their union; empty for a step read from one range."""

    name: str
    format: StepFormat
    engine: Engine
    tokens: int | None
    context: PhaseSums
    generation: PhaseSums
    ts_us: float
    dur_us: float
    pid: int | str | None
    tid: int | str | None
    merged: tuple[tuple[str, str], ...] = ()

    @property
    def has_sums(self) -> bool:
        """Whether both phases record the sums the exact ledger needs."""
        return self.context.has_sums and self.generation.has_sums

    @property
    def requests(self) -> int:
        """Sequences in the step (both phases)."""
        return self.context.requests + self.generation.requests

    @property
    def query_tokens(self) -> int:
        """Σ q over both phases."""
        return self.context.sum_q + self.generation.sum_q


@dataclass(frozen=True)
class PartLedger:
    """The minimum work of one phase of a step for one attention call (one layer): ``pairs`` per query head
    (:attr:`PhaseSums.causal_pairs`), ``flops`` = 4·Hq·d·pairs (QKᵀ and PV, 2 FLOPs per multiply-add; FlashAttention-2
    §4, as :attr:`profattn.workload.Workload.forward_flops`), and the bytes each tensor moves at least once:
    ``q_bytes`` = Σq·Hq·d·s (Q read), ``o_bytes`` the same (O written), ``kv_bytes`` = 2·Σk·Hkv·d·s_kv (each
    sequence's K and V read once; paged-block metadata left out: a few bytes per page, and the pages per sequence
    are not in the annotation)."""

    pairs: int
    flops: int
    q_bytes: int
    o_bytes: int
    kv_bytes: int

    @property
    def total_bytes(self) -> int:
        """``q_bytes + o_bytes + kv_bytes``."""
        return self.q_bytes + self.o_bytes + self.kv_bytes


@dataclass(frozen=True)
class StepLedger:
    """The exact attention ledger of one step for one call (one layer) of shape ``num_q_heads``/``num_kv_heads``/
    ``head_dim``/``itemsize`` (bytes per element): its ``prefill`` (context) and ``decode`` (generation) parts, None
    for a phase without sequences."""

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    itemsize: int
    prefill: PartLedger | None
    decode: PartLedger | None

    @property
    def flops(self) -> int:
        """Both parts' FLOPs."""
        return sum(p.flops for p in (self.prefill, self.decode) if p is not None)

    @property
    def total_bytes(self) -> int:
        """Both parts' minimum bytes."""
        return sum(p.total_bytes for p in (self.prefill, self.decode) if p is not None)

    @property
    def pairs(self) -> int:
        """Both parts' pairs per query head."""
        return sum(p.pairs for p in (self.prefill, self.decode) if p is not None)


@dataclass(frozen=True)
class CallStepShare:
    """An attention call's place in its serving step: ``step`` (index into :attr:`TraceCalls.serving_steps`), the
    step's exact ``ledger`` for this call's shape (None when the annotation records no sums or the call's shape is
    unknown), and the call's achieved ``tflops`` (ledger FLOPs / the call's GPU time; TFLOP/s = 1e12 FLOP/s) and
    ``gbps`` (minimum bytes / GPU time; GB/s = 1e9 B/s), None without a ledger or kernels. ``exact_lengths``: the
    annotation determines every sequence's lengths (each phase holds at most one sequence), so the call's Workload
    is exact; otherwise it is the nearest uniform one (:func:`profattn.analysis.calls.steps.uniform_seqs`)."""

    step: int
    ledger: StepLedger | None
    tflops: float | None
    gbps: float | None
    exact_lengths: bool


class GraphMatchRule(str, enum.Enum):
    """How replayed graph kernels were matched to the capture-time launches that created their nodes.

    ``NODE_ID``: the replayed kernels carry ``graph id``/``graph node id``, the capture trace holds kernels of the
    same graph id (a replay recorded after the capture in the same profile), which names the capture that built the
    graph, and the kernels are matched to its launches in node-id order (CUDA numbers a graph's nodes as they are
    created; the instantiated graph keeps those ids). ``NODE_ORDER``: node ids present, ordering as for ``NODE_ID``,
    but the capture was chosen by its content (its launches' count and kernel names, the step's token count).
    ``LAUNCH_ORDER``: no node ids; the replay ran on one stream, so its kernels' GPU order is the launch order of
    the capture. ``NAME_ALIGNMENT``: counts differ and both sides name their kernels (ROCm capture events record
    ``kernel``): aligned by name (:class:`difflib.SequenceMatcher`), the unmatched left unplaced."""

    NODE_ID = "graph node id"
    NODE_ORDER = "graph node order"
    LAUNCH_ORDER = "launch order"
    NAME_ALIGNMENT = "kernel-name alignment"


class GraphGap(str, enum.Enum):
    """Why the kernels of one graph replay were not placed on capture-time launches (none is guessed):
    ``NO_CAPTURE`` no capture trace given; ``NO_CANDIDATE`` no capture has as many kernel launches (or the same
    kernel names); ``AMBIGUOUS`` several captures fit and nothing tells them apart; ``NAME_MISMATCH`` the matched
    capture's kernel names differ from the replay's; ``MULTI_STREAM`` the replay spread over several streams, no node
    ids and no kernel names to order them; ``IMPLAUSIBLE`` an attention kernel would land on a launch outside every
    attention op of the capture; ``MIXED_GRAPH_IDS`` one launch replayed kernels of several graph ids."""

    NO_CAPTURE = "no capture trace"
    NO_CANDIDATE = "no matching capture"
    AMBIGUOUS = "ambiguous capture"
    NAME_MISMATCH = "kernel names differ"
    MULTI_STREAM = "several streams, no node ids"
    IMPLAUSIBLE = "attention kernel on a non-attention launch"
    MIXED_GRAPH_IDS = "several graph ids in one launch"


@dataclass(frozen=True)
class GraphOrigin:
    """Where a graph-replayed call's op and shapes came from: the ``rule`` that matched, the capture trace
    (``capture_file``, as shown) and the capture in it (``capture``: index of :attr:`Trace.captures`), and the replay's
    graph launch (``graph_launch``: its correlation id; ``launch_ts_us``: its CPU start, µs)."""

    rule: GraphMatchRule
    capture_file: str
    capture: int
    graph_launch: int
    launch_ts_us: float


@dataclass(frozen=True)
class GraphLaunchMatch:
    """One graph launch of a replay trace against the captures: ``graph_launch`` (correlation), ``launch_ts_us``
    (CPU, µs), ``kernels`` it replayed and how many of them are attention kernels (``attention_kernels``); the
    ``rule`` that placed them (None: not placed), the ``capture_file`` and ``capture`` used, ``placed`` kernels, and
    when some are not placed the ``gap`` and ``capture_launches`` (the candidate's launch count, for the message)."""

    graph_launch: int
    launch_ts_us: float
    kernels: int
    attention_kernels: int
    rule: GraphMatchRule | None
    capture_file: str | None
    capture: int | None
    placed: int
    gap: GraphGap | None = None
    capture_launches: int | None = None


@dataclass(frozen=True)
class GraphMerge:
    """A replay trace's graph launches merged with the capture traces given (``capture_files``, as shown; empty
    when none): one :class:`GraphLaunchMatch` per graph launch, in start order."""

    capture_files: tuple[str, ...]
    launches: tuple[GraphLaunchMatch, ...]

    @property
    def replayed_kernels(self) -> int:
        """Kernels replayed by all graph launches."""
        return sum(m.kernels for m in self.launches)

    @property
    def placed_kernels(self) -> int:
        """Replayed kernels placed on a capture-time launch."""
        return sum(m.placed for m in self.launches)

    @property
    def attention_kernels(self) -> int:
        """Replayed attention kernels."""
        return sum(m.attention_kernels for m in self.launches)

    @property
    def unplaced_attention_kernels(self) -> int:
        """Replayed attention kernels of launches that could not be placed."""
        return sum(m.attention_kernels for m in self.launches if m.rule is None)

    def rule_counts(self) -> dict[GraphMatchRule, int]:
        """Graph launches placed per rule, in first-seen order."""
        return dict(Counter(m.rule for m in self.launches if m.rule is not None))

    def gap_counts(self) -> dict[GraphGap, int]:
        """Graph launches not placed, per reason, in first-seen order."""
        return dict(Counter(m.gap for m in self.launches if m.gap is not None))


@dataclass(frozen=True)
class ServingStep:
    """One annotated serving step of a trace (:class:`StepAnnotation`): the kernels launched inside its CPU window
    from its process (any thread; graph launches count their replayed kernels) and their summed ``gpu_time_us``;
    the attention calls inside it (``attention_calls``: indices into :attr:`TraceCalls.calls`) and their summed
    ``attention_gpu_us``; ``ledger``: the step's per-call attention ledger where every call in it has one shape and
    the annotation records the sums (else None)."""

    index: int
    annotation: StepAnnotation
    kernels: int
    gpu_time_us: float
    attention_calls: tuple[int, ...]
    attention_gpu_us: float
    ledger: StepLedger | None

    @property
    def attention_share(self) -> float | None:
        """Attention's share of the step's GPU time (0..1), None without kernels."""
        return self.attention_gpu_us / self.gpu_time_us if self.gpu_time_us > 0 else None


@dataclass(frozen=True)
class OmittedKernels:
    """The kernels of one call beyond the per-call cap (:data:`profattn.analysis.calls.kernels.CALL_KERNEL_LIMIT`: the call
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
            :data:`~profattn.analysis.calls.kernels.CALL_KERNEL_LIMIT`; the rest are summarised in ``omitted``.
        graph_launched: the kernels were replayed from a CUDA graph (attributed to the graph launch).
        notes: caveats, one line each.
        packed: what a packed variable-length call records about its sequences (:class:`PackedBatch`), or None.
        window: the local window the op recorded (:class:`RecordedWindow`), or None (none passed, or unbounded).
        engine: what a serving engine's attention op records (:class:`EngineCall`), None for other calls.
        step: the call's share of its annotated serving step (:class:`CallStepShare`), or None.
        graph: for a call replayed from a CUDA graph and merged with its capture, where its op came from
            (:class:`GraphOrigin`); None otherwise.
        launch_ts_us: CPU time (µs) of the call's launch: the op's start, or for a replayed call its graph launch
            (what places it in a step's CPU window); None when unknown.
        captured_in: for an op call made while a stream was capturing a graph (its kernels did not run then), the
            index of that capture in :attr:`Trace.captures`; None otherwise.
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
    engine: EngineCall | None = None
    step: CallStepShare | None = None
    graph: GraphOrigin | None = None
    launch_ts_us: float | None = None
    captured_in: int | None = None
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
        return f"profattn profile --workload {shlex.quote(workload_spec(w))}{device} --out profattn-traced"


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
    """Everything :func:`~profattn.analysis.calls.find.find_attention_calls` read from one trace file.

    ``rank`` is ``distributedInfo.rank`` when the trace records it; ``gpu_time_us`` the summed kernel time
    and ``gpu_busy_us`` the union of kernel intervals (µs); ``kernels`` by name (largest total first),
    ``launch_shapes`` per (name, shape), ``ops`` by top-level op (largest first), ``steps`` the
    ``ProfilerStep`` windows, ``calls`` the attention calls, ``notes`` caveats about the analysis of the
    whole file, ``warnings`` the recoverable oddities of the file itself (the parser's
    :attr:`~profattn.trace.Trace.warnings`, and ``no_gpu_kernels`` for a trace without GPU kernels).
    ``serving_steps``: the annotated serving-engine steps (:class:`ServingStep`); ``graph_merge``: how its graph
    replays were merged with capture traces (:class:`GraphMerge`), None for a trace without graph launches;
    ``captures``: how many graph captures the file itself records.
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
    serving_steps: tuple[ServingStep, ...] = field(default=())
    graph_merge: GraphMerge | None = None
    captures: int = 0

    @property
    def label(self) -> str:
        """``rank N`` when the rank is known, else the file name."""
        return f"rank {self.rank}" if self.rank is not None else os.path.basename(self.path)

    @property
    def has_gpu_kernels(self) -> bool:
        """Whether the trace held any GPU kernel."""
        return self.kernel_count > 0
