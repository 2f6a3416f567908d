"""``profattn compare BASE HEAD``: what changed between two runs, cell by cell, beyond noise.

Cells are matched by (workload tag, backend). For each matched cell:

* **latency**: head / base from the cells' independent timing samples (``profile --repeat N``; one median
  per repeat, of the CUDA-graph replay for decode on CUDA, else of eager launches), estimated with the
  Hodges–Lehmann ratio and its exact Mann–Whitney interval (:mod:`profattn.analysis.stats`, references there).
  Classification, with threshold ``t`` (default 5 %) and interval ``[lo, hi]`` at a nominal 95 %:

  - ``slower``: ``lo > 1 + t`` — the whole interval lies above a ``t`` slowdown (a regression);
  - ``faster``: ``hi < 1 / (1 + t)`` — the whole interval lies below a ``t`` speed-up (symmetric in log);
  - ``within noise``: anything else (the interval reaches into ``[1/(1+t), 1+t]``);
  - ``too few repeats``: fewer than 3 samples on a side (no interval; shown, never a regression).

* **correctness**: pass → fail is a regression even when the cell got faster; a cell that ran in the base
  and errors or is unsupported in the head is one too. Runs with different presets, with cells that never
  ran (interrupted), or a head lacking cells the base has are refused without ``--force``; with it, a
  cell only one run holds is listed, never a regression (a head may add cells: new backends).
* **launch shape**: per kernel (matched by unqualified name, :func:`profattn.analysis.kernel_stem`): grid,
  block, registers per thread, shared memory, launches per call — from the trace, or from Nsight Compute
  when a side has no trace kernels.
* **bytes**: DRAM read + write per call when both runs have counters (``bytes_ratio`` = head / base).

Per workload, the winner in each run and whether it flipped; the verdict summary of each run. The
environment (GPU, driver, torch, CUDA, cuDNN, triton, preset, ...) is diffed at the top. Runs from
different GPU models are refused (:class:`CompareError`, exit 2) unless ``force``, which puts a warning
in every output. :attr:`Comparison.regression` decides the CLI's exit code 1.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profattn.analysis.cells import kernel_stem, verdict, winners, within_noise
from profattn.errors import ProfattnError
from profattn.results import CellResult, CellStatus, RunResult
from profattn.analysis.stats import RatioEstimate, hodges_lehmann_ratio
from profattn.workload import Phase

DEFAULT_THRESHOLD = 0.05
LEVEL = 0.95

FASTER, SLOWER, NOISE, FEW, UNTIMED, ONLY_BASE, ONLY_HEAD = (
    "faster", "slower", "within noise", "too few repeats", "not timed", "only in base", "only in head")
#: Every classification, in the order reports list them.
CLASSES = (SLOWER, FASTER, NOISE, FEW, UNTIMED, ONLY_BASE, ONLY_HEAD)


class CompareError(ProfattnError):
    """Two runs that cannot be compared (different GPU models without ``--force``, a bad threshold)."""


@dataclass(frozen=True)
class EnvDiff:
    """One environment field in both runs."""

    field: str
    base: str
    head: str

    @property
    def differs(self) -> bool:
        return self.base != self.head


@dataclass(frozen=True)
class CellChange:
    """One (workload, backend) cell in both runs.

    Latencies in µs (the median of the cell's repeat medians); ``estimate``: head/base ratio and interval
    (None when either side is untimed); ``launch_changes``: one line per changed kernel property;
    ``base_dram_bytes``/``head_dram_bytes``: DRAM read + write per call (bytes; None without counters);
    ``regression_reasons``: why this cell fails the comparison (empty when it does not).
    """

    cell_id: str
    workload: str
    label: str
    phase: str
    backend: str
    classification: str
    base_status: str | None
    head_status: str | None
    base_latency_us: float | None
    head_latency_us: float | None
    estimate: RatioEstimate | None
    base_samples_us: tuple[float, ...]
    head_samples_us: tuple[float, ...]
    base_passed: bool | None
    head_passed: bool | None
    base_err: float | None
    head_err: float | None
    launch_changes: tuple[str, ...]
    base_dram_bytes: float | None
    head_dram_bytes: float | None
    regression_reasons: tuple[str, ...]

    @property
    def regression(self) -> bool:
        return bool(self.regression_reasons)

    @property
    def correctness_change(self) -> str:
        """``pass → fail``-style text; "" when neither side was checked."""
        def word(p: bool | None) -> str:
            return "–" if p is None else ("pass" if p else "fail")
        if self.base_passed is None and self.head_passed is None:
            return ""
        return word(self.base_passed) if self.base_passed == self.head_passed else f"{word(self.base_passed)} → {word(self.head_passed)}"

    @property
    def bytes_ratio(self) -> float | None:
        if self.base_dram_bytes and self.head_dram_bytes is not None:
            return self.head_dram_bytes / self.base_dram_bytes
        return None


@dataclass(frozen=True)
class WinnerChange:
    """A workload's winner in both runs; ``close_*``: the winner was within noise of the runner-up there."""

    workload: str
    label: str
    phase: str
    base_winner: str | None
    head_winner: str | None
    close_base: bool
    close_head: bool

    @property
    def flipped(self) -> bool:
        return self.base_winner != self.head_winner


@dataclass(frozen=True)
class Comparison:
    """Everything ``profattn compare`` reports; rows and Markdown are computed from it."""

    base_label: str
    head_label: str
    threshold: float
    level: float
    environment: tuple[EnvDiff, ...]
    warnings: tuple[str, ...]
    cells: tuple[CellChange, ...]
    winners: tuple[WinnerChange, ...]
    base_verdict: str
    head_verdict: str
    base_training_winner: str | None
    head_training_winner: str | None
    verdict_changes: tuple[str, ...]
    forced: bool = False

    @property
    def regressions(self) -> tuple[CellChange, ...]:
        return tuple(c for c in self.cells if c.regression)

    @property
    def regression(self) -> bool:
        """Any cell slower beyond the threshold, pass → fail, or ran → error: the CLI exits 1."""
        return bool(self.regressions)

    def count(self, classification: str) -> int:
        return sum(1 for c in self.cells if c.classification == classification)

    @property
    def verdict_flipped(self) -> bool:
        return bool(self.verdict_changes)


# ---- building ------------------------------------------------------------------------------------


def parse_threshold(text: str) -> float:
    """``"5%"`` or ``"0.05"`` → 0.05.

    Raises:
        CompareError: not a number, a bare number ≥ 1 (``"5"``: 5 % or 500 %? say which), or outside (0, 100 %).
    """
    s = str(text).strip()
    try:
        value = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise CompareError(f"--threshold {text!r} is not a number (e.g. 5% or 0.05)") from None
    if not s.endswith("%") and value >= 1:
        raise CompareError(f"--threshold {text!r} is ambiguous: write a percent ({s}%) or a fraction below 1 (e.g. 0.05)")
    if not 0 < value < 1:
        raise CompareError(f"--threshold {text!r} must be between 0 and 100%")
    return value


ENV_FIELDS = ("device_name", "device", "num_sms", "driver", "torch", "cuda", "cudnn", "triton", "python", "platform", "profattn")


def environment_diff(base: RunResult, head: RunResult) -> tuple[EnvDiff, ...]:
    """Environment fields, preset, seed, repeats and counter status of both runs (all, differing or not)."""
    def s(v: object) -> str:
        return "n/a" if v is None else str(v)
    rows = [EnvDiff(f, s(getattr(base.environment, f)), s(getattr(head.environment, f))) for f in ENV_FIELDS]
    rows += [
        EnvDiff("preset", base.preset, head.preset),
        EnvDiff("seed", str(base.seed), str(head.seed)),
        EnvDiff("timing samples per cell", base.samples_text(), head.samples_text()),
        EnvDiff("counters", base.counters_info.status, head.counters_info.status),
        EnvDiff("measured (UTC)", base.environment.created_utc, head.environment.created_utc),
    ]
    return tuple(rows)


def _label(w) -> str:
    from profattn.analysis.cells import _label as analysis_label

    return analysis_label(w) if w.phase is not Phase.TRAIN else f"train {w.q_len}/{w.kv_len}"


def _median(xs: tuple[float, ...]) -> float | None:
    from statistics import median

    return median(xs) if xs else None


def _kernels(c: CellResult) -> dict[str, dict[str, Any]]:
    """Per kernel stem: grid, block, registers, shared memory, launches per call (trace, else counters)."""
    out: dict[str, dict[str, Any]] = {}
    if c.trace is not None and c.trace.kernels:
        for k in c.trace.kernels:
            out.setdefault(kernel_stem(k.name), {
                "grid": k.grid, "block": k.block, "registers": k.registers_per_thread,
                "shared memory (bytes)": k.shared_mem_bytes, "launches per call": round(k.count_per_call, 3)})
    elif c.counters is not None:
        for k in c.counters.kernels:
            smem = None if k.shared_mem_dynamic_bytes is None and k.shared_mem_static_bytes is None else \
                int((k.shared_mem_dynamic_bytes or 0) + (k.shared_mem_static_bytes or 0))
            out.setdefault(kernel_stem(k.name), {"grid": k.grid, "block": k.block, "registers": k.registers_per_thread,
                                                 "shared memory (bytes)": smem})
    return out


def _fmt(v: object) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return "n/a" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def launch_changes(base: CellResult, head: CellResult) -> tuple[str, ...]:
    """One line per kernel property that differs (``kernel: grid [16, 4, 8] → [1, 4, 8]``), kernels that
    appear on one side only, in the base's kernel order."""
    kb, kh = _kernels(base), _kernels(head)
    if not kb or not kh:
        return ()
    lines = []
    for stem in dict.fromkeys([*kb, *kh]):
        if stem not in kh:
            lines.append(f"{stem}: only in base")
        elif stem not in kb:
            lines.append(f"{stem}: only in head")
        else:
            for prop, v in kb[stem].items():
                w = kh[stem].get(prop)
                if v is not None and w is not None and v != w:
                    lines.append(f"{stem}: {prop} {_fmt(v)} → {_fmt(w)}")
    return tuple(lines)


_RAN = (CellStatus.OK, CellStatus.INCORRECT)


def compare_cell(base: CellResult | None, head: CellResult | None, *, threshold: float, level: float = LEVEL) -> CellChange:
    """Classify one matched (or unmatched) cell; see the module docstring for the rules."""
    ref = head or base
    assert ref is not None
    bs = base.latency_samples_us if base else ()
    hs = head.latency_samples_us if head else ()
    est = hodges_lehmann_ratio(bs, hs, level=level) if bs and hs else None
    if base is None:
        cls = ONLY_HEAD
    elif head is None:
        cls = ONLY_BASE
    elif est is None:
        cls = UNTIMED
    elif est.lo is None:
        cls = FEW
    elif est.lo > 1 + threshold:
        cls = SLOWER
    elif est.hi < 1 / (1 + threshold):  # type: ignore[operator]
        cls = FASTER
    else:
        cls = NOISE
    reasons: list[str] = []
    bp = base.correctness.passed if base and base.correctness else None
    hp = head.correctness.passed if head and head.correctness else None
    if cls == SLOWER and est is not None:
        reasons.append(f"{est.change:+.1%} slower (interval {est.lo - 1:+.1%} … {est.hi - 1:+.1%}, beyond +{threshold:.0%})")  # type: ignore[operator]
    if bp is True and hp is False:
        reasons.append(f"correctness pass → fail ({head.reason or 'failed'})")  # type: ignore[union-attr]
    if (base is not None and base.status in _RAN and head is not None
            and head.status not in (*_RAN, CellStatus.PENDING)):
        # the head's kernel broke or now refuses the workload; a cell the head never reached (pending, or
        # outside its --regime/--backend selection) says nothing about the kernel and is no regression
        reasons.append(f"ran in the base run, {head.status} in the head run" + (f": {head.reason}" if head.reason else ""))
    return CellChange(
        cell_id=ref.cell_id, workload=ref.workload.tag, label=_label(ref.workload), phase=ref.workload.phase.value,
        backend=ref.backend, classification=cls,
        base_status=base.status if base else None, head_status=head.status if head else None,
        base_latency_us=_median(bs), head_latency_us=_median(hs), estimate=est,
        base_samples_us=bs, head_samples_us=hs, base_passed=bp, head_passed=hp,
        base_err=base.correctness.out_rel_err if base and base.correctness else None,
        head_err=head.correctness.out_rel_err if head and head.correctness else None,
        launch_changes=launch_changes(base, head) if base and head else (),
        base_dram_bytes=base.counters.dram_bytes if base and base.counters else None,
        head_dram_bytes=head.counters.dram_bytes if head and head.counters else None,
        regression_reasons=tuple(reasons),
    )


def _winner_changes(base: RunResult, head: RunResult) -> tuple[WinnerChange, ...]:
    from profattn.analysis.cells import runner_up

    wb, wh = winners(base), winners(head)
    workloads = {c.workload.tag: c.workload for c in (*base.cells, *head.cells)}
    out = []
    for tag, w in workloads.items():
        if tag not in wb or tag not in wh:
            continue
        def close(run: RunResult, win: CellResult | None, tag: str = tag) -> bool:
            second = runner_up(run, tag, win) if win else None
            return bool(win and second and within_noise(win, second))
        out.append(WinnerChange(tag, _label(w), w.phase.value, wb[tag].backend if wb[tag] else None,
                                wh[tag].backend if wh[tag] else None, close(base, wb[tag]), close(head, wh[tag])))
    return tuple(out)


def compare_runs(base: RunResult, head: RunResult, *, threshold: float = DEFAULT_THRESHOLD, force: bool = False,
                 base_label: str = "base", head_label: str = "head", level: float = LEVEL) -> Comparison:
    """Compare two runs (see the module docstring).

    Raises:
        CompareError: ``force`` is False and the runs come from different GPU models (device names), use
            different presets, either holds cells that never ran (an interrupted run), or the head lacks
            cells the base has; or ``threshold`` is outside (0, 1).
    """
    if not 0 < threshold < 1:
        raise CompareError(f"threshold must be between 0 and 1 (a fraction), got {threshold}")
    warnings: list[str] = []

    def refuse_unless_forced(problem: str, refusal: str, forced_note: str) -> None:
        """Raise ``problem`` + ``refusal`` without --force; with it, record ``problem`` + ``forced_note``."""
        if not force:
            raise CompareError(problem + refusal)
        warnings.append(f"Forced comparison: {problem}{forced_note}")

    gb, gh = base.environment.device_name, head.environment.device_name
    if gb != gh:
        refuse_unless_forced(f"the runs come from different devices ({gb} vs {gh})",
                             ": latency changes would mix the kernel change with the hardware; pass --force to compare anyway",
                             ". Latency, launch-shape and byte changes mix the kernel change with the hardware.")
    if base.preset != head.preset:
        refuse_unless_forced(f"the runs use different presets ({base.preset} vs {head.preset}), so their cells do not match",
                             "; pass --force to compare the cells they share", ".")
    for label, run in ((base_label, base), (head_label, head)):
        pending = sum(c.status == CellStatus.PENDING for c in run.cells)
        if pending:
            refuse_unless_forced(f"the {label} run is incomplete: {pending} of {len(run.cells)} cells never ran (interrupted?)",
                                 "; finish it (profattn profile again) or pass --force to compare the cells both ran",
                                 "; those cells are not compared.")
    env = environment_diff(base, head)
    for d in env:
        if d.differs and d.field not in ("measured (UTC)", "device_name", "device", "preset"):
            warnings.append(f"{d.field} differs: {d.base} → {d.head}")
    fewest = min((t[0] for t in (base.samples_taken(), head.samples_taken()) if t), default=0)
    if fewest < 3:
        warnings.append(f"timing samples per cell: base {base.samples_text()}, head {head.samples_text()}; latency "
                        "changes need at least 3 samples a side (profile --repeat 5) for an interval — cells with "
                        "fewer are 'too few repeats'")
    bmap = {(c.workload.tag, c.backend): c for c in base.cells}
    hmap = {(c.workload.tag, c.backend): c for c in head.cells}
    keys = list(dict.fromkeys([*bmap, *hmap]))
    lost = sum(k not in hmap for k in bmap)
    if lost and not force:  # a CI gate must not pass because the head measured less (forced: noted below)
        refuse_unless_forced(f"the {head_label} run lacks {lost} of the {base_label} run's {len(bmap)} cells (another "
                             "--regime or --backend selection?)",
                             "; profile the same selection, or pass --force to compare the cells both hold", "")
    for side, mine, other in ((base_label, bmap, hmap), (head_label, hmap, bmap)):
        only = sum(k not in other for k in mine)
        if only:
            warnings.append(f"{only} cell(s) only in the {side} run (a different --regime or --backend selection): "
                            "listed, not compared")
    phase_order = [p.value for p in Phase]
    cells = sorted((compare_cell(bmap.get(k), hmap.get(k), threshold=threshold, level=level) for k in keys),
                   key=lambda c: (phase_order.index(c.phase), keys.index((c.workload, c.backend))))
    vb, vh = verdict(base), verdict(head)
    changes = []
    if vb.training_winner != vh.training_winner:
        changes.append(f"training winner: {vb.training_winner or 'none'} → {vh.training_winner or 'none'}")
    hrows = {r.workload_tag: r for r in vh.rows}
    for r in vb.rows:
        h = hrows.get(r.workload_tag)
        if h is not None and r.stays is not None and h.stays is not None and r.stays != h.stays:
            word = {True: "stays the winner", False: "does not stay the winner"}
            changes.append(f"{r.label}: the training winner {word[r.stays]} → {word[h.stays]} ({r.winner} → {h.winner})")
    return Comparison(
        base_label=base_label, head_label=head_label, threshold=threshold, level=level, environment=env,
        warnings=tuple(warnings), cells=tuple(cells), winners=_winner_changes(base, head),
        base_verdict=vb.summary, head_verdict=vh.summary, base_training_winner=vb.training_winner,
        head_training_winner=vh.training_winner, verdict_changes=tuple(changes), forced=force and gb != gh,
    )


def run_label(path: str | os.PathLike[str]) -> str:
    """A short name for a run given on the command line: its directory's name (never an absolute path)."""
    p = Path(path)
    if p.name == "results.json":
        p = p.parent
    return p.resolve().name or "run"


# ---- rows and HTML -------------------------------------------------------------------------------


def fmt_change(est: RatioEstimate | None) -> str:
    """``+10.2 % [+8.1, +11.5] (97 %)``-style text of a ratio estimate; "–" without one."""
    if est is None:
        return "–"
    s = f"{est.change:+.1%}"
    if est.lo is not None and est.hi is not None and est.confidence is not None:
        s += f" [{(est.lo - 1) * 100:+.1f}, {(est.hi - 1) * 100:+.1f}] ({est.confidence:.0%})"
    return s


def cell_rows(cmp: Comparison) -> list[dict[str, Any]]:
    """Display-ready rows of the cell table (regressions first, then by |change|)."""
    from profattn.report.format import fmt_bytes, fmt_us

    def order(c: CellChange) -> tuple:
        return (not c.regression, CLASSES.index(c.classification), -abs(c.estimate.change) if c.estimate else 0)

    rows = []
    for c in sorted(cmp.cells, key=order):
        br = c.bytes_ratio
        rows.append({
            "cell_id": c.cell_id, "label": c.label, "phase": c.phase, "backend": c.backend,
            "classification": c.classification, "regression": c.regression,
            "base": fmt_us(c.base_latency_us), "head": fmt_us(c.head_latency_us), "change": fmt_change(c.estimate),
            "samples": f"{len(c.base_samples_us)} / {len(c.head_samples_us)}",
            "correctness": c.correctness_change, "status": c.base_status if c.base_status == c.head_status else f"{c.base_status} → {c.head_status}",
            "launch": "; ".join(c.launch_changes), "bytes": (f"{fmt_bytes(c.base_dram_bytes)} → {fmt_bytes(c.head_dram_bytes)} ({br - 1:+.1%})"
                                                              if br is not None else ""),
            "reasons": "; ".join(c.regression_reasons),
        })
    return rows


def winner_rows(cmp: Comparison) -> list[dict[str, Any]]:
    return [{"label": w.label, "phase": w.phase, "base": (w.base_winner or "none") + (" (tie)" if w.close_base else ""),
             "head": (w.head_winner or "none") + (" (tie)" if w.close_head else ""), "flipped": w.flipped,
             "noise_flip": w.flipped and (w.close_base or w.close_head)} for w in cmp.winners]


def summary_line(cmp: Comparison) -> str:
    """One sentence: counts per class and whether the comparison fails."""
    parts = [f"{cmp.count(k)} {k}" for k in CLASSES if cmp.count(k)]
    head = f"{len(cmp.regressions)} regression(s)" if cmp.regression else "no regression"
    return f"{head} beyond ±{cmp.threshold:.0%} — " + ", ".join(parts) + "."


def forest_figure(cmp: Comparison) -> dict[str, Any] | None:
    """Plotly figure (JSON-ready): head/base ratio with its interval per timed cell, the threshold band."""
    import plotly.graph_objects as go

    cells = [c for c in cmp.cells if c.estimate is not None]
    if not cells:
        return None
    colors = {SLOWER: "#c0392b", FASTER: "#1e8449", NOISE: "#7f8c8d", FEW: "#b9770e"}
    fig = go.Figure()
    for cls in (SLOWER, FASTER, NOISE, FEW):
        sel = [c for c in cells if c.classification == cls]
        if not sel:
            continue
        est = [c.estimate for c in sel]
        fig.add_scatter(
            x=[e.ratio for e in est], y=[f"{c.label} · {c.backend}" for c in sel], mode="markers", name=cls,
            marker={"color": colors[cls], "size": 8},
            error_x={"type": "data", "symmetric": False, "array": [(e.hi - e.ratio) if e.hi else 0 for e in est],
                         "arrayminus": [(e.ratio - e.lo) if e.lo else 0 for e in est]},
            hovertemplate="%{y}<br>head/base %{x:.3f}<extra>" + cls + "</extra>")
    for x, dash in ((1.0, "solid"), (1 + cmp.threshold, "dash"), (1 / (1 + cmp.threshold), "dash")):
        fig.add_vline(x=x, line_dash=dash, line_color="black", line_width=1)
    fig.update_layout(title=f"Latency head / base with {cmp.level:.0%} intervals (Hodges–Lehmann, Mann–Whitney); dashed: ±{cmp.threshold:.0%}",
                      xaxis_type="log", xaxis_title="head / base latency (log)", height=max(320, 22 * len(cells) + 120),
                      yaxis={"autorange": "reversed"})
    return json.loads(fig.to_json())


def render_html(cmp: Comparison) -> str:
    """The comparison as one self-contained HTML page (plotly.js inline)."""
    from profattn.report.render import environment as template_env, plotly_js as _plotly_js

    return template_env().get_template("compare.html.j2").render(
        cmp=cmp, summary=summary_line(cmp), rows=cell_rows(cmp), winners=winner_rows(cmp),
        env=[d for d in cmp.environment], chart=forest_figure(cmp), plotly_js=_plotly_js(),
    )


def write_html(cmp: Comparison, path: str | os.PathLike[str]) -> Path:
    from profattn.report.render import write_html_file

    return write_html_file(render_html(cmp), path)
