"""Serving-engine step annotations: what one forward step computed, from the sums its annotation records.

vLLM (≥ 0.26 with ``--profiler-config.detailed_trace_annotation``, vllm-project/vllm#37524) wraps each step in a
``record_function`` range named ``execute_<tokens>_context_<n>(sq<Σq>sk<Σk>sqsq<Σq²>sqsk<Σq·k>)_generation_<n>(...)``:
per phase — *context* (prefill chunks) and *generation* (decoding sequences) — the number of sequences and, over
them, Σq (new query tokens), Σk (keys each sequence sees: its cached prefix plus its new tokens), Σq² and Σq·k.
SGLang's roofline annotations (sgl-project/sglang#24911) write the same sums as ``step[MIXED bs=… c=… g=… c_sq=…
c_sk=… c_sqsq=… c_sqsk=… g_sq=…]`` and ROCm's ATOM as ``prefill[bs=… tok=… sqsq=… sqsk=… sk=…]`` /
``decode[…]``; without the detailed option only counts and Σq are written (``execute_context_<n>(<Σq>)_generation_<n>
(<Σq>)``, ``step[DECODE bs=64]``). Formats: :class:`~profattn.analysis.calls.call_records.StepFormat` (as AMD-AGI/TraceLens
``TraceUtils/annotation_utils.py`` reads them).

**The exact ledger.** With bottom-right causal alignment (query row ``j`` of sequence ``i`` sits at position
``k_i − q_i + j`` and sees keys ``0 … k_i − q_i + j``), sequence ``i`` has ``q_i·k_i − q_i(q_i − 1)/2`` (query,
key) pairs per head, so a phase has ``Σpairs = Σq·k − (Σq² − Σq)/2`` — exact, from the four sums alone
(:attr:`~profattn.analysis.calls.call_records.PhaseSums.causal_pairs`). Per attention call (one layer) of Hq query
heads, Hkv KV heads and head_dim d: FLOPs = ``4·Hq·d·Σpairs`` (QKᵀ and PV, 2 FLOPs per multiply-add; FlashAttention-2
§4), minimum bytes = Q read and O written (``Σq·Hq·d`` elements each) plus each sequence's K and V read once
(``2·Σk·Hkv·d`` elements at the cache's element size) — :class:`~profattn.analysis.calls.call_records.StepLedger`.
A layer with a sliding window computes fewer pairs than this (its window is not in the trace).

**Malformed annotations** (a sum that cannot hold for positive lengths with ``k_i ≥ q_i``: Σq < n, Σk < Σq,
Σq² < Σq or below (Σq)²/n, Σq·k < Σq² or above Σq·Σk, an odd Σq² − Σq, more query tokens than the step states;
a number longer than 19 digits) give a warning and no ledger: the calls inside keep no step share rather than a
wrong one. So do calls inside two step ranges at once, and calls whose q rows are fewer than the step's Σq.

**Two ranges, one step.** An engine may annotate one forward step twice (SGLang's base ``step[EXTEND bs=15
toks=15360]`` beside the detailed ``step[EXTEND bs=15 toks=15360 c_sq=… c_sqsq=…]``, or another format's range around
the same interval). Ranges of one process whose windows overlap and that agree — the same sequences per phase, the
same Σq, and every other count both state equal — are one step (:func:`merge_steps`): each sum from the range that
records it, the window their union, and :attr:`StepAnnotation.merged` saying which field came from which range.
Overlapping ranges that disagree are kept apart, with a warning; the calls inside both then get no step.

Torch-free.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from dataclasses import dataclass, replace

import numpy as np

from profattn.analysis.calls.call_records import (
    AttentionCall, AttentionShape, CallStepShare, Engine, PartLedger, PhaseSums, ServingStep, StepAnnotation,
    StepFormat, StepLedger,
)
from profattn.errors import WorkloadError
from profattn.trace.columns import TraceWarning
from profattn.trace.kineto import Trace
from profattn.trace.windows import IntervalIndex, group_keys
from profattn.workload import DTYPE_BYTES, KVLayout, Phase, Workload
from profattn.workload.contract import FIELD_LIMITS

__all__ = [
    "MalformedStep",
    "attach_steps",
    "merge_steps",
    "parse_step_annotation",
    "part_ledger",
    "read_steps",
    "step_ledger",
    "uniform_seqs",
]

_N = r"(\d{1,19})"
_VLLM_DETAILED = re.compile(
    rf"^execute_{_N}_context_{_N}\(sq{_N}sk{_N}sqsq{_N}sqsk{_N}\)_generation_{_N}\(sq{_N}sk{_N}sqsq{_N}sqsk{_N}\)$"
)
_VLLM_NATIVE = re.compile(rf"^execute_context_{_N}\({_N}\)_generation_{_N}\({_N}\)$")
_SGLANG = re.compile(r"^step\[(EXTEND|DECODE|MIXED)\b([^\]]*)\]$")
_ATOM = re.compile(r"^(prefill|decode)\[(bs=[^\]]*)\]$")
#: Names that announce a step annotation: one of these that does not parse is malformed (a warning).
_CANDIDATE = re.compile(r"^(execute_(\d+_)?context_|step\[(EXTEND|DECODE|MIXED)\b|(prefill|decode)\[bs=)")
_KV = re.compile(r"(\w+)=(\[[^\]]*\](?:\.\.\.\+\d+)?|[^\s\]]+)")
#: Bytes per element of KV-cache dtypes beyond the compute dtypes (vLLM's fp8 cache is ``uint8`` storage).
_CACHE_BYTES = {"c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1,
                "unsigned char": 1, "uint8": 1}


@dataclass(frozen=True)
class MalformedStep:
    """A range named like a step annotation that could not be read, or (``disagrees``) one that reads but overlaps
    another step's range on its process and states different counts: its ``name`` and the ``reason``."""

    name: str
    reason: str
    disagrees: bool = False


