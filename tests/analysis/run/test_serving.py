"""Serving views on synthetic cells: chunks grouped into prompts from their shapes, time per prompt summed by
hand, missing chunks named, and a mixed step's split against its parts."""

from __future__ import annotations

from dataclasses import replace

from factories import cell
from profattn.analysis.run.serving import (
    ChunkRef, MissingChunk, chunk_of, is_chunk, mixed_parts, mixed_splits, prompt_plans, prompt_times,
)
from profattn.results import CellStatus, Timing
from profattn.workload import Workload, get_preset

COMMON = dict(num_q_heads=4, num_kv_heads=2, head_dim=32, dtype="bfloat16", kv_layout="paged", page_size=16,
              append=True)


def chunk(q: int, kv: int, batch: int = 2) -> Workload:
    return Workload(phase="prefill", batch=batch, q_len=q, kv_len=kv, **COMMON)


def timed(w: Workload, backend: str, us: float, append_us: float | None = None, **kw):
    c = cell(w, backend, us, **kw)
    if append_us is not None:
        c = replace(c, append_timing=Timing(append_us, append_us, append_us, append_us, 5, "test"))
    return c


def test_prompts_are_derived_from_the_chunk_shapes():
    ws = [chunk(128, 128), chunk(64, 64), chunk(64, 128), chunk(32, 32), chunk(32, 96), chunk(32, 128),
          Workload(phase="prefill", batch=2, q_len=64, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=32)]
    plans = prompt_plans(ws)
    assert [(p.prompt_len, p.chunk_size, len(p.workloads)) for p in plans] == [(128, 128, 1), (128, 64, 2), (128, 32, 4)]
    assert plans[2].workloads[1] == chunk(32, 64)  # a chunk the run lacks is still in the plan
    assert chunk_of(chunk(32, 96), plans) == ChunkRef(128, 32, 2) and ChunkRef(128, 32, 2).chunks == 4
    assert not is_chunk(ws[-1])  # dense, not appending: an ordinary prefill, no prompt
    # the preset's own prompts: 8192 tokens unchunked, in 4 chunks of 2048 and 16 of 512
    serving = prompt_plans(get_preset("serving").workloads)
    assert [(p.prompt_len, p.chunk_size, len(p.workloads)) for p in serving] == [(8192, 8192, 1), (8192, 2048, 4),
                                                                                  (8192, 512, 16)]


def test_time_per_prompt_is_the_sum_over_its_chunks_and_needs_every_chunk():
    cells = [
        timed(chunk(128, 128), "a", 900.0, 30.0), timed(chunk(128, 128), "b", 700.0, 31.0),
        timed(chunk(64, 64), "a", 200.0, 10.0), timed(chunk(64, 128), "a", 350.0, 11.0),
        timed(chunk(64, 64), "b", 150.0, 12.0), cell(chunk(64, 128), "b", 260.0, status=CellStatus.INCORRECT, err=0.5),
        timed(chunk(32, 32), "a", 60.0), timed(chunk(32, 128), "a", 90.0),
    ]
    times = {(t.plan.chunk_size, t.backend): t for t in prompt_times(cells)}
    assert set(times) == {(128, "a"), (128, "b"), (64, "a"), (64, "b"), (32, "a")}
    assert (times[128, "a"].attention_us, times[128, "a"].append_us) == (900.0, 30.0)
    assert (times[64, "a"].attention_us, times[64, "a"].append_us) == (200.0 + 350.0, 10.0 + 11.0)
    t = times[64, "b"]
    assert t.attention_us is None and t.missing == (MissingChunk(1, CellStatus.INCORRECT),) and not t.complete
    t = times[32, "a"]  # chunks 1 and 2 (kv 64, 96) have no cell; the timed ones carry no append timing
    assert t.attention_us is None and t.missing == (MissingChunk(1, None), MissingChunk(2, None))
    # bytes of the appends: every chunk writes its 2·64 new tokens' K and V (2 heads · 32 · 2 B) once and reads
    # them once, plus 128 int64 slots: 2 · 2 · (128 · 2 · 32 · 2) + 128 · 8 = 66,560 per chunk
    assert times[64, "a"].plan.append_bytes == 2 * 66_560 == times[128, "a"].plan.append_bytes


def test_a_mixed_step_against_its_prefill_and_decode_parts():
    step = Workload.varlen(None, [(32, 128), (1, 40), (1, 90)], **COMMON)
    pre, dec = mixed_parts(step)
    assert pre.seqs == ((32, 128),) and pre.phase.value == "prefill"
    assert dec.seqs == ((1, 40), (1, 90)) and dec.phase.value == "decode"
    cells = [
        timed(step, "a", 500.0), timed(step, "b", 450.0),
        timed(pre, "a", 300.0), timed(pre, "b", 350.0),
        timed(dec, "a", 100.0), cell(dec, "b", None, status=CellStatus.UNSUPPORTED, reason="no"),
    ]
    best, a, b = mixed_splits(cells)
    assert best.backend is None
    assert (best.step_time.backend, best.step_time.latency_us) == ("b", 450.0)
    assert (best.prefill.backend, best.prefill.latency_us) == ("a", 300.0)
    assert (best.decode.backend, best.decode.latency_us) == ("a", 100.0)
    assert best.parts_us == 400.0 and best.step_over_parts == 450.0 / 400.0
    assert (a.backend, a.step_time.latency_us, a.parts_us, a.step_over_parts) == ("a", 500.0, 400.0, 1.25)
    assert b.decode.latency_us is None and b.decode.status is CellStatus.UNSUPPORTED and b.parts_us is None
    assert b.step_over_parts is None
    # a step whose parts were not measured: the parts are named, with no cell
    only = mixed_splits([timed(step, "a", 500.0)])[0]
    assert only.prefill.workload == pre and only.prefill.status is None and only.parts_us is None
