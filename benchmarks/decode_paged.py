"""Benchmark: our Triton paged decode kernel against cuDNN, SDPA flash and FlashInfer, at the seed or over a sweep.

Default mode (the seed's decode shapes): per kv_len, GPU time per decode step (CUDA-graph replay, L2 flushed
before each replay, median), achieved GB/s of unique K/V, the fraction of the copy bandwidth measured in the same
run, and the ratio to SDPA flash and cuDNN timed the same way on the contiguous cache; each combine schedule.
``--tune`` also times kernel configurations (tile size, warps, stages, split counts).

``--sweep``: batch × kv × GQA group (Hq = 16, Hkv = 16 / group, d = 128, bf16, page 16; points whose K/V exceed
``--max-gb`` are skipped), plus a lognormal-ragged and a shared-prefix batch (B = 64, kv 8192, group 4). Per point
and backend, through the project's own backends (what ``profattn profile`` runs): CUDA-graph replay latency (read
flush, median), GPU time (the sum of the kernels a profiled replay ran, the flush excluded), the kernels that ran,
unique-K/V GB/s from the GPU time and its fraction of the copy and read ceilings measured in the same run, and the
relative error of sequences 0 and B−1 against an fp32 reference. "ours (before)" is our kernel with the launch
and split rule it had before the wave-quantization rule (3 stages, at least 2 tiles per split, splits until
about 4 programs per SM, separate combine), for the before/after in one run.

    python benchmarks/decode_paged.py [--kv 512 2048 8192] [--batch 8] [--hq 16 --hkv 4 --head-dim 128] [--page-size 16]
        [--tune [--tune-block-n 32 64] [--tune-warps 4] [--tune-splits 1 2 4 8 16 32]]
    python benchmarks/decode_paged.py --sweep [--batches 1 8 64 128 256] [--kv ...] [--groups 1 4 8]
        [--max-gb 17.2] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from profattn.backends import get_backend, triton_paged as tp
from profattn.harness.ceilings import measure_ceilings
from profattn.harness.inputs import make_inputs, reference, rel_err
from profattn.harness.timing import capture_graph, l2_flusher, time_cuda, time_cuda_graph
from profattn.workload import Workload

SWEEP_BACKENDS = ("triton-paged-decode", "sdpa-cudnn", "sdpa-flash", "flashinfer-decode", "flashinfer-decode-tc")
BEFORE = "ours (before)"


def previous_plan(*, batch: int, num_kv_heads: int, max_kv_len: int, num_sms: int) -> tp.SplitPlan:
    """The split rule before the wave-quantization rule: ``min(ceil(4·SMs / (B·Hkv)), ceil(tiles / 2))`` splits of
    32-token tiles (kept here only for the before/after column)."""
    pairs = batch * num_kv_heads
    blocks = max(1, math.ceil(max_kv_len / 32))
    splits = min(max(1, math.ceil(4 * num_sms / pairs)), max(1, math.ceil(blocks / 2)))
    return tp.split_plan(batch=batch, num_kv_heads=num_kv_heads, max_kv_len=max_kv_len, num_splits=splits)


def gpu_time_us(graph, dev, reps: int = 5) -> tuple[float, list[str]]:
    """Mean per replay of the summed kernel durations in a torch.profiler trace of ``reps`` replays (each after the
    read flush, whose reduction kernel is excluded by its name), and the distinct kernel names that ran."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    flush = l2_flusher(dev)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            flush()
            graph.replay()
        torch.cuda.synchronize(dev)
    with profile(activities=[ProfilerActivity.CUDA]) as pf:
        flush()
        torch.cuda.synchronize(dev)
    flush_names = {e.name for e in pf.events() if e.device_type == DeviceType.CUDA}
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA and e.name not in flush_names
               and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    total = sum(getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0) for e in kernels)
    return total / reps, sorted({e.name[:90] for e in kernels})


def sample_error(out: torch.Tensor, inp, w: Workload) -> float:
    """Worst relative error of sequences 0 and B−1 of ``out`` ``[B, Hq, 1, d]`` against fp32 attention over their
    own ``kv_lens[b]`` keys of the dense copy."""
    worst = 0.0
    for b in sorted({0, w.batch - 1}):
        n = w.kv_lens[b]
        ref = F.scaled_dot_product_attention(inp.q[b:b + 1].float(), inp.k[b:b + 1, :, :n].float(),
                                             inp.v[b:b + 1, :, :n].float(), enable_gqa=True)
        worst = max(worst, rel_err(out[b:b + 1].float(), ref))
    return worst