def _int(text: str) -> int | None:
    """A count from an annotation: digits only (at most 19), else None."""
    return int(text) if re.fullmatch(r"\d{1,19}", text) else None


def _phase(requests: int, sq: int, sk: int | None = None, sqsq: int | None = None,
           sqsk: int | None = None) -> PhaseSums | str:
    """A :class:`PhaseSums`, or the reason the sums cannot belong to ``requests`` sequences of positive lengths
    with ``k_i ≥ q_i``."""
    sums = PhaseSums(requests, sq, sk, sqsq, sqsk)
    n = requests
    if n == 0:
        if any(v for v in (sq, sk, sqsq, sqsk)):
            return "a phase of 0 requests with non-zero sums"
        return sums
    if sq < n:
        return f"Σq {sq} < {n} requests (each has at least one query token)"
    if sk is not None and sk < sq:
        return f"Σk {sk} < Σq {sq} (each sequence's keys include its new tokens)"
    if sqsq is not None:
        if sqsq < sq or sqsq * n < sq * sq or sqsq > sq * sq:
            return f"Σq² {sqsq} impossible for {n} requests with Σq {sq}"
        if (sqsq - sq) % 2:
            return f"Σq² − Σq = {sqsq - sq} is odd (Σ q(q − 1) is even)"
    if sqsk is not None and sqsq is not None and sk is not None:
        if sqsk < sqsq or sqsk > sq * sk or sqsk < sk:
            return f"Σq·k {sqsk} impossible with Σq {sq}, Σk {sk}, Σq² {sqsq}"
    return sums


def parse_step_annotation(name: str, *, ts_us: float = 0.0, dur_us: float = 0.0, pid: int | str | None = None,
                          tid: int | str | None = None) -> StepAnnotation | MalformedStep | None:
    """Read one range name as a step annotation (module docstring): a :class:`StepAnnotation`, a
    :class:`MalformedStep` (it announces a step — ``execute_…context_``, ``step[EXTEND|DECODE|MIXED``,
    ``prefill[bs=``/``decode[bs=`` — but does not read), or None (not a step annotation).

    Example: ``execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)``
    → context 9 requests, Σq 8155, Σk 8430, Σq² 7,475,785, Σq·k 7,671,310; generation 37, Σq 37, Σk 34,489."""
    def made(fmt: StepFormat, engine: Engine, tokens: int | None, ctx: PhaseSums | str,
             gen: PhaseSums | str) -> StepAnnotation | MalformedStep:
        for label, part in (("context", ctx), ("generation", gen)):
            if isinstance(part, str):
                return MalformedStep(name, f"{label}: {part}")
        assert isinstance(ctx, PhaseSums) and isinstance(gen, PhaseSums)
        if tokens is not None and tokens < ctx.sum_q + gen.sum_q:
            return MalformedStep(name, f"{tokens} step tokens < Σq {ctx.sum_q + gen.sum_q} of its phases")
        return StepAnnotation(name, fmt, engine, tokens, ctx, gen, ts_us, dur_us, pid, tid)

    m = _VLLM_DETAILED.match(name)
    if m:
        v = [int(x) for x in m.groups()]
        return made(StepFormat.VLLM_DETAILED, Engine.VLLM, v[0], _phase(*v[1:6]), _phase(*v[6:11]))
    m = _VLLM_NATIVE.match(name)
    if m:
        v = [int(x) for x in m.groups()]
        return made(StepFormat.VLLM_NATIVE, Engine.VLLM, None, _phase(v[0], v[1]), _phase(v[2], v[3]))
    m = _SGLANG.match(name)
    if m:
        return _sglang(name, m.group(1), m.group(2), made)
    m = _ATOM.match(name)
    if m:
        return _atom(name, m.group(1), m.group(2), made)
    if _CANDIDATE.match(name):
        return MalformedStep(name, "names a step but does not follow a known annotation format")
    return None


