"""Kernel families and the name patterns that identify their kernels in a trace.

Torch-free (``profattn analyze`` reads traces without importing torch); :mod:`profattn.backends`
re-exports these names.

"Read the kernel that actually ran from the trace; a backend flag is not evidence." A cell is checked
against these patterns after its profiler pass (see :func:`profattn.analysis.family_check`).
Patterns come from kernel names seen in real Kineto traces of torch 2.11 on an H200
(``tests/data/traces/``) and from the libraries' sources: flash-attn 2 as vendored by PyTorch
(``pytorch_flash::flash_fwd_*``, ``flash_bwd_*``), PyTorch's mem-efficient CUTLASS kernels
(``fmha_cutlassF_*``/``fmha_cutlassB_*``), cuDNN's runtime-compiled SDPA engines (``cudnn_*``,
``sm90_flash_*``), Inductor's template kernels for FlexAttention (``triton_tem_*``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class KernelFamily:
    """How to recognise a family's kernels in a trace.

    ``kernel_patterns``: regexes (case-insensitive, ``re.search``) of GPU kernel names that are this
    family's attention kernels; ``op_patterns``: the same for CPU operator names (CPU runs have no
    kernels). A cell's evidence must match at least one own pattern and no other family's.
    """

    name: str
    kernel_patterns: tuple[str, ...]
    op_patterns: tuple[str, ...]
    allows: tuple[str, ...] = ()  #: other families whose kernels may run too (e.g. gather + SDPA)

    def matches_kernel(self, name: str) -> bool:
        return any(re.search(p, name, re.IGNORECASE) for p in self.kernel_patterns)

    def matches_op(self, name: str) -> bool:
        return any(re.search(p, name, re.IGNORECASE) for p in self.op_patterns)


FLASH = KernelFamily(
    "flash",
    kernel_patterns=(r"flash_fwd", r"flash_bwd", r"pytorch_flash", r"flash_attn"),
    op_patterns=(r"_scaled_dot_product_flash_attention",),
)
EFFICIENT = KernelFamily(
    "efficient",
    # "AttentionKernel<" (PyTorchMemEffAttention::AttentionKernel<...>), not FlashInfer's "AttentionKernelTraits<"
    kernel_patterns=(r"fmha_cutlass", r"AttentionKernel<", r"AttentionBackwardKernel<", r"mem_eff"),
    op_patterns=(r"_scaled_dot_product_efficient_attention", r"_efficient_attention"),
)
CUDNN = KernelFamily(
    "cudnn",
    # "fmha_ ... fprop": written so that no character is scanned from two "fmha_" starts (``fmha_.*(fprop|bprop)``
    # took time quadratic in the name's length on a name repeating "fmha_")
    kernel_patterns=(r"cudnn", r"sm\d+_flash_(fprop|bprop)", r"fmha_(?:(?!fmha_).)*?(fprop|bprop)"),
    op_patterns=(r"_scaled_dot_product_cudnn_attention",),
)
#: The general dense path: explicit GEMMs and a softmax kernel (SDPA's math backend, our eager path).
DENSE = KernelFamily(
    "dense",
    kernel_patterns=(r"softmax",),
    op_patterns=(r"aten::_?softmax",),
)
FLEX = KernelFamily(
    "flex",
    kernel_patterns=(r"triton_tem", r"flex_attention", r"flex_decoding"),
    op_patterns=(r"CompiledFxGraph", r"CompiledFunction", r"flex_attention", r"Torch-Compiled Region"),
)
#: Prefix of the ``record_function`` range our Triton backends put around each kernel launch on a CPU tensor
#: (Triton's interpreter, ``TRITON_INTERPRET=1``): the interpreter runs the kernel as Python and numpy, so a CPU
#: trace holds no operator naming it; the range ``triton-interpreter::<kernel name>`` does. On CUDA no range is
#: added: the kernel itself is in the trace.
INTERPRETER_RANGE_PREFIX = "triton-interpreter::"
#: Suffixes of the ``record_function`` ranges the profiler pass puts around a graph-timed cell's profiled CUDA-graph
#: capture and each of its replays (:func:`profattn.harness.profiler.profile_graph_replays`): ``<cell id>::graph-capture``
#: and ``<cell id>::graph-replay``. Ranges of their own, so a cell's eager evidence (its ``<cell id>`` ranges) is read
#: as before and the replayed kernels — launched by the ``cudaGraphLaunch`` inside a replay range — apart.
GRAPH_CAPTURE_SUFFIX = "::graph-capture"
GRAPH_REPLAY_SUFFIX = "::graph-replay"


def graph_capture_range(cell_id: str) -> str:
    """The range name of ``cell_id``'s profiled CUDA-graph capture (:data:`GRAPH_CAPTURE_SUFFIX`)."""
    return cell_id + GRAPH_CAPTURE_SUFFIX


