"""``onehead-decode``: a paged decode kernel in Triton with one program per (sequence, query head).

A third-party-style profattn backend (see README.md): it imports only profattn's public backend interface
(:mod:`profattn.backends`) and Triton, lazily. Online softmax in fp32 (Milakov & Gimelshein 2018) over
``BLOCK_N``-token tiles; each tile's pages are looked up in the block table (FlashInfer's CSR-like paged
layout, as :class:`profattn.paged.PagedKVCache` stores it: ``k_pages`` ``[num_pages, page_size, Hkv, d]``).
"""

from __future__ import annotations

import math
import os

import torch

from profattn.backends import (
    AttentionInputs,
    KernelFamily,
    Prepared,
    Unsupported,
    paged_decode_reason,
    paged_only_forward,
)

#: Tokens per tile.
BLOCK_N = 64
#: How this plugin's kernels look in a trace (Triton names the kernel after its function).
FAMILY = KernelFamily("onehead-triton", kernel_patterns=(r"_onehead_decode",), op_patterns=())


def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _onehead_decode_kernel(Q, K, V, BlockTable, SeqLens, Out, qk_scale_log2,
                               stride_qb, stride_qh, stride_kp, stride_kt, stride_kh,
                               stride_vp, stride_vt, stride_vh, stride_bt, stride_ob, stride_oh,
                               GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, PAGE_SIZE: tl.constexpr):
        b = tl.program_id(0)
        h = tl.program_id(1)
        kvh = h // GROUP
        seq_len = tl.load(SeqLens + b)
        offs_d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + b * stride_qb + h * stride_qh + offs_d).to(tl.float32)
        m_i = tl.full([1], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([1], dtype=tl.float32)
        acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
        offs_tile = tl.arange(0, BLOCK_N)
        for n0 in range(0, seq_len, BLOCK_N):
            offs_n = n0 + offs_tile
            n_mask = offs_n < seq_len
            page = tl.load(BlockTable + b * stride_bt + offs_n // PAGE_SIZE, mask=n_mask, other=0).to(tl.int64)
            slot = offs_n % PAGE_SIZE
            k = tl.load(K + page[:, None] * stride_kp + slot[:, None] * stride_kt + kvh * stride_kh + offs_d[None, :],
                        mask=n_mask[:, None], other=0.0).to(tl.float32)
            s = tl.sum(k * q[None, :], axis=1) * qk_scale_log2
            s = tl.where(n_mask, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=0))
            p = tl.exp2(s - m_new)
            alpha = tl.exp2(m_i - m_new)
            v = tl.load(V + page[:, None] * stride_vp + slot[:, None] * stride_vt + kvh * stride_vh + offs_d[None, :],
                        mask=n_mask[:, None], other=0.0).to(tl.float32)
            l_i = l_i * alpha + tl.sum(p, axis=0)
            acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
            m_i = m_new
        tl.store(Out + b * stride_ob + h * stride_oh + offs_d, (acc / l_i).to(Out.dtype.element_ty))

    return _onehead_decode_kernel


def onehead_decode(q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor, block_table: torch.Tensor,
                   seq_lens: torch.Tensor, *, kernel=None) -> torch.Tensor:
    """Decode attention for ``q`` ``[B, Hq, d]`` over a paged cache (``k_pages``/``v_pages``
    ``[num_pages, page_size, Hkv, d]``, ``block_table`` ``[B, max_pages]`` int32, ``seq_lens`` ``[B]``
    int32); returns ``[B, Hq, d]`` in ``q``'s dtype. Grid: ``(B, Hq)``."""
    batch, hq, d = q.shape
    hkv = k_pages.shape[2]
    out = torch.empty_like(q)
    kern = kernel or _kernel()
    kern[(batch, hq)](
        q, k_pages, v_pages, block_table, seq_lens, out, (1.0 / math.sqrt(d)) * 1.4426950408889634,
        q.stride(0), q.stride(1), k_pages.stride(0), k_pages.stride(1), k_pages.stride(2),
        v_pages.stride(0), v_pages.stride(1), v_pages.stride(2), block_table.stride(0), out.stride(0), out.stride(1),
        GROUP=hq // hkv, HEAD_DIM=d, BLOCK_N=BLOCK_N, PAGE_SIZE=k_pages.shape[1],
    )
    return out


class OneHeadDecode:
    """The backend profattn loads (entry point ``onehead-decode``)."""

    name = "onehead-decode"
    family = FAMILY
    description = "plugin example: Triton paged decode, one program per (seq, query head), no split-KV, CUDA-core math"

    def unsupported_reason(self, workload, device: torch.device) -> str | None:
        reason = paged_decode_reason(workload)
        if reason:
            return reason
        d = workload.head_dim
        if d & (d - 1):
            return f"head_dim {d} is not a power of two"
        if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            return "Triton kernels run on CUDA (on a CPU, only under TRITON_INTERPRET=1)"
        try:
            import triton  # noqa: F401
        except ImportError:
            return "needs the triton package"
        return None

    def prepare(self, workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        kernel = _kernel()

        def bind(inputs: AttentionInputs):
            cache = inputs.paged
            q = inputs.q[:, :, 0, :]

            def call() -> torch.Tensor:
                return onehead_decode(q, cache.k_pages, cache.v_pages, cache.block_table, cache.seq_lens, kernel=kernel).unsqueeze(2)

            return call

        return Prepared(forward=paged_only_forward, bind=bind,
                        notes=(f"one program per (seq, query head): {workload.batch * workload.num_q_heads} programs, BLOCK_N {BLOCK_N}",))


#: The entry point's object: an instance (a class or a zero-argument factory would do too).
backend = OneHeadDecode()
