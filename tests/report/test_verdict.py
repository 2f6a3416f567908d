"""The serving verdict in words: the sentence after the run's summary (HTML report and Markdown summary) on
synthetic stays / ties / changes, a tie on the unchunked prompt, and the committed H200 serving run."""

from __future__ import annotations

from pathlib import Path

from factories import cell, run
from profattn.analysis.run.analyze import analyze_run
from profattn.analysis.run.verdict import verdict
from profattn.report.markdown import run_markdown
from profattn.report.run import render_html
from profattn.report.verdict import render_verdict, seqs_label, serving_text, summary, workload_label
from profattn.results import CellStatus, read_results
from profattn.workload import Workload

SERVING_RUN = Path(__file__).resolve().parents[2] / "examples" / "h200-serving"
COMMON = dict(num_q_heads=4, num_kv_heads=2, head_dim=32, dtype="bfloat16", kv_layout="paged", page_size=16,
              append=True)
STEP = Workload.varlen(None, [(32, 128), (1, 40), (1, 90)], **COMMON)

def only(phase: str) -> str:
    """issue 33: a one-regime run's verdict points to ``--regime all``."""
    return (f" Only {phase} was measured: `profattn profile --regime all` adds the other regimes, training among them, "
            "whose winner the verdict asks about.")



def chunk(q: int, kv: int) -> Workload:
    return Workload(phase="prefill", batch=2, q_len=q, kv_len=kv, **COMMON)


def prompt(backend: str, size: int, us: list[float]) -> list:
    """One cell per chunk of a 128-token prompt in ``size``-token chunks, chunk ``i`` taking ``us[i]`` µs."""
    return [cell(chunk(size, (i + 1) * size), backend, t) for i, t in enumerate(us)]


def cells(whole_b: float = 130.0, **drop: bool) -> list:
    """a wins the whole prompt (100 µs); at chunk 64 b is 1.6 % faster (128 vs 130 µs: a tie), at chunk 32 b wins
    (100 vs 160 µs); a keeps the mixed step (50 vs 80 µs)."""
    out = [*prompt("a", 128, [100.0]), *prompt("b", 128, [whole_b]),
           *prompt("a", 64, [60.0, 70.0]), *prompt("b", 64, [58.0, 70.0]),
           *prompt("a", 32, [40.0] * 4), *prompt("b", 32, [25.0] * 4),
           cell(STEP, "a", 50.0), cell(STEP, "b", 80.0)]
    return [c for c in out if not (drop.get("chunk32") and c.workload.q_len == 32 and not c.workload.is_varlen)]


def text(cs: list) -> str:
    (s,) = verdict(run(cs)).serving
    return serving_text(s)


def test_stays_ties_and_changes_in_one_sentence_and_what_chunking_costs():
    assert text(cells()) == (
        "a wins the unchunked 128-token prompt (B=2, 100.0 µs, 1.30× ahead of b); it stays the winner in the mixed "
        "batch 1×q32 + 2×q1 and ties per prompt at chunk 64 (b 1.6 % faster, within noise), but b wins per prompt "
        "at chunk 32 (1.60× faster than a). Chunked, a needs 1.30× (chunk 64) and 1.60× (chunk 32) its unchunked "
        "time per prompt, b 0.77× (chunk 32).")


def test_never_beaten_beyond_noise_is_no_change():
    t = text(cells(chunk32=True))
    assert t == ("a wins the unchunked 128-token prompt (B=2, 100.0 µs, 1.30× ahead of b) and is never beaten beyond "
                 "noise: it stays the winner in the mixed batch 1×q32 + 2×q1 and ties per prompt at chunk 64 (b 1.6 % "
                 "faster, within noise).")
    assert "wins per prompt" not in t and "Chunked," not in t
    only_a = [c for c in cells() if c.backend == "a"]
    assert text(only_a) == ("a wins the unchunked 128-token prompt (B=2, 100.0 µs, the only eligible backend) and "
                            "stays the winner per prompt at chunk 64 and 32, and in the mixed batch 1×q32 + 2×q1.")


def test_a_tie_on_the_unchunked_prompt_is_said_and_the_faster_median_compared():
    assert text(cells(whole_b=101.0)).startswith(
        "a and b tie on the unchunked 128-token prompt (B=2, 1.0 % apart, within noise; compared as a, the faster "
        "median); a stays the winner in the mixed batch 1×q32 + 2×q1 and ties per prompt at chunk 64")


