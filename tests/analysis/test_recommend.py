"""``recommend`` on a store built from the committed H200 runs (exact hit, near tie, predicted, unknown), and
the advice for a committed trace's calls with the saving computed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from profattn.analysis.recommend import Status, advise_trace, recommend, resolve_gpu, trace_gpu
from profattn.errors import ProfattnError
from profattn.store import import_runs, open_store
from profattn.workload import parse_workload_spec

REPO = Path(__file__).resolve().parents[2]
SHAPE = "q=1,hq=16,hkv=4,d=128"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = open_store(tmp_path_factory.mktemp("store") / "s.sqlite")
    import_runs(s, [REPO / "examples" / "h200-sweep", REPO / "examples" / "h200-seed"])
    yield s
    s.close()


def ask(store, spec: str):
    return recommend(store, parse_workload_spec(spec), resolve_gpu(store, "h200"))


def test_measured_winner(store):
    r = ask(store, f"phase=decode,b=64,kv=8192,{SHAPE},page=16")
    assert r.status is Status.MEASURED_WINNER and r.best == "sdpa-cudnn" and r.tied == ()
    first, second = r.ranked[:2]
    # the sweep's CUDA-graph medians: 237.568 µs (cuDNN) and 252.256 µs (our split-KV kernel)
    assert first.time.median_us == pytest.approx(237.568, abs=1e-3) and first.timing_kind == "graph"
    assert second.backend == "triton-paged-decode" and second.ratio == pytest.approx(252.256 / 237.568, rel=1e-5)
    assert first.samples == 1 and first.runs == ("run-4c593dd77f72",)
    e = r.evidence
    assert (e.grid, e.block, e.ctas) == ("1,4,64", "128,1,1", 256) and e.ctas_per_sm == pytest.approx(256 / 132, abs=1e-5)
    assert e.requested_bytes == 1_074_397_440 and e.dram_bytes is None


def test_near_tie_pools_the_runs(store):
    r = ask(store, f"phase=decode,b=8,kv=8192,{SHAPE},page=16")
    assert r.status is Status.NEAR_TIE and r.best == "sdpa-cudnn" and r.tied == ("triton-paged-decode",)
    cudnn, triton = r.ranked[:2]
    assert cudnn.samples == 2 and set(cudnn.runs) == {"run-4c593dd77f72", "run-62586542e41f"}
    assert triton.ratio < 1.03
    assert {x.backend for x in r.excluded} == {"sdpa-efficient"}  # unsupported: listed, never ranked
    assert {x.backend for x in r.ranked}.isdisjoint({"sdpa-efficient"})


def test_predicted_with_confidence(store):
    r = ask(store, f"phase=decode,b=16,kv=4096,{SHAPE},page=16")
    assert r.status is Status.PREDICTED and r.ranked == ()
    assert r.best == "sdpa-cudnn" and r.prediction.confidence == 1.0 and r.prediction.rule.support == 26


def test_unknown_prints_the_command_that_measures_it(store):
    from profattn.report.recommend import recommend_text

    r = ask(store, f"phase=decode,b=8,kv=8192,{SHAPE}")  # dense: nothing measured, no paged-to-dense guess
    assert r.status is Status.UNKNOWN and r.best is None
    text = recommend_text(r)
    assert ("profattn profile --workload phase=decode,batch=8,q_len=1,kv_len=8192,num_q_heads=16,num_kv_heads=4,"
            "head_dim=128,dtype=bfloat16") in text


def test_gpu_names(store):
    assert resolve_gpu(store, None) == resolve_gpu(store, "NVIDIA H200") == "NVIDIA H200"
    with pytest.raises(ProfattnError, match="not in the store"):
        resolve_gpu(store, "A100")


def test_a_committed_trace_gets_its_saving(tmp_path):
    """The committed H200 trace: 3 SDPA flash decode calls (48.768 + 44.799 + 45.248 = 138.815 µs of kernels) of
    decode b8 kv8192 hq16 hkv4 d128 bf16. A store where that workload measured flash at 46.0 µs and cuDNN at 36.8 µs
    says switching saves 138.815 × (1 − 36.8 / 46.0) = 27.763 µs over the trace."""
    from factories import cell, run

    from profattn.analysis.traces import analyze_paths
    from profattn.workload import Workload

    w = Workload(phase="decode", batch=8, q_len=1, kv_len=8192, num_q_heads=16, num_kv_heads=4, head_dim=128)
    with open_store(tmp_path / "s.sqlite") as s:
        s.add_run(run([cell(w, "sdpa-flash", 46.0), cell(w, "sdpa-cudnn", 36.8, family="cudnn")]), tmp_path)
        (calls,) = analyze_paths([REPO / "tests" / "data" / "traces" / "h200_sdpa_decode_flash_gqa.pt.trace.json.gz"]).files
        gpu = trace_gpu(s, calls, None)
        assert gpu == "NVIDIA H200"  # from the trace's deviceProperties
        advice = advise_trace(s, calls, gpu)
    (a,) = advice.advice
    assert (a.ran, a.ran_backend, a.calls) == ("flash", "sdpa-flash", 3)
    assert a.recommendation.status is Status.MEASURED_WINNER and a.recommendation.best == "sdpa-cudnn"
    assert a.gpu_time_us == pytest.approx(138.815)
    assert a.saving_us == pytest.approx(27.763, abs=1e-3) and advice.saving_us == pytest.approx(27.763, abs=1e-3)
    assert advice.steps == 0 and advice.saving_per_step_us is None


def test_a_cpu_run_in_the_store_does_not_hide_its_only_gpu(tmp_path):
    """The README's main job on a CPU adds a run under the processor's name; the Recommend section's next command
    then said "the store holds several GPUs (AMD EPYC, NVIDIA H200)". Without --gpu the store's only CUDA device is
    chosen; two CUDA devices still need --gpu, and the CPU one stays reachable by name."""
    from dataclasses import replace

    from factories import cell, run

    from profattn.workload import Workload

    w = Workload(phase="decode", batch=8, q_len=1, kv_len=512, num_q_heads=16, num_kv_heads=4, head_dim=128)
    with open_store(tmp_path / "s.sqlite") as s:
        s.add_run(run([cell(w, "sdpa-flash", 46.0)], device="cpu"), tmp_path / "cpu")
        assert resolve_gpu(s, None) == "x86_64"  # the only device
        s.add_run(run([cell(w, "sdpa-flash", 20.0)]), tmp_path / "gpu")
        assert resolve_gpu(s, None) == "NVIDIA H200" and resolve_gpu(s, "x86") == "x86_64"
        other = run([cell(w, "sdpa-flash", 30.0)])
        other = replace(other, environment=replace(other.environment, device_name="NVIDIA A100"))
        s.add_run(other, tmp_path / "a100")
        with pytest.raises(ProfattnError, match=r"several devices \(NVIDIA A100, NVIDIA H200, x86_64\)"):
            resolve_gpu(s, None)
