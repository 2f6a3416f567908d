"""A paged KV cache: fixed-size pages addressed through a block table, as serving systems keep it.

Layout (NHD, as in vLLM's ``PagedAttention`` and FlashInfer's ``paged_kv_cache`` with
``kv_layout="NHD"``):

* ``k_pages``, ``v_pages``: ``[num_pages, page_size, num_kv_heads, head_dim]``, the physical pool.
* ``block_table``: ``[batch, max_pages_per_seq]``, ``int32``; entry ``(b, j)`` is the physical page that
  holds tokens ``j·page_size … (j+1)·page_size − 1`` of sequence ``b``; ``-1`` past the sequence's last page.
* ``seq_lens``: ``[batch]``, ``int32``: valid tokens of each sequence (its last page may be partial).

A quantized cache (``Workload.kv_dtype``, FP8 E4M3) holds codes in ``k_pages``/``v_pages``
(``torch.float8_e4m3fn``) and one fp32 scale per KV head for each (``k_scale``, ``v_scale``: ``[num_kv_heads]``,
vLLM's per-attention-head ``k_scale``/``v_scale``); a value is ``code · scale`` (:func:`dequantize`).

Pages come from a free list. Sequences can share immutable prefix pages (prefix sharing: several block
tables point at the same physical pages); a shared page is never written through ``append``, which
copies it first (copy-on-write) if the sequence wants to write into a partially filled shared page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass
class PagedKVCache:
    """The pool, the block table and the lengths (see module docstring for shapes).

    Build one with :meth:`from_dense`; grow a sequence with :meth:`append`; read a sequence back with
    :meth:`gather`. ``free_pages`` is the free list (physical page ids, popped from the end).
    """

    k_pages: torch.Tensor
    v_pages: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    free_pages: list[int] = field(default_factory=list)
    shared_pages: set[int] = field(default_factory=set)
    #: What unused pool slots hold (NaN by default): :meth:`check_contents` tells a stray write by it.
    fill: float = float("nan")
    #: A quantized pool's per-KV-head scales, fp32 ``[num_kv_heads]`` (None: the pool holds values, not codes).
    k_scale: "torch.Tensor | None" = None
    v_scale: "torch.Tensor | None" = None

    # ---- shape facts ---------------------------------------------------------------------------
    @property
    def page_size(self) -> int:
        return self.k_pages.shape[1]

    @property
    def num_pages(self) -> int:
        return self.k_pages.shape[0]

    @property
    def num_kv_heads(self) -> int:
        return self.k_pages.shape[2]

    @property
    def head_dim(self) -> int:
        return self.k_pages.shape[3]

    @property
    def batch(self) -> int:
        return self.block_table.shape[0]

    def pages_of(self, seq: int) -> list[int]:
        """Physical pages of sequence ``seq`` in logical order."""
        n = math.ceil(int(self.seq_lens[seq]) / self.page_size)
        return [int(p) for p in self.block_table[seq, :n].tolist()]

    def unique_pages(self) -> set[int]:
        """Physical pages referenced by any sequence (a shared prefix page counts once)."""
        return {p for b in range(self.batch) for p in self.pages_of(b)}

    # ---- construction --------------------------------------------------------------------------
    @classmethod
    def allocate(cls, *, num_pages: int, page_size: int, batch: int, max_pages_per_seq: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device | str, fill: float = float("nan"),
                 generator: torch.Generator | None = None) -> "PagedKVCache":
        """An empty pool of ``num_pages`` pages filled with ``fill`` (NaN by default, so a read of an
        unwritten slot poisons the result instead of passing as zero). The free list is shuffled with
        ``generator`` when given (a long-running server's free list is not in address order)."""
        shape = (num_pages, page_size, num_kv_heads, head_dim)
        k = torch.full(shape, fill, dtype=dtype, device=device)
        v = torch.full(shape, fill, dtype=dtype, device=device)
        order = torch.randperm(num_pages, generator=generator).tolist() if generator is not None else list(range(num_pages))[::-1]
        return cls(
            k_pages=k, v_pages=v,
            block_table=torch.full((batch, max_pages_per_seq), -1, dtype=torch.int32, device=device),
            seq_lens=torch.zeros(batch, dtype=torch.int32, device=device),
            free_pages=order, fill=fill,
        )

    def _take_page(self) -> int:
        if not self.free_pages:
            raise RuntimeError(f"paged KV cache is full ({self.num_pages} pages of {self.page_size} tokens)")
        return self.free_pages.pop()

    @classmethod
    def from_dense(cls, k: torch.Tensor, v: torch.Tensor, *, page_size: int, seq_lens: list[int] | None = None,
                   shared_prefix_len: int = 0, extra_pages: int = 0, generator: torch.Generator | None = None,
                   fill: float = float("nan")) -> "PagedKVCache":
        """Page a dense cache.

        Args:
            k, v: ``[batch, num_kv_heads, kv_len, head_dim]`` (SDPA layout).
            page_size: tokens per page.
            seq_lens: valid tokens per sequence (default: all ``kv_len``); tokens past them are not stored.
            shared_prefix_len: the first ``shared_prefix_len`` tokens are stored once, from sequence 0, and
                every sequence's block table points at those pages (its own copy of the prefix in ``k``/``v``
                is ignored: callers make the dense tensors agree, see :func:`share_prefix`).
            extra_pages: free pages left in the pool (for appends).
            generator: shuffles the free list, so each sequence's pages are scattered, not one ``arange``.

        Raises:
            ValueError: ``shared_prefix_len`` is not a multiple of ``page_size`` or exceeds a length.
        """
        batch, hkv, kv_len, d = k.shape
        lens = [kv_len] * batch if seq_lens is None else [int(x) for x in seq_lens]
        if len(lens) != batch or any(not 0 <= n <= kv_len for n in lens):
            raise ValueError(f"seq_lens {lens} must have {batch} entries in [0, {kv_len}]")
        if shared_prefix_len % page_size or any(n < shared_prefix_len for n in lens):
            raise ValueError(f"shared_prefix_len {shared_prefix_len} must be a multiple of page_size {page_size} and <= every length")
        prefix_pages = shared_prefix_len // page_size
        own = [math.ceil(n / page_size) - prefix_pages for n in lens]
        num_pages = prefix_pages + sum(own) + extra_pages
        max_pages = max(math.ceil(max(lens, default=0) / page_size), 1) + math.ceil(extra_pages / max(batch, 1))
        cache = cls.allocate(num_pages=num_pages, page_size=page_size, batch=batch, max_pages_per_seq=max_pages,
                             num_kv_heads=hkv, head_dim=d, dtype=k.dtype, device=k.device, fill=fill, generator=generator)
        # Logical pages of the dense cache, with slots past each length set to ``fill``: [B, P, page, Hkv, d].
        n_log = max(math.ceil(kv_len / page_size), 1)
        pad = n_log * page_size - kv_len
        valid = (torch.arange(n_log * page_size, device=k.device)[None, :]
                 < torch.tensor(lens, device=k.device)[:, None]).view(batch, n_log, page_size, 1, 1)

        def logical(x: torch.Tensor) -> torch.Tensor:
            x = torch.nn.functional.pad(x.transpose(1, 2), (0, 0, 0, 0, 0, pad))
            return x.reshape(batch, n_log, page_size, hkv, d).masked_fill(~valid, fill)

        lk, lv = logical(k), logical(v)
        shared = [cache._take_page() for _ in range(prefix_pages)]
        cache.shared_pages = set(shared)
        table = torch.full((batch, max_pages), -1, dtype=torch.int32)
        src_b, src_j, dst = [], [], []
        for j, p in enumerate(shared):
            src_b.append(0), src_j.append(j), dst.append(p)
        for b in range(batch):
            table[b, :prefix_pages] = torch.tensor(shared, dtype=torch.int32)
            for j in range(prefix_pages, prefix_pages + own[b]):
                p = cache._take_page()
                table[b, j] = p
                src_b.append(b), src_j.append(j), dst.append(p)
        if dst:
            bi = torch.tensor(src_b, device=k.device)
            ji = torch.tensor(src_j, device=k.device)
            di = torch.tensor(dst, device=k.device)
            cache.k_pages[di] = lk[bi, ji]
            cache.v_pages[di] = lv[bi, ji]
        cache.block_table.copy_(table)
        cache.seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))
        return cache

    def _write(self, page: int, k_tokens: torch.Tensor, v_tokens: torch.Tensor, offset: int = 0) -> None:
        """Write ``[num_kv_heads, n, head_dim]`` tokens into ``page`` starting at slot ``offset``."""
        n = k_tokens.shape[1]
        self.k_pages[page, offset:offset + n] = k_tokens.transpose(0, 1)
        self.v_pages[page, offset:offset + n] = v_tokens.transpose(0, 1)

    # ---- mutation ------------------------------------------------------------------------------
    def append(self, seq: int, k_new: torch.Tensor, v_new: torch.Tensor) -> None:
        """Append tokens ``[num_kv_heads, n, head_dim]`` to sequence ``seq``, taking pages from the free
        list as page boundaries are crossed; a partially filled shared page is copied first.

        Raises:
            RuntimeError: the pool has no free page left, or the block table row is full.
        """
        n = k_new.shape[1]
        length = int(self.seq_lens[seq])
        written = 0
        while written < n:
            j, slot = divmod(length, self.page_size)
            if j >= self.block_table.shape[1]:
                raise RuntimeError(f"sequence {seq} has no block-table slot for page {j}")
            if slot == 0:
                page = self._take_page()
                self.block_table[seq, j] = page
            else:
                page = int(self.block_table[seq, j])
                if page in self.shared_pages:  # copy-on-write: shared prefix pages are immutable
                    new = self._take_page()
                    self.k_pages[new] = self.k_pages[page]
                    self.v_pages[new] = self.v_pages[page]
                    self.block_table[seq, j] = new
                    page = new
            take = min(self.page_size - slot, n - written)
            self._write(page, k_new[:, written:written + take], v_new[:, written:written + take], offset=slot)
            written += take
            length += take
        self.seq_lens[seq] = length

    # ---- the serving step's cache append (vLLM's reshape_and_cache) ----------------------------
    def slot_mapping(self, q_lens: "list[int] | tuple[int, ...]") -> torch.Tensor:
        """Flat pool slot (``page · page_size + offset``, int64) of every new token: sequence ``b``'s last
        ``q_lens[b]`` tokens (positions ``seq_lens[b] − q_lens[b] … seq_lens[b] − 1``), sequences in order —
        the ``slot_mapping`` a serving engine hands its append kernel (vLLM ``reshape_and_cache``), ``[Σ q_lens]``.
        The pages must already be in the block table (the scheduler allocates them before the step).

        Raises:
            ValueError: ``q_lens`` has not one entry per sequence, or an entry is outside ``[0, seq_lens[b]]``.
        """
        lens = [int(x) for x in self.seq_lens.tolist()]
        if len(q_lens) != len(lens) or any(not 0 <= int(q) <= n for q, n in zip(q_lens, lens)):
            raise ValueError(f"q_lens {list(q_lens)} must have {len(lens)} entries, each in [0, seq_lens {lens}]")
        dev = self.block_table.device
        seq = torch.repeat_interleave(torch.arange(len(lens), device=dev), torch.tensor(list(q_lens), device=dev))
        start = torch.tensor([n - int(q) for q, n in zip(q_lens, lens)], device=dev)
        first = torch.tensor([0] + list(q_lens), device=dev).cumsum(0)[:-1]
        pos = start[seq] + torch.arange(seq.numel(), device=dev) - first[seq]
        pages = self.block_table.long()[seq, pos // self.page_size]
        return pages * self.page_size + pos % self.page_size

    def clear_slots(self, slot_mapping: torch.Tensor) -> None:
        """Set the given flat slots back to :attr:`fill` (the state before an append)."""
        for pool in (self.k_pages, self.v_pages):
            pool.view(-1, self.num_kv_heads, self.head_dim).index_fill_(0, slot_mapping, self.fill)

    def check_contents(self, k: torch.Tensor, v: torch.Tensor) -> str | None:
        """None when the pool holds exactly the dense cache ``k``/``v`` (``[B, Hkv, Lk, d]``) through the block
        table — every sequence's ``seq_lens[b]`` tokens, a partial last page included — and every other slot
        still holds :attr:`fill` (NaN: is NaN); else what differs first, e.g. ``"sequence 1: 3 of 17 tokens
        differ (first at position 16)"`` or ``"5 unused pool slots were written"``. Shared prefix pages are
        compared against sequence 0's copy (bitwise, in the pool's dtype)."""
        page = self.page_size
        used = torch.zeros(self.num_pages * page, dtype=torch.bool, device=self.k_pages.device)
        flat_k = self.k_pages.view(-1, self.num_kv_heads, self.head_dim)
        flat_v = self.v_pages.view(-1, self.num_kv_heads, self.head_dim)
        for b in range(self.batch):
            n = int(self.seq_lens[b])
            pos = torch.arange(n, device=used.device)
            slots = self.block_table[b].long()[pos // page] * page + pos % page
            used[slots] = True
            want_k, want_v = k[b, :, :n].transpose(0, 1), v[b, :, :n].transpose(0, 1)
            bad = ((flat_k[slots] != want_k) | (flat_v[slots] != want_v)).flatten(1).any(1)
            if bad.any():
                first = int(bad.nonzero()[0])
                return f"sequence {b}: {int(bad.sum())} of {n} tokens differ (first at position {first})"
        rest_k, rest_v = flat_k[~used], flat_v[~used]
        if math.isnan(self.fill):
            stray = ~(torch.isnan(rest_k) & torch.isnan(rest_v)).flatten(1).all(1)
        else:  # the fill as the pool stores it (1e4 is 9984 in bf16)
            fill = torch.tensor(self.fill, dtype=self.k_pages.dtype, device=self.k_pages.device)
            stray = ((rest_k != fill) | (rest_v != fill)).flatten(1).any(1)
        if stray.any():
            return f"{int(stray.sum())} unused pool slots were written"
        return None

    # ---- quantization --------------------------------------------------------------------------
    def quantize_fp8(self, k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
        """Replace the pools by their FP8 E4M3 codes, ``clamp(x / scale_h, ±448)`` rounded to nearest
        (:func:`quantize`), and keep the scales (fp32 ``[num_kv_heads]``). :attr:`fill` becomes the code an
        unused slot now holds (a finite fill beyond ±448 · scale saturates to ±448; NaN stays NaN).

        Raises:
            ValueError: the pool is already quantized, or a scale is not ``[num_kv_heads]``.
        """
        if self.k_scale is not None:
            raise ValueError("the pool is already quantized")
        for s in (k_scale, v_scale):
            if tuple(s.shape) != (self.num_kv_heads,):
                raise ValueError(f"a scale must be [num_kv_heads] = [{self.num_kv_heads}], got {tuple(s.shape)}")
        self.k_scale = k_scale.to(torch.float32).contiguous()
        self.v_scale = v_scale.to(torch.float32).contiguous()
        self.k_pages = quantize(self.k_pages, self.k_scale, head_axis=2)
        self.v_pages = quantize(self.v_pages, self.v_scale, head_axis=2)
        if not math.isnan(self.fill):
            self.fill = max(-FP8_E4M3_MAX, min(FP8_E4M3_MAX, self.fill))

    def dense(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The cache as dense ``[batch, num_kv_heads, max seq_len, head_dim]`` K and V in ``dtype`` through the block
        table — dequantized (``code · scale``, computed in ``dtype``) for a quantized pool; slots past a sequence's
        length are zero. What a correctness reference reads: the values the kernels must attend over."""
        lens = [int(x) for x in self.seq_lens.tolist()]
        shape = (self.batch, self.num_kv_heads, max(lens, default=0), self.head_dim)
        k = torch.zeros(shape, dtype=dtype, device=self.k_pages.device)
        v = torch.zeros(shape, dtype=dtype, device=self.k_pages.device)
        for b, n in enumerate(lens):
            kb, vb = self.gather(b)
            if self.k_scale is not None:
                kb = dequantize(kb, self.k_scale, head_axis=0, dtype=dtype)
                vb = dequantize(vb, self.v_scale, head_axis=0, dtype=dtype)
            k[b, :, :n], v[b, :, :n] = kb.to(dtype), vb.to(dtype)
        return k, v

    # ---- reading -------------------------------------------------------------------------------
    def gather(self, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sequence ``seq``'s K and V as dense ``[num_kv_heads, seq_len, head_dim]`` (a copy)."""
        length = int(self.seq_lens[seq])
        pages = torch.tensor(self.pages_of(seq), dtype=torch.long, device=self.k_pages.device)
        k = self.k_pages[pages].reshape(-1, self.num_kv_heads, self.head_dim)[:length]
        v = self.v_pages[pages].reshape(-1, self.num_kv_heads, self.head_dim)[:length]
        return k.transpose(0, 1).contiguous(), v.transpose(0, 1).contiguous()


def reshape_and_cache(k_new: torch.Tensor, v_new: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor,
                      slot_mapping: torch.Tensor) -> None:
    """Write new tokens' K and V into the page pool at their flat slots (vLLM's ``reshape_and_cache``, in torch:
    one ``index_copy_`` per pool on its ``[num_pages · page_size, Hkv, d]`` view).

    Args:
        k_new, v_new: ``[T, Hkv, d]``, the step's new tokens (sequences in order).
        k_pages, v_pages: ``[num_pages, page_size, Hkv, d]`` (contiguous).
        slot_mapping: ``[T]`` int64, ``page · page_size + offset`` of each token (see
            :meth:`PagedKVCache.slot_mapping`). Writing the same tokens to the same slots again leaves the
            pool unchanged (idempotent), so timed repetitions all start from the same state.
    """
    hkv, d = k_pages.shape[2], k_pages.shape[3]
    k_pages.view(-1, hkv, d).index_copy_(0, slot_mapping, k_new)
    v_pages.view(-1, hkv, d).index_copy_(0, slot_mapping, v_new)


@dataclass
class CacheAppend:
    """The step's new K/V, packed ``[Σ q_len_b, Hkv, d]`` (sequence ``b``'s ``q_len_b`` tokens in order), and
    the flat pool slot of each (``slot_mapping``, int64): what an appending call writes before it attends."""

    k_new: torch.Tensor
    v_new: torch.Tensor
    slot_mapping: torch.Tensor

    @property
    def tokens(self) -> int:
        return self.slot_mapping.numel()


#: Largest finite magnitude of FP8 E4M3 (``torch.finfo(torch.float8_e4m3fn).max``; OCP 8-bit FP spec, E4M3).
FP8_E4M3_MAX = 448.0


def per_head_scales(x: torch.Tensor, lens: "list[int] | tuple[int, ...]") -> torch.Tensor:
    """One FP8 scale per KV head: ``amax_h / 448`` over every sequence's first ``lens[b]`` tokens of ``x``
    (``[B, Hkv, L, d]``), fp32 ``[Hkv]`` (1.0 for a head of zeros), so the largest value maps to E4M3's largest
    finite code. The per-tensor-amax recipe of vLLM's ``calculate_kv_scales``, taken per KV head.

    Raises:
        ValueError: ``lens`` has not one entry per sequence.
    """
    if len(lens) != x.shape[0]:
        raise ValueError(f"{len(lens)} lengths for {x.shape[0]} sequences")
    valid = torch.arange(x.shape[2], device=x.device)[None, :] < torch.tensor(list(lens), device=x.device)[:, None]
    amax = x.detach().abs().to(torch.float32).masked_fill(~valid[:, None, :, None], 0).amax(dim=(0, 2, 3))
    return torch.where(amax > 0, amax / FP8_E4M3_MAX, torch.ones_like(amax))


def quantize(x: torch.Tensor, scale: torch.Tensor, *, head_axis: int) -> torch.Tensor:
    """FP8 E4M3 codes of ``x``: ``clamp(x / scale_h, −448, 448)`` cast (round to nearest even) to
    ``torch.float8_e4m3fn``; ``scale`` ``[H]`` fp32 broadcast along ``head_axis`` of ``x``."""
    view = [1] * x.dim()
    view[head_axis] = -1
    y = x.to(torch.float32) / scale.to(torch.float32).view(view)
    return y.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)


def dequantize(codes: torch.Tensor, scale: torch.Tensor, *, head_axis: int, dtype: torch.dtype) -> torch.Tensor:
    """``code · scale_h`` in ``dtype`` (the product computed in ``dtype``); ``scale`` ``[H]`` along ``head_axis``."""
    view = [1] * codes.dim()
    view[head_axis] = -1
    return codes.to(dtype) * scale.to(dtype).view(view)


def ragged_lengths(kv_len: int, batch: int, dist: str, seed: int) -> list[int]:
    """Per-sequence KV lengths (max ``kv_len``), reproducible from ``seed``.

    ``dist``: ``uniform`` (every sequence ``kv_len``), ``ragged`` (uniform on ``[1, kv_len]``, the longest
    set to ``kv_len``), ``lognormal`` (``kv_len · exp(N(0, 0.75²))`` clipped to ``[1, kv_len]``, longest set
    to ``kv_len``: a serving-like long tail).

    Raises:
        ValueError: unknown ``dist``.
    """
    if dist == "uniform":
        return [kv_len] * batch
    g = torch.Generator().manual_seed(seed)
    if dist == "ragged":
        lens = torch.randint(1, kv_len + 1, (batch,), generator=g).tolist()
    elif dist == "lognormal":
        draw = torch.exp(torch.randn(batch, generator=g) * 0.75) * (kv_len / 2.0)
        lens = [int(min(max(1, round(x)), kv_len)) for x in draw.tolist()]
    else:
        raise ValueError(f"unknown length distribution {dist!r}; valid: uniform, ragged, lognormal")
    lens[int(torch.tensor(lens).argmax())] = kv_len
    return [int(x) for x in lens]
