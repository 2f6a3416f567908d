"""FlashInfer backends: the block table → CSR page list, and the reasons they give where FlashInfer cannot run
(CPU; the GPU test runs them against the reference). Q packing: ``test_packing.py``."""

from __future__ import annotations

import pytest
import torch

from profattn.backends import get_backend
from profattn.backends.flashinfer import FLASHINFER_BACKENDS, csr_pages, shape_reason
from profattn.workload import Workload, get_preset


def test_csr_pages_from_a_block_table():
    # 3 sequences, page size 4: lengths 9 (3 pages, 1 in the last), 4 (1 full page), 6 (2 pages, 2 in the last)
    table = torch.tensor([[7, 2, 5, -1], [0, -1, -1, -1], [3, 1, -1, -1]], dtype=torch.int32)
    indptr, indices, last = csr_pages(table, torch.tensor([9, 4, 6], dtype=torch.int32), 4)
    assert indptr.tolist() == [0, 3, 4, 6] and indices.tolist() == [7, 2, 5, 0, 3, 1] and last.tolist() == [1, 4, 2]
    assert indptr.dtype == indices.dtype == last.dtype == torch.int32
    with pytest.raises(ValueError):
        csr_pages(table, torch.tensor([9, 0, 6], dtype=torch.int32), 4)


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
