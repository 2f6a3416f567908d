"""Why one call is slower than another: typed findings from a run's own evidence. Torch-free.

Every comparison the verdict makes (a winner against its runner-up or the training winner, a serving call against
the unchunked prompt, a prompt chunked against the same prompt whole) gets a :class:`Gap`: the two sides'
:class:`CallProfile` (one call, or the sum over a prompt's chunks), the time difference split into the parts the
traces can attribute (host and launch gaps, kernels besides the attention kernel, the attention kernel itself), and
the findings that explain it, each carrying its numbers:

- :class:`ExtraKernels`: kernels in the call besides its attention kernel, by role (:class:`KernelRole`: a mask
  built, a layout copy, a split combine, ...), their launches and share of the call's GPU time (trace);
- :class:`ExtraWork`: pairs executed against pairs required, from ``CellResult.executed_pairs`` (padding) or, for a
  causal call that built an explicit mask in its window (mask kernels in its trace), the full ``q × kv`` rectangle a
  kernel given a boolean mask computes (it cannot skip a tile by position);
- :class:`Rate`: achieved TFLOP/s and GB/s against the run's measured ceilings, what bounds the call (:class:`Bound`)
  and the timing floor (the larger of the FLOP and byte floors at those ceilings); only where ceilings were measured;
- :class:`Traffic`: DRAM and L2→SM bytes against the requested bytes (Nsight Compute counters only);
- :class:`Grid`: the attention kernel's CTAs against the SMs (CTAs per SM, idle SMs; waves from Nsight Compute);
- :class:`HostGap`: the latency the call's kernels leave uncovered (launch and dispatch).

A finding the evidence cannot support is absent: no trace, no kernel roles, no GPU time; no counters, no traffic;
no ceilings, no fractions. Nothing is estimated. Thresholds are module constants; :mod:`profattn.report` words them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from profattn.analysis.common.bounds import LAUNCH_BOUND_FRACTION
from profattn.analysis.run.layout import CacheLayout, cell_layout
from profattn.analysis.run.ledgers import ByteLedger, summed_ledger
from profattn.results import CellResult, KernelLaunch, RunResult
from profattn.workload import Mask, Phase

#: Achieved FLOP/s (or requested bytes/s) at this fraction of the run's ceiling or above: compute- (bandwidth-) bound.
BOUND_FRACTION = 0.5
#: A part of a gap (host gaps, extra kernels) that explains at least this share of it is named.
PART_SHARE = 0.10
#: Executed work at least this multiple of the required work is extra work.
EXTRA_WORK_RATIO = 1.05
#: DRAM traffic this many times the requested bytes more than the other side's is a traffic difference.
TRAFFIC_RATIO_STEP = 0.2


class KernelRole(Enum):
    """What one kernel of an attention call does, read from its name (:data:`ROLE_PATTERNS`)."""

    ATTENTION = "attention"  #: the attention computation itself (every kernel no other role claims)
    COMBINE = "split combine"  #: merges split-KV partial outputs by their log-sum-exp
    MASK = "mask build"  #: builds (or applies) an explicit boolean mask or its additive bias
    LAYOUT = "layout copy"  #: gathers or copies K/V into another layout (pages → contiguous, a GQA expansion, a cast)
    INDEX = "index setup"  #: converts page or index lists for the kernel
    FILL = "fill"  #: initialises an output or scratch buffer
    OTHER = "other"  #: generic PyTorch element-wise or reduction work beside a fused kernel


#: Kernel-name regexes per role (case-insensitive ``re.search``), tried in this order; from the kernels of the
#: committed H200 runs (PyTorch's ``at::native`` kernels, flash-attn's and cuDNN's split-KV reductions, FlashInfer's
#: ``MergeStates``, our combine). A kernel none matches is :attr:`KernelRole.ATTENTION`, or :attr:`KernelRole.OTHER`
#: when it is PyTorch's generic element-wise/reduction kernel in a fused backend's call.
ROLE_PATTERNS: tuple[tuple[KernelRole, tuple[str, ...]], ...] = (
    (KernelRole.COMBINE, (r"combine", r"MergeStates", r"lean_reduction")),
    (KernelRole.MASK, (r"triu_tril", r"FillFunctor<bool>", r"masked_fill", r"bitwise_not")),
    (KernelRole.LAYOUT, (r"gather", r"index_elementwise", r"\bindex_kernel", r"direct_copy", r"_copy_kernel", r"CatArray")),
    (KernelRole.INDEX, (r"IndicesTo\w*Offsets",)),
    (KernelRole.FILL, (r"FillFunctor", r"\bzero_")),
)
#: In a call that builds a mask, these element-wise kernels are part of it (the mask turned into an additive bias:
#: ``where``; its scalar fills).
MASK_COMPANIONS = (r"where_kernel", r"FillFunctor")
#: PyTorch's generic kernels: in a fused backend's call they are work beside the attention kernel.
GENERIC_KERNEL = r"\bat::native::"
#: Families whose attention *is* a composite of generic kernels (GEMMs, softmax, element-wise): nothing is "other".
COMPOSITE_FAMILIES = frozenset({"dense", "nested"})


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(re.search(p, name, re.IGNORECASE) for p in patterns)


def kernel_roles(cell: CellResult) -> tuple[tuple[KernelLaunch, KernelRole], ...]:
    """Every kernel of the cell's trace (per call) with its :class:`KernelRole`; empty without a trace."""
    if cell.trace is None:
        return ()
    ks = cell.trace.kernels
    out = []
    for k in ks:
        role = next((r for r, pats in ROLE_PATTERNS if _matches(k.name, pats)), None)
        out.append((k, role))
    masked = any(r is KernelRole.MASK for _, r in out)
    result = []
    for k, role in out:
        if masked and role in (None, KernelRole.FILL) and _matches(k.name, MASK_COMPANIONS):
            role = KernelRole.MASK
        if role is None:
            generic = re.search(GENERIC_KERNEL, k.name) is not None and cell.family not in COMPOSITE_FAMILIES
            role = KernelRole.OTHER if generic else KernelRole.ATTENTION
        result.append((k, role))
    return tuple(result)


