"""Make a large, real Kineto trace: profiled training steps of a small GQA transformer.

Used for the trace-parser benchmark (``benchmarks/trace_parse.py``, issue 5): the trace has what users'
traces have — ``record_shapes`` (Input Dims, Concrete Inputs), ``with_stack`` (Python stacks), autograd
backward on its own thread, optimizer ops, SDPA calls in training and a decode-style call per step.

Usage::

    python benchmarks/make_trace.py --target-mb 1000 --out big.pt.trace.json

The number of profiled steps is chosen from a 2-step probe so the file lands near ``--target-mb``
(MB = 1e6 bytes). Runs on CPU too (for a smoke test), where the trace has no GPU kernels.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """Pre-norm transformer block with grouped-query attention (Hq query heads, Hkv KV heads)."""

    def __init__(self, dim: int, hq: int, hkv: int) -> None:
        super().__init__()
        self.hq, self.hkv, self.d = hq, hkv, dim // hq
        self.norm1 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * hkv * self.d, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, t, self.hq, self.d).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, self.hkv, self.d).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        return x + self.mlp(self.norm2(x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target-mb", type=float, default=60.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=6)
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    torch.manual_seed(0)
    dim, hq, hkv, vocab = 512, 8, 2, 8192
    emb = nn.Embedding(vocab, dim)
    blocks = nn.Sequential(*[Block(dim, hq, hkv) for _ in range(args.layers)])
    head = nn.Linear(dim, vocab, bias=False)
    model = nn.Sequential(emb, blocks, nn.LayerNorm(dim), head).to(dev, dt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    b, t = (8, 512) if dev == "cuda" else (2, 64)

    def step() -> None:
        with torch.profiler.record_function("train_step"):
            tok = torch.randint(0, vocab, (b, t), device=dev)
            logits = model(tok)
            loss = F.cross_entropy(logits.float().view(-1, vocab), tok.view(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        with torch.profiler.record_function("decode_step"), torch.no_grad():
            x = emb(tok[:, -1:])
            for blk in blocks:  # one query token against a 512-token context: decode shape
                h = blk.norm1(x)
                q = blk.q(h).view(b, 1, blk.hq, blk.d).transpose(1, 2)
                ctx = blk.kv(blk.norm1(emb(tok))).view(b, t, 2, blk.hkv, blk.d).unbind(2)
                k, v = ctx[0].transpose(1, 2), ctx[1].transpose(1, 2)
                x = x + blk.o(F.scaled_dot_product_attention(q, k, v, enable_gqa=True).transpose(1, 2).reshape(b, 1, -1))

    for _ in range(3):
        step()

    def profile(n: int, path: str) -> float:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if dev == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True) as prof:
            for _ in range(n):
                step()
                prof.step()
        t0 = time.perf_counter()
        prof.export_chrome_trace(path)
        print(f"exported {n} steps: {os.path.getsize(path) / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s", flush=True)
        return os.path.getsize(path) / 1e6

    per_step = max(profile(2, args.out) / 2, 1e-3)
    n = max(1, round(args.target_mb / per_step))
    if n > 2:
        profile(n, args.out)


if __name__ == "__main__":
    main()
