"""``profattn recommend`` and ``profattn db list|import|forget``: the results store and what it answers.

The store's default location is :func:`profattn.store.default_db_path` (``$PROFATTN_DB``, else the user's cache
directory); ``--db PATH`` chooses another. ``profile``, ``sweep`` and ``counters`` add their cells at the end of each
run (:func:`store_run`: a failure there is a one-line warning, never a failed run — the run's results.json stays the
source of truth, and ``profattn db import`` adds it later). Every write (import, the run hook, forget) derives the
GPU's selection policy again and caches it in the store, so ``recommend`` answers from the cache (deriving it from
100,000 cells takes seconds; see ``benchmarks/recommend.py``).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from datetime import date
from pathlib import Path

import click

from profattn.cli.main import main, output_file
from profattn.errors import ProfattnError
from profattn.interfaces import Interface

_DB_HELP = "Results store (default: $PROFATTN_DB, else ~/.cache/profattn/results.sqlite under $XDG_CACHE_HOME)."


def _cache_policies(store, gpus) -> str | None:  # noqa: ANN001 - a ResultsStore
    """Derive the policy of each of ``gpus`` now, so `recommend` answers from the cache; returns the package whose
    absence stopped it (the runs just imported stay whole: `recommend` derives the policy when it can), else None."""
    from profattn.analysis.selection.recommend import policy_for

    try:
        for gpu in gpus:
            policy_for(store, gpu)
    except ModuleNotFoundError as exc:
        return (exc.name or "?").split(".")[0]
    return None


def store_run(run_dir: Path, db: str | None = None) -> str:
    """Add the run in ``run_dir`` to the store; returns the line to print (a warning when it failed — the run
    itself never fails for it)."""
    from profattn.store import import_runs, open_store

    try:
        with open_store(db) as store:
            (row,) = import_runs(store, [run_dir])
            added = f"store: {row.cells} cell{'s' * (row.cells != 1)} of {row.run_id} added to {store.path}"
            missing = _cache_policies(store, [row.gpu])
        return added + (f" (the selection policy not derived: Python package {missing!r} missing)" if missing else "")
    except (ProfattnError, OSError) as exc:
        return f"warning: the run was not added to the results store ({exc}); `profattn db import {run_dir}` adds it later"


def _local_gpu() -> str | None:
    """This machine's GPU name from ``nvidia-smi`` (no torch import), or None."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    names = [n.strip() for n in out.stdout.splitlines() if n.strip()]
    return names[0] if out.returncode == 0 and names else None


def pick_gpu(store, name: str | None) -> str:
    """``--gpu`` resolved against the store; without it the store's only GPU, else this machine's (nvidia-smi).

    Raises:
        ProfattnError: see :func:`profattn.analysis.selection.recommend.resolve_gpu`.
    """
    from profattn.analysis.selection.recommend import resolve_gpu

    if name is None and len(store.gpus()) > 1:
        local = _local_gpu()
        if local is not None:
            return resolve_gpu(store, local)
    return resolve_gpu(store, name)


