"""Context parallelism on one host: each scheme's step time, communication share and overlap, and the scaling
efficiency against the same global call on one device, for training and prefill at ``--tokens-per-rank`` × ranks
tokens (B=1, Hq=16, Hkv=4, d=128, bf16, causal by default), in one ``profattn profile`` run.

    python benchmarks/context_parallel.py --ranks 2 4 --out RUN            # on a machine with >= 4 GPUs (NCCL)
    python benchmarks/context_parallel.py --device cpu --ranks 2 --tokens-per-rank 16 --heads 4 --kv-heads 2 \\
        --head-dim 16 --dtype fp32 --out RUN                               # the same path on gloo, tiny

Every cell runs ``sdpa-flash`` and, on CUDA, ``sdpa-efficient`` (whose kernels the ring's blocks run there; on a CPU
the ring runs ``sdpa-flash``'s) — each one-device baseline is the same backend on the global call. Prints the report's context-parallelism table (Markdown) and the
``profattn report`` of the run has the per-rank timelines. Scaling efficiency = one-device time / (ranks × step).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from profattn.analysis.calls.comm import cp_summaries
from profattn.report.cp import cp_markdown
from profattn.results import read_results
from profattn.workload.contract import CP_SCHEMES


def workload_specs(ranks: list[int], tokens_per_rank: int, heads: int, kv_heads: int, head_dim: int, dtype: str,
                   phases: list[str], schemes: list[str]) -> list[str]:
    """The ``--workload`` texts: every (phase, ranks, scheme) cell (``profattn profile`` adds each global call on
    one process beside it)."""
    out = []
    for phase in phases:
        for r in ranks:
            n = tokens_per_rank * r
            for scheme in schemes:
                out.append(f"phase={phase},b=1,q={n},kv={n},hq={heads},hkv={kv_heads},d={head_dim},dtype={dtype},"
                           f"cp={r},cp_scheme={scheme}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2])
    p.add_argument("--tokens-per-rank", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--phases", nargs="+", default=["train", "prefill"])
    p.add_argument("--schemes", nargs="+", default=list(CP_SCHEMES), choices=CP_SCHEMES)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--out", required=True, help="the run directory (new)")
    a = p.parse_args(argv)
    specs = workload_specs(a.ranks, a.tokens_per_rank, a.heads, a.kv_heads, a.head_dim, a.dtype, a.phases, a.schemes)
    cmd = [sys.executable, "-m", "profattn.cli", "profile", "--device", a.device, "--backend", "sdpa-flash",
           "--out", a.out, "--no-counters"]
    if a.device == "cuda":  # the ring's blocks run the memory-efficient kernels on CUDA
        cmd[cmd.index("sdpa-flash") + 1:cmd.index("sdpa-flash") + 1] = ["--backend", "sdpa-efficient"]
    for s in specs:
        cmd += ["--workload", s]
    print("$ " + " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    if rc != 0:
        return rc
    run = read_results(Path(a.out))
    print()
    print(cp_markdown(cp_summaries(run.cells)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
