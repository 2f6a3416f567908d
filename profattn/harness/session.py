"""A profile session: the harness per regime, each regime's trace parsed, evidence attached,
``results.json`` rewritten as every cell finishes (so Ctrl-C keeps what was done).

Order per regime: for each workload, fresh inputs and one high-precision reference; every backend's cell
measured (correctness, timing, peak memory); with ``repeat`` N > 1, N − 1 more rounds of the timing pass
alone over the regime's cells (round-robin, so slow drift spreads across cells instead of biasing one; in an A/B
run, :func:`ab_rounds`: the two backends of each workload back to back, their order alternating);
then one profiler pass over the regime's cells into one trace; then the trace is parsed and each cell gets
the kernels that actually ran. A context-parallel workload's cells (``cp_ranks ≥ 2``) are measured by their own
ranks (:mod:`profattn.harness.cp_launch`: one launch per workload, each rank with its inputs, timing and trace);
``--repeat`` does not re-time them.
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Callable, Sequence

import torch

from profattn.analysis.run.cells import attach_counters, attach_trace
from profattn.analysis.run.reattach import TraceRead
from profattn.analysis.run.reattach import reattach_traces as reattach
from profattn.backends import Backend, get_backend
from profattn.backends.registry import counter_pass_backends, resolve_backend
from profattn.errors import ProfattnError
from profattn.harness.ceilings import measure_ceilings
from profattn.harness.cell import cell_id, error_reason, release_device, run_cell, time_again
from profattn.harness.cp_launch import run_cp_cells
from profattn.harness.environment import collect_environment, load_average
from profattn.harness.inputs import make_inputs, memory_reason, reference
from profattn.harness.ncu import CACHE_CONTROL, CLOCK_CONTROL, REPLAY_MODE, find_ncu, run_counter_pass
from profattn.harness.profiler import ProfiledCall, profile_cells
from profattn.harness.timing import time_cpu_pair
from profattn.privacy import scrub
from profattn.results import ABRun, CellResult, CellStatus, CountersInfo, RunResult, write_results
from profattn.trace.counters import parse_ncu_csv
from profattn.trace.kineto import load_trace
from profattn.workload import Phase, Preset, Workload


@dataclass(frozen=True)
class SessionConfig:
    """What to run: ``preset``'s workloads of ``regimes`` on ``backends``, writing under ``out_dir``."""

    preset: Preset
    regimes: tuple[Phase, ...]
    backends: tuple[Backend, ...]
    device: torch.device
    out_dir: Path
    profile_calls: int = 3
    measure_ceilings: bool = True
    seed: int = 0
    counters: bool | None = None  #: None: on when the device is CUDA and ncu is on PATH
    repeat: int = 1  #: independent timing samples per cell (each a median of many reps)
    keep_host_info: bool = False  #: host/user names in the environment, host-named trace workers, stacks
    #: An A/B run: (base, head) backend names, timed alternately (:func:`ab_rounds`); ``repeat`` − 1 rounds.
    ab: tuple[str, str] | None = None
    #: torch's intra-op threads while the run measures (``profile --threads N``); None: 1 on a CPU (a parallel region
    #: on shared cores waits for a descheduled thread: medians land on scheduler quanta), torch's own on CUDA.
    threads: int | None = None

    @property
    def intra_op_threads(self) -> int | None:
        """The intra-op thread count the run sets (None: left as torch has it)."""
        return self.threads if self.threads is not None else (CPU_THREADS if self.device.type == "cpu" else None)


#: A CPU run's intra-op threads unless ``--threads`` says otherwise.
CPU_THREADS = 1


class ProgressEvent(str, Enum):
    """What a progress callback is told about (a ``str`` enum: members equal their text)."""

    START = "start"  #: a cell is about to run (``cell`` is pending)
    DONE = "done"  #: a cell finished (any status)
    REPEAT = "repeat"  #: a cell took another timing sample (``done``/``total``: the round and the number of rounds)
    COUNTERS = "counters"  #: the Nsight Compute pass starts

    def __str__(self) -> str:
        return self.value


#: progress(event, cell, done, total): ``event`` a :class:`ProgressEvent`; ``cell`` the pending or finished CellResult.
Progress = Callable[[ProgressEvent, CellResult, int, int], None]


