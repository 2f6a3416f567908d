"""Triton kernels of :mod:`profattn.backends.triton_paged_prefill` (its docstring has the schedule).

Imported only when a kernel is first launched: ``triton.jit`` decides between the compiler and the CPU
interpreter (``TRITON_INTERPRET=1``) when this module is imported, and CPU installs may lack Triton.
"""

import triton
import triton.language as tl


@triton.jit
def attend_tile(acc, m_i, l_i, q, K, V, bt_row, n0, kvh, rows_t, prefix, kv_len,
                stride_kp, stride_kt, stride_kh, stride_vp, stride_vt, stride_vh, qk_scale_log2,
                offs_d, BLOCK_N: tl.constexpr, PAGE_SIZE: tl.constexpr, MASKED: tl.constexpr,
                CAUSAL: tl.constexpr, PAGE_LOADS: tl.constexpr):
    """One K/V tile of ``BLOCK_N`` keys from ``n0``, gathered through the block table, folded into the
    running (acc, max, sum) of the rows ``rows_t`` (query positions); ``MASKED`` applies the key-length and
    (``CAUSAL``) the bottom-right diagonal ``key ≤ prefix + row``. ``PAGE_LOADS`` (unmasked tiles of whole
    pages): one block-table entry per page and a ``[pages, PAGE_SIZE, d]`` load, instead of one entry and one
    address per key. The scale is folded into the exponent (one FMA per score, as Triton's fused-attention
    tutorial does); every row has seen key 0 in its first tile, so the running max is finite from then on."""
    offs_n = n0 + tl.arange(0, BLOCK_N)
    n_ok = offs_n < kv_len
    if PAGE_LOADS and not MASKED:
        P: tl.constexpr = BLOCK_N // PAGE_SIZE
        pg = tl.load(bt_row + n0 // PAGE_SIZE + tl.arange(0, P)).to(tl.int64)
        sl = tl.arange(0, PAGE_SIZE)
        base3 = pg[:, None, None] * stride_kp + sl[None, :, None] * stride_kt + offs_d[None, None, :]
        k = tl.reshape(tl.load(K + kvh * stride_kh + base3), [BLOCK_N, offs_d.shape[0]])
        vbase3 = pg[:, None, None] * stride_vp + sl[None, :, None] * stride_vt + offs_d[None, None, :]
        v = tl.reshape(tl.load(V + kvh * stride_vh + vbase3), [BLOCK_N, offs_d.shape[0]])
    else:
        page = tl.load(bt_row + offs_n // PAGE_SIZE, mask=n_ok, other=0).to(tl.int64)
        slot = offs_n % PAGE_SIZE
        k_ptr = K + page[:, None] * stride_kp + slot[:, None] * stride_kt + kvh * stride_kh + offs_d[None, :]
        v_ptr = V + page[:, None] * stride_vp + slot[:, None] * stride_vt + kvh * stride_vh + offs_d[None, :]
        if MASKED:
            k = tl.load(k_ptr, mask=n_ok[:, None], other=0.0)
            v = tl.load(v_ptr, mask=n_ok[:, None], other=0.0)
        else:
            k = tl.load(k_ptr)
            v = tl.load(v_ptr)
    s = tl.dot(q, tl.trans(k))
    if MASKED:
        ok = n_ok[None, :]
        if CAUSAL:
            ok = ok & (offs_n[None, :] <= prefix + rows_t[:, None])
        s = tl.where(ok, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale_log2)
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s * qk_scale_log2 - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, m_new, l_i


@triton.jit
def attend_rows(q_ptr, o_ptr, row_ok, rows_t, K, V, bt_row, kvh, prefix, kv_len, free, last,
                stride_kp, stride_kt, stride_kh, stride_vp, stride_vt, stride_vh, qk_scale_log2,
                ROWS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, PAGE_SIZE: tl.constexpr,
                CAUSAL: tl.constexpr, OUT_DTYPE: tl.constexpr, PAGE_LOADS: tl.constexpr, WS: tl.constexpr):
    """``ROWS`` query rows (pointers ``q_ptr``/``o_ptr`` ``[ROWS, HEAD_DIM]``) against keys ``[0, last)``:
    ``[0, free)`` (a multiple of ``BLOCK_N``) seen by every row, streamed unmasked, then the masked rest."""
    q = tl.load(q_ptr, mask=row_ok[:, None], other=0.0)
    offs_d = tl.arange(0, HEAD_DIM)
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM], dtype=tl.float32)
    for n0 in tl.range(0, free, BLOCK_N, warp_specialize=WS):
        acc, m_i, l_i = attend_tile(acc, m_i, l_i, q, K, V, bt_row, n0, kvh, rows_t, prefix, kv_len,
                                    stride_kp, stride_kt, stride_kh, stride_vp, stride_vt, stride_vh,
                                    qk_scale_log2, offs_d, BLOCK_N, PAGE_SIZE, False, CAUSAL, PAGE_LOADS)
    for n0 in range(free, last, BLOCK_N):
        acc, m_i, l_i = attend_tile(acc, m_i, l_i, q, K, V, bt_row, n0, kvh, rows_t, prefix, kv_len,
                                    stride_kp, stride_kt, stride_kh, stride_vp, stride_vt, stride_vh,
                                    qk_scale_log2, offs_d, BLOCK_N, PAGE_SIZE, True, CAUSAL, False)
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(o_ptr, out.to(OUT_DTYPE), mask=row_ok[:, None])


