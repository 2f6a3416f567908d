"""Benchmark: the paged decode kernel's split rule against every split count, measured per decode point.

``--measure DIR`` (GPU): for batch {1, 8, 64, 128, 256} × kv {512, 2048, 8192, 32768} × GQA group {4, 1, 8} (Hq = 16,
Hkv = 16 / group, d = 128, bf16, page 16; K/V above 17.3 GB skipped), times our kernel (CUDA-graph replay, read
flush, median of ~40 ms of replays) at every split count in {1, 2, 3, 4, 5, 6, 8, …, 256} that fits (each with the
separate and the fused combine; 32-token tiles, 4 warps, 3 stages), then launch variants (tile 32/64 × 2/3/4 stages,
8 warps) at the best split count, beside cuDNN and SDPA flash on the contiguous cache. One JSON line per point in
``DIR/split_rule_exploration.jsonl``, written as points finish.

``--evaluate FILE`` (CPU): for each point of such a file, the split count :func:`choose_num_splits` picks (the
nearest measured one) against the fastest measured split count in the same launch configuration — the rule's regret —
and the fused/separate combine ratio at the picked count (what :data:`FUSED_MAX_SPLITS` rests on).

    python benchmarks/decode_split_rule.py --measure DIR
    python benchmarks/decode_split_rule.py --evaluate examples/h200-decode-benchmark/split_rule_exploration.jsonl

The committed exploration (examples/h200-decode-benchmark) was measured with an alternative whole-page load path in
the split-count stage (since removed: 10 % slower at the median) — the same path for every split count, so the
regret is like for like; the launch-variant stage has both paths (``pl``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # oneline_args
from oneline_args import fail as _fail  # noqa: E402

SPLITS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256)


def evaluate(path: str) -> list[dict]:
    """Per point of ``path``: the rule's split count, its time, the best split count's time (same launch config),
    regret = time / best − 1, and the fused / separate ratio at the rule's count (None with one split).

    Raises:
        ValueError: a line that is not JSON, a point without split-count timings, sizes that are not positive
            integers or timings that are not positive finite µs (KeyError/TypeError: fields missing or mistyped).
    """
    from profattn.backends import triton_paged as tp

    rows = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            for key in ("g", "b", "kv", "hkv"):
                if type(r[key]) is not int or not 1 <= r[key] <= 1 << 24:
                    raise ValueError(f"{key} = {r[key]!r} is not a positive integer")
            stage = [c for c in r["cfg"] if c["label"] == "" and c["t"] != float("inf")]
            if any(not (type(c["t"]) in (int, float) and 0 < c["t"] < float("inf")) for c in stage):
                raise ValueError("a timing that is not a positive number of µs")
            if any(type(c["s"]) is not int or c["s"] < 1 for c in stage):
                raise ValueError("a split count that is not a positive integer")
            by_split: dict[int, dict[str, float]] = {}
            for c in stage:
                by_split.setdefault(c["s"], {})[c["comb"]] = c["t"]
            plan = tp.choose_num_splits(batch=r["b"], num_kv_heads=r["hkv"], max_kv_len=r["kv"], num_sms=132)
            near = min(by_split, key=lambda s: (abs(s - plan.num_splits), s))
            t_rule = min(by_split[near].values())
            best_s = min(by_split, key=lambda s: min(by_split[s].values()))
            t_best = min(by_split[best_s].values())
            pair = by_split[near]
            rows.append(dict(group=r["g"], batch=r["b"], kv=r["kv"], rule=plan.num_splits, measured=near,
                             best=best_s, t_rule=t_rule, t_best=t_best, regret=t_rule / t_best - 1,
                             fused_over_separate=(pair["fused"] / pair["separate"]
                                                  if "fused" in pair and "separate" in pair else None)))
    return rows


def print_evaluation(rows: list[dict]) -> None:
    print("| group | batch | kv | rule's splits | nearest measured | best splits | rule µs | best µs | regret | "
          "fused/separate at rule |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        fs = f"{r['fused_over_separate']:.3f}" if r["fused_over_separate"] else "—"
        print(f"| {r['group']} | {r['batch']} | {r['kv']:,} | {r['rule']} | {r['measured']} | {r['best']} | {r['t_rule']:.1f} | "
              f"{r['t_best']:.1f} | {r['regret']:.1%} | {fs} |")
    reg = [r["regret"] for r in rows]
    print(f"\n{len(rows)} points: mean regret {statistics.mean(reg):.2%}, worst {max(reg):.2%}, "
          f"> 3 % at {sum(x > 0.03 for x in reg)}")
    few = [r["fused_over_separate"] for r in rows if r["fused_over_separate"] and r["rule"] <= 4]
    many = [r["fused_over_separate"] for r in rows if r["fused_over_separate"] and r["rule"] > 4]
    if few:
        print(f"fused/separate at the rule's count: ≤ 4 splits {min(few):.3f}–{max(few):.3f} ({len(few)} points); "
              + (f"> 4 splits {min(many):.3f}–{max(many):.3f} ({len(many)} points)" if many else ""))


def measure(out: str, budget_s: float) -> None:  # pragma: no cover - needs a GPU
    import itertools

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
    os.makedirs(out)
    log = open(os.path.join(out, "split_rule_exploration.jsonl"), "a")

    def gtime(fn) -> float:
        return time_cuda_graph(fn, dev, target_ms=40.0).median_us

    for g, b, kv in itertools.product((4, 1, 8), (1, 8, 64, 128, 256), (512, 2048, 8192, 32768)):
        hkv = 16 // g
        if b * kv * hkv * 128 * 4 > 17.3e9 or time.time() - t0 > budget_s:
            continue
        w = Workload(phase="decode", batch=b, q_len=1, kv_len=kv, num_q_heads=16, num_kv_heads=hkv, head_dim=128,
                     kv_layout="paged", page_size=16)
        inp = make_inputs(w, dev, seed=b * 7 + kv + g)
        c, q3 = inp.paged, inp.q[:, :, 0]
        rec = dict(g=g, b=b, kv=kv, hkv=hkv, bytes=w.kv_bytes, cfg=[])
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            with sdpa_kernel([be]):
                fn = lambda: F.scaled_dot_product_attention(inp.q, inp.k, inp.v, enable_gqa=True)  # noqa: E731
                ref = fn()[:, :, 0].float()
                rec[name] = gtime(fn)

        def run(s, combine, bn=32, nw=4, ns=3, label=""):
            plan = tp.split_plan(batch=b, num_kv_heads=hkv, max_kv_len=kv, num_splits=s, block_n=bn)
            ws: dict = {}
            f = lambda: tp.paged_decode(q3, c.k_pages, c.v_pages, c.block_table, c.seq_lens, max_kv_len=kv,  # noqa: E731
                                        num_sms=sms, plan=plan, workspace=ws, num_warps=nw, num_stages=ns,
                                        combine=combine)
            o = f().float()
            r = dict(s=plan.num_splits, comb=combine, bn=bn, nw=nw, ns=ns, label=label,
                     err=((o - ref).norm() / ref.norm()).item(), t=gtime(f))
            rec["cfg"].append(r)
            return r

        seen, stage = set(), []
        for s in SPLITS:
            plan = tp.split_plan(batch=b, num_kv_heads=hkv, max_kv_len=kv, num_splits=s)
            if plan.num_splits in seen or b * hkv * plan.num_splits > 32 * sms:
                continue
            seen.add(plan.num_splits)
            for comb in (("separate", "fused") if plan.num_splits > 1 else ("separate",)):
                stage.append(run(plan.num_splits, comb))
        best = min(stage, key=lambda r: r["t"])
        for bn, ns in itertools.product((32, 64), (2, 3, 4)):
            if (bn, ns) != (32, 3):
                run(max(1, round(best["s"] * 32 / bn)), best["comb"], bn=bn, ns=ns, label="B")
        run(best["s"], best["comb"], nw=8, label="B")
        log.write(json.dumps(rec) + "\n")
        log.flush()
        print(f"g{g} B{b} kv{kv}: cuDNN {rec['cudnn']:.1f} us, best split count {best['s']} ({best['comb']}) "
              f"{best['t']:.1f} us [{time.time() - t0:.0f}s]", flush=True)
        del inp, c, q3, ref
        torch.cuda.empty_cache()


def fail(message: str) -> None:
    """One line on stderr, exit 2."""
    _fail("decode_split_rule.py", message)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--measure", metavar="DIR", help="a new directory for the exploration (GPU)")
    mode.add_argument("--evaluate", metavar="FILE", help="an exploration's JSON lines (CPU)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="stop starting new points after this many seconds")
    args = ap.parse_args()
    if args.evaluate:
        if not os.path.isfile(args.evaluate):
            fail(f"{args.evaluate}: not a file")
        try:
            rows = evaluate(args.evaluate)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            fail(f"{args.evaluate}: not an exploration file ({type(exc).__name__}: {exc})")
        if not rows:
            fail(f"{args.evaluate}: no decode points in it")
        print_evaluation(rows)
    else:
        import torch

        if not torch.cuda.is_available():
            fail("--measure times CUDA kernels: no CUDA device here")
        if os.path.exists(args.measure):
            fail(f"{args.measure} exists: the exploration writes a new directory")
        measure(args.measure, args.budget_s)


if __name__ == "__main__":
    main()