def _fields(body: str) -> dict[str, str]:
    return dict(_KV.findall(body))


def _sglang(name: str, mode: str, body: str, made):  # type: ignore[no-untyped-def]
    kv = _fields(body)
    nums: dict[str, int | None] = {}
    for key in ("bs", "toks", "c", "g", "c_sq", "c_sk", "c_sqsq", "c_sqsk", "g_sq", "g_sk", "g_sqsq", "g_sqsk"):
        if key in kv:
            value = _int(kv[key])
            if value is None:
                return MalformedStep(name, f"{key}={kv[key][:30]!r} is not a count")
            nums[key] = value
    bs = nums.get("bs")
    if bs is None:
        return MalformedStep(name, "no bs= count")
    detailed = any(k in nums for k in ("c_sqsq", "g_sqsq"))
    fmt = StepFormat.SGLANG_DETAILED if detailed else StepFormat.SGLANG_NATIVE

    def phase(prefix: str, requests: int, default_q: int | None) -> PhaseSums | str:
        sq = nums.get(f"{prefix}_sq", default_q)
        if requests == 0:
            return _phase(0, sq or 0, nums.get(f"{prefix}_sk"), nums.get(f"{prefix}_sqsq"), nums.get(f"{prefix}_sqsk"))
        if sq is None:
            return "no query-token count"
        return _phase(requests, sq, nums.get(f"{prefix}_sk"), nums.get(f"{prefix}_sqsq"), nums.get(f"{prefix}_sqsk"))

    if mode == "DECODE":
        ctx, gen = _phase(0, 0, 0, 0, 0) if detailed else _phase(0, 0), phase("g", bs, bs)
    elif mode == "EXTEND":
        ctx, gen = phase("c", bs, nums.get("toks")), (_phase(0, 0, 0, 0, 0) if detailed else _phase(0, 0))
    else:
        if "c" not in nums or "g" not in nums:
            return MalformedStep(name, "a MIXED step without c= and g= request counts")
        ctx, gen = phase("c", nums["c"] or 0, None), phase("g", nums["g"] or 0, nums["g"])
    return made(fmt, Engine.SGLANG, nums.get("toks"), ctx, gen)


def _atom(name: str, kind: str, body: str, made):  # type: ignore[no-untyped-def]
    kv = _fields(body)
    bs_text = re.match(r"\d{1,19}", kv.get("bs", ""))  # "117/128": the real batch before CUDA-graph padding
    tok = _int(kv.get("tok", ""))
    if bs_text is None or tok is None:
        return MalformedStep(name, "no bs= or tok= count")
    bs = int(bs_text.group())
    sums = [(_int(kv[k]) if k in kv else None) for k in ("sk", "sqsq", "sqsk")]
    if any(k in kv and v is None for k, v in zip(("sk", "sqsq", "sqsk"), sums)):
        return MalformedStep(name, "sk=/sqsq=/sqsk= is not a count")
    detailed = all(v is not None for v in sums)
    part = _phase(bs, tok, *(sums if detailed else (None, None, None)))
    empty = _phase(0, 0, 0, 0, 0) if detailed else _phase(0, 0)
    fmt = StepFormat.ATOM_DETAILED if detailed else StepFormat.ATOM_NATIVE
    return made(fmt, Engine.ATOM, tok, part, empty) if kind == "prefill" else made(fmt, Engine.ATOM, tok, empty, part)