class WorkCause(Enum):
    """Why a call executes more (query, key) pairs than it requires."""

    PADDING = "padding"  #: a variable-length call padded to its longest sequence (``CellResult.executed_pairs``)
    DENSE_MASK = "explicit mask"  #: a causal call given a boolean mask, so every tile of ``q × kv`` is computed


class Bound(Enum):
    """What sets a call's time, from its timing, its trace and the run's ceilings."""

    COMPUTE = "compute-bound"  #: achieved TFLOP/s ≥ BOUND_FRACTION × the GEMM ceiling
    BANDWIDTH = "bandwidth-bound"  #: requested bytes / latency ≥ BOUND_FRACTION × the memory roof
    LAUNCH = "launch-bound"  #: the kernels cover less than LAUNCH_BOUND_FRACTION of the latency (or a floor rule)
    NEITHER = "neither"  #: below both roofs and above the floor: the kernel's own schedule sets the time
    UNKNOWN = "unknown"  #: not timed, or no ceilings and no trace to tell


def bound_of(tflops_fraction: float | None, gbps_fraction: float | None, gpu_us: float | None, latency_us: float | None,
             *, at_floor: bool = False, measured: bool = True) -> Bound:
    """The one rule for :class:`Bound`, in this order: compute-bound (``tflops_fraction`` ≥ :data:`BOUND_FRACTION`),
    bandwidth-bound (``gbps_fraction`` ≥ it), launch-bound (``at_floor``, or kernels ``gpu_us`` under
    :data:`LAUNCH_BOUND_FRACTION` of ``latency_us``), neither (when ceilings were ``measured``), else unknown."""
    if latency_us is None:
        return Bound.UNKNOWN
    if tflops_fraction is not None and tflops_fraction >= BOUND_FRACTION:
        return Bound.COMPUTE
    if gbps_fraction is not None and gbps_fraction >= BOUND_FRACTION:
        return Bound.BANDWIDTH
    if at_floor or (gpu_us is not None and gpu_us < LAUNCH_BOUND_FRACTION * latency_us):
        return Bound.LAUNCH
    return Bound.NEITHER if measured else Bound.UNKNOWN


