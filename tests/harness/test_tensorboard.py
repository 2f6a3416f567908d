"""Traces written by `profattn profile` load with torch-tb-profiler's own loader, and agree with ours."""

from __future__ import annotations

from pathlib import Path

import pytest

from profattn.trace.kineto import load_trace

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "h200-seed" / "traces"


@pytest.mark.parametrize("regime", ["train", "prefill", "decode"])
def test_tensorboard_plugin_kernel_stats_agree(regime: str, tmp_path: Path):
    data = pytest.importorskip("torch_tb_profiler.profiler.data")
    files = sorted((EXAMPLE / regime).glob("*.pt.trace.json.gz"))
    if not files:
        pytest.skip("no committed H200 traces")
    prof = data.RunProfileData.parse("profattn", None, str(files[0]), str(tmp_path))
    prof.process()
    theirs = prof.kernel_stat  # DataFrame indexed by kernel name: count, sum (µs), ...
    ours = load_trace(files[0]).kernels.groupby("name")["dur_us"].agg(["count", "sum"])
    assert set(theirs.index) == set(ours.index)
    assert (theirs["count"].sort_index() == ours["count"].sort_index()).all()
    assert theirs["sum"].sum() == pytest.approx(ours["sum"].sum(), rel=1e-9)
    assert prof.device_props and prof.device_props[0]["numSms"] == 132