def read_steps(trace: Trace) -> tuple[list[StepAnnotation], list[MalformedStep]]:
    """Every step annotation among ``trace.ranges`` (``user_annotation`` events), in start order — ranges describing
    one step merged (:func:`merge_steps`) — and the ranges that announce one but do not read
    (:func:`parse_step_annotation`) or that overlap another step's range and disagree with it."""
    steps: list[StepAnnotation] = []
    bad: list[MalformedStep] = []
    r = trace.ranges
    if r.empty:
        return steps, bad
    names = r["name"].astype(str)
    hit = names.str.match(r"^(execute_|step\[|prefill\[|decode\[)").to_numpy(dtype=bool)
    for row in r[hit].itertuples(index=False):
        got = parse_step_annotation(str(row.name), ts_us=float(row.ts_us), dur_us=float(row.dur_us), pid=row.pid,
                                    tid=row.tid)
        if isinstance(got, StepAnnotation):
            steps.append(got)
        elif isinstance(got, MalformedStep):
            bad.append(got)
    steps, disagree = merge_steps(steps)
    bad.extend(MalformedStep(b, f"overlaps {a[:80]!r} but states {why}", disagrees=True) for a, b, why in disagree)
    return steps, bad


_PHASE_FIELDS = ("sum_k", "sum_q2", "sum_qk")


def _disagreement(a: StepAnnotation, b: StepAnnotation) -> str | None:
    """Why two step annotations cannot describe the same step (the first count they state differently), or None."""
    if a.tokens is not None and b.tokens is not None and a.tokens != b.tokens:
        return f"step tokens {a.tokens:,} vs {b.tokens:,}"
    for label, pa, pb in (("context", a.context, b.context), ("generation", a.generation, b.generation)):
        if pa.requests != pb.requests:
            return f"{label} sequences {pa.requests:,} vs {pb.requests:,}"
        if pa.requests and pa.sum_q != pb.sum_q:
            return f"{label} Σq {pa.sum_q:,} vs {pb.sum_q:,}"
        for f in _PHASE_FIELDS:
            va, vb = getattr(pa, f), getattr(pb, f)
            if va is not None and vb is not None and va != vb:
                return f"{label} {f} {va:,} vs {vb:,}"
    return None


def _merged(a: StepAnnotation, b: StepAnnotation) -> StepAnnotation:
    """One annotation of two that agree (:func:`_disagreement` None): the more detailed one's name, format and engine,
    each count from whichever records it (the more detailed first), the union of the two windows."""
    first, second = (a, b) if (a.has_sums, a.context.has_sums or a.generation.has_sums) >= \
        (b.has_sums, b.context.has_sums or b.generation.has_sums) else (b, a)
    origin: dict[str, str] = dict(first.merged) if first.merged else {}
    origin.setdefault("name", first.name)

    def pick(field: str, x: int | None, y: int | None, name_x: str, name_y: str) -> int | None:
        if x is not None:
            origin.setdefault(field, name_x)
            return x
        if y is not None:
            origin[field] = name_y
        return y

    phases = []
    for label, px, py in (("context", first.context, second.context),
                          ("generation", first.generation, second.generation)):
        origin.setdefault(f"{label}.requests", first.name)
        origin.setdefault(f"{label}.sum_q", first.name)
        phases.append(PhaseSums(px.requests, px.sum_q, *(
            pick(f"{label}.{f}", getattr(px, f), getattr(py, f), first.name, second.name) for f in _PHASE_FIELDS)))
    tokens = pick("tokens", first.tokens, second.tokens, first.name, second.name)
    start = min(a.ts_us, b.ts_us)
    end = max(a.ts_us + a.dur_us, b.ts_us + b.dur_us)
    return replace(first, tokens=tokens, context=phases[0], generation=phases[1], ts_us=start, dur_us=end - start,
                   merged=tuple(origin.items()))


