"""``profattn simulate``: attention backends with the scheduler at a declared load (a request trace, a memory budget,
page size and KV dtype), each step priced from the results store's measured cells.

Inputs are read and checked here (the trace, the model, the store, the runs' ceilings); the simulation is
:func:`profattn.analysis.simulation.simulate.simulate`; every output comes from :mod:`profattn.report.simulate`. Progress goes
to stderr; bad input is one line and exit code 2.
"""

from __future__ import annotations

import math
import re
import sys
from itertools import product
from pathlib import Path

import click

from profattn.cli.main import distinct_outputs, main, output_file
from profattn.errors import ProfattnError

_DB_HELP = "Results store (default: $PROFATTN_DB, else ~/.cache/profattn/results.sqlite under $XDG_CACHE_HOME)."
#: The prefill backend a decode-only backend is paired with unless ``--backend DECODE+PREFILL`` or
#: ``--prefill-backend`` says otherwise: FlashInfer's paged prefill, the per-prompt winner of the committed H200
#: serving run at chunk 2048 and 512.
DEFAULT_PREFILL = "flashinfer-prefill-paged"
GIB = 1 << 30
#: What a bare ``--search`` (no KNOBS) stands for: the rate search alone. Not a string a user can type as KNOBS, so
#: ``--search ""`` (an empty knob list) is told apart from it and refused.
RATE_ONLY = "\0rate-only"


MAX_RATE_SCALE = 1e6
MAX_GPU_MEMORY_GIB = 1e6
MAX_KV_BUDGET_TOKENS = 1 << 40


def parse_slo(text: str) -> tuple[float, float, float]:
    """``ttft=MS,tpot=MS[,attainment=P%|FRACTION]`` → (ttft s, tpot s, attainment 0–1); missing items keep the
    defaults (500 ms, 50 ms, 90 %).

    Raises:
        ProfattnError: no item, an unknown item or one given twice, a value that is not a positive number, an
            attainment outside (0, 100 %].
    """
    vals = {"ttft": 0.5, "tpot": 0.05, "attainment": 0.9}
    items = [s.strip() for s in text.split(",")]
    if not any(items):
        raise ProfattnError(f"--slo {text!r}: give ttft=MS, tpot=MS and/or attainment=P%")
    if not all(items):
        raise ProfattnError(f"--slo {text!r}: an empty item (two commas, or one at an end)")
    seen: set[str] = set()
    for item in items:
        key, eq, raw = (s.strip() for s in item.partition("="))
        if not eq or key not in vals:
            raise ProfattnError(f"--slo {text!r}: {item!r} is not ttft=MS, tpot=MS or attainment=P%")
        if key in seen:
            raise ProfattnError(f"--slo {text!r}: {key} given twice")
        seen.add(key)
        pct = raw.endswith("%")
        num = raw.rstrip("%").removesuffix("ms").strip()
        if not re.fullmatch(r"[0-9]+(\.[0-9]*)?", num) or float(num) <= 0:
            raise ProfattnError(f"--slo {key}={raw!r} must be a positive number")
        v = float(num)
        if key == "attainment":
            v = v / 100 if pct or v > 1 else v
            if not 0 < v <= 1:
                raise ProfattnError(f"--slo attainment={raw!r} must be in (0, 100 %]")
            vals[key] = v
        else:
            vals[key] = v / 1000.0
    return vals["ttft"], vals["tpot"], vals["attainment"]


def _same_dtype(name: str, dtype: str) -> bool:
    from profattn.workload import parse_dtype

    try:
        return parse_dtype(name) == dtype
    except ProfattnError:
        return False


def _pairs(backends: tuple[str, ...], prefill: str):
    from profattn.analysis.simulation.replay import BackendPair

    from profattn.interfaces import Layout, adoption_of

    out = []
    for spec in backends:
        dec, plus, pre = (s.strip() for s in spec.partition("+"))
        if not dec or (plus and not pre):
            raise ProfattnError(f"--backend {spec!r}: give DECODE or DECODE+PREFILL")
        for name in (dec, pre or prefill):
            a = adoption_of(name)
            if a is not None and a.reads is not Layout.PAGED:
                # its cells timed the kernel on a contiguous copy made outside the timing: priced as is, a serving
                # step would leave out the per-step gather of the paged cache (recommend prices it; this does not)
                raise ProfattnError(f"--backend {spec!r}: {name} reads a contiguous K/V cache, not the paged cache a "
                                    "serving engine holds (its measured time leaves out the gather); simulate paged "
                                    "backends (e.g. triton-paged-decode, flashinfer-decode-tc, flashinfer-prefill-paged, "
                                    "triton-paged-prefill)")
        out.append(BackendPair(dec, pre or prefill))
    return out