def sweep(args) -> None:
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    t0 = time.time()
    ceil = measure_ceilings(dev)
    one = torch.ones(1, device=dev)
    floor1 = time_cuda_graph(lambda: one.add_(1), dev).median_us
    print(f"ceilings: read {ceil.read_gbps:,.0f} GB/s ({ceil.read_method}); copy {ceil.copy_gbps:,.0f} GB/s "
          f"(read + write); bf16 GEMM {ceil.matmul_tflops:,.0f} TFLOP/s; harness floor (graph of one tiny kernel, "
          f"read flush) {floor1:.2f} us", flush=True)
    common = dict(phase="decode", q_len=1, num_q_heads=16, head_dim=128, kv_layout="paged", page_size=16)
    points = []
    for g in args.groups:
        for b in args.batches:
            for kv in args.kv:
                w = Workload(batch=b, kv_len=kv, num_kv_heads=16 // g, **common)
                if w.kv_bytes <= args.max_gb * 1e9:
                    points.append((f"g{g}", w))
    if not args.no_special:
        points.append(("ragged", Workload(batch=64, kv_len=8192, num_kv_heads=4, kv_len_dist="lognormal",
                                          kv_len_seed=7, **common)))
        points.append(("prefix", Workload(batch=64, kv_len=8192, num_kv_heads=4, shared_prefix_len=4096, **common)))
    os.makedirs(args.out)
    with open(os.path.join(args.out, "ceilings.json"), "w") as f:
        json.dump(dict(read_gbps=ceil.read_gbps, read_method=ceil.read_method, copy_gbps=ceil.copy_gbps,
                       matmul_tflops=ceil.matmul_tflops, floor_us=floor1), f)
    jpath = os.path.join(args.out, "sweep.jsonl")
    rows = []
    for label, w in points:
        try:
            inp = make_inputs(w, dev, seed=w.batch * 31 + w.kv_len)
        except torch.OutOfMemoryError:
            print(f"{label} B{w.batch} kv{w.kv_len}: inputs do not fit", flush=True)
            continue
        row = dict(point=label, batch=w.batch, kv=w.kv_len, hq=16, hkv=w.num_kv_heads, group=w.group_size,
                   kv_bytes=w.kv_bytes, cells={})
        lens = w.kv_lens if len(set(w.kv_lens)) > 1 else None
        launch = tp.choose_launch(batch=w.batch, num_kv_heads=w.num_kv_heads, max_kv_len=w.kv_len, num_sms=sms,
                                  head_dim=w.head_dim, kv_lens=lens)
        plan = launch.plan
        row["plan"] = dict(splits=plan.num_splits, ctas=launch.programs, combine=tp.combine_for(plan.num_splits),
                           block_n=plan.block_n, stages=launch.num_stages)
        c, q3 = inp.paged, inp.q[:, :, 0]
        old = previous_plan(batch=w.batch, num_kv_heads=w.num_kv_heads, max_kv_len=w.kv_len, num_sms=sms)
        old_ws: dict = {}
        calls = {BEFORE: (lambda: tp.paged_decode(q3, c.k_pages, c.v_pages, c.block_table, c.seq_lens,
                                                  max_kv_len=w.kv_len, num_sms=sms, plan=old, workspace=old_ws,
                                                  num_stages=3, combine="separate").unsqueeze(2), None)}
        for name in SWEEP_BACKENDS:
            backend = get_backend(name)
            reason = backend.unsupported_reason(w, dev)
            if reason:
                row["cells"][name] = dict(error=reason[:120])
                continue
            try:
                prepared = backend.prepare(w, dev)
                calls[name] = (prepared.bound(inp), prepared)
            except Exception as exc:  # noqa: BLE001 - one backend's failure is that cell's result
                row["cells"][name] = dict(error=f"{type(exc).__name__}: {exc}"[:160])
        for name, (fn, prepared) in calls.items():
            ctx = prepared.context() if prepared is not None else contextlib.nullcontext()
            try:
                with ctx:
                    out = fn()
                    if prepared is not None and prepared.to_contract is not None:
                        out = prepared.to_contract(out)
                    graph = capture_graph(fn, dev)
                    lat = time_cuda(graph.replay, target_ms=args.target_ms).median_us
                    gpu, kernels = gpu_time_us(graph, dev)
                del graph
                err = sample_error(out, inp, w)  # outside the backend's context (it may pin one SDPA kernel)
                ok = math.isfinite(err) and err < 2e-2
                row["cells"][name] = dict(latency_us=lat, gpu_us=gpu, kernels=kernels, rel_err=err, ok=ok,
                                          gbps=w.kv_bytes / (gpu * 1e-6) / 1e9 if gpu > 0 else None)
            except Exception as exc:  # noqa: BLE001
                row["cells"][name] = dict(error=f"{type(exc).__name__}: {exc}"[:160])
        rows.append(row)
        with open(jpath, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(line(row, ceil), f"[{time.time() - t0:.0f}s]", flush=True)
        del inp, calls, c, q3
        torch.cuda.empty_cache()
    print()
    print(table(rows, ceil, floor1))
    with open(os.path.join(args.out, "sweep.md"), "w") as f:
        f.write(table(rows, ceil, floor1) + "\n")


def _lat(cell: dict | None) -> float | None:
    return cell["latency_us"] if cell and cell.get("ok") else None


def fi_best(row: dict) -> tuple[str | None, float | None]:
    best = [(c["latency_us"], n) for n, c in row["cells"].items() if n.startswith("flashinfer") and _lat(c)]
    return (min(best)[1], min(best)[0]) if best else (None, None)


def line(row: dict, ceil) -> str:
    cells = row["cells"]
    ours, cud = _lat(cells.get("triton-paged-decode")), _lat(cells.get("sdpa-cudnn"))
    fin, fil = fi_best(row)
    fmt = lambda x: f"{x:9.2f}" if x else "        -"  # noqa: E731
    return (f"{row['point']:>6} B{row['batch']:<4d} kv{row['kv']:<6d} ours {fmt(ours)} before {fmt(_lat(cells.get(BEFORE)))} "
            f"cuDNN {fmt(cud)} flash {fmt(_lat(cells.get('sdpa-flash')))} FI {fmt(fil)} "
            f"ours/cuDNN {ours / cud if ours and cud else float('nan'):.3f} splits {row['plan']['splits']} "
            f"{row['plan']['combine']}")


def table(rows: list[dict], ceil, floor1: float) -> str:
    """The Markdown table of a sweep (latency = CUDA-graph replay after a read flush; GB/s from GPU time)."""
    out = [f"Ceilings in this run: read {ceil.read_gbps:,.0f} GB/s, copy {ceil.copy_gbps:,.0f} GB/s (read + write), "
           f"bf16 GEMM {ceil.matmul_tflops:,.0f} TFLOP/s; graph floor {floor1:.2f} us. Latency: CUDA-graph replay, "
           "read flush, median (us). GPU: sum of the kernels in a profiled replay (us). GB/s: unique K/V / GPU time.",
           "",
           "| point | B | kv | Hq/Hkv | splits (CTAs, combine) | ours | ours GPU | ours GB/s | of copy | of read | "
           "before | cuDNN | cuDNN GB/s (of read) | flash | FlashInfer best | ours/cuDNN | ours/FI | ours err |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios, fi_ratios = [], []
    f2 = lambda x: f"{x:,.1f}" if x else "—"  # noqa: E731
    pct = lambda g, roof: f"{g / roof:.0%}" if g else "—"  # noqa: E731
    ratio = lambda a, b: f"{a / b:.3f}" if a and b else "—"  # noqa: E731
    for r in rows:
        c = r["cells"]
        o = c.get("triton-paged-decode", {})
        cu = c.get("sdpa-cudnn", {})
        fin, fil = fi_best(r)
        ol, cl = _lat(o), _lat(cu)
        g, cg = o.get("gbps"), cu.get("gbps") if cl else None
        if ol and cl:
            ratios.append(ol / cl)
        if ol and fil:
            fi_ratios.append(ol / fil)
        p = r["plan"]
        out.append(
            f"| {r['point']} | {r['batch']} | {r['kv']:,} | {r['hq']}/{r['hkv']} | {p['splits']} "
            f"({p['ctas']:,}, {p['combine']}) | {f2(ol)}{'' if ol else ' ' + o.get('error', '')[:60]} | "
            f"{f2(o.get('gpu_us'))} | {f2(g)} | {pct(g, ceil.copy_gbps)} | {pct(g, ceil.read_gbps)} | "
            f"{f2(_lat(c.get(BEFORE)))} | {f2(cl)} | {f2(cg)}{f' ({pct(cg, ceil.read_gbps)})' if cg else ''} | "
            f"{f2(_lat(c.get('sdpa-flash')))} | {f2(fil)}{' (' + fin.replace('flashinfer-', '') + ')' if fin else ''} | "
            f"{ratio(ol, cl)} | {ratio(ol, fil)} | {o.get('rel_err', float('nan')):.1e} |")
    if ratios:
        out += ["", f"ours/cuDNN latency over {len(ratios)} points: median {statistics.median(ratios):.3f}, "
                    f"best {min(ratios):.3f}, worst {max(ratios):.3f}; ≤ 1.00 at {sum(x <= 1.0 for x in ratios)}."]
    if fi_ratios:
        out.append(f"ours/FlashInfer best: median {statistics.median(fi_ratios):.3f}, worst {max(fi_ratios):.3f}; "
                   f"≤ 1.00 at {sum(x <= 1.0 for x in fi_ratios)} of {len(fi_ratios)}.")
    over = [(r["point"], r["batch"], r["kv"], n, c["gbps"]) for r in rows for n, c in r["cells"].items()
            if c.get("gbps") and c["gbps"] > ceil.read_gbps]
    out.append(f"cells above the read ceiling: {len(over)}" + (f" {over[:5]}" if over else ""))
    return "\n".join(out)


def seed(args) -> None:
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    ceil = measure_ceilings(dev)
    print(f"copy ceiling {ceil.copy_gbps:,.0f} GB/s; read ceiling {ceil.read_gbps:,.0f} GB/s; bf16 GEMM "
          f"{ceil.matmul_tflops:,.0f} TFLOP/s")
    one = torch.ones(1, device=dev)
    floor1 = time_cuda_graph(lambda: one.add_(1), dev).median_us
    floor2 = time_cuda_graph(lambda: (one.add_(1), one.add_(1)), dev).median_us
    print(f"harness floor (graph replay, read flush): one 1-element kernel {floor1:.2f} us, two dependent "
          f"kernels {floor2:.2f} us")
    rows = []
    for kv in args.kv:
        w = Workload(phase="decode", batch=args.batch, q_len=1, kv_len=kv, num_q_heads=args.hq, num_kv_heads=args.hkv,
                     head_dim=args.head_dim, kv_layout="paged", page_size=args.page_size)
        inp = make_inputs(w, dev, seed=kv)
        ref = reference(w, inp)
        c = inp.paged
        q3 = inp.q[:, :, 0]

        def ours(plan=None, nw=None, ns=None, combine=None):
            ws = {}
            return lambda: tp.paged_decode(q3, c.k_pages, c.v_pages, c.block_table, c.seq_lens, max_kv_len=kv,
                                           num_sms=sms, plan=plan, workspace=ws, num_warps=nw, num_stages=ns,
                                           combine=combine)

        err = rel_err(ours()().unsqueeze(2), ref.out)
        t_ours = time_cuda_graph(ours(), dev).median_us
        for other in ("fused", "separate"):
            f_other = ours(combine=other)
            print(f"kv {kv}: combine {tp.COMBINE} {t_ours:.2f} us (err {err:.1e}); combine {other} "
                  f"{time_cuda_graph(f_other, dev).median_us:.2f} us (err {rel_err(f_other().unsqueeze(2), ref.out):.1e})")
        times = {}
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            with sdpa_kernel([be]):
                fn = lambda: F.scaled_dot_product_attention(inp.q, inp.k, inp.v, enable_gqa=True)  # noqa: E731
                times[name] = time_cuda_graph(fn, dev).median_us
        gbps = w.kv_bytes / (t_ours * 1e-6) / 1e9
        plan = tp.choose_launch(batch=w.batch, num_kv_heads=w.num_kv_heads, max_kv_len=kv, num_sms=sms,
                                head_dim=w.head_dim).plan
        rows.append((kv, t_ours, gbps, gbps / ceil.copy_gbps, gbps / ceil.read_gbps, times["flash"], times["cudnn"],
                     err, plan))
        if args.tune:
            print(f"\n-- tuning kv {kv} (default {t_ours:.2f} us, plan {plan})")
            results = []
            for cb, bn, ns, nw, s in itertools.product(("separate", "fused"), args.tune_block_n, (2, 3, 4),
                                                       args.tune_warps, args.tune_splits):
                p = tp.split_plan(batch=w.batch, num_kv_heads=w.num_kv_heads, max_kv_len=kv, num_splits=s, block_n=bn)
                if p.num_splits == 1 and cb == "fused":
                    continue  # one split runs no combine: the same launch as "separate"
                try:
                    f = ours(p, nw, ns, cb)
                    e = rel_err(f().unsqueeze(2), ref.out)
                    results.append((time_cuda_graph(f, dev).median_us, cb, bn, ns, nw, p.num_splits, e))
                except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory
                    results.append((float("inf"), cb, bn, ns, nw, p.num_splits, str(exc)[:60]))
            for r in sorted(results, key=lambda r: r[0])[:12]:
                print("  %8.2f us  combine=%s BLOCK_N=%d stages=%d warps=%d splits=%d err=%s" % r)

    print("\n| kv_len | ours (us) | unique KV GB/s | of copy | of read | SDPA flash (us) | cuDNN (us) | vs flash | "
          "vs cuDNN | rel err | splits |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for kv, t, g, fc, fr, tf, tc, e, p in rows:
        print(f"| {kv} | {t:.2f} | {g:,.0f} | {fc:.0%} | {fr:.0%} | {tf:.2f} | {tc:.2f} | {tf / t:.2f}x | {tc / t:.2f}x | "
              f"{e:.1e} | {p.num_splits} |")


def fail(message: str) -> None:
    """One line on stderr, exit 2 (bad input or a machine that cannot run the benchmark)."""
    print(f"decode_paged.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def render(run_dir: str) -> None:
    """Print and rewrite ``run_dir/sweep.md`` from its ``sweep.jsonl`` and ``ceilings.json`` (no GPU needed).

    Raises:
        SystemExit(2): either file missing or malformed.
    """
    from types import SimpleNamespace

    try:
        with open(os.path.join(run_dir, "ceilings.json")) as f:
            c = json.load(f)
        ceil = SimpleNamespace(read_gbps=float(c["read_gbps"]), copy_gbps=float(c["copy_gbps"]),
                               matmul_tflops=float(c["matmul_tflops"]))
        with open(os.path.join(run_dir, "sweep.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        text = table(rows, ceil, float(c["floor_us"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        fail(f"{run_dir}: not a sweep directory ({type(exc).__name__}: {exc})")
    with open(os.path.join(run_dir, "sweep.md"), "w") as f:
        f.write(text + "\n")
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kv", type=int, nargs="+", default=None)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--tune", action="store_true")
    ap.add_argument("--hq", type=int, default=16, help="query heads of the seed-mode shapes")
    ap.add_argument("--hkv", type=int, default=4, help="KV heads of the seed-mode shapes")
    ap.add_argument("--head-dim", type=int, default=128, choices=[64, 128, 256])
    ap.add_argument("--tune-block-n", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--tune-warps", type=int, nargs="+", default=[4])
    ap.add_argument("--tune-splits", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64, 128, 256])
    ap.add_argument("--groups", type=int, nargs="+", default=[1, 4, 8], choices=[1, 2, 4, 8, 16])
    ap.add_argument("--max-gb", type=float, default=17.2, help="skip points whose K/V exceed this many GB (1e9)")
    ap.add_argument("--no-special", action="store_true", help="skip the ragged and shared-prefix batches")
    ap.add_argument("--target-ms", type=float, default=100.0, help="GPU time of timed replays per cell")
    ap.add_argument("--out", default="decode-sweep-benchmark", help="directory for sweep.jsonl and sweep.md")
    ap.add_argument("--render", metavar="DIR", help="re-render DIR/sweep.md from its sweep.jsonl and ceilings.json (CPU)")
    args = ap.parse_args()
    if args.render:
        render(args.render)
        return
    if not torch.cuda.is_available():
        fail("this benchmark times CUDA kernels: no CUDA device here")
    if args.sweep and os.path.exists(args.out):
        fail(f"--out {args.out} exists: a sweep writes a new directory (an earlier run is never overwritten)")
    if args.sweep:
        args.kv = args.kv or [512, 2048, 8192, 32768]
        sweep(args)
    else:
        args.kv = args.kv or [512, 2048, 8192]
        seed(args)


if __name__ == "__main__":
    main()
