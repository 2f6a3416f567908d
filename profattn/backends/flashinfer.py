"""FlashInfer's serving kernels: batch decode and batch prefill over the paged KV cache, and batch prefill
over ragged (packed) K/V. Optional: where ``flashinfer`` is not importable (a CPU machine, no wheel) every
FlashInfer backend is ``unsupported`` with the reason.

API used (FlashInfer 0.5.3, ``flashinfer/decode.py`` and ``flashinfer/prefill.py``):
``BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_cuda_graph, use_tensor_cores, ...)`` then
``plan(indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size, ...)`` and
``run(q[B, Hq, d], (k_pages, v_pages))``; ``BatchPrefillWithPagedKVCacheWrapper.plan(qo_indptr, kv_indptr,
kv_indices, last_page_len, ..., causal=True)`` and ``BatchPrefillWithRaggedKVCacheWrapper.plan(qo_indptr,
kv_indptr, ..., causal=True)`` with ``run(q[Σq, Hq, d], ...)``. FlashInfer's ``causal`` aligns the query
block to the end of the keys (its "append" semantics), which is profattn's bottom-right mask.

Our paged cache is already FlashInfer's NHD layout (``[num_pages, page_size, Hkv, d]`` for K and for V,
passed as a tuple); the block table becomes FlashInfer's CSR page list (:func:`csr_pages`). ``plan()`` is
host-side set-up and runs in ``bind`` (outside every timed and profiled window). JIT compilation happens
in :meth:`prepare`, on a tiny problem with the same configuration, and its wall time is a cell note —
never inside a timing.

An appending call (decode and paged prefill) writes its new K/V with FlashInfer's own append
(``flashinfer/page.py``: ``append_paged_kv_cache(append_key, append_value, batch_indices, positions,
(k_pages, v_pages), kv_indices, kv_indptr, kv_last_page_len, kv_layout="NHD")``, the CSR page list of the
cache *after* the append, ``positions`` as ``get_batch_indices_positions(append_indptr, seq_lens, nnz)``
gives them); its index tensors are built in ``bind_append`` (:func:`append_args`), untimed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from profattn.interfaces import ADOPTIONS
from profattn.backends.base import AttentionInputs, Prepared, Unsupported, paged_decode_reason, paged_only_forward
from profattn.backends.packing import pack_rows, row_offsets, unpack_rows
from profattn.families import FLASHINFER, FLASHINFER_FA2, FLASHINFER_FA3
from profattn.workload import KVLayout, Phase, Workload

#: FlashInfer's recommended float workspace (its docstrings: "The recommended size is 128MB").
WORKSPACE_BYTES = 128 << 20
#: GQA group sizes (Hq / Hkv) FlashInfer 0.5.3's CUDA-core decode kernel is compiled for: its
#: ``DISPATCH_GQA_GROUP_SIZE`` (``include/flashinfer/utils.cuh``) takes 1, 2, 3, 4 and 8 and raises
#: "Unsupported group_size" at plan() for any other (an MQA model with 32 query heads, say).
DECODE_GROUP_SIZES = (1, 2, 3, 4, 8)
#: Head dimensions FlashInfer 0.5.3 ships kernels for.
HEAD_DIMS = (64, 128, 256)
_DTYPES = ("bfloat16", "float16")
#: How an FP8 cache with per-KV-head scales runs through FlashInfer 0.5.3, whose decode ``run()`` takes one float
#: ``k_scale``/``v_scale`` per tensor (folded into ``sm_scale``; the output multiplied by ``v_scale`` after the kernel,
#: ``flashinfer/decode.py``): the per-head ``k_scale`` is folded into q (``q·k_scale[h]`` for each query head of KV
#: head ``h``, one elementwise kernel) and the per-head ``v_scale`` multiplies the output (a second one), both inside
#: the timed call — the same two extra launches FlashInfer's own scalar path makes.
FP8_KV_NOTE = ("FP8 E4M3 pages (kv_data_type=float8_e4m3fn); per-KV-head k_scale folded into q and v_scale applied to "
               "the output by two elementwise kernels inside the timed call (0.5.3's run() takes one scale per tensor)")


def flashinfer_reason(device: torch.device) -> str | None:
    """None when FlashInfer can run on ``device``, else why not (not CUDA; not importable, with the first
    line of the import error)."""
    if device.type != "cuda":
        return "FlashInfer runs on CUDA GPUs only"
    try:
        import flashinfer  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken install may raise anything on import
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return (f"flashinfer is not importable ({type(exc).__name__}: {first}); install profattn[flashinfer] "
                "(README: carrying the wheels to a machine without internet)")
    return None


def shape_reason(w: Workload) -> str | None:
    """Why FlashInfer has no kernel for ``w``'s dtype or head_dim (None when it has)."""
    if w.dtype not in _DTYPES:
        return f"FlashInfer kernels take bfloat16 or float16, not {w.dtype}"
    if w.head_dim not in HEAD_DIMS:
        return f"head_dim {w.head_dim} has no FlashInfer kernel (it ships {', '.join(map(str, HEAD_DIMS))})"
    return None


