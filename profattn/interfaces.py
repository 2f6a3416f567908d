"""What a caller must write to use a backend: the interface it implements, the cache layout its kernel reads, and
the lines that switch a call to it. Torch-free shared vocabulary (like :mod:`profattn.families`): the backends
declare their :class:`Adoption` from here, the harness records it on every cell, the store keeps it, and
``recommend`` ranks first the backends a call can adopt without changing its interface.

The interfaces are the public calling conventions of the libraries profattn runs:

* ``sdpa`` — ``torch.nn.functional.scaled_dot_product_attention(q, k, v, …)`` on dense ``[B, H, L, d]`` tensors;
  which fused kernel runs is chosen with ``torch.nn.attention.sdpa_kernel(SDPBackend.…)`` (PyTorch ≥ 2.3).
* ``sdpa-nested`` — the same call on jagged nested tensors (``torch.nested.nested_tensor(…, layout=torch.jagged)``).
* ``flex`` — ``torch.nn.attention.flex_attention.flex_attention(q, k, v, block_mask=…)``, compiled.
* ``eager`` — explicit matmul, softmax and matmul in PyTorch.
* ``paged`` — a paged KV cache ``[num_pages, page_size, Hkv, d]`` addressed through a block table
  ``[B, max_pages]`` and per-sequence lengths (vLLM's layout; profattn's Triton kernels).
* ``flashinfer`` — a FlashInfer wrapper over a paged cache in CSR form (``kv_indptr``, ``kv_indices``,
  ``kv_last_page_len``): ``plan()`` once per step on the host, ``run()`` per layer (FlashInfer's docs,
  "BatchDecodeWithPagedKVCacheWrapper" / "BatchPrefillWithPagedKVCacheWrapper").
* ``packed-varlen`` — packed tokens ``[Σ n, H, d]`` with cumulative offsets ``cu_seqlens`` (flash-attn's
  ``flash_attn_varlen_func``; FlashInfer's ``BatchPrefillWithRaggedKVCacheWrapper``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Interface(str, enum.Enum):
    """The calling convention a backend implements (see the module docstring)."""

    SDPA = "sdpa"
    SDPA_NESTED = "sdpa-nested"
    FLEX = "flex"
    EAGER = "eager"
    PAGED = "paged"
    FLASHINFER = "flashinfer"
    PACKED_VARLEN = "packed-varlen"

    def __str__(self) -> str:
        return self.value


class Layout(str, enum.Enum):
    """The K/V layout a kernel reads: ``dense`` (contiguous ``[B, Hkv, L, d]``; on a paged workload, the contiguous
    copy of the same cache; ``CONTIGUOUS`` is the same member), ``paged`` (the page pool through a block table or CSR
    page list), ``packed`` (packed ``[Σ n, Hkv, d]`` tokens with offsets)."""

    DENSE = "dense"
    CONTIGUOUS = "dense"
    PAGED = "paged"
    PACKED = "packed"

    def __str__(self) -> str:
        return self.value


class Change(str, enum.Enum):
    """What a caller of one interface must change to adopt a backend of another (:func:`changes`).

    ``gather``: its cache is paged, the kernel reads a contiguous cache (a page gather per call, or a contiguous
    cache kept beside the pages); ``paged-cache``: its cache is contiguous, the kernel reads pages through a block
    table; ``pack``: pack the sequences' tokens and build ``cu_seqlens``; ``nested``: build jagged nested tensors;
    ``plan-run``: a FlashInfer wrapper, ``plan()`` on the host once per step; ``block-mask``: build a FlexAttention
    block mask and compile ``flex_attention``; ``api``: another call on the same layout."""

    GATHER = "gather"
    PAGED_CACHE = "paged-cache"
    PACK = "pack"
    NESTED = "nested"
    PLAN_RUN = "plan-run"
    BLOCK_MASK = "block-mask"
    API = "api"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Adoption:
    """How a caller adopts a backend: its ``interface``, the layout its kernel ``reads`` (a dense backend on a paged
    workload reads the contiguous copy of the cache), ``plan_run``: it is a wrapper whose ``plan()`` runs on the host
    once per step before the timed ``run()`` (FlashInfer), and ``how``: the code that switches a call to it (lines of
    Python; ``...`` where the caller's own arguments go)."""

    interface: Interface
    reads: Layout
    how: tuple[str, ...] = ()
    plan_run: bool = False

    def to_dict(self) -> dict[str, object]:
        """``{"interface", "reads", "plan_run", "how"}`` as JSON values."""
        return {"interface": self.interface.value, "reads": self.reads.value, "plan_run": self.plan_run,
                "how": list(self.how)}

    @classmethod
    def from_dict(cls, d: dict) -> "Adoption":
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: not an object with a known ``interface`` and ``reads``, ``plan_run`` not true or false, ``how``
                not a list of strings (the message names the key).
        """
        if not isinstance(d, dict):
            raise ValueError(f"an adoption is an object, not {type(d).__name__}")
        for key, enum_cls in (("interface", Interface), ("reads", Layout)):
            if key not in d:
                raise ValueError(f"adoption.{key} is missing")
            try:
                enum_cls(d[key])
            except ValueError:
                valid = ", ".join(dict.fromkeys(m.value for m in enum_cls))
                raise ValueError(f"adoption.{key} {str(d[key])[:40]!r} is not one of {valid}") from None
        how = d.get("how", ())
        if not isinstance(how, (list, tuple)) or not all(isinstance(x, str) for x in how):
            raise ValueError("adoption.how must be a list of strings")
        plan_run = d.get("plan_run", False)
        if not isinstance(plan_run, bool):
            raise ValueError("adoption.plan_run must be true or false")
        return cls(Interface(d["interface"]), Layout(d["reads"]), tuple(how), plan_run)


#: The keys :meth:`Adoption.to_dict` writes (a reader ignores others, naming them).
ADOPTION_KEYS = ("interface", "reads", "plan_run", "how")


def _sdpa(backend: str) -> Adoption:
    return Adoption(Interface.SDPA, Layout.DENSE, (
        "from torch.nn.attention import SDPBackend, sdpa_kernel",
        f"with sdpa_kernel(SDPBackend.{backend}):",
        "    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=..., enable_gqa=True)",
    ))


_FLASHINFER_PLAN = "wrapper.plan(kv_indptr, kv_indices, kv_last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size"


def _paged_prefill(backend_kw: str) -> Adoption:
    """FlashInfer's paged prefill wrapper, its ``backend=`` argument (``backend_kw``: ``""`` for FlashInfer's choice)."""
    return Adoption(Interface.FLASHINFER, Layout.PAGED, (
        f'wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD"{backend_kw})',
        "wrapper.plan(qo_indptr, kv_indptr, kv_indices, kv_last_page_len, num_qo_heads, num_kv_heads, head_dim, "
        "page_size, causal=True)",
        "out = wrapper.run(q_packed, (k_pages, v_pages))",
    ), plan_run=True)

#: The built-in backends' adoptions, by registry name: each backend class takes its ``adoption`` from here (one
#: declaration), and results written before cells recorded it are read with this table.
ADOPTIONS: dict[str, Adoption] = {
    "sdpa-math": _sdpa("MATH"),
    "sdpa-flash": _sdpa("FLASH_ATTENTION"),
    "sdpa-efficient": _sdpa("EFFICIENT_ATTENTION"),
    "sdpa-cudnn": _sdpa("CUDNN_ATTENTION"),
    "sdpa-nested": Adoption(Interface.SDPA_NESTED, Layout.PACKED, (
        "q = torch.nested.nested_tensor(list_of_q_rows, layout=torch.jagged)  # likewise k, v",
        "out = torch.nn.functional.scaled_dot_product_attention(q, k, v)",
    )),
    "eager": Adoption(Interface.EAGER, Layout.DENSE, (
        "scores = (q @ k.transpose(-2, -1)) * scale  # k, v repeated to Hq heads; mask applied",
        "out = torch.softmax(scores, dim=-1) @ v",
    )),
    "flex": Adoption(Interface.FLEX, Layout.DENSE, (
        "from torch.nn.attention.flex_attention import create_block_mask, flex_attention",
        "block_mask = create_block_mask(causal_mask_mod, B, Hq, q_len, kv_len)",
        "out = torch.compile(flex_attention)(q, k, v, block_mask=block_mask, enable_gqa=True)",
    )),
    "flex-paged-decode": Adoption(Interface.FLEX, Layout.PAGED, (
        "from torch.nn.attention.flex_attention import create_block_mask, flex_attention",
        "block_mask = create_block_mask(mask_mod_from_block_table, B, Hq, 1, num_pages * page_size)",
        "out = torch.compile(flex_attention)(q, k_pool, v_pool, block_mask=block_mask, enable_gqa=True)",
    )),
    "triton-paged-decode": Adoption(Interface.PAGED, Layout.PAGED, (
        "from profattn.backends.triton_paged import paged_decode",
        "out = paged_decode(q, k_pages, v_pages, block_table, seq_lens, max_kv_len=max_len, num_sms=num_sms)",
    )),
    "triton-paged-prefill": Adoption(Interface.PAGED, Layout.PAGED, (
        "from profattn.backends.triton_paged_prefill import paged_varlen_attention",
        "out = paged_varlen_attention(q_packed, k_pages, v_pages, block_table, q_lens, kv_lens, ...)",
    )),
    "torch-paged-reference": Adoption(Interface.PAGED, Layout.PAGED, (
        "k = k_pages[block_table].flatten(1, 2)[:, :max_len].transpose(1, 2)  # likewise v: a contiguous copy",
        "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)",
    )),
    "flashinfer-decode": Adoption(Interface.FLASHINFER, Layout.PAGED, (
        'wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=False)',
        _FLASHINFER_PLAN + ", q_data_type=q.dtype)",
        "out = wrapper.run(q, (k_pages, v_pages))",
    ), plan_run=True),
    "flashinfer-decode-tc": Adoption(Interface.FLASHINFER, Layout.PAGED, (
        'wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=True)',
        _FLASHINFER_PLAN + ", q_data_type=q.dtype)",
        "out = wrapper.run(q, (k_pages, v_pages))",
    ), plan_run=True),
    "flashinfer-prefill-paged": _paged_prefill(""),
    "flashinfer-prefill-paged-fa2": _paged_prefill(', backend="fa2"'),
    "flashinfer-prefill-paged-fa3": _paged_prefill(', backend="fa3"'),
    "flashinfer-cudnn-decode": Adoption(Interface.PAGED, Layout.PAGED, (
        "from flashinfer.cudnn import cudnn_batch_decode_with_kv_cache",
        "out = cudnn_batch_decode_with_kv_cache(q, k_pages_hnd, v_pages_hnd, scale, workspace, max_sequence_kv=max_len,",
        "                                       actual_seq_lens_kv=seq_lens, block_tables=block_table)",
    )),
    "flashinfer-cudnn-prefill": Adoption(Interface.PAGED, Layout.PAGED, (
        "from flashinfer.cudnn import cudnn_batch_prefill_with_kv_cache",
        "out = cudnn_batch_prefill_with_kv_cache(q_packed, k_pages_hnd, v_pages_hnd, scale, workspace, ...,",
        "                                        block_tables=block_table, causal=True)",
    )),
    "flashinfer-xqa-decode": Adoption(Interface.PAGED, Layout.PAGED, (
        "from flashinfer.decode import xqa_batch_decode_with_kv_cache",
        "out = xqa_batch_decode_with_kv_cache(q, (k_pages, v_pages), workspace, block_table, seq_lens, max_len, "
        "kv_layout=\"NHD\")",
    )),
    "flashinfer-prefill-ragged": Adoption(Interface.PACKED_VARLEN, Layout.PACKED, (
        'wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD")',
        "wrapper.plan(qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim, causal=True)",
        "out = wrapper.run(q_packed, k_packed, v_packed)",
    ), plan_run=True),
}


def adoption_of(backend: str, recorded: "Adoption | None" = None) -> Adoption | None:
    """The adoption of ``backend``: the one its cells recorded, else the built-in table's (None: a plugin that
    recorded none — its interface is unknown)."""
    return recorded if recorded is not None else ADOPTIONS.get(backend)


def layout_read(adoption: Adoption | None, workload_layout: str, *, packed: bool = False) -> Layout:
    """The layout a backend's kernel read on a workload of layout ``workload_layout`` (``dense``/``paged``):
    its declared ``reads``, except that a backend reading packed tokens reads a dense workload's padded tensors
    packed, and an unknown adoption reads the workload's own layout. ``packed``: the workload is a packed batch."""
    if adoption is None:
        return Layout.PAGED if workload_layout == "paged" else (Layout.PACKED if packed else Layout.DENSE)
    return adoption.reads