@dataclass(frozen=True)
class RoleTime:
    """The kernels of one role in a call (or summed over a prompt's chunks): launches per call, GPU µs, names."""

    role: KernelRole
    launches: float
    gpu_us: float
    names: tuple[str, ...]


@dataclass(frozen=True)
class CallProfile:
    """One backend's evidence for one call, or summed over the calls of a prompt's chunks (``calls`` > 1).

    ``latency_us``: Σ judged latencies (graph replay where captured); ``gpu_us``: Σ traced kernel time per call and
    ``launches`` Σ kernel launches (None unless every call was traced); ``roles``: the traced kernels by
    :class:`KernelRole`, attention first; ``flops``: Σ required FLOPs (the workloads' ledgers); ``executed_flops`` /
    ``work_cause``: Σ FLOPs executed when some call executes more than it requires (None otherwise);
    ``requested_bytes``: Σ minimum bytes; ``ledger``: the byte ledger over the calls
    (:func:`~profattn.analysis.run.ledgers.summed_ledger`: measured sums only where every call has counters); ``ctas``: the attention kernel's CTAs per launch, per call (distinct, in call order); ``waves``: its
    waves per SM from Nsight Compute (per call, where measured); ``num_sms``, ``matmul_tflops``, ``roof_gbps``,
    ``roof_kind``: the run's; ``layout``: what the kernel read (:func:`profattn.analysis.run.layout.cache_layout`).
    """

    backend: str
    phase: Phase
    calls: int
    latency_us: float
    gpu_us: float | None
    launches: float | None
    roles: tuple[RoleTime, ...]
    flops: int
    executed_flops: int | None
    work_cause: WorkCause | None
    requested_bytes: int
    ledger: ByteLedger
    ctas: tuple[int, ...]
    waves: tuple[float, ...]
    query_rows: int
    num_sms: int | None
    matmul_tflops: float | None
    roof_gbps: float | None
    roof_kind: str
    layout: CacheLayout | None

    @property
    def dram_bytes(self) -> float | None:
        """Σ DRAM bytes measured (None unless every call has the counters)."""
        return self.ledger.dram_bytes

    def role(self, role: KernelRole) -> RoleTime | None:
        """The kernels of ``role``, None when the call has none."""
        return next((r for r in self.roles if r.role is role), None)

    @property
    def attention_us(self) -> float | None:
        """GPU µs of the attention kernels (None without a trace)."""
        if self.gpu_us is None:
            return None
        r = self.role(KernelRole.ATTENTION)
        return r.gpu_us if r is not None else 0.0

    @property
    def extra_us(self) -> float | None:
        """GPU µs of every kernel besides the attention kernels (None without a trace)."""
        return None if self.gpu_us is None else sum(r.gpu_us for r in self.roles if r.role is not KernelRole.ATTENTION)

    @property
    def host_us(self) -> float | None:
        """Latency the kernels leave uncovered, µs (launch and dispatch gaps; ≥ 0; None without a trace)."""
        return None if self.gpu_us is None else max(0.0, self.latency_us - self.gpu_us)

    @property
    def tflops(self) -> float:
        """Required FLOPs over the latency, TFLOP/s."""
        return self.flops / (self.latency_us * 1e-6) / 1e12

    @property
    def gbps(self) -> float:
        """Requested bytes over the latency, GB/s (GB = 1e9 B)."""
        return self.requested_bytes / (self.latency_us * 1e-6) / 1e9

    @property
    def kernel_tflops(self) -> float | None:
        """Executed FLOPs (required where nothing extra ran) over the attention kernels' GPU time, TFLOP/s: how fast the
        kernel did the work it did. None without a traced attention kernel."""
        t = self.attention_us
        if not t:
            return None
        return (self.executed_flops or self.flops) / (t * 1e-6) / 1e12

    @property
    def floor_us(self) -> float | None:
        """The timing floor: the larger of the FLOPs at the GEMM ceiling and the requested bytes at the memory roof, µs
        (None without ceilings)."""
        if not self.matmul_tflops or not self.roof_gbps:
            return None
        return max(self.flops / (self.matmul_tflops * 1e12), self.requested_bytes / (self.roof_gbps * 1e9)) * 1e6

    @property
    def floor_kind(self) -> str | None:
        """``"compute"`` or ``"bytes"``: which floor :attr:`floor_us` is."""
        if not self.matmul_tflops or not self.roof_gbps:
            return None
        return "compute" if self.flops / (self.matmul_tflops * 1e12) >= self.requested_bytes / (self.roof_gbps * 1e9) else "bytes"

    @property
    def bound(self) -> Bound:
        """:func:`bound_of` this call."""
        tf = self.tflops / self.matmul_tflops if self.matmul_tflops else None
        bw = self.gbps / self.roof_gbps if self.roof_gbps else None
        return bound_of(tf, bw, self.gpu_us, self.latency_us, measured=self.matmul_tflops is not None)