def _pending(w: Workload, b: Backend) -> CellResult:
    return CellResult(cell_id=cell_id(w, b.name), workload=w, backend=b.name, family=b.family.name, status=CellStatus.PENDING)


def resume_config(run: RunResult, out_dir: Path, device: torch.device, *, profile_calls: int = 3,
                  counters: bool | None = None, keep_host_info: bool = False) -> SessionConfig:
    """The :class:`SessionConfig` that continues ``run`` (read from ``out_dir``): its workloads, backends,
    seed and repeat count, on ``device``.

    Raises:
        ProfattnError: the run was measured on another kind of device or another GPU model, or names a
            backend this installation does not have (e.g. a plugin that is not installed).
    """
    env = run.environment
    if env.device != device.type:
        raise ProfattnError(f"--resume: {out_dir} was measured on {env.device}, this run would use {device.type}")
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if name != env.device_name:
            raise ProfattnError(f"--resume: {out_dir} was measured on {env.device_name}, this GPU is {name}")
    workloads = tuple(dict.fromkeys(c.workload for c in run.cells))
    loaded = {}
    for spec in run.plugins:  # the run's --backend module:object plugins, by the names their cells carry
        with contextlib.suppress(ProfattnError):  # one that no longer loads: its name is unknown below (one line)
            b = resolve_backend(spec)
            loaded[b.name] = b
    backends = tuple(loaded.get(name) or get_backend(name) for name in dict.fromkeys(c.backend for c in run.cells))
    regimes = tuple(p for p in Phase if any(w.phase is p for w in workloads))
    return SessionConfig(preset=Preset(run.preset, run.preset_description, workloads), regimes=regimes,
                         backends=backends, device=device, out_dir=out_dir, profile_calls=profile_calls,
                         seed=run.seed, counters=counters, repeat=run.repeat, keep_host_info=keep_host_info,
                         ab=(run.ab.base, run.ab.head) if run.ab is not None else None,
                         threads=env.torch_threads if device.type == "cpu" else None)


def plugin_specs(backends: Sequence[Backend]) -> tuple[str, ...]:
    """The ``module:object`` specs of the ``--backend`` plugins among ``backends`` (entry points excluded: they load
    themselves wherever they are installed), recorded in the run so ``profile --resume`` can load them again."""
    return tuple(dict.fromkeys(o.spec for b in backends if (o := getattr(b, "origin", None)) is not None
                               and o.distribution is None and ":" in o.spec))


def run_session(cfg: SessionConfig, progress: Progress | None = None, *, resume: RunResult | None = None) -> RunResult:
    """Run every cell, write ``out_dir/results.json`` after each, return the final :class:`RunResult`.

    With ``resume`` (an interrupted run read from ``out_dir``, and ``cfg`` from :func:`resume_config`), cells
    that were measured are kept as they are (their traces stay where they are) and only pending cells run;
    their profiler pass writes a new trace file beside the earlier one. torch's intra-op threads are
    :attr:`SessionConfig.intra_op_threads` while it runs (recorded in the environment), restored after.
    """
    threads, before = cfg.intra_op_threads, torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _run_session(cfg, progress, resume=resume)
    finally:
        torch.set_num_threads(before)