def _ceilings(store, gpu: str):
    """The ceilings of every stored run on ``gpu`` whose results.json is still readable, and the GPU's memory."""
    from profattn.results import read_results

    found, memory = [], []
    for r in store.runs():
        if r.gpu != gpu:
            continue
        try:
            run = read_results(r.path)
        except (ProfattnError, OSError):
            continue
        if run.ceilings is not None:  # a CPU run measures none
            found.append(run.ceilings)
        if run.environment.total_memory_bytes:
            memory.append(run.environment.total_memory_bytes)
    return found, (max(memory) if memory else None)


def gpu_memory_bytes(store, gpu: str) -> int | None:  # noqa: ANN001
    """The memory of ``gpu`` as its stored runs recorded it (the largest; None: no readable run recorded it)."""
    return _ceilings(store, gpu)[1]


def simulation_inputs(db: str | None, gpu: str | None, model, kv_dtypes, max_num_batched_tokens: int,  # noqa: ANN001
                      max_num_seqs: int):
    """What a simulation of ``model`` reads from the store at ``db`` on ``gpu`` (None: the store's only GPU):
    ``(gpu name, its cells, the median ceilings, the GPU's memory in bytes or None, the measured-cells source, the
    rest-of-step estimate and the attention shape per KV dtype of kv_dtypes)``.

    Raises:
        ProfattnError: no store, an unknown GPU, no run with readable ceilings.
    """
    from profattn.analysis.selection.recommend import resolve_gpu
    from profattn.analysis.simulation.stepcost import AttentionShape, MeasuredCells, RestOfStep, median_ceilings
    from profattn.store import open_store

    with open_store(db, create=False) as store:
        gpu_name = resolve_gpu(store, gpu)
        if gpu_name not in store.cuda_gpus():  # before any run's results.json is read
            raise ProfattnError(f"the store's runs on {gpu_name!r} are CPU runs: simulate prices a GPU's serving "
                                "steps from its measured cells and ceilings (import a GPU run, e.g. `profattn db "
                                "import examples/h200-serving`, and give --gpu)")
        cells = store.cells_on(gpu_name)
        ceilings, memory = _ceilings(store, gpu_name)
    ceil = median_ceilings(ceilings)
    shapes = {k: AttentionShape.of_model(model, k) for k in kv_dtypes}
    sources = {k: MeasuredCells(cells, shapes[k], ceil) for k in kv_dtypes}
    rest = {k: RestOfStep(model, ceil, max_num_batched_tokens, max_num_seqs) for k in kv_dtypes}
    return gpu_name, cells, ceil, memory, sources, rest, shapes