def merge_steps(steps: Sequence[StepAnnotation]) -> tuple[list[StepAnnotation], list[tuple[str, str, str]]]:
    """Ranges that describe one step merged into one annotation (module docstring, "Two ranges, one step"): per
    process, in start order, each annotation whose window overlaps the current step's (closed intervals) and agrees
    with it joins it. Returns the steps (start order) and the overlapping pairs that disagree, as ``(name, name,
    reason)``; those stay apart."""
    out: list[StepAnnotation] = []
    disagree: list[tuple[str, str, str]] = []
    open_by_pid: dict[Any, int] = {}
    for s in sorted(steps, key=lambda s: (s.ts_us, -s.dur_us)):
        at = open_by_pid.get(s.pid)
        if at is not None:
            cur = out[at]
            if s.ts_us <= cur.ts_us + cur.dur_us:
                why = _disagreement(cur, s)
                if why is None:
                    out[at] = _merged(cur, s)
                    continue
                disagree.append((cur.name, s.name, why))
        open_by_pid[s.pid] = len(out)
        out.append(s)
    return out, disagree


# ----------------------------------------------------------------------------------------------------
# Ledgers
# ----------------------------------------------------------------------------------------------------


def _element_bytes(dtype: str | None) -> int | None:
    if dtype is None:
        return None
    return DTYPE_BYTES.get(dtype, _CACHE_BYTES.get(dtype))


def part_ledger(sums: PhaseSums, num_q_heads: int, num_kv_heads: int, head_dim: int, itemsize: int,
                kv_itemsize: int) -> PartLedger | None:
    """One phase's :class:`PartLedger` for a call of the given shape (bytes per element ``itemsize`` for Q/O,
    ``kv_itemsize`` for the cache); None for a phase without sequences or sums."""
    pairs = sums.causal_pairs
    if sums.requests == 0 or pairs is None or sums.sum_k is None:
        return None
    q_bytes = sums.sum_q * num_q_heads * head_dim * itemsize
    return PartLedger(pairs=pairs, flops=4 * num_q_heads * head_dim * pairs, q_bytes=q_bytes, o_bytes=q_bytes,
                      kv_bytes=2 * sums.sum_k * num_kv_heads * head_dim * kv_itemsize)


def step_ledger(step: StepAnnotation, shape: AttentionShape | None, *, kv_dtype: str | None = None) -> StepLedger | None:
    """The step's exact :class:`StepLedger` for one call of ``shape`` (the cache stored as ``kv_dtype`` when given,
    else as q's dtype); None without the sums or a complete shape."""
    if shape is None or not step.has_sums:
        return None
    hq, hkv, d = shape.num_q_heads, shape.num_kv_heads, shape.head_dim
    itemsize = _element_bytes(shape.dtype)
    if hq is None or hkv is None or d is None or itemsize is None:
        return None
    kv_itemsize = _element_bytes(kv_dtype) or itemsize
    return StepLedger(hq, hkv, d, itemsize, part_ledger(step.context, hq, hkv, d, itemsize, kv_itemsize),
                      part_ledger(step.generation, hq, hkv, d, itemsize, kv_itemsize))


def uniform_seqs(sums: PhaseSums) -> tuple[tuple[int, int], ...] | None:
    """The nearest uniform sequences to a phase: ``requests`` sequences whose q (and k) lengths differ by at most
    one and sum to exactly Σq (Σk), so the tokens and bytes match the step; their Σq² and Σq·k — hence FLOPs — are
    those of equal lengths, which a real spread exceeds. Example: 9 requests, Σq 8155, Σk 8430 →
    ``((907, 937),) + ((906, 937),) * 5 + ((906, 936),) * 3``. None for no requests, no Σk, or where rounding
    would make some q exceed its k."""
    n = sums.requests
    if n == 0 or sums.sum_k is None or n > FIELD_LIMITS["batch"]:  # the bound before any tuple is made
        return None
    q_lo, q_extra = divmod(sums.sum_q, n)
    k_lo, k_extra = divmod(sums.sum_k, n)
    seqs = tuple((q_lo + (i < q_extra), k_lo + (i < k_extra)) for i in range(n))
    if any(q > k or q < 1 for q, k in seqs):
        return None
    return seqs


# ----------------------------------------------------------------------------------------------------
# Steps and the calls inside them
# ----------------------------------------------------------------------------------------------------


def _call_cpu_ts(c: AttentionCall) -> float:
    return c.launch_ts_us if c.launch_ts_us is not None else c.ts_us


