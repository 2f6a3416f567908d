"""The workload: one attention call's full shape contract, with its FLOP and byte ledgers.

A ``Workload`` is what the seed lesson calls the unit of comparison: phase, batch, query length, key
length, query heads, KV heads, head dimension, dtype, mask and cache layout. Everything the harness,
the analysis and the report say about a cell derives from it.

Tensor layout used throughout profattn (SDPA's): ``q`` is ``[batch, num_q_heads, q_len, head_dim]``,
``k`` and ``v`` are ``[batch, num_kv_heads, kv_len, head_dim]``, the output ``o`` is shaped like ``q``.

Mask semantics: ``causal`` is *bottom-right* aligned, as in flash-attn 2 (Dao, 2023, "FlashAttention-2",
§ "causal mask" in the flash-attn README since v2.1): query row ``i`` of ``q_len`` sits at absolute
position ``p = kv_len - q_len + i`` and sees keys ``0..p``. For ``q_len == kv_len`` that equals SDPA's
top-left ``is_causal=True``; for ``q_len < kv_len`` (decode, chunked prefill) it does not, and backends
must use ``torch.nn.attention.bias.causal_lower_right`` or an equivalent. A sliding window ``W`` (causal
only; Mistral's and Gemma's local attention, flash-attn's ``window_size=(W-1, 0)``) keeps, of those keys, the last
``W``: query row ``i`` sees keys ``j`` with ``p − W < j ≤ p``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields, replace
from typing import Iterable

from profattn.errors import UnknownNameError, WorkloadError


class _NamedEnum(str, enum.Enum):
    """A closed set of names whose parse error lists the valid values."""

    @classmethod
    def parse(cls, value: "str | _NamedEnum") -> "_NamedEnum":
        """Return the member named ``value``; raise ``WorkloadError`` listing valid names otherwise."""
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value))
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise WorkloadError(f"unknown {cls.__name__.lower()} {value!r}; valid: {valid}") from None

    def __str__(self) -> str:
        return self.value


class Phase(_NamedEnum):
    """Execution regime: ``train`` (forward + backward), ``prefill`` (forward, many queries per sequence),
    ``decode`` (forward, one query per sequence), ``mixed`` (one serving step: some sequences in a prefill
    chunk, others decoding one token, in one call)."""

    TRAIN = "train"
    PREFILL = "prefill"
    DECODE = "decode"
    MIXED = "mixed"


class Mask(_NamedEnum):
    """Attention mask: ``causal`` (bottom-right aligned, see module docstring) or ``none``."""

    CAUSAL = "causal"
    NONE = "none"


class KVLayout(_NamedEnum):
    """Physical KV-cache layout.

    ``dense``: contiguous ``[B, Hkv, Lk, d]`` tensors. ``paged``: pages ``[num_pages, page_size, Hkv, d]``
    addressed through a block table (see :mod:`profattn.workload.paged`); dense backends then run on the contiguous
    copy of the same logical cache, for contrast.
    """

    DENSE = "dense"
    PAGED = "paged"


class KVLenDist(_NamedEnum):
    """How a uniform batch's per-sequence KV lengths are set: ``uniform`` (all ``kv_len``), or drawn with
    ``kv_len_seed`` (``ragged``, ``lognormal``; see :func:`profattn.workload.paged.ragged_lengths`)."""

    UNIFORM = "uniform"
    RAGGED = "ragged"
    LOGNORMAL = "lognormal"

    @property
    def drawn(self) -> bool:
        """The lengths are drawn (need torch to compute), not all ``kv_len``."""
        return self is not KVLenDist.UNIFORM


#: Per-sequence KV length distributions (:class:`KVLenDist`'s values).
KV_LEN_DISTS = tuple(d.value for d in KVLenDist)


#: Bytes per element of the dtypes profattn accepts (``torch.<name>``).
DTYPE_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2, "float32": 4}
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
_DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


#: KV-cache storage dtypes beside the compute ``dtype`` (``Workload.kv_dtype``): bytes per element. ``float8_e4m3fn``
#: (OCP E4M3, finite max ±448) is the format of vLLM's ``kv_cache_dtype="fp8_e4m3"`` and FlashInfer's fp8 cache.
KV_DTYPE_BYTES: dict[str, int] = {"float8_e4m3fn": 1}
_KV_DTYPE_ALIASES = {"fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "e4m3": "float8_e4m3fn"}
_KV_DTYPE_SHORT = {"float8_e4m3fn": "fp8"}


def parse_kv_dtype(name: "str | None") -> "str | None":
    """Canonical KV-cache dtype (``float8_e4m3fn``) for ``name`` or an alias (``fp8``, ``fp8_e4m3``, ``e4m3``);
    None (or ``"none"``) means the cache is stored in the workload's ``dtype``.

    Raises:
        WorkloadError: not a supported KV-cache dtype.
    """
    if name is None or str(name).lower() == "none":
        return None
    canon = _KV_DTYPE_ALIASES.get(str(name), str(name).removeprefix("torch."))
    if canon not in KV_DTYPE_BYTES:
        raise WorkloadError(f"unsupported kv_dtype {name!r}; valid: {', '.join(KV_DTYPE_BYTES)} "
                            f"(aliases: {', '.join(_KV_DTYPE_ALIASES)}), or none")
    return canon


def parse_dtype(name: str) -> str:
    """Canonical dtype name (``bfloat16``/``float16``/``float32``) for ``name`` or an alias like ``bf16``.

    Raises:
        WorkloadError: the dtype is not one of the supported ones.
    """
    canon = _DTYPE_ALIASES.get(str(name), str(name).removeprefix("torch."))
    if canon not in DTYPE_BYTES:
        raise WorkloadError(f"unsupported dtype {name!r}; valid: {', '.join(DTYPE_BYTES)}")
    return canon


@dataclass(frozen=True)
class TensorTraffic:
    """One tensor's entry in a byte ledger: it is read ``reads`` times and written ``writes`` times.

    ``shape`` is the logical tensor shape; ``itemsize`` in bytes. ``kv`` marks K/V-cache tensors, whose
    bytes are also totalled separately (the GQA saving lives there).
    """

    name: str
    shape: tuple[int, ...]
    itemsize: int
    reads: int = 0
    writes: int = 0
    kv: bool = False

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def bytes_read(self) -> int:
        return self.numel * self.itemsize * self.reads

    @property
    def bytes_written(self) -> int:
        return self.numel * self.itemsize * self.writes

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written


def causal_pairs(q_len: int, kv_len: int, window: int | None = None) -> int:
    """Number of (query, key) pairs a bottom-right-aligned causal mask keeps, per batch and head.

    Query row ``i`` (0-based) sits at position ``kv_len - q_len + i`` and sees
    ``clamp(kv_len - q_len + i + 1, 0, kv_len)`` keys, at most ``window`` of them when a sliding window is
    given. Summed in closed form: rows with no visible key (possible when ``q_len > kv_len``) contribute 0,
    rows past ``kv_len`` are clamped, rows past the window see ``window`` keys.
    Example: ``causal_pairs(2048, 2048) == 2048 * 2049 // 2``; ``causal_pairs(1, n) == n``;
    ``causal_pairs(4, 4, window=2) == 1 + 2 + 2 + 2``.
    """
    if window is not None:
        # visible(i) = clamp(a + i, 0, window) with a = kv_len - q_len + 1, i in [0, q_len)
        a, z = kv_len - q_len + 1, kv_len
        lo, hi = max(a, 1), min(z, window)
        ramp = (lo + hi) * (hi - lo + 1) // 2 if hi >= lo else 0
        return ramp + window * max(0, z - max(a - 1, window))
    offset = kv_len - q_len
    # visible(i) = i + offset + 1 for i in [lo, q_len), clamped at kv_len (never exceeded since i < q_len).
    lo = max(0, -offset)  # first row that sees at least one key
    if lo >= q_len:
        return 0
    first = lo + offset + 1
    last = q_len - 1 + offset + 1
    return (first + last) * (q_len - lo) // 2


#: Upper bounds on the shape fields, checked before anything is sized from them (a batch of 1e23 raised
#: OverflowError; 1e8 spent minutes building per-sequence lengths). Far past any real call: 65,536
#: sequences (as many as one ``mix=`` may name), 256 Mi tokens per sequence, 65,536 heads, head_dim 65,536;
#: a workload within them that cannot fit in memory is still measured as "unsupported: needs ~N GB".
FIELD_LIMITS: dict[str, int] = {"batch": 1 << 16, "q_len": 1 << 28, "kv_len": 1 << 28, "num_q_heads": 1 << 16,
                                "num_kv_heads": 1 << 16, "head_dim": 1 << 16}


#: Context-parallel schemes (``Workload.cp_scheme``): ``ring`` (K/V blocks passed rank to rank, partial outputs
#: merged by their log-sum-exp), ``allgather`` (K/V gathered, then one local call per query chunk), ``ulysses``
#: (all-to-all from sequence to heads, full-sequence attention on ``Hq / ranks`` heads, all-to-all back) and
#: ``torch-cp`` (PyTorch's ``torch.distributed.tensor.experimental.context_parallel``).
class CpScheme(_NamedEnum):
    """How the ranks of a context-parallel call attend (:data:`CP_SCHEMES`)."""

    RING = "ring"
    ALLGATHER = "allgather"
    ULYSSES = "ulysses"
    TORCH_CP = "torch-cp"


CP_SCHEMES = tuple(c.value for c in CpScheme)
#: Most ranks one context-parallel workload may name.
CP_RANKS_MAX = 1 << 12


#: Largest ``kv_len_seed`` (torch's generator takes a signed 64-bit seed).
SEED_MAX = (1 << 63) - 1

#: Longest run-length text :func:`seqs_tag` spells out before it falls back to a digest.
SEQS_TAG_MAX = 48


def window_start(q_len: int, kv_len: int, window: int | None) -> int:
    """First key any query row of a sequence sees under a sliding ``window`` (bottom-right causal): its
    last row sits at ``kv_len − 1`` and its first at ``kv_len − q_len``, which sees down to ``kv_len − q_len − window
    + 1``; 0 without a window. Keys ``window_start … kv_len − 1`` are the ones a call must read:
    ``min(kv_len, q_len + window − 1)`` of them. Example: ``window_start(1, 32768, 4096) == 28672``."""
    if window is None:
        return 0
    return max(0, kv_len - q_len - window + 1)


def seqs_tag(seqs: "Iterable[tuple[int, int]]") -> str:
    """File-name-safe name of per-sequence lengths, run-length encoded in order:
    ``((2048, 8192),) * 2 + ((1, 4096),) * 32`` → ``"s2xq2048kv8192-32xq1kv4096"``; longer than
    :data:`SEQS_TAG_MAX` characters → ``"s"`` + the first 12 hex digits of its SHA-1 (``"s3f9a…"``)."""
    import hashlib

    groups: list[list] = []
    for p in seqs:
        if groups and groups[-1][0] == tuple(p):
            groups[-1][1] += 1
        else:
            groups.append([tuple(p), 1])
    text = "s" + "-".join((f"{n}x" if n > 1 else "") + f"q{q}kv{k}" for (q, k), n in groups)
    if len(text) <= SEQS_TAG_MAX:
        return text
    return "s" + hashlib.sha1(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Workload:
    """One attention call's shape contract (frozen; validated on construction).

    Attributes:
        phase: ``train`` (fwd+bwd), ``prefill`` or ``decode``.
        batch: sequences per call, B.
        q_len: query positions per sequence, Lq (1 for decode).
        kv_len: key/value positions per sequence, Lk.
        num_q_heads: Hq.
        num_kv_heads: Hkv; must divide Hq (GQA group size = Hq / Hkv; MHA when equal, MQA when 1).
        head_dim: d.
        dtype: ``bfloat16``, ``float16`` or ``float32`` (aliases ``bf16``... accepted).
        mask: ``causal`` (bottom-right aligned) or ``none``.
        kv_layout: ``dense`` or ``paged``.
        page_size: tokens per KV page (paged layout only).
        kv_len_dist: per-sequence KV lengths: ``uniform`` (all ``kv_len``), ``ragged`` or ``lognormal``
            (drawn with ``kv_len_seed``; ``kv_len`` is then the longest).
        kv_len_seed: seed of the length draw.
        shared_prefix_len: tokens at the start of every sequence stored once in shared pages (paged only;
            a multiple of ``page_size``).
        seqs: a variable-length call: ``(q_len, kv_len)`` of every sequence (``kv_len`` = cached prefix + the
            ``q_len`` new tokens, so ``q_len ≤ kv_len``); ``batch``, ``q_len`` and ``kv_len`` are then the
            count and the longest (use :meth:`Workload.varlen`). Empty for a uniform call.
        append: the call also writes its new tokens' K/V into the paged cache through the block table, as a
            serving engine does before attending (paged only); its bytes are :meth:`append_traffic`, kept
            apart from the attention kernel's ledger.
        kv_dtype: how the paged cache stores K and V: None (in ``dtype``) or ``float8_e4m3fn`` (alias ``fp8``):
            one byte per element plus one fp32 scale per KV head for K and one for V (vLLM's per-attention-head
            ``k_scale``/``v_scale`` ``[num_kv_heads]``); kernels dequantize (value = code · scale). FP8 is offered
            for paged decode calls without an append (no quantizing append kernel yet).
        window: sliding-window attention (causal only): each query row sees at most its last ``window`` keys
            (see the module docstring); ``None`` is the full causal mask, and ``window ≥ kv_len`` equals it.
        cp_ranks: context parallelism: the sequence is split over this many ranks (processes), 1 = one process.
            The other fields describe the *global* call (every rank holds ``q_len / cp_ranks`` of its tokens).
        cp_scheme: how the split ranks attend (:data:`CP_SCHEMES`); required when ``cp_ranks ≥ 2``. Offered for
            dense self-attention (``q_len == kv_len``) in train and prefill, without a window or ``seqs``;
            ``q_len`` divisible by ``2 · cp_ranks`` (the causal load balancing's chunks) for ``ring``,
            ``allgather`` and ``torch-cp``, by ``cp_ranks`` for ``ulysses``, whose heads (Hq and Hkv) are also
            divided by ``cp_ranks``.

    Raises:
        WorkloadError: a field is out of domain.
    """

    phase: Phase
    batch: int
    q_len: int
    kv_len: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "bfloat16"
    mask: Mask = Mask.CAUSAL
    kv_layout: KVLayout = KVLayout.DENSE
    page_size: int | None = None
    kv_len_dist: KVLenDist = KVLenDist.UNIFORM
    kv_len_seed: int = 0
    shared_prefix_len: int = 0
    seqs: tuple[tuple[int, int], ...] = ()
    append: bool = False
    kv_dtype: str | None = None
    window: int | None = None
    cp_ranks: int = 1
    cp_scheme: CpScheme | None = None

    @classmethod
    def varlen(cls, phase: "Phase | str | None", seqs: "Iterable[tuple[int, int]]", **fields_: object) -> "Workload":
        """A variable-length call from its per-sequence ``(q_len, kv_len)``: ``batch``, ``q_len`` and
        ``kv_len`` are derived; ``phase`` None infers it (every q_len 1 → decode; none 1 → prefill; both →
        mixed). Other fields as for the constructor.

        Raises:
            WorkloadError: no sequence, a length that is not a positive integer, ``q_len > kv_len``, or any
                constructor check.
        """
        pairs = tuple(tuple(p) for p in seqs)
        if not pairs:
            raise WorkloadError("a variable-length call needs at least one sequence")
        for p in pairs:
            if len(p) != 2 or any(not isinstance(x, int) or isinstance(x, bool) or x < 1 for x in p):
                raise WorkloadError(f"sequence {p!r}: (q_len, kv_len) must be two positive integers")
        if phase is None:
            ones = sum(q == 1 for q, _ in pairs)
            phase = Phase.DECODE if ones == len(pairs) else Phase.PREFILL if ones == 0 else Phase.MIXED
        return cls(phase=phase, batch=len(pairs), q_len=max(q for q, _ in pairs), kv_len=max(k for _, k in pairs),
                   seqs=pairs, **fields_)  # type: ignore[arg-type]

    @classmethod
    def packed(cls, phase: "Phase | str", doc_lens: "Iterable[int]", **fields_: object) -> "Workload":
        """A packed batch (:attr:`is_packed`): documents of ``doc_lens`` tokens each, every one a sequence
        ``(n, n)`` of :meth:`varlen`; ``phase`` is ``train`` or ``prefill``. Example:
        ``Workload.packed("train", (512, 1024, 256), num_q_heads=16, num_kv_heads=4, head_dim=128)``.

        Raises:
            WorkloadError: another phase, a paged layout (packed documents are one dense sequence; separate
                sequences over a paged cache are :meth:`varlen`), no document, a length that is not a positive
                integer, or any :meth:`varlen` check.
        """
        p = Phase.parse(phase)
        if p not in (Phase.TRAIN, Phase.PREFILL):
            raise WorkloadError(f"packed documents (docs=) are a train or prefill call, not {p.value}")
        if KVLayout.parse(fields_.get("kv_layout", KVLayout.DENSE)) is not KVLayout.DENSE:  # type: ignore[arg-type]
            raise WorkloadError("packed documents (docs=) are one dense sequence: no page size or paged layout "
                                "(separate sequences over a paged cache are mix=1x(q512,kv512)+...)")
        lens = tuple(doc_lens)
        if any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in lens):
            raise WorkloadError(f"document lengths must be positive integers, got {lens!r}")
        return cls.varlen(p, ((n, n) for n in lens), **fields_)

    def __post_init__(self) -> None:
        object.__setattr__(self, "phase", Phase.parse(self.phase))
        object.__setattr__(self, "mask", Mask.parse(self.mask))
        object.__setattr__(self, "kv_layout", KVLayout.parse(self.kv_layout))
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        for name in ("batch", "q_len", "kv_len", "num_q_heads", "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise WorkloadError(f"{name} must be a positive integer, got {value!r}")
            if value > FIELD_LIMITS[name]:
                raise WorkloadError(f"{name} {value:,} is beyond profattn's bound of {FIELD_LIMITS[name]:,} "
                                    "(no attention call that size can be allocated)")
        seed = self.kv_len_seed
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= SEED_MAX:
            raise WorkloadError(f"kv_len_seed must be an integer in [0, {SEED_MAX:,}] (a 63-bit seed), got {seed!r}")
        if self.num_q_heads % self.num_kv_heads:
            raise WorkloadError(
                f"num_q_heads ({self.num_q_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if self.kv_len_dist not in KV_LEN_DISTS:
            raise WorkloadError(f"unknown kv_len_dist {self.kv_len_dist!r}; valid: {', '.join(KV_LEN_DISTS)}")
        object.__setattr__(self, "kv_len_dist", KVLenDist(self.kv_len_dist))
        if self.kv_layout is KVLayout.PAGED:
            if not isinstance(self.page_size, int) or self.page_size < 1:
                raise WorkloadError(f"a paged workload needs a positive page_size, got {self.page_size!r}")
        elif self.page_size is not None or self.shared_prefix_len or self.kv_len_dist.drawn:
            raise WorkloadError("page_size, shared_prefix_len and ragged kv_len_dist need kv_layout='paged'")
        if self.shared_prefix_len:
            if self.shared_prefix_len % self.page_size or self.shared_prefix_len > min(self.kv_lens):
                raise WorkloadError(
                    f"shared_prefix_len {self.shared_prefix_len} must be a multiple of page_size {self.page_size} "
                    f"and at most the shortest sequence ({min(self.kv_lens)})"
                )
        if self.kv_len_dist.drawn and self.q_len != 1:
            raise WorkloadError("ragged KV lengths are defined for decode (q_len 1) only")
        if not isinstance(self.append, bool):
            raise WorkloadError(f"append must be true or false, got {self.append!r}")
        if self.append and self.kv_layout is not KVLayout.PAGED:
            raise WorkloadError("append (writing new K/V into the cache) needs kv_layout='paged'")
        if self.append and self.phase is Phase.TRAIN:
            raise WorkloadError("append is a serving-call option; training writes no KV cache")
        if self.phase is Phase.TRAIN and self.kv_layout is KVLayout.PAGED:
            raise WorkloadError("training reads dense K/V (there is no KV cache to page): kv_layout='paged' (page=) is "
                                "for prefill, decode and mixed serving calls")
        if not self.seqs and self.q_len > self.kv_len:
            if self.append:
                raise WorkloadError(f"append writes q_len {self.q_len} new tokens into sequences of kv_len {self.kv_len} "
                                    "(cached prefix + new tokens): q_len must be <= kv_len")
            if self.mask is Mask.CAUSAL:
                raise WorkloadError(f"causal with q_len {self.q_len} > kv_len {self.kv_len}: with the bottom-right mask the "
                                    f"first {self.q_len - self.kv_len} query rows would see no key (use mask=none)")
        if self.window is not None:
            if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1:
                raise WorkloadError(f"window must be a positive integer (keys each query sees), got {self.window!r}")
            if self.window > FIELD_LIMITS["kv_len"]:
                raise WorkloadError(f"window {self.window:,} is beyond profattn's bound of {FIELD_LIMITS['kv_len']:,} "
                                    "(the bound on lengths; a window >= kv_len is the plain causal mask)")
            if self.mask is not Mask.CAUSAL:
                raise WorkloadError(f"a sliding window needs mask='causal' (it keeps the last window keys of the "
                                    f"causal mask), got mask={self.mask.value!r}")
        self._check_seqs()
        object.__setattr__(self, "kv_dtype", parse_kv_dtype(self.kv_dtype))
        if self.kv_dtype is not None:
            if self.kv_layout is not KVLayout.PAGED:
                raise WorkloadError(f"kv_dtype {self.kv_dtype} (a quantized KV cache) needs kv_layout='paged'")
            if self.phase is not Phase.DECODE:
                raise WorkloadError(f"kv_dtype {self.kv_dtype} is offered for decode calls only, not {self.phase.value}")
            if self.append:
                raise WorkloadError(f"kv_dtype {self.kv_dtype} with append is not offered yet (no quantizing append)")
        self._check_cp()

    def _check_cp(self) -> None:
        r, scheme = self.cp_ranks, self.cp_scheme
        if not isinstance(r, int) or isinstance(r, bool) or not 1 <= r <= CP_RANKS_MAX:
            raise WorkloadError(f"cp_ranks must be an integer in [1, {CP_RANKS_MAX:,}], got {r!r}")
        if r == 1:
            if scheme is not None:
                raise WorkloadError(f"cp_scheme {scheme!r} needs cp_ranks >= 2 (one rank is an ordinary call)")
            return
        if scheme is None:
            raise WorkloadError(f"cp_ranks={r} needs cp_scheme, one of: {', '.join(CP_SCHEMES)}")
        if scheme not in CP_SCHEMES:
            raise WorkloadError(f"cp_scheme {scheme!r} is not a context-parallel scheme; one of: {', '.join(CP_SCHEMES)}")
        object.__setattr__(self, "cp_scheme", scheme := CpScheme(scheme))
        if self.phase not in (Phase.TRAIN, Phase.PREFILL):
            raise WorkloadError(f"context parallelism splits a train or prefill call, not {self.phase.value}")
        if self.kv_layout is not KVLayout.DENSE:
            raise WorkloadError(f"context parallelism splits a dense K/V, not a paged cache (page_size={self.page_size}): "
                                "leave out page_size")
        if self.seqs or self.window is not None:
            raise WorkloadError("context parallelism is offered for dense calls without seqs/docs or a window")
        if self.q_len != self.kv_len:
            raise WorkloadError(f"context parallelism splits one self-attention sequence: q_len {self.q_len} must "
                                f"equal kv_len {self.kv_len}")
        chunks = r if scheme is CpScheme.ULYSSES else 2 * r
        if self.q_len % chunks:
            why = "ranks" if scheme is CpScheme.ULYSSES else "2 x ranks (each rank holds chunks i and 2R-1-i)"
            raise WorkloadError(f"cp_scheme {scheme}: q_len {self.q_len} must be divisible by {chunks}, {why}")
        if scheme is CpScheme.ULYSSES and (self.num_q_heads % r or self.num_kv_heads % r):
            raise WorkloadError(f"cp_scheme ulysses splits heads over ranks: num_q_heads {self.num_q_heads} and "
                                f"num_kv_heads {self.num_kv_heads} must be divisible by cp_ranks={r}")

    @property
    def is_context_parallel(self) -> bool:
        """True when the call is split over ``cp_ranks ≥ 2`` processes (:attr:`cp_scheme`)."""
        return self.cp_ranks > 1

    @property
    def single_process(self) -> "Workload":
        """The same global call on one process (``cp_ranks=1``): what a context-parallel cell is measured against."""
        return replace(self, cp_ranks=1, cp_scheme=None) if self.cp_ranks > 1 else self

    def _check_seqs(self) -> None:
        seqs = self.seqs
        if not isinstance(seqs, tuple):
            object.__setattr__(self, "seqs", seqs := tuple(tuple(p) for p in seqs))
        if not seqs:
            if self.phase is Phase.MIXED:
                raise WorkloadError("a mixed call needs per-sequence lengths (seqs / mix=...)")
            return
        for i, p in enumerate(seqs):
            if (len(p) != 2 or any(not isinstance(x, int) or isinstance(x, bool) or x < 1 for x in p)):
                raise WorkloadError(f"sequence {i} {p!r}: (q_len, kv_len) must be two positive integers")
            if p[0] > p[1]:
                raise WorkloadError(f"sequence {i}: q_len {p[0]} > kv_len {p[1]} (kv_len counts the cached prefix "
                                    "plus the new tokens)")
        derived = (len(seqs), max(q for q, _ in seqs), max(k for _, k in seqs))
        if (self.batch, self.q_len, self.kv_len) != derived:
            raise WorkloadError(f"batch/q_len/kv_len {(self.batch, self.q_len, self.kv_len)} do not match seqs "
                                f"{derived} (count, longest q_len, longest kv_len); build it with Workload.varlen")
        if self.kv_len_dist.drawn or self.shared_prefix_len:
            raise WorkloadError("seqs gives every length explicitly: no kv_len_dist or shared_prefix_len beside it")
        ones = sum(q == 1 for q, _ in seqs)
        if self.phase is Phase.DECODE and ones != len(seqs):
            raise WorkloadError("a decode call has q_len 1 in every sequence; one with prefill chunks is phase=mixed")
        if self.phase is Phase.MIXED and ones in (0, len(seqs)):
            raise WorkloadError("a mixed call has both decoding sequences (q_len 1) and prefill chunks (q_len > 1)")

    # ---- derived shape facts -------------------------------------------------------------------
    @property
    def group_size(self) -> int:
        """GQA group size Hq / Hkv: query heads that share one KV head."""
        return self.num_q_heads // self.num_kv_heads

    @property
    def is_gqa(self) -> bool:
        """True when K/V heads are shared (Hkv < Hq)."""
        return self.num_kv_heads < self.num_q_heads

    @property
    def itemsize(self) -> int:
        """Bytes per element of ``dtype``."""
        return DTYPE_BYTES[self.dtype]

    @property
    def kv_itemsize(self) -> int:
        """Bytes per element of the KV cache as stored: :attr:`itemsize`, or 1 for an fp8 cache."""
        return KV_DTYPE_BYTES[self.kv_dtype] if self.kv_dtype is not None else self.itemsize

    @property
    def is_kv_quantized(self) -> bool:
        """True when the cache holds quantized codes plus per-KV-head scales (:attr:`kv_dtype` set)."""
        return self.kv_dtype is not None

    @property
    def q_shape(self) -> tuple[int, int, int, int]:
        """``[batch, num_q_heads, q_len, head_dim]`` (also the output's shape)."""
        return (self.batch, self.num_q_heads, self.q_len, self.head_dim)

    @property
    def kv_shape(self) -> tuple[int, int, int, int]:
        """``[batch, num_kv_heads, kv_len, head_dim]`` for each of K and V."""
        return (self.batch, self.num_kv_heads, self.kv_len, self.head_dim)

    @property
    def tag(self) -> str:
        """Short, file-name-safe name from axis abbreviations (FlashInfer style), e.g.
        ``decode_b8_q1_kv8192_hq16_hkv4_d128_bf16_causal`` or ``..._causal_paged16_lognormal7_prefix512``."""
        tag = (
            f"{self.phase.value}_b{self.batch}_q{self.q_len}_kv{self.kv_len}_hq{self.num_q_heads}"
            f"_hkv{self.num_kv_heads}_d{self.head_dim}_{_DTYPE_SHORT[self.dtype]}_{self.mask.value}"
        )
        if self.kv_layout is KVLayout.PAGED:
            tag += f"_paged{self.page_size}"
        if self.kv_len_dist.drawn:
            tag += f"_{self.kv_len_dist}{self.kv_len_seed}"
        if self.shared_prefix_len:
            tag += f"_prefix{self.shared_prefix_len}"
        if self.seqs:
            tag += "_" + seqs_tag(self.seqs)
        if self.append:
            tag += "_append"
        if self.kv_dtype is not None:
            tag += f"_kv{_KV_DTYPE_SHORT[self.kv_dtype]}"
        if self.window is not None:
            tag += f"_w{self.window}"
        if self.cp_ranks > 1:
            tag += f"_cp{self.cp_ranks}{self.cp_scheme}"
        return tag

    @property
    def is_ragged(self) -> bool:
        """True when the call's sequences have different KV lengths: drawn ones (:attr:`kv_len_dist`, a uniform
        batch), or a variable-length call (:attr:`seqs`) whose sequences' ``kv_len`` differ. The one definition of
        "ragged" every layer uses."""
        return self.kv_len_dist.drawn or (bool(self.seqs) and len({k for _, k in self.seqs}) > 1)

    @property
    def is_varlen(self) -> bool:
        """True when the call gives per-sequence lengths (:attr:`seqs`)."""
        return bool(self.seqs)

    @property
    def is_packed(self) -> bool:
        """True for a *packed batch*: a variable-length train or prefill call on the dense layout whose every
        sequence is one whole document (``q_len == kv_len``, nothing cached), as documents of different lengths
        are packed into one token sequence with cumulative offsets (``docs=512+1024+256``). Attention stays inside
        each document (causal within it under ``mask=causal``); backends may run it on their own packed layout
        ``[Σ len, H, d]`` (:mod:`profattn.backends.packing`)."""
        return (self.is_varlen and self.phase in (Phase.TRAIN, Phase.PREFILL) and self.kv_layout is KVLayout.DENSE
                and all(q == k for q, k in self.seqs))

    @property
    def doc_offsets(self) -> tuple[int, ...]:
        """Cumulative query offsets ``(0, l0, l0 + l1, …, Σ l)`` of the call's sequences (``B + 1`` entries; the
        documents' token ranges of a packed batch). Example: ``docs=3+2`` → ``(0, 3, 5)``."""
        out = [0]
        for n in self.q_lens:
            out.append(out[-1] + n)
        return tuple(out)

    @property
    def q_lens(self) -> tuple[int, ...]:
        """Query length of every sequence (``q_len`` is the longest)."""
        return tuple(q for q, _ in self.seqs) if self.seqs else (self.q_len,) * self.batch

    @property
    def q_tokens(self) -> int:
        """Query rows per head in the call: ``Σ q_len_b`` (``B · Lq`` for a uniform call)."""
        return sum(self.q_lens)

    @property
    def kv_lens(self) -> tuple[int, ...]:
        """KV length of every sequence (``kv_len`` is the longest)."""
        if self.seqs:
            return tuple(k for _, k in self.seqs)
        if not self.kv_len_dist.drawn:  # without importing torch (profattn analyze does not need it)
            return (self.kv_len,) * self.batch
        from profattn.workload.paged import ragged_lengths

        return tuple(ragged_lengths(self.kv_len, self.batch, self.kv_len_dist, self.kv_len_seed))

    @property
    def window_starts(self) -> tuple[int, ...]:
        """First key each sequence's queries see (:func:`window_start`): all 0 without a window."""
        if self.window is None:
            return (0,) * self.batch
        return tuple(window_start(q, n, self.window) for q, n in zip(self.q_lens, self.kv_lens))

    @property
    def unique_kv_tokens(self) -> int:
        """Token slots of K (or V) the call reads, each physical slot once: a shared prefix counts once, and with a
        sliding window only the slots ``window_start_b … kv_len_b − 1`` (:attr:`window_starts`; shared prefix slots
        once if any sequence's window reaches them). Example: decode, B=2, kv 32768, window 4096 → 8192."""
        lens, p = self.kv_lens, self.shared_prefix_len
        starts = self.window_starts
        private = sum(n - max(lo, p) for lo, n in zip(starts, lens))
        return private + max(0, p - min(starts))

    @property
    def logical_kv_tokens(self) -> int:
        """Token slots every sequence reads, shared prefix counted per sequence: ``Σ (len_b − window_start_b)``
        (``Σ len_b`` without a window)."""
        return sum(n - lo for lo, n in zip(self.window_starts, self.kv_lens))

    # ---- arithmetic ledger ---------------------------------------------------------------------
    @property
    def attended_pairs(self) -> int:
        """(query, key) pairs computed per query head, summed over the batch, after the mask."""
        pairs = zip(self.q_lens, self.kv_lens)
        if self.mask is Mask.CAUSAL:
            return sum(causal_pairs(q, n, self.window) for q, n in pairs)
        return sum(q * n for q, n in pairs)

    @property
    def forward_flops(self) -> int:
        """Forward FLOPs: two matmuls (QKᵀ and PV), 2 FLOPs per multiply-add each, over the kept pairs.

        ``4 · B · Hq · pairs · d`` (FlashAttention-2 paper, Dao 2023, §4 benchmark FLOP count; the
        non-causal case is ``4·B·Hq·Lq·Lk·d``). Query heads, not KV heads: GQA does not reduce this work.
        Softmax exponentials are not counted, as in the paper.
        """
        return 4 * self.num_q_heads * self.attended_pairs * self.head_dim

    def flops_for_pairs(self, pairs: int) -> int:
        """FLOPs of one call in this phase had it computed ``pairs`` (query, key) pairs per query head instead of
        :attr:`attended_pairs` (the same rule as :attr:`flops`: ``4 · Hq · pairs · d``, plus 2.5× that for train),
        e.g. the pairs a backend that pads a variable-length call executes (``CellResult.executed_pairs``)."""
        fwd = 4 * self.num_q_heads * pairs * self.head_dim
        return fwd + fwd * 5 // 2 if self.phase is Phase.TRAIN else fwd

    @property
    def dequant_ops(self) -> int:
        """Dequantization work of a quantized cache, apart from :attr:`flops`: one multiply (code · scale) per
        K and V element loaded, ``2 · Σ kv_len_b · Hkv · d`` (each sequence's keys, a shared prefix counted per
        sequence, as a decode kernel loads them; GQA: once per KV head, not per query head); 0 without
        :attr:`kv_dtype`. A kernel that folds the scales into the softmax scale and the output (ours) does far
        fewer multiplies; this is the unfolded count."""
        if not self.is_kv_quantized:
            return 0
        return 2 * self.logical_kv_tokens * self.num_kv_heads * self.head_dim

    @property
    def backward_flops(self) -> int:
        """Backward FLOPs = 2.5 × forward (five matmuls against two; FlashAttention-2 paper, §4)."""
        return self.forward_flops * 5 // 2

    @property
    def flops(self) -> int:
        """FLOPs of one call in this phase: forward, plus backward when ``phase == train``."""
        if self.phase is Phase.TRAIN:
            return self.forward_flops + self.backward_flops
        return self.forward_flops

    # ---- byte ledger ---------------------------------------------------------------------------
    def traffic(self) -> tuple[TensorTraffic, ...]:
        """Minimum DRAM traffic of one attention call, as a ledger: each input read once, each output written once.

        Forward: Q, K, V read; O written. Train adds what a FlashAttention-style backward must move
        (FlashAttention-2 paper, Algorithm 2): the forward's log-sum-exp (fp32, ``[B, Hq, Lq]``) written
        then read; Q, K, V, O, dO read; dQ, dK, dV written. K/V (and dK/dV) use Hkv heads, not Hq.
        Writing new tokens into the KV cache is not the attention kernel's: see :meth:`append_traffic`.
        A quantized cache (:attr:`kv_dtype`) counts K/V at :attr:`kv_itemsize` (1 byte for fp8) and its scales as
        separate lines, ``k_scale`` and ``v_scale`` (fp32 ``[Hkv]``, read once).
        Paged: K and V count the unique token slots (a shared prefix once; ``[tokens, Hkv, d]``), plus the
        block table (int32, one entry per page in use) and sequence lengths read once. A variable-length call
        counts each sequence exactly: Q and O as ``[Σ q_len_b, Hq, d]``, K/V as ``Σ kv_len_b`` token slots
        (a packed / paged layout; padding a backend adds is its own waste, not part of this minimum), plus
        the per-sequence query offsets (int32, B + 1; read by the forward and again by a training call's
        backward). A sliding window reads only the keys inside some row's
        window (:attr:`window_starts`; the block table's entries for the pages they lie on); training still
        writes dK/dV whole (zero outside the windows).
        """
        s, ks = self.itemsize, self.kv_itemsize
        q: tuple[int, ...] = self.q_shape
        kv: tuple[int, ...] = self.kv_shape
        if self.seqs:
            q = (self.q_tokens, self.num_q_heads, self.head_dim)
            kv = (sum(self.kv_lens), self.num_kv_heads, self.head_dim)
        grads_kv = kv
        if self.window is not None:
            kv = (self.logical_kv_tokens, self.num_kv_heads, self.head_dim)
        if self.kv_layout is KVLayout.PAGED:
            kv = (self.unique_kv_tokens, self.num_kv_heads, self.head_dim)
        fwd = [
            TensorTraffic("Q", q, s, reads=1),
            TensorTraffic("K", kv, ks, reads=1, kv=True),
            TensorTraffic("V", kv, ks, reads=1, kv=True),
            TensorTraffic("O", q, s, writes=1),
        ]
        if self.is_kv_quantized:
            fwd += [TensorTraffic("k_scale", (self.num_kv_heads,), 4, reads=1),
                    TensorTraffic("v_scale", (self.num_kv_heads,), 4, reads=1)]
        if self.kv_layout is KVLayout.PAGED:
            fwd.append(TensorTraffic("block_table", (self.pages_in_use,), 4, reads=1))
            fwd.append(TensorTraffic("seq_lens", (self.batch,), 4, reads=1))
        if self.seqs:
            fwd.append(TensorTraffic("q_offsets", (self.batch + 1,), 4, reads=1))
        if self.phase is not Phase.TRAIN:
            return tuple(fwd)
        lse = (self.num_q_heads, self.q_tokens)
        # the backward reads the query offsets again (FlashAttention-2's varlen backward takes cu_seqlens)
        offsets = (TensorTraffic("q_offsets", (self.batch + 1,), 4, reads=2),) if self.seqs else ()
        return offsets + (
            TensorTraffic("Q", q, s, reads=2),
            TensorTraffic("K", kv, s, reads=2, kv=True),
            TensorTraffic("V", kv, s, reads=2, kv=True),
            TensorTraffic("O", q, s, reads=1, writes=1),
            TensorTraffic("LSE", lse, 4, reads=1, writes=1),
            TensorTraffic("dO", q, s, reads=1),
            TensorTraffic("dQ", q, s, writes=1),
            TensorTraffic("dK", grads_kv, s, writes=1, kv=True),
            TensorTraffic("dV", grads_kv, s, writes=1, kv=True),
        )

    @property
    def pages_in_use(self) -> int:
        """Block-table entries the call reads (paged layout): ``Σ ⌈kv_len_b / page_size⌉``; with a sliding window
        only the pages its window touches, ``Σ (⌈kv_len_b / page_size⌉ − ⌊window_start_b / page_size⌋)``; 0 for a
        dense cache. Example: kv 100, window 40, page 16 → keys 60…99 on pages 3…6: 4."""
        if self.kv_layout is not KVLayout.PAGED:
            return 0
        ps = self.page_size
        return sum(-(-n // ps) - lo // ps for lo, n in zip(self.window_starts, self.kv_lens))  # type: ignore[operator]

    def append_traffic(self) -> tuple[TensorTraffic, ...]:
        """The cache append's minimum traffic (empty unless :attr:`append`): the new tokens' K and V
        (``[Σ q_len_b, Hkv, d]`` each) read once and written once into their cache slots, and the slot of every
        new token (int64, as vLLM's ``reshape_and_cache`` takes its ``slot_mapping``) read once."""
        if not self.append:
            return ()
        new = (self.q_tokens, self.num_kv_heads, self.head_dim)
        return (
            TensorTraffic("K_new", new, self.itemsize, reads=1, writes=1, kv=True),
            TensorTraffic("V_new", new, self.itemsize, reads=1, writes=1, kv=True),
            TensorTraffic("slot_mapping", (self.q_tokens,), 8, reads=1),
        )

    @property
    def append_bytes(self) -> int:
        """Total bytes of :meth:`append_traffic` (0 without ``append``)."""
        return sum(t.bytes_total for t in self.append_traffic())

    @property
    def requested_bytes(self) -> int:
        """Total bytes of :meth:`traffic` (reads + writes) for one call."""
        return sum(t.bytes_total for t in self.traffic())

    @property
    def kv_bytes(self) -> int:
        """Unique K and V bytes read by one forward: ``2 · tokens · Hkv · d · kv_itemsize`` with
        ``tokens = B · Lk`` for a dense uniform cache, or the unique token slots of a paged one (a quantized
        cache's scales are not included: see :meth:`traffic`)."""
        return 2 * self.unique_kv_tokens * self.num_kv_heads * self.head_dim * self.kv_itemsize

    @property
    def logical_kv_bytes(self) -> int:
        """K and V bytes as every sequence sees them (shared prefix counted per sequence)."""
        return 2 * self.logical_kv_tokens * self.num_kv_heads * self.head_dim * self.kv_itemsize

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per requested byte (FLOP/B): places the call on a roofline."""
        return self.flops / self.requested_bytes

    @property
    def input_bytes(self) -> int:
        """Bytes of the call's own inputs: Q, K, V (plus dO for train); a paged pool holds as many K/V bytes.
        Dense tensors of a variable-length call are padded to the longest sequence (the harness builds
        ``[B, H, L_max, d]`` tensors; the packed minimum is in :meth:`traffic`)."""
        q = self.batch * self.num_q_heads * self.q_len * self.head_dim * self.itemsize
        kv = 2 * self.batch * self.num_kv_heads * self.kv_len * self.head_dim * self.itemsize
        return q + kv + (q if self.phase is Phase.TRAIN else 0)

    @property
    def tokens_per_call(self) -> int:
        """Tokens one call processes: ``Σ q_len_b`` (``B · Lq``; decode: ``B`` new tokens per step)."""
        return self.q_tokens

    def with_(self, **changes: object) -> "Workload":
        """A copy with ``changes`` applied (validated again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready fields plus derived numbers (for results.json)."""
        return {
            "phase": self.phase.value,
            "batch": self.batch,
            "q_len": self.q_len,
            "kv_len": self.kv_len,
            "num_q_heads": self.num_q_heads,
            "num_kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "dtype": self.dtype,
            "mask": self.mask.value,
            "kv_layout": self.kv_layout.value,
            "page_size": self.page_size,
            "kv_len_dist": self.kv_len_dist.value,
            "kv_len_seed": self.kv_len_seed,
            "shared_prefix_len": self.shared_prefix_len,
            "seqs": [list(p) for p in self.seqs],
            "append": self.append,
            "kv_dtype": self.kv_dtype,
            "dequant_ops": self.dequant_ops,
            "window": self.window,
            "cp_ranks": self.cp_ranks,
            "cp_scheme": self.cp_scheme.value if self.cp_scheme is not None else None,
            "kv_lens": list(self.kv_lens),
            "logical_kv_bytes": self.logical_kv_bytes,
            "tag": self.tag,
            "group_size": self.group_size,
            "flops": self.flops,
            "requested_bytes": self.requested_bytes,
            "kv_bytes": self.kv_bytes,
            "arithmetic_intensity": self.arithmetic_intensity,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> "Workload":
        """Inverse of :meth:`to_dict` (derived keys ignored; files without ``kv_dtype`` read as None,
        without ``cp_ranks`` as one process).

        Raises:
            WorkloadError: a shape field missing, ``seqs`` not a list of pairs, or any invalid value.
        """
        missing = [k for k in ("phase", "batch", "q_len", "kv_len", "num_q_heads", "num_kv_heads", "head_dim")
                   if k not in data]
        if missing:
            raise WorkloadError(f"workload fields missing: {', '.join(missing)}")
        fields_ = ("phase", "batch", "q_len", "kv_len", "num_q_heads", "num_kv_heads", "head_dim", "dtype", "mask",
                   "kv_layout", "page_size", "kv_len_dist", "kv_len_seed", "shared_prefix_len", "append", "kv_dtype", "window",
                   "cp_ranks", "cp_scheme")
        values = {k: data[k] for k in fields_ if k in data}
        seqs = data.get("seqs") or ()
        if not isinstance(seqs, (list, tuple)) or any(not isinstance(p, (list, tuple)) for p in seqs):
            raise WorkloadError(f"seqs must be a list of [q_len, kv_len] pairs, got {seqs!r}")
        return cls(**values, seqs=tuple(tuple(p) for p in seqs))  # type: ignore[arg-type]
