"""Kernel families on kernel names read from real H200 traces (FlashInfer 0.5.3, PyTorch 2.11)."""

from __future__ import annotations

from profattn.families import ATTENTION_FAMILIES, EFFICIENT, FLASHINFER

#: Kernel names from the traces of the serving run on the H200 (FlashInfer 0.5.3), shortened after the
#: template arguments that matter to the patterns.
FLASHINFER_KERNELS = (
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 1u, 8u, 16u, 8u, 4u>",
    "void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16, __nv_bfloat16>",
    "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)0, 16u>>",
    "void flashinfer::PrefillWithKVCacheKernel<flashinfer::SparseCollectiveMainloop<PagedParams::AdditionalParams, "
    "flashinfer::AttentionKernelTraits<false, 128, 128, 128, 96, 2, cutlass::bfloat16_t>, true, false>>",
    "void flashinfer::BlockSparseIndicesToVectorSparseOffsetsKernel<int>(int*, int*, int*, int*, int*, unsigned int)",
)
MEM_EFF = "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)"


def test_flashinfer_kernels_belong_to_flashinfer_only():
    """FlashInfer's Hopper prefill kernel names ``AttentionKernelTraits``: the memory-efficient family's
    ``AttentionKernel`` pattern claimed it, and every FlashInfer mixed-batch cell was flagged."""
    for name in FLASHINFER_KERNELS:
        assert FLASHINFER.matches_kernel(name), name
        others = [f.name for f in ATTENTION_FAMILIES if f is not FLASHINFER and f.matches_kernel(name)]
        assert others == [], (name, others)
    assert EFFICIENT.matches_kernel(MEM_EFF) and not FLASHINFER.matches_kernel(MEM_EFF)
