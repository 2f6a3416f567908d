"""Our cache append: one Triton launch that writes a serving step's new K and V into the paged pool.

What vLLM's ``reshape_and_cache`` does (``csrc/cache_kernels.cu``), in one kernel for both pools: new token
``t`` (``[Σ q_len_b, Hkv, d]``, sequences in order) goes to flat pool slot ``slot_mapping[t]`` = ``page ·
page_size + offset`` of ``[num_pages, page_size, Hkv, d]``. One program copies ``BLOCK_T`` tokens ×
``BLOCK_HD`` elements of the flattened ``(head, d)`` row for K and for V (plain offsets when every tensor's
row is contiguous, the usual case; head and d strides otherwise), so the whole append is one launch
where the torch default (:func:`~profattn.workload.paged.reshape_and_cache`) is two ``index_copy_`` kernels.
On the H200 at the serving preset's shapes (B=8, Hkv=4, d=128, bf16; NOTES.md "Serving shapes") the torch
append took 205 µs per unchunked 8192-token prompt (269 MB read + written: 1.31 TB/s against a 4.29 TB/s copy
ceiling, a ~63 µs floor) and ~21 µs per 512-token chunk (16.8 MB: a ~4 µs floor).

A copy does no arithmetic, so every dtype moves bit for bit — bf16 too under Triton's CPU interpreter, whose
bf16 error is in ``tl.dot`` (:func:`~profattn.backends.triton_paged.interpreter_dtype`), not in loads and stores
(checked bit for bit in ``tests/backends/test_triton_append.py``). Triton is imported on first use (CPU
installs may lack it).

:func:`kernel_launch` is how every launch of our Triton kernels (this append, the decode kernels of
:mod:`~profattn.backends.triton_paged`, the prefill kernel of :mod:`~profattn.backends.triton_paged_prefill`) is
made: on a CPU tensor it names the kernel in the profiler trace.
"""

from __future__ import annotations

from typing import Callable

import torch

from profattn.backends.base import AttentionInputs
from profattn.families import INTERPRETER_RANGE_PREFIX

#: Elements of one pool (K or V) a program copies: ``BLOCK_T · BLOCK_HD`` (8 KiB of bf16 per pool).
ELEMENTS_PER_PROGRAM = 4096
NUM_WARPS = 4


def kernel_launch(kernel, grid: tuple[int, ...], device: torch.device) -> Callable[..., object]:
    """``kernel[grid]``, the launch of a Triton ``kernel`` (a ``triton.jit`` function) over ``grid`` programs.

    On a CPU ``device`` (Triton's interpreter, ``TRITON_INTERPRET=1``) the launch runs inside
    ``torch.profiler.record_function("triton-interpreter::<kernel name>")``
    (:data:`~profattn.families.INTERPRETER_RANGE_PREFIX`): the interpreter runs the kernel as Python and numpy, so
    without the range a CPU trace holds no evidence of which kernel ran and the TRITON family check finds
    nothing of its own. On CUDA the launch is returned as it is (the kernel itself is in the trace).
    """
    launch = kernel[grid]
    if device.type != "cpu":
        return launch
    name = INTERPRETER_RANGE_PREFIX + getattr(getattr(kernel, "fn", kernel), "__name__", "kernel")

    def traced(*args, **kwargs):
        with torch.profiler.record_function(name):
            return launch(*args, **kwargs)

    return traced


def _kernel():
    """Define the Triton kernel on first use."""
    import triton
    import triton.language as tl

    @triton.jit
    def _paged_append_kernel(
        KNew, VNew, KPages, VPages, SlotMapping, num_tokens,
        stride_knt, stride_knh, stride_knd,
        stride_vnt, stride_vnh, stride_vnd,
        stride_kp, stride_ks, stride_kh, stride_kd,
        stride_vp, stride_vs, stride_vh, stride_vd,
        ROW: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr,
        BLOCK_T: tl.constexpr, BLOCK_HD: tl.constexpr, FLAT: tl.constexpr,
    ):
        offs_t = (tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)).to(tl.int64)
        offs_e = tl.program_id(1) * BLOCK_HD + tl.arange(0, BLOCK_HD)  # element of the flattened (head, d) row
        t_mask = offs_t < num_tokens
        slot = tl.load(SlotMapping + offs_t, mask=t_mask, other=-1).to(tl.int64)
        t_mask = t_mask & (slot >= 0)  # a negative slot is a padding token (vLLM's convention): not written
        page = slot // PAGE_SIZE
        off = slot % PAGE_SIZE
        mask = t_mask[:, None] & (offs_e < ROW)[None, :]
        if FLAT:  # every (head, d) row is one contiguous span: plain offsets, so loads and stores vectorise
            col_kn = offs_e
            col_vn = offs_e
            col_kp = offs_e
            col_vp = offs_e
        else:
            h = offs_e // HEAD_DIM
            dd = offs_e % HEAD_DIM
            col_kn = h * stride_knh + dd * stride_knd
            col_vn = h * stride_vnh + dd * stride_vnd
            col_kp = h * stride_kh + dd * stride_kd
            col_vp = h * stride_vh + dd * stride_vd
        k = tl.load(KNew + offs_t[:, None] * stride_knt + col_kn[None, :], mask=mask)
        v = tl.load(VNew + offs_t[:, None] * stride_vnt + col_vn[None, :], mask=mask)
        tl.store(KPages + (page * stride_kp + off * stride_ks)[:, None] + col_kp[None, :], k, mask=mask)
        tl.store(VPages + (page * stride_vp + off * stride_vs)[:, None] + col_vp[None, :], v, mask=mask)

    return _paged_append_kernel


_KERNEL = None


