"""The one launch-bound rule, read by the run's verdicts and the selection's cost models alike."""

from __future__ import annotations

from profattn.analysis.common.bounds import LAUNCH_BOUND_FRACTION, launch_bound
from profattn.analysis.run import mechanisms, verdict


def test_kernels_under_sixty_percent_of_the_latency_are_launch_bound():
    # the third draw's 2-head prefill: cuDNN's kernel 17.7 µs of a 50.6 µs call (35 %) -> launch-bound;
    # sdpa-flash 27.6 of 32.3 µs (85 %) -> not; exactly 60 % is not under it
    assert LAUNCH_BOUND_FRACTION == 0.6
    assert launch_bound(17.7, 50.6) and not launch_bound(27.6, 32.3) and not launch_bound(6.0, 10.0)
    assert not launch_bound(None, 50.6) and not launch_bound(17.7, None) and not launch_bound(0.0, 5.0)


def test_the_run_layer_reads_the_same_constant():
    assert mechanisms.LAUNCH_BOUND_FRACTION is LAUNCH_BOUND_FRACTION is verdict.LAUNCH_BOUND_FRACTION