def graph_replay_range(cell_id: str) -> str:
    """The range name of each profiled replay of ``cell_id``'s CUDA graph (:data:`GRAPH_REPLAY_SUFFIX`)."""
    return cell_id + GRAPH_REPLAY_SUFFIX


#: Our own Triton kernels: the split-KV decode (``_paged_decode_split_kernel`` and its combine), the one-launch
#: prefill / mixed kernel (``paged_varlen_kernel``) and the cache append (``_paged_append_kernel``); on a CPU
#: trace, the interpreter's ranges around them (:data:`INTERPRETER_RANGE_PREFIX`).
TRITON = KernelFamily(
    "triton",
    kernel_patterns=(r"_paged_decode", r"\bpaged_varlen_kernel\b", r"_paged_append_kernel"),
    op_patterns=(rf"^{re.escape(INTERPRETER_RANGE_PREFIX)}(_paged_decode|paged_varlen_kernel$|_paged_append_kernel$)",),
)
#: FlashInfer's kernels (namespace ``flashinfer::``: ``BatchDecodeWithPagedKVCacheKernel``,
#: ``BatchPrefillWithPagedKVCacheKernel``, ``BatchPrefillWithRaggedKVCacheKernel``, the split-KV merge
#: ``…MergeStates…``; ``flashinfer/csrc`` of FlashInfer 0.5.3).
FLASHINFER = KernelFamily(
    "flashinfer",
    kernel_patterns=(r"flashinfer", r"BatchDecodeWithPagedKVCache", r"BatchPrefillWith(Paged|Ragged)KVCache", r"MergeStates"),
    op_patterns=(r"flashinfer",),
)
#: FlashInfer's FlashAttention-2 batch-prefill kernels (``include/flashinfer/attention/prefill.cuh`` of 0.5.3:
#: ``flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<…>>`` and the ragged twin), which its
#: ``backend="fa2"`` runs — as does its tensor-core decode. Not one of :data:`ATTENTION_FAMILIES`: the kernels are
#: :data:`FLASHINFER`'s too (``allows`` lets that family's merge and index kernels in); a cell of this family whose
#: trace shows only FA3's kernels is flagged ("no flashinfer-fa2 kernel among ...").
FLASHINFER_FA2 = KernelFamily(
    "flashinfer-fa2",
    kernel_patterns=(r"flashinfer::BatchPrefillWith(Paged|Ragged)KVCacheKernel",),
    op_patterns=(r"flashinfer",),
    allows=("flashinfer",),
)
#: FlashInfer's Hopper FlashAttention-3 kernels (``include/flashinfer/attention/hopper/prefill_sm90.cuh``:
#: ``flashinfer::PrefillWithKVCacheKernel<flashinfer::CollectiveMainloop<…>>``, ``…SparseCollectiveMainloop<…>`` for
#: the paged cache, beside ``BlockSparseIndicesToVectorSparseOffsetsKernel``), which ``backend="fa3"`` — and on SM 9.x
#: ``"auto"`` — runs. Seen in every ``flashinfer-prefill-paged`` cell of the committed H200 runs.
FLASHINFER_FA3 = KernelFamily(
    "flashinfer-fa3",
    kernel_patterns=(r"flashinfer::PrefillWithKVCacheKernel<",),
    op_patterns=(r"flashinfer",),
    allows=("flashinfer",),
)
#: The XQA decode kernel FlashInfer 0.5.3 JIT-compiles (``csrc/xqa/mha.cu``: ``kernel_mha``, a ``static`` function in
#: the JIT build; ``mha_sm90.cu``'s Hopper FP8 kernel has the same name), run by
#: ``flashinfer.decode.xqa_batch_decode_with_kv_cache``; its custom op is ``flashinfer::xqa_input_…``.
FLASHINFER_XQA = KernelFamily(
    "flashinfer-xqa",
    kernel_patterns=(r"\bkernel_mha\b",),
    op_patterns=(r"flashinfer::xqa",),
    allows=("flashinfer",),
)
#: Address translation in PyTorch: gather (index) kernels, then any SDPA kernel on the dense copy.
PAGED_GATHER = KernelFamily(
    "paged-gather",
    kernel_patterns=(r"index_elementwise", r"\bindex", r"gather"),
    op_patterns=(r"aten::index",),
    allows=("flash", "efficient", "cudnn", "dense"),
)

