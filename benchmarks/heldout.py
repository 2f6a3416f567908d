"""``profattn recommend`` judged on GPU shapes the store never held (issue 34's "done when"), in three steps:

1. ``shapes``: draw workloads outside the store (deterministic for a seed): paged decode at batch 2–200, kv 500–30,000,
   GQA groups 1–8, head_dim 64/128, page 16/64; dense causal prefill and training of 1k–16k tokens. One
   ``--workload`` spec a line.
2. ``ask`` (CPU, before the measurement): every committed GPU run under ``examples/`` except the held-out run
   directories goes into a temporary store, and ``recommend`` answers each shape (its JSON document, as a user gets it
   with ``profattn recommend --workload … --json``). Written to ``asks.json`` with the commit it was asked at, so the
   picks are fixed before a GPU measures them. ``backends`` prints the ``--backend`` list to measure: the usual
   contenders of each phase plus every backend an answer named.
3. ``score`` (CPU, after): the measured run directories go into another temporary store; per shape the headline pick
   (``best``: the first line) against the fastest backend measured there, the drop-in pick (``best_drop_in``) against
   the fastest drop-in measured there, beside constants: "always sdpa-cudnn" and "always flashinfer-decode-tc" (paged
   decode) for the headline, "vLLM's FlashInfer deployment" (flashinfer-decode-tc on paged decode, sdpa-cudnn on dense
   work) beside the drop-in pick, both against the fastest kernel measured that reads the caller's own layout (the
   paged cache for paged decode: FlashInfer's wrapper reads it through another page-table API, so it is no drop-in
   for a block-table caller, but it needs no copy). Regret = t_pick / t_best − 1 (graph-replay medians where a cell has
   them: the store's ranking); a hit is a regret within 3 % or a pick within noise of the best by profattn's one noise
   rule (``judged_margin``: p10–p90 spreads, repeats); regret is reported either way. A pick the run did not measure is
   reported, never scored as a hit. Beside each latency regret, the same pick's regret on the trace's GPU time per
   call (the kernels' time, no host dispatch), and per shape the backends that are launch-bound there (the kernels under
   :data:`~profattn.analysis.common.bounds.LAUNCH_BOUND_FRACTION` of the latency: most of the time is spent outside
   them — host dispatch, launch gaps).

Usage::

    python benchmarks/heldout.py shapes [--seed 34] [--decode 40 --prefill 10 --train 10] [--exclude-workloads F] [--gpu H200] > WORKLOADS
    python benchmarks/heldout.py ask WORKLOADS --out asks.json [--exclude DIR ...] [--gpu H200]
    python benchmarks/heldout.py backends asks.json
    python benchmarks/heldout.py score asks.json RUN_DIR ... [--json FILE]

``ask --out`` and ``score --json`` write a new file only (an existing one is refused: a committed draw's asks are its
record); ``score`` refuses runs that measured none of the asked shapes, and its done-when line gives no verdict while a
pick is unmeasured.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))  # selection.py: the committed runs, a store of one GPU

from profattn.analysis.common.margins import judged_margin  # noqa: E402
from profattn.analysis.common.bounds import LAUNCH_BOUND_FRACTION, launch_bound  # noqa: E402
from profattn.analysis.selection.recommend import policy_for, rank, recommend  # noqa: E402
from profattn.errors import ProfattnError  # noqa: E402
from profattn.report.recommend import recommend_json  # noqa: E402
from profattn.store import workload_key  # noqa: E402
from profattn.workload import Workload, parse_workload_spec, workload_spec  # noqa: E402
from oneline_args import Parser, new_file_problem  # noqa: E402
from selection import DEFAULT_GPU, add_gpu_option, committed_runs, one_gpu_store  # noqa: E402

#: The contenders measured for every shape of a phase (besides every backend an answer names).
CONTENDERS = {
    "decode": ("triton-paged-decode", "flashinfer-decode-tc", "flashinfer-cudnn-decode", "sdpa-cudnn"),
    "prefill": ("sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "flashinfer-prefill-ragged"),
    "train": ("sdpa-flash", "sdpa-efficient", "sdpa-cudnn"),
}
HIT = 0.03
#: The run folders ``shapes`` and ``ask`` leave out of the store by default: the first held-out draw (issue 34).
DEFAULT_EXCLUDE = REPO / "examples" / "h200-heldout"


def _rel(p: Path) -> str:
    """``p`` relative to the repository when it lies inside it (as a command line a reader can rerun)."""
    try:
        return str(p.resolve().relative_to(REPO))
    except ValueError:
        return str(p)


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def draw_shapes(seed: int, n_decode: int, n_prefill: int, n_train: int, known: set[str]) -> list[Workload]:
    """The held-out workloads: ``n_decode`` paged decodes, ``n_prefill`` dense causal prefills and ``n_train``
    training steps (bf16), none whose store key is in ``known``."""
    rng = random.Random(seed)
    out: list[Workload] = []
    seen = set(known)

    def add(w: Workload) -> bool:
        k = workload_key(w)
        if k in seen:
            return False
        seen.add(k)
        out.append(w)
        return True

    while sum(w.phase.value == "decode" for w in out) < n_decode:
        group = rng.choice((1, 2, 4, 8))
        hkv = rng.choice((1, 2, 4, 8))
        while hkv * group > 64:
            hkv //= 2
        b = round(_log_uniform(rng, 2, 200))
        kv = round(_log_uniform(rng, 500, 30_000) / 16) * 16
        if b * kv > 2_000_000:  # the paged cache plus its contiguous copy stay under ~20 GB
            continue
        add(Workload(phase="decode", batch=b, q_len=1, kv_len=kv, num_q_heads=hkv * group, num_kv_heads=hkv,
                     head_dim=rng.choice((64, 128)), dtype="bfloat16", kv_layout="paged",
                     page_size=rng.choice((16, 64))))
    for phase, n in (("prefill", n_prefill), ("train", n_train)):
        while sum(w.phase.value == phase for w in out) < n:
            tokens = _log_uniform(rng, 1024, 16_384)
            seq = min(16_384, max(512, 2 ** round(math.log2(_log_uniform(rng, 512, tokens)))))
            b = max(1, round(tokens / seq))
            group = rng.choice((1, 2, 4, 8))
            hkv = rng.choice((1, 2, 4, 8))
            while hkv * group > 32:
                hkv //= 2
            add(Workload(phase=phase, batch=b, q_len=seq, kv_len=seq, num_q_heads=hkv * group, num_kv_heads=hkv,
                         head_dim=rng.choice((64, 128)), dtype="bfloat16", kv_layout="dense"))
    return out


def cmd_shapes(a: argparse.Namespace) -> int:
    with one_gpu_store(committed_runs(a.exclude, a.gpu)) as (store, gpu):
        known = {c.workload_key for c in store.cells_on(gpu)}
    for f in a.exclude_workloads:
        known |= {workload_key(w) for w in read_workloads(f)}
    skip = "".join(f" --exclude-workloads {f}" for f in a.exclude_workloads)
    if [Path(e).resolve() for e in a.exclude] != [DEFAULT_EXCLUDE]:
        skip += " --exclude" + "".join(f" {_rel(Path(e))}" for e in a.exclude)
    if a.gpu != DEFAULT_GPU:
        skip += f" --gpu {a.gpu}"
    print(f"# {a.decode} paged decodes, {a.prefill} dense prefills, {a.train} training steps outside the store "
          f"(python benchmarks/heldout.py shapes --seed {a.seed} --decode {a.decode} --prefill {a.prefill} "
          f"--train {a.train}{skip})")
    for w in draw_shapes(a.seed, a.decode, a.prefill, a.train, known):
        print(workload_spec(w))
    return 0


def read_workloads(path: Path) -> list[Workload]:
    return [parse_workload_spec(line) for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def cmd_ask(a: argparse.Namespace) -> int:
    if why := new_file_problem(a.out, "--out"):
        raise ProfattnError(why)
    ws = read_workloads(a.workloads)
    if not ws:
        raise ProfattnError(f"{a.workloads}: no workload lines (one --workload spec a line; '#' starts a comment)")
    runs = committed_runs(a.exclude, a.gpu)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    with one_gpu_store(runs) as (store, gpu):
        policy = policy_for(store, gpu)
        answers = []
        for w in ws:
            if store.cells_for(gpu, workload_key(w), as_read=w.kv_layout.value == "dense"):
                raise ProfattnError(f"{w.tag} is in the store: not a held-out shape")
            doc = recommend_json(recommend(store, w, gpu, policy=policy))
            answers.append({k: doc[k] for k in ("workload", "workload_tag", "status", "interface", "best", "best_drop_in",
                                                  "fastest", "extrapolated", "contested_by", "best_bounded",
                                                  "drop_in_contested_by", "unmeasured_here", "prediction")}
                           | {"options": [{k: o.get(k) for k in ("backend", "drop_in", "kernel_us", "bound_us")}
                                          for o in doc["options"]]})
    a.out.write_text(json.dumps({"schema": "profattn.heldout-asks", "version": 1, "commit": commit, "gpu": gpu,
                                 "runs": [str(r.relative_to(REPO)) for r in runs], "answers": answers}, indent=1) + "\n")
    heads = sum(x["best"] is not None for x in answers)
    drops = sum(x["best_drop_in"] is not None for x in answers)
    print(f"{len(answers)} shapes asked at {commit} from {len(runs)} runs: {heads} headline picks, {drops} drop-in picks "
          f"-> {a.out}")
    return 0


def cmd_backends(a: argparse.Namespace) -> int:
    doc = _asks(a.asks)
    for phase in ("decode", "prefill", "train"):
        names = list(CONTENDERS[phase])
        for x in doc["answers"]:
            if parse_workload_spec(x["workload"]).phase.value != phase:
                continue
            for b in (x["best"], x["best_drop_in"], x["best_bounded"]):
                if b and b not in names:
                    names.append(b)
        print(phase, " ".join(f"--backend {n}" for n in names))
    return 0


def _regret(t: dict[str, float], name: str | None, best: float | None) -> float | None:
    if name is None or best is None or name not in t:
        return None
    return t[name] / best - 1.0


def _noise_tie(times: dict, name: str | None, pool: dict[str, float]) -> bool:
    """``name`` within noise of the fastest of ``pool`` (backend → µs) by :func:`judged_margin`."""
    if name is None or name not in times or not pool:
        return False
    best = min(pool, key=pool.get)
    return name == best or judged_margin(times[name], times[best]).tie


def score_rows(doc: dict, runs: list[Path]) -> list[dict]:
    """One row per asked shape of ``doc`` (an ``asks.json``): the picks, what ``runs`` measured there (µs), each
    pick's regret against its pool and whether it is within noise of the pool's fastest (``noise_tie``)."""
    with one_gpu_store(runs) as (store, gpu):
        if doc.get("gpu") and doc["gpu"] != gpu:
            raise ProfattnError(f"the picks were asked on {doc['gpu']} and the runs measured on {gpu}: score a draw on "
                                f"the GPU it was asked for")
        rows = []
        for x in doc["answers"]:
            w = parse_workload_spec(x["workload"])
            ranked, _ = rank(store.cells_for(gpu, workload_key(w), as_read=w.kv_layout.value == "dense"))
            t = {r.backend: r.time.median_us for r in ranked}
            # the trace's GPU time per call of each ranked backend's cells (the upper median over runs)
            g = {r.backend: sorted(v)[len(v) // 2] for r in ranked
                 if (v := [c.gpu_time_us for c in r.cells if c.gpu_time_us])}
            jt = {r.backend: r.time for r in ranked}
            measured = recommend(store, w, gpu, policy=None, interface=None) if ranked else None
            # measured options only: the store of the measured runs gives every unmeasured backend a prediction too
            options = [o for o in measured.options if o.measured is not None] if measured else []
            drops = {o.backend: o.kernel_us for o in options if o.drop_in}
            # every kernel that reads the caller's own cache layout (a drop-in, or one that needs only an API change,
            # like FlashInfer's wrapper on a block-table caller): the pool the vLLM constant is judged in
            native = {o.backend: o.kernel_us for o in options
                      if o.adoption is not None and o.adoption.reads.value == w.kv_layout.value}
            best = min(t.values(), default=None)
            best_drop = min(drops.values(), default=None)
            paged_decode = w.phase.value == "decode" and w.kv_layout.value == "paged"
            vllm = "flashinfer-decode-tc" if paged_decode else "sdpa-cudnn"
            rows.append({
                "workload": x["workload"], "tag": x["workload_tag"], "phase": w.phase.value, "status": x["status"],
                "best_measured": min(t, key=t.get) if t else None, "best_us": best,
                "best_drop_in_measured": min(drops, key=drops.get) if drops else None, "best_drop_in_us": best_drop,
                "headline": x["best"], "headline_us": t.get(x["best"]) if x["best"] else None,
                "headline_regret": _regret(t, x["best"], best),
                "headline_unmeasured": bool(x["best"]) and x["best"] not in t,
                "drop_in": x["best_drop_in"], "drop_in_us": drops.get(x["best_drop_in"]) if x["best_drop_in"] else None,
                "drop_in_regret": _regret(drops, x["best_drop_in"], best_drop),
                "drop_in_unmeasured": bool(x["best_drop_in"]) and x["best_drop_in"] not in drops,
                "contested_by": x["contested_by"], "unmeasured_here": [u["backend"] for u in x["unmeasured_here"]],
                "sdpa_cudnn_regret": _regret(t, "sdpa-cudnn", best),
                "fi_tc_regret": _regret(t, "flashinfer-decode-tc", best) if paged_decode else None,
                "vllm_regret": _regret(native, vllm, min(native.values(), default=None)),
                "noise_tie": {k: _noise_tie(jt, name, pool) for k, name, pool in (
                    ("headline_regret", x["best"], t), ("drop_in_regret", x["best_drop_in"], drops),
                    ("drop_in_native_regret", x["best_drop_in"], native), ("sdpa_cudnn_regret", "sdpa-cudnn", t),
                    ("fi_tc_regret", "flashinfer-decode-tc", t), ("vllm_regret", vllm, native))},
                "drop_in_native_regret": _regret(native, x["best_drop_in"], min(native.values(), default=None)),
                "headline_gpu_regret": _regret(g, x["best"], min(g.values(), default=None)),
                "drop_in_gpu_regret": _regret({b: v for b, v in g.items() if b in drops}, x["best_drop_in"],
                                              min((v for b, v in g.items() if b in drops), default=None)),
                "gpu_us": g, "launch_bound": sorted(b for b in g if launch_bound(g[b], t[b])),
                "measured": t, "spread": {b: [v.p10_us, v.p90_us] for b, v in jt.items()},
            })
    return rows


def summary(rows: list[dict], key: str, phase: str | None = None) -> tuple[int, int, int, float, float] | None:
    """``(answered, shapes, hits, mean regret, worst regret)`` of one pick (``key``: a ``*_regret`` field) over the rows
    of ``phase`` (None: all); a hit is within :data:`HIT` or within noise. None: no answer."""
    sel = [r for r in rows if (phase is None or r["phase"] == phase)]
    got = [r for r in sel if r[key] is not None]
    if not got:
        return None
    vals = [r[key] for r in got]
    hits = sum(r[key] <= HIT or r["noise_tie"].get(key, False) for r in got)
    return len(got), len(sel), hits, sum(vals) / len(vals), max(vals)


def cmd_score(a: argparse.Namespace) -> int:
    doc = _asks(a.asks)
    if a.json is not None and (why := new_file_problem(a.json, "--json")):
        raise ProfattnError(why)
    rows = score_rows(doc, a.runs)
    if not any(r["best_us"] for r in rows):
        raise ProfattnError(f"none of the {len(rows)} asked shapes was measured in {', '.join(str(r) for r in a.runs)}: "
                            f"give the run folders that measured this draw")
    print(f"asked at {doc['commit']} from {len(doc['runs'])} runs; measured in {', '.join(str(r) for r in a.runs)}\n")
    print("| workload | asked | headline pick | regret | drop-in pick | regret | best measured | best drop-in |")
    print("|---|---|---|---:|---|---:|---|---|")

    def pct(v: float | None) -> str:
        return "—" if v is None else f"{v * 100:.1f} %"

    def tie(r: dict, key: str) -> str:
        v = r[key]
        return " (noise)" if v is not None and v > HIT and r["noise_tie"][key] else ""

    for r in rows:
        h = r["headline"] or ("unknown" + (f" (contested by {', '.join(r['contested_by'])})" if r["contested_by"] else ""))
        print(f"| {r['tag']} | {r['status']} | {h}{' (NOT MEASURED)' if r['headline_unmeasured'] else ''} | "
              f"{pct(r['headline_regret'])}{tie(r, 'headline_regret')} | {r['drop_in'] or 'none'}"
              f"{' (NOT MEASURED)' if r['drop_in_unmeasured'] else ''} | "
              f"{pct(r['drop_in_regret'])}{tie(r, 'drop_in_regret')} | {r['best_measured']} {r['best_us']:.1f} µs | "
              f"{r['best_drop_in_measured']} {r['best_drop_in_us']:.1f} µs |" if r["best_us"] else
              f"| {r['tag']} | {r['status']} | not measured | | | | | |")
    print()

    def score(key: str, phase: str | None = None) -> str:
        sm = summary(rows, key, phase)
        if sm is None:
            return "no answer"
        got, n, hits, mean, worst = sm
        return f"{got}/{n} answered, {hits} hits (≤ 3 % or noise), mean {mean * 100:.1f} %, worst {worst * 100:.1f} %"

    for phase in (None, "decode", "prefill", "train"):
        print(f"{phase or 'all'}:")
        print(f"  headline pick          {score('headline_regret', phase)}")
        print(f"  always sdpa-cudnn      {score('sdpa_cudnn_regret', phase)}")
        if phase in (None, "decode"):
            print(f"  always fi-decode-tc    {score('fi_tc_regret', phase)}")
        print(f"  drop-in pick           {score('drop_in_regret', phase)}   (against the best drop-in)")
        print(f"  drop-in pick           {score('drop_in_native_regret', phase)}   (against the best kernel reading this layout)")
        print(f"  vLLM FlashInfer const  {score('vllm_regret', phase)}   (against the best kernel reading this layout)")
        print(f"  headline, GPU time     {score('headline_gpu_regret', phase)}   (the trace's kernel time per call)")
        print(f"  drop-in, GPU time      {score('drop_in_gpu_regret', phase)}   (the trace's kernel time per call)")
    ob = [r for r in rows if r.get("launch_bound")]
    if ob:
        print(f"\nlaunch-bound (the trace's GPU time per call under {100 * LAUNCH_BOUND_FRACTION:.0f} % of the latency: "
              f"most of it outside the kernels) at {len(ob)} of {len(rows)} shapes:")
        for r in ob:
            print(f"  {r['tag']}: " + ", ".join(f"{b} {r['measured'][b]:.1f} µs latency / {r['gpu_us'][b]:.1f} µs GPU"
                                              for b in r["launch_bound"]))
    worst_h = max((r["headline_regret"] for r in rows if r["headline_regret"] is not None and not r["noise_tie"]["headline_regret"]), default=None)
    worst_d = max((r["drop_in_regret"] for r in rows if r["drop_in_regret"] is not None and not r["noise_tie"]["drop_in_regret"]), default=None)
    unmeasured = sum(r["headline_unmeasured"] or r["drop_in_unmeasured"] for r in rows)

    def verdict(worst: float | None, limit: float) -> str:
        if unmeasured:  # a pick the run did not measure could be the worst: no verdict until it is measured
            return "not judged: picks unmeasured"
        return "yes" if worst is None or worst <= limit else "NO"

    print(f"\ndone-when (regrets beyond noise): headline worst {pct(worst_h)} (≤ 25 %: {verdict(worst_h, 0.25)}); "
          f"drop-in worst {pct(worst_d)} (≤ 10 %: {verdict(worst_d, 0.10)}); "
          f"picks the run did not measure: {unmeasured}")
    if a.json is not None:
        a.json.write_text(json.dumps({"schema": "profattn.heldout-score", "version": 1, "asks": doc["commit"],
                                      "rows": rows}, indent=1) + "\n")
    return 0


def _count(text: str) -> int:
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"a count of shapes is ≥ 0, not {n}")
    return n


def _asks(path: Path) -> dict:
    """The asks document at ``path``. Raises ProfattnError: unreadable or not an asks file."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ProfattnError(f"{path}: not a readable asks JSON (write one with `heldout.py ask`): {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != "profattn.heldout-asks":
        raise ProfattnError(f"{path}: not an asks file (schema profattn.heldout-asks; write one with `heldout.py ask`)")
    return doc


def main() -> int:
    ap = Parser(prog=Path(__file__).name, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("shapes")
    s.add_argument("--seed", type=int, default=34)
    s.add_argument("--decode", type=_count, default=40)
    s.add_argument("--prefill", type=_count, default=10)
    s.add_argument("--train", type=_count, default=10)
    s.add_argument("--exclude-workloads", type=Path, nargs="*", default=[], help="workload files whose shapes to skip too")
    s.add_argument("--exclude", type=Path, nargs="*", default=[DEFAULT_EXCLUDE],
                   help="run folders left out of the store (default: the held-out runs, so the draw is reproducible)")
    add_gpu_option(s)
    k = sub.add_parser("ask")
    k.add_argument("workloads", type=Path)
    k.add_argument("--out", type=Path, required=True)
    k.add_argument("--exclude", type=Path, nargs="*", default=[DEFAULT_EXCLUDE],
                   help="run folders left out of the store (default: the first held-out draw's)")
    add_gpu_option(k)
    b = sub.add_parser("backends")
    b.add_argument("asks", type=Path)
    c = sub.add_parser("score")
    c.add_argument("asks", type=Path)
    c.add_argument("runs", type=Path, nargs="+")
    c.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    try:
        return {"shapes": cmd_shapes, "ask": cmd_ask, "backends": cmd_backends, "score": cmd_score}[a.cmd](a)
    except (ProfattnError, OSError, ValueError) as exc:
        print(f"heldout: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
