"""The one launch-bound rule: a call whose kernels (the trace's GPU time per call) run for less than
:data:`LAUNCH_BOUND_FRACTION` of its latency is launch-bound — host dispatch and launch gaps, not its kernels, set
its time. The run's verdicts (``analysis.run``) and the selection's cost models (``analysis.selection``) both read it."""

from __future__ import annotations

#: A cell whose kernels run for less than this fraction of its latency is launch-bound.
LAUNCH_BOUND_FRACTION = 0.6


def launch_bound(gpu_us: float | None, latency_us: float | None) -> bool:
    """Whether kernels of ``gpu_us`` (µs per call, from the trace) run under :data:`LAUNCH_BOUND_FRACTION` of a call of
    ``latency_us`` (µs); False when either is unknown or not positive."""
    return bool(gpu_us and latency_us and gpu_us > 0 and latency_us > 0 and gpu_us < LAUNCH_BOUND_FRACTION * latency_us)


__all__ = ["LAUNCH_BOUND_FRACTION", "launch_bound"]