@triton.jit
def paged_varlen_kernel(
    Q, K, V, BlockTable, QLens, KVLens, Items, Out,
    qk_scale_log2,
    stride_qb, stride_qh, stride_qt,
    stride_kp, stride_kt, stride_kh,
    stride_vp, stride_vt, stride_vh,
    stride_bt,
    stride_ob, stride_oh, stride_ot,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_NG: tl.constexpr, PAGE_SIZE: tl.constexpr, CAUSAL: tl.constexpr,
    HAS_TILES: tl.constexpr, HAS_GROUPS: tl.constexpr, PAGE_LOADS: tl.constexpr, WS: tl.constexpr,
):
    """One program per work item ``Items[pid] = (seq, m0, head)``: a query tile (``m0 ≥ 0``: rows
    ``m0 … m0 + BLOCK_M − 1`` of query head ``head``) or a group item (``m0 < 0``: every (query, head) row of
    KV head ``head``'s GQA group, ``BLOCK_G`` rows)."""
    pid = tl.program_id(0)
    b = tl.load(Items + pid * 3)
    m0 = tl.load(Items + pid * 3 + 1)
    head = tl.load(Items + pid * 3 + 2)
    q_len = tl.load(QLens + b)
    kv_len = tl.load(KVLens + b)
    prefix = kv_len - q_len
    bt_row = BlockTable + b.to(tl.int64) * stride_bt
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = Q + b.to(tl.int64) * stride_qb
    o_base = Out + b.to(tl.int64) * stride_ob
    out_dtype = Out.dtype.element_ty
    if HAS_TILES:
        if m0 >= 0:
            rows_t = m0 + tl.arange(0, BLOCK_M)
            offs = head * stride_qh + rows_t[:, None].to(tl.int64) * stride_qt + offs_d[None, :]
            o_offs = head * stride_oh + rows_t[:, None].to(tl.int64) * stride_ot + offs_d[None, :]
            if CAUSAL:
                last = tl.minimum(kv_len, prefix + m0 + BLOCK_M)  # keys up to the last row's diagonal
                free = tl.minimum(prefix + m0 + 1, last)          # every row sees the keys below this
            else:
                last = kv_len
                free = kv_len
            attend_rows(q_base + offs, o_base + o_offs, rows_t < q_len, rows_t, K, V, bt_row, head // GROUP,
                        prefix, kv_len, (free // BLOCK_N) * BLOCK_N, last,
                        stride_kp, stride_kt, stride_kh, stride_vp, stride_vt, stride_vh, qk_scale_log2,
                        BLOCK_M, HEAD_DIM, BLOCK_N, PAGE_SIZE, CAUSAL, out_dtype, PAGE_LOADS, WS)
    if HAS_GROUPS:
        if m0 < 0:
            r = tl.arange(0, BLOCK_G)
            rows_t = r // GROUP
            qh = head * GROUP + r % GROUP
            offs = qh[:, None] * stride_qh + rows_t[:, None].to(tl.int64) * stride_qt + offs_d[None, :]
            o_offs = qh[:, None] * stride_oh + rows_t[:, None].to(tl.int64) * stride_ot + offs_d[None, :]
            if CAUSAL:
                free = prefix + 1  # the first query sees keys 0 … prefix
            else:
                free = kv_len
            attend_rows(q_base + offs, o_base + o_offs, rows_t < q_len, rows_t, K, V, bt_row, head,
                        prefix, kv_len, (free // BLOCK_NG) * BLOCK_NG, kv_len,
                        stride_kp, stride_kt, stride_kh, stride_vp, stride_vt, stride_vh, qk_scale_log2,
                        BLOCK_G, HEAD_DIM, BLOCK_NG, PAGE_SIZE, CAUSAL, out_dtype, PAGE_LOADS, False)
