"""FlashInfer's other Hopper paths (cuDNN paged decode and prefill, XQA decode, prefill ``backend="fa2"``/``"fa3"``):
the host-side set-up they share (the NHD pool as cuDNN's HND view, the trimmed block table, cuDNN's element batch
offsets), the reasons they give where FlashInfer, the cuDNN frontend or the GPU cannot run them (as their 0.5.3 source
states them), and the families that tell FA2 from FA3 in a trace. The GPU test runs each against the reference."""

from __future__ import annotations

import sys
import types

import pytest
import torch

import profattn.backends.flashinfer as fi
import profattn.backends.flashinfer_hopper as fh
from profattn.backends import get_backend
from profattn.families import CUDNN, FLASHINFER, FLASHINFER_FA2, FLASHINFER_FA3, FLASHINFER_XQA
from profattn.workload import get_preset, parse_workload_spec

HOPPER = ("flashinfer-cudnn-decode", "flashinfer-cudnn-prefill", "flashinfer-xqa-decode", "flashinfer-prefill-paged-fa2",
          "flashinfer-prefill-paged-fa3")
DECODE = parse_workload_spec("phase=decode,b=8,q=1,kv=2048,hq=16,hkv=4,d=128,page=16")
PREFILL = parse_workload_spec("phase=prefill,b=2,q=512,kv=2048,hq=16,hkv=4,d=128,page=16")
CUDA = torch.device("cuda")


def test_hnd_view_is_the_pool_itself():
    pages = torch.arange(3 * 4 * 2 * 8).view(3, 4, 2, 8)  # [pages, page_size 4, Hkv 2, d 8]
    view = fh.hnd_view(pages)
    assert view.shape == (3, 2, 4, 8) and view.stride() == (64, 8, 16, 1)  # (page·Hkv·d, d, Hkv·d, 1)
    assert view.data_ptr() == pages.data_ptr()
    assert torch.equal(view[2, 1, 3], pages[2, 3, 1]) and int(view[1, 0, 2, 5]) == 1 * 64 + 2 * 16 + 0 * 8 + 5
    with pytest.raises(ValueError, match="num_pages, page_size"):
        fh.hnd_view(pages[0])


def test_decode_operands_and_the_tiny_first_call():
    """What the decode paths read beside the pool, built in bind: q without its query axis, an output like it, the
    trimmed table, the lengths and a zeroed workspace; the first call's inputs are one full page."""
    w = DECODE.with_(batch=2, kv_len=40, num_q_heads=4, num_kv_heads=2, head_dim=16)
    tiny = fh.tiny_decode_inputs(w, torch.device("cpu"))
    assert tiny.q.shape == (1, 4, 1, 16) and tiny.paged.k_pages.shape == (1, 16, 2, 16)
    assert tiny.paged.block_table.tolist() == [[0]] and tiny.paged.seq_lens.tolist() == [16]
    o = fh.decode_operands(tiny, [16])
    assert o.q.shape == o.out.shape == (1, 4, 16) and o.q.is_contiguous() and o.lens.tolist() == [16]
    assert o.table.block_tables.tolist() == [[0]] and o.table.max_sequence_kv == 16
    assert o.workspace.numel() == fi.WORKSPACE_BYTES and o.workspace.dtype == torch.uint8 and not o.workspace.any()


def test_page_table_trims_and_clears_the_unused_entries():
    # page size 4: lengths 9, 4, 6 need 3, 1, 2 pages; the table's fourth column and its -1s are not pages
    table = torch.tensor([[7, 2, 5, -1], [0, -1, -1, -1], [3, 1, -1, -1]], dtype=torch.int32)
    t = fh.page_table(table, [9, 4, 6], 4)
    assert t.block_tables.tolist() == [[7, 2, 5], [0, 0, 0], [3, 1, 0]] and t.max_sequence_kv == 12
    assert t.block_tables.dtype == torch.int32 and t.block_tables.is_contiguous()
    assert table[1, 1] == -1  # the cache's own table is untouched
    with pytest.raises(ValueError, match="needs 5 pages; the block table holds 4"):
        fh.page_table(table, [17, 4, 6], 4)
    for bad in ([9, 4], [9, 0, 6]):
        with pytest.raises(ValueError, match="one length >= 1"):
            fh.page_table(table, bad, 4)