def attach_steps(trace: Trace, calls: Sequence[AttentionCall],
                 steps: Sequence[StepAnnotation], malformed: Sequence[MalformedStep] = ()
                 ) -> tuple[list[AttentionCall], tuple[ServingStep, ...], list[TraceWarning]]:
    """Each step's kernels, GPU time and attention calls, and each engine call inside a step given its phase,
    :class:`CallStepShare` and (from the annotation's lengths) its Workload: the exact sequences when each phase has
    at most one, else :func:`uniform_seqs` with a note. A call belongs to the step whose CPU window holds its launch
    on the same process (:class:`~profattn.trace.windows.IntervalIndex`); one inside two steps gets none.

    Returns the calls (same order), the :class:`ServingStep` records, and warnings (malformed annotations, calls in
    two steps, calls whose q rows are fewer than their step's query tokens)."""
    warnings: list[TraceWarning] = []
    for code, listed, sep, head in (
            ("step_annotations_disagree", [m for m in malformed if m.disagrees], " ",
             "step annotation(s) overlap another step's range on the same process but state different counts, so they "
             "are not merged"),
            ("step_annotation_malformed", [m for m in malformed if not m.disagrees], ": ",
             "step annotation(s) could not be read, so no step ledger is attached for them")):
        if listed:
            shown = "; ".join(f"{m.name[:80]!r}{sep}{m.reason}" for m in listed[:3])
            more = f"; and {len(listed) - 3} more" if len(listed) > 3 else ""
            warnings.append(TraceWarning(code, len(listed), f"{len(listed)} {head}: {shown}{more}"))
    out = list(calls)
    if not steps:
        return out, (), warnings
    start = np.array([s.ts_us for s in steps], dtype="float64")
    index = IntervalIndex(start, start + np.array([s.dur_us for s in steps], dtype="float64"), [s.pid for s in steps])
    k = trace.kernels
    n_kernels, gpu_us = index.points_inside(group_keys(k["launch_pid"]), k["launch_ts_us"].to_numpy(dtype="float64"),
                                            k["dur_us"].to_numpy(dtype="float64"))
    cpu_ts = np.array([_call_cpu_ts(c) for c in calls], dtype="float64")
    pids = [c.pid for c in calls]
    owner = index.innermost(pids, cpu_ts) if calls else np.zeros(0, dtype=np.int64)
    holders = _holders(steps, pids, cpu_ts)
    member: list[list[int]] = [[] for _ in steps]
    twice = 0
    for i, (s, n) in enumerate(zip(owner, holders)):
        if s < 0:
            continue
        if n > 1:
            twice += 1
            continue
        member[int(s)].append(i)
    if twice:
        warnings.append(TraceWarning("call_in_two_steps", twice, f"{twice} attention call(s) lie inside two step "
                                     "annotations at once (nested or overlapping ranges): no step ledger for them"))
    records = []
    short = 0
    for si, (step, members) in enumerate(zip(steps, member)):
        shapes = {(c.shape.num_q_heads, c.shape.num_kv_heads, c.shape.head_dim, c.shape.dtype)
                  for c in (calls[i] for i in members) if c.shape is not None}
        first = next((calls[i] for i in members if calls[i].shape is not None), None)
        kv_dtype = next((calls[i].engine.kv_cache.dtype for i in members
                         if calls[i].engine is not None and calls[i].engine.kv_cache is not None), None)
        ledger = step_ledger(step, first.shape, kv_dtype=kv_dtype) if len(shapes) == 1 and first else None
        for i in members:
            c = out[i]
            new, is_short = _with_step(c, si, step)
            short += is_short
            out[i] = new
        records.append(ServingStep(
            index=si, annotation=step, kernels=int(n_kernels[si]), gpu_time_us=float(gpu_us[si]),
            attention_calls=tuple(calls[i].index for i in members),
            attention_gpu_us=float(sum(calls[i].gpu_time_us for i in members)), ledger=ledger,
        ))
    if short:
        warnings.append(TraceWarning("call_shorter_than_step", short, f"{short} attention call(s) hold fewer query "
                                     "rows than their step annotation's Σq: the annotation does not describe them, "
                                     "no step ledger attached"))
    return out, tuple(records), warnings


def _holders(steps: Sequence[StepAnnotation], pids: list, ts: np.ndarray) -> np.ndarray:
    """How many step windows of the same process hold each point."""
    out = np.zeros(len(ts), dtype=np.int64)
    for s in steps:
        out += np.array([p == s.pid for p in pids], dtype=bool) & (ts >= s.ts_us) & (ts <= s.ts_us + s.dur_us)
    return out


