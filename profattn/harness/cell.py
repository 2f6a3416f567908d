"""One cell = one (workload, backend) pair: prepare, check correctness, time, measure peak memory.

A cell never raises: unsupported workloads, exceptions and out-of-memory become its status and reason,
so one failing cell never loses the others.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch

from profattn.backends.base import Backend, Prepared, Unsupported, call_shape_reason
from profattn.harness.inputs import (GRAD_TOLERANCE, NONDETERMINISM_SLACK, AttentionInputs, Reference, check,
                                     document_changes, isolation_error, perturb_document)
from profattn.harness.profiler import ProfiledCall
from profattn.harness.timing import peak_memory, time_cpu, time_cuda, time_cuda_graph
from profattn.interfaces import adoption_of
from profattn.results import CellResult, CellStatus, Correctness
from profattn.workload import Phase, Workload


def cell_id(workload: Workload, backend_name: str) -> str:
    """The cell's name, also its ``record_function`` range in traces: ``<workload tag>.<backend>``."""
    return f"{workload.tag}.{backend_name}"


def _plugin_prefix(backend: Backend) -> str:
    """``"plugin NAME (module:object): "`` for a plugin backend (:mod:`profattn.backends.plugins`), else ``""``."""
    origin = getattr(backend, "origin", None)
    label = getattr(origin, "label", None)
    return f"{label}: " if isinstance(label, str) else ""


def error_reason(exc: BaseException) -> str:
    """One line for a failure: ``out of memory: <first line>`` for a CUDA or CPU allocation failure
    (``torch.cuda.OutOfMemoryError``, ``MemoryError``, PyTorch's "out of memory" / "can't allocate memory"
    messages), else ``<ExceptionType>: <first line>`` (400 characters at most)."""
    first = (str(exc).strip().splitlines() or [""])[0][:400]
    text = first.lower()
    if (isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError)) or "out of memory" in text
            or "can't allocate memory" in text):
        return f"out of memory: {first}"
    return f"{type(exc).__name__}: {first}"


@dataclass(frozen=True)
class BoundCalls:
    """One backend bound to one set of inputs.

    ``forward``: the forward call (output in the backend's layout; :attr:`Prepared.to_contract` converts it);
    ``timed``: the call the harness times (the forward, plus ``backward(grad_out)`` for train); ``grad_out``: dO
    in the forward output's layout (train); ``grads``: the gradients in the contract's padded layout
    (``{"dq", "dk", "dv"}``, train); ``zero_grads``: clears them, run before every timed train call.
    """

    forward: Callable[[], torch.Tensor]
    timed: Callable[[], object]
    grad_out: torch.Tensor | None
    grads: Callable[[], dict[str, torch.Tensor | None]] | None
    zero_grads: Callable[[], None]


def bind_calls(prepared: Prepared, workload: Workload, inputs: AttentionInputs) -> BoundCalls:
    """Bind ``prepared`` to ``inputs`` (outside every timing): the contract's q/k/v are the autograd leaves, or
    for a backend with :attr:`Prepared.bind_train` its own packed leaves (:class:`~profattn.backends.TrainLeaves`)."""
    if workload.phase is not Phase.TRAIN:
        fwd = prepared.bound(inputs)
        return BoundCalls(fwd, fwd, None, None, inputs.zero_grads)
    if prepared.bind_train is not None:
        leaves = prepared.bind_train(inputs)
        fwd, grad_out, grads, zero = leaves.call, leaves.grad_out, leaves.grads, leaves.zero_grads
    else:
        fwd, grad_out, zero = prepared.bound(inputs), inputs.grad_out, inputs.zero_grads

        def grads() -> dict[str, torch.Tensor | None]:
            return {"dq": inputs.q.grad, "dk": inputs.k.grad, "dv": inputs.v.grad}

    def train_step() -> None:
        fwd().backward(grad_out)

    return BoundCalls(fwd, train_step, grad_out, grads, zero)


def calls_for(prepared: Prepared, workload: Workload, inputs: AttentionInputs) -> tuple[Callable[[], torch.Tensor], Callable[[], object]]:
    """(forward call, timed call) of :func:`bind_calls`: the timed call adds the backward for train."""
    calls = bind_calls(prepared, workload, inputs)
    return calls.forward, calls.timed


def _outputs(prepared: Prepared, calls: BoundCalls) -> tuple[torch.Tensor, dict[str, torch.Tensor | None] | None]:
    """One forward (and backward for train) of ``calls``: the output in the contract's layout, and the gradients."""
    raw = calls.forward()
    grads = None
    if calls.grads is not None:
        raw.backward(calls.grad_out)
        grads = calls.grads()
    out = prepared.to_contract(raw) if prepared.to_contract is not None else raw
    return out.detach(), grads


