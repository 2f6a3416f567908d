"""Trace parsing: profattn vs HolisticTraceAnalysis vs torch-tb-profiler — wall time and peak RSS.

    python benchmarks/trace_parse.py TRACE [TRACE ...] [--tools profattn-parse,profattn-analyze,hta-json,...]

Every (trace, tool) pair runs in a fresh child process (``python benchmarks/trace_parse.py --child TOOL
TRACE``), so each row's peak RSS is that tool's alone: the parent reads the child's ``ru_maxrss`` from
``os.wait4`` (Linux: KiB). ``time`` is the child's own measurement of the work after its imports;
``rss after imports`` is the child's RSS before the work starts (what the libraries cost to load).
A tool that is not installed gives a "not installed" row; a tool that fails or runs past ``--timeout``
gives the reason. This is a benchmark, not a test: nothing here runs in CI.

Tools (each produces per-kernel launch shapes and CPU-op input shapes, so the work is comparable):

- ``profattn-parse``: :func:`profattn.trace.load_trace` (kernels with grid/block/registers/shared memory,
  launchers, ranges, ops with ``Input Dims``/``Input type``/``Concrete Inputs``, attribution).
- ``profattn-analyze``: ``load_trace`` + :func:`profattn.analysis.calls.find.find_attention_calls` (everything
  ``profattn analyze`` computes, without writing HTML).
- ``hta-json`` / ``hta-ijson``: HolisticTraceAnalysis' trace parser, ``hta.common.trace_parser.
  parse_trace_dataframe`` (what ``TraceAnalysis`` runs per rank), with the launch-shape args enabled
  (``threads::grid``, ``threads::block``, ``threads::registers``, ``kernel::shared_memory``, ``sm::*``)
  besides correlation, stream, device, External id and the CPU ops' input dims/types/concrete inputs;
  backend ``JSON`` (HTA's default) or ``IJSON_BATCH_AND_COMPRESS`` (its streaming one; without
  ``sm::blocks``, which makes HTA 0.5's ijson path fail under pandas 3).
- ``tb-profiler``: torch-tb-profiler's loader, ``RunProfileData.parse`` + ``process()`` (what TensorBoard's
  plugin runs to show kernel stats).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

TOOLS = ("profattn-parse", "profattn-analyze", "hta-json", "hta-ijson", "tb-profiler")
_PACKAGE = {"profattn-parse": "profattn", "profattn-analyze": "profattn", "hta-json": "HolisticTraceAnalysis",
            "hta-ijson": "HolisticTraceAnalysis", "tb-profiler": "torch-tb-profiler"}
_HTA_ARGS = ("index::external_id", "correlation::cpu_gpu", "cuda::device", "cuda::stream", "threads::grid",
             "threads::block", "threads::registers", "kernel::shared_memory", "sm::blocks", "sm::warps",
             "sm::occupancy", "cpu_op::input_dims", "cpu_op::input_type", "cpu_op::concrete_inputs")


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---- the child: one tool on one trace ------------------------------------------------------------


def _child(tool: str, path: str) -> dict:
    """Import the tool, then time its work on ``path``; returns what it found (for a sanity check)."""
    if tool.startswith("profattn"):
        from profattn.analysis.calls.find import find_attention_calls
        from profattn.trace.kineto import load_trace

        imported = _rss_mib()
        start = time.perf_counter()
        trace = load_trace(path)
        found = {"kernels": len(trace.kernels), "cpu_ops": len(trace.ops)}
        if tool == "profattn-analyze":
            found["attention_calls"] = len(find_attention_calls(trace).calls)
    elif tool.startswith("hta"):
        from hta.common.trace_parser import parse_trace_dataframe
        from hta.configs.parser_config import ParserBackend, ParserConfig

        available = ParserConfig.get_all_available_args()
        args = ParserConfig.get_default_args()
        # HTA 0.5's ijson backend fails on sm::blocks ("blocks per SM") with pandas 3 ("Invalid value '[]' for
        # dtype 'float64'"): that one arg is left out there; the launch shape itself (grid, block, ...) stays.
        keys = [k for k in _HTA_ARGS if not (tool == "hta-ijson" and k == "sm::blocks")]
        args += [available[k] for k in keys if available[k] not in args]
        cfg = ParserConfig(args)
        cfg.set_parser_backend(ParserBackend.JSON if tool == "hta-json" else ParserBackend.IJSON_BATCH_AND_COMPRESS)
        imported = _rss_mib()
        start = time.perf_counter()
        _, df, symbols = parse_trace_dataframe(path, cfg)
        names = symbols.get_sym_table()
        cat = df["cat"].map(lambda i: names[i] if 0 <= i < len(names) else "")
        found = {"kernels": int((cat == "kernel").sum()), "cpu_ops": int((cat == "cpu_op").sum()),
                 "has_grid": "grid" in df.columns or "grid_dim_x" in df.columns}
    elif tool == "tb-profiler":
        import tempfile

        from torch_tb_profiler.profiler.data import RunProfileData

        imported = _rss_mib()
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as cache:
            profile = RunProfileData.parse("worker0", None, path, cache)
            profile.process()
        stats = profile.kernel_stat
        found = {"kernels": int(stats["count"].sum()) if stats is not None else 0}
    else:
        raise SystemExit(f"unknown tool {tool!r}; valid: {', '.join(TOOLS)}")
    return {"seconds": time.perf_counter() - start, "rss_after_imports_mib": imported, "found": found}


# ---- the parent: run children, print the table ---------------------------------------------------


def _version(tool: str) -> str | None:
    try:
        return metadata.version(_PACKAGE[tool])
    except metadata.PackageNotFoundError:
        return None


def _run(tool: str, path: Path, timeout: float) -> dict:
    """Run one child; its result plus ``peak_rss_mib`` from ``wait4``, or ``error``."""
    if _version(tool) is None:
        return {"error": "not installed"}
    command = [sys.executable, __file__, "--child", tool, str(path)]
    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"trace_parse.{os.getpid()}.{tool}.out"
    with open(out_path, "w+b") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                child.kill()
                _, status, usage = os.wait4(child.pid, 0)
                return {"error": f"ran past {timeout:.0f} s", "peak_rss_mib": usage.ru_maxrss / 1024}
            time.sleep(0.05)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode("utf-8", errors="replace")
    out_path.unlink(missing_ok=True)
    lines = [line for line in text.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        last = next((line for line in reversed(text.splitlines()) if line.strip()), "no output")
        return {"error": f"failed (exit {child.returncode}): {last[:120]}", "peak_rss_mib": usage.ru_maxrss / 1024}
    return {**json.loads(lines[-1]), "peak_rss_mib": usage.ru_maxrss / 1024}


def _table(rows: list[dict]) -> str:
    head = ("| trace | size | tool | version | time (s) | peak RSS (MiB) | RSS after imports (MiB) | "
            "speed-up vs reference | peak RSS / reference | found |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        if "error" in r:
            rss = f"{r['peak_rss_mib']:,.0f}" if "peak_rss_mib" in r else "–"
            lines.append(f"| {r['trace']} | {r['size']} | {r['tool']} | {r['version'] or '–'} | {r['error']} | {rss} "
                         "| – | – | – | – |")
            continue
        ref = r.get("reference")
        speed = f"{ref['seconds'] / r['seconds']:.1f}×" if ref else "–"
        memory = f"{r['peak_rss_mib'] / ref['peak_rss_mib']:.2f}×" if ref else "–"
        found = ", ".join(f"{k} {v}" for k, v in r["found"].items())
        lines.append(f"| {r['trace']} | {r['size']} | {r['tool']} | {r['version']} | {r['seconds']:.2f} | "
                     f"{r['peak_rss_mib']:,.0f} | {r['rss_after_imports_mib']:,.0f} | {speed} | {memory} | {found} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, from {', '.join(TOOLS)}")
    parser.add_argument("--reference", default="hta-json", help="the tool the speed-up and RSS ratio columns compare with")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per child")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    parser.add_argument("--child", metavar="TOOL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, str(args.traces[0]))), flush=True)
        return
    if not args.traces:
        parser.error("name at least one trace file")
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = sorted(set(tools) - set(TOOLS))
    if unknown:
        parser.error(f"unknown tool(s) {', '.join(unknown)}; valid: {', '.join(TOOLS)}")
    rows = []
    for path in args.traces:
        size = f"{path.stat().st_size / 1e6:,.1f} MB"
        results = {}
        for tool in tools:
            print(f"# {path.name}: {tool} ...", file=sys.stderr, flush=True)
            results[tool] = _run(tool, path, args.timeout)
        reference = results.get(args.reference)
        if reference is not None and "error" in reference:
            reference = None
        for tool in tools:
            rows.append({"trace": path.name, "size": size, "tool": tool, "version": _version(tool),
                         **results[tool], "reference": reference if tool != args.reference else None})
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}; reference: {args.reference}")
    print(_table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
