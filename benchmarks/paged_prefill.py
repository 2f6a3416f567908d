"""Benchmark: our one-launch paged prefill / mixed-batch kernel against FlashInfer (and cuDNN / flash on the
contiguous copy) at the serving preset's shapes, and a sweep of its launch configurations.

Prints, per workload: median latency (µs, CUDA events, L2 evicted by a read flush before every call),
TFLOP/s from the workload's FLOP ledger, relative error against the fp64 reference, and the ratio to the
fastest vendor kernel measured in the same run. For a mixed step it also times the step's prefill and decode
parts as two separate calls of the best kernels (the issue's bar: one launch no slower than that).

    python benchmarks/paged_prefill.py [--configs default|all] [--only chunk|unchunked|mixed|all] [--vendors]

``--configs default`` times the configuration the backend chooses for each step; ``all`` the sweep that chose
the defaults (NOTES.md).
"""

from __future__ import annotations

import argparse
import sys

import torch

from profattn.backends import get_backend
from profattn.backends import triton_paged_prefill as tpp
from profattn.backends.base import Unsupported
from profattn.harness.ceilings import measure_ceilings
from profattn.harness.inputs import make_inputs, reference, rel_err, valid_part
from profattn.harness.timing import time_cuda
from profattn.workload import parse_workload_spec

COMMON = "hq=16,hkv=4,d=128,page=16,dtype=bfloat16,append=true"
WORKLOADS = {
    "chunk 2048 last (q2048 kv8192)": ("chunk", f"mix=8x(q2048,kv8192),{COMMON}"),
    "chunk 512 last (q512 kv8192)": ("chunk", f"mix=8x(q512,kv8192),{COMMON}"),
    "unchunked (q8192 kv8192)": ("unchunked", f"mix=8x(q8192,kv8192),{COMMON}"),
    "mixed 2x(q2048,kv8192)+32 dec": ("mixed", None),
    "mixed 1x(q512,kv4096)+64 dec": ("mixed", None),
}
VENDORS = ("flashinfer-prefill-paged", "sdpa-cudnn", "sdpa-flash")
DECODERS = ("flashinfer-decode-tc", "flashinfer-decode", "triton-paged-decode")


def mixed_workloads():
    """The serving preset's two mixed steps with their parts (prefill part, decode part)."""
    from profattn.workload.presets import PRESETS

    out = []
    ws = [w for w in PRESETS["serving"].workloads if w.phase.value == "mixed"]
    for w in ws:
        pre = [p for p in w.seqs if p[0] > 1]
        dec = [p for p in w.seqs if p[0] == 1]
        out.append((w, pre, dec))
    return out


def configs(which: str):
    if which == "default":
        return [None]  # the backend's own choice (choose_config)
    grid = [  # (BLOCK_M, BLOCK_N, BLOCK_N of the group path, warps, stages, page loads, order)
        (128, 128, 64, 8, 3, True, "grouped"), (128, 128, 64, 8, 3, True, "groups-first"),
        (128, 128, 128, 8, 3, True, "groups-first"), (128, 128, 128, 8, 3, True, "lpt"),
        (128, 128, 32, 8, 3, True, "groups-first"), (128, 128, 64, 8, 3, False, "groups-first"),
        (64, 64, 64, 4, 3, False, "lpt"), (64, 64, 64, 4, 3, True, "groups-first"),
        (64, 64, 128, 4, 3, True, "groups-first"), (64, 64, 64, 4, 3, True, "lpt"),
    ]
    return [tpp.LaunchConfig(block_m=m, block_n=n, block_n_group=ng, num_warps=w, num_stages=s, page_loads=pl,
                             order=o) for m, n, ng, w, s, pl, o in grid]


def ours_call(w, inputs, cfg):
    causal = w.mask.value == "causal"
    group = w.num_q_heads // w.num_kv_heads
    rows = tpp.block_g(group)
    items = tpp.plan_items(list(w.q_lens), list(w.kv_lens), num_q_heads=w.num_q_heads, num_kv_heads=w.num_kv_heads,
                           head_dim=w.head_dim, causal=causal, block_m=cfg.block_m, group_rows=rows, order=cfg.order)
    c = inputs.paged
    dev = inputs.q.device
    work = tpp.items_tensor(items, dev)
    out = torch.zeros_like(inputs.q)
    return lambda: tpp.paged_varlen_attention(
        inputs.q, c.k_pages, c.v_pages, c.block_table, inputs.q_lens, inputs.kv_lens, work, causal=causal,
        has_tiles=any(i.m0 >= 0 for i in items), has_groups=any(i.m0 < 0 for i in items), group_rows=rows,
        out=out, config=cfg)


