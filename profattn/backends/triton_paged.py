"""Our decode kernel: split-KV flash-decoding over a paged KV cache, in Triton, with GQA reuse.

Schedule (Dao et al., "Flash-Decoding for long-context inference", 2023; the split-KV scheme of
flash-attn's ``flash_fwd_splitkv_kernel`` and FlashInfer's decode kernels):

* ``_paged_decode_split_kernel`` — one program per (sequence, KV head, split). It loads the query rows of
  the whole GQA group (``Hq / Hkv`` rows, padded to 16 for the tensor-core dot), walks its split's tokens
  ``BLOCK_N`` at a time, translating each token's logical position to a physical page through the block
  table, loads each K/V tile **once for the whole group**, keeps the running max and sum in fp32
  (online softmax, Milakov & Gimelshein 2018), and writes the split's normalised partial output and its
  log-sum-exp. With one split it writes the final output directly and no combine runs.
* ``_paged_decode_combine_kernel`` — one program per (sequence, query head): rescales the splits'
  partial outputs by ``exp(lse_s − max lse)`` and sums them.

Split rule (:func:`choose_num_splits`): decode at the seed shape has only ``B·Hkv = 32`` (sequence, KV
head) pairs for 132 SMs, so the KV sequence is split until there are about ``CTAS_PER_SM × SMs`` programs,
but never into splits shorter than ``MIN_BLOCKS_PER_SPLIT × BLOCK_N`` tokens (a split must stream
enough bytes to hide its start-up latency and pay for its share of the combine).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from profattn.backends.base import AttentionInputs, Prepared, Unsupported, paged_decode_reason, paged_only_forward
from profattn.backends.triton_append import bind_paged_append, kernel_launch
from profattn.families import TRITON
from profattn.workload.paged import dequantize
from profattn.workload import Workload

# Defaults chosen on the H200 by ``benchmarks/decode_paged.py --tune`` (NOTES.md has the table):
#: Tokens per inner-loop tile (one tl.dot of ``[16, d] × [d, BLOCK_N]``).
BLOCK_N = 32
#: Programs per SM the split rule aims for (4 hides the DRAM latency of the page-table → K/V chain).
CTAS_PER_SM = 4
#: Shortest split, in tiles.
MIN_BLOCKS_PER_SPLIT = 2
NUM_WARPS = 4
NUM_STAGES = 3
#: How the splits are combined: "separate" (a second kernel) or "fused" (the last-arriving split program
#: combines; one launch, measured 2-5 µs slower on the H200, NOTES.md). The backend reads
#: ``$PROFATTN_PAGED_COMBINE`` (:func:`combine_setting`) so a run can review the other schedule.
COMBINE = "separate"
#: An FP8 cache's tile and warps (:func:`fp8_launch`): the codes are half the bytes, so a 64-token tile streams what
#: a 32-token bf16 tile does; two warps keep the 108-register FP8 path at 4 programs per SM. Chosen on the H200
#: (NOTES.md, "FP8 decode": 32.2 µs vs 38.8 µs for the bf16 defaults at the seed's kv 8192).
FP8_BLOCK_N = 64
FP8_NUM_WARPS = 2
COMBINE_ENV = "PROFATTN_PAGED_COMBINE"


@dataclass(frozen=True)
class SplitPlan:
    """How the KV sequence is split: ``num_splits`` splits of ``tokens_per_split`` tokens (a multiple of
    ``block_n``); ``ctas`` = programs of the split kernel."""

    num_splits: int
    tokens_per_split: int
    block_n: int
    ctas: int


def choose_num_splits(*, batch: int, num_kv_heads: int, max_kv_len: int, num_sms: int,
                      block_n: int = BLOCK_N, ctas_per_sm: int = CTAS_PER_SM,
                      min_blocks_per_split: int = MIN_BLOCKS_PER_SPLIT) -> SplitPlan:
    """The split-KV plan for a decode step (see module docstring).

    ``splits = min(ceil(ctas_per_sm·SMs / (B·Hkv)), ceil(blocks / min_blocks_per_split))``, at least 1,
    with ``blocks = ceil(max_kv_len / block_n)``; tokens per split are then rounded up to whole tiles and
    the split count recomputed so no split is empty for the longest sequence.
    Examples (132 SMs, defaults: 32-token tiles, 4 CTAs per SM, at least 2 tiles per split):
    B=8, Hkv=4, kv 8192 → 16 splits of 512 tokens (512 CTAs); kv 512 → 8 splits of 64 (256 CTAs);
    B=64, Hkv=4, kv 8192 → 3 splits of 2752 (768 CTAs); B=1, Hkv=4, kv 100 → 2 splits of 64.
    """
    pairs = batch * num_kv_heads
    blocks = max(1, math.ceil(max_kv_len / block_n))
    want = max(1, math.ceil(ctas_per_sm * num_sms / pairs))
    cap = max(1, math.ceil(blocks / min_blocks_per_split))
    splits = min(want, cap)
    blocks_per_split = math.ceil(blocks / splits)
    splits = math.ceil(blocks / blocks_per_split)
    return SplitPlan(splits, blocks_per_split * block_n, block_n, pairs * splits)


def _kernels():
    """Define the Triton kernels on first use (Triton is imported lazily: CPU installs may lack it)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _paged_decode_split_kernel(
        Q, K, V, BlockTable, SeqLens, Out, OutPartial, LsePartial,
        qk_scale_log2,
        stride_qb, stride_qh,
        stride_kp, stride_kt, stride_kh,
        stride_vp, stride_vt, stride_vh,
        stride_bt,
        stride_ob, stride_oh,
        stride_pb, stride_ph, stride_ps,
        stride_lb, stride_lh,
        tokens_per_split, num_splits, Arrivals, KScale, VScale, window,
        GROUP: tl.constexpr, BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
        PAGE_SIZE: tl.constexpr, DIRECT: tl.constexpr, PREFETCH: tl.constexpr, FUSED: tl.constexpr,
        KV_QUANT: tl.constexpr, DOT_F16: tl.constexpr,
    ):
        b = tl.program_id(0)
        kvh = tl.program_id(1)
        split = tl.program_id(2)
        seq_len = tl.load(SeqLens + b)
        # A sliding window (window > 0) starts the key loop at the window's first key: the pages before it
        # are never read, and the splits share only the window's tokens.
        lo = tl.where(window > 0, tl.maximum(seq_len - window, 0), 0)
        start = lo + split * tokens_per_split
        end = tl.minimum(start + tokens_per_split, seq_len)

        offs_g = tl.arange(0, BLOCK_G)
        offs_d = tl.arange(0, HEAD_DIM)
        g_mask = offs_g < GROUP
        qh = kvh * GROUP + offs_g
        q = tl.load(Q + b * stride_qb + qh[:, None] * stride_qh + offs_d[None, :], mask=g_mask[:, None], other=0.0)
        qk_scale = qk_scale_log2
        if KV_QUANT:
            # FP8 codes times this KV head's scale: k_scale folds into the softmax scale (one multiply per score,
            # not per loaded element), v_scale into the output after the loop; the codes convert exactly to
            # q's 16-bit dtype for the tensor-core dot.
            qk_scale = qk_scale_log2 * tl.load(KScale + kvh)
            if DOT_F16:  # e4m3 -> fp16 is one hardware cvt per pair on sm_89+ (e4m3 -> bf16 is a longer sequence)
                q = q.to(tl.float16)

        m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
        acc = tl.zeros([BLOCK_G, HEAD_DIM], dtype=tl.float32)
        bt_row = BlockTable + b * stride_bt
        offs_tile = tl.arange(0, BLOCK_N)
        # Page ids of the first tile; inside the loop the next tile's ids are loaded while this tile's
        # K/V stream in, so the block-table lookup never sits between two tiles (software prefetch).
        page = tl.load(bt_row + (start + offs_tile) // PAGE_SIZE, mask=(start + offs_tile) < end, other=0).to(tl.int64)
        for n0 in range(start, end, BLOCK_N):
            offs_n = n0 + offs_tile
            n_mask = offs_n < end
            slot = offs_n % PAGE_SIZE
            k = tl.load(K + page[:, None] * stride_kp + slot[:, None] * stride_kt + kvh * stride_kh + offs_d[None, :],
                        mask=n_mask[:, None], other=0.0)
            v = tl.load(V + page[:, None] * stride_vp + slot[:, None] * stride_vt + kvh * stride_vh + offs_d[None, :],
                        mask=n_mask[:, None], other=0.0)
            if KV_QUANT:  # FP8 codes convert exactly to fp16 / bf16
                k = k.to(q.dtype)
                v = v.to(q.dtype)
            nxt = offs_n + BLOCK_N
            if PREFETCH:
                page = tl.load(bt_row + nxt // PAGE_SIZE, mask=nxt < end, other=0).to(tl.int64)
            s = tl.dot(q, tl.trans(k)) * qk_scale  # [BLOCK_G, BLOCK_N], log2 domain
            s = tl.where(n_mask[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
            if not PREFETCH:
                page = tl.load(bt_row + nxt // PAGE_SIZE, mask=nxt < end, other=0).to(tl.int64)

        has = l_i > 0
        out = acc / tl.where(has, l_i, 1.0)[:, None]
        if KV_QUANT:  # every split of this KV head shares the scale, so the combine's weighted mean keeps it
            out = out * tl.load(VScale + kvh)
        if DIRECT:
            tl.store(Out + b * stride_ob + qh[:, None] * stride_oh + offs_d[None, :], out.to(Out.dtype.element_ty),
                     mask=g_mask[:, None])
        else:
            lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))  # log2 domain
            tl.store(OutPartial + b * stride_pb + qh[:, None] * stride_ph + split * stride_ps + offs_d[None, :], out,
                     mask=g_mask[:, None])
            tl.store(LsePartial + b * stride_lb + qh * stride_lh + split, lse, mask=g_mask)
            if FUSED:
                # Last-arriving program of this (sequence, KV head) combines all splits (the threadfence-
                # reduction pattern of the CUDA samples): every thread's stores are ordered before the
                # counter increment by the barrier and the atomic's release; the acquire lets the last
                # program read the other programs' partials (loaded .cg: from L2, never a stale L1 line).
                tl.debug_barrier()
                counter = Arrivals + b * tl.num_programs(1) + kvh
                arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
                if arrived == num_splits - 1:
                    m_all = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
                    for s_i in range(0, num_splits):
                        ls = tl.load(LsePartial + b * stride_lb + qh * stride_lh + s_i, mask=g_mask,
                                     other=float("-inf"), cache_modifier=".cg")
                        m_all = tl.maximum(m_all, ls)
                    m_safe = tl.where(m_all > float("-inf"), m_all, 0.0)
                    num = tl.zeros([BLOCK_G, HEAD_DIM], dtype=tl.float32)
                    den = tl.zeros([BLOCK_G], dtype=tl.float32)
                    for s_i in range(0, num_splits):
                        ls = tl.load(LsePartial + b * stride_lb + qh * stride_lh + s_i, mask=g_mask,
                                     other=float("-inf"), cache_modifier=".cg")
                        w = tl.where(ls > float("-inf"), tl.exp2(ls - m_safe), 0.0)
                        o_s = tl.load(OutPartial + b * stride_pb + qh[:, None] * stride_ph + s_i * stride_ps
                                      + offs_d[None, :], mask=g_mask[:, None], other=0.0, cache_modifier=".cg")
                        num += o_s * w[:, None]
                        den += w
                    final = num / tl.where(den > 0, den, 1.0)[:, None]
                    tl.store(Out + b * stride_ob + qh[:, None] * stride_oh + offs_d[None, :],
                             final.to(Out.dtype.element_ty), mask=g_mask[:, None])
                    tl.atomic_xchg(counter, 0)  # re-arm for the next step (CUDA-graph replays reuse it)

    @triton.jit
    def _paged_decode_combine_kernel(
        OutPartial, LsePartial, Out, num_splits,
        stride_pb, stride_ph, stride_ps, stride_lb, stride_lh, stride_ob, stride_oh,
        HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr,
    ):
        b = tl.program_id(0)
        h = tl.program_id(1)
        offs_s = tl.arange(0, BLOCK_S)
        offs_d = tl.arange(0, HEAD_DIM)
        s_mask = offs_s < num_splits
        lse = tl.load(LsePartial + b * stride_lb + h * stride_lh + offs_s, mask=s_mask, other=float("-inf"))
        m = tl.max(lse, 0)
        w = tl.where(s_mask & (lse > float("-inf")), tl.exp2(lse - m), 0.0)
        o = tl.load(OutPartial + b * stride_pb + h * stride_ph + offs_s[:, None] * stride_ps + offs_d[None, :],
                    mask=s_mask[:, None], other=0.0)
        out = tl.sum(o * w[:, None], 0) / tl.sum(w, 0)
        tl.store(Out + b * stride_ob + h * stride_oh + offs_d, out.to(Out.dtype.element_ty))

    return _paged_decode_split_kernel, _paged_decode_combine_kernel


_KERNELS = None


def paged_decode(q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor, block_table: torch.Tensor,
                 seq_lens: torch.Tensor, *, max_kv_len: int, num_sms: int, scale: float | None = None,
                 plan: SplitPlan | None = None, workspace: dict | None = None,
                 num_warps: int = NUM_WARPS, num_stages: int = NUM_STAGES, prefetch: bool = True,
                 combine: str | None = None, k_scale: torch.Tensor | None = None,
                 v_scale: torch.Tensor | None = None, window: int | None = None,
                 fp8_dot: str = "float16") -> torch.Tensor:
    """Decode attention over a paged KV cache.

    Args:
        q: ``[batch, num_q_heads, head_dim]`` (one new token per sequence).
        k_pages, v_pages: ``[num_pages, page_size, num_kv_heads, head_dim]`` (NHD pages).
        block_table: ``[batch, max_pages_per_seq]`` int32.
        seq_lens: ``[batch]`` int32, each ≥ 1 and ≤ ``max_kv_len``.
        max_kv_len: the longest sequence (host-side int: sizes the split plan without a device sync).
        num_sms: SMs of the device (for :func:`choose_num_splits`).
        scale: softmax scale, default ``1/sqrt(head_dim)``.
        plan: a precomputed :class:`SplitPlan` (else chosen here; its ``block_n`` is the tile size).
        workspace: a dict reused across calls for the fp32 partial buffers and the arrival counters
            (keeps CUDA-graph replays allocation-free).
        combine: ``"fused"`` (the last-arriving split program combines; one launch) or ``"separate"``
            (a second combine kernel); default :data:`COMBINE`.
        k_scale, v_scale: for ``torch.float8_e4m3fn`` pages (FP8 codes), fp32 ``[num_kv_heads]`` scales: a value is
            ``code · scale``. The kernel loads the codes, converts them (exactly) to the dot's dtype and applies the
            scales folded — ``k_scale`` into the softmax scale, ``v_scale`` into the output — which equals
            dequantizing every loaded element (the ledger's ``dequant_ops``) in exact arithmetic.
        fp8_dot: the FP8 path's dot dtype: ``"float16"`` (default: e4m3 → fp16 is one hardware conversion per pair
            of codes on sm_89+, and q is converted to fp16 once — exact for |q| ≤ 65,504 and above fp16's subnormal
            range, so a bf16 query beyond fp16's range would overflow) or ``"query"`` (q's own dtype; bf16 takes a
            longer conversion sequence: 44.3 vs 38.8 µs at the seed's kv 8192 on the H200).
        window: sliding window: each sequence attends its last ``window`` keys only, its key loop starting at
            ``max(0, seq_len − window)`` (pages before it are not read); the split plan then covers
            ``min(max_kv_len, window)`` tokens. None: every key.

    Returns:
        ``[batch, num_q_heads, head_dim]`` in q's dtype.

    Raises:
        ValueError: head_dim not a power of two ≥ 16, Hq not a multiple of Hkv, an unknown ``combine``, FP8
            pages without ``[num_kv_heads]`` scales (or scales beside pages that are not FP8), a window below 1, or an
            unknown ``fp8_dot``.
    """
    global _KERNELS
    if _KERNELS is None:
        _KERNELS = _kernels()
    split_kernel, combine_kernel = _KERNELS
    batch, hq, d = q.shape
    _, page_size, hkv, d_k = k_pages.shape
    if d != d_k or d < 16 or d & (d - 1):
        raise ValueError(f"head_dim must be a power of two >= 16 and match the cache, got q {d}, cache {d_k}")
    if hq % hkv:
        raise ValueError(f"num_q_heads {hq} is not a multiple of num_kv_heads {hkv}")
    group = hq // hkv
    quant = k_pages.dtype == torch.float8_e4m3fn
    if quant != (k_scale is not None and v_scale is not None) or (v_pages.dtype == torch.float8_e4m3fn) != quant:
        raise ValueError("FP8 (float8_e4m3fn) K and V pages need k_scale and v_scale, and only they take scales")
    if quant and (tuple(k_scale.shape) != (hkv,) or tuple(v_scale.shape) != (hkv,)):
        raise ValueError(f"k_scale and v_scale must be [num_kv_heads] = [{hkv}]")
    if window is not None and window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if fp8_dot not in ("float16", "query"):
        raise ValueError(f"fp8_dot must be 'float16' or 'query', got {fp8_dot!r}")
    span = max_kv_len if window is None else min(max_kv_len, window)
    plan = plan or choose_num_splits(batch=batch, num_kv_heads=hkv, max_kv_len=span, num_sms=num_sms)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = torch.empty_like(q)
    ws = workspace if workspace is not None else {}
    direct = plan.num_splits == 1
    key = (batch, hq, hkv, plan.num_splits, d, q.device)
    if ws.get("key") != key:
        ws["key"] = key
        ws["partial"] = torch.empty((batch, hq, max(plan.num_splits, 1), d), dtype=torch.float32, device=q.device)
        ws["lse"] = torch.empty((batch, hq, max(plan.num_splits, 1)), dtype=torch.float32, device=q.device)
        ws["arrivals"] = torch.zeros((batch * hkv,), dtype=torch.int32, device=q.device)
    partial, lse, arrivals = ws["partial"], ws["lse"], ws["arrivals"]
    combine = COMBINE if combine is None else combine
    if combine not in ("fused", "separate"):
        raise ValueError(f"combine must be 'fused' or 'separate', got {combine!r}")
    fused = combine == "fused" and not direct
    block_g = max(16, 1 << (group - 1).bit_length())
    kernel_launch(split_kernel, (batch, hkv, plan.num_splits), q.device)(
        q, k_pages, v_pages, block_table, seq_lens, out, partial, lse,
        scale * 1.4426950408889634,  # log2(e): the kernel works in base 2 (exp2)
        q.stride(0), q.stride(1),
        k_pages.stride(0), k_pages.stride(1), k_pages.stride(2),
        v_pages.stride(0), v_pages.stride(1), v_pages.stride(2),
        block_table.stride(0),
        out.stride(0), out.stride(1),
        partial.stride(0), partial.stride(1), partial.stride(2),
        lse.stride(0), lse.stride(1),
        plan.tokens_per_split, plan.num_splits, arrivals,
        k_scale if quant else seq_lens, v_scale if quant else seq_lens,  # unread without KV_QUANT
        0 if window is None else window,
        GROUP=group, BLOCK_G=block_g, HEAD_DIM=d, BLOCK_N=plan.block_n, PAGE_SIZE=page_size, DIRECT=direct,
        PREFETCH=prefetch, FUSED=fused, KV_QUANT=quant, DOT_F16=quant and fp8_dot == "float16",
        num_warps=num_warps, num_stages=num_stages,
    )
    if not direct and not fused:
        kernel_launch(combine_kernel, (batch, hq), q.device)(
            partial, lse, out, plan.num_splits,
            partial.stride(0), partial.stride(1), partial.stride(2), lse.stride(0), lse.stride(1),
            out.stride(0), out.stride(1),
            HEAD_DIM=d, BLOCK_S=max(2, 1 << (plan.num_splits - 1).bit_length()),
            num_warps=4,
        )
    return out


def triton_available(device: torch.device) -> str | None:
    """None if Triton can run on ``device``, else why not (CPU needs ``TRITON_INTERPRET=1``)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed"
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return "Triton kernels run on CUDA (on a CPU, only under TRITON_INTERPRET=1)"
    return None


def interpreter_dtype(device: torch.device, dtype: str) -> str:
    """The dtype a Triton kernel runs in: ``dtype``, except ``float16`` for ``bfloat16`` under Triton's CPU
    interpreter, whose bf16 ``tl.dot`` gives wrong results (relative errors ~1e9 seen with triton 3.6) —
    the kernel is then checked in fp16, and the cell says so, instead of being blamed for the interpreter."""
    if dtype == "bfloat16" and device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        return "float16"
    return dtype


#: Environment variable that overrides :data:`CTAS_PER_SM` for the split rule (e.g. ``1``: about one program
#: per SM, so 5 splits instead of 16 at the seed's kv 8192) — a real schedule change to review with
#: ``profattn compare``; the cell's notes record it.
CTAS_PER_SM_ENV = "PROFATTN_PAGED_CTAS_PER_SM"


def ctas_per_sm_setting() -> int:
    """:data:`CTAS_PER_SM`, or ``$PROFATTN_PAGED_CTAS_PER_SM`` when set.

    Raises:
        Unsupported: the variable is not a positive integer (the cell says why; the run goes on).
    """
    raw = os.environ.get(CTAS_PER_SM_ENV)
    if raw is None or not raw.strip():
        return CTAS_PER_SM
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise Unsupported(f"${CTAS_PER_SM_ENV}={raw!r} is not a positive integer")
    return value


def combine_setting() -> str:
    """:data:`COMBINE`, or ``$PROFATTN_PAGED_COMBINE`` when set.

    Raises:
        Unsupported: the variable is neither ``fused`` nor ``separate`` (the cell says why; the run goes on).
    """
    raw = (os.environ.get(COMBINE_ENV) or "").strip()
    if not raw:
        return COMBINE
    if raw not in ("fused", "separate"):
        raise Unsupported(f"${COMBINE_ENV}={raw!r} is neither 'fused' nor 'separate'")
    return raw


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132  # interpreter runs: plan as for the H200 so CPU tests exercise the same split counts


class TritonPagedDecode:
    """``triton-paged-decode``: our split-KV paged decode kernel (see module docstring); an appending decode
    step writes its new K/V with our Triton append (:func:`~profattn.backends.triton_append.bind_paged_append`)."""

    name = "triton-paged-decode"
    family = TRITON
    description = "ours: Triton split-KV flash-decoding over the paged cache, one program per (seq, KV head, split) for the whole GQA group"
    #: Takes per-sequence KV lengths of a decode step (one query each; it reads ``seq_lens``) and appending calls.
    varlen = True
    #: Reads an FP8 E4M3 cache with per-KV-head scales (dequantized in registers, scales folded).
    kv_dtypes = ("float8_e4m3fn",)

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        reason = paged_decode_reason(workload)
        if reason:
            return reason
        d = workload.head_dim
        if d < 16 or d & (d - 1):
            return f"head_dim {d} is not a power of two >= 16"
        return triton_available(device)

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        sms = _num_sms(device)
        ctas_per_sm = ctas_per_sm_setting()
        combine = combine_setting()
        window = workload.window
        span = workload.kv_len if window is None else min(workload.kv_len, window)  # tokens one sequence reads
        quant = workload.is_kv_quantized
        block_n, num_warps = (FP8_BLOCK_N, FP8_NUM_WARPS) if quant else (BLOCK_N, NUM_WARPS)
        plan = choose_num_splits(batch=workload.batch, num_kv_heads=workload.num_kv_heads,
                                 max_kv_len=span, num_sms=sms, ctas_per_sm=ctas_per_sm, block_n=block_n)
        workspace: dict = {}

        run_dtype = interpreter_dtype(device, workload.dtype)

        def bind(inputs: AttentionInputs):
            cache = inputs.paged
            q, k_pages, v_pages = inputs.q[:, :, 0, :], cache.k_pages, cache.v_pages
            out_dtype = q.dtype
            if run_dtype != workload.dtype:  # cast once, outside the timed call (FP8 codes stay FP8)
                cast = getattr(torch, run_dtype)
                q = q.to(cast)
                if not workload.is_kv_quantized:
                    k_pages, v_pages = k_pages.to(cast), v_pages.to(cast)

            def call() -> torch.Tensor:
                return paged_decode(q, k_pages, v_pages, cache.block_table, cache.seq_lens,
                                    max_kv_len=workload.kv_len, num_sms=sms, plan=plan, workspace=workspace,
                                    combine=combine, k_scale=cache.k_scale, num_warps=num_warps,
                                    v_scale=cache.v_scale, window=window).unsqueeze(2).to(out_dtype)

            return call

        interp_note = (f"ran in {run_dtype} under TRITON_INTERPRET=1 (the interpreter's bf16 dot is wrong); "
                       "output cast back to bfloat16",) if run_dtype != workload.dtype else ()
        append_note = ("cache append: ours, one Triton launch for K and V (triton_append.paged_append)",) if workload.append else ()
        fp8_note = ("FP8 E4M3 pages loaded as codes, converted in registers to fp16 (q too) for the tensor-core dots; "
                    "per-KV-head k_scale folded into the softmax scale, v_scale into the output",) if quant else ()
        if window is not None:
            append_note += (f"sliding window of {window} keys: each sequence's key loop starts at max(0, kv_len − "
                            f"{window}), so only the window's pages are read; the split plan covers {span:,} tokens",)
        return Prepared(forward=paged_only_forward, bind=bind, bind_append=bind_paged_append, notes=interp_note + append_note + fp8_note + (
            f"split plan: {plan.num_splits} splits x {plan.tokens_per_split} tokens, {plan.ctas} CTAs "
            f"(BLOCK_N {plan.block_n}, {num_warps} warps, {NUM_STAGES} stages, split rule aims at {ctas_per_sm} CTAs per SM"
            + (f" from ${CTAS_PER_SM_ENV}" if ctas_per_sm != CTAS_PER_SM else "") + ")",
            f"split combine: {'last-arriving split program (one launch)' if combine == 'fused' else 'second kernel'}"
            + (f" from ${COMBINE_ENV}" if combine != COMBINE else ""),
        ))


class TorchPagedReference:
    """``torch-paged-reference``: gather the pages through the block table in PyTorch, then SDPA.

    The correctness reference for paged kernels and the "address translation done in PyTorch" baseline.
    Decode (one query per sequence): every call materialises a dense ``[B, Hkv, max_len, d]`` copy of the
    cache (index kernels), then runs SDPA once (default kernel choice, GQA native; a boolean key-padding mask
    when lengths differ). Prefill, chunked prefill and variable-length / mixed calls: sequence by sequence,
    its pages gathered into ``[1, Hkv, kv_len_b, d]`` and SDPA on its own ``q_len_b`` rows with the
    bottom-right causal mask — slow (one launch group per sequence) but exact, with no padding computed.
    """

    name = "torch-paged-reference"
    description = "gathers pages through the block table with torch indexing, then SDPA on the dense copy"
    #: Takes variable-length and appending calls (per-sequence gather and attention).
    varlen = True
    #: Reads an FP8 E4M3 cache: the gathered codes are dequantized (code · scale, in q's dtype) before SDPA.
    kv_dtypes = ("float8_e4m3fn",)

    @property
    def family(self):
        from profattn.families import PAGED_GATHER

        return PAGED_GATHER

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        from profattn.workload import KVLayout, Phase

        if workload.phase is Phase.DECODE and not workload.is_varlen:
            return paged_decode_reason(workload)
        if workload.kv_layout is not KVLayout.PAGED:
            return "reads a paged KV cache; this workload's layout is dense"
        if workload.phase is Phase.TRAIN:
            return "a forward path over the paged cache (serving): no backward"
        return None

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        if workload.q_len == 1:
            return self._prepare_decode(workload)
        return self._prepare_per_sequence(workload, device)

    def _prepare_decode(self, workload: Workload) -> Prepared:
        import torch.nn.functional as F

        from profattn.backends.masks import window_applies

        max_len = workload.kv_len
        pages_needed = math.ceil(max_len / workload.page_size)
        ragged = len(set(workload.kv_lens)) > 1
        window = workload.window if window_applies(workload) else None

        def bind(inputs: AttentionInputs):
            cache = inputs.paged
            q = inputs.q
            table = cache.block_table[:, :pages_needed].long().clamp(min=0)
            mask = None
            if ragged or window is not None:
                pos, lens = torch.arange(max_len, device=q.device)[None, :], cache.seq_lens[:, None].long()
                keep = pos < lens
                if window is not None:  # the sliding window: the last `window` keys of each sequence
                    keep = keep & (pos >= lens - window)
                mask = keep[:, None, None, :]

            def call() -> torch.Tensor:
                b = table.shape[0]
                k = cache.k_pages[table].reshape(b, -1, cache.num_kv_heads, cache.head_dim)[:, :max_len].transpose(1, 2)
                v = cache.v_pages[table].reshape(b, -1, cache.num_kv_heads, cache.head_dim)[:, :max_len].transpose(1, 2)
                if cache.k_scale is not None:  # FP8 codes: dequantize the gathered copy (one multiply per element)
                    k = dequantize(k, cache.k_scale, head_axis=1, dtype=q.dtype)
                    v = dequantize(v, cache.v_scale, head_axis=1, dtype=q.dtype)
                if mask is not None:  # masked slots may hold whatever the pool held (NaN in tests)
                    k = k.masked_fill(~mask.transpose(-1, -2), 0)
                    v = v.masked_fill(~mask.transpose(-1, -2), 0)
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

            return call

        return Prepared(forward=paged_only_forward, bind=bind,
                        notes=("gather + SDPA (default kernel choice)" + (", key-padding mask" if ragged else "")
                               + (", FP8 codes dequantized after the gather" if workload.is_kv_quantized else "")
                               + (f", sliding-window mask of {window} keys (the whole cache is gathered)"
                                  if window is not None else ""),))

    def _prepare_per_sequence(self, workload: Workload, device: torch.device) -> Prepared:
        import torch.nn.functional as F

        from profattn.backends.masks import sdpa_mask_args
        from profattn.workload import Phase

        page = workload.page_size
        seqs = list(zip(workload.q_lens, workload.kv_lens))
        margs = [sdpa_mask_args(Workload(phase=Phase.PREFILL, batch=1, q_len=nq, kv_len=nk,
                                         num_q_heads=workload.num_q_heads, num_kv_heads=workload.num_kv_heads,
                                         head_dim=workload.head_dim, dtype=workload.dtype, mask=workload.mask,
                                         window=workload.window), device)
                 for nq, nk in seqs]

        def bind(inputs: AttentionInputs):
            cache = inputs.paged
            q = inputs.q
            hkv, d = cache.num_kv_heads, cache.head_dim
            tables = [cache.block_table[b, :math.ceil(nk / page)].long() for b, (_, nk) in enumerate(seqs)]

            def call() -> torch.Tensor:
                out = torch.zeros_like(q)  # padding rows (past q_len_b) stay zero
                for b, (nq, nk) in enumerate(seqs):
                    k = cache.k_pages[tables[b]].reshape(-1, hkv, d)[:nk].transpose(0, 1).unsqueeze(0)
                    v = cache.v_pages[tables[b]].reshape(-1, hkv, d)[:nk].transpose(0, 1).unsqueeze(0)
                    if cache.k_scale is not None:  # FP8 codes: dequantize this sequence's gathered copy
                        k = dequantize(k, cache.k_scale, head_axis=1, dtype=q.dtype)
                        v = dequantize(v, cache.v_scale, head_axis=1, dtype=q.dtype)
                    m = margs[b]
                    out[b:b + 1, :, :nq] = F.scaled_dot_product_attention(
                        q[b:b + 1, :, :nq], k, v, attn_mask=m.attn_mask, is_causal=m.is_causal, enable_gqa=True)
                return out

            return call

        return Prepared(forward=paged_only_forward, bind=bind,
                        notes=("per sequence: gather its pages, SDPA on its own rows (default kernel choice, "
                               "bottom-right causal per sequence; no padding computed)"
                               + (f"; sliding window of {workload.window} keys" if workload.window else ""),))
