"""Plugin kernels for ``profattn compare --ab`` tests: the example plugin's decode schedule (``examples/plugin-decode``:
one "program" per (sequence, query head), each query head reading its group's K/V itself) written in PyTorch, so a
call takes ~0.1 ms on a CPU instead of the Triton interpreter's ~20 ms, under three names:

* ``base``: the kernel (``onehead-torch``);
* ``slow``: the same kernel with a slowdown injected — every call spins after the kernel until its own duration has
  grown by 10 %, so each call, disturbed by the machine or not, takes 1.10× what the kernel took;
* ``copy``: the same kernel unchanged under another name (an A/A pair).

Used through the plugin mechanism, ``--backend slowed_plugin:slow`` (this directory on ``sys.path``)."""

from __future__ import annotations

import math
import time

import torch

from profattn.backends import KernelFamily, Prepared, Unsupported, paged_decode_reason, paged_only_forward

FAMILY = KernelFamily("onehead-torch", kernel_patterns=(), op_patterns=(r"aten::einsum", r"aten::bmm"))


class OneHeadTorch:
    """Paged decode, one query head at a time over its own copy of its group's K/V; ``factor`` stretches each call."""

    family = FAMILY

    def __init__(self, name: str, factor: float = 1.0) -> None:
        self.name, self.factor = name, factor
        self.description = f"test plugin: paged decode per query head in PyTorch, each call {factor:g}× its own time"

    def unsupported_reason(self, workload, device):
        return paged_decode_reason(workload)

    def prepare(self, workload, device):
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        group = workload.num_q_heads // workload.num_kv_heads
        pages = math.ceil(workload.kv_len / workload.page_size)
        scale = 1 / math.sqrt(workload.head_dim)
        factor = self.factor

        def bind(inputs):
            cache, q = inputs.paged, inputs.q  # q [B, Hq, 1, d]; pages [P, page, Hkv, d]
            table = cache.block_table[:, :pages].long()

            def kernel():
                k = cache.k_pages[table].flatten(1, 2)[:, : workload.kv_len].repeat_interleave(group, dim=2)
                v = cache.v_pages[table].flatten(1, 2)[:, : workload.kv_len].repeat_interleave(group, dim=2)
                s = torch.einsum("bhd,bthd->bht", q[:, :, 0].float(), k.float()) * scale
                return torch.einsum("bht,bthd->bhd", s.softmax(-1), v.float()).to(q.dtype).unsqueeze(2)

            if factor == 1.0:
                return kernel

            def stretched():
                start = time.perf_counter()
                out = kernel()
                took = time.perf_counter() - start
                while time.perf_counter() - start < factor * took:
                    pass
                return out

            return stretched

        return Prepared(forward=paged_only_forward, bind=bind)


base = OneHeadTorch("onehead-torch")
slow = OneHeadTorch("onehead-torch-slow", 1.10)
copy = OneHeadTorch("onehead-torch-copy")