def _attention_kernel(cell: CellResult) -> KernelLaunch | None:
    """The cell's longest attention-role kernel (per call)."""
    att = [k for k, r in kernel_roles(cell) if r is KernelRole.ATTENTION]
    return max(att, key=lambda k: k.dur_us_per_call) if att else None


def executed_pairs(cell: CellResult, roles: Sequence[tuple[KernelLaunch, KernelRole]] | None = None) -> tuple[int, WorkCause] | None:
    """(query, key) pairs per query head the cell's kernel executed beyond those its workload requires, with why:
    ``CellResult.executed_pairs`` (padding) where recorded; else, for a causal call whose trace shows a mask built in
    its window (:attr:`KernelRole.MASK` kernels), the full rectangle ``Σ q_len · kv_len``. None when neither applies or
    the count does not exceed the required pairs."""
    w = cell.workload
    if cell.executed_pairs is not None:
        return (cell.executed_pairs, WorkCause.PADDING) if cell.executed_pairs > w.attended_pairs else None
    roles = kernel_roles(cell) if roles is None else roles
    if w.mask is Mask.CAUSAL and any(r is KernelRole.MASK for _, r in roles):
        rect = sum(q * k for q, k in zip(w.q_lens, w.kv_lens))
        return (rect, WorkCause.DENSE_MASK) if rect > w.attended_pairs else None
    return None


def call_profile(cells: Sequence[CellResult], run: RunResult) -> CallProfile:
    """The :class:`CallProfile` of one backend's ``cells`` (one call, or a prompt's chunk calls in order).

    Raises:
        ValueError: ``cells`` is empty, mixes backends, or holds an untimed cell.
    """
    if not cells:
        raise ValueError("call_profile needs at least one cell")
    if len({c.backend for c in cells}) != 1:
        raise ValueError(f"call_profile over several backends: {sorted({c.backend for c in cells})}")
    if any(c.latency_us is None for c in cells):
        raise ValueError("call_profile needs timed cells")
    traced = all(c.trace is not None and c.trace.gpu_time_per_call_us is not None for c in cells)
    by_role: dict[KernelRole, list] = {}
    executed, cause, any_extra = 0, None, False
    ctas: list[int] = []
    waves: list[float] = []
    for c in cells:
        roles = kernel_roles(c)
        for k, r in roles:
            entry = by_role.setdefault(r, [0.0, 0.0, []])
            entry[0] += k.count_per_call
            entry[1] += k.dur_us_per_call
            entry[2].append(k.name)
        extra = executed_pairs(c, roles)
        if extra is not None:
            any_extra, cause = True, extra[1] if cause is None or cause is extra[1] else cause
            executed += c.workload.flops_for_pairs(extra[0])
        else:
            executed += c.workload.flops
        top = _attention_kernel(c)
        if top is not None and top.ctas is not None and top.ctas not in ctas:
            ctas.append(top.ctas)
        if top is not None and c.counters is not None:
            from profattn.analysis.common.names import kernel_stem  # here: the cells module loads the trace layer (pandas)

            stem = kernel_stem(top.name)
            w_ = next((k.waves_per_sm for k in c.counters.kernels if kernel_stem(k.name) == stem and k.waves_per_sm is not None), None)
            if w_ is not None:
                waves.append(w_)
    order = list(KernelRole)
    roles_t = tuple(RoleTime(r, v[0], v[1], tuple(dict.fromkeys(v[2]))) for r, v in sorted(by_role.items(), key=lambda kv: order.index(kv[0])))
    ceil = run.ceilings
    w0 = cells[0].workload
    return CallProfile(
        backend=cells[0].backend, phase=w0.phase, calls=len(cells),
        latency_us=sum(c.latency_us for c in cells),  # type: ignore[misc]
        gpu_us=sum(c.trace.gpu_time_per_call_us for c in cells) if traced else None,  # type: ignore[misc, union-attr]
        launches=sum(c.trace.kernels_per_call for c in cells) if traced else None,  # type: ignore[union-attr]
        roles=roles_t if traced else (),
        flops=sum(c.workload.flops for c in cells), executed_flops=executed if any_extra else None,
        work_cause=cause if any_extra else None, requested_bytes=sum(c.workload.requested_bytes for c in cells),
        ledger=summed_ledger(cells),
        ctas=tuple(ctas), waves=tuple(waves), query_rows=w0.batch * w0.num_q_heads * w0.q_len,
        num_sms=run.environment.num_sms, matmul_tflops=ceil.matmul_tflops if ceil else None,
        roof_gbps=ceil.bandwidth_gbps if ceil else None, roof_kind=ceil.bandwidth_kind if ceil else "copy",
        layout=cell_layout(cells[0]),
    )