def csr_pages(block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashInfer's page list from a block table: ``indptr`` ``[B + 1]`` (int32), ``indices``
    ``[indptr[-1]]`` (int32, each sequence's pages in logical order) and ``last_page_len`` ``[B]`` (int32,
    1 … page_size), on the block table's device.

    ``block_table``: ``[B, max_pages]`` int32 (``-1`` past the last page); ``seq_lens``: ``[B]`` int32 tokens.

    Raises:
        ValueError: a sequence of length 0 (FlashInfer needs ``1 ≤ last_page_len``).
    """
    lens = [int(x) for x in seq_lens.tolist()]
    if any(n < 1 for n in lens):
        raise ValueError("every sequence needs at least one token")
    pages = [-(-n // page_size) for n in lens]
    table = block_table.tolist()
    indices = [p for b, n in enumerate(pages) for p in table[b][:n]]
    last = [n - (k - 1) * page_size for n, k in zip(lens, pages)]
    dev = block_table.device
    as_int = lambda xs: torch.tensor(xs, dtype=torch.int32, device=dev)  # noqa: E731
    return row_offsets(pages, dev), as_int(indices), as_int(last)


@dataclass(frozen=True)
class AppendArgs:
    """The index arguments of FlashInfer's ``append_paged_kv_cache`` for one step, on the block table's device
    (all int32): ``batch_indices`` and ``positions`` ``[nnz]`` (new token ``i`` is position ``positions[i]``
    of sequence ``batch_indices[i]``), and the CSR page list of the cache after the append — ``kv_indptr``
    ``[B + 1]``, ``kv_indices`` ``[kv_indptr[-1]]``, ``kv_last_page_len`` ``[B]`` (see :func:`csr_pages`)."""

    batch_indices: torch.Tensor
    positions: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    kv_last_page_len: torch.Tensor


def append_args(block_table: torch.Tensor, seq_lens: torch.Tensor, q_lens: "list[int] | tuple[int, ...]",
                page_size: int) -> AppendArgs:
    """FlashInfer's append arguments for a step whose sequence ``b`` appends its last ``q_lens[b]`` tokens.

    ``positions`` are what FlashInfer's ``get_batch_indices_positions(append_indptr, seq_lens, nnz)`` gives
    (its Triton kernel stores ``seq_len_b − q_len_b + i``), built here in torch so the arguments need no GPU;
    the page list is :func:`csr_pages` of the cache after the append (FlashInfer's append "assumes that the
    space for appended k/v has already been allocated"). FlashInfer's kernel then writes token ``i`` to page
    ``kv_indices[kv_indptr[b] + positions[i] // page_size]``, slot ``positions[i] % page_size``: the same slots
    as :meth:`~profattn.workload.paged.PagedKVCache.slot_mapping`.

    Args:
        block_table: ``[B, max_pages]`` int32 (``-1`` past the last page), the pages already allocated.
        seq_lens: ``[B]`` int32, tokens of each sequence after the append.
        q_lens: ``B`` new-token counts, packed in this order (``[Σ q_lens, Hkv, d]``).
        page_size: tokens per page.

    Raises:
        ValueError: ``q_lens`` has not one entry per sequence, an entry is outside ``[0, seq_lens[b]]``, or a
            sequence is empty (see :func:`csr_pages`).
    """
    lens = [int(x) for x in seq_lens.tolist()]
    q = [int(x) for x in q_lens]
    if len(q) != len(lens) or any(not 0 <= n <= m for n, m in zip(q, lens)):
        raise ValueError(f"q_lens {q} must have {len(lens)} entries, each in [0, seq_lens {lens}]")
    dev = block_table.device
    indptr, indices, last = csr_pages(block_table, seq_lens, page_size)
    counts = torch.tensor(q, dtype=torch.long, device=dev)
    batch = torch.repeat_interleave(torch.arange(len(q), device=dev), counts)
    append_indptr = row_offsets(q, dev).long()
    start = torch.tensor([m - n for n, m in zip(q, lens)], dtype=torch.long, device=dev)
    positions = start[batch] + torch.arange(batch.numel(), device=dev) - append_indptr[batch]
    return AppendArgs(batch.to(torch.int32), positions.to(torch.int32), indptr, indices, last)


def bind_flashinfer_append(inputs: AttentionInputs) -> Callable[[], None]:
    """A FlashInfer backend's ``Prepared.bind_append``: the zero-argument call that appends ``inputs.append``
    into ``inputs.paged`` with ``flashinfer.page.append_paged_kv_cache`` (NHD, the K and V pools as a tuple);
    its index tensors (:func:`append_args`) are built here, untimed.

    Raises:
        ValueError: ``inputs`` has no paged cache, no append or no ``q_lens``, or the new tokens are not
            ``Σ q_lens``.
        ImportError: flashinfer is not importable (the backends' ``unsupported_reason`` says so first).
    """
    cache, new = inputs.paged, inputs.append
    if cache is None or new is None or inputs.q_lens is None:
        raise ValueError("an append needs a paged cache, the step's new K/V and q_lens (workload append=True)")
    q_lens = [int(x) for x in inputs.q_lens.tolist()]
    if sum(q_lens) != new.tokens:
        raise ValueError(f"{new.tokens} new tokens for q_lens summing to {sum(q_lens)}")
    from flashinfer.page import append_paged_kv_cache

    a = append_args(cache.block_table, cache.seq_lens, q_lens, cache.page_size)
    kv = (cache.k_pages, cache.v_pages)
    return lambda: append_paged_kv_cache(new.k_new, new.v_new, a.batch_indices, a.positions, kv, a.kv_indices,
                                         a.kv_indptr, a.kv_last_page_len, kv_layout="NHD")


def jit_warmup(make_call) -> float:  # noqa: ANN001
    """Run ``make_call()()`` once and return its wall time (s): FlashInfer JIT-compiles on first use (the
    FlashInfer backends call it in ``prepare``, on a tiny problem of the cell's configuration)."""
    t0 = time.perf_counter()
    make_call()()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


class FlashInferDecode:
    """``flashinfer-decode`` / ``flashinfer-decode-tc``: ``BatchDecodeWithPagedKVCacheWrapper`` on the
    paged cache, with CUDA cores or (``tensor_cores``) its prefill-kernel path for large GQA groups; planned
    in CUDA-graph mode (fixed buffers), so the harness's graph replay is what a serving engine runs."""

    family = FLASHINFER
    #: decode steps given per sequence (ragged KV lengths, an appending step) read the same CSR page list
    varlen = True
    #: Reads an FP8 E4M3 cache, its per-KV-head scales applied around the kernel (:data:`FP8_KV_NOTE`).
    kv_dtypes = ("float8_e4m3fn",)
    #: The workload fields that pick the JIT-compiled module ``prepare()`` builds (:mod:`profattn.harness.prewarm`).
    jit_fields = ("dtype", "kv_dtype", "head_dim", "window")

    def __init__(self, tensor_cores: bool) -> None:
        self.tensor_cores = tensor_cores
        self.name = "flashinfer-decode-tc" if tensor_cores else "flashinfer-decode"
        self.description = ("FlashInfer batch decode over the paged cache, "
                            + ("tensor-core (prefill-kernel) path" if tensor_cores else "CUDA-core path") + " (optional)")

    @property
    def adoption(self):  # noqa: ANN201
        """The interface it implements and the layout it reads (:data:`profattn.interfaces.ADOPTIONS`)."""
        return ADOPTIONS[self.name]

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        reason = flashinfer_reason(device) or paged_decode_reason(workload) or shape_reason(workload)
        if reason is None and not self.tensor_cores and workload.group_size not in DECODE_GROUP_SIZES:
            reason = (f"FlashInfer's CUDA-core decode is compiled for GQA group sizes "
                      f"{', '.join(map(str, DECODE_GROUP_SIZES))}, not {workload.group_size} (use the tensor-core path)")
        return reason

    def _wrapper(self, device: torch.device, indptr, indices, last, w: Workload):  # noqa: ANN001
        import flashinfer

        ws = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            ws, "NHD", use_cuda_graph=True, use_tensor_cores=self.tensor_cores,
            paged_kv_indptr_buffer=torch.empty_like(indptr), paged_kv_indices_buffer=torch.empty_like(indices),
            paged_kv_last_page_len_buffer=torch.empty_like(last))
        dt = getattr(torch, w.dtype)
        kv_dt = getattr(torch, w.kv_dtype) if w.kv_dtype is not None else dt
        wrapper.plan(indptr, indices, last, w.num_q_heads, w.num_kv_heads, w.head_dim, w.page_size,
                     pos_encoding_mode="NONE", q_data_type=dt, kv_data_type=kv_dt, window_left=window_left(w))
        return wrapper

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        w = workload
        dt = getattr(torch, w.dtype)

        def tiny():
            pages = torch.randn(2, w.page_size, w.num_kv_heads, w.head_dim, device=device, dtype=dt)
            if w.kv_dtype is not None:
                pages = pages.to(getattr(torch, w.kv_dtype))
            one = torch.tensor([0, 1], dtype=torch.int32, device=device)
            wr = self._wrapper(device, one, one[:1].clone(), torch.tensor([w.page_size], dtype=torch.int32, device=device), w)
            q = torch.randn(1, w.num_q_heads, w.head_dim, device=device, dtype=dt)
            return lambda: wr.run(q, (pages, pages))

        jit_s = jit_warmup(tiny)

        def bind(inputs: AttentionInputs):
            cache = inputs.paged
            indptr, indices, last = csr_pages(cache.block_table, cache.seq_lens, cache.page_size)
            wrapper = self._wrapper(device, indptr, indices, last, w)
            q = inputs.q[:, :, 0, :].contiguous()
            out = torch.empty_like(q)
            if cache.k_scale is None:
                def call() -> torch.Tensor:
                    return wrapper.run(q, (cache.k_pages, cache.v_pages), out=out).unsqueeze(2)

                return call
            group = w.num_q_heads // w.num_kv_heads  # query head j reads KV head j // group
            k_scale = cache.k_scale.repeat_interleave(group).view(1, -1, 1)
            v_scale = cache.v_scale.repeat_interleave(group).view(1, -1, 1)
            q_scaled, scaled_out = torch.empty_like(q), torch.empty_like(q)

            def call_fp8() -> torch.Tensor:
                torch.mul(q, k_scale, out=q_scaled)
                wrapper.run(q_scaled, (cache.k_pages, cache.v_pages), out=out)
                return torch.mul(out, v_scale, out=scaled_out).unsqueeze(2)

            return call_fp8

        return Prepared(forward=paged_only_forward, bind=bind, bind_append=bind_flashinfer_append, notes=(
            f"FlashInfer {flashinfer_version()} BatchDecodeWithPagedKVCacheWrapper, use_tensor_cores={self.tensor_cores}, "
            "CUDA-graph mode; plan() outside the timed window",
            f"JIT compile + first call (tiny problem, same configuration): {jit_s:.1f} s, outside every timing",
        ) + _append_note(w) + ((FP8_KV_NOTE,) if w.kv_dtype is not None else ()))


#: The ``backend=`` choices of FlashInfer 0.5.3's prefill wrappers that run on an H200 (``flashinfer/prefill.py``,
#: ``BatchPrefillWithPagedKVCacheWrapper.__init__``: ``auto``/``fa2``/``fa3``/``cudnn``; ``trtllm-gen`` is
#: Blackwell's). ``auto`` resolves in ``plan()`` by ``flashinfer.utils.determine_attention_backend``: ``fa3`` when
#: ``is_sm90a_supported`` (compute capability 9.x and CUDA ≥ 12.3) and ``is_fa3_backend_supported`` (no custom mask,
#: no RoPE in the kernel, no fp16 QK reduction — whatever the dtype or head_dim), else ``fa2``; so on the H200 every
#: profattn call of ``auto`` runs FA3 — the committed H200 traces show ``flashinfer::PrefillWithKVCacheKernel<
#: flashinfer::SparseCollectiveMainloop<…>>`` (FA3's paged mainloop) in every ``flashinfer-prefill-paged`` cell.
PREFILL_BACKENDS = ("auto", "fa2", "fa3")
#: FA3's minimum CUDA runtime (``flashinfer.utils.is_sm90a_supported``: ``version_at_least(torch.version.cuda, "12.3")``).
FA3_MIN_CUDA = (12, 3)


def fa3_reason(device: torch.device) -> str | None:
    """Why FlashInfer's ``fa3`` backend cannot run on ``device`` (None when it can): FlashInfer 0.5.3 builds it for
    sm_90a only and picks it only where ``is_sm90a_supported`` holds — compute capability 9.x and CUDA ≥ 12.3
    (``flashinfer/utils.py``); the same test is applied here, before anything is compiled."""
    major, minor = torch.cuda.get_device_capability(device)
    cuda = tuple(int(x) for x in (torch.version.cuda or "0.0").split(".")[:2])
    if major != 9:
        return (f"FlashInfer's fa3 backend is built for sm_90a (Hopper) only; this GPU is SM {major}.{minor} "
                "(flashinfer.utils.is_sm90a_supported)")
    if cuda < FA3_MIN_CUDA:
        return f"FlashInfer's fa3 backend needs CUDA >= 12.3 (flashinfer.utils.is_sm90a_supported); torch has CUDA {torch.version.cuda}"
    return None


def prefill_call_reason(w: Workload, *, paged: bool) -> str | None:
    """Why a FlashInfer batch-prefill kernel over the paged cache (``paged``) or over packed dense K/V cannot take
    ``w``'s call (None when it can): no backward, the other layout, a shared prefix outside the paged cache."""
    if w.phase is Phase.TRAIN:
        return "FlashInfer has no backward (forward-only serving kernels)"
    if paged and w.kv_layout is not KVLayout.PAGED:
        return "reads a paged KV cache; this workload's layout is dense"
    if not paged and w.kv_layout is KVLayout.PAGED:
        return "reads packed dense K/V; this workload's cache is paged (flashinfer-prefill-paged reads it)"
    if w.shared_prefix_len and not paged:
        return "a shared prefix lives in the paged cache"
    return None


class FlashInferPrefill:
    """``flashinfer-prefill-paged`` (``paged``) / ``flashinfer-prefill-ragged``: batch prefill with the
    bottom-right causal mask over the paged cache (chunked prefill, mixed batches, and decode through the
    prefill kernels) or over packed dense K/V. Variable-length calls are packed to FlashInfer's
    ``[Σ q_len, Hq, d]`` in ``bind`` and unpacked for the correctness check outside the timing.

    ``backend`` is the wrapper's ``backend=`` (:data:`PREFILL_BACKENDS`): ``auto`` (FlashInfer's choice; the cell
    notes what it resolved to) or ``fa2``/``fa3`` made explicit (``flashinfer-prefill-paged-fa2`` /
    ``-fa3``), whose families (:data:`~profattn.families.FLASHINFER_FA2` / ``FLASHINFER_FA3``) confirm from the
    trace which of the two ran."""

    varlen = True
    #: The workload fields that pick the JIT-compiled module ``prepare()`` builds (:mod:`profattn.harness.prewarm`).
    jit_fields = ("dtype", "kv_dtype", "head_dim", "window")

    def __init__(self, paged: bool, backend: str = "auto") -> None:
        if backend not in PREFILL_BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(PREFILL_BACKENDS)}, got {backend!r}")
        self.paged = paged
        self.backend = backend
        base = "flashinfer-prefill-paged" if paged else "flashinfer-prefill-ragged"
        self.name = base if backend == "auto" else f"{base}-{backend}"
        self.family = {"auto": FLASHINFER, "fa2": FLASHINFER_FA2, "fa3": FLASHINFER_FA3}[backend]
        self.description = ("FlashInfer batch prefill over the " + ("paged cache" if paged else "packed (ragged) K/V")
                            + ", causal bottom-right"
                            + ("" if backend == "auto" else f", backend={backend!r} (FlashInfer's "
                               + ("FlashAttention-2 kernels" if backend == "fa2" else "Hopper FlashAttention-3 kernels")
                               + ")") + " (optional)")

    @property
    def adoption(self):  # noqa: ANN201
        """The interface it implements and the layout it reads (:data:`profattn.interfaces.ADOPTIONS`)."""
        return ADOPTIONS[self.name]

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        return (flashinfer_reason(device) or (fa3_reason(device) if self.backend == "fa3" else None)
                or prefill_call_reason(workload, paged=self.paged) or shape_reason(workload))

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        import flashinfer

        w = workload
        dt = getattr(torch, w.dtype)
        causal = w.mask.value == "causal"
        q_lens, kv_lens = list(w.q_lens), list(w.kv_lens)
        resolved: list[str] = []

        def wrapper_for(qo: list[int], kv: list[int], pages=None):  # noqa: ANN001
            ws = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
            qo_indptr = row_offsets(qo, device)
            if self.paged:
                indptr, indices, last = pages
                wr = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=self.backend)
                wr.plan(qo_indptr, indptr, indices, last, w.num_q_heads, w.num_kv_heads, w.head_dim, w.page_size,
                        causal=causal, q_data_type=dt, kv_data_type=dt, window_left=window_left(w))
            else:
                wr = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend=self.backend)
                wr.plan(qo_indptr, row_offsets(kv, device), w.num_q_heads, w.num_kv_heads, w.head_dim,
                        causal=causal, q_data_type=dt, kv_data_type=dt, window_left=window_left(w))
            # what ``auto`` became in plan() (FlashInfer keeps the choice in the wrapper's ``_backend``)
            resolved.append(str(getattr(wr, "_backend", "?")))
            return wr

        def tiny():
            n = min(16, w.page_size or 16)
            q = torch.randn(n, w.num_q_heads, w.head_dim, device=device, dtype=dt)
            if self.paged:
                pages = torch.randn(1, w.page_size, w.num_kv_heads, w.head_dim, device=device, dtype=dt)
                one = torch.tensor([0, 1], dtype=torch.int32, device=device)
                wr = wrapper_for([n], [n], (one, one[:1].clone(), torch.tensor([n], dtype=torch.int32, device=device)))
                return lambda: wr.run(q, (pages, pages))
            k = torch.randn(n, w.num_kv_heads, w.head_dim, device=device, dtype=dt)
            wr = wrapper_for([n], [n])
            return lambda: wr.run(q, k, k)

        jit_s = jit_warmup(tiny)
        l_max = w.q_len

        def bind(inputs: AttentionInputs):
            q = pack_rows(inputs.q, q_lens)
            if self.paged:
                cache = inputs.paged
                wr = wrapper_for(q_lens, kv_lens, csr_pages(cache.block_table, cache.seq_lens, cache.page_size))
                kv = (cache.k_pages, cache.v_pages)
                return lambda: wr.run(q, kv)
            k, v = pack_rows(inputs.k, kv_lens), pack_rows(inputs.v, kv_lens)
            wr = wrapper_for(q_lens, kv_lens)
            return lambda: wr.run(q, k, v)

        uniform = all(n == l_max for n in q_lens)
        return Prepared(
            forward=paged_only_forward if self.paged else _dense_forward_refused, bind=bind,
            bind_append=bind_flashinfer_append if self.paged else None,
            to_contract=lambda o: unpack_rows(o, q_lens, l_max),  # a view of [B·Lq, Hq, d] when uniform
            notes=(
                f"FlashInfer {flashinfer_version()} {'BatchPrefillWithPagedKVCacheWrapper' if self.paged else 'BatchPrefillWithRaggedKVCacheWrapper'}"
                f", causal={causal}, backend={self.backend!r}"
                + (f" (resolved to {resolved[-1]!r} in plan())" if resolved and resolved[-1] != self.backend else "")
                + f"; Q{'/K/V' if not self.paged else ''} packed to [Σ len, H, d] and plan() outside the timed window",
                f"JIT compile + first call (tiny problem, same configuration): {jit_s:.1f} s, outside every timing",
            ) + (() if uniform else ("output unpacked to [B, Hq, Lq_max, d] for the correctness check, outside the timing",))
            + _append_note(w),
        )


def window_left(w: Workload) -> int:
    """FlashInfer's ``plan(window_left=...)``: keys left of the diagonal each query sees, ``window − 1`` for a
    sliding window (the diagonal key plus ``W − 1`` before it: FlashInfer 0.5's convention), ``-1`` (no window)
    otherwise. Not run here without a GPU: checked on a CUDA run against the reference."""
    return -1 if w.window is None else w.window - 1


def _append_note(w: Workload) -> tuple[str, ...]:
    """The cell note of an appending call: which append ran (none for a call that does not append)."""
    return ("cache append: FlashInfer's append_paged_kv_cache (indices built outside the timed window)",) if w.append else ()


def _dense_forward_refused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    raise Unsupported("this backend packs its inputs in bind")


def flashinfer_version() -> str:
    """``flashinfer.__version__`` (``?`` where it cannot be read); FlashInfer must be importable."""
    try:
        import flashinfer

        return str(getattr(flashinfer, "__version__", "?"))
    except Exception:  # noqa: BLE001
        return "?"


#: The FlashInfer backends the registry lists (each says why where FlashInfer cannot run).
FLASHINFER_BACKENDS = (FlashInferDecode(False), FlashInferDecode(True), FlashInferPrefill(True), FlashInferPrefill(False),
                       FlashInferPrefill(True, "fa2"), FlashInferPrefill(True, "fa3"))