def test_cudnn_prefill_args_by_hand():
    # 3 sequences appending 3, 1, 6 rows over 9, 4, 6 keys; Hq 2, d 4: a query row is 8 elements, so the packed q's
    # sequences start at elements 0, 24, 32 and it ends at 80 (cuDNN's ragged offsets are element offsets)
    table = torch.tensor([[7, 2, 5, -1], [0, -1, -1, -1], [3, 1, -1, -1]], dtype=torch.int32)
    a = fh.cudnn_prefill_args(table, [3, 1, 6], [9, 4, 6], 4, num_q_heads=2, head_dim=4)
    assert a.batch_offsets.tolist() == [0, 24, 32, 80] and a.batch_offsets.dtype == torch.int32
    assert a.actual_seq_lens_q.shape == (3, 1, 1, 1) and a.actual_seq_lens_q.flatten().tolist() == [3, 1, 6]
    assert a.actual_seq_lens_kv.flatten().tolist() == [9, 4, 6] and a.actual_seq_lens_kv.dtype == torch.int32
    assert a.max_token_per_sequence == 6 and a.table.max_sequence_kv == 12
    for q, kv in (([3, 1], [9, 4, 6]), ([3, 0, 6], [9, 4, 6]), ([3, 5, 6], [9, 4, 6])):
        with pytest.raises(ValueError, match="pair up"):
            fh.cudnn_prefill_args(table, q, kv, 4, num_q_heads=2, head_dim=4)
    with pytest.raises(ValueError, match="int32"):
        fh.cudnn_prefill_args(table, [3, 1, 6], [9, 4, 6], 4, num_q_heads=2**20, head_dim=2**8)


def test_registered_with_their_families():
    fams = {name: get_backend(name).family for name in HOPPER}
    assert fams == {"flashinfer-cudnn-decode": CUDNN, "flashinfer-cudnn-prefill": CUDNN,
                    "flashinfer-xqa-decode": FLASHINFER_XQA, "flashinfer-prefill-paged-fa2": FLASHINFER_FA2,
                    "flashinfer-prefill-paged-fa3": FLASHINFER_FA3}
    assert get_backend("flashinfer-prefill-paged").family is FLASHINFER  # backend="auto": whichever FlashInfer picks
    assert all(getattr(get_backend(n), "varlen", False) for n in HOPPER)
    with pytest.raises(ValueError, match="auto, fa2, fa3"):
        fi.FlashInferPrefill(True, "cudnn")


