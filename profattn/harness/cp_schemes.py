"""Context-parallel attention schemes: one rank's part of a call whose sequence is split over ``cp_ranks`` processes.

Every scheme takes the rank's local ``q`` ``[B, Hq, Lr, d]`` and ``k``, ``v`` ``[B, Hkv, Lr, d]`` (its tokens,
:func:`~profattn.workload.cp.shard_chunks`, concatenated in local order) and returns its local output, shaped like
``q``. Autograd runs through every collective, so a training step is ``out.backward(d_out)`` on each rank.

- ``ring`` (:class:`RingAttention`): K/V blocks travel rank to rank (``send``/``recv``, the next block's transfer in
  flight while the current one is computed); each (query chunk, key chunk) pair is one flash-kernel call returning
  ``(out, lse)``: whole when the key chunk precedes the query chunk, causal on the diagonal, skipped after; partial
  outputs are merged by their log-sum-exp. The backward passes K/V around again with fp32 dK/dV accumulators that
  return home after ``R`` hops, each block's gradient from the flash backward with the merged output and lse (as
  ring-flash-attention does). The local block kernel: ATen's flash attention on a CPU
  (``_scaled_dot_product_flash_attention_for_cpu`` and its backward), the memory-efficient kernels on CUDA
  (``_efficient_attention_forward``/``_backward``: their backward takes an outside lse; the flash backward's
  sequence-offset arguments cannot be left undefined from Python).
- ``allgather`` (:func:`allgather_attention`): K and V (stacked, one collective) are all-gathered; each local query
  chunk then attends to the keys before and inside it: one ordinary bottom-right causal call
  (``q_len = c``, ``kv_len = (chunk + 1)·c``) of the cell's backend. Backward: the gathered K/V's gradients go back
  to their owners by one all-to-all and are summed there.
- ``ulysses`` (:func:`ulysses_attention`): all-to-all from sequence shards to head shards (Q, K, V), one full-sequence
  causal call of the cell's backend on ``Hq / R`` query heads (and ``Hkv / R`` KV heads), all-to-all back.
- ``torch-cp``: PyTorch's ``context_parallel`` (:func:`torch_cp_attention`): it shards the buffers itself and
  dispatches SDPA to its ring; a device where it has no sharding strategy for the SDPA op (CPU) raises
  ``NotImplementedError``, which makes the cell unsupported with torch's message.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

from profattn.workload import Workload
from profattn.workload.cp import shard_chunks

#: A local attention call: ``(q, k, v) -> out`` for one ordinary (bottom-right causal) call.
LocalCall = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def local_slices(w: Workload, rank: int, x: torch.Tensor) -> torch.Tensor:
    """The rank's tokens of a global ``[B, H, L, d]`` tensor, chunks concatenated in local order."""
    return torch.cat([x[:, :, a:b] for a, b in shard_chunks(w, rank)], dim=2)


def place_local(w: Workload, rank: int, local: torch.Tensor, into: torch.Tensor) -> None:
    """Write a rank's local ``[B, H, Lr, d]`` tensor into its token ranges of the global ``into`` (in place)."""
    off = 0
    for a, b in shard_chunks(w, rank):
        into[:, :, a:b] = local[:, :, off:off + b - a]
        off += b - a


# ---- the ring's block kernel ---------------------------------------------------------------------


def ring_backend(device: torch.device) -> str:
    """The backend whose kernels the ring's blocks run (its cells' backend): ``sdpa-flash`` on a CPU (ATen's CPU
    flash kernel), ``sdpa-efficient`` on CUDA (the memory-efficient kernels)."""
    return "sdpa-efficient" if device.type == "cuda" else "sdpa-flash"