@dataclass(frozen=True)
class IsolationCheck:
    """The document-isolation check of a packed cell: ``error`` None when isolated, else one line;
    ``run_to_run`` the largest absolute change per tensor (``output``, ``dq``, ``dk``, ``dv``) between two identical
    runs — all zero for a bit-reproducible kernel, whose other documents must then stay bit-for-bit equal."""

    error: str | None
    run_to_run: dict[str, float]

    @property
    def reproducible(self) -> bool:
        return not any(self.run_to_run.values())


def document_isolation(prepared: Prepared, workload: Workload, inputs: AttentionInputs, out: torch.Tensor,
                       grads: dict[str, torch.Tensor | None] | None) -> IsolationCheck:
    """Run the backend again on the same inputs, then with one document's q, k, v (and dO) replaced by fresh random
    values — the middle one, :func:`~profattn.harness.inputs.perturb_document` — and compare every other document's
    output rows (and dq, dk, dv) with ``out``/``grads`` of the first run (``[B, H, L_max, d]``, contract layout).

    A kernel whose repeat is bit-identical must leave the other documents bit-for-bit equal. One that is not
    (a backward accumulating dq with atomics in a run-dependent order) may move them by at most
    :data:`~profattn.harness.inputs.NONDETERMINISM_SLACK` × its own run-to-run change per tensor — a leak smaller
    than that cannot be told from the nondeterminism, and :attr:`IsolationCheck.run_to_run` says how large it is.
    Packed calls (``workload.is_packed``) of two or more documents only; runs outside every timing.

    Raises:
        ValueError: the workload is not a packed call of two or more documents.
    """
    if not workload.is_packed or workload.batch < 2:
        raise ValueError("document isolation needs a packed call of two or more documents")
    doc = workload.batch // 2
    calls = bind_calls(prepared, workload, inputs)
    calls.zero_grads()
    out_r, grads_r = _outputs(prepared, calls)
    grads_r = {k: (None if g is None else g.detach().clone()) for k, g in grads_r.items()} if grads_r is not None else None
    calls.zero_grads()
    noise = {name: max(row) for name, row in document_changes(workload, None, out, grads, out_r, grads_r).items()}
    del out_r, grads_r
    other = perturb_document(workload, inputs, doc)
    calls = bind_calls(prepared, workload, other)
    calls.zero_grads()
    out2, grads2 = _outputs(prepared, calls)
    calls.zero_grads()
    allowed = {name: NONDETERMINISM_SLACK * n for name, n in noise.items()}
    return IsolationCheck(isolation_error(workload, doc, out, grads, out2, grads2, allowed), noise)