# ---- findings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExtraKernels:
    """Kernels of one role besides the attention kernel in ``backend``'s call: ``launches`` per call (per prompt for a
    prompt), ``gpu_us`` their time, ``share`` of the call's GPU time (0–1), ``names`` the kernels."""

    backend: str
    role: KernelRole
    launches: float
    gpu_us: float
    share: float
    names: tuple[str, ...]


@dataclass(frozen=True)
class ExtraWork:
    """``backend`` executed ``executed_flops`` for ``required_flops`` of work (``cause`` says why)."""

    backend: str
    executed_flops: int
    required_flops: int
    cause: WorkCause

    @property
    def ratio(self) -> float:
        """Executed / required (> 1)."""
        return self.executed_flops / self.required_flops


@dataclass(frozen=True)
class Rate:
    """``backend``'s achieved rates: ``tflops`` (required FLOPs / latency) and ``gbps`` (requested bytes / latency) with
    their fractions of the run's GEMM ceiling and memory roof (None without ceilings), ``kernel_tflops`` (executed
    FLOPs / attention kernel time; None untraced), ``bound``, ``floor_us`` (:attr:`CallProfile.floor_us`) and
    ``latency_us``."""

    backend: str
    tflops: float
    tflops_fraction: float | None
    gbps: float
    gbps_fraction: float | None
    kernel_tflops: float | None
    bound: Bound
    floor_us: float | None
    floor_kind: str | None
    latency_us: float
    roof_kind: str


@dataclass(frozen=True)
class Traffic:
    """``backend``'s measured bytes (Nsight Compute, cold caches): its :class:`~profattn.analysis.run.ledgers.ByteLedger`
    (over the prompt's chunks for a prompt) with DRAM measured; ``group_size``: the workload's GQA group (K/V read once
    per query head would move ~group × the K/V bytes)."""

    backend: str
    ledger: ByteLedger
    group_size: int

    @property
    def dram_bytes(self) -> float:
        """DRAM read + write bytes."""
        return self.ledger.dram_bytes  # type: ignore[return-value]

    @property
    def requested_bytes(self) -> int:
        """The workload's minimum bytes."""
        return self.ledger.requested_bytes

    @property
    def l2_bytes(self) -> float | None:
        """L2→SM read bytes (None unmeasured)."""
        return self.ledger.l2_to_sm_bytes

    @property
    def dram_ratio(self) -> float:
        """DRAM bytes / requested."""
        return self.ledger.dram_ratio  # type: ignore[return-value]

    @property
    def l2_ratio(self) -> float | None:
        """L2→SM bytes / requested (None unmeasured)."""
        return self.ledger.l2_ratio


