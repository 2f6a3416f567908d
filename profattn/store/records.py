"""Typed records of the results store: one measured cell as stored (:class:`Measurement`) and one imported run
(:class:`StoredRun`), and the conversion of a :class:`~profattn.results.RunResult` into them.

Torch-free. The conversion is pure (no database), so the run report derives its selection policy from a run's
own cells with the same records the store holds.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields, replace
from collections.abc import Iterable
from typing import Any

from profattn.results import CellResult, RunResult, dominant_launch
from profattn.errors import WorkloadError
from profattn.interfaces import Adoption, Layout, adoption_of, layout_read
from profattn.workload import KVLayout, Mask, Workload


@dataclass(frozen=True)
class StoredRun:
    """One imported run: where it came from and what it ran on.

    ``run_id``: :func:`run_id` of the run; ``path``: the run directory as imported (absolute); ``created_utc``:
    the run's start (ISO 8601, UTC); ``imported_utc``: when it was (last) imported; ``gpu``: the device name
    (``NVIDIA H200``; ``cpu`` runs carry the CPU's name as the Environment has it); ``num_sms``: streaming
    multiprocessors (None on a CPU or when unrecorded); software versions as the run's Environment recorded them
    (``flashinfer``: None in runs that did not record it); ``cells``: cells stored for it.
    """

    run_id: str
    path: str
    created_utc: str
    imported_utc: str
    preset: str
    gpu: str
    device: str
    num_sms: int | None
    torch: str | None
    cuda: str | None
    cudnn: str | None
    triton: str | None
    flashinfer: str | None
    driver: str | None
    profattn: str | None
    repeat: int
    read_gbps: float | None = None
    copy_gbps: float | None = None
    matmul_tflops: float | None = None
    cells: int = 0


@dataclass(frozen=True)
class Measurement:
    """One cell as the store keeps it (all times µs, bytes in bytes).

    ``workload_key``: the tag of :func:`canonical_workload` (the exact-lookup key); ``workload_json``: the
    workload's fields (``Workload.from_dict`` reads them; :meth:`workload` does); the workload's fields are also
    columns (``phase`` ... ``window``) so rules and queries read them without parsing. ``status``: the cell's
    :class:`~profattn.results.CellStatus` text; ``correct``: correctness passed (None: not checked);
    ``eligible``: :attr:`CellResult.eligible` (timed, correct, family confirmed) — only eligible cells rank.
    ``latency_us``: the judged median (``timing_kind`` ``graph``: the CUDA-graph replay, else ``eager``) with its
    ``p10_us``–``p90_us`` over ``reps`` reps; ``samples_us``: the independent samples (one median per repeat);
    ``eager_us`` / ``graph_us`` both medians; ``gpu_time_us``: kernel time per call from the trace; the dominant
    kernel's name, ``grid``/``block`` (``"x,y,z"``), CTAs per launch and per SM; ``dram_bytes`` (Nsight Compute,
    None without counters) against ``requested_bytes`` (the workload's byte ledger; None for a ragged batch:
    :func:`requested_bytes`). ``executed_pairs``: the pairs a padding backend computed (None: it computed the
    required ones). ``interface``, ``read_layout``: the backend's declared :class:`~profattn.interfaces.Adoption`
    (the layout its kernel read — a dense backend on a paged workload reads the contiguous copy) and
    ``adoption_json`` the whole declaration; ``read_key``: the key of the workload as the kernel read it
    (:func:`read_workload`), which a dense call is looked up by; ``kernels_per_call`` from the trace.
    ``host_us``: the host's time to issue one eager call (:attr:`profattn.results.Timing.host_us`); set only by runs
    whose CUDA timings hid the host's stalls (results schema ≥ 4), so it also marks the timing method
    (:func:`current_method`).
    """

    run_id: str
    cell_id: str
    gpu: str
    num_sms: int | None
    workload_key: str
    workload_json: str
    phase: str
    batch: int
    q_len: int
    kv_len: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    mask: str
    kv_layout: str
    page_size: int | None
    kv_len_dist: str
    shared_prefix_len: int
    append: bool
    kv_dtype: str | None
    window: int | None
    varlen: bool
    backend: str
    family: str
    status: str
    correct: bool | None
    eligible: bool
    latency_us: float | None
    timing_kind: str | None
    p10_us: float | None
    p90_us: float | None
    reps: int | None
    samples_us: tuple[float, ...]
    eager_us: float | None
    graph_us: float | None
    gpu_time_us: float | None
    dominant_kernel: str | None
    grid: str | None
    block: str | None
    ctas: int | None
    ctas_per_sm: float | None
    dram_bytes: float | None
    requested_bytes: int | None
    executed_pairs: int | None = None
    interface: str | None = None
    read_layout: str | None = None
    read_key: str | None = None
    adoption_json: str | None = None
    kernels_per_call: float | None = None
    host_us: float | None = None

    def adoption(self) -> Adoption | None:
        """The backend's declared :class:`~profattn.interfaces.Adoption` as the cell recorded it (else the built-in
        declaration; None for a plugin that declared none, or a damaged record)."""
        if self.adoption_json:
            try:
                return Adoption.from_dict(json.loads(self.adoption_json))
            except (ValueError, KeyError, TypeError):
                return None
        return adoption_of(self.backend)

    def workload(self) -> Workload:
        """The stored workload (parsed from ``workload_json``).

        Raises:
            WorkloadError: the stored fields are not a valid workload (a damaged store; the message names the cell,
                the run and the fix).
        """
        where = (f"results store: cell {self.cell_id[:80]!r} of {self.run_id[:40]}: its stored workload")
        fix = f"(a damaged store: `profattn db forget {self.run_id[:40]}`, then import the run again)"
        try:
            data = json.loads(self.workload_json)
        except (json.JSONDecodeError, RecursionError, TypeError) as exc:
            raise WorkloadError(f"{where} is not JSON ({exc}) {fix}") from None
        if not isinstance(data, dict):
            raise WorkloadError(f"{where} is a {type(data).__name__}, not an object of fields {fix}")
        try:
            return Workload.from_dict(data)
        except WorkloadError as exc:
            raise WorkloadError(f"{where}: {exc} {fix}") from None


def canonical_workload(w: Workload) -> Workload:
    """The workload as the store looks it up: a call whose every sequence has one query row with ``mask=none``
    is stored as ``causal`` — with ``q_len = 1`` the bottom-right causal mask keeps every key, so the two are the
    same call (profattn's decode presets say causal; a traced decode SDPA call records ``is_causal=False``)."""
    one_row = w.q_len == 1 and all(q == 1 for q, _ in w.seqs)
    if one_row and w.mask is Mask.NONE and w.window is None:
        return replace(w, mask=Mask.CAUSAL)
    return w


def workload_key(w: Workload) -> str:
    """The exact-lookup key of ``w``: the tag of :func:`canonical_workload` (every field that changes the call)."""
    return canonical_workload(w).tag


def read_workload(w: Workload, layout: Layout | str) -> Workload:
    """``w`` as a kernel reading ``layout`` saw it: a paged workload of uniform lengths read by a dense kernel is
    the dense workload of the same shape (the contiguous copy: every sequence's keys, a shared prefix once per
    sequence); anything else is ``w`` itself (a ragged batch has no contiguous copy, a packed read of a dense call
    reads its tokens)."""
    if str(layout) != Layout.DENSE.value or w.kv_layout is not KVLayout.PAGED or w.kv_len_dist.drawn:
        return w
    try:
        return replace(w, kv_layout=KVLayout.DENSE, page_size=None, shared_prefix_len=0)
    except WorkloadError:
        return w


def run_id(run: RunResult) -> str:
    """A run's identity in the store: ``run-`` + 12 hex digits of SHA-1 over its start time, preset, device name,
    seed and platform — the same for a run imported again, resumed or given counters later (its cells are then
    replaced, not added twice)."""
    e = run.environment
    text = "|".join((e.created_utc, run.preset, e.device_name, str(run.seed), e.platform))
    return "run-" + hashlib.sha1(text.encode()).hexdigest()[:12]


def _shape(t: tuple[int, int, int] | None) -> str | None:
    return ",".join(str(x) for x in t) if t is not None else None


def _workload_json(w: Workload) -> str:
    """The workload's own fields as JSON (``Workload.from_dict`` reads them). Not ``to_dict``: its derived numbers
    draw ragged lengths with torch, which the store never imports."""
    d = {f.name: getattr(w, f.name) for f in fields(Workload)}
    d = {k: getattr(v, "value", v) for k, v in d.items()}
    d["seqs"] = [list(p) for p in w.seqs]
    return json.dumps(d, sort_keys=True)


def requested_bytes(w: Workload) -> int | None:
    """The workload's requested bytes (its byte ledger), or None for a ragged batch: its lengths are drawn with
    torch (``Workload.kv_lens``), which the store never imports."""
    return None if w.kv_len_dist.drawn else w.requested_bytes


def measurement(cell: CellResult, run: RunResult, rid: str) -> Measurement:
    """``cell`` of ``run`` as a :class:`Measurement` of run ``rid``."""
    w = canonical_workload(cell.workload)
    e = run.environment
    t = cell.judged_timing
    k = dominant_launch(cell)
    ctas = k.ctas if k else None
    per_sm = k.blocks_per_sm if k and k.blocks_per_sm is not None else (
        ctas / e.num_sms if ctas is not None and e.num_sms else None)
    adoption = adoption_of(cell.backend, cell.adoption)
    read = layout_read(adoption, w.kv_layout.value, packed=w.is_packed)
    return Measurement(
        run_id=rid, cell_id=cell.cell_id, gpu=e.device_name, num_sms=e.num_sms, workload_key=w.tag,
        workload_json=_workload_json(w), phase=w.phase.value, batch=w.batch, q_len=w.q_len, kv_len=w.kv_len,
        num_q_heads=w.num_q_heads, num_kv_heads=w.num_kv_heads, head_dim=w.head_dim, dtype=w.dtype, mask=w.mask.value,
        kv_layout=w.kv_layout.value, page_size=w.page_size, kv_len_dist=w.kv_len_dist.value,
        shared_prefix_len=w.shared_prefix_len, append=w.append, kv_dtype=w.kv_dtype, window=w.window,
        varlen=bool(w.seqs), backend=cell.backend, family=cell.family, status=str(cell.status),
        correct=cell.correctness.passed if cell.correctness else None,
        eligible=bool(cell.eligible and cell.latency_us is not None),
        latency_us=cell.latency_us, timing_kind=None if t is None else ("graph" if cell.graph_timing else "eager"),
        p10_us=t.p10_us if t else None, p90_us=t.p90_us if t else None, reps=t.reps if t else None,
        samples_us=tuple(cell.latency_samples_us),
        eager_us=cell.eager_latency_us,
        graph_us=cell.latency_us if cell.graph_timing else None,
        gpu_time_us=cell.trace.gpu_time_per_call_us if cell.trace else None,
        dominant_kernel=cell.trace.dominant_kernel if cell.trace else None,
        grid=_shape(k.grid) if k else None, block=_shape(k.block) if k else None, ctas=ctas, ctas_per_sm=per_sm,
        dram_bytes=cell.counters.dram_bytes if cell.counters else None, requested_bytes=requested_bytes(w),
        executed_pairs=cell.executed_pairs, interface=adoption.interface.value if adoption else None,
        read_layout=read.value, read_key=workload_key(read_workload(w, read)),
        adoption_json=json.dumps(adoption.to_dict(), sort_keys=True) if adoption else None,
        kernels_per_call=cell.trace.kernels_per_call if cell.trace else None,
        host_us=cell.host_us,
    )


def current_method(cells: Iterable[Measurement]) -> tuple[Measurement, ...]:
    """``cells`` without those a re-measurement under the current timing method supersedes: per (GPU, backend,
    workload as read: ``read_key``), once an eligible cell carries :attr:`Measurement.host_us` (its latency timed
    with the host's stalls hidden, :func:`profattn.harness.timing.time_cuda`), the cells without it are dropped — an
    older run timed any host stall longer than the L2 flush inside the events, so its latency of a launch-bound call
    is the host's jitter, not the kernels' (``benchmarks/host_stall.py`` measures both). Order kept; a group with no
    such cell keeps every cell."""
    def group(c: Measurement) -> tuple[str, str, str]:
        return c.gpu, c.backend, c.read_key or c.workload_key

    cells = tuple(cells)
    current = {group(c) for c in cells if c.host_us is not None and c.eligible}
    return tuple(c for c in cells if c.host_us is not None or group(c) not in current)


def measurements(run: RunResult, rid: str | None = None) -> tuple[Measurement, ...]:
    """Every cell of ``run`` as :class:`Measurement` records (pending cells left out: nothing was measured)."""
    rid = rid or run_id(run)
    return tuple(measurement(c, run, rid) for c in run.cells if str(c.status) != "pending")


def stored_run(run: RunResult, path: str, imported_utc: str, cells: int) -> StoredRun:
    """The :class:`StoredRun` row of ``run`` imported from ``path`` at ``imported_utc``."""
    e = run.environment
    return StoredRun(run_id=run_id(run), path=path, created_utc=e.created_utc, imported_utc=imported_utc,
                     preset=run.preset, gpu=e.device_name, device=e.device, num_sms=e.num_sms, torch=e.torch,
                     cuda=e.cuda, cudnn=e.cudnn, triton=e.triton, flashinfer=e.flashinfer, driver=e.driver,
                     profattn=e.profattn, repeat=run.repeat,
                     read_gbps=run.ceilings.read_gbps if run.ceilings else None,
                     copy_gbps=run.ceilings.copy_gbps if run.ceilings else None,
                     matmul_tflops=run.ceilings.matmul_tflops if run.ceilings else None, cells=cells)


def workload_fields(w: Workload) -> dict[str, Any]:
    """The fields of ``w`` a selection rule may test, keyed as :func:`row_features` keys them (without ``num_sms``)."""
    return {"phase": w.phase.value, "batch": w.batch, "q_len": w.q_len, "kv_len": w.kv_len, "num_q_heads": w.num_q_heads,
            "num_kv_heads": w.num_kv_heads, "head_dim": w.head_dim, "dtype": w.dtype, "mask": w.mask.value,
            "kv_layout": w.kv_layout.value, "page_size": w.page_size, "kv_len_dist": w.kv_len_dist.value,
            "shared_prefix_len": w.shared_prefix_len, "append": w.append, "kv_dtype": w.kv_dtype, "window": w.window,
            "varlen": bool(w.seqs)}


def row_features(m: Measurement) -> dict[str, Any]:
    """The workload fields a selection rule may test (see :mod:`profattn.analysis.selection.policy`)."""
    return {"phase": m.phase, "batch": m.batch, "q_len": m.q_len, "kv_len": m.kv_len, "num_q_heads": m.num_q_heads,
            "num_kv_heads": m.num_kv_heads, "head_dim": m.head_dim, "dtype": m.dtype, "mask": m.mask,
            "kv_layout": m.kv_layout, "page_size": m.page_size, "kv_len_dist": m.kv_len_dist,
            "shared_prefix_len": m.shared_prefix_len, "append": m.append, "kv_dtype": m.kv_dtype, "window": m.window,
            "varlen": m.varlen, "num_sms": m.num_sms}


__all__ = ["Measurement", "StoredRun", "canonical_workload", "measurement", "measurements", "read_workload",
           "row_features", "run_id", "requested_bytes", "stored_run", "workload_fields", "workload_key"]
