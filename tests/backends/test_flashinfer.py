"""FlashInfer backends: the block table → CSR page list, the arguments of FlashInfer's cache append, and the
reasons they give where FlashInfer cannot run (CPU; the GPU tests run them against the reference and the torch
append). Q packing: ``test_packing.py``."""

from __future__ import annotations

import pytest
import torch

from profattn.backends import get_backend
from profattn.backends.flashinfer import FLASHINFER_BACKENDS, append_args, csr_pages, shape_reason
from profattn.workload import Workload, get_preset


def test_csr_pages_from_a_block_table():
    # 3 sequences, page size 4: lengths 9 (3 pages, 1 in the last), 4 (1 full page), 6 (2 pages, 2 in the last)
    table = torch.tensor([[7, 2, 5, -1], [0, -1, -1, -1], [3, 1, -1, -1]], dtype=torch.int32)
    indptr, indices, last = csr_pages(table, torch.tensor([9, 4, 6], dtype=torch.int32), 4)
    assert indptr.tolist() == [0, 3, 4, 6] and indices.tolist() == [7, 2, 5, 0, 3, 1] and last.tolist() == [1, 4, 2]
    assert indptr.dtype == indices.dtype == last.dtype == torch.int32
    with pytest.raises(ValueError):
        csr_pages(table, torch.tensor([9, 0, 6], dtype=torch.int32), 4)


