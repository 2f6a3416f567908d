"""Triton kernels of :mod:`profattn.backends.triton_paged` (its docstring has the schedule).

Imported only when a kernel is first launched: ``triton.jit`` decides between the compiler and the CPU
interpreter (``TRITON_INTERPRET=1``) when this module is imported, and CPU installs may lack Triton.
"""

import triton
import triton.language as tl


@triton.jit
def _fold_tile(q, k, v, acc, m_i, l_i, qk_scale, n_mask, MASKED: tl.constexpr):
    """Fold one K/V tile (``k``, ``v``: ``[BLOCK_N, d]``) into the running (acc, max, sum) of the group's rows
    (online softmax in base 2, Milakov & Gimelshein 2018); ``MASKED`` sets keys outside ``n_mask`` to −inf."""
    s = tl.dot(q, tl.trans(k)) * qk_scale  # [BLOCK_G, BLOCK_N], log2 domain
    if MASKED:
        s = tl.where(n_mask[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l_i


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
    tokens_per_split, num_splits, Arrivals, KScale, VScale, window, table_tokens, Work,
    GROUP: tl.constexpr, BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
    PAGE_SIZE: tl.constexpr, DIRECT: tl.constexpr, PREFETCH: tl.constexpr, FUSED: tl.constexpr,
    KV_QUANT: tl.constexpr, DOT_F16: tl.constexpr,
    GROUP_P2: tl.constexpr, BLOCK_S: tl.constexpr, COMBINE_CHUNK: tl.constexpr, WORK_LIST: tl.constexpr,
):
    kvh = tl.program_id(1)
    if WORK_LIST:  # a ragged batch's busy (sequence, split) items only, packed as sequence << 16 | split
        item = tl.load(Work + tl.program_id(0))
        b = item >> 16
        split = item & 0xFFFF
    else:
        b = tl.program_id(0)
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
    k_head = K + kvh * stride_kh
    v_head = V + kvh * stride_vh
    # Page ids of the first tile, masked by the table's width rather than the sequence's end: without a window
    # the load does not wait for SeqLens, so the two DRAM round trips before the first K/V tile overlap (ids past
    # the sequence are never used: their keys are masked). Inside the loop the next tile's ids are loaded while
    # this tile's K/V stream in, so the block-table lookup never sits between two tiles (software prefetch).
    first = start + offs_tile
    page = tl.maximum(tl.load(bt_row + first // PAGE_SIZE, mask=first < table_tokens, other=0), 0).to(tl.int64)
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + offs_tile
        n_mask = offs_n < end
        slot = offs_n % PAGE_SIZE
        k = tl.load(k_head + page[:, None] * stride_kp + slot[:, None] * stride_kt + offs_d[None, :],
                    mask=n_mask[:, None], other=0.0)
        v = tl.load(v_head + page[:, None] * stride_vp + slot[:, None] * stride_vt + offs_d[None, :],
                    mask=n_mask[:, None], other=0.0)
        if KV_QUANT:  # FP8 codes convert exactly to fp16 / bf16
            k = k.to(q.dtype)
            v = v.to(q.dtype)
        nxt = offs_n + BLOCK_N
        if PREFETCH:
            page = tl.load(bt_row + nxt // PAGE_SIZE, mask=nxt < end, other=0).to(tl.int64)
        acc, m_i, l_i = _fold_tile(q, k, v, acc, m_i, l_i, qk_scale, n_mask, True)
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
        # This sequence's splits that hold keys (fewer than num_splits in a ragged batch; the combine reads only them).
        n_b = tl.cdiv(seq_len - lo, tokens_per_split)
        if FUSED and split < n_b:
            # Last-arriving program of this (sequence, KV head) combines all splits (the threadfence-
            # reduction pattern of the CUDA samples): every thread's stores are ordered before the
            # counter increment by the barrier and the atomic's release; the acquire lets the last
            # program read the other programs' partials (loaded .cg: from L2, never a stale L1 line).
            tl.debug_barrier()
            counter = Arrivals + b * tl.num_programs(1) + kvh
            arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
            if arrived == n_b - 1:
                _combine_group(OutPartial, LsePartial, Out, b, kvh, n_b,
                               stride_pb, stride_ph, stride_ps, stride_lb, stride_lh, stride_ob, stride_oh,
                               GROUP, GROUP_P2, HEAD_DIM, BLOCK_S, COMBINE_CHUNK)
                tl.atomic_xchg(counter, 0)  # re-arm for the next step (CUDA-graph replays reuse it)


@triton.jit
def _combine_group(OutPartial, LsePartial, Out, b, kvh, num_splits,
                   stride_pb, stride_ph, stride_ps, stride_lb, stride_lh, stride_ob, stride_oh,
                   GROUP: tl.constexpr, GROUP_P2: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr,
                   CHUNK: tl.constexpr):
    """The fused combine of one (sequence, KV head): every split's log-sum-exp of the group's rows in one
    ``[GROUP_P2, BLOCK_S]`` load, then the partial outputs in ``[GROUP_P2, CHUNK, d]`` loads of an unrolled loop
    (independent loads in flight together, not one dependent L2 round trip per split)."""
    offs_x = tl.arange(0, GROUP_P2)
    offs_d = tl.arange(0, HEAD_DIM)
    x_ok = offs_x < GROUP
    hx = kvh * GROUP + offs_x
    offs_s = tl.arange(0, BLOCK_S)
    lse_row = LsePartial + b * stride_lb + hx[:, None] * stride_lh
    ls = tl.load(lse_row + offs_s[None, :], mask=x_ok[:, None] & (offs_s < num_splits)[None, :],
                 other=float("-inf"), cache_modifier=".cg")
    m_all = tl.max(ls, 1)
    m_safe = tl.where(m_all > float("-inf"), m_all, 0.0)
    den = tl.sum(tl.where(ls > float("-inf"), tl.exp2(ls - m_safe[:, None]), 0.0), 1)
    num = tl.zeros([GROUP_P2, HEAD_DIM], dtype=tl.float32)
    offs_c = tl.arange(0, CHUNK)
    for c0 in tl.static_range(0, BLOCK_S, CHUNK):
        sc = c0 + offs_c
        c_ok = x_ok[:, None] & (sc < num_splits)[None, :]
        lc = tl.load(lse_row + sc[None, :], mask=c_ok, other=float("-inf"), cache_modifier=".cg")
        wc = tl.where(lc > float("-inf"), tl.exp2(lc - m_safe[:, None]), 0.0)
        oc = tl.load(OutPartial + b * stride_pb + hx[:, None, None] * stride_ph + sc[None, :, None] * stride_ps
                     + offs_d[None, None, :], mask=c_ok[:, :, None], other=0.0, cache_modifier=".cg")
        num += tl.sum(oc * wc[:, :, None], 1)
    final = num / tl.where(den > 0, den, 1.0)[:, None]
    tl.store(Out + b * stride_ob + hx[:, None] * stride_oh + offs_d[None, :], final.to(Out.dtype.element_ty),
             mask=x_ok[:, None])


@triton.jit
def _paged_decode_combine_kernel(
    OutPartial, LsePartial, Out, SeqLens, tokens_per_split, window,
    stride_pb, stride_ph, stride_ps, stride_lb, stride_lh, stride_ob, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    seq_len = tl.load(SeqLens + b)
    lo = tl.where(window > 0, tl.maximum(seq_len - window, 0), 0)
    s_mask = offs_s < tl.cdiv(seq_len - lo, tokens_per_split)  # the splits that hold this sequence's keys
    lse = tl.load(LsePartial + b * stride_lb + h * stride_lh + offs_s, mask=s_mask, other=float("-inf"))
    m = tl.max(lse, 0)
    w = tl.where(s_mask & (lse > float("-inf")), tl.exp2(lse - m), 0.0)
    o = tl.load(OutPartial + b * stride_pb + h * stride_ph + offs_s[:, None] * stride_ps + offs_d[None, :],
                mask=s_mask[:, None], other=0.0)
    out = tl.sum(o * w[:, None], 0) / tl.sum(w, 0)
    tl.store(Out + b * stride_ob + h * stride_oh + offs_d, out.to(Out.dtype.element_ty))


#: The launchable kernels. Their names (what a trace records, and what the TRITON family matches) keep the
#: leading underscore of every committed run's traces.
split_kernel = _paged_decode_split_kernel
combine_kernel = _paged_decode_combine_kernel