def _validate(run_dir: str, simulation_path: str | None) -> None:
    """``--validate RUN``: the priced parts of the simulation.json against RUN's cells, printed as Markdown."""
    import json

    from profattn.analysis.simulation.validate import check_prices
    from profattn.report.simulate import validation_lines
    from profattn.results import read_results

    run = read_results(run_dir)  # the run first: a directory without results.json is named as such
    sim = Path(simulation_path) if simulation_path else Path(run_dir).resolve().parent / "simulation.json"
    where = str(sim) if simulation_path else f"{sim} (the simulation.json beside RUN; give --simulation FILE)"
    if sim.is_dir():
        raise ProfattnError(f"{where}: a directory, not a simulation.json")
    try:
        doc = json.loads(sim.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfattnError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfattnError(f"{where}: cannot be read ({exc.strerror or type(exc).__name__})".splitlines()[0]) from None
    except ValueError:
        raise ProfattnError(f"{where}: not JSON (write one with profattn simulate --out DIR)") from None
    try:
        check = check_prices(doc, run.cells)
    except ProfattnError as exc:
        raise ProfattnError(f"{sim}: {exc}") from None
    click.echo("\n".join(validation_lines(check)))


@main.command()
@click.option("--requests", "requests_path", default=None, metavar="FILE|poisson:...",
              help="Request trace: CSV (arrived_at,num_prefill_tokens,num_decode_tokens; or Azure's TIMESTAMP,ContextTokens,"
                   "GeneratedTokens), Mooncake's JSONL (timestamp,input_length,output_length,hash_ids: block ids for "
                   "prefix caching), or a Poisson load: poisson:rate=R,n=N,prompt=MEDIAN[:SIGMA],output=MEDIAN[:SIGMA][,seed=S].")
@click.option("--rate-scale", type=float, default=None, metavar="X", help="Multiply the trace's arrival rate by X (default 1).")
@click.option("--rate", type=float, default=None, metavar="R", help="Replay the trace at R requests/s (instead of --rate-scale).")
@click.option("--model", "model_spec", default=None, metavar="NAME|FIELDS",
              help="llama-3-8b, llama-3.1-8b, llama-3-70b, qwen2.5-7b, qwen2.5-72b, mistral-7b, with tp=N (llama-3-70b,tp=8), "
                   "or fields: layers=,hq=,hkv=,d=,hidden=,intermediate=,vocab=.")
@click.option("--backend", "backends", multiple=True, metavar="DECODE[+PREFILL]",
              help="A decode backend, optionally paired with the prefill backend that takes the prompt chunks (repeatable).")
@click.option("--prefill-backend", default=DEFAULT_PREFILL, show_default=True, metavar="NAME",
              help="Prefill backend paired with every --backend that names none.")
@click.option("--page-size", "page_sizes", type=int, multiple=True, metavar="N", help="KV page size in tokens (vLLM's block_size; default 16; repeatable).")
@click.option("--kv-dtype", "kv_dtypes", multiple=True, metavar="bf16|fp8", help="KV cache storage (default the model's dtype; repeatable).")
@click.option("--gpu-memory", type=float, default=None, metavar="GiB", help="GPU memory (default: the stored runs' GPU's).")
@click.option("--gpu-memory-utilization", type=float, default=0.9, show_default=True, metavar="F",
              help="Share of the GPU memory the engine may use (vLLM's gpu_memory_utilization).")
@click.option("--kv-budget-tokens", type=int, default=None, metavar="N", help="KV cache size in tokens (instead of the memory budget).")
@click.option("--max-num-batched-tokens", type=int, default=8192, show_default=True, metavar="N", help="Tokens one step may schedule.")
@click.option("--max-num-seqs", type=int, default=1024, show_default=True, metavar="N", help="Requests running at once.")
@click.option("--prefix-caching", "prefix_caching", type=click.Choice(["on", "off", "both"]), default="on", show_default=True,
              help="Automatic prefix caching over a trace's block ids (the Mooncake JSONL's hash_ids; vLLM V1's default "
                   "is on); both: every deployment with and without it. A CSV trace carries no ids: nothing to hit.")
@click.option("--chunked-prefill/--no-chunked-prefill", default=True, show_default=True, help="Split prompts longer than the budget left.")
@click.option("--slo", "slo_text", default="ttft=500,tpot=50,attainment=90%", show_default=True, metavar="ttft=MS,tpot=MS[,attainment=P%]",
              help="Latency targets and the share of requests that must meet both.")
@click.option("--search", "search_axes", is_flag=False, flag_value=RATE_ONLY, default=RATE_ONLY, metavar="[KNOBS]",
              help="Search the highest rate scale that meets the SLO (the default); with KNOBS (max_num_batched_tokens,"
                   "max_num_seqs[,chunked_prefill][,page_size][,kv_dtype]) also the scheduler setting that serves the "
                   "most per deployment, one knob at a time from vLLM's defaults (tokens 512–16,384, seqs 32–1,024).")
@click.option("--no-search", is_flag=True, default=False, help="Only the trace's rate: no rate search.")
@click.option("--search-resolution", type=float, default=0.05, show_default=True, metavar="F", help="Stop the rate search within this relative bracket.")
@click.option("--gpu", default=None, metavar="NAME", help="GPU as the store names it (default: the store's only GPU).")
@click.option("--db", default=None, metavar="PATH", help=_DB_HELP)
@click.option("--out", "out_dir", default=None, metavar="DIR", help="Write simulation.json, simulation.md and report.html into DIR.")
@click.option("--json", "json_path", default=None, metavar="FILE", help="Write the versioned JSON (schema profattn.simulation) to FILE.")
@click.option("--markdown", "md_path", default=None, metavar="FILE", help="Write the GitHub Markdown summary to FILE.")
@click.option("--html", "html_path", default=None, metavar="FILE", help="Write the HTML report to FILE.")
@click.option("--steps", "n_steps", type=int, default=12, show_default=True, metavar="N", help="Step shapes to sample for a measured replay.")
@click.option("--export-steps", "steps_path", default=None, metavar="FILE",
              help="Write the sampled step shapes as `profattn profile --workload` lines (step, decode and prefill calls) to FILE.")
@click.option("--validate", "validate_run", default=None, metavar="RUN",
              help="Check a simulation's step prices against RUN, a `profattn profile` of its --export-steps shapes (the "
                   "GPU replay): priced vs measured per part and per step, flagged beyond each price's band. Reads "
                   "--simulation FILE (default: simulation.json beside RUN, in its parent directory); simulates nothing.")
@click.option("--simulation", "simulation_path", default=None, metavar="FILE",
              help="The simulation.json --validate checks.")
def simulate(requests_path: str | None, rate_scale: float | None, rate: float | None, model_spec: str, backends: tuple[str, ...],
             prefill_backend: str, page_sizes: tuple[int, ...], kv_dtypes: tuple[str, ...], gpu_memory: float | None,
             gpu_memory_utilization: float, kv_budget_tokens: int | None, max_num_batched_tokens: int, max_num_seqs: int,
             prefix_caching: str, chunked_prefill: bool, slo_text: str, search_axes: str, no_search: bool, search_resolution: float, gpu: str | None, db: str | None,
             out_dir: str | None, json_path: str | None, md_path: str | None, html_path: str | None, n_steps: int,
             steps_path: str | None, validate_run: str | None, simulation_path: str | None) -> None:
    """Serve a request trace with each attention backend through a continuous-batching scheduler and say which
    serves the most load within the SLO, and why."""
    if validate_run is not None:
        _validate(validate_run, simulation_path)
        return
    if simulation_path is not None:
        raise ProfattnError("--simulation is read by --validate RUN only")
    for flag, v in (("--requests", requests_path), ("--model", model_spec), ("--backend", backends)):
        if not v:
            raise ProfattnError(f"give {flag} (or --validate RUN to check a simulation's prices)")
    assert requests_path is not None and model_spec is not None
    from profattn.analysis.simulation.replay import SLO, Deployment
    from profattn.analysis.simulation.scheduler import SchedulerConfig, kv_capacity
    from profattn.analysis.simulation.simulate import simulate as run
    from profattn.report import simulate as out
    from profattn.workload.contract import parse_kv_dtype
    from profattn.workload.models import parse_model_spec
    from profattn.workload.requests import MAX_RATE_PER_S, load_requests, parse_synthetic_spec

    from profattn.analysis.simulation.operating import DEFAULT_GRID, parse_axes

    search = not no_search
    if no_search and search_axes != RATE_ONLY:
        raise ProfattnError("give --search KNOBS or --no-search, not both")
    knob_axes = parse_axes(search_axes) if search_axes != RATE_ONLY else ()
    if rate is not None and rate_scale is not None:
        raise ProfattnError("give --rate or --rate-scale, not both")
    for name, v, top in (("--rate", rate, MAX_RATE_PER_S), ("--rate-scale", rate_scale, MAX_RATE_SCALE),
                         ("--gpu-memory", gpu_memory, MAX_GPU_MEMORY_GIB)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise ProfattnError(f"{name} must be a positive number, got {v}")
        if v is not None and not (1.0 / top <= v <= top):
            raise ProfattnError(f"{name} {v:g} is outside [{1.0 / top:g}, {top:g}]")
    if not 0 < search_resolution < 1:
        raise ProfattnError(f"--search-resolution must be in (0, 1), got {search_resolution}")
    if n_steps < 0:
        raise ProfattnError(f"--steps must be ≥ 0, got {n_steps}")
    if kv_budget_tokens is not None and gpu_memory is not None:
        raise ProfattnError("give --gpu-memory or --kv-budget-tokens, not both")
    if kv_budget_tokens is not None and not 1 <= kv_budget_tokens <= MAX_KV_BUDGET_TOKENS:
        raise ProfattnError(f"--kv-budget-tokens must be an integer in [1, {MAX_KV_BUDGET_TOKENS:,}], got {kv_budget_tokens}")
    inputs = [] if requests_path.startswith("poisson:") else [requests_path]
    files = {}
    if out_dir is not None:
        d = Path(out_dir)
        if d.exists() and not d.is_dir():
            raise ProfattnError(f"--out {d} is a file; give a directory")
        files = {"--out": [output_file(d / n, "--out", inputs=inputs) for n in ("simulation.json", "simulation.md", "report.html")]}
    json_out = output_file(json_path, "--json", inputs=inputs) if json_path else None
    md_out = output_file(md_path, "--markdown", inputs=inputs) if md_path else None
    html_out = output_file(html_path, "--html", inputs=inputs) if html_path else None
    steps_out = output_file(steps_path, "--export-steps", inputs=inputs) if steps_path else None
    distinct_outputs(("--json", json_out), ("--markdown", md_out), ("--html", html_out), ("--export-steps", steps_out),
                     *((f"--out ({p.name})", p) for p in files.get("--out", [])))

    SchedulerConfig(num_gpu_blocks=1, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                    block_size=page_sizes[0] if page_sizes else 16)  # the knobs checked before anything is read
    for p in page_sizes:
        SchedulerConfig(num_gpu_blocks=1, block_size=p)
    model = parse_model_spec(model_spec)
    trace = parse_synthetic_spec(requests_path) if requests_path.startswith("poisson:") else load_requests(requests_path)
    if trace.duration_s <= 0:
        raise ProfattnError(f"--requests: its {len(trace)} request(s) all arrive at once: a load (req/s, the rate "
                            "search, --rate) needs at least two requests at different times")
    if not 1.0 / MAX_RATE_PER_S <= trace.rate_per_s <= MAX_RATE_PER_S:
        raise ProfattnError(f"--requests: its {len(trace):,} requests arrive at {trace.rate_per_s:.3g} req/s, outside "
                            f"[{1.0 / MAX_RATE_PER_S:g}, {MAX_RATE_PER_S:g}] req/s")
    scale = rate_scale if rate_scale is not None else (rate / trace.rate_per_s if rate is not None else 1.0)
    slo = SLO(*parse_slo(slo_text))
    kv_list = []
    for k in kv_dtypes or (model.dtype,):
        canon = None if k.lower() in ("none", "auto") or _same_dtype(k, model.dtype) else parse_kv_dtype(k)
        if canon not in kv_list:
            kv_list.append(canon)
    pages = list(dict.fromkeys(page_sizes or (16,)))
    pairs = list(dict.fromkeys(_pairs(backends, prefill_backend)))

    source_kv = list(kv_list)
    if "kv_dtype" in knob_axes:  # the axis tries the model's dtype and FP8 whatever --kv-dtype gave
        source_kv += [k for k in DEFAULT_GRID["kv_dtype"] if k not in source_kv]
    top_tokens = max([max_num_batched_tokens, *(DEFAULT_GRID["max_num_batched_tokens"] if knob_axes else ())])
    top_seqs = max([max_num_seqs, *(DEFAULT_GRID["max_num_seqs"] if knob_axes else ())])
    inputs_ = simulation_inputs(db, gpu, model, source_kv, top_tokens, top_seqs)
    gpu_name, cells, ceil, memory, source_by_kv, rest, shapes = inputs_
    mem = int(gpu_memory * GIB) if gpu_memory is not None else memory
    deployments = []
    with_ids = trace.block_ids is not None
    caching = [False] if not with_ids else {"on": [True], "off": [False], "both": [True, False]}[prefix_caching]
    for kv, page, pair, apc in product(kv_list, pages, pairs, caching):
        cap = kv_capacity(model, block_size=page, kv_dtype=kv, gpu_memory_bytes=mem,
                          gpu_memory_utilization=gpu_memory_utilization, kv_budget_tokens=kv_budget_tokens,
                          max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs)
        cfg = SchedulerConfig(num_gpu_blocks=cap.num_blocks, max_num_batched_tokens=max_num_batched_tokens,
                              max_num_seqs=max_num_seqs, enable_chunked_prefill=chunked_prefill, block_size=page,
                              enable_prefix_caching=apc)
        deployments.append(Deployment(pair, cfg, cap, kv))

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    bar = Progress(TextColumn("simulate: {task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f} %"),
                   TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal)
    task = bar.add_task("", total=1.0)

    def progress(label: str, fraction: float) -> None:
        """A label (a deployment, a rate probe or a knob setting) and its share done (requests, or settings)."""
        bar.update(task, description=escape(label), completed=fraction)

    with bar:
        report = run(trace.scaled(scale) if scale != 1.0 else trace, deployments, source_by_kv, model, rest=rest,
                     shapes=shapes, slo=slo, cells=cells, gpu=gpu_name, ceilings=ceil, search=search,
                     resolution=search_resolution, sample=n_steps, progress=progress, knob_axes=knob_axes)
    click.echo(out.text_report(report))
    written = []
    if files:
        j, m, h = files["--out"]
        written += [out.write_json(report, j), out.write_markdown(report, m), out.write_html(report, h)]
    if json_out:
        written.append(out.write_json(report, json_out))
    if md_out:
        written.append(out.write_markdown(report, md_out))
    if html_out:
        written.append(out.write_html(report, html_out))
    if steps_out:
        from profattn.files import write_text_atomic

        written.append(write_text_atomic(steps_out, "\n".join(out.export_lines(report)) + "\n"))
    for p in written:
        click.echo(f"wrote {p}")
    sys.stdout.flush()