def _with_step(c: AttentionCall, si: int, step: StepAnnotation) -> tuple[AttentionCall, bool]:
    """The call with its step share (and, for an engine call, its phase and workload); True when its q rows are
    fewer than the step's query tokens (then unchanged)."""
    e = c.engine
    if e is not None and e.q_tokens is not None and e.q_tokens < step.query_tokens:
        return c, True
    kv_dtype = e.kv_cache.dtype if e is not None and e.kv_cache is not None else None
    ledger = step_ledger(step, c.shape, kv_dtype=kv_dtype)
    gpu_s = c.gpu_time_us * 1e-6 if c.kernels else 0.0
    tflops = ledger.flops / gpu_s / 1e12 if ledger is not None and gpu_s > 0 else None
    gbps = ledger.total_bytes / gpu_s / 1e9 if ledger is not None and gpu_s > 0 else None
    exact = step.context.requests <= 1 and step.generation.requests <= 1
    share = CallStepShare(step=si, ledger=ledger, tflops=tflops, gbps=gbps, exact_lengths=exact)
    if e is None:
        return replace(c, step=share), False
    notes = list(c.notes)
    phase = _step_phase(step)
    workload, why = _step_workload(c, step, ledger)
    if why:
        notes.append(why)
    if e.q_tokens is not None and e.q_tokens > step.query_tokens:
        notes.append(f"q holds {e.q_tokens:,} rows for the step's {step.query_tokens:,} query tokens: "
                     f"{e.q_tokens - step.query_tokens:,} padding rows (a CUDA graph captured for a larger batch)")
    if e.sequences is not None and e.sequences != step.requests:
        notes.append(f"the backend op records {e.sequences:,} sequences, the step annotation {step.requests:,}")
    return replace(c, step=share, phase=phase, workload=workload, notes=tuple(notes)), False


def _step_phase(step: StepAnnotation) -> Phase | None:
    ctx, gen = step.context.requests, step.generation.requests
    if ctx and gen:
        return Phase.MIXED
    if gen:
        return Phase.DECODE if step.generation.sum_q == gen else Phase.PREFILL
    return Phase.PREFILL if ctx else None


def _step_workload(c: AttentionCall, step: StepAnnotation, ledger: StepLedger | None
                   ) -> tuple[Workload | None, str | None]:
    """The engine call's Workload from its step (exact lengths or the nearest uniform ones), or None and why."""
    s, e = c.shape, c.engine
    assert e is not None
    if s is None or s.num_q_heads is None or s.num_kv_heads is None or s.head_dim is None or s.dtype is None:
        return None, None
    if not step.context.has_sums and step.context.requests or not step.generation.has_sums and step.generation.requests:
        return None, ("no profattn Workload: the step annotation records counts and Σq only (enable vLLM's "
                      "detailed_trace_annotation for Σk, Σq², Σq·k)")
    requests = step.context.requests + step.generation.requests
    if requests > FIELD_LIMITS["batch"]:  # checked on the parsed counts, before per-request tuples are built
        return None, (f"no profattn Workload: the step annotation claims {requests:,} requests, beyond a workload's "
                      f"batch bound ({FIELD_LIMITS['batch']:,})")
    seqs: list[tuple[int, int]] = []
    for part in (step.context, step.generation):
        if part.requests:
            got = uniform_seqs(part)
            if got is None:
                return None, "no profattn Workload: the annotation's sums admit no uniform lengths with k >= q"
            seqs.extend(got)
    cache = e.kv_cache
    fields = dict(num_q_heads=s.num_q_heads, num_kv_heads=s.num_kv_heads, head_dim=s.head_dim, dtype=s.dtype,
                  mask="causal" if c.causal else "none")
    if cache is not None:
        fields.update(kv_layout=KVLayout.PAGED, page_size=cache.block_size)
    try:
        workload = Workload.varlen(None, seqs, **fields)  # type: ignore[arg-type]
    except WorkloadError as exc:
        return None, f"no profattn Workload: {exc}"
    exact = step.context.requests <= 1 and step.generation.requests <= 1
    if exact:
        return workload, "the step annotation gives each phase's one sequence exactly: the workload is exact"
    diff = ""
    if ledger is not None and ledger.flops:
        diff = f" ({(workload.forward_flops - ledger.flops) / ledger.flops:+.1%} FLOPs against the step's exact ledger)"
    return workload, ("nearest uniform workload: the step annotation gives each phase's sums (Σq, Σk, Σq², Σq·k), not "
                      "each sequence's lengths; these sequences keep Σq and Σk (tokens and bytes) but spread evenly"
                      f"{diff}")
