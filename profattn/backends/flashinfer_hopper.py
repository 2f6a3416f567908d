"""FlashInfer's other Hopper paths over the paged cache: the cuDNN paged decode and prefill it wraps, and its XQA
decode. Optional, like :mod:`profattn.backends.flashinfer`: without CUDA, FlashInfer or (for the cuDNN paths) the
cuDNN frontend, every backend here is ``unsupported`` with the reason.

Read from FlashInfer 0.5.3's source (the wheel ``flashinfer_python-0.5.3-py3-none-any.whl``):

* ``flashinfer/cudnn/decode.py`` — ``cudnn_batch_decode_with_kv_cache(q, k_cache, v_cache, scale, workspace_buffer,
  *, max_sequence_kv, actual_seq_lens_kv=None, block_tables=None, is_cuda_graph_compatible=False,
  batch_offsets_q=None, batch_offsets_o=None, batch_offsets_k=None, batch_offsets_v=None, out=None)``: q
  ``[B, Hq, d]``; ``k_cache``/``v_cache`` ``[num_pages, Hkv, page_size, d]`` (cuDNN's BHSD container; the graph is built
  from the tensors' own strides, ``g.tensor_like``, so our NHD pool passes as a strided view — FlashInfer's tests pass
  the same view of an NHD-strided cache); ``block_tables`` ``[B, pages_per_seq]`` int32; ``actual_seq_lens_kv``
  ``[B, 1, 1, 1]`` int32 on the GPU (read by the kernel); the graph declares q and the output ``BFLOAT16`` (fp16 is not
  offered in 0.5.3); the graph cache key is ``("decode", max_sequence_kv, q.shape, k_cache.shape)``.
* ``flashinfer/cudnn/prefill.py`` — ``cudnn_batch_prefill_with_kv_cache(q, k_cache, v_cache, scale, workspace_buffer,
  *, max_token_per_sequence, max_sequence_kv, actual_seq_lens_q, actual_seq_lens_kv, block_tables=None, causal,
  return_lse, batch_offsets_q=None, batch_offsets_o=None, …, out=None, lse=None, is_cuda_graph_compatible=False,
  backend=None)``: q packed ``[Σ q_len, Hq, d]``, the graph's q ``(B, Hq, max_q, d)`` with stride ``(Hq·d, d, Hq·d, 1)``
  made ragged by ``batch_offsets_q`` — **element** offsets (token offset × Hq × d; FlashInfer's 0.5.3 tests give the
  paged wrapper ``qo_indptr × Hq × d``, and the wrapper forwards it unchanged); ``causal`` is cuDNN's bottom-right
  mask (``use_causal_mask_bottom_right``) with the padding mask from the per-sequence lengths; head_dim 128 (its
  docstring: "Head dimension of query and key must be 128 or 192", 128 with a page table); ``BFLOAT16`` declared.
* Both run cuDNN's SDPA through the cuDNN frontend's Python package (``import cudnn``; ``CUDNN_AVAILABLE``). Without
  it they fall back to ``get_cudnn_fmha_gen_module()``, whose kernels are downloaded cubins for SM100 only
  (``csrc/cudnn_sdpa_kernel_launcher.cu``: ``cudnn_sm100_fprop_sdpa_{prefill,decode}_d128_bf16.cubin``) — nothing an
  H200 (SM 9.0) can run, and nothing a machine without internet can fetch: so the frontend is required here. Paged
  attention needs cuDNN ≥ 9.5.0 (cudnn-frontend 1.8 release notes).
* ``flashinfer/decode.py`` — ``xqa_batch_decode_with_kv_cache(query, kv_cache, workspace_buffer, block_tables, seq_lens,
  max_seq_len, bmm1_scale=1.0, bmm2_scale=1.0, window_left=-1, out=None, sinks=None, kv_layout="NHD", enable_pdl=None,
  q_len_per_req=1, o_scale=1.0)`` → ``flashinfer/xqa.py`` ``xqa(…)``: query ``[B, Hq, d]`` fp16/bf16, the NHD pool as
  ``(k_pages, v_pages)``, ``block_tables`` int32 ``[B, pages_per_seq]`` (``max_seq_len`` is taken from its width ×
  page_size, not from the argument), ``seq_lens`` ``[B]`` (uint32 in the docstring; FlashInfer's own tests pass int32),
  the workspace zeroed before first use (its first 8 MB are the multi-block semaphores), ``bmm1_scale`` the softmax
  scale; page size 16/32/64/128, head_dim a multiple of 16 in [16, 256] (``flashinfer/jit/xqa.py``); compute
  capability 9, 10 or 12 ("XQA is only supported on SM90, SM100, SM120 GPUs", ``flashinfer/xqa.py``). It is also what
  ``trtllm_batch_decode_with_kv_cache(backend="auto")`` runs on SM 9.x ("For sm_90 … auto will choose xqa"); that
  function's ``trtllm-gen`` backend is Blackwell's (``auto`` takes it on compute capability 10 only, its kernels
  downloaded cubins), so no backend here offers it.

Every path reads the paged cache in place (no copy): the block table is trimmed to the pages the longest sequence
needs and its ``-1`` entries (past a sequence's last page) become page 0, so a kernel that reads a whole row of the
table never forms a negative address (:func:`page_table`). Set-up (tables, lengths, offsets, the workspace) happens
in ``bind``, untimed; the first call of each configuration (cuDNN's graph build and engine compile, XQA's JIT
compile) runs in ``prepare`` on a tiny problem, and its wall time is a cell note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from profattn.interfaces import ADOPTIONS
from profattn.backends.base import AttentionInputs, Prepared, Unsupported, paged_decode_reason, paged_only_forward
from profattn.backends.flashinfer import (
    WORKSPACE_BYTES, flashinfer_reason, flashinfer_version, jit_warmup, prefill_call_reason, shape_reason, window_left,
)
from profattn.backends.packing import pack_rows, row_offsets, unpack_rows
from profattn.families import CUDNN, FLASHINFER_XQA
from profattn.workload import Workload

#: cuDNN's first release with paged attention in SDPA (cudnn-frontend 1.8 release notes: "SDPA forward operation now
#: supports paged attention on cudnn 9.5.0 and later"), as ``cudnn.backend_version()`` numbers it.
CUDNN_PAGED_MIN = 90500
#: Compute capabilities (major) FlashInfer 0.5.3's XQA runs on (``flashinfer/xqa.py``: ``not in [9, 10, 12]`` raises).
XQA_MAJORS = (9, 10, 12)
#: Page sizes XQA is compiled for (``flashinfer/jit/xqa.py``, ``gen_xqa_module``).
XQA_PAGE_SIZES = (16, 32, 64, 128)
#: The cuDNN prefill's workspace: FlashInfer's docstring says 128 MB "should be sufficient for most cases" and passes no
#: size to cuDNN (``graph.execute(var_map, workspace=…)``: a graph needing more would write past it); its later tests
#: give the prefill 512 MB, so does this module (the decode keeps :data:`~profattn.backends.flashinfer.WORKSPACE_BYTES`).
CUDNN_PREFILL_WORKSPACE_BYTES = 512 << 20
#: cuDNN's ragged offsets are int32 element offsets.
_INT32_MAX = 2**31 - 1


# ---- host-side set-up (no GPU needed) ----------------------------------------------------------------------------

def hnd_view(pages: torch.Tensor) -> torch.Tensor:
    """The NHD pool ``[num_pages, page_size, Hkv, d]`` as cuDNN's paged container ``[num_pages, Hkv, page_size, d]``:
    a view (strides ``(page_size·Hkv·d, d, Hkv·d, 1)`` for a contiguous pool), no copy — element
    ``[p, h, t, :]`` is ``pages[p, t, h, :]``."""
    if pages.dim() != 4:
        raise ValueError(f"a page pool is [num_pages, page_size, num_kv_heads, head_dim], got {tuple(pages.shape)}")
    return pages.permute(0, 2, 1, 3)


@dataclass(frozen=True)
class PageTable:
    """A block table as cuDNN's and XQA's paged kernels take it: ``block_tables`` ``[B, pages]`` int32 (contiguous,
    on the block table's device), ``pages`` = the pages the longest sequence needs, ``-1`` entries replaced by page 0;
    ``max_sequence_kv`` = ``pages × page_size`` (the table's capacity in tokens: XQA derives its own from the width,
    cuDNN's decode graph cache is keyed on it)."""

    block_tables: torch.Tensor
    max_sequence_kv: int


def page_table(block_table: torch.Tensor, kv_lens: Sequence[int], page_size: int) -> PageTable:
    """:class:`PageTable` of ``block_table`` (``[B, max_pages]`` int32, ``-1`` past a sequence's last page) for
    sequences of ``kv_lens`` tokens (host-side ints, as the scheduler knows them).

    Raises:
        ValueError: ``kv_lens`` has not one positive length per row, or the table is narrower than the longest
            sequence needs.
    """
    lens = [int(n) for n in kv_lens]
    if len(lens) != block_table.shape[0] or any(n < 1 for n in lens):
        raise ValueError(f"kv_lens {lens} must hold one length >= 1 per block-table row ({block_table.shape[0]})")
    pages = max(math.ceil(n / page_size) for n in lens)
    if pages > block_table.shape[1]:
        raise ValueError(f"the longest sequence needs {pages} pages; the block table holds {block_table.shape[1]}")
    table = block_table[:, :pages].clamp(min=0).to(torch.int32).contiguous()
    return PageTable(table, pages * page_size)


@dataclass(frozen=True)
class CudnnPrefillArgs:
    """The per-call tensors of ``cudnn_batch_prefill_with_kv_cache`` for one variable-length call (int32, on the
    block table's device): ``actual_seq_lens_q``/``actual_seq_lens_kv`` ``[B, 1, 1, 1]``; ``batch_offsets`` ``[B + 1]``,
    each sequence's first query row as an element offset into the packed ``[Σ q_len, Hq, d]`` q (and the output):
    ``qo_indptr × Hq × d``; ``max_token_per_sequence`` (the longest q); ``table`` (:func:`page_table`)."""

    actual_seq_lens_q: torch.Tensor
    actual_seq_lens_kv: torch.Tensor
    batch_offsets: torch.Tensor
    max_token_per_sequence: int
    table: PageTable


def cudnn_prefill_args(block_table: torch.Tensor, q_lens: Sequence[int], kv_lens: Sequence[int], page_size: int,
                       num_q_heads: int, head_dim: int) -> CudnnPrefillArgs:
    """:class:`CudnnPrefillArgs` for sequences of ``q_lens`` new rows over ``kv_lens`` keys (host ints).

    Raises:
        ValueError: lengths that do not pair up, a q_len outside ``[1, kv_len]``, element offsets beyond int32,
            or (:func:`page_table`) a table too narrow.
    """
    q, kv = [int(n) for n in q_lens], [int(n) for n in kv_lens]
    if len(q) != len(kv) or any(not 1 <= a <= b for a, b in zip(q, kv)):
        raise ValueError(f"q_lens {q} and kv_lens {kv} must pair up with 1 <= q_len <= kv_len")
    row = num_q_heads * head_dim
    if sum(q) * row > _INT32_MAX:
        raise ValueError(f"{sum(q)} query rows x {row} elements exceed cuDNN's int32 ragged offsets")
    dev = block_table.device
    as_lens = lambda xs: torch.tensor(xs, dtype=torch.int32, device=dev).view(-1, 1, 1, 1)  # noqa: E731
    return CudnnPrefillArgs(as_lens(q), as_lens(kv), row_offsets(q, dev) * row, max(q), page_table(block_table, kv, page_size))


# ---- what each path needs --------------------------------------------------------------------------------------

def cudnn_frontend_reason() -> str | None:
    """Why FlashInfer cannot run cuDNN's paged SDPA here (None when it can): the frontend's Python package is not
    importable (FlashInfer's ``CUDNN_AVAILABLE`` false: its fallback is SM100 cubins fetched at first use), or the
    cuDNN it loads predates paged attention (:data:`CUDNN_PAGED_MIN`). Imports FlashInfer (call after
    :func:`~profattn.backends.flashinfer.flashinfer_reason`)."""
    try:
        from flashinfer.cudnn import decode as fi_cudnn
    except Exception as exc:  # noqa: BLE001 - a broken install may raise anything
        return f"flashinfer.cudnn is not importable ({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]})"
    if not getattr(fi_cudnn, "CUDNN_AVAILABLE", False):
        return ("the cuDNN frontend's Python package (nvidia-cudnn-frontend, module cudnn) is not importable; without it "
                "FlashInfer 0.5.3 falls back to downloaded SM100 cubins (cudnn_sm100_fprop_sdpa_*), which an SM 9.x GPU "
                "cannot run (README: carrying the wheels)")
    backend = cudnn_backend_version()
    if backend is not None and backend < CUDNN_PAGED_MIN:
        return f"cuDNN {backend} has no paged attention in SDPA (needs 9.5.0 or later, cudnn-frontend 1.8 release notes)"
    return None


def cudnn_backend_version() -> int | None:
    """``cudnn.backend_version()`` of the cuDNN frontend's library (e.g. 91000 for 9.10.0), None when unreadable."""
    try:
        import cudnn

        return int(cudnn.backend_version())
    except Exception:  # noqa: BLE001
        return None


def cudnn_frontend_version() -> str:
    """The cuDNN frontend package's ``__version__`` (``?`` when unreadable)."""
    try:
        import cudnn

        return str(getattr(cudnn, "__version__", "?"))
    except Exception:  # noqa: BLE001
        return "?"


def cudnn_shape_reason(w: Workload, *, prefill: bool) -> str | None:
    """Why FlashInfer 0.5.3's cuDNN wrappers cannot take ``w``'s shape (None when they can): their graphs declare q and
    the output ``BFLOAT16``; no sliding window is exposed; the prefill needs head_dim 128 (its docstring), the decode
    the head dims FlashInfer ships (:func:`~profattn.backends.flashinfer.shape_reason`)."""
    if w.dtype != "bfloat16":
        return f"FlashInfer 0.5.3's cuDNN graphs declare q and the output bfloat16 (cudnn/{'prefill' if prefill else 'decode'}.py), not {w.dtype}"
    if w.window is not None:
        return "FlashInfer 0.5.3's cuDNN wrappers take no sliding window"
    if prefill and w.head_dim != 128:
        return f"cudnn_batch_prefill_with_kv_cache takes head_dim 128 with a page table (its docstring), not {w.head_dim}"
    return shape_reason(w)


def xqa_reason(w: Workload, device: torch.device) -> str | None:
    """Why FlashInfer 0.5.3's XQA cannot run ``w`` on ``device`` (None when it can), by its own checks: compute
    capability 9, 10 or 12 (``flashinfer/xqa.py``), fp16/bf16 input, page size 16/32/64/128 and head_dim a multiple of
    16 in [16, 256] (``flashinfer/jit/xqa.py``)."""
    major, minor = torch.cuda.get_device_capability(device)
    if major not in XQA_MAJORS:
        return f"XQA is only supported on SM90, SM100, SM120 GPUs (flashinfer/xqa.py); this GPU is SM {major}.{minor}"
    if w.dtype not in ("bfloat16", "float16"):
        return f"XQA takes float16 or bfloat16 input (flashinfer/jit/xqa.py), not {w.dtype}"
    if w.page_size not in XQA_PAGE_SIZES:
        return f"XQA is compiled for page sizes 16, 32, 64, 128 (flashinfer/jit/xqa.py), not {w.page_size}"
    d = w.head_dim
    if d % 16 or not 16 <= d <= 256:
        return f"XQA needs head_dim divisible by 16 in [16, 256] (flashinfer/jit/xqa.py), not {d}"
    return None


@dataclass(frozen=True)
class DecodeOperands:
    """What a paged decode call of this module reads beside the pool, built in ``bind`` (untimed): q ``[B, Hq, d]``
    (contiguous), the output buffer like it, the :class:`PageTable`, the lengths ``[B]`` int32 and a zeroed
    :data:`~profattn.backends.flashinfer.WORKSPACE_BYTES` workspace (XQA's semaphores start at zero)."""

    q: torch.Tensor
    out: torch.Tensor
    table: PageTable
    lens: torch.Tensor
    workspace: torch.Tensor


def decode_operands(inputs: AttentionInputs, kv_lens: Sequence[int]) -> DecodeOperands:
    """:class:`DecodeOperands` of a decode step's ``inputs`` (its paged cache; sequences of ``kv_lens`` keys)."""
    cache = inputs.paged
    q = inputs.q[:, :, 0, :].contiguous()
    return DecodeOperands(q, torch.empty_like(q), page_table(cache.block_table, kv_lens, cache.page_size),
                          cache.seq_lens.to(torch.int32).contiguous(),
                          torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=q.device))


def tiny_decode_inputs(w: Workload, device: torch.device) -> AttentionInputs:
    """The first call of a decode configuration, in ``prepare``: one sequence holding one full page of ``w``'s page
    size, heads and dtype (random values), as :class:`AttentionInputs` with its paged cache."""
    from profattn.workload.paged import PagedKVCache

    dt = getattr(torch, w.dtype)
    pages = torch.randn(1, w.page_size, w.num_kv_heads, w.head_dim, device=device, dtype=dt)
    q = torch.randn(1, w.num_q_heads, 1, w.head_dim, device=device, dtype=dt)
    cache = PagedKVCache(k_pages=pages, v_pages=pages, block_table=torch.zeros(1, 1, dtype=torch.int32, device=device),
                         seq_lens=torch.full((1,), w.page_size, dtype=torch.int32, device=device))
    return AttentionInputs(q=q, k=q, v=q, paged=cache)


def _jit_note(seconds: float, what: str) -> str:
    return f"{what} + first call (tiny problem, same configuration): {seconds:.1f} s, outside every timing"


_VIEW_NOTE = ("paged cache read in place: the NHD pool [pages, page, Hkv, d] passed as cuDNN's [pages, Hkv, page, d] "
              "strided view; block table trimmed to the longest sequence's pages, -1 entries as page 0")
_APPEND_NOTE = ("cache append: the shared torch reshape_and_cache into the same pool (timed apart); the attention "
                "reads the pool it wrote")


# ---- the backends ----------------------------------------------------------------------------------------------

class FlashInferCudnnDecode:
    """``flashinfer-cudnn-decode``: cuDNN's paged SDPA decode through ``flashinfer.cudnn.cudnn_batch_decode_with_kv_cache``
    (module docstring) — cuDNN reading the paged cache itself, where ``sdpa-cudnn`` reads a contiguous copy."""

    name = "flashinfer-cudnn-decode"
    #: The interface it implements and the layout it reads (:mod:`profattn.interfaces`).
    adoption = ADOPTIONS["flashinfer-cudnn-decode"]
    family = CUDNN
    description = "cuDNN's paged SDPA decode via FlashInfer's cudnn_batch_decode_with_kv_cache (the pool in place; optional)"
    #: Ragged decode steps (per-sequence ``actual_seq_lens_kv``) and appending steps (the torch append).
    varlen = True

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        return (flashinfer_reason(device) or paged_decode_reason(workload)
                or cudnn_shape_reason(workload, prefill=False) or cudnn_frontend_reason())

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        from flashinfer.cudnn import cudnn_batch_decode_with_kv_cache as decode

        w = workload
        scale = 1.0 / math.sqrt(w.head_dim)

        def bind_kv(inputs: AttentionInputs, kv_lens: Sequence[int]):
            cache, o = inputs.paged, decode_operands(inputs, kv_lens)
            lens = o.lens.view(-1, 1, 1, 1)  # cuDNN's [B, 1, 1, 1] sequence lengths
            k, v = hnd_view(cache.k_pages), hnd_view(cache.v_pages)

            def call() -> torch.Tensor:
                return decode(o.q, k, v, scale, o.workspace, max_sequence_kv=o.table.max_sequence_kv,
                              actual_seq_lens_kv=lens, block_tables=o.table.block_tables, is_cuda_graph_compatible=True,
                              out=o.out).unsqueeze(2)

            return call

        jit_s = jit_warmup(lambda: bind_kv(tiny_decode_inputs(w, device), [w.page_size]))

        return Prepared(forward=paged_only_forward, bind=lambda inputs: bind_kv(inputs, w.kv_lens), notes=(
            f"FlashInfer {flashinfer_version()} cudnn_batch_decode_with_kv_cache (cuDNN frontend "
            f"{cudnn_frontend_version()}, cuDNN {cudnn_backend_version()}); per-sequence lengths as actual_seq_lens_kv",
            _VIEW_NOTE,
            _jit_note(jit_s, "cuDNN graph build"),
        ) + ((_APPEND_NOTE,) if w.append else ()))


class FlashInferCudnnPrefill:
    """``flashinfer-cudnn-prefill``: cuDNN's paged SDPA prefill through ``flashinfer.cudnn.cudnn_batch_prefill_with_kv_cache``
    (module docstring): prefill, chunked prefill and mixed steps over the paged cache, q packed to ``[Σ q_len, Hq, d]``
    with element batch offsets, cuDNN's bottom-right causal mask per sequence."""

    name = "flashinfer-cudnn-prefill"
    #: The interface it implements and the layout it reads (:mod:`profattn.interfaces`).
    adoption = ADOPTIONS["flashinfer-cudnn-prefill"]
    family = CUDNN
    description = ("cuDNN's paged SDPA prefill via FlashInfer's cudnn_batch_prefill_with_kv_cache: chunked prefill and "
                   "mixed steps over the pool in place, bottom-right causal (optional)")
    varlen = True

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        return (flashinfer_reason(device) or prefill_call_reason(workload, paged=True)
                or cudnn_shape_reason(workload, prefill=True) or cudnn_frontend_reason())

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        from flashinfer.cudnn import cudnn_batch_prefill_with_kv_cache as prefill

        w = workload
        dt = getattr(torch, w.dtype)
        scale = 1.0 / math.sqrt(w.head_dim)
        causal = w.mask.value == "causal"
        q_lens, kv_lens, l_max = list(w.q_lens), list(w.kv_lens), w.q_len

        def tiny():
            n = w.page_size
            pages = torch.randn(1, n, w.num_kv_heads, w.head_dim, device=device, dtype=dt)
            q = torch.randn(n, w.num_q_heads, w.head_dim, device=device, dtype=dt)
            a = cudnn_prefill_args(torch.zeros(1, 1, dtype=torch.int32, device=device), [n], [n], n,
                                   w.num_q_heads, w.head_dim)
            ws = torch.zeros(CUDNN_PREFILL_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
            view = hnd_view(pages)
            return lambda: prefill(q, view, view, scale, ws, max_token_per_sequence=a.max_token_per_sequence,
                                   max_sequence_kv=a.table.max_sequence_kv, actual_seq_lens_q=a.actual_seq_lens_q,
                                   actual_seq_lens_kv=a.actual_seq_lens_kv, block_tables=a.table.block_tables,
                                   causal=causal, return_lse=False, batch_offsets_q=a.batch_offsets,
                                   batch_offsets_o=a.batch_offsets)

        jit_s = jit_warmup(tiny)

        def bind(inputs: AttentionInputs):
            cache = inputs.paged
            q = pack_rows(inputs.q, q_lens)
            a = cudnn_prefill_args(cache.block_table, q_lens, kv_lens, cache.page_size, w.num_q_heads, w.head_dim)
            out = torch.empty_like(q)
            ws = torch.zeros(CUDNN_PREFILL_WORKSPACE_BYTES, dtype=torch.uint8, device=q.device)
            k, v = hnd_view(cache.k_pages), hnd_view(cache.v_pages)

            def call() -> torch.Tensor:
                o, _ = prefill(q, k, v, scale, ws, max_token_per_sequence=a.max_token_per_sequence,
                               max_sequence_kv=a.table.max_sequence_kv, actual_seq_lens_q=a.actual_seq_lens_q,
                               actual_seq_lens_kv=a.actual_seq_lens_kv, block_tables=a.table.block_tables,
                               causal=causal, return_lse=False, batch_offsets_q=a.batch_offsets,
                               batch_offsets_o=a.batch_offsets, out=out)
                return o

            return call

        uniform = all(n == l_max for n in q_lens)
        return Prepared(
            forward=paged_only_forward, bind=bind, to_contract=lambda o: unpack_rows(o, q_lens, l_max),
            notes=(
                f"FlashInfer {flashinfer_version()} cudnn_batch_prefill_with_kv_cache (cuDNN frontend "
                f"{cudnn_frontend_version()}, cuDNN {cudnn_backend_version()}), causal={causal} (cuDNN's bottom-right "
                "mask); Q packed to [Σ q_len, Hq, d] with element batch offsets (qo_indptr × Hq × d) outside the timed call",
                _VIEW_NOTE,
                _jit_note(jit_s, "cuDNN graph build"),
            ) + (() if uniform else ("output unpacked to [B, Hq, Lq_max, d] for the correctness check, outside the timing",))
            + ((_APPEND_NOTE,) if w.append else ()),
        )


class FlashInferXqaDecode:
    """``flashinfer-xqa-decode``: FlashInfer's XQA decode kernel (TensorRT-LLM's, JIT-compiled) through
    ``flashinfer.decode.xqa_batch_decode_with_kv_cache`` on the NHD pool in place (module docstring) — what FlashInfer's
    ``trtllm_batch_decode_with_kv_cache`` runs on SM 9.x."""

    name = "flashinfer-xqa-decode"
    #: The workload fields that pick the JIT-compiled module ``prepare()`` builds (:mod:`profattn.harness.prewarm`;
    #: XQA compiles per dtype, page size, head_dim, group and window: NOTES, "XQA").
    jit_fields = ("dtype", "kv_dtype", "head_dim", "page_size", "group_size", "window")
    #: The interface it implements and the layout it reads (:mod:`profattn.interfaces`).
    adoption = ADOPTIONS["flashinfer-xqa-decode"]
    family = FLASHINFER_XQA
    description = "FlashInfer's XQA paged decode (xqa_batch_decode_with_kv_cache, JIT-compiled; the trtllm entry point's SM90 path; optional)"
    varlen = True

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        return flashinfer_reason(device) or paged_decode_reason(workload) or xqa_reason(workload, device)

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        from flashinfer.decode import xqa_batch_decode_with_kv_cache as xqa

        w = workload
        scale = 1.0 / math.sqrt(w.head_dim)
        left = window_left(w)

        def bind_kv(inputs: AttentionInputs, kv_lens: Sequence[int]):
            cache, o = inputs.paged, decode_operands(inputs, kv_lens)
            kv = (cache.k_pages, cache.v_pages)

            def call() -> torch.Tensor:
                return xqa(o.q, kv, o.workspace, o.table.block_tables, o.lens, o.table.max_sequence_kv, bmm1_scale=scale,
                           bmm2_scale=1.0, window_left=left, out=o.out, kv_layout="NHD").unsqueeze(2)

            return call

        jit_s = jit_warmup(lambda: bind_kv(tiny_decode_inputs(w, device), [w.page_size]))
        return Prepared(forward=paged_only_forward, bind=lambda inputs: bind_kv(inputs, w.kv_lens), notes=(
            f"FlashInfer {flashinfer_version()} xqa_batch_decode_with_kv_cache (NHD pool in place, bmm1_scale = 1/√d"
            + (f", window_left {left}" if left >= 0 else "") + ")",
            "block table trimmed to the longest sequence's pages (XQA sizes its split from the table's width), -1 entries as page 0",
            _jit_note(jit_s, "XQA JIT compile"),
        ) + (("cache append: the shared torch reshape_and_cache into the same pool (timed apart)",) if w.append else ()))


#: The backends of this module, in the registry's order.
FLASHINFER_HOPPER_BACKENDS = (FlashInferCudnnDecode(), FlashInferCudnnPrefill(), FlashInferXqaDecode())
