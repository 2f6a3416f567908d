"""The selection policy judged on data it was not fitted to: every committed H200 run imported into a temporary
store, then whole slices held out in turn (each value of head_dim, GQA group, batch decade, kv decade, page size and
phase) and each workload held out alone, the policy learnt from the rest and scored against what was measured on the
held-out workloads, beside constant baselines learnt from the same rest (the most frequent winner of the workload's
regime, the best single backend, a fixed priority list like vLLM's).

Prints the README's tables (GitHub Markdown: the policy against the best constant; the headline and the drop-in pick
against "always sdpa-cudnn" and "always flashinfer-decode-tc") and the leave-one-workload-out numbers per phase. A hit is a pick within
3 % or within noise of the measured best; regret is t_pick / t_best − 1.

Usage: ``python benchmarks/selection.py [--gpu H200 | --runs DIR ...] [--json FILE]`` (CPU; ~1 min on a loaded 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profattn.analysis.selection.policy import SliceResult, store_ceilings, validate, validation_dict  # noqa: E402
from profattn.errors import ProfattnError  # noqa: E402
from profattn.report.recommend import score_text, two_scores_table, validation_table  # noqa: E402
from profattn.store import ResultsStore, import_runs, open_store  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from oneline_args import new_file_problem  # noqa: E402


#: The GPU whose committed runs the benchmarks read by default: the reference corpus (README's tables) is H200's.
DEFAULT_GPU = "H200"


def add_gpu_option(parser: argparse.ArgumentParser) -> None:
    """The ``--gpu`` option of the scripts that read the committed runs (:func:`committed_runs`' ``gpu``)."""
    parser.add_argument("--gpu", default=DEFAULT_GPU,
                        help=f"the committed runs of the GPU whose name contains this (default {DEFAULT_GPU})")


def run_gpu(results: Path) -> str | None:
    """The CUDA device name a ``results.json`` was measured on (its ``environment.device_name``), or None for a CPU
    run or a file that is not a results document."""
    try:
        env = json.loads(results.read_text()).get("environment") or {}
    except (OSError, ValueError, AttributeError):
        return None
    return env.get("device_name") if isinstance(env, dict) and env.get("device") == "cuda" else None


def committed_runs(exclude: Sequence[Path] = (), gpu: str | None = DEFAULT_GPU) -> list[Path]:
    """Every run directory under ``examples/`` measured on a CUDA GPU whose name contains ``gpu`` (case-insensitive;
    None: any GPU), less those at or under an ``exclude`` folder.

    Raises:
        ProfattnError: an ``exclude`` is not a folder, ``gpu`` is empty, or no committed run matches (the message
            names the GPUs there are).
    """
    bad = [str(e) for e in exclude if not Path(e).is_dir()]
    if bad:
        raise ProfattnError(f"--exclude takes run folders; not a directory: {', '.join(bad)}")
    if gpu is not None and not gpu.strip():
        raise ProfattnError("--gpu is empty: give part of a GPU's name (H200, H100)")
    ex = [Path(e).resolve() for e in exclude]
    out, names = [], set()
    for p in sorted((REPO / "examples").rglob("results.json")):
        d = p.parent.resolve()
        if any(d == e or e in d.parents for e in ex):
            continue
        if (name := run_gpu(p)) is not None:
            names.add(name)
            if gpu is None or gpu.lower() in name.lower():
                out.append(p.parent)
    if not out:
        there = ", ".join(sorted(names)) or "none"
        raise ProfattnError(f"no committed run was measured on a GPU named like {gpu!r} (the committed GPUs: {there})")
    return out


@contextmanager
def one_gpu_store(runs: Sequence[Path]) -> Iterator[tuple[ResultsStore, str]]:
    """A temporary store holding ``runs`` and the one CUDA GPU they were measured on.

    Raises:
        ProfattnError: the runs hold no or several GPUs (or a run cannot be read).
    """
    with tempfile.TemporaryDirectory() as tmp, open_store(Path(tmp) / "s.sqlite") as store:
        import_runs(store, runs)
        gpus = store.cuda_gpus()
        if len(gpus) != 1:
            if not gpus:
                raise ProfattnError("none of the runs was measured on a CUDA GPU: give the run folders of one GPU")
            raise ProfattnError(f"the runs hold {len(gpus)} GPUs ({', '.join(gpus)}): give the runs of one")
        yield store, gpus[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="*", type=Path, default=None, help="run directories (default: every committed run of --gpu)")
    add_gpu_option(ap)
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers as JSON")
    args = ap.parse_args()
    if args.json is not None and (why := new_file_problem(args.json, "--json")):
        print(f"selection: {why}", file=sys.stderr)
        return 2
    try:
        runs = args.runs or committed_runs(gpu=args.gpu)
        with one_gpu_store(runs) as (store, gpu):
            cells = store.cells_on(gpu)
            t = time.perf_counter()
            v = validate(cells, gpu, ceilings=store_ceilings(store.runs(), gpu))
            took = time.perf_counter() - t
    except ProfattnError as exc:
        print(f"selection: {exc}", file=sys.stderr)
        return 2
    print(f"{len(runs)} runs, {len(cells):,} cells on {gpu}; validated in {took:.1f} s (CPU)\n")
    print(validation_table(v))
    print("the headline and the drop-in pick (issue 34):\n")
    print(two_scores_table(v))
    if v.lowo is not None:
        print("leave one workload out, by phase:")
        for phase in sorted({h.phase for h in v.lowo.held_out}):
            sl = SliceResult("workload", phase, tuple(h for h in v.lowo.held_out if h.phase == phase))
            b = sl.baseline(sl.best_baseline)
            print(f"  {phase:<8} policy {score_text(sl.policy)}  |  drop-in {score_text(sl.drop_in)}  |  best constant "
                  f"{score_text(b)}")
    if args.json is not None:
        args.json.write_text(json.dumps(validation_dict(v), indent=1) + "\n")
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
