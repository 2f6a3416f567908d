"""Write a synthetic Kineto trace of many attention calls or many kernels per call, streamed (no event list in
memory), for the size benchmarks of ``profattn analyze``.

    python benchmarks/many_calls_trace.py --calls 1 --kernels-per-call 1000000 --out one-call-1m.json
    python benchmarks/many_calls_trace.py --calls 200000 --kernels-per-call 1 --out calls-200k.json.gz

Each call is what PyTorch's profiler records for an SDPA call on CUDA (the layout of the committed H200
fixtures, ``tests/data/traces/h200_sdpa_decode_flash_gqa.pt.trace.json.gz``): an
``aten::scaled_dot_product_attention`` op with its ``Input Dims``/``Input type``/``Concrete Inputs``, the nested
``aten::_scaled_dot_product_flash_attention``, and inside it ``--kernels-per-call`` ``cudaLaunchKernel`` runtime
events, each launching one ``flash_fwd_splitkv_kernel`` (grid, block, registers, shared memory, correlation) on
stream 7. Shapes: decode, B=8, Hq=16, Hkv=4, kv 2048, d=128, bf16. ``.gz`` output is gzip level 1.

Measure ``analyze`` on it with ``/usr/bin/time -v profattn analyze TRACE --out a.html --json a.json`` (peak RSS:
"Maximum resident set size"); NOTES.md ("Output proportional to what a reader needs") has the figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from typing import IO

_KERNEL = ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
           "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, true, false, "
           "false, false, true, false, false, false>(flash::Flash_fwd_params)")
_DIMS = [[8, 16, 1, 128], [8, 4, 2048, 128], [8, 4, 2048, 128], [], [], [], [], []]
_TYPES = ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "", "Scalar", "Scalar", "", "Scalar"]
_CONCRETE = ["", "", "", "", "0.", "False", "", "True"]


def write_trace(out: IO[str], calls: int, kernels_per_call: int) -> int:
    """Write the trace document to ``out``; returns the number of events written."""
    out.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "numSms": 132, '
              '"totalGlobalMem": 150754820096}], "traceEvents": [\n')
    ts, corr, n = 1_000_000.0, 1, 0
    first = True

    def emit(event: dict) -> None:
        nonlocal first, n
        out.write(("" if first else ",\n") + json.dumps(event, separators=(",", ":")))
        first = False
        n += 1

    for call in range(calls):
        span = 10.0 + 6.0 * kernels_per_call  # CPU µs: a 6 µs launch per kernel
        emit({"ph": "X", "cat": "cpu_op", "name": "aten::scaled_dot_product_attention", "pid": 1, "tid": 1,
              "ts": ts, "dur": span, "args": {"External id": 2 * call + 1, "Input Dims": _DIMS,
                                              "Input type": _TYPES, "Concrete Inputs": _CONCRETE}})
        emit({"ph": "X", "cat": "cpu_op", "name": "aten::_scaled_dot_product_flash_attention", "pid": 1, "tid": 1,
              "ts": ts + 2, "dur": span - 4, "args": {"External id": 2 * call + 2, "Input Dims": _DIMS[:7],
                                                      "Input type": _TYPES[:7], "Concrete Inputs": _CONCRETE[:7]}})
        gpu = ts + 20.0
        for k in range(kernels_per_call):
            launch = ts + 4 + 6.0 * k
            emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": launch,
                  "dur": 4, "args": {"External id": 2 * call + 2, "correlation": corr}})
            dur = 5.0 + (k % 7)
            emit({"ph": "X", "cat": "kernel", "name": _KERNEL, "pid": 0, "tid": 7, "ts": gpu, "dur": dur,
                  "args": {"External id": 2 * call + 2, "correlation": corr, "device": 0, "stream": 7,
                           "grid": [1, 4, 8 + k % 3], "block": [128, 1, 1], "registers per thread": 255,
                           "shared memory": 49152, "blocks per SM": 0.24, "warps per SM": 0.97,
                           "est. achieved occupancy %": 6}})
            gpu = max(gpu + dur + 1.0, launch + 10.0)
            corr += 1
        ts = max(ts + span + 5.0, gpu + 5.0)
    out.write("\n]}\n")
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1)
    ap.add_argument("--kernels-per-call", type=int, default=1_000_000)
    ap.add_argument("--out", required=True, help="trace file to write (.json, or .json.gz: gzip level 1)")
    args = ap.parse_args(argv)
    if args.calls < 1 or args.kernels_per_call < 1:
        print("many_calls_trace.py: error: --calls and --kernels-per-call must be at least 1", file=sys.stderr)
        return 2
    opener = (lambda p: gzip.open(p, "wt", compresslevel=1)) if args.out.endswith(".gz") else (lambda p: open(p, "w"))
    with opener(args.out) as f:
        n = write_trace(f, args.calls, args.kernels_per_call)
    print(f"{args.out}: {n:,} events ({args.calls:,} call(s) x {args.kernels_per_call:,} kernel(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