def _run_session(cfg: SessionConfig, progress: Progress | None, *, resume: RunResult | None) -> RunResult:
    out = cfg.out_dir
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    workloads = [w for p in cfg.regimes for w in cfg.preset.regime(p)]
    if not workloads:
        raise ProfattnError(f"preset {cfg.preset.name!r} has no workloads for regimes {[str(r) for r in cfg.regimes]}")
    if cfg.repeat < 1:
        raise ProfattnError(f"--repeat must be at least 1, got {cfg.repeat}")
    if resume is None:
        run = RunResult(
            environment=collect_environment(cfg.device, keep_host_info=cfg.keep_host_info),
            preset=cfg.preset.name,
            preset_description=cfg.preset.description,
            cells=tuple(_pending(w, b) for w in workloads for b in cfg.backends),
            seed=cfg.seed,
            repeat=cfg.repeat,
            ab=ABRun(cfg.ab[0], cfg.ab[1], cfg.repeat - 1) if cfg.ab is not None else None,
            plugins=plugin_specs(cfg.backends),
        )
    else:
        run = resume
    write_results(run, results_path)
    if cfg.measure_ceilings and cfg.device.type == "cuda" and run.ceilings is None:
        run = replace(run, ceilings=measure_ceilings(cfg.device))
        write_results(run, results_path)
    stored = {c.cell_id: c for c in run.cells}

    def unfinished(c: CellResult | None) -> bool:
        # pending, or timed before an interruption but never profiled (no trace: its kernels were never read,
        # so it could win unchecked): measured again
        return c is None or c.status == CellStatus.PENDING or (c.timing is not None and c.trace is None)

    def pending(w: Workload, b: Backend) -> bool:
        return unfinished(stored.get(cell_id(w, b.name)))

    total = len(run.cells)
    done = sum(1 for c in run.cells if not unfinished(c))
    for phase in cfg.regimes:
        regime_workloads = cfg.preset.regime(phase)
        to_profile: list[ProfiledCall] = []
        keep_alive = []  # inputs must outlive the profiler pass
        for i, w in enumerate(regime_workloads):
            todo = [b for b in cfg.backends if pending(w, b)]
            if not todo:
                continue
            if w.is_context_parallel:  # its ranks are processes of their own, each with its inputs and trace
                for b in todo:
                    if progress:
                        progress(ProgressEvent.START, _pending(w, b), done, total)
                cells = run_cp_cells([(w, b, cell_id(w, b.name)) for b in todo], cfg.device, out,
                                     seed=cfg.seed * 1000 + workloads.index(w), profile_calls=cfg.profile_calls)
                for cell in cells:
                    if not cfg.keep_host_info:
                        cell = scrub(cell)
                    done += 1
                    run = run.with_cell(cell)
                    write_results(run, results_path)
                    if progress:
                        progress(ProgressEvent.DONE, cell, done, total)
                continue
            inputs, ref, status, reason = _prepare_workload(w, cfg, seed=cfg.seed * 1000 + workloads.index(w))
            if inputs is None:  # too large, or out of memory while allocating: every cell of it says why
                for b in todo:
                    cell = replace(_pending(w, b), status=status, reason=reason)
                    if not cfg.keep_host_info:
                        cell = scrub(cell)
                    done += 1
                    run = run.with_cell(cell)
                    if progress:
                        progress(ProgressEvent.DONE, cell, done, total)
                write_results(run, results_path)
                continue
            keep_alive.append(inputs)
            for b in todo:
                if progress:
                    progress(ProgressEvent.START, _pending(w, b), done, total)
                cell, profiled = run_cell(w, b, inputs, ref, cfg.device)
                if not cfg.keep_host_info:
                    cell = scrub(cell)  # error messages may name paths, hosts, users
                done += 1
                run = run.with_cell(cell)
                write_results(run, results_path)
                if progress:
                    progress(ProgressEvent.DONE, cell, done, total)
                if profiled is not None:
                    to_profile.append(profiled)
            del ref
        if cfg.ab is not None:
            run = ab_rounds(run, cfg, to_profile, results_path, progress)
        else:
            for r in range(2, cfg.repeat + 1):
                for p in to_profile:
                    cell = time_again(next(c for c in run.cells if c.cell_id == p.cell_id), p, cfg.device)
                    run = run.with_cell(cell)
                    if progress:  # after the sample, so the line shows the sample just taken
                        progress(ProgressEvent.REPEAT, cell, r, cfg.repeat)
                write_results(run, results_path)
        if to_profile:
            run = _profile_regime(run, cfg, phase, to_profile, results_path)
        del to_profile, keep_alive
        gc.collect()
        if cfg.device.type == "cuda":
            torch.cuda.empty_cache()
    want = cfg.counters
    if want is None:
        want = cfg.device.type == "cuda" and find_ncu()[0] is not None
    if want:
        if progress:
            progress(ProgressEvent.COUNTERS, run.cells[0], done, total)
        run = add_counters(run, out, counter_pass_backends([b.name for b in cfg.backends]))
    else:
        reason = ("CPU run: hardware counters need a CUDA GPU and Nsight Compute" if cfg.device.type != "cuda"
                  else (find_ncu()[1] or "counters turned off (--no-counters)") if cfg.counters is None
                  else "counters turned off (--no-counters)")
        run = replace(run, counters_info=CountersInfo("unavailable" if cfg.counters is None else "not requested", reason))
    run = replace(run, environment=replace(run.environment, load_avg_end=load_average()))
    write_results(run, results_path)
    return run