def append_blocks(num_kv_heads: int, head_dim: int) -> tuple[int, int]:
    """``(BLOCK_T, BLOCK_HD)``: tokens and row elements per program. ``BLOCK_HD`` is the ``Hkv · d`` row
    rounded up to a power of two, at most :data:`ELEMENTS_PER_PROGRAM`; ``BLOCK_T`` fills the rest of
    :data:`ELEMENTS_PER_PROGRAM`. E.g. Hkv=4, d=128 → (8, 512); Hkv=2, d=16 → (128, 32); Hkv=3, d=96 → (8, 512)
    (288 of 512 lanes masked off); Hkv=64, d=128 → (1, 4096), two programs per token."""
    row = num_kv_heads * head_dim
    block_hd = min(1 << max(row - 1, 0).bit_length(), ELEMENTS_PER_PROGRAM)
    return max(1, ELEMENTS_PER_PROGRAM // block_hd), block_hd


def paged_append(k_new: torch.Tensor, v_new: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor,
                 slot_mapping: torch.Tensor) -> None:
    """Write new tokens' K and V into the page pools at their flat slots, in one Triton launch: the same
    result as :func:`~profattn.workload.paged.reshape_and_cache`, bit for bit.

    Args:
        k_new, v_new: ``[T, Hkv, d]``, the step's new tokens (any strides; ``CacheAppend`` holds them
            contiguous).
        k_pages, v_pages: ``[num_pages, page_size, Hkv, d]`` (any strides: e.g. the K and V halves of one
            ``[num_pages, 2, page_size, Hkv, d]`` allocation), the same dtype as ``k_new``/``v_new``.
        slot_mapping: ``[T]`` integer (int64 from :meth:`PagedKVCache.slot_mapping`), ``page · page_size +
            offset`` of each token; a negative slot (a padding token, vLLM's convention) is skipped. Re-writing
            the same tokens to the same slots leaves the pools unchanged, so timed repetitions start from the
            same state. Slots must be distinct (two tokens to one slot: which one lands is unspecified, as
            with ``index_copy_`` on a GPU).

    Raises:
        ValueError: shapes or dtypes of the five tensors disagree, or ``slot_mapping`` is not integer.
    """
    _launcher(k_new, v_new, k_pages, v_pages, slot_mapping)()


def bind_paged_append(inputs: AttentionInputs) -> Callable[[], None]:
    """A Triton backend's ``Prepared.bind_append``: the zero-argument call that appends ``inputs.append``
    (a :class:`~profattn.workload.paged.CacheAppend`) into ``inputs.paged`` with :func:`paged_append`. The
    checks, the grid and the strides are worked out here, untimed; the call is the launch alone.

    Whether Triton can run on the device is the backend's :meth:`unsupported_reason` to say
    (:func:`~profattn.backends.triton_paged.triton_available`; this module imports nothing of
    ``triton_paged``, which binds this append).

    Raises:
        ValueError: ``inputs`` has no paged cache or no append, or their shapes or dtypes disagree (see
            :func:`paged_append`).
    """
    cache, new = inputs.paged, inputs.append
    if cache is None or new is None:
        raise ValueError("an append needs a paged cache and the step's new K/V (workload append=True)")
    return _launcher(new.k_new, new.v_new, cache.k_pages, cache.v_pages, new.slot_mapping)


def _launcher(k_new: torch.Tensor, v_new: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor,
              slot_mapping: torch.Tensor) -> Callable[[], None]:
    """Check the arguments of :func:`paged_append` and return its launch as a zero-argument call."""
    global _KERNEL
    if k_new.dim() != 3 or k_new.shape != v_new.shape:
        raise ValueError(f"k_new and v_new must both be [T, Hkv, d], got {tuple(k_new.shape)} and {tuple(v_new.shape)}")
    t, hkv, d = k_new.shape
    if k_pages.dim() != 4 or k_pages.shape != v_pages.shape or tuple(k_pages.shape[2:]) != (hkv, d):
        raise ValueError(f"k_pages and v_pages must both be [num_pages, page_size, {hkv}, {d}], got "
                         f"{tuple(k_pages.shape)} and {tuple(v_pages.shape)}")
    if len({k_new.dtype, v_new.dtype, k_pages.dtype, v_pages.dtype}) != 1:
        raise ValueError(f"new tokens and pools must share one dtype, got {k_new.dtype}, {v_new.dtype}, "
                         f"{k_pages.dtype}, {v_pages.dtype}")
    if tuple(slot_mapping.shape) != (t,) or slot_mapping.is_floating_point() or slot_mapping.is_complex():
        raise ValueError(f"slot_mapping must be [{t}] integers, got {tuple(slot_mapping.shape)} {slot_mapping.dtype}")
    if t == 0:
        return lambda: None
    if _KERNEL is None:
        _KERNEL = _kernel()
    kernel = _KERNEL
    block_t, block_hd = append_blocks(hkv, d)
    grid = (-(-t // block_t), -(-(hkv * d) // block_hd))
    args = (k_new, v_new, k_pages, v_pages, slot_mapping, t,
            *k_new.stride(), *v_new.stride(), *k_pages.stride(), *v_pages.stride())
    flat = all(x.stride(-1) == 1 and x.stride(-2) == d for x in (k_new, v_new, k_pages, v_pages))
    consts = dict(ROW=hkv * d, HEAD_DIM=d, PAGE_SIZE=k_pages.shape[1], BLOCK_T=block_t, BLOCK_HD=block_hd,
                  FLAT=flat, num_warps=NUM_WARPS)

    run = kernel_launch(kernel, grid, k_new.device)

    def launch() -> None:
        run(*args, **consts)

    return launch
