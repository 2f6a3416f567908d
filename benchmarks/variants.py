"""Benchmark: the seed's variants on the GPU — an FP8 (e4m3) KV cache and sliding-window decode — against their
bf16 / full-attention counterparts, every cell through the harness (fresh random inputs, fp64/fp32 reference
check, CUDA-graph replay with a read flush, median) in one run with the ceilings.

Prints, per decode shape (B=8, Hq=16, Hkv=4, d=128, page 16 — the seed's): latency (µs, graph replay), unique K/V
bytes per step and GB/s against the run's read ceiling, relative error, and the ratios the issue asks for:
FP8 vs bf16 of our kernel at kv 8192 (target ≥ 1.7× faster), ours vs FlashInfer's decode on the same FP8 pages
(target: no slower), and window W=4096 at kv 32768 vs full attention at
kv 4096 (target ≤ 1.2×).

    python benchmarks/variants.py [--backend NAME ...]
"""

from __future__ import annotations

import argparse
import sys

import torch

from profattn.backends import get_backend
from profattn.harness.ceilings import measure_ceilings
from profattn.harness.cell import run_cell
from profattn.harness.inputs import make_inputs, reference
from profattn.workload import parse_workload_spec

SEED = "phase=decode,b=8,q=1,hq=16,hkv=4,d=128,page=16,dtype=bfloat16"
SHAPES = {
    "bf16 kv 8192": f"{SEED},kv=8192",
    "fp8 kv 8192": f"{SEED},kv=8192,kv_dtype=fp8",
    "bf16 kv 2048": f"{SEED},kv=2048",
    "fp8 kv 2048": f"{SEED},kv=2048,kv_dtype=fp8",
    "full kv 4096": f"{SEED},kv=4096",
    "window 4096 at kv 32768": f"{SEED},kv=32768,window=4096",
    "full kv 32768": f"{SEED},kv=32768",
}
BACKENDS = ("triton-paged-decode", "flashinfer-decode-tc", "flashinfer-decode", "torch-paged-reference", "sdpa-cudnn")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", action="append", default=None)
    args = ap.parse_args()
    dev = torch.device("cuda")
    ceil = measure_ceilings(dev)
    roof = ceil.read_gbps or ceil.copy_gbps
    print(f"{torch.cuda.get_device_name(dev)}; read ceiling {roof:,.0f} GB/s, GEMM {ceil.matmul_tflops:,.0f} TFLOP/s")
    got: dict[tuple[str, str], float] = {}
    print("| shape | backend | µs (graph) | K/V MB | GB/s (% of read) | rel err | status |\n|---|---|---|---|---|---|---|")
    for i, (label, spec) in enumerate(SHAPES.items()):
        w = parse_workload_spec(spec)
        inputs = make_inputs(w, dev, seed=i + 1)
        ref = reference(w, inputs)
        for name in args.backend or BACKENDS:
            cell, _ = run_cell(w, get_backend(name), inputs, ref, dev)
            t = cell.graph_timing or cell.timing
            if cell.status.value != "ok" or t is None:
                print(f"| {label} | {name} | – | – | – | – | {cell.status.value}: {(cell.reason or '')[:90]} |")
                continue
            gbps = w.kv_bytes / (t.median_us * 1e-6) / 1e9
            got[label, name] = t.median_us
            print(f"| {label} | {name} | {t.median_us:,.1f} | {w.kv_bytes / 1e6:,.1f} | {gbps:,.0f} ({gbps / roof:.0%}) "
                  f"| {cell.correctness.out_rel_err:.1e} | ok |", flush=True)
        del inputs, ref
        torch.cuda.empty_cache()
    ours = "triton-paged-decode"
    for a, b, what, bar in (("bf16 kv 8192", "fp8 kv 8192", "FP8 speed-up at kv 8192 (bf16 / fp8)", ">= 1.7"),
                            ("window 4096 at kv 32768", "full kv 4096", "window at kv 32768 / full at kv 4096", "<= 1.2")):
        if (a, ours) in got and (b, ours) in got:
            print(f"{ours}: {what}: {got[a, ours] / got[b, ours]:.2f}× (target {bar})")
    for name in ("flashinfer-decode-tc", "flashinfer-decode"):  # the second FP8 bar: no slower than FlashInfer
        for kv in (2048, 8192):
            key = f"fp8 kv {kv}"
            if (key, ours) in got and (key, name) in got:
                print(f"{ours} vs {name} on FP8 pages at kv {kv}: {got[key, name] / got[key, ours]:.2f}× "
                      "(FlashInfer / ours; target >= 1.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