def ab_rounds(run: RunResult, cfg: SessionConfig, calls: Sequence[ProfiledCall], results_path: Path,
              progress: Progress | None = None) -> RunResult:
    """The A/B timing rounds of one regime (``cfg.ab``: base and head backend names): ``cfg.repeat − 1`` rounds, each
    over the regime's workloads in order, timing the two backends' calls together — base first in odd rounds, head
    first in even ones, so neither side always runs first (warm caches, clocks ramping); on a CPU their reps alternate
    inside one sample window, on CUDA the two samples are taken back to back (:func:`_paired_samples`) — the timing
    pass only. A round in which either side's sample fails is dropped from
    both (a note on each), so sample ``i`` of one side stays paired with sample ``i`` of the other
    (:class:`~profattn.results.ABRun`). Workloads only one side runs get no rounds. ``results.json`` is rewritten
    after every round."""
    assert cfg.ab is not None
    base, head = cfg.ab
    by_cell = {p.cell_id: p for p in calls}
    pairs = []
    for w in dict.fromkeys(c.workload for c in run.cells):
        a, b = by_cell.get(cell_id(w, base)), by_cell.get(cell_id(w, head))
        if a is not None and b is not None:
            pairs.append((a, b))
    rounds = cfg.repeat - 1
    for r in range(1, rounds + 1):
        for a, b in pairs:
            order = (a, b) if r % 2 else (b, a)
            before = {p.cell_id: next(c for c in run.cells if c.cell_id == p.cell_id) for p in order}
            after = _paired_samples(order, before, cfg.device)
            taken = all(len(after[i].latency_samples_us) == len(before[i].latency_samples_us) + 1 for i in after)
            for i, cell in after.items():
                if not taken:  # keep the pairs aligned: neither side's sample of this round counts
                    failed = [n for n in cell.notes if n not in before[i].notes]
                    cell = replace(before[i], notes=(*before[i].notes, *failed,
                                                     f"A/B round {r} dropped: a sample failed on one side"))
                run = run.with_cell(cell)
                if progress and taken:
                    progress(ProgressEvent.REPEAT, cell, r, rounds)
        write_results(run, results_path)
    return run


def _paired_samples(order: Sequence[ProfiledCall], cells: dict[str, CellResult], device: torch.device) -> dict[str, CellResult]:
    """One A/B round of two cells: on a CPU their reps alternate inside one sample window
    (:func:`~profattn.harness.timing.time_cpu_pair`); on CUDA each is sampled in turn (:func:`time_again`: CUDA events
    with the L2 flushed, and the graph replay where the cell has one). A side whose sample failed keeps its samples
    and gets the failure's note."""
    if device.type != "cpu":
        return {p.cell_id: time_again(cells[p.cell_id], p, device) for p in order}
    try:
        timings = time_cpu_pair([(p.fn, p.context, p.before) for p in order])
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a plugin may raise anything: the round is dropped
        note = f"timing repeat failed: {error_reason(exc)}"
        return {p.cell_id: replace(cells[p.cell_id], notes=(*cells[p.cell_id].notes, note)) for p in order}
    finally:
        for p in order:
            if p.before is not None:
                p.before()
    return {p.cell_id: replace(cells[p.cell_id], timing_repeats=(*cells[p.cell_id].timing_repeats, t))
            for p, t in zip(order, timings)}