def test_families_tell_fa2_from_fa3_by_the_h200_kernel_names():
    """Names as the committed H200 traces hold them (examples/h200-serving, examples/h200-variants)."""
    fa3_paged = ("void flashinfer::PrefillWithKVCacheKernel<flashinfer::SparseCollectiveMainloop<PagedParams::"
                 "AdditionalParams, flashinfer::AttentionKernelTraits<false, 128, 128, 128, 96, 2, cutlass::bfloat16_t")
    fa3_ragged = "void flashinfer::PrefillWithKVCacheKernel<flashinfer::CollectiveMainloop<RaggedParams::AdditionalParams"
    fa2_paged = ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)0, "
                 "16u, 1u, 2u, 8u, 8u, 1u, 4u, (flashinfer::PosEncodingMode)0, __nv_bfloat16")
    merge = "void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16, __nv_bfloat16, int>"
    assert FLASHINFER_FA3.matches_kernel(fa3_paged) and FLASHINFER_FA3.matches_kernel(fa3_ragged)
    assert not FLASHINFER_FA3.matches_kernel(fa2_paged) and not FLASHINFER_FA2.matches_kernel(fa3_paged)
    assert FLASHINFER_FA2.matches_kernel(fa2_paged) and not FLASHINFER_FA2.matches_kernel(merge)
    assert FLASHINFER_XQA.matches_kernel("kernel_mha(unsigned int, float, float const*, Vec<__nv_bfloat16, 128u>*)")
    from profattn.analysis.run.cells import family_check

    assert family_check(FLASHINFER_FA3, [fa3_paged, "void flashinfer::BlockSparseIndicesToVectorSparseOffsetsKernel<int>"], [])[0]
    ok, note = family_check(FLASHINFER_FA3, [fa2_paged, merge], [])
    assert ok is False and note == "no flashinfer-fa3 kernel among the 2 that ran"
    ok, note = family_check(FLASHINFER_FA2, [fa2_paged, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop"], [])
    assert ok is False and note.startswith("ran kernels of another family: cudnn_generated")


def test_cpu_reasons():
    cpu = torch.device("cpu")
    for name in HOPPER:
        for w in get_preset("seed").workloads:
            assert get_backend(name).unsupported_reason(w, cpu) == "FlashInfer runs on CUDA GPUs only", (name, w.tag)


@pytest.fixture
def as_on_a_gpu(monkeypatch):
    """FlashInfer importable on an SM 9.0 GPU with CUDA 13.0, and a cuDNN frontend with cuDNN 9.10 (as on the H200)."""
    for module in (fi, fh):
        monkeypatch.setattr(module, "flashinfer_reason", lambda device: None)
    state = {"capability": (9, 0), "frontend": True, "backend": 91000}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: state["capability"])
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    decode_mod = types.ModuleType("flashinfer.cudnn.decode")
    cudnn_pkg = types.ModuleType("flashinfer.cudnn")
    cudnn_pkg.decode = decode_mod
    frontend = types.ModuleType("cudnn")
    frontend.backend_version = lambda: state["backend"]
    frontend.__version__ = "1.16.0"
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.cudnn", cudnn_pkg)
    monkeypatch.setitem(sys.modules, "flashinfer.cudnn.decode", decode_mod)
    monkeypatch.setitem(sys.modules, "cudnn", frontend)

    def sync():
        decode_mod.CUDNN_AVAILABLE = state["frontend"]

    state["sync"] = sync
    sync()
    return state


def test_cudnn_reasons_from_the_0_5_3_source(as_on_a_gpu):
    dec, pre = get_backend("flashinfer-cudnn-decode"), get_backend("flashinfer-cudnn-prefill")
    assert dec.unsupported_reason(DECODE, CUDA) is None
    assert pre.unsupported_reason(PREFILL, CUDA) is None
    assert pre.unsupported_reason(DECODE, CUDA) is None  # decode steps through the prefill graph, as FlashInfer's paged prefill
    mixed = parse_workload_spec("mix=2x(q512,kv2048)+8x(q1,kv1024),hq=16,hkv=4,d=128,page=16,append=true")
    assert pre.unsupported_reason(mixed, CUDA) is None
    assert dec.unsupported_reason(PREFILL, CUDA) == "a decode path: needs phase decode with q_len 1"
    assert dec.unsupported_reason(DECODE.with_(dtype="float16"), CUDA) == (
        "FlashInfer 0.5.3's cuDNN graphs declare q and the output bfloat16 (cudnn/decode.py), not float16")
    assert pre.unsupported_reason(PREFILL.with_(head_dim=64), CUDA) == (
        "cudnn_batch_prefill_with_kv_cache takes head_dim 128 with a page table (its docstring), not 64")
    assert dec.unsupported_reason(DECODE.with_(head_dim=64), CUDA) is None
    assert dec.unsupported_reason(DECODE.with_(kv_len=8192, window=1024), CUDA) == "FlashInfer 0.5.3's cuDNN wrappers take no sliding window"
    dense = parse_workload_spec("phase=prefill,b=2,q=512,kv=2048,hq=16,hkv=4,d=128")
    assert pre.unsupported_reason(dense.with_(phase="train"), CUDA) == "FlashInfer has no backward (forward-only serving kernels)"
    assert pre.unsupported_reason(dense, CUDA) == "reads a paged KV cache; this workload's layout is dense"
    as_on_a_gpu["backend"] = 90400
    assert dec.unsupported_reason(DECODE, CUDA) == (
        "cuDNN 90400 has no paged attention in SDPA (needs 9.5.0 or later, cudnn-frontend 1.8 release notes)")
    as_on_a_gpu["frontend"] = False
    as_on_a_gpu["sync"]()
    why = pre.unsupported_reason(PREFILL, CUDA)
    assert why.startswith("the cuDNN frontend's Python package (nvidia-cudnn-frontend, module cudnn) is not importable")
    assert "SM100 cubins" in why
    assert fh.cudnn_frontend_version() == "1.16.0"


def test_xqa_reasons_from_the_0_5_3_source(as_on_a_gpu):
    xqa = get_backend("flashinfer-xqa-decode")
    assert xqa.unsupported_reason(DECODE, CUDA) is None
    assert xqa.unsupported_reason(DECODE.with_(kv_len=32768, window=4096), CUDA) is None  # sliding_win_size = window
    assert xqa.unsupported_reason(DECODE.with_(page_size=8), CUDA) == (
        "XQA is compiled for page sizes 16, 32, 64, 128 (flashinfer/jit/xqa.py), not 8")
    assert xqa.unsupported_reason(DECODE.with_(head_dim=72), CUDA) == (
        "XQA needs head_dim divisible by 16 in [16, 256] (flashinfer/jit/xqa.py), not 72")
    assert "float16 or bfloat16" in xqa.unsupported_reason(DECODE.with_(dtype="float32"), CUDA)
    for cap, ok in (((10, 0), True), ((12, 0), True), ((8, 0), False), ((8, 9), False)):
        as_on_a_gpu["capability"] = cap
        why = xqa.unsupported_reason(DECODE, CUDA)
        assert (why is None) == ok, (cap, why)
    assert why == "XQA is only supported on SM90, SM100, SM120 GPUs (flashinfer/xqa.py); this GPU is SM 8.9"


def test_fa3_reasons(as_on_a_gpu, monkeypatch):
    fa2, fa3 = get_backend("flashinfer-prefill-paged-fa2"), get_backend("flashinfer-prefill-paged-fa3")
    assert fa3.unsupported_reason(PREFILL, CUDA) is None and fa2.unsupported_reason(PREFILL, CUDA) is None
    as_on_a_gpu["capability"] = (8, 0)
    assert fa3.unsupported_reason(PREFILL, CUDA) == ("FlashInfer's fa3 backend is built for sm_90a (Hopper) only; this GPU "
                                                     "is SM 8.0 (flashinfer.utils.is_sm90a_supported)")
    assert fa2.unsupported_reason(PREFILL, CUDA) is None
    as_on_a_gpu["capability"] = (9, 0)
    monkeypatch.setattr(torch.version, "cuda", "12.1")
    assert fa3.unsupported_reason(PREFILL, CUDA) == ("FlashInfer's fa3 backend needs CUDA >= 12.3 "
                                                     "(flashinfer.utils.is_sm90a_supported); torch has CUDA 12.1")


@pytest.mark.gpu
@pytest.mark.parametrize("name,spec", [
    ("flashinfer-cudnn-decode", "phase=decode,b=4,q=1,kv=300,hq=16,hkv=4,d=128,page=16"),
    ("flashinfer-cudnn-decode", "mix=3x(q1,kv90)+(q1,kv300),hq=16,hkv=4,d=128,page=16,append=true"),
    ("flashinfer-xqa-decode", "phase=decode,b=4,q=1,kv=300,hq=16,hkv=4,d=128,page=16"),
    ("flashinfer-cudnn-prefill", "phase=prefill,b=2,q=64,kv=200,hq=16,hkv=4,d=128,page=16,append=true"),
    ("flashinfer-cudnn-prefill", "mix=2x(q64,kv200)+3x(q1,kv90),hq=16,hkv=4,d=128,page=16"),
    ("flashinfer-prefill-paged-fa2", "phase=prefill,b=2,q=64,kv=200,hq=16,hkv=4,d=128,page=16"),
    ("flashinfer-prefill-paged-fa3", "phase=prefill,b=2,q=64,kv=200,hq=16,hkv=4,d=128,page=16"),
])
def test_hopper_paths_match_the_reference_on_the_gpu(name, spec):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("flashinfer")
    from profattn.harness.cell import run_cell
    from profattn.harness.inputs import make_inputs, reference
    from profattn.results import CellStatus

    w, dev = parse_workload_spec(spec), torch.device("cuda")
    backend = get_backend(name)
    reason = backend.unsupported_reason(w, dev)
    if reason:
        pytest.skip(reason)
    inputs = make_inputs(w, dev, seed=1)
    cell, _ = run_cell(w, backend, inputs, reference(w, inputs), dev)
    assert cell.status == CellStatus.OK, (name, cell.reason)
