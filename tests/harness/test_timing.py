"""CUDA timing with the host's stalls hidden (GPU only: skipped without CUDA) and the CPU timer's record."""

from __future__ import annotations

import time

import pytest
import torch

from profattn.harness.timing import time_cpu, time_cuda

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_cpu_timing_has_no_host_time():
    t = time_cpu(lambda: sum(range(1000)), min_reps=3, max_reps=5)
    assert t.host_us is None and t.median_us > 0


@cuda
def test_a_host_stall_is_hidden_and_measured_beside():
    """A call that spends 400 µs on the host before a ~10 µs kernel: the flush (~57 µs on an H200) cannot hide the
    stall, so without the spin the events time the host; with it they time the kernel, and ``host_us`` holds the 400."""
    x = torch.randn(1 << 20, device="cuda")

    def stalled() -> None:
        end = time.perf_counter() + 400e-6
        while time.perf_counter() < end:
            pass
        x.mul_(1.0001)

    hidden = time_cuda(stalled, min_reps=20, target_ms=50)
    exposed = time_cuda(stalled, min_reps=20, target_ms=50, hide_host=False)
    assert hidden.host_us is not None and hidden.host_us >= 400
    assert hidden.median_us < 100 < 300 < exposed.median_us
    assert "GPU spin" in hidden.method and "no GPU spin" in exposed.method