#: torch's SDPA on jagged nested tensors as ``sdpa-nested`` pins it: FlashAttention-2's variable-length kernels on
#: CUDA (the same ``pytorch_flash::flash_fwd_*`` kernels as :data:`FLASH`, reached through
#: ``aten::_flash_attention_forward`` with cumulative sequence lengths), the math composite on a CPU (the only
#: jagged path there: ``aten::_scaled_dot_product_attention_math`` over strided nested tensors, softmax per
#: sequence). Not one of :data:`ATTENTION_FAMILIES`: its GPU kernels are FLASH's, so listing it there would make
#: every ``sdpa-flash`` cell look foreign; ``allows`` lets FLASH's kernels into its own cells.
NESTED = KernelFamily(
    "nested",
    kernel_patterns=FLASH.kernel_patterns,
    op_patterns=(r"aten::_scaled_dot_product_attention_math", r"aten::_?softmax"),
    allows=("flash",),
)

# ---- serving engines' attention kernels (recognised in any trace; profattn runs none of them) ------------------
#: vLLM's Triton unified attention (``vllm/attention/ops/triton_unified_attention.py``): the one-kernel
#: prefill/decode ``kernel_unified_attention_2d``, the split-KV ``kernel_unified_attention_3d`` and its combine
#: ``reduce_segments``; and ``kernel_paged_attention_2d`` (``chunked_prefill_paged_decode.py``).
VLLM_TRITON = KernelFamily(
    "vllm-triton",
    kernel_patterns=(r"^kernel_unified_attention_[23]d$", r"^reduce_segments$", r"^kernel_paged_attention_2d$"),
    op_patterns=(r"^vllm::unified_attention",),
)
#: The LightLLM-style Triton attention kernels of SGLang's Triton backend (``python/sglang/srt/layers/attention/
#: triton_ops/decode_attention.py``: ``_fwd_kernel_stage1``, ``_fwd_grouped_kernel_stage1``, ``_fwd_kernel_stage2``;
#: ``extend_attention.py``: ``_fwd_kernel``) and of vLLM's ``triton_decode_attention.py`` / ``prefix_prefill.py``.
TRITON_ATTENTION = KernelFamily(
    "triton-attention",
    kernel_patterns=(r"^_fwd_kernel_stage[12]$", r"^_fwd_grouped_kernel_stage1$", r"^_fwd_kernel$"),
    op_patterns=(r"^sglang::",),
)
#: vLLM's CUDA paged attention (``csrc/attention/paged_attention_v[12].cu``) and its ROCm custom kernel
#: (``csrc/rocm/attention.cu``: ``paged_attention_ll4mi_*``).
VLLM_PAGED = KernelFamily(
    "vllm-paged",
    kernel_patterns=(r"paged_attention_v[12]_(reduce_)?kernel", r"paged_attention_ll4mi"),
    op_patterns=(r"^_C::paged_attention", r"^_rocm_C::paged_attention"),
)
#: FlashAttention-3 (Hopper) as vLLM's ``_vllm_fa3_C`` and sgl-kernel build it: ``flash::FlashAttnFwdSm90<...>``,
#: the split combine ``flash::FlashAttnFwdCombine<...>`` (hopper/flash_fwd_launch_template.h).
FLASH3 = KernelFamily(
    "flash3",
    kernel_patterns=(r"FlashAttnFwd", r"flash_fwd_combine"),
    op_patterns=(r"^_vllm_fa3_C::", r"^sgl_kernel::fwd"),
)
#: DeepSeek's FlashMLA (``flash_fwd_splitkv_mla_kernel`` and its combine), as ``_flashmla_C`` ships it.
FLASHMLA = KernelFamily(
    "flashmla",
    kernel_patterns=(r"flash_fwd_splitkv_mla", r"mla_combine", r"flashmla"),
    op_patterns=(r"^_flashmla_C::",),
)
#: ROCm's aiter / Composable Kernel attention: CK-tile FMHA (``ck_tile::FmhaFwdKernel<...>``; the paged batch prefill
#: ``ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel<...>`` that ``aiter::mha_batch_prefill`` launches, whose name holds
#: FlashInfer's ``BatchPrefillWithPagedKVCache`` too: matched here first), aiter's assembly FMHA v3 and
#: paged-attention / MLA-decode kernels (ROCm/aiter, ``aiter/ops/mha.py``, ``aiter/ops/attention.py``).
AITER = KernelFamily(
    "aiter",
    kernel_patterns=(r"Fmha(Fwd|Bwd|BatchPrefill)", r"fmha_(fwd|bwd|v3)", r"aiter.*(fmha|mha_|pa_|paged|mla)",
                     r"\bpa_(bf16|fp16|fp8)", r"mla_(a8w8|dec)"),
    op_patterns=(r"^aiter::",),
)
#: Kernels that build a paged cache's index arrays for an attention backend — SGLang's Triton
#: ``create_flashinfer_kv_indices_triton`` (``python/sglang/srt/layers/attention/utils.py``, run by its FlashInfer,
#: aiter and Triton backends while planning a step) and its siblings ``create_flashmla_kv_indices_triton``,
#: ``create_chunked_prefix_cache_kv_indices`` — a step's metadata work, never an attention call, though the name may
#: hold an attention library's.
INDEX_KERNEL_PATTERN = r"^create_\w*kv_indices"
#: Engine families, checked before :data:`ATTENTION_FAMILIES` when naming a trace's kernel (FlashMLA's
#: ``flash_fwd_splitkv_mla`` before FLASH's ``flash_fwd``). Not in :data:`ATTENTION_FAMILIES`: no profattn cell runs
#: them, so they take no part in a cell's family check.
ENGINE_FAMILIES: tuple[KernelFamily, ...] = (VLLM_TRITON, TRITON_ATTENTION, VLLM_PAGED, FLASHMLA, FLASH3, AITER)

#: Families whose kernels are fused attention kernels: seeing one of these in another family's cell
#: means the cell did not run what its name says.
ATTENTION_FAMILIES: tuple[KernelFamily, ...] = (FLASH, EFFICIENT, CUDNN, FLEX, TRITON, FLASHINFER)

#: Every built-in family by name (the ``family`` a cell records in ``results.json``).
BUILTIN_FAMILIES: dict[str, KernelFamily] = {
    f.name: f for f in (FLASH, EFFICIENT, CUDNN, DENSE, FLEX, TRITON, FLASHINFER, PAGED_GATHER, NESTED, FLASHINFER_FA2,
                        FLASHINFER_FA3, FLASHINFER_XQA)
}


def builtin_family(name: str) -> KernelFamily | None:
    """The built-in :class:`KernelFamily` called ``name`` (``flash``, ``dense``, ``paged-gather``, ``nested``, ...), or
    None for a name that is not built in (a plugin's family)."""
    return BUILTIN_FAMILIES.get(name)