def test_no_unchunked_winner_and_a_reference_without_time():
    failed = [cell(chunk(128, 128), b, 100.0, status=CellStatus.INCORRECT, err=0.5) for b in "ab"] + cells()[2:]
    assert text(failed) == ("No backend has an eligible time for the unchunked 128-token prompt (B=2), so its chunks "
                            "and the mixed steps are not compared.")
    errored = [c if (c.workload, c.backend) != (chunk(32, 96), "a") else
               cell(chunk(32, 96), "a", None, status=CellStatus.ERROR, reason="boom") for c in cells()]
    assert "but b wins per prompt at chunk 32 (a: no eligible time)." in text(errored)


def test_summary_html_and_markdown_carry_it():
    r = run(cells())
    v = verdict(r)
    sentence = serving_text(v.serving[0])
    assert summary(v).endswith(". " + sentence)
    assert sentence in render_html(analyze_run(r)) and f"{sentence}**" in run_markdown(analyze_run(r))
    # a run without serving calls says nothing more
    plain = Workload(phase="prefill", batch=2, q_len=64, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=32)
    assert summary(verdict(run([cell(plain, "a", 10.0)]))) == ("This run has no training workload; winners: prefill kv 64 (B=2) "
                                                           "→ a." + only("prefill"))


def test_seqs_label():
    assert seqs_label(STEP) == "1×q32 + 2×q1" and seqs_label(chunk(32, 64)) == "2×q32"
    assert workload_label(STEP) == "mixed 1×q32 + 2×q1, kv ≤ 128 (page 16)"


def test_h200_serving_run_markdown():
    """The committed H200 run's summary (the PR comment): sdpa-cudnn wins the whole 8192-token prompt, FlashInfer's
    paged prefill every chunked prompt and our one-launch kernel both mixed steps, beyond noise — and why sdpa-cudnn
    needs 2× its unchunked time chunked, from the run's own traces and counters (the stored trace summaries and the
    ncu sums in results.json), checked by hand:

    - kernels per prompt at chunk 2048: chunk 0 (q = kv = 2048, is_causal) launches 1, each of chunks 1–3 six: the
      cuDNN kernel plus a mask built in the call (tril, the bool fill, the where that turns it into a bias, two scalar
      fills) — 1 + 3 × 6 = 19 against 1; 3 × 5 = 15 mask launches, 186.8 µs;
    - pairs: a kernel handed a mask computes the rectangle: 2048·2049/2 + 2048·(4096 + 6144 + 8192) = 39,846,912
      against the prompt's causal 8192·8193/2 = 33,558,528: 1.19×;
    - DRAM: 150.3 + 362.6 + 714.7 + 925.3 MB = 2.15 GB for 167.8 + 201.3 + 234.9 + 268.5 = 872 MB requested (2.47×)
      against 658 MB for 671 MB unchunked (0.98×); L2→SM 33.4 GB;
    - rates: 2.199 TFLOP per prompt / 7,633.8 µs = 288 TFLOP/s (42 % of the run's 692 TFLOP/s GEMM) against
      / 3,815.4 µs = 576 (83 %); on the work the kernel executed, 2.611 TFLOP / 7,317.5 µs of cuDNN kernel = 357
      against 2.199 TFLOP / 3,407.0 µs = 646.
    """
    md = run_markdown(analyze_run(read_results(SERVING_RUN)))
    assert (
        "sdpa-cudnn wins the unchunked 8,192-token prompt (3,815.4 µs on a contiguous copy, 1.12× ahead of "
        "flashinfer-prefill-paged) but does not stay the winner: flashinfer-prefill-paged (paged cache) wins per prompt "
        "at chunk 2048 (1.75× faster than sdpa-cudnn) and 512 (1.59×); triton-paged-prefill (paged cache) wins in the "
        "mixed batches 2×q2048 + 32×q1 (21.24× faster than sdpa-cudnn) and 1×q512 + 64×q1 (25.96×). Chunked, sdpa-cudnn needs 2.00× (chunk 2048) and 1.89× "
        "(chunk 512) its unchunked time per prompt, flashinfer-prefill-paged 1.02× and 1.06×. Why, at chunk 2048 "
        "(4 chunks): chunked, it launches 19 kernels in its 4 calls per prompt against 1 unchunked; it is handed an "
        "explicit mask (built in the call: 15 launches, 186.8 µs), so its kernel computes the whole q × kv rectangle: "
        "1.19× the causal pairs; it moves 2.15 GB from DRAM for 872 MB requested (2.47×; L2→SM 33.4 GB, 38.3×) "
        "against 658 MB (0.98×) unchunked; it does 288 TFLOP/s against 576 unchunked (42 % and 83 % of the GEMM "
        "ceiling; below both roofs vs compute-bound), its kernel 357 TFLOP/s on the work it executes against 646.**"
    ) in md


