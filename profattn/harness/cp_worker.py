"""One rank of a context-parallel cell: ``python -m profattn.harness.cp_worker WORK_DIR`` with torchrun's environment
(``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), started by
:func:`profattn.harness.cp_launch.launch_ranks`.

Reads ``WORK_DIR/spec.json`` (the device type, the profiled calls, the timing reps, and its ``cells``: each a global
workload, a backend's name, a seed, a cell id and a trace path pattern; every cell has the same ``cp_ranks``); joins the process group (NCCL on CUDA — device ``cuda:LOCAL_RANK`` — gloo
on a CPU); draws the *global* inputs with the run's seed (the same on every rank) and keeps its tokens
(:func:`~profattn.harness.cp_schemes.local_slices`); runs one step for the check, times ``reps`` steps (a barrier before
each, wall clock around forward [+ backward] with a device synchronize), measures the peak memory of one step (CUDA),
profiles ``profile_calls`` steps, each in ``record_function(<cell id>)``, into its own trace; then writes
``WORK_DIR/rank<r>.<i>.json`` for cell ``i`` (its samples, peak, trace file). Last, the outputs and gradients are
gathered on rank 0, which checks them against the fp64 (CPU) / fp32 (CUDA) reference of the global workload and
writes ``WORK_DIR/check.<i>.json``. A cell the scheme or backend cannot run (decided alike on every rank, before any
collective) leaves ``unsupported.<i>.rank<r>`` with the reason and the next cell runs; any other failure writes
``WORK_DIR/rank<r>.error`` (one line) and the rank exits 3.

``PROFATTN_CP_FAIL_RANK=<r>`` (tests) makes rank ``r`` raise after writing its measurements of the first cell, before
the gather; ``<r>:<i>`` of cell ``i``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from profattn.backends import get_backend
from profattn.backends.base import AttentionInputs, Unsupported, call_shape_reason
from profattn.harness.cell import error_reason
from profattn.harness.cp_schemes import (
    TORCH_CP_BACKENDS, RingAttention, allgather_attention, ring_backend, allgather_local_workload, local_slices,
    place_local, torch_cp_context, torch_cp_reason,
    ulysses_attention, ulysses_local_workload,
)
from profattn.harness.inputs import check, make_inputs, reference
from profattn.workload import Phase, Workload
from profattn.workload.contract import CpScheme
from profattn.workload.cp import shard_chunks

#: The test hook's variable: the rank that fails after its measurements (``"<rank>"``, or ``"<rank>:<cell id>"``).
FAIL_ENV = "PROFATTN_CP_FAIL_RANK"


class _Unsupported(Exception):
    pass


def _prepare(backend, w: Workload, device: torch.device):
    reason = call_shape_reason(backend, w) or backend.unsupported_reason(w, device)
    if reason:
        raise _Unsupported(f"local call {w.tag}: {reason}")
    try:
        return backend.prepare(w, device)
    except Unsupported as exc:
        raise _Unsupported(f"local call {w.tag}: {exc}") from None


def build_step(w: Workload, backend_name: str, rank: int, device: torch.device, inputs: AttentionInputs):
    """``(forward, leaves, context)`` of this rank: ``forward()`` returns the local output ``[B, Hq, Lr, d]``;
    ``leaves`` the local q, k, v (autograd leaves for train); ``context`` a context manager to hold around every call.

    Raises:
        _Unsupported: the scheme or the backend cannot run the local call here (the reason).
    """
    train = w.phase is Phase.TRAIN
    world = w.cp_ranks
    backend = get_backend(backend_name)
    scheme = w.cp_scheme

    def leaves_of(q, k, v):
        return tuple(local_slices(w, rank, t).detach().contiguous().requires_grad_(train) for t in (q, k, v))

    if scheme is CpScheme.TORCH_CP:
        from torch.distributed.device_mesh import init_device_mesh

        if backend_name not in TORCH_CP_BACKENDS:
            raise _Unsupported(torch_cp_reason())
        prepared = _prepare(backend, w.single_process, device)
        mesh = init_device_mesh(device.type, (world,))
        cp_ctx, bufs = torch_cp_context(mesh, inputs.q, inputs.k, inputs.v)
        stack = contextlib.ExitStack()
        stack.enter_context(prepared.context())
        stack.enter_context(cp_ctx)  # bufs now hold this rank's shards
        q, k, v = (b.detach().requires_grad_(train) for b in bufs)
        from torch.nn.functional import scaled_dot_product_attention

        def fwd():
            return scaled_dot_product_attention(q, k, v, is_causal=True)

        try:
            with torch.no_grad():
                fwd()
        except NotImplementedError as exc:
            stack.close()
            raise _Unsupported(f"torch-cp on {device.type}: {str(exc).splitlines()[0][:300]}") from None
        except BaseException:
            stack.close()  # never leave torch's SDPA dispatch patched behind a failed cell
            raise
        return fwd, (q, k, v), stack
    q, k, v = leaves_of(inputs.q, inputs.k, inputs.v)
    if scheme is CpScheme.RING:
        if backend_name != ring_backend(device):
            raise _Unsupported(f"ring's blocks run {ring_backend(device)}'s kernels on {device.type}")
        return (lambda: RingAttention.apply(q, k, v, w, rank, world)), (q, k, v), contextlib.nullcontext()
    stack = contextlib.ExitStack()
    if scheme is CpScheme.ALLGATHER:
        c = w.q_len // (2 * world)
        calls = {}
        for a, _ in shard_chunks(w, rank):
            prepared = _prepare(backend, allgather_local_workload(w, a // c), device)
            stack.enter_context(prepared.context())
            calls[a // c] = prepared.forward
        return (lambda: allgather_attention(q, k, v, w, rank, calls)), (q, k, v), stack
    prepared = _prepare(backend, ulysses_local_workload(w), device)
    stack.enter_context(prepared.context())
    return (lambda: ulysses_attention(q, k, v, w, prepared.forward)), (q, k, v), stack


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(work_dir: str) -> int:
    """Run this rank over the spec's cells in order (module docstring); returns the process's exit status."""
    work = Path(work_dir)
    spec = json.loads((work / "spec.json").read_text())
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    cuda = spec["device"] == "cuda"
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(max(1, spec.get("threads", 1)))
    try:
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                                timeout=timedelta(seconds=spec.get("collective_timeout_s", 60)),
                                **({"device_id": device} if cuda else {}))
        for i, cell in enumerate(spec["cells"]):
            try:
                _run(work, spec, cell, i, rank, world, device)
            except _Unsupported as exc:  # decided alike on every rank, before any collective of the cell
                (work / f"unsupported.{i}.rank{rank}").write_text(str(exc).replace("\n", " ")[:600])
        return 0
    except Exception as exc:  # noqa: BLE001 - one line for the launcher, whatever failed
        _error(work, rank, error_reason(exc))
        return 3
    finally:
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def _error(work: Path, rank: int, line: str) -> None:
    (work / f"rank{rank}.error").write_text(line.replace("\n", " ")[:600] + "\n")


def _run(work: Path, spec: dict, cell_spec: dict, index: int, rank: int, world: int, device: torch.device) -> None:
    w = Workload.from_dict(cell_spec["workload"])
    train = w.phase is Phase.TRAIN
    inputs = make_inputs(w.single_process, device, seed=cell_spec["seed"])
    d_out = local_slices(w, rank, inputs.grad_out).contiguous() if train else None
    fwd, leaves, ctx = build_step(w, cell_spec["backend"], rank, device, inputs)
    cell = cell_spec["cell_id"]

    def zero() -> None:
        for t in leaves:
            t.grad = None

    def step() -> torch.Tensor:
        if train:
            out = fwd()
            out.backward(d_out)
            return out
        with torch.no_grad():
            return fwd()

    with ctx:
        zero()
        out = step().detach().clone()
        grads = [t.grad.detach().clone() for t in leaves] if train else []
        for _ in range(spec.get("warmup", 2)):
            zero()
            step()
        samples = []
        for _ in range(spec["reps"]):
            zero()
            dist.barrier()
            _sync(device)
            t0 = time.perf_counter()
            step()
            _sync(device)
            samples.append((time.perf_counter() - t0) * 1e6)
        peak = None
        if device.type == "cuda":
            zero()
            _sync(device)
            torch.cuda.reset_peak_memory_stats(device)
            step()
            _sync(device)
            peak = int(torch.cuda.max_memory_allocated(device))
        trace_path = Path(cell_spec["trace_pattern"].format(rank=rank))
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
            for _ in range(spec["profile_calls"]):
                zero()
                dist.barrier()
                with torch.profiler.record_function(cell):
                    step()
                    _sync(device)
        raw = trace_path.with_suffix("")  # .json
        prof.export_chrome_trace(str(raw))
        import gzip
        import shutil

        with open(raw, "rb") as src, gzip.open(trace_path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
        (work / f"rank{rank}.{index}.json").write_text(json.dumps({
            "rank": rank, "samples_us": samples, "peak_mem_bytes": peak, "trace_file": str(trace_path)}))
        if os.environ.get(FAIL_ENV) in (str(rank), f"{rank}:{cell_spec.get('cell_id')}"):
            raise RuntimeError(f"injected failure on rank {rank} ({FAIL_ENV})")
        _gather_and_check(work, index, w, rank, world, inputs, out, grads)


def _gather_and_check(work: Path, index: int, w: Workload, rank: int, world: int, inputs: AttentionInputs, out: torch.Tensor,
                      grads: list[torch.Tensor]) -> None:
    """All-gather the local output (and dq, dk, dv; K/V gradients repeated-head sums for torch-cp) and, on rank 0,
    place every rank's rows at their global positions and check them against the reference."""
    tensors = [out, *grads]
    gathered = []
    for t in tensors:
        bufs = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(bufs, t.contiguous())
        gathered.append(bufs)
    if rank != 0:
        return
    g = w.single_process
    full = []
    for i, like in enumerate([inputs.q] + [inputs.q, inputs.k, inputs.v][: len(grads)]):
        shape = list(like.shape)
        shape[1] = gathered[i][0].shape[1]
        into = torch.zeros(shape, dtype=gathered[i][0].dtype, device=like.device)
        for r in range(world):
            place_local(w, r, gathered[i][r], into)
        full.append(into)
    if w.cp_scheme is CpScheme.TORCH_CP and grads:  # K/V heads were repeated to Hq: sum each group back
        grp = w.group_size
        for i in (2, 3):
            b, h, n, d = full[i].shape
            full[i] = full[i].view(b, h // grp, grp, n, d).sum(2)
    ref = reference(g, inputs)
    got = dict(zip(("dq", "dk", "dv"), full[1:])) if grads else None
    c = check(g, full[0], got, ref)
    (work / f"check.{index}.json").write_text(json.dumps({
        "out_rel_err": c.out_rel_err, "tolerance": c.tolerance, "passed": c.passed, "reference": c.reference,
        "grad_rel_err": c.grad_rel_err}))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
