"""Our serving-step kernel: chunked prefill, packed prefill and mixed prefill + decode batches over the paged
KV cache, in one Triton launch.

A serving engine's step hands the kernel several sequences at once, each with its own query count
``q_len_b`` (the new tokens: a whole prompt, one chunk of it, or one decoding token) and KV length
``kv_len_b`` (the cached prefix plus the new tokens, already appended to the paged cache). The causal mask
is bottom-right per sequence: query ``t`` sees keys ``j ≤ kv_len_b − q_len_b + t``.

Schedule — a flat list of work items, one program each (a "varlen" grid as in flash-attn's
``flash_attn_varlen_func`` and FlashInfer's planned batch prefill), sorted longest first so the heaviest
items start in the first wave (longest-processing-time-first list scheduling, Graham 1969):

* **Query tile** ``(b, m0, h)`` for sequences with many queries: ``BLOCK_M`` consecutive query rows of query
  head ``h`` against the sequence's pages (the FlashAttention-2 forward loop, Dao 2023): keys below the
  tile's first diagonal ``kv_len − q_len + m0`` are visible to every row and stream without a mask; the
  rest up to the last row's diagonal are masked. K/V tiles of ``BLOCK_N`` tokens are gathered through the
  block table (``page = block_table[b, j // page_size]``, slot ``j % page_size``), so any page order works.
* **Group item** ``(b, kvh)`` for sequences with few queries (a decoding token, a short speculative run):
  the rows are every (query, head) pair of the KV head's GQA group — ``q_len_b × Hq/Hkv ≤ BLOCK_G`` rows
  — so each K/V tile is loaded **once for the whole group** (as our split-KV decode kernel does), instead of
  once per query head into a 128-row tile that is 1/128 used.

Both paths keep the running max and sum in fp32 (online softmax, Milakov & Gimelshein 2018) in base 2.
The output is written straight into ``[B, Hq, Lq_max, d]`` (rows past ``q_len_b`` untouched).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from profattn.interfaces import ADOPTIONS
from profattn.backends.base import AttentionInputs, Prepared, Unsupported, paged_only_forward
from profattn.backends.triton_append import bind_paged_append, kernel_launch
from profattn.families import TRITON
from profattn.workload import KVLayout, Mask, Phase, Workload

#: Launch configurations, chosen per step by :func:`choose_config` (measured on the H200 with
#: ``benchmarks/paged_prefill.py --configs all``; NOTES.md has the table). A compute-bound step (prefill
#: chunks) runs 128×128 tiles with 8 warps, whole-page loads, and the group items first; a step whose
#: decoding sequences' bytes outweigh its query tiles' FLOPs runs 64-row tiles with 4 warps, heaviest first.
BLOCK_M = 128
BLOCK_N = 128
BLOCK_N_GROUP = 128
NUM_WARPS = 8
NUM_STAGES = 3
#: Sustained rates that weigh a step's tile FLOPs against its group items' bytes (H200, same benchmark).
TILE_TFLOPS = 450.0
GROUP_GBPS = 4000.0

#: Relative cost model for ordering the items (longest first): a query tile costs its tensor-core work,
#: a group item its bytes. Rates are per program on the H200 (≈ 500 TFLOP/s / 132 SMs; ≈ 60 GB/s a
#: program streams on its own) — only the order depends on them, never a result.
_FLOPS_PER_US = 3.8e6
_BYTES_PER_US = 6.0e4


@dataclass(frozen=True)
class WorkItem:
    """One program of the launch: a query tile (``m0 ≥ 0``; ``head`` is a query head) or a group item
    (``m0 = −1``; ``head`` is a KV head and the rows are its whole GQA group's queries)."""

    seq: int
    m0: int
    head: int
    cost_us: float


def block_g(group: int, q_len: int = 1) -> int:
    """Rows of a group item: ``q_len × group`` rounded up to a power of two, at least 16 (the tensor-core
    dot's smallest M)."""
    return max(16, 1 << max(0, q_len * group - 1).bit_length())


def plan_items(q_lens: list[int], kv_lens: list[int], *, num_q_heads: int, num_kv_heads: int, head_dim: int,
               causal: bool, block_m: int = BLOCK_M, group_rows: int = 16, order: str = "lpt") -> list[WorkItem]:
    """The launch's work items, heaviest first (see module docstring).

    A sequence goes to the group path when ``q_len × (Hq/Hkv) ≤ group_rows``, else it is cut into
    ``ceil(q_len / block_m)`` query tiles per query head. A query tile's cost is its ``4·BLOCK_M·keys·d``
    tensor-core FLOPs (keys up to its last row's diagonal), a group item's the ``2·kv_len·d·2`` bytes of its
    K/V (at 2 bytes per element): only their order matters.

    ``order``: ``"lpt"`` sorts every item heaviest first; ``"grouped"`` keeps a (sequence, KV head)'s query
    tiles together (heaviest tile first), then the group items (longest first); ``"groups-first"`` puts the
    group items before the grouped tiles.

    Example (group 4): ``q_lens [3, 1]``, ``kv_lens [10, 7]``, Hq 8, Hkv 2, d 16, causal, block_m 2 →
    sequence 0 has 12 group rows (≤ 16), sequence 1 has 4: four group items, sequence 0's first.

    Raises:
        ValueError: lengths of different counts, a q_len above its kv_len, Hq not a multiple of Hkv, or an
            unknown ``order``.
    """
    if len(q_lens) != len(kv_lens):
        raise ValueError(f"{len(q_lens)} q_lens but {len(kv_lens)} kv_lens")
    if num_q_heads % num_kv_heads:
        raise ValueError(f"num_q_heads {num_q_heads} is not a multiple of num_kv_heads {num_kv_heads}")
    group = num_q_heads // num_kv_heads
    items: list[WorkItem] = []
    for b, (nq, nk) in enumerate(zip(q_lens, kv_lens)):
        if nq > nk:
            raise ValueError(f"sequence {b}: q_len {nq} > kv_len {nk}")
        if nq < 1:
            continue
        if nq * group <= group_rows:
            cost = 2 * nk * head_dim * 2 / _BYTES_PER_US
            items += [WorkItem(b, -1, h, cost) for h in range(num_kv_heads)]
            continue
        prefix = nk - nq
        for m0 in range(0, nq, block_m):
            keys = min(nk, prefix + m0 + block_m) if causal else nk
            cost = 4 * block_m * keys * head_dim / _FLOPS_PER_US
            items += [WorkItem(b, m0, h, cost) for h in range(num_q_heads)]
    if order == "lpt":
        items.sort(key=lambda it: -it.cost_us)  # stable: equal costs keep (sequence, tile, head) order
    elif order in ("grouped", "groups-first"):
        # the query tiles of one (sequence, KV head) run together, so its K/V stay in L2 while its tiles and
        # query heads reread them; heaviest tile first within the group; group items (streaming, longest
        # first) after the tiles ("grouped") or before them ("groups-first": they start at once, beside the
        # compute-bound tiles, instead of trailing them)
        first = order == "groups-first"
        items.sort(key=lambda it: ((it.m0 < 0) != first, -it.cost_us if it.m0 < 0 else 0, it.seq,
                                   it.head // group if it.m0 >= 0 else it.head, -it.cost_us))
    else:
        raise ValueError(f"order must be 'lpt', 'grouped' or 'groups-first', got {order!r}")
    return items


@dataclass(frozen=True)
class LaunchConfig:
    """Tile sizes and launch parameters of one launch (defaults: the module constants)."""

    block_m: int = BLOCK_M
    block_n: int = BLOCK_N
    block_n_group: int = BLOCK_N_GROUP
    num_warps: int = NUM_WARPS
    num_stages: int = NUM_STAGES
    #: unmasked tiles load whole pages (one block-table entry per page) — needs ``block_n % page_size == 0``
    page_loads: bool = True
    #: Triton's warp specialization of the unmasked key loop (``tl.range(..., warp_specialize=True)``)
    warp_specialize: bool = False
    #: work-list order (:func:`plan_items`)
    order: str = "groups-first"


#: The configuration of streaming-bound steps (see :data:`BLOCK_M`).
STREAMING = LaunchConfig(block_m=64, block_n=64, block_n_group=64, num_warps=4, num_stages=3, page_loads=False,
                         order="lpt")


def choose_config(q_lens: list[int], kv_lens: list[int], *, num_q_heads: int, num_kv_heads: int, head_dim: int,
                  causal: bool) -> tuple[LaunchConfig, str]:
    """The launch configuration for a step, and why (a phrase for the cell's notes).

    Weighs the step's query-tile work (tensor-core FLOPs of the sequences that get query tiles, at
    :data:`TILE_TFLOPS`) against its group items' K/V bytes (at :data:`GROUP_GBPS`): when the bytes take
    longer, the step is streaming-bound and :data:`STREAMING` (64-row tiles, 4 warps, heaviest first) wins
    (mixed step 1×(q512, kv4096) + 64 decodes on the H200: 137 µs vs 198 µs); otherwise the default
    :class:`LaunchConfig` (128×128 tiles, 8 warps, whole-page loads, group items first: chunk 2048 over kv
    8192 at 452 TFLOP/s vs 297 with 64-key tiles).
    """
    group = num_q_heads // num_kv_heads
    rows = block_g(group)
    flops = bytes_ = 0
    for nq, nk in zip(q_lens, kv_lens):
        if nq * group <= rows:
            bytes_ += 2 * nk * head_dim * 2 * num_kv_heads
        else:
            pairs = nq * (nk - nq) + nq * (nq + 1) // 2 if causal else nq * nk
            flops += 4 * pairs * head_dim * num_q_heads
    tile_us = flops / (TILE_TFLOPS * 1e6)
    group_us = bytes_ / (GROUP_GBPS * 1e3)
    if group_us > tile_us:
        return STREAMING, (f"streaming-bound step (decoding sequences' K/V ~{group_us:.0f} us at {GROUP_GBPS:.0f} GB/s > "
                           f"query tiles ~{tile_us:.0f} us at {TILE_TFLOPS:.0f} TFLOP/s)")
    return LaunchConfig(), (f"compute-bound step (query tiles ~{tile_us:.0f} us at {TILE_TFLOPS:.0f} TFLOP/s >= "
                            f"decoding sequences' K/V ~{group_us:.0f} us)")


def items_tensor(items: list[WorkItem], device: torch.device) -> torch.Tensor:
    """``[len(items), 3]`` int32 ``(seq, m0, head)`` rows on ``device`` (the kernel's work list)."""
    return torch.tensor([(it.seq, it.m0, it.head) for it in items], dtype=torch.int32, device=device).reshape(-1, 3)


def paged_varlen_attention(q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor,
                           block_table: torch.Tensor, q_lens: torch.Tensor, kv_lens: torch.Tensor,
                           items: torch.Tensor, *, causal: bool, has_tiles: bool, has_groups: bool,
                           group_rows: int = 16, scale: float | None = None, out: torch.Tensor | None = None,
                           config: LaunchConfig = LaunchConfig()) -> torch.Tensor:
    """Variable-length attention over a paged KV cache in one launch (see module docstring).

    Args:
        q: ``[B, Hq, Lq_max, d]`` (any strides with unit stride on d); sequence ``b``'s queries are rows
            ``0 … q_lens[b] − 1``.
        k_pages, v_pages: ``[num_pages, page_size, Hkv, d]`` (NHD pages), holding every sequence's
            ``kv_lens[b]`` tokens (the new ones already appended).
        block_table: ``[B, max_pages]`` int32.
        q_lens, kv_lens: ``[B]`` int32 on the device, ``q_lens[b] ≤ kv_lens[b]``.
        items: the work list from :func:`items_tensor` (``plan_items`` with the same ``block_m``,
            ``group_rows`` and lengths).
        causal: bottom-right causal per sequence, else every key.
        has_tiles, has_groups: whether ``items`` holds query tiles / group items (compiles only the paths
            used).
        group_rows: rows of a group item (:func:`block_g`).
        scale: softmax scale, default ``1/sqrt(d)``.
        out: written in place when given (``[B, Hq, Lq_max, d]``); rows past ``q_lens[b]`` untouched.

    Returns:
        ``out`` (or a new ``[B, Hq, Lq_max, d]`` tensor, rows past ``q_lens[b]`` uninitialised), q's dtype.

    Raises:
        ValueError: head_dim not a power of two ≥ 16 or not the cache's, Hq not a multiple of Hkv.
    """
    from profattn.backends.kernels.paged_varlen import paged_varlen_kernel

    batch, hq, _, d = q.shape
    _, page_size, hkv, d_k = k_pages.shape
    if d != d_k or d < 16 or d & (d - 1):
        raise ValueError(f"head_dim must be a power of two >= 16 and match the cache, got q {d}, cache {d_k}")
    if hq % hkv:
        raise ValueError(f"num_q_heads {hq} is not a multiple of num_kv_heads {hkv}")
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = torch.empty_like(q) if out is None else out
    n = items.shape[0]
    if n == 0:
        return out
    kernel_launch(paged_varlen_kernel, (n,), q.device)(
        q, k_pages, v_pages, block_table, q_lens, kv_lens, items, out,
        scale * 1.4426950408889634,  # log2(e): the kernel works in base 2 (exp2)
        q.stride(0), q.stride(1), q.stride(2),
        k_pages.stride(0), k_pages.stride(1), k_pages.stride(2),
        v_pages.stride(0), v_pages.stride(1), v_pages.stride(2),
        block_table.stride(0),
        out.stride(0), out.stride(1), out.stride(2),
        GROUP=hq // hkv, HEAD_DIM=d, BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_G=group_rows,
        BLOCK_NG=config.block_n_group, PAGE_SIZE=page_size, CAUSAL=causal, HAS_TILES=has_tiles,
        HAS_GROUPS=has_groups, PAGE_LOADS=config.page_loads and config.block_n % page_size == 0
        and config.block_n_group % page_size == 0, WS=config.warp_specialize, num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out


class TritonPagedPrefill:
    """``triton-paged-prefill``: our one-launch kernel for prefill, chunked-prefill and mixed steps over the
    paged cache (see module docstring)."""

    name = "triton-paged-prefill"
    #: The interface it implements and the layout it reads (:mod:`profattn.interfaces`).
    adoption = ADOPTIONS['triton-paged-prefill']
    family = TRITON
    description = ("ours: Triton varlen attention over the paged cache in one launch — 128-row query tiles per "
                   "head for prefill chunks, whole-GQA-group rows for decoding sequences, heaviest first")
    #: Takes per-sequence lengths (packed, chunked, mixed) and appending calls.
    varlen = True

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        from profattn.backends.triton_paged import triton_available

        w = workload
        if w.phase is Phase.TRAIN:
            return "a forward path over the paged cache (serving): no backward"
        if w.phase is Phase.DECODE:
            return "decode steps run in triton-paged-decode (split-KV); this kernel does not split a sequence's keys"
        if w.kv_layout is not KVLayout.PAGED:
            return "reads a paged KV cache; this workload's layout is dense"
        d = w.head_dim
        if d < 16 or d & (d - 1):
            return f"head_dim {d} is not a power of two >= 16"
        if w.mask not in (Mask.CAUSAL, Mask.NONE):
            return f"mask {w.mask.value} is not implemented (causal or none)"
        if w.window is not None and w.window < w.kv_len:
            return "window not implemented (sliding-window attention runs in triton-paged-decode for decode steps)"
        return triton_available(device)

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        from profattn.backends.triton_paged import interpreter_dtype

        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        w = workload
        causal = w.mask is Mask.CAUSAL
        group = w.num_q_heads // w.num_kv_heads
        rows = block_g(group)
        q_lens, kv_lens = list(w.q_lens), list(w.kv_lens)
        config, why = choose_config(q_lens, kv_lens, num_q_heads=w.num_q_heads, num_kv_heads=w.num_kv_heads,
                                    head_dim=w.head_dim, causal=causal)
        items = plan_items(q_lens, kv_lens, num_q_heads=w.num_q_heads, num_kv_heads=w.num_kv_heads,
                           head_dim=w.head_dim, causal=causal, block_m=config.block_m, group_rows=rows,
                           order=config.order)
        has_tiles = any(it.m0 >= 0 for it in items)
        has_groups = any(it.m0 < 0 for it in items)
        run_dtype = interpreter_dtype(device, w.dtype)

        def bind(inputs: AttentionInputs):
            cache = inputs.paged
            q, k_pages, v_pages = inputs.q, cache.k_pages, cache.v_pages
            out_dtype = q.dtype
            if run_dtype != w.dtype:  # cast once, outside the timed call
                cast = getattr(torch, run_dtype)
                q, k_pages, v_pages = q.to(cast), k_pages.to(cast), v_pages.to(cast)
            dev = q.device
            ql = inputs.q_lens if inputs.q_lens is not None else torch.tensor(q_lens, dtype=torch.int32, device=dev)
            kl = inputs.kv_lens if inputs.kv_lens is not None else torch.tensor(kv_lens, dtype=torch.int32, device=dev)
            work = items_tensor(items, dev)
            out = torch.zeros_like(q)  # padding rows stay zero

            def call() -> torch.Tensor:
                o = paged_varlen_attention(q, k_pages, v_pages, cache.block_table, ql, kl, work, causal=causal,
                                           has_tiles=has_tiles, has_groups=has_groups, group_rows=rows,
                                           out=out, config=config)
                return o if o.dtype == out_dtype else o.to(out_dtype)

            return call

        n_tiles = sum(it.m0 >= 0 for it in items)
        interp_note = (f"ran in {run_dtype} under TRITON_INTERPRET=1 (the interpreter's bf16 dot is wrong); "
                       "output cast back to bfloat16",) if run_dtype != w.dtype else ()
        append_note = ("cache append: ours, one Triton launch for K and V (triton_append.paged_append)",) if w.append else ()
        return Prepared(forward=paged_only_forward, bind=bind, bind_append=bind_paged_append, notes=interp_note + append_note + (
            f"work list: {n_tiles} query tiles ({config.block_m} rows x 1 head) + {len(items) - n_tiles} GQA-group "
            f"items ({rows} rows), {len(items)} programs, order {config.order} (BLOCK_N {config.block_n}/"
            f"{config.block_n_group}, {config.num_warps} warps, {config.num_stages} stages"
            f"{', whole-page loads' if config.page_loads else ''})",
            f"launch configuration: {why}",))