def test_labels_of_workloads_that_differ_only_in_kv_heads():
    """A GQA run's summary listed "decode kv 64 (B=2, page 16) → …" three times (the label leaves heads out); the
    heads that tell them apart are appended, and a field the label already shows is not."""
    from profattn.report.verdict import distinct_labels
    from profattn.workload import Workload

    ws = [Workload(phase="decode", batch=2, q_len=1, kv_len=64, num_q_heads=8, num_kv_heads=h, head_dim=32,
                   kv_layout="paged", page_size=16) for h in (8, 2, 1)]
    other = Workload(phase="decode", batch=2, q_len=1, kv_len=256, num_q_heads=8, num_kv_heads=2, head_dim=32,
                     kv_layout="paged", page_size=16)
    labels = distinct_labels(ws + [other])
    assert [labels[w.tag] for w in ws] == [f"decode kv 64 (B=2, page 16), Hq 8/Hkv {h}" for h in (8, 2, 1)]
    assert labels[other.tag] == "decode kv 256 (B=2, page 16)"


def test_a_sliding_window_shows_in_the_label_and_stays_out_of_the_decode_kv_series():
    from profattn.report.run import crossover_rows

    full = Workload(phase="decode", batch=4, q_len=1, kv_len=32768, num_q_heads=16, num_kv_heads=4, head_dim=128,
                    kv_layout="paged", page_size=16)
    win = full.with_(window=4096)
    assert workload_label(win) == "decode kv 32768 (B=4, page 16, window 4096)"
    assert workload_label(full) == "decode kv 32768 (B=4, page 16)"
    # the windowed cell (another winner, 8x faster) must not replace the full-cache point at kv 32768
    r = run([cell(full, "a", 100.0), cell(full, "b", 150.0), cell(win, "b", 12.0), cell(win, "a", 20.0)])
    (row,) = crossover_rows(analyze_run(r))
    assert row["winners"] == "kv 32768: a 100.0 µs"  # before: "b 12.0 µs", the windowed cell's


def test_verdict_rows_of_a_gqa_run_name_their_heads():
    """The Markdown summary's verdict table repeated "decode kv 8192 (page 16)" for Hkv 32, 8 and 1 (its rows used
    the short label); rows and headlines now carry the run's distinct labels."""
    from factories import gqa_run

    from profattn.analysis.run.verdict import verdict

    rows = render_verdict(verdict(gqa_run())).rows
    labels = [r.label for r in rows]
    assert len(set(labels)) == len(labels)
    assert any(r.label.endswith("Hq 32/Hkv 8") and r.headline.startswith(r.label + ":") for r in rows)


def test_packed_documents_are_labelled_as_documents():
    """The H200 variants run labelled the packed training batch "train 4096/4096 (packed)" (its longest document) and
    the same documents as a prefill "prefill 1×q4096 + 1×q3072 + …, kv ≤ 4096": both now name the documents."""
    docs = (4096, 1024, 3072, 512, 2048, 1536, 2560, 1536)
    train = Workload.packed("train", docs, num_q_heads=16, num_kv_heads=4, head_dim=128)
    assert workload_label(train) == "train 8 packed docs, 16,384 tokens (longest 4096)"
    assert workload_label(Workload.packed("prefill", docs, num_q_heads=16, num_kv_heads=4, head_dim=128)) == (
        "prefill 8 packed docs, 16,384 tokens (longest 4096)")
    assert workload_label(Workload(phase="train", batch=8, q_len=2048, kv_len=2048, num_q_heads=16, num_kv_heads=4,
                                   head_dim=128, window=512)) == "train 2048/2048 (window 512)"