@main.command()
@click.option("--workload", "spec", default=None, metavar="SPEC", help="The workload, in `profile --workload` grammar.")
@click.option("--gpu", default=None, metavar="NAME", help="GPU as the store names it (H200 matches 'NVIDIA H200'); default: the store's only GPU, else this machine's.")
@click.option("--db", default=None, metavar="PATH", help=_DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON (schema profattn.recommend).")
@click.option("--export", "export_path", default=None, metavar="FILE", help="Write the GPU's selection policy (schema profattn.policy, with its validation) to FILE.")
@click.option("--measure", is_flag=True, help="When the store has not measured the workload on this GPU (predicted or unknown), run "
                                              "`profattn profile --workload SPEC` now (needs a CUDA GPU here), then answer from the new cells.")
@click.option("--interface", "interface", default=None, type=click.Choice([i.value for i in Interface]),
              help="The interface your call uses (default: from the workload's layout: paged → paged, dense → sdpa, "
                   "packed documents → packed-varlen): options of that interface rank first, as drop-ins.")
@click.option("--plan", "plan_n", default=0, type=click.IntRange(0, 1000), metavar="N",
              help="Also print the N workloads (the asked one and its neighbours) whose measurement would most reduce the "
                   "answer's uncertainty, as `profattn profile --workload` lines.")
@click.pass_context
def recommend(ctx: click.Context, spec: str | None, gpu: str | None, db: str | None, as_json: bool,
              export_path: str | None, measure: bool, interface: str | None, plan_n: int) -> None:
    """Which backend for this workload on this GPU — drop-ins for your interface first, then what a change would
    buy: measured winner, near tie, predicted (from per-backend cost models, marked when it extrapolates) or
    unknown (with the `profattn profile` command that measures it), from the results store.

    With --measure an unmeasured workload is profiled here first (a new run directory; its cells join the store)."""
    from profattn.analysis.selection.recommend import plan as plan_measurements, recommend as answer
    from profattn.report.recommend import plan_lines, recommend_json, recommend_text
    from profattn.store import open_store
    from profattn.workload import parse_workload_spec

    if spec is None and export_path is None:
        raise ProfattnError("give --workload SPEC (and/or --export FILE)")
    if plan_n and spec is None:
        raise ProfattnError("--plan needs --workload SPEC: the answer to sharpen")
    if as_json and spec is None:
        raise ProfattnError("--json prints the answer for --workload SPEC; --export alone writes its policy as JSON "
                            "to FILE")
    if measure and spec is None:
        raise ProfattnError("--measure needs --workload SPEC: the workload to measure")
    workload = parse_workload_spec(spec) if spec is not None else None
    target = output_file(export_path, "--export") if export_path is not None else None
    if measure:
        _measure_if_needed(ctx, workload, spec, gpu, db)
    with open_store(db, create=False) as store:
        name = pick_gpu(store, gpu)
        if workload is not None:
            _check_fits(store, workload, name)
            rec = answer(store, workload, name, interface=Interface(interface) if interface else None)
            planned = plan_measurements(store, name, [(workload, 0.0)], plan_n, policy=rec.policy) if plan_n else ()
            if as_json:
                doc = recommend_json(rec)
                if plan_n:
                    doc["plan"] = [{"workload": p.workload.tag, "expected_regret": p.expected_regret} for p in planned]
                click.echo(json.dumps(doc, indent=1))
            else:
                click.echo(recommend_text(rec) + ("\n".join(plan_lines(planned)) + "\n" if plan_n else ""), nl=False)
        if target is not None:
            from profattn.analysis.selection.policy import derive, policy_to_dict, store_ceilings
            from profattn.report.recommend import policy_text

            # the roofs the answering policy has (policy_for), so the export is that policy with its validation
            policy = derive(store.cells_on(name), name, lowo=False, ceilings=store_ceilings(store.runs(), name))
            if policy is None:
                raise ProfattnError(f"no eligible cell on {name} in {store.path}: no policy to export")
            from profattn.files import write_text_atomic

            write_text_atomic(target, json.dumps(policy_to_dict(policy), indent=1) + "\n")
            click.echo(policy_text(policy), nl=False, err=as_json)
            click.echo(f"policy: {target}", err=as_json)


def _check_fits(store, workload, gpu: str) -> None:  # noqa: ANN001
    """Refuse a workload whose K/V cache alone exceeds the GPU's memory (as its stored runs recorded it), as
    ``profile`` refuses it before allocating: no backend runs it there, so no latency is priced.

    Raises:
        ProfattnError: the K/V bytes exceed the memory (unknown memory, a CPU's: not checked)."""
    from profattn.cli.simulate import gpu_memory_bytes
    from profattn.report.format import fmt_bytes

    memory = gpu_memory_bytes(store, gpu)
    if memory and workload.kv_bytes > memory:
        raise ProfattnError(f"--workload: its K/V cache alone needs ~{fmt_bytes(workload.kv_bytes)}; {gpu} has "
                            f"{fmt_bytes(memory)} (as its stored runs recorded it), so the workload cannot fit there "
                            "and no backend's latency can be priced")


def _measure_if_needed(ctx: click.Context, workload, spec: str, gpu: str | None, db: str | None) -> None:  # noqa: ANN001
    """``recommend --measure``: profile ``workload`` here (``profattn profile --workload SPEC --db DB``) unless the store
    already has measured cells of it (on ``--gpu``, else this machine's GPU, else the store's only one).

    Raises:
        ProfattnError: no CUDA GPU on this machine (``nvidia-smi`` finds none), or ``--gpu`` names another GPU.
    """
    from profattn.analysis.selection.recommend import Status, recommend as answer
    from profattn.store import open_store
    from profattn.workload import workload_spec

    try:  # measured already (on --gpu, else this machine's GPU or the store's only one): nothing to run
        with open_store(db, create=False) as store:
            name = pick_gpu(store, gpu if gpu is not None else _local_gpu())
            measured = answer(store, workload, name).status in (Status.MEASURED_WINNER, Status.NEAR_TIE)
    except ProfattnError:  # no store yet, an empty one, or one without that GPU
        measured = False
    if measured:
        return
    local = _local_gpu()
    if local is None:
        raise ProfattnError(f"--measure needs a CUDA GPU on this machine (nvidia-smi finds none); on a GPU machine run: "
                            f"profattn profile --workload {shlex.quote(workload_spec(workload))}")
    if gpu is not None and gpu.lower() not in local.lower():
        raise ProfattnError(f"--measure measures on this machine's GPU ({local}), not --gpu {gpu}")
    # the registered command (the profile command module imports this one for store_run)
    ctx.invoke(main.get_command(ctx, "profile"), workload_specs=(spec,), device_name="cuda", db=db)


@main.group()
def db() -> None:
    """The results store: list, import and forget runs."""


@db.command("list")
@click.option("--db", "db_path", default=None, metavar="PATH", help=_DB_HELP)
def db_list(db_path: str | None) -> None:
    """Runs, cells and GPUs in the store."""
    from profattn.report.recommend import runs_text
    from profattn.store import open_store

    with open_store(db_path, create=False) as store:
        click.echo(runs_text(store.runs(), store.gpus(), str(store.path)), nl=False)


@db.command("import")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--db", "db_path", default=None, metavar="PATH", help=_DB_HELP)
def db_import(run_dirs: tuple[Path, ...], db_path: str | None) -> None:
    """Add runs (directories holding results.json) to the store; a run imported again replaces its cells."""
    from profattn.results import read_results
    from profattn.store import open_store

    runs = [(p, read_results(p)) for p in run_dirs]  # every input read before anything is written
    with open_store(db_path) as store:
        for p, run in runs:
            row = store.add_run(run, p if p.is_dir() else p.parent)
            click.echo(f"{row.run_id}: {row.cells} cells ({row.gpu}, {row.preset}, {row.created_utc}) from {p}")
        missing = _cache_policies(store, sorted({run.environment.device_name for _, run in runs}))
        if missing:
            click.echo(f"warning: the selection policy was not derived: Python package {missing!r} is not installed "
                       "(`recommend` needs it)", err=True)
        click.echo(f"store: {store.path}")


_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")


@db.command("forget")
@click.argument("runs", nargs=-1, metavar="RUN...")
@click.option("--before", default=None, metavar="YYYY-MM-DD",
              help="Forget every run made before this day (UTC); with RUN... too, those runs as well (the union).")
@click.option("--db", "db_path", default=None, metavar="PATH", help=_DB_HELP)
def db_forget(runs: tuple[str, ...], before: str | None, db_path: str | None) -> None:
    """Remove runs (by id, as `db list` shows, or by their imported directory) and, with --before, every run made
    before that day, from the store; the runs' directories are not touched."""
    from profattn.store import open_store

    if not runs and before is None:
        raise ProfattnError("name runs to forget (ids or directories), or give --before YYYY-MM-DD")
    if before is not None:
        try:
            valid = bool(_DATE.match(before)) and date.fromisoformat(before) is not None
        except ValueError:
            valid = False
        if not valid:
            raise ProfattnError(f"--before {before!r} is not a date YYYY-MM-DD")
    with open_store(db_path, create=False) as store:
        known = {r.run_id for r in store.runs()} | {r.path for r in store.runs()}
        unknown = [r for r in runs if r not in known and str(Path(r).resolve()) not in known]
        if unknown:
            raise ProfattnError(f"no run {unknown[0]!r} in {store.path} (see `profattn db list`)")
        n = store.forget(runs, before)
        from profattn.analysis.selection.recommend import policy_for

        for gpu in store.gpus():
            policy_for(store, gpu)
    click.echo(f"forgot {n} run(s)")