def run_cell(workload: Workload, backend: Backend, inputs: AttentionInputs, ref: Reference,
             device: torch.device) -> tuple[CellResult, ProfiledCall | None]:
    """Measure one cell; return its result and, when it ran, what the profiler pass should call.

    An appending workload (``workload.append``): the cell's new-token slots are cleared to the pool's fill, its
    first call appends (:meth:`Prepared.appender`) then attends — so the correctness check sees whether the
    attention read the appended tokens — then the attention alone is timed (``timing``), the append alone
    (``append_timing``), and the cache is checked (``PagedKVCache.check_contents``: every sequence's tokens
    through the block table, unused slots still the fill); a wrong cache makes the cell ``incorrect``. The
    profiler pass and ``--repeat`` take the attention call alone."""
    cid = cell_id(workload, backend.name)
    base = dict(cell_id=cid, workload=workload, backend=backend.name, family=backend.family.name,
                adoption=adoption_of(backend.name, getattr(backend, "adoption", None)))
    who = _plugin_prefix(backend)
    try:
        reason = call_shape_reason(backend, workload) or backend.unsupported_reason(workload, device)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a plugin may raise anything, exit() included
        return CellResult(status=CellStatus.ERROR, reason=f"{who}unsupported_reason failed: {error_reason(exc)}", **base), None
    if reason:
        return CellResult(status=CellStatus.UNSUPPORTED, reason=reason, **base), None
    try:
        prepared = backend.prepare(workload, device)
    except Unsupported as exc:
        return CellResult(status=CellStatus.UNSUPPORTED, reason=str(exc), **base), None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a plugin or compiler may raise anything
        release_device(device)
        return CellResult(status=CellStatus.ERROR, reason=f"{who}prepare failed: {error_reason(exc)}", **base), None
    if not isinstance(prepared, Prepared):
        return CellResult(status=CellStatus.ERROR, reason=f"{who}prepare returned {type(prepared).__name__}, not a "
                          "profattn.backends.Prepared", **base), None
    train = workload.phase is Phase.TRAIN
    try:
        with prepared.context():
            append = prepared.appender(inputs) if workload.append else None
            if append is not None:  # the cache holds the cached prefix only until this cell's call appends
                inputs.paged.clear_slots(inputs.append.slot_mapping)
                append()
            calls = bind_calls(prepared, workload, inputs)
            call, zero = calls.timed, calls.zero_grads
            zero()
            # Same grad mode as the timed calls (inference inputs need no grad, so no graph is built):
            # a compiled backend would otherwise recompile on a grad-mode change.
            out, grads = _outputs(prepared, calls)
            correctness = check(workload, out, grads, ref)
            isolation, isolation_note = None, ()
            if workload.is_packed and workload.batch > 1:
                zero()
                checked = document_isolation(prepared, workload, inputs, out, grads)
                isolation = checked.error
                correctness = replace(correctness, isolated=isolation is None,
                                      passed=correctness.passed and isolation is None)
                if not checked.reproducible:
                    moved = ", ".join(f"{k} {v:.3g}" for k, v in checked.run_to_run.items() if v)
                    isolation_note = (f"document isolation: two identical runs differ (max |Δ| {moved}: not bit-"
                                      f"reproducible), so the other documents were held to {NONDETERMINISM_SLACK:g}× "
                                      "that instead of bit-for-bit",)
            del out, grads
            zero()
            before = zero if train else None
            timing = _time_eager(call, device, before)
            zero()
            append_timing, cache_error = None, None
            if append is not None:  # timed apart; re-writing the same tokens to the same slots is idempotent
                append_timing = _time_eager(append, device, None)
                cache_error = inputs.paged.check_contents(inputs.k.detach(), inputs.v.detach())
                correctness = replace(correctness, cache_ok=cache_error is None,
                                      passed=correctness.passed and cache_error is None)
            peak, over = peak_memory(call, device)
            zero()
            graph_timing, graph_note = None, ""
            if device.type == "cuda" and workload.phase is Phase.DECODE:
                try:
                    graph_timing = time_cuda_graph(call, device)
                except Exception as exc:  # noqa: BLE001 - not capturable: keep the eager figure only
                    torch.cuda.synchronize(device)
                    graph_note = f"CUDA-graph capture failed: {error_reason(exc)}"
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - OOM, kernel errors, a plugin's exit(): the cell's status
        inputs.zero_grads()
        release_device(device)
        return CellResult(status=CellStatus.ERROR, reason=who + error_reason(exc), notes=prepared.notes, **base), None
    status = CellStatus.OK if correctness.passed else CellStatus.INCORRECT
    reason = "" if correctness.passed else _incorrect_reason(correctness, workload.dtype, cache_error, isolation)
    result = CellResult(
        status=status, reason=reason, notes=prepared.notes + isolation_note + ((graph_note,) if graph_note else ()),
        correctness=correctness, timing=timing, graph_timing=graph_timing,
        peak_mem_bytes=peak, peak_mem_over_inputs_bytes=over, timing_repeats=(timing,),
        graph_timing_repeats=(graph_timing,) if graph_timing is not None else (),
        append_timing=append_timing, executed_pairs=prepared.executed_pairs, **base,
    )
    return result, ProfiledCall(cid, call, prepared.context, before, graph=graph_timing is not None)


def _time_eager(call: Callable[[], object], device: torch.device, before: Callable[[], None] | None):
    if device.type == "cuda":
        return time_cuda(call, before=before)
    return time_cpu(call, before=before)


def time_again(cell: CellResult, profiled: ProfiledCall, device: torch.device) -> CellResult:
    """``cell`` with one more independent timing sample (``--repeat``): the timing pass only — eager
    launches, and the CUDA-graph replay (graph captured afresh) where the first sample had one. No set-up,
    compile, correctness or profiling is repeated. A sample that raises is skipped and noted.
    """
    try:
        with profiled.context():
            timing = _time_eager(profiled.fn, device, profiled.before)
            graph = time_cuda_graph(profiled.fn, device) if profiled.graph else None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a failed repeat keeps the samples already taken
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return replace(cell, notes=(*cell.notes, f"timing repeat failed: {error_reason(exc)}"))
    finally:
        if profiled.before is not None:
            profiled.before()
    return replace(cell, timing_repeats=(*cell.timing_repeats, timing),
                   graph_timing_repeats=(*cell.graph_timing_repeats, graph) if graph is not None else cell.graph_timing_repeats)


def _incorrect_reason(c: Correctness, dtype: str, cache_error: str | None = None, isolation: str | None = None) -> str:
    parts = [f"out rel err {c.out_rel_err:.3g} > {c.tolerance:g}"] if not c.out_rel_err <= c.tolerance else []
    gtol = GRAD_TOLERANCE[dtype]
    parts += [f"{name} rel err {err:.3g} > {gtol:g}" for name, err in (c.grad_rel_err or {}).items() if not err <= gtol]
    if c.cache_ok is False:
        parts.append(f"KV cache after the append: {cache_error or 'differs from the reference'}")
    if c.isolated is False:
        parts.append(f"documents not isolated: {isolation or 'an output depends on another document'}")
    return "failed correctness: " + ", ".join(parts)


def release_device(device: torch.device) -> None:
    """Wait for ``device`` and return PyTorch's cached blocks to it after a failure (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