def test_windows_and_fp8_caches_are_not_context_lengths_in_the_summary():
    """The variants twin's summary said "At decode it holds at kv 512, kv 64, …, kv 512, but is beaten beyond noise at
    kv 32 (… sdpa-math had no eligible cell) …: the verdict depends on context length" — a window and an FP8 cache
    named as bare KV lengths, kv 512 listed as held and beaten, and a backend that cannot read FP8 called beaten.
    Each decode workload is now named by its distinct label, the unsupported one is said apart, and the conclusion
    is "depends on the workload"."""
    from factories import cell, run

    from profattn.analysis.run.verdict import verdict
    from profattn.report.verdict import summary

    train = Workload(phase="train", batch=2, q_len=64, kv_len=64, num_q_heads=4, num_kv_heads=2, head_dim=32)
    dec = Workload(phase="decode", batch=2, q_len=1, kv_len=512, num_q_heads=4, num_kv_heads=2, head_dim=32,
                   kv_layout="paged", page_size=16)
    win, fp8 = dec.with_(window=64), dec.with_(kv_dtype="fp8")
    cells = [cell(train, "a", 100.0), cell(train, "b", 200.0),
             cell(dec, "a", 10.0), cell(dec, "b", 20.0),
             cell(win, "a", 30.0), cell(win, "b", 10.0),
             cell(fp8, "a", None, status="unsupported", reason="no FP8 path"), cell(fp8, "b", 15.0)]
    text = summary(verdict(run(cells)))
    assert text == ("a wins training, 2.00× ahead of b. At decode it holds at kv 512 (B=2, page 16), KV bfloat16, but is beaten "
                    "beyond noise at kv 512 (B=2, page 16, window 64) (b, 3.00× faster): the verdict depends on the "
                    "workload. It has no eligible cell at kv 512 (B=2, page 16), KV float8_e4m3fn (b wins there).")


def _cp_run():
    """The README's CPU call: two context-parallel training workloads (ring, ulysses) before the one-process one,
    and a prefill workload on 4 ranks far slower than its one-process call."""
    from profattn.workload import parse_workload_spec

    base = "b=1,q=32,kv=32,hq=4,hkv=2,d=16,dtype=fp32"
    ring = parse_workload_spec(f"phase=train,{base},cp=2,cp_scheme=ring")
    uly = parse_workload_spec(f"phase=train,{base},cp=2,cp_scheme=ulysses")
    pre = parse_workload_spec(f"phase=prefill,{base},cp=4,cp_scheme=ring".replace("q=32,kv=32", "q=64,kv=64"))
    cells = [cell(ring, "sdpa-flash", 80.0),
             cell(ring, "sdpa-math", None, status=CellStatus.UNSUPPORTED, reason="ring's blocks run sdpa-flash"),
             cell(uly, "sdpa-flash", 90.0), cell(uly, "sdpa-math", 120.0),
             cell(pre, "sdpa-math", 27000.0),
             cell(ring.single_process, "sdpa-flash", 100.0), cell(ring.single_process, "sdpa-math", 150.0),
             cell(pre.single_process, "sdpa-flash", 44.0), cell(pre.single_process, "sdpa-math", 50.0)]
    return run(cells, device="cpu"), ring, uly, pre


def test_context_parallel_cells_stay_out_of_the_winners_and_have_a_sentence_of_their_own():
    r, ring, uly, pre = _cp_run()
    v = verdict(r)
    assert v.training_tag == ring.single_process.tag and v.training_winner == "sdpa-flash"
    assert [row.workload_tag for row in v.rows] == [pre.single_process.tag]  # no CP row "staying the winner"
    text = summary(v)
    assert text.startswith("sdpa-flash wins training, ") and "only eligible" not in text
    assert "_cp" not in text  # no raw cell ids
    assert text.endswith(
        "Context parallelism (see its section): train 32/32 ring on 2 ranks (sdpa-flash) 80.0 µs per step vs "
        "100.0 µs on one process, scaling efficiency 62 %; train 32/32 ulysses on 2 ranks (sdpa-flash) 90.0 µs per "
        "step vs 100.0 µs on one process, scaling efficiency 56 %; train 32/32 ulysses on 2 ranks (sdpa-math) "
        "120.0 µs per step vs 150.0 µs on one process, scaling efficiency 62 %; prefill kv 64 (B=1) ring on 4 ranks "
        "(sdpa-math) 27.00 ms per step vs 50.0 µs on one process, scaling efficiency 0 %.")


def test_context_parallel_labels_name_ranks_and_scheme():
    from profattn.report.verdict import distinct_labels

    _, ring, uly, pre = _cp_run()
    assert workload_label(ring) == "train 32/32 (cp 2 ring)"
    assert workload_label(pre) == "prefill kv 64 (B=1, cp 4 ring)"
    labels = distinct_labels([ring, uly, ring.single_process])
    assert labels == {ring.tag: "train 32/32 (cp 2 ring)", uly.tag: "train 32/32 (cp 2 ulysses)",
                      ring.single_process.tag: "train 32/32"}


def test_markdown_summary_carries_the_context_parallel_table():
    r, *_ = _cp_run()
    md = run_markdown(analyze_run(r))
    assert "### Context parallelism" in md
    assert "| ring | 2 | train | sdpa-flash | ok | 80.0 µs | 100.0 µs | 62 % |" in md
    assert "train 32/32 (cp 2 ulysses)" in md and "_cp2" not in md
