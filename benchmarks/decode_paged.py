"""Benchmark: our Triton paged decode kernel against SDPA flash and cuDNN at the seed decode shapes.

Prints, per kv_len: GPU time per decode step (CUDA-graph replay, L2 flushed before each replay, median),
achieved GB/s of unique K/V read, the fraction of the copy bandwidth measured in the same run, and the
ratio to SDPA flash and cuDNN timed the same way on the contiguous cache. ``--tune`` also times kernel
configurations (tile size, warps, stages, CTAs per SM) to choose the defaults.

    python benchmarks/decode_paged.py [--kv 512 2048 8192] [--batch 8] [--page-size 16] [--tune]
"""

from __future__ import annotations

import argparse
import itertools

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from profattn.backends import triton_paged as tp
from profattn.harness.ceilings import measure_ceilings
from profattn.harness.inputs import make_inputs, reference, rel_err
from profattn.harness.timing import time_cuda, time_cuda_graph
from profattn.workload import Workload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kv", type=int, nargs="+", default=[512, 2048, 8192])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--tune", action="store_true")
    args = ap.parse_args()
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    ceil = measure_ceilings(dev)
    print(f"copy ceiling {ceil.copy_gbps:,.0f} GB/s; bf16 GEMM {ceil.matmul_tflops:,.0f} TFLOP/s")
    one = torch.ones(1, device=dev)
    floor1 = time_cuda_graph(lambda: one.add_(1), dev).median_us
    floor2 = time_cuda_graph(lambda: (one.add_(1), one.add_(1)), dev).median_us
    print(f"harness floor (graph replay, read flush): one 1-element kernel {floor1:.2f} us, two dependent "
          f"kernels {floor2:.2f} us")
    rows = []
    for kv in args.kv:
        w = Workload(phase="decode", batch=args.batch, q_len=1, kv_len=kv, num_q_heads=16, num_kv_heads=4, head_dim=128,
                     kv_layout="paged", page_size=args.page_size)
        inp = make_inputs(w, dev, seed=kv)
        ref = reference(w, inp)
        c = inp.paged
        q3 = inp.q[:, :, 0]

        def ours(plan=None, nw=tp.NUM_WARPS, ns=tp.NUM_STAGES, ws=None, pf=True, combine=None):
            ws = {} if ws is None else ws
            return lambda: tp.paged_decode(q3, c.k_pages, c.v_pages, c.block_table, c.seq_lens, max_kv_len=kv,
                                           num_sms=sms, plan=plan, workspace=ws, num_warps=nw, num_stages=ns, prefetch=pf,
                                           combine=combine)

        err = rel_err(ours()().unsqueeze(2), ref.out)
        t_ours = time_cuda_graph(ours(), dev).median_us
        other = "fused" if tp.COMBINE == "separate" else "separate"
        f_other = ours(combine=other)
        err_other = rel_err(f_other().unsqueeze(2), ref.out)
        print(f"kv {kv}: combine {tp.COMBINE} {t_ours:.2f} us (err {err:.1e}); combine {other} "
              f"{time_cuda_graph(f_other, dev).median_us:.2f} us (err {err_other:.1e})")
        times = {}
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            with sdpa_kernel([be]):
                fn = lambda: F.scaled_dot_product_attention(inp.q, inp.k, inp.v, enable_gqa=True)
                times[name] = time_cuda_graph(fn, dev).median_us
                times[name + "_w"] = time_cuda_graph(fn, dev, flush="write").median_us
        kk = c.k_pages
        t_read = time_cuda(lambda: torch.sum(kk, dtype=torch.float32)).median_us  # a plain streaming read of K
        print(f"kv {kv}: write-flush (do_bench's) times: ours {time_cuda_graph(ours(), dev, flush='write').median_us:.2f} us, "
              f"flash {times['flash_w']:.2f}, cuDNN {times['cudnn_w']:.2f}; torch.sum over K pages "
              f"({kk.numel() * 2 / 1e6:.1f} MB) {t_read:.2f} us = {kk.numel() * 2 / t_read / 1e3:,.0f} GB/s")
        gbps = w.kv_bytes / (t_ours * 1e-6) / 1e9
        plan = tp.choose_num_splits(batch=w.batch, num_kv_heads=4, max_kv_len=kv, num_sms=sms)
        rows.append((kv, t_ours, gbps, gbps / ceil.copy_gbps, times["flash"], times["cudnn"], err, plan))
        if args.tune:
            print(f"\n-- tuning kv {kv} (default {t_ours:.2f} us, plan {plan})")
            results = []
            for cb, bn, nw, ns, cps, mb in itertools.product(("separate", "fused"), (16, 32, 64), (4,), (3, 4),
                                                             (4, 8), (1, 2)):
                p = tp.choose_num_splits(batch=w.batch, num_kv_heads=4, max_kv_len=kv, num_sms=sms, block_n=bn,
                                         ctas_per_sm=cps, min_blocks_per_split=mb)
                try:
                    f = ours(p, nw, ns, {}, True, cb)
                    e = rel_err(f().unsqueeze(2), ref.out)
                    t = time_cuda_graph(f, dev).median_us
                    results.append((t, cb, bn, nw, ns, cps, mb, p.num_splits, e))
                except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory
                    results.append((float("inf"), cb, bn, nw, ns, cps, mb, p.num_splits, str(exc)[:60]))
            for r in sorted(results, key=lambda r: r[0])[:12]:
                print("  %8.2f us  combine=%s BLOCK_N=%d warps=%d stages=%d ctas/SM=%d min_blocks=%d splits=%d err=%s" % r)

    print("\n| kv_len | ours (us) | unique KV GB/s | of copy BW | SDPA flash (us) | cuDNN (us) | vs flash | vs cuDNN | rel err | splits |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kv, t, g, f, tf, tc, e, p in rows:
        print(f"| {kv} | {t:.2f} | {g:,.0f} | {f:.0%} | {tf:.2f} | {tc:.2f} | {tf / t:.2f}x | {tc / t:.2f}x | {e:.1e} | {p.num_splits} |")


if __name__ == "__main__":
    main()