def _prepare_workload(w: Workload, cfg: SessionConfig, *, seed: int):
    """``(inputs, reference, None, "")`` for workload ``w``, or ``(None, None, status, reason)`` when it
    cannot be measured here: ``unsupported`` when its inputs and reference would not fit in the device's
    free memory (checked before allocating), ``error`` when allocating or computing them failed (out of
    memory included). Never raises for either, so one workload never loses the others."""
    reason = memory_reason(w, cfg.device)
    if reason:
        return None, None, CellStatus.UNSUPPORTED, reason
    inputs = None
    try:
        inputs = make_inputs(w, cfg.device, seed=seed)
        return inputs, reference(w, inputs), None, ""
    except (RuntimeError, MemoryError) as exc:  # torch raises OOM as RuntimeError subclasses on CPU and CUDA
        del inputs
        gc.collect()
        release_device(cfg.device)
        return None, None, CellStatus.ERROR, f"inputs/reference failed: {error_reason(exc)}"


def add_counters(run: RunResult, run_dir: Path, backends: "Sequence[str] | None" = None) -> RunResult:
    """Run the Nsight Compute pass over the run's timed cells (only those of ``backends`` when given) and
    attach each cell's measured bytes; cells left out keep no counters.

    Returns ``run`` with ``counters_info`` set to ``measured`` or to ``unavailable`` with the reason
    (no ncu, no counter permission, CPU run, no timed cell of ``backends``); never raises for an unusable ncu.
    """
    if run.environment.device != "cuda":
        return replace(run, counters_info=CountersInfo("unavailable", "CPU run: hardware counters need a CUDA GPU and Nsight Compute"))
    ids = [c.cell_id for c in run.cells if c.status in (CellStatus.OK, CellStatus.INCORRECT)
           and (backends is None or c.backend in backends)]
    if not ids:
        return replace(run, counters_info=CountersInfo("unavailable", "no timed cell of the chosen backends"))
    res = run_counter_pass(run_dir, ids)
    settings = dict(ncu_version=res.version, cache_control=CACHE_CONTROL, replay_mode=REPLAY_MODE, clock_control=CLOCK_CONTROL,
                    wall_s=res.wall_s)
    if res.reason or res.csv_path is None:
        return replace(run, counters_info=CountersInfo("unavailable", res.reason or "no CSV", **settings))
    try:
        report = parse_ncu_csv(res.csv_path)
    except ProfattnError as exc:
        return replace(run, counters_info=CountersInfo("unavailable", f"unreadable ncu output: {exc}", **settings))
    info = CountersInfo("measured", "", csv_file=str(res.csv_path.relative_to(run_dir)), **settings)
    return attach_counters(run, report.kernels, info)


def _profile_regime(run: RunResult, cfg: SessionConfig, phase: Phase, calls: Sequence[ProfiledCall], results_path: Path) -> RunResult:
    trace_dir = cfg.out_dir / "traces" / phase.value
    try:
        path = profile_cells(calls, trace_dir, device=cfg.device, calls=cfg.profile_calls, keep_host_info=cfg.keep_host_info)
        trace = load_trace(path)
    except (RuntimeError, ProfattnError) as exc:
        note = f"profiler pass failed: {str(exc).splitlines()[0][:300]}"
        for c in run.cells:
            if c.cell_id in {p.cell_id for p in calls}:
                run = run.with_cell(replace(c, notes=(*c.notes, note)))
        write_results(run, results_path)
        return run
    rel = str(path.relative_to(cfg.out_dir))
    ids = {p.cell_id for p in calls}
    for c in run.cells:
        if c.cell_id in ids:
            run = run.with_cell(attach_trace(c, trace, rel, get_backend(c.backend).family))
    write_results(run, results_path)
    return run


def reattach_traces(run: RunResult, run_dir: Path) -> TraceRead:
    """Re-parse the traces a run names and rebuild every cell's :class:`TraceSummary` (``profattn report``),
    with each cell's family from the backend registry (installed plugins included).

    Cells whose trace file is missing, unreadable or outside the run directory, or whose backend this
    install does not have, keep their stored summary; the traces not read are typed problems beside the run
    (:class:`profattn.analysis.run.reattach.TraceRead`).
    """
    return reattach(run, run_dir, family_of=_registered_family)


def _registered_family(cell: CellResult):
    try:
        return get_backend(cell.backend).family
    except ProfattnError:
        return None  # a backend this install does not have (e.g. a plugin): keep the stored summary
