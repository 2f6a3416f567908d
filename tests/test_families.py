"""Kernel families on kernel names read from real H200 traces (FlashInfer 0.5.3, PyTorch 2.11)."""

from __future__ import annotations

from profattn.analysis.run.cells import family_check
from profattn.families import ATTENTION_FAMILIES, EFFICIENT, FLASH, FLASHINFER, NESTED, builtin_family

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


#: FlashAttention-2 kernels from the H200 traces (torch 2.11): the prefill kernel (``examples/h200-seed``) and the
#: split-KV decode kernel (``tests/data/traces/h200_sdpa_decode_flash_gqa.pt.trace.json.gz``); torch's jagged SDPA
#: reaches the same kernels through ``aten::_flash_attention_forward`` with cumulative sequence lengths.
FLASH_KERNELS = (
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>"
    "(pytorch_flash::Flash_fwd_params)",
    "void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, false, false, false, "
    "true, false, true, false>(pytorch_flash::Flash_fwd_params)",
)


def test_nested_family_takes_flash_kernels_and_leaves_flash_cells_alone():
    """``sdpa-nested`` pins FlashAttention-2 on CUDA: its cells are confirmed by FLASH's kernels, flagged by another
    fused family's; and since ``nested`` is no attention family of its own, ``sdpa-flash`` cells stay confirmed."""
    for name in FLASH_KERNELS:
        assert family_check(NESTED, [name], [], gpu=True)[0] is True
        assert family_check(FLASH, [name], [], gpu=True)[0] is True
    assert family_check(NESTED, [MEM_EFF], [], gpu=True) == (False, f"ran kernels of another family: {MEM_EFF[:300]}")
    assert family_check(NESTED, ["void at::native::vectorized_elementwise_kernel<4>"], [], gpu=True) == (
        False, "no nested kernel among the 1 that ran")
    assert NESTED not in ATTENTION_FAMILIES and builtin_family("nested") is NESTED


def test_our_triton_kernels_belong_to_triton_only():
    """Our one-launch prefill kernel (``paged_varlen_kernel`` in the H200 serving traces) was outside the triton
    family's patterns, so every triton-paged-prefill cell was flagged "no triton kernel among the 1 that ran"."""
    from profattn.families import TRITON

    ours = ("paged_varlen_kernel", "_paged_decode_split_kernel", "_paged_decode_combine_kernel", "_paged_append_kernel")
    for name in ours:
        assert TRITON.matches_kernel(name), name
        assert [f.name for f in ATTENTION_FAMILIES if f is not TRITON and f.matches_kernel(name)] == [], name
    assert not TRITON.matches_kernel("triton_tem_fused_flex_attention_0")  # flex's generated kernel


def test_our_triton_kernels_under_the_interpreter_match_triton_operators_only():
    """On a CPU trace the check reads operator names; TRITON had no operator pattern, so every interpreter cell of
    our kernels was "no triton operator among the N that ran". The launch range names the kernel now."""
    from profattn.families import INTERPRETER_RANGE_PREFIX, TRITON

    ours = [INTERPRETER_RANGE_PREFIX + n for n in ("paged_varlen_kernel", "_paged_decode_split_kernel",
                                                   "_paged_decode_combine_kernel", "_paged_append_kernel")]
    for name in ours:
        assert TRITON.matches_op(name), name
        assert [f.name for f in ATTENTION_FAMILIES if f is not TRITON and f.matches_op(name)] == [], name
    assert family_check(TRITON, [], ["aten::empty", ours[1], ours[2]], gpu=False) == (
        True, f"triton operators ran: {ours[2]}, {ours[1]}")
    # an eager cell's operators, another Triton kernel, and the kernel's bare name are not our kernels' evidence
    eager_ops = ["aten::repeat_interleave", "aten::matmul", "aten::bmm", "aten::_softmax", "aten::softmax", "aten::copy_"]
    assert [n for n in eager_ops if TRITON.matches_op(n)] == []
    assert not TRITON.matches_op(INTERPRETER_RANGE_PREFIX + "my_matmul_kernel")
    assert not TRITON.matches_op("_paged_decode_split_kernel")
    assert family_check(TRITON, [], eager_ops, gpu=False) == (False, "no triton operator among the 6 that ran")