def setup(w, seed):
    dev = torch.device("cuda")
    inputs = make_inputs(w, dev, seed=seed)
    # appending workloads: write the step's new tokens once, so every timed call attends over the full cache
    get_backend("torch-paged-reference").prepare(w, dev).appender(inputs)()
    ref = reference(w, inputs)
    return inputs, ref


def vendor(name, w, inputs):
    dev = torch.device("cuda")
    try:
        prep = get_backend(name).prepare(w, dev)
    except (Unsupported, KeyError) as exc:
        return None, f"{name}: {exc}"
    call = prep.bound(inputs)
    with prep.context():
        out = call()
        conv = prep.to_contract(out) if prep.to_contract else out
        return (time_cuda(call).median_us, conv), None


def fastest(names, w, inputs, ref, indent):
    """Time each backend of ``names`` on ``w`` and print its line; return ``(name, µs)`` of the fastest whose
    output is within 2e-2 of the reference, or None."""
    best = None
    for name in names:
        got, why = vendor(name, w, inputs)
        if got is None:
            print(f"{indent}{name:28s} unsupported: {why}")
            continue
        t, out = got
        err = rel_err(valid_part(w, out), valid_part(w, ref.out))
        print(f"{indent}{name:28s} {t:9.1f} us  {w.flops / t / 1e6:6.0f} TFLOP/s  rel err {err:.1e}", flush=True)
        if err < 2e-2 and (best is None or t < best[1]):
            best = (name, t)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", choices=("all", "default"), default="default")
    ap.add_argument("--only", choices=("chunk", "unchunked", "mixed", "all"), default="all")
    ap.add_argument("--vendors", action="store_true", help="also time cuDNN and flash (slow on masked calls)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    ceil = measure_ceilings(dev)
    print(f"{torch.cuda.get_device_name(dev)}; GEMM {ceil.matmul_tflops:,.0f} TFLOP/s, read {ceil.read_gbps or 0:,.0f} GB/s")
    todo = []
    mixed = mixed_workloads()
    for label, (kind, spec) in WORKLOADS.items():
        if args.only not in ("all", kind):
            continue
        if kind in ("chunk", "unchunked"):
            todo.append((label, parse_workload_spec(spec), None))
        else:
            todo.append((label, *[(m[0], m) for m in mixed][0 if "2x" in label else 1]))
    for i, (label, w, parts) in enumerate(todo):
        inputs, ref = setup(w, seed=i + 1)
        print(f"\n## {label}: {w.flops / 1e9:,.1f} GFLOP, unique K/V {w.kv_bytes / 1e6:,.1f} MB", flush=True)
        best_vendor = fastest(VENDORS if args.vendors else VENDORS[:1], w, inputs, ref, "  ")
        if parts is not None:
            _, pre, dec = parts
            from profattn.workload import Workload

            common = dict(num_q_heads=w.num_q_heads, num_kv_heads=w.num_kv_heads, head_dim=w.head_dim, dtype=w.dtype,
                          mask=w.mask, kv_layout=w.kv_layout, page_size=w.page_size, append=True)
            split = 0.0
            for part, names in ((pre, VENDORS + ("triton-paged-prefill",)), (dec, DECODERS)):
                pw = Workload.varlen(None, tuple(part), **common)
                pin, pref = setup(pw, seed=100 + i)
                best = fastest(names, pw, pin, pref, f"    part {len(part)} seqs ")
                split += best[1] if best else float("nan")
            print(f"  best parts as two calls: {split:.1f} us")
            best_vendor = ("two calls", min(split, best_vendor[1]) if best_vendor else split) if split == split else best_vendor
        for cfg in configs(args.configs):
            if cfg is None:
                cfg, _ = tpp.choose_config(list(w.q_lens), list(w.kv_lens), num_q_heads=w.num_q_heads,
                                           num_kv_heads=w.num_kv_heads, head_dim=w.head_dim,
                                           causal=w.mask.value == "causal")
            try:
                call = ours_call(w, inputs, cfg)
                out = call()
                torch.cuda.synchronize()
                err = rel_err(valid_part(w, out), valid_part(w, ref.out))
                t = time_cuda(call).median_us
            except Exception as exc:  # noqa: BLE001 - a config may not compile (shared memory); report it
                print(f"  ours {cfg}: failed {type(exc).__name__}: {str(exc)[:120]}")
                continue
            ratio = f"{t / best_vendor[1]:.2f}x {best_vendor[0]}" if best_vendor else ""
            print(f"  ours M{cfg.block_m} N{cfg.block_n}/{cfg.block_n_group} w{cfg.num_warps} s{cfg.num_stages}"
                  f"{' pages' if cfg.page_loads else ''}{' ws' if cfg.warp_specialize else ''} {cfg.order}: {t:9.1f} us  "
                  f"{w.flops / t / 1e6:6.0f} TFLOP/s  rel err {err:.1e}  {ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