def _expand(x: torch.Tensor, group: int) -> torch.Tensor:
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def block_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One block: ``(out [B, Hq, Lq, d], lse [B, Hq, Lq] fp32)`` of ``softmax(q kᵀ/√d) v`` (top-left causal when
    ``causal``, used on square diagonal blocks). K/V heads are repeated to ``Hq`` for GQA. Not yet run on CUDA."""
    g = q.shape[1] // k.shape[1]
    k, v = _expand(k, g), _expand(v, g)
    if q.device.type == "cuda":  # memory-efficient kernels: their backward takes the lse and optional seqlens
        res = torch.ops.aten._efficient_attention_forward(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, None, None, None, None, 0.0,
            1 if causal else 0, True)
        return res[0].transpose(1, 2), res[1][:, :, : q.shape[2]]
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
    return out, lse


def block_backward(d_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients ``(dq, dk, dv)`` of one block given the *merged* output and lse of its query rows (the flash
    backward recomputes ``P = exp(S − lse)``, so the global lse gives each block's exact share); dK/dV summed over
    each GQA group back to ``Hkv`` heads."""
    hkv = k.shape[1]
    g = q.shape[1] // hkv
    ke, ve = _expand(k, g), _expand(v, g)
    if q.device.type == "cuda":
        lq, lk = q.shape[2], ke.shape[2]
        pad = torch.zeros((*lse.shape[:2], -(-lq // 32) * 32), dtype=torch.float32, device=q.device)
        pad[:, :, :lq] = lse  # the kernel's lse rows are padded to a multiple of 32
        zero = torch.zeros((), dtype=torch.int64, device=q.device)  # philox state: unused without dropout
        t = lambda x: x.transpose(1, 2)  # noqa: E731 - [B, L, H, d], the kernels' layout
        dq, dk, dv, _ = torch.ops.aten._efficient_attention_backward(
            t(d_out), t(q), t(ke), t(ve), None, t(out), None, None, lq, lk, pad, 0.0, zero, zero, 1 if causal else 0,
            False)
        dq, dk, dv = t(dq), t(dk), t(dv)
    else:
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            d_out, q, ke, ve, out, lse, 0.0, causal)
    if g > 1:
        b, _, n, d = dk.shape
        dk = dk.view(b, hkv, g, n, d).sum(2)
        dv = dv.view(b, hkv, g, n, d).sum(2)
    return dq, dk, dv


def _merge(acc: tuple[torch.Tensor, torch.Tensor] | None, out: torch.Tensor, lse: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Online-softmax merge of two partial results over disjoint keys (fp32 accumulators)."""
    out, lse = out.float(), lse.float()
    if acc is None:
        return out, lse
    a_out, a_lse = acc
    new = torch.logaddexp(a_lse, lse)
    return a_out * torch.exp(a_lse - new).unsqueeze(-1) + out * torch.exp(lse - new).unsqueeze(-1), new


def _shift(tensors: list[torch.Tensor], rank: int, world: int, group=None) -> tuple[list[torch.Tensor], list]:
    """Start sending ``tensors`` to rank + 1 and receiving as many from rank − 1; returns (buffers, requests)."""
    bufs = [torch.empty_like(t) for t in tensors]
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    ops = [dist.P2POp(dist.isend, t.contiguous(), nxt, group) for t in tensors]
    ops += [dist.P2POp(dist.irecv, b, prv, group) for b in bufs]
    return bufs, dist.batch_isend_irecv(ops)


def _pairs(w: Workload, q_rank: int, kv_rank: int) -> list[tuple[int, int, bool]]:
    """(local q chunk, local kv chunk, causal) pairs with keys visible to the queries: a key chunk before the query
    chunk is seen whole, the same chunk causally, a later one not at all."""
    qs, ks = shard_chunks(w, q_rank), shard_chunks(w, kv_rank)
    out = []
    for i, (qa, _) in enumerate(qs):
        for j, (ka, _) in enumerate(ks):
            if ka < qa:
                out.append((i, j, False))
            elif ka == qa:
                out.append((i, j, True))
    return out


def _split(x: torch.Tensor, w: Workload, rank: int) -> list[torch.Tensor]:
    sizes = [b - a for a, b in shard_chunks(w, rank)]
    return list(torch.split(x, sizes, dim=2))


class RingAttention(torch.autograd.Function):
    """Ring attention with causal load balancing (module docstring); ``apply(q, k, v, workload, rank, world)``."""

    @staticmethod
    def forward(ctx, q, k, v, w: Workload, rank: int, world: int):  # type: ignore[override]
        qc = _split(q, w, rank)
        acc: list = [None] * len(qc)
        kv, owner = [k, v], rank
        for step in range(world):
            pending = _shift(kv, rank, world) if step < world - 1 else None
            kc, vc = _split(kv[0], w, owner), _split(kv[1], w, owner)
            for i, j, causal in _pairs(w, rank, owner):
                o, lse = block_forward(qc[i], kc[j], vc[j], causal)
                acc[i] = _merge(acc[i], o, lse)
            if pending is not None:
                bufs, reqs = pending
                for r in reqs:
                    r.wait()
                kv, owner = bufs, (owner - 1) % world
        out = torch.cat([a[0] for a in acc], dim=2).to(q.dtype)
        lse = torch.cat([a[1] for a in acc], dim=2)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.meta = (w, rank, world)
        return out

    @staticmethod
    def backward(ctx, d_out):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        w, rank, world = ctx.meta
        acc_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        d_out = d_out.contiguous()
        qc, oc, dc = _split(q, w, rank), _split(out, w, rank), _split(d_out, w, rank)
        lc = list(torch.split(lse, [t.shape[2] for t in qc], dim=2))
        dq = [torch.zeros_like(t, dtype=acc_dtype) for t in qc]
        kv, owner = [k, v], rank
        dkv = [torch.zeros_like(k, dtype=acc_dtype), torch.zeros_like(v, dtype=acc_dtype)]
        for step in range(world):
            pending = _shift(kv, rank, world) if step < world - 1 else None
            kc, vc = _split(kv[0], w, owner), _split(kv[1], w, owner)
            dkc, dvc = _split(dkv[0], w, owner), _split(dkv[1], w, owner)
            for i, j, causal in _pairs(w, rank, owner):
                bq, bk, bv = block_backward(dc[i], qc[i], kc[j], vc[j], oc[i], lc[i], causal)
                dq[i] += bq
                dkc[j] += bk
                dvc[j] += bv
            dkv = [torch.cat(dkc, dim=2), torch.cat(dvc, dim=2)]
            if pending is not None:
                bufs, reqs = pending
                for r in reqs:
                    r.wait()
                kv = bufs
            # the accumulators follow their K/V block to the next rank; after R hops they are home
            bufs, reqs = _shift(dkv, rank, world)
            for r in reqs:
                r.wait()
            dkv, owner = bufs, (owner - 1) % world
        return (torch.cat(dq, dim=2).to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None, None, None)


# ---- collectives with autograd (allgather, ulysses) -------------------------------------------------


def _all_to_all(x: torch.Tensor) -> torch.Tensor:
    """Equal-split all-to-all over dim 0 (``[R, ...]``: block ``j`` goes to rank ``j``), into a new tensor."""
    x = x.contiguous()
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    return out


class _AllToAll(torch.autograd.Function):
    """:func:`_all_to_all` with autograd; its adjoint is itself."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[override]
        return _all_to_all(x)

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        return _all_to_all(g)


class _AllGather(torch.autograd.Function):
    """All-gather over a new dim 0 (``[R, ...]``); backward: every rank's gradient of block ``j`` goes to rank ``j``
    by one all-to-all and is summed there (gloo has no reduce-scatter)."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[override]
        world = dist.get_world_size()
        x = x.contiguous()
        out = torch.empty((world, *x.shape), dtype=x.dtype, device=x.device)
        dist.all_gather_into_tensor(out, x) if x.device.type == "cuda" else dist.all_gather(list(out.unbind(0)), x)
        return out

    @staticmethod
    def backward(ctx, g):  # type: ignore[override]
        return _all_to_all(g).sum(0)


def allgather_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: Workload, rank: int,
                        calls: dict[int, LocalCall]) -> torch.Tensor:
    """The ``allgather`` scheme (module docstring); ``calls[chunk]`` runs the local call of the query chunk with
    global index ``chunk`` (``q_len = c``, ``kv_len = (chunk + 1)·c``, bottom-right causal)."""
    world = w.cp_ranks
    c = w.q_len // (2 * world)
    gathered = _AllGather.apply(torch.stack([k, v]))  # [R, 2, B, Hkv, Lr, d]
    pieces: dict[int, torch.Tensor] = {}
    for src in range(world):
        chunks = shard_chunks(w, src)
        for (a, b), part in zip(chunks, torch.split(gathered[src], [b - a for a, b in chunks], dim=3)):
            pieces[a // c] = part
    full = torch.cat([pieces[i] for i in range(2 * world)], dim=3)  # [2, B, Hkv, L, d] in sequence order
    outs = []
    for (a, b), qi in zip(shard_chunks(w, rank), _split(q, w, rank)):
        chunk = a // c
        outs.append(calls[chunk](qi, full[0][:, :, :b], full[1][:, :, :b]))
    return torch.cat(outs, dim=2)


def _seq_to_heads(x: torch.Tensor, world: int) -> torch.Tensor:
    b, h, n, d = x.shape
    y = x.reshape(b, world, h // world, n, d).permute(1, 0, 2, 3, 4)
    y = _AllToAll.apply(y)  # [R (source rank = sequence shard), B, H/R, n, d]
    return y.permute(1, 2, 0, 3, 4).reshape(b, h // world, world * n, d)


def _heads_to_seq(y: torch.Tensor, world: int) -> torch.Tensor:
    b, hr, n_all, d = y.shape
    n = n_all // world
    x = y.reshape(b, hr, world, n, d).permute(2, 0, 1, 3, 4)
    x = _AllToAll.apply(x)  # [R (source rank = head group), B, H/R, n, d]
    return x.permute(1, 0, 2, 3, 4).reshape(b, world * hr, n, d)


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: Workload, call: LocalCall) -> torch.Tensor:
    """The ``ulysses`` scheme: ``call`` is the full-sequence causal call on ``Hq / R`` (``Hkv / R``) heads."""
    world = w.cp_ranks
    out = call(_seq_to_heads(q, world), _seq_to_heads(k, world), _seq_to_heads(v, world))
    return _heads_to_seq(out, world)


def ulysses_local_workload(w: Workload) -> Workload:
    """The ordinary call each rank makes under ``ulysses``: the whole sequence on ``Hq / R`` and ``Hkv / R`` heads."""
    return w.single_process.with_(num_q_heads=w.num_q_heads // w.cp_ranks, num_kv_heads=w.num_kv_heads // w.cp_ranks)


def allgather_local_workload(w: Workload, chunk: int) -> Workload:
    """The ordinary call of query chunk ``chunk`` under ``allgather``: ``c`` queries over the first ``(chunk + 1)·c``
    keys, bottom-right causal."""
    c = w.q_len // (2 * w.cp_ranks)
    return w.single_process.with_(q_len=c, kv_len=(chunk + 1) * c)


#: The backends torch's ``context_parallel`` can shard: it registers sharding strategies (its ring) only for the fused
#: SDPA operators (flash, memory-efficient, cuDNN); the math backend's composite ops meet DTensors unsharded.
TORCH_CP_BACKENDS = ("sdpa-flash", "sdpa-efficient", "sdpa-cudnn")


def torch_cp_reason() -> str:
    """Why a backend outside :data:`TORCH_CP_BACKENDS` cannot run ``torch-cp`` (one line)."""
    return ("torch-cp shards only the fused SDPA kernels (flash, memory-efficient, cuDNN): run it with --backend "
            + ", ".join(TORCH_CP_BACKENDS))


def torch_cp_context(mesh, q_full: torch.Tensor, k_full: torch.Tensor, v_full: torch.Tensor):
    """PyTorch's ``context_parallel`` over ``mesh`` for the global ``q``, ``k``, ``v`` (K/V heads repeated to ``Hq``
    first: its SDPA handlers take equal head counts). Inside the context the three buffers hold the rank's shard
    (torch shards them in place, head-tail load balancing: the chunks of :func:`shard_chunks`) and
    ``scaled_dot_product_attention(..., is_causal=True)`` on them runs torch's ring; enter it once around every call
    (forward and backward) of a measurement.

    Returns:
        ``(context manager, (q, k, v))``: the buffers to read inside the context.
    """
    from torch.distributed.tensor.experimental import context_parallel

    g = q_full.shape[1] // k_full.shape[1]
    k_full, v_full = _expand(k_full, g).contiguous(), _expand(v_full, g).contiguous()
    bufs = [q_full.detach().clone(), k_full.detach(), v_full.detach()]
    return context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2]), bufs
