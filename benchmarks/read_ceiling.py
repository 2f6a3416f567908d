"""The read-bandwidth ceiling on this GPU: every read-only stream variant, best first (GPU only).

    python benchmarks/read_ceiling.py [--gib 4] [--quick]

Prints, in one run, each variant of :mod:`profattn.harness.read_stream` (torch.sum, a large grid of
Triton programs, a persistent Triton grid with several loads in flight) and the device-to-device copy, as
median µs and GB/s (GB = 1e9; the copy counts read + write bytes) over a buffer of ``--gib`` GiB.
"""

from __future__ import annotations

import argparse
import itertools
import sys

import torch

from profattn.harness.read_stream import StreamConfig, read_buffer, stream_fn
from profattn.harness.timing import time_cuda


def configs(quick: bool) -> list[StreamConfig]:
    out = [StreamConfig("torch-sum")]
    blocks = (8192, 16384, 32768) if quick else (4096, 8192, 16384, 32768, 65536)
    warps = (4, 8) if quick else (4, 8, 16)
    for block, w, cache in itertools.product(blocks, warps, ("", ".cg")):
        out.append(StreamConfig("triton-grid", block_bytes=block, num_warps=w, cache=cache))
    for block, w, unroll, ppsm in itertools.product((8192, 16384), (4, 8), (2, 4, 8), (2, 4, 8)):
        out.append(StreamConfig("triton-persistent", block_bytes=block, num_warps=w, unroll=unroll, programs_per_sm=ppsm))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("read_ceiling.py needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    nbytes = int(args.gib * 2**30)
    buf = read_buffer(dev, nbytes)
    src = buf.view(torch.bfloat16)
    dst = torch.empty_like(src)
    copy_us = time_cuda(lambda: dst.copy_(src), min_reps=20, target_ms=300).median_us
    del dst
    print(f"{torch.cuda.get_device_name(dev)}, buffer {nbytes / 1e9:.2f} GB; copy {copy_us:.1f} µs = "
          f"{2 * nbytes / copy_us / 1e3:,.0f} GB/s (read + write)")
    rows = []
    for cfg in configs(args.quick):
        try:
            fn = stream_fn(buf, cfg)
            t = time_cuda(fn, min_reps=20, target_ms=200)
        except Exception as exc:  # noqa: BLE001 - a variant that does not compile is a row, not a crash
            print(f"{cfg.label}: failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            continue
        rows.append((nbytes / t.median_us / 1e3, cfg, t))
    rows.sort(key=lambda r: -r[0])
    print(f"\n| variant | median µs | p10–p90 µs | read GB/s | of copy |\n|---|---|---|---|---|")
    for gbps, cfg, t in rows:
        print(f"| {cfg.label} | {t.median_us:.1f} | {t.p10_us:.1f}–{t.p90_us:.1f} | {gbps:,.0f} | "
              f"{gbps / (2 * nbytes / copy_us / 1e3):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
