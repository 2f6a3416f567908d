"""Record tests/data/traces/cpu_varlen_window_torch213.pt.trace.json.gz: torch.profiler (record_shapes=True) on a
CPU, torch 2.13, around attention calls with packed variable-length batches and local windows.

``aten::_flash_attention_forward`` and ``aten::_efficient_attention_forward`` have CUDA kernels only; a CPU
stand-in (empty outputs) is registered for them, so the profiler records the op calls through the dispatcher
exactly as on a GPU (Input Dims, Input type, Concrete Inputs) — without GPU kernels. The SDPA calls with an
explicit mask run torch's own CPU paths. Run: python tests/data/scripts/record_cpu_varlen_window.py OUT.json
"""

import gzip
import shutil
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function

lib = torch.library.Library("aten", "IMPL")


def _flash(q, k, v, cq, ck, mq, mk, p, causal, dbg, **kw):
    lse = torch.empty(q.shape[-2], q.shape[0], dtype=torch.float32)
    return torch.empty_like(q), lse, torch.zeros(2, dtype=torch.uint64), torch.empty(0, dtype=torch.uint64), torch.empty(0)


def _efficient(q, k, v, bias, cq, ck, mq, mk, p, mask_type, *a, **kw):
    return (torch.empty_like(q), torch.empty(0), torch.empty((), dtype=torch.uint64), torch.empty((), dtype=torch.uint64),
            torch.tensor(0), torch.tensor(0))


lib.impl("_flash_attention_forward", _flash, "CPU")
lib.impl("_efficient_attention_forward", _efficient, "CPU")

H, HKV, D, BF = 8, 2, 64, torch.bfloat16
flash = torch.ops.aten._flash_attention_forward
eff = torch.ops.aten._efficient_attention_forward


def cu(*lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def packed(total, heads):
    return torch.zeros(total, heads, D, dtype=BF)


with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    with record_function("flash_varlen_ragged_window"):  # 3 sequences 5, 3, 8: lengths not determined
        flash(packed(16, H), packed(16, HKV), packed(16, HKV), cu(5, 3, 8), cu(5, 3, 8), 8, 8, 0.0, True, False,
              window_size_left=3, window_size_right=0)
    with record_function("flash_varlen_uniform_window"):  # 4 sequences of 8: totals = 4 x longest
        flash(packed(32, H), packed(32, HKV), packed(32, HKV), cu(8, 8, 8, 8), cu(8, 8, 8, 8), 8, 8, 0.0, True, False,
              window_size_left=3, window_size_right=0)
    with record_function("flash_varlen_one_sequence"):
        flash(packed(16, H), packed(16, HKV), packed(16, HKV), cu(16), cu(16), 16, 16, 0.0, True, False)
    with record_function("flash_varlen_decode"):  # 4 sequences, one query each, 16 keys each
        flash(packed(4, H), packed(64, HKV), packed(64, HKV), cu(1, 1, 1, 1), cu(16, 16, 16, 16), 1, 16, 0.0, True, False)
    with record_function("flash_dense_window"):
        q, k = torch.zeros(2, 8, H, D, dtype=BF), torch.zeros(2, 8, HKV, D, dtype=BF)
        flash(q, k, k, None, None, 8, 8, 0.0, True, False, window_size_left=3, window_size_right=0)
    with record_function("flash_dense_two_sided"):
        flash(q, k, k, None, None, 8, 8, 0.0, False, False, window_size_left=2, window_size_right=2)
    with record_function("efficient_varlen_window"):  # xformers layout [1, total, H, d], bottom-right causal
        qe = torch.zeros(1, 16, H, D, dtype=BF)
        eff(qe, qe, qe, None, cu(8, 8), cu(8, 8), 8, 8, 0.0, 2, False, window_size=4)
    qs, ks = torch.zeros(2, H, 8, D), torch.zeros(2, H, 8, D)
    band = torch.ones(8, 8, dtype=torch.bool).tril() & ~torch.ones(8, 8, dtype=torch.bool).tril(-4)  # window 4
    with record_function("sdpa_mask_default"):
        torch.nn.functional.scaled_dot_product_attention(qs, ks, ks, attn_mask=band)
    with record_function("sdpa_mask_math"), sdpa_kernel([SDPBackend.MATH]):
        torch.nn.functional.scaled_dot_product_attention(qs, ks, ks, attn_mask=band)

out = sys.argv[1]
prof.export_chrome_trace(out)
with open(out, "rb") as f, gzip.open(out + ".gz", "wb") as g:
    shutil.copyfileobj(f, g)