def caller_interface(workload_layout: str, *, packed: bool = False) -> Interface:
    """The interface a caller holding a workload of this layout most likely uses: a paged cache → ``paged`` (a
    block table), packed documents → ``packed-varlen``, dense tensors → ``sdpa``."""
    if workload_layout == "paged":
        return Interface.PAGED
    return Interface.PACKED_VARLEN if packed else Interface.SDPA


#: The layout each interface's caller holds its K/V in.
_HOLDS = {Interface.SDPA: Layout.DENSE, Interface.EAGER: Layout.DENSE, Interface.FLEX: Layout.DENSE,
          Interface.SDPA_NESTED: Layout.PACKED, Interface.PACKED_VARLEN: Layout.PACKED, Interface.PAGED: Layout.PAGED,
          Interface.FLASHINFER: Layout.PAGED}


def changes(caller: Interface, target: Adoption | None) -> tuple[Change, ...] | None:
    """What a caller of interface ``caller`` changes to adopt ``target`` (empty: a drop-in — the same interface, at
    most a context manager such as ``sdpa_kernel``); None when ``target`` is unknown (a plugin without a declared
    adoption). The layout change comes first, then the calling convention."""
    if target is None:
        return None
    if target.interface is caller:
        return ()
    out: list[Change] = []
    holds = _HOLDS[caller]
    if holds is Layout.PAGED and target.reads is not Layout.PAGED:
        out.append(Change.GATHER)
    elif holds is not Layout.PAGED and target.reads is Layout.PAGED:
        out.append(Change.PAGED_CACHE)
    if target.reads is Layout.PACKED and holds is not Layout.PACKED:
        out.append(Change.NESTED if target.interface is Interface.SDPA_NESTED else Change.PACK)
    if target.plan_run:
        out.append(Change.PLAN_RUN)
    if target.interface is Interface.FLEX:
        out.append(Change.BLOCK_MASK)
    if not out:
        out.append(Change.API)
    return tuple(out)


__all__ = ["ADOPTIONS", "ADOPTION_KEYS", "Adoption", "Change", "Interface", "Layout", "adoption_of", "caller_interface", "changes",
           "layout_read"]