@dataclass(frozen=True)
class Grid:
    """``backend``'s attention kernel launch against the GPU: ``ctas`` per launch (the range over a prompt's calls),
    ``num_sms``, ``waves`` per SM from Nsight Compute (None unmeasured), ``query_rows`` (B·Hq·Lq of one call)."""

    backend: str
    ctas_min: int
    ctas_max: int
    num_sms: int
    waves: float | None
    query_rows: int

    @property
    def ctas_per_sm(self) -> float:
        """CTAs per launch / SMs (the smallest launch)."""
        return self.ctas_min / self.num_sms

    @property
    def idle_sms(self) -> int:
        """SMs the smallest launch leaves without a CTA (0 when it has as many CTAs as SMs)."""
        return max(0, self.num_sms - self.ctas_min)


@dataclass(frozen=True)
class HostGap:
    """``backend``'s latency against its kernels' GPU time (µs): what is left is launch and dispatch."""

    backend: str
    latency_us: float
    gpu_us: float

    @property
    def host_us(self) -> float:
        """Latency not covered by kernels, µs (≥ 0)."""
        return max(0.0, self.latency_us - self.gpu_us)

    @property
    def launch_bound(self) -> bool:
        """The kernels cover under :data:`LAUNCH_BOUND_FRACTION` of the latency."""
        return self.gpu_us < LAUNCH_BOUND_FRACTION * self.latency_us


Finding = ExtraKernels | ExtraWork | Rate | Traffic | Grid | HostGap


def findings(p: CallProfile, group_size: int = 1) -> tuple[Finding, ...]:
    """Every finding the evidence of ``p`` supports (none is estimated): extra kernels by role, extra work, rates
    (measured ceilings), traffic (counters), grid (traced CTAs and the SM count), host gap (traced GPU time)."""
    out: list[Finding] = []
    if p.gpu_us:
        for r in p.roles:
            if r.role is not KernelRole.ATTENTION and r.gpu_us > 0:
                out.append(ExtraKernels(p.backend, r.role, r.launches, r.gpu_us, r.gpu_us / p.gpu_us, r.names))
    if p.executed_flops is not None and p.work_cause is not None and p.executed_flops > p.flops:
        out.append(ExtraWork(p.backend, p.executed_flops, p.flops, p.work_cause))
    if p.matmul_tflops and p.roof_gbps:  # without ceilings a rate only restates the latency ratio
        out.append(Rate(p.backend, p.tflops, p.tflops / p.matmul_tflops, p.gbps, p.gbps / p.roof_gbps, p.kernel_tflops,
                        p.bound, p.floor_us, p.floor_kind, p.latency_us, p.roof_kind))
    if p.dram_bytes is not None:
        out.append(Traffic(p.backend, p.ledger, group_size))
    if p.ctas and p.num_sms:
        out.append(Grid(p.backend, min(p.ctas), max(p.ctas), p.num_sms, max(p.waves) if p.waves else None, p.query_rows))
    if p.gpu_us is not None:
        out.append(HostGap(p.backend, p.latency_us, p.gpu_us))
    return tuple(out)


class GapPart(Enum):
    """A part of the time between two calls that the traces attribute."""

    HOST = "host and launch gaps"  #: latency not covered by kernels
    EXTRA = "extra kernels"  #: kernels besides the attention kernel
    ATTENTION = "attention kernel"  #: the attention kernels themselves


@dataclass(frozen=True)
class Gap:
    """Why ``behind`` takes longer than ``ahead``.

    ``delta_us``: behind − ahead latency (µs); ``parts``: that difference split into :class:`GapPart` (µs each, behind
    − ahead; empty unless both sides were traced; the parts add to ``delta_us`` up to the gap between a profiled and a
    timed call), largest first; ``explains``: the findings that differ between the sides, in the order they explain
    the gap (the largest part's first); ``ahead_findings`` / ``behind_findings``: every finding of each side.
    """

    ahead: CallProfile
    behind: CallProfile
    delta_us: float
    parts: tuple[tuple[GapPart, float], ...]
    explains: tuple[Finding, ...]
    ahead_findings: tuple[Finding, ...]
    behind_findings: tuple[Finding, ...]

    @property
    def main_part(self) -> GapPart | None:
        """The part that accounts for most of the gap (None untraced)."""
        return self.parts[0][0] if self.parts else None

    @property
    def ratio(self) -> float:
        """behind / ahead latency."""
        return self.behind.latency_us / self.ahead.latency_us


