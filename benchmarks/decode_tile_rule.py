"""Benchmark: the paged decode kernel's tile size (tokens per inner-loop tile) against a grid of launches, per point.

``--measure DIR`` (GPU): for each decode point, times our kernel (CUDA-graph replay, read flush, median of ~30 ms
of replays) in every launch of a grid — tiles of 32, 64 and 128 tokens × the split count the split rule
(:func:`~profattn.backends.triton_paged.choose_num_splits`) picks with each of those tiles and one split × 2, 3
and 4 pipeline stages, 4 warps, the automatic combine (a grid that holds every launch
:func:`~profattn.backends.triton_paged.choose_launch` picks counting tiles in tokens or in bytes) — and cuDNN through SDPA on the contiguous copy of the
cache (what a paged decode can reach: it reads the same bytes without a block table). Every launch is checked
against SDPA's output (relative error ≤ 2e-2, else not a candidate). One JSON line per point in
``DIR/tile_rule.jsonl``, written as points finish; points are taken in the order of their sets:

- ``fit`` — head_dim 64: batch {8, 32, 96, 200} × kv {1,024, 4,096, 16,384} × (Hq, Hkv, page) ∈ {(8, 8, 16),
  (16, 4, 64), (8, 2, 16)}; the set a rule is chosen on;
- ``check`` — the paged decode shapes of ``--check FILE`` (head_dim 64 first) (one workload spec per line; default the second
  held-out draw, ``examples/h200-heldout-2/workloads.txt``), which no rule was chosen on;
- ``d128`` — head_dim 128 controls: batch {8, 64, 160} × kv {2,048, 8,192} × (Hq, Hkv, page) ∈ {(16, 8, 16),
  (8, 2, 64)}, skipped past ``--budget-s``.

``--evaluate FILE`` (CPU): per point, the launch two rules pick — ``tokens`` (tiles counted in tokens, as at
head_dim 128: :func:`choose_launch` with ``head_dim=128``) and ``bytes`` (:func:`choose_launch` with the point's
head_dim) — against the fastest measured launch of the grid: each rule's regret (time / best − 1), per set, and the
ratio to cuDNN on the contiguous copy. A rule's launch that the grid did not time is reported unmeasured.

    python benchmarks/decode_tile_rule.py --measure DIR [--check FILE] [--budget-s 500]
    python benchmarks/decode_tile_rule.py --evaluate examples/h200-decode-tile/tile_rule.jsonl
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's profattn, run from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))  # oneline_args

from oneline_args import Parser, fail as _fail  # noqa: E402

#: The grid's tiles (tokens) and the pipeline depths tried with each.
TILES = {32: (2, 3, 4), 64: (2, 3, 4), 128: (2, 3, 4)}
#: The relative error against SDPA cuDNN above which a launch is not a candidate (bf16 decode errors are ~2e-3).
MAX_REL_ERR = 2e-2


def fit_points() -> list[tuple[str, dict]]:
    """The ``fit`` and ``d128`` sets as (set, workload fields) pairs, in measuring order (``fit`` first)."""
    pts = [("fit", dict(batch=b, kv_len=kv, num_q_heads=hq, num_kv_heads=hkv, head_dim=64, page_size=p))
           for (hq, hkv, p), b, kv in itertools.product(((8, 8, 16), (16, 4, 64), (8, 2, 16)), (8, 32, 96, 200),
                                                        (1024, 4096, 16384))]
    pts += [("d128", dict(batch=b, kv_len=kv, num_q_heads=hq, num_kv_heads=hkv, head_dim=128, page_size=p))
            for (hq, hkv, p), b, kv in itertools.product(((16, 8, 16), (8, 2, 64)), (8, 64, 160), (2048, 8192))]
    return pts


def check_points(path: str) -> list[tuple[str, dict]]:
    """The paged bf16 decode workloads of a workload file (``key=value,…`` per line, ``#`` comments) as ``check``
    points.

    Raises:
        ValueError: a line that is not a workload spec.
    """
    from profattn.workload import parse_workload_spec

    pts = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            w = parse_workload_spec(line)
            if w.phase.value == "decode" and w.kv_layout.value == "paged" and w.dtype == "bfloat16":
                pts.append(("check", dict(batch=w.batch, kv_len=w.kv_len, num_q_heads=w.num_q_heads,
                                          num_kv_heads=w.num_kv_heads, head_dim=w.head_dim, page_size=w.page_size)))
    return pts


def grid(point: dict, num_sms: int) -> list[tuple[int, int, int]]:
    """The (tile tokens, split count, stages) launches timed at ``point``: per tile of :data:`TILES`, the split
    counts the split rule picks with each tile (as plans of this tile) and one split, at each depth — so the grid
    holds the launch :func:`choose_launch` picks counting tiles in tokens or in bytes."""
    from profattn.backends import triton_paged as tp

    b, hkv, kv = point["batch"], point["num_kv_heads"], point["kv_len"]
    ruled = {tp.choose_num_splits(batch=b, num_kv_heads=hkv, max_kv_len=kv, num_sms=num_sms, block_n=bn).num_splits
             for bn in TILES}
    out = set()
    for bn, depths in TILES.items():
        for s in ruled | {1}:
            splits = tp.split_plan(batch=b, num_kv_heads=hkv, max_kv_len=kv, num_splits=s, block_n=bn).num_splits
            out.update((bn, splits, ns) for ns in depths)
    return sorted(out)


def evaluate(path: str, num_sms: int = 132) -> list[dict]:
    """Per point of ``path``: the best measured launch and each rule's launch (``tokens``, ``bytes``) with its time
    (µs, None where the grid did not time it) and regret (time / best − 1), and cuDNN's time on the contiguous copy.

    Raises:
        ValueError: a line that is not JSON or a point without timed launches.
        KeyError: a point without its workload fields.
    """
    from profattn.backends import triton_paged as tp

    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"line {n} is not JSON") from exc
            ok = {(c["block_n"], c["splits"], c["stages"]): c["us"] for c in rec["launches"]
                  if c.get("us") is not None and c.get("err") is not None and c["err"] <= MAX_REL_ERR}
            if not ok:
                raise ValueError(f"line {n}: no timed launch")
            best_key = min(ok, key=ok.get)
            row = dict(set=rec["set"], batch=rec["batch"], kv_len=rec["kv_len"], num_q_heads=rec["num_q_heads"],
                       num_kv_heads=rec["num_kv_heads"], head_dim=rec["head_dim"], page_size=rec["page_size"],
                       best=best_key, best_us=ok[best_key], cudnn_us=rec.get("cudnn_us"), rules={})
            for rule, d in (("tokens", 128), ("bytes", rec["head_dim"])):
                launch = tp.choose_launch(batch=rec["batch"], num_kv_heads=rec["num_kv_heads"],
                                          max_kv_len=rec["kv_len"], num_sms=num_sms, head_dim=d)
                key = (launch.plan.block_n, launch.plan.num_splits, launch.num_stages)
                us = ok.get(key)
                row["rules"][rule] = dict(launch=key, us=us, regret=None if us is None else us / ok[best_key] - 1)
            rows.append(row)
    return rows


def print_evaluation(rows: list[dict]) -> None:
    """A table per point, then per set and rule: points measured, mean and worst regret, points within 3 %."""
    print("| set | B | kv | Hq/Hkv | d | page | best launch (tile, splits, stages) | best µs | tokens rule | "
          "bytes rule | cuDNN contiguous µs |")
    print("|---|---:|---:|---|---:|---:|---|---:|---|---|---:|")

    def cell(r: dict) -> str:
        return "unmeasured " + str(r["launch"]) if r["us"] is None else f"{r['us']:.1f} ({r['regret']:+.1%}) {r['launch']}"

    for r in rows:
        cud = "—" if r["cudnn_us"] is None else f"{r['cudnn_us']:.1f}"
        print(f"| {r['set']} | {r['batch']} | {r['kv_len']} | {r['num_q_heads']}/{r['num_kv_heads']} | "
              f"{r['head_dim']} | {r['page_size']} | {r['best']} | {r['best_us']:.1f} | {cell(r['rules']['tokens'])} | "
              f"{cell(r['rules']['bytes'])} | {cud} |")
    print()
    print("| set | head_dim | rule | points timed | mean regret | worst regret | within 3 % | mean ours / cuDNN |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for (s, d) in sorted({(r["set"], r["head_dim"]) for r in rows}):
        sub = [r for r in rows if r["set"] == s and r["head_dim"] == d]
        for rule in ("tokens", "bytes"):
            got = [r for r in sub if r["rules"][rule]["us"] is not None]
            if not got:
                print(f"| {s} | {d} | {rule} | 0 of {len(sub)} | — | — | — | — |")
                continue
            reg = [r["rules"][rule]["regret"] for r in got]
            vs = [r["rules"][rule]["us"] / r["cudnn_us"] for r in got if r["cudnn_us"]]
            print(f"| {s} | {d} | {rule} | {len(got)} of {len(sub)} | {statistics.mean(reg):.1%} | {max(reg):.1%} | "
                  f"{sum(x <= 0.03 for x in reg)} | {statistics.mean(vs):.2f} |" if vs else "— |")


def measure(out: str, check: str, budget_s: float, sets: tuple[str, ...] = ("fit", "check", "d128")) -> None:  # pragma: no cover - needs a GPU
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from profattn.backends import triton_paged as tp
    from profattn.harness.inputs import make_inputs
    from profattn.harness.timing import time_cuda_graph
    from profattn.workload import Workload

    t0 = time.time()
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    pts = fit_points()
    checks = sorted(check_points(check), key=lambda p: p[1]["head_dim"])
    pts = [p for p in pts if p[0] == "fit"] + checks + [p for p in pts if p[0] == "d128"]
    pts = [p for p in pts if p[0] in sets]
    os.makedirs(out)
    log = open(os.path.join(out, "tile_rule.jsonl"), "a")

    def gtime(fn) -> float:
        return time_cuda_graph(fn, dev, target_ms=30.0).median_us

    for n, (label, fields) in enumerate(pts):
        if time.time() - t0 > budget_s:
            print(f"budget: {len(pts) - n} points left unmeasured", flush=True)
            break
        w = Workload(phase="decode", q_len=1, kv_layout="paged", **fields)
        b, hkv, kv = w.batch, w.num_kv_heads, w.kv_len
        inp = make_inputs(w, dev, seed=b * 7 + kv + w.num_q_heads + w.head_dim)
        c, q3 = inp.paged, inp.q[:, :, 0]
        rec = dict(set=label, **fields, kv_bytes=w.kv_bytes, launches=[])
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            fn = lambda: F.scaled_dot_product_attention(inp.q, inp.k, inp.v, enable_gqa=True)  # noqa: E731
            ref = fn()[:, :, 0].float()
            rec["cudnn_us"] = gtime(fn)

        def run(plan, ns, nw=4):
            ws: dict = {}
            f = lambda: tp.paged_decode(q3, c.k_pages, c.v_pages, c.block_table, c.seq_lens, max_kv_len=kv,  # noqa: E731
                                        num_sms=sms, plan=plan, workspace=ws, num_warps=nw, num_stages=ns)
            o = f().float()
            return ((o - ref).norm() / ref.norm()).item(), gtime(f)

        for bn, s, ns in grid(fields, sms):
            plan = tp.split_plan(batch=b, num_kv_heads=hkv, max_kv_len=kv, num_splits=s, block_n=bn)
            try:
                err, us = run(plan, ns)
                rec["launches"].append(dict(block_n=bn, splits=s, stages=ns, us=us, err=err))
            except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory: that launch's result
                rec["launches"].append(dict(block_n=bn, splits=s, stages=ns, us=None, err=None,
                                            error=f"{type(exc).__name__}: {exc}"[:120]))
        ok = [x for x in rec["launches"] if x["us"] is not None and x["err"] <= MAX_REL_ERR]
        best = min(ok, key=lambda x: x["us"]) if ok else None
        log.write(json.dumps(rec) + "\n")
        log.flush()
        print(f"{label} B{b} kv{kv} {w.num_q_heads}/{hkv} d{w.head_dim} p{w.page_size}: cuDNN {rec['cudnn_us']:.1f} us, "
              f"best {best and (best['block_n'], best['splits'], best['stages'])} {best and best['us']:.1f} us "
              f"[{time.time() - t0:.0f}s]", flush=True)
        del inp, c, q3, ref
        torch.cuda.empty_cache()


def fail(message: str) -> None:
    """One line on stderr, exit 2."""
    _fail("decode_tile_rule.py", message)


def main() -> None:
    ap = Parser(prog=Path(__file__).name, description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--measure", metavar="DIR", help="a new directory for the measurements (GPU)")
    mode.add_argument("--evaluate", metavar="FILE", help="a measurement's JSON lines (CPU)")
    ap.add_argument("--check", default="examples/h200-heldout-2/workloads.txt",
                    help="workload file whose paged decode shapes are the check set")
    ap.add_argument("--budget-s", type=float, default=500.0, help="stop starting new points after this many seconds")
    ap.add_argument("--sets", nargs="+", choices=("fit", "check", "d128"), default=("fit", "check", "d128"),
                    help="the point sets to measure, in their fixed order (default all three)")
    args = ap.parse_args()
    if args.evaluate:
        if not os.path.isfile(args.evaluate):
            fail(f"{args.evaluate}: not a file")
        try:
            rows = evaluate(args.evaluate)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            fail(f"{args.evaluate}: not a tile-rule file ({type(exc).__name__}: {exc})")
        if not rows:
            fail(f"{args.evaluate}: no decode points in it")
        print_evaluation(rows)
    else:
        import torch

        if not torch.cuda.is_available():
            fail("--measure times CUDA kernels: no CUDA device here")
        if os.path.exists(args.measure):
            fail(f"{args.measure} exists: the measurement writes a new directory")
        if not os.path.isfile(args.check):
            fail(f"{args.check}: not a file")
        measure(args.measure, args.check, args.budget_s, tuple(args.sets))


if __name__ == "__main__":
    main()