def test_append_args_by_hand_and_the_slots_they_address():
    # the cache after the append, page size 4: sequences of 9, 4 and 6 tokens appending 3, 1 and 6 (sequence
    # 2 is a whole first chunk); FlashInfer's get_batch_indices_positions stores seq_len_b - q_len_b + i
    table = torch.tensor([[7, 2, 5, -1], [0, -1, -1, -1], [3, 1, -1, -1]], dtype=torch.int32)
    lens = torch.tensor([9, 4, 6], dtype=torch.int32)
    a = append_args(table, lens, [3, 1, 6], 4)
    assert a.batch_indices.tolist() == [0, 0, 0, 1, 2, 2, 2, 2, 2, 2]
    assert a.positions.tolist() == [6, 7, 8, 3, 0, 1, 2, 3, 4, 5]
    assert a.kv_indptr.tolist() == [0, 3, 4, 6] and a.kv_indices.tolist() == [7, 2, 5, 0, 3, 1]
    assert a.kv_last_page_len.tolist() == [1, 4, 2]
    assert {t.dtype for t in (a.batch_indices, a.positions, a.kv_indptr, a.kv_indices, a.kv_last_page_len)} == {torch.int32}
    # FlashInfer's kernel writes token i to kv_indices[kv_indptr[b] + pos // 4] * 4 + pos % 4: the slot mapping
    # profattn's torch append uses (sequence 0: page 2 slots 2, 3 then page 5 slot 0; ...)
    b, pos = a.batch_indices.long(), a.positions.long()
    slots = a.kv_indices.long()[a.kv_indptr.long()[b] + pos // 4] * 4 + pos % 4
    assert slots.tolist() == [10, 11, 20, 3, 12, 13, 14, 15, 4, 5]
    from profattn.workload.paged import PagedKVCache

    pool = torch.zeros(8, 4, 1, 1)
    cache = PagedKVCache(k_pages=pool, v_pages=pool, block_table=table, seq_lens=lens)
    assert cache.slot_mapping([3, 1, 6]).tolist() == slots.tolist()
    # a sequence that appends nothing this step keeps its pages in the list and adds no index
    a = append_args(table, lens, [3, 0, 2], 4)
    assert a.batch_indices.tolist() == [0, 0, 0, 2, 2] and a.positions.tolist() == [6, 7, 8, 4, 5]
    for bad in ([3, 1], [3, 5, 6], [-1, 1, 6]):
        with pytest.raises(ValueError, match="q_lens"):
            append_args(table, lens, bad, 4)


def test_cpu_reasons():
    cpu = torch.device("cpu")
    seed = get_preset("seed").workloads
    decode = seed[2]
    for b in FLASHINFER_BACKENDS:
        assert get_backend(b.name) is b
    # on a CPU every FlashInfer backend says so first, whatever the workload (it said "head_dim 16 has no
    # FlashInfer kernel" or "reads packed dense K/V" on the CPU before)
    for b in FLASHINFER_BACKENDS:
        for w in seed:
            assert b.unsupported_reason(w, cpu) == "FlashInfer runs on CUDA GPUs only", (b.name, w.tag)
    odd = Workload(phase="decode", batch=2, q_len=1, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=96,
                   kv_layout="paged", page_size=16)
    assert shape_reason(odd) == "head_dim 96 has no FlashInfer kernel (it ships 64, 128, 256)"
    assert shape_reason(odd.with_(head_dim=128, dtype="float32")) == "FlashInfer kernels take bfloat16 or float16, not float32"
    assert shape_reason(odd.with_(head_dim=128)) is None
    # variable-length calls are offered to all four (decode: per-sequence KV lengths, q_len 1 each)
    assert getattr(get_backend("flashinfer-prefill-paged"), "varlen", False) is True
    assert getattr(get_backend("flashinfer-decode"), "varlen", False) is True  # ragged or appending decode steps


@pytest.mark.gpu
def test_flashinfer_matches_the_reference_on_the_gpu(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("flashinfer")
    from profattn.harness.session import SessionConfig, run_session
    from profattn.results import CellStatus
    from profattn.workload import Phase

    w = Workload(phase="decode", batch=4, q_len=1, kv_len=300, num_q_heads=16, num_kv_heads=4, head_dim=128,
                 kv_layout="paged", page_size=16)
    p = Workload(phase="prefill", batch=2, q_len=64, kv_len=200, num_q_heads=16, num_kv_heads=4, head_dim=128)
    from profattn.workload import Preset

    run = run_session(SessionConfig(preset=Preset("t", "t", (w, p)), regimes=(Phase.DECODE, Phase.PREFILL),
                                    backends=FLASHINFER_BACKENDS, device=torch.device("cuda"), out_dir=tmp_path / "r",
                                    measure_ceilings=False, profile_calls=1))
    ok = {c.backend for c in run.cells if c.status == CellStatus.OK}
    assert {"flashinfer-decode", "flashinfer-decode-tc", "flashinfer-prefill-ragged"} <= ok, [(c.backend, c.reason) for c in run.cells]


@pytest.mark.gpu
def test_flashinfer_append_matches_the_torch_append_on_the_gpu():
    """FlashInfer's append writes the pool bit for bit as ``reshape_and_cache`` does, and ``append_args``'s
    positions are what ``flashinfer.get_batch_indices_positions`` computes; appending cells keep their cache."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    flashinfer = pytest.importorskip("flashinfer")
    from profattn.backends.base import AttentionInputs
    from profattn.backends.flashinfer import bind_flashinfer_append
    from profattn.workload.paged import CacheAppend, PagedKVCache, reshape_and_cache

    dev = torch.device("cuda")
    lens, q_lens = [40, 17, 5], [7, 2, 5]
    k = torch.randn(3, 4, 40, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn(3, 4, 40, 128, device=dev, dtype=torch.bfloat16)
    cache = PagedKVCache.from_dense(k, v, page_size=16, seq_lens=lens, extra_pages=2,
                                    generator=torch.Generator().manual_seed(3))
    slots = cache.slot_mapping(q_lens)
    new = CacheAppend(torch.cat([k[b, :, n - q:n].transpose(0, 1) for b, (n, q) in enumerate(zip(lens, q_lens))]).contiguous(),
                      torch.cat([v[b, :, n - q:n].transpose(0, 1) for b, (n, q) in enumerate(zip(lens, q_lens))]).contiguous(),
                      slots)
    cache.clear_slots(slots)
    want_k, want_v = cache.k_pages.clone(), cache.v_pages.clone()
    reshape_and_cache(new.k_new, new.v_new, want_k, want_v, slots)
    q_t = torch.tensor(q_lens, dtype=torch.int32, device=dev)
    bind_flashinfer_append(AttentionInputs(q=k, k=k, v=v, paged=cache, q_lens=q_t, append=new))()
    torch.cuda.synchronize()
    assert torch.equal(cache.k_pages.view(torch.int16), want_k.view(torch.int16))
    assert torch.equal(cache.v_pages.view(torch.int16), want_v.view(torch.int16))
    assert cache.check_contents(k, v) is None
    a = append_args(cache.block_table, cache.seq_lens, q_lens, 16)
    indptr = torch.tensor([0, 7, 9, 14], dtype=torch.int32, device=dev)
    bi, pos = flashinfer.get_batch_indices_positions(indptr, cache.seq_lens, 14)
    assert torch.equal(bi, a.batch_indices) and torch.equal(pos, a.positions)

    from profattn.harness.cell import run_cell
    from profattn.harness.inputs import make_inputs, reference
    from profattn.results import CellStatus
    from profattn.workload import parse_workload_spec

    for name, spec in (("flashinfer-prefill-paged", "phase=prefill,b=2,q=64,kv=200,hq=16,hkv=4,d=128,page=16,append=true"),
                       ("flashinfer-decode", "mix=3x(q1,kv90)+(q1,kv300),hq=16,hkv=4,d=128,page=16,append=true")):
        w = parse_workload_spec(spec)
        inputs = make_inputs(w, dev, seed=1)
        cell, _ = run_cell(w, get_backend(name), inputs, reference(w, inputs), dev)
        assert cell.status == CellStatus.OK and cell.correctness.cache_ok is True, (name, cell.reason)
        assert any("append_paged_kv_cache" in n for n in cell.notes) and cell.append_timing is not None


def test_cuda_core_decode_refuses_group_sizes_it_is_not_compiled_for(monkeypatch):
    """FlashInfer 0.5.3's CUDA-core decode dispatches group sizes 1, 2, 3, 4, 8 only (an H200 run's MQA cells,
    Hq 32 / Hkv 1, failed at plan() with "Unsupported group_size: 32"): refused up front with the reason; the
    tensor-core path is not limited by that dispatch."""
    import profattn.backends.flashinfer as fi
    from profattn.workload import parse_workload_spec

    monkeypatch.setattr(fi, "flashinfer_reason", lambda device: None)  # as on a GPU with the wheel installed
    mqa = parse_workload_spec("phase=decode,b=8,q=1,kv=512,hq=32,hkv=1,d=128,page=16")
    cuda_core, tensor_core = fi.FlashInferDecode(False), fi.FlashInferDecode(True)
    dev = torch.device("cuda")
    assert cuda_core.unsupported_reason(mqa, dev) == ("FlashInfer's CUDA-core decode is compiled for GQA group sizes "
                                                      "1, 2, 3, 4, 8, not 32 (use the tensor-core path)")
    assert tensor_core.unsupported_reason(mqa, dev) is None
    for hkv in (32, 8, 4):  # groups 1 and 4 run; 32 / 4 = 8 runs
        assert cuda_core.unsupported_reason(mqa.with_(num_kv_heads=hkv), dev) is None
    assert "not 16" in cuda_core.unsupported_reason(mqa.with_(num_kv_heads=2), dev)


def test_ragged_prefill_takes_a_packed_prefill_and_plans_with_the_document_offsets(monkeypatch):
    """The variants preset's packed prefill (8 documents, dense layout, bf16, d 128) is offered to
    flashinfer-prefill-ragged where FlashInfer runs, with qo_indptr = kv_indptr = the documents' offsets (the
    row_offsets its plan() gets), causal per document; the packed training batch is refused (no backward)."""
    import profattn.backends.flashinfer as fi
    from profattn.backends.packing import row_offsets

    monkeypatch.setattr(fi, "flashinfer_reason", lambda device: None)
    train, prefill = get_preset("variants").workloads[:2]
    ragged = get_backend("flashinfer-prefill-ragged")
    cpu = torch.device("cpu")
    assert ragged.unsupported_reason(prefill, cpu) is None
    assert ragged.unsupported_reason(train, cpu) == "FlashInfer has no backward (forward-only serving kernels)"
    offsets = (0, 4096, 5120, 8192, 8704, 10752, 12288, 14848, 16384)
    assert prefill.doc_offsets == offsets
    assert row_offsets(list(prefill.q_lens), cpu).tolist() == row_offsets(list(prefill.kv_lens), cpu).tolist() == list(offsets)