def _of(fs: Sequence[Finding], kind: type) -> list:
    return [f for f in fs if isinstance(f, kind)]


def gap(ahead: CallProfile, behind: CallProfile, group_size: int = 1) -> Gap:
    """The :class:`Gap` between two profiles of the same call (or prompt), ``behind`` the slower.

    ``explains`` holds, in order: the parts that take at least :data:`PART_SHARE` of the gap — ``behind``'s extra
    kernels by role (their time more than ``ahead``'s of that role), its host gap when it grew; then, for the attention
    kernel, ``behind``'s extra work (when it executes ≥ :data:`EXTRA_WORK_RATIO` × more than ``ahead`` does, relative
    to the work required), its traffic (DRAM / requested at least :data:`TRAFFIC_RATIO_STEP` above ``ahead``'s), its
    grid (it leaves SMs idle, or launches under half ``ahead``'s CTAs per SM), and both sides' rates last.
    """
    fa, fb = findings(ahead, group_size), findings(behind, group_size)
    delta = behind.latency_us - ahead.latency_us
    parts: list[tuple[GapPart, float]] = []
    if ahead.gpu_us is not None and behind.gpu_us is not None:
        parts = [(GapPart.HOST, behind.host_us - ahead.host_us),  # type: ignore[operator]
                 (GapPart.EXTRA, behind.extra_us - ahead.extra_us),  # type: ignore[operator]
                 (GapPart.ATTENTION, behind.attention_us - ahead.attention_us)]  # type: ignore[operator]
        parts.sort(key=lambda p: -p[1])
    explains: list[Finding] = []
    threshold = PART_SHARE * max(delta, 0.0)

    def attention_findings() -> list[Finding]:
        out: list[Finding] = []
        wa = (ahead.executed_flops or ahead.flops) / ahead.flops
        wb_ = _of(fb, ExtraWork)
        if wb_ and wb_[0].ratio >= EXTRA_WORK_RATIO * wa:
            out.append(wb_[0])
        ta, tb = _of(fa, Traffic), _of(fb, Traffic)
        if tb and (not ta or tb[0].dram_ratio >= ta[0].dram_ratio + TRAFFIC_RATIO_STEP):
            out.append(tb[0])
        ga, gb = _of(fa, Grid), _of(fb, Grid)
        persistent = bool(gb) and gb[0].ctas_min == gb[0].num_sms  # one CTA per SM looping over tiles: not underfilled
        if gb and (gb[0].idle_sms and not (ga and ga[0].idle_sms >= gb[0].idle_sms)
                   or (ga and not persistent and gb[0].ctas_per_sm < 0.5 * ga[0].ctas_per_sm)):
            out.append(gb[0])
        return out

    for part, us in parts or [(GapPart.ATTENTION, delta)]:
        if us < threshold and parts:
            continue
        if part is GapPart.EXTRA:
            for e in _of(fb, ExtraKernels):
                mine = ahead.role(e.role)
                if e.gpu_us - (mine.gpu_us if mine else 0.0) >= threshold:
                    explains.append(e)
        elif part is GapPart.HOST:
            explains += _of(fb, HostGap)
        else:
            explains += attention_findings()
    if not parts:
        explains += [e for e in _of(fb, ExtraKernels)]
    explains += _of(fa, Rate) + _of(fb, Rate)
    return Gap(ahead, behind, delta, tuple(parts), tuple(dict.fromkeys(explains)), fa, fb)


def cell_gap(ahead: CellResult, behind: CellResult, run: RunResult) -> Gap | None:
    """:func:`gap` of two timed cells of one workload (None when either is untimed)."""
    if ahead.latency_us is None or behind.latency_us is None:
        return None
    return gap(call_profile([ahead], run), call_profile([behind], run), ahead.workload.group_size)


def layout_copy_us(cell: CellResult) -> float | None:
    """GPU µs per call of the cell's :attr:`KernelRole.LAYOUT` kernels (e.g. ``torch-paged-reference``'s page
    gather); None without a trace or without such kernels."""
    ks = [k for k, r in kernel_roles(cell) if r is KernelRole.LAYOUT]
    return sum(k.dur_us_per_call for k in ks) if ks else None
