"""Record CUDA-graph decode traces the way serving engines make them, for the engine-trace analysis.

Per backend (``sdpa``: page gather + SDPA with a key-padding mask; ``flashinfer``: ``BatchDecodeWithPagedKVCacheWrapper``
in CUDA-graph mode, ``plan()`` before every replay; ``flex``: page gather + compiled FlexAttention with a length
``score_mod``; ``triton``: profattn's split-KV paged decode kernel) an engine-like decode loop: ``LAYERS`` layers, each
appending the step's new K/V into its own paged pool through a slot mapping (``reshape_and_cache``), attending over
the pool, and projecting the output (one GEMM) into the next layer's query. One CUDA graph is captured per padded
batch size (``--batch-sizes``; a step of ``n`` real sequences replays the graph of the smallest size ≥ ``n``, the
padding rows one token on a reserved page, as vLLM pads). Between replays, outside the graph, the host advances the
requests (one token each: new slots, longer lengths), copies the step's inputs into the graph's static buffers and,
for FlashInfer, re-plans.

Each backend is profiled twice (``torch.profiler``, CPU + CUDA activities, ``record_shapes=True``, no stacks):

* ``capture-in-window``: the graphs are captured inside the profiled window (the capture's warm-up calls and its
  launches are in the trace, inside ``record_function("graph_capture bs=<size>")``), then replayed;
* ``captured-before``: the graphs are captured before the profiler starts: the trace holds only the replays.

Every compile and JIT (FlexAttention's Inductor, Triton, FlashInfer) happens in an eager warm-up step before either
window, as engines warm up before capturing. Each step is one ``ProfilerStep#N`` (the first also holds the captures in
``capture-in-window``): the host update, then vLLM's step annotation ``execute_<tokens>_context_0(sq0sk0sqsq0sqsk0)_
generation_<n>(sq<Σq>sk<Σk>sqsq<Σq²>sqsk<Σq·k>)`` (per phase: requests, Σq, Σk, Σq², Σq·k; vLLM's own format) around
the replay and a synchronize. The padded batch sizes take turns, step by step.

Written to ``--out``: ``<backend>.<mode>.pt.trace.json.gz`` (scrubbed of host and user names like profattn's own traces)
and ``manifest.json``: per trace the backend, mode, the graphs (padded size, whether captured in the window), every
replay (step, real batch, padded batch, the real sequences' KV lengths after the step's append, its annotation), the
layers = attention calls per replay, and the kernels one eager step of each padded size launches (from a separate
profile of the same step: the ground truth a replay's kernels are checked against), the attention kernels among them
and their profattn family; and each graph's output checked against an fp32 torch reference after the window
(relative error). On a machine without CUDA (``--device cpu``: small fp32 shapes, Triton under ``TRITON_INTERPRET=1``)
nothing is captured — a "replay" calls the step — so the programs' host logic and the manifest can be dry-run there.

    python tests/data/scripts/graph_traces.py --out DIR [--backend sdpa --backend flashinfer ...] [--device cuda|cpu]

Bad arguments: one line, exit 2. A backend that cannot run here (FlashInfer not installed, ...) is listed in the
manifest with its reason; the others still run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BACKENDS = ("sdpa", "flashinfer", "flex", "triton")
MODES = ("capture-in-window", "captured-before")
SCHEMA = "profattn.graph-traces"
VERSION = 1
#: bf16 output against the fp32 reference (profattn's tolerance for bf16 cells).
TOLERANCE = {"bfloat16": 2e-2, "float16": 1e-2, "float32": 1e-4}


@dataclass(frozen=True)
class Shape:
    """The model and schedule: heads, head_dim, page size, dtype, layers; each padded batch size with the real batch
    its steps run; steps per padded size; pages each request owns (its longest length)."""

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    dtype: str
    layers: int
    batch_sizes: tuple[int, ...]
    real_batches: tuple[int, ...]
    steps: int
    pages_per_request: int


#: The seed's heads (Hq 16, Hkv 4, d 128, bf16, page 16) on a GPU; contexts up to 64 pages (1,024 tokens).
GPU = Shape(16, 4, 128, 16, "bfloat16", 2, (4, 8, 16), (3, 6, 13), 3, 64)
#: A CPU dry run: small fp32 shapes.
CPU = Shape(4, 2, 32, 16, "float32", 2, (2, 4), (1, 3), 2, 4)


def step_annotation(kv_lens: list[int]) -> str:
    """vLLM's step annotation of a decode-only step of ``kv_lens`` (one new token per request): ``execute_<tokens>_
    context_0(sq0sk0sqsq0sqsk0)_generation_<n>(sq<Σq>sk<Σk>sqsq<Σq²>sqsk<Σq·k>)``.

    >>> step_annotation([100, 37])
    'execute_2_context_0(sq0sk0sqsq0sqsk0)_generation_2(sq2sk137sqsq2sqsk137)'
    """
    n, sk = len(kv_lens), sum(kv_lens)
    return f"execute_{n}_context_0(sq0sk0sqsq0sqsk0)_generation_{n}(sq{n}sk{sk}sqsq{n}sqsk{sk})"


def padded_size(n: int, sizes: tuple[int, ...]) -> int:
    """The smallest padded batch size ≥ ``n`` (vLLM's capture sizes rule).

    Raises:
        ValueError: ``n`` exceeds every size.
    """
    fits = [s for s in sorted(sizes) if s >= n]
    if not fits:
        raise ValueError(f"batch {n} exceeds every captured size {sorted(sizes)}")
    return fits[0]


class Requests:
    """The host-side state of one padded batch: ``n`` real requests, each owning ``pages_per_request`` pages of a
    shared numbering (page 0 is the padding page), their KV lengths, and the per-step slot mapping. Torch-free, so
    the schedule can be tested anywhere.

    ``start_lens``: each real request's tokens before the first step (at least one page, at most its capacity minus
    the steps to come)."""

    def __init__(self, n: int, padded: int, *, page_size: int, pages_per_request: int, start_lens: list[int],
                 first_page: int) -> None:
        if not 1 <= n <= padded or len(start_lens) != n:
            raise ValueError(f"{n} real requests of {padded} padded rows need {n} start lengths, got {len(start_lens)}")
        self.n, self.padded, self.page_size, self.pages = n, padded, page_size, pages_per_request
        self.lens = list(start_lens)
        #: block table rows: real request b owns pages first_page + b·pages …; padding rows point at page 0
        self.table = [[first_page + b * pages_per_request + j for j in range(pages_per_request)] if b < n
                      else [0] * pages_per_request for b in range(padded)]

    def advance(self) -> tuple[list[int], list[int]]:
        """One decode step: each real request's new token goes to position ``len`` (its slot
        ``page · page_size + offset``), then its length grows by one; padding rows write slot 0 and have length 1.
        Returns ``(slots, lens)`` for the padded batch.

        Raises:
            ValueError: a request would outgrow its pages.
        """
        slots, lens = [], []
        for b in range(self.padded):
            if b >= self.n:
                slots.append(0)
                lens.append(1)
                continue
            pos = self.lens[b]
            if pos >= self.pages * self.page_size:
                raise ValueError(f"request {b} outgrew its {self.pages} pages")
            slots.append(self.table[b][pos // self.page_size] * self.page_size + pos % self.page_size)
            self.lens[b] = pos + 1
            lens.append(pos + 1)
        return slots, lens

    def csr(self, lens: list[int]) -> tuple[list[int], list[int], list[int]]:
        """FlashInfer's page list of the padded batch for ``lens``: ``indptr``, ``indices``, ``last_page_len``."""
        indptr, indices, last = [0], [], []
        for b, n in enumerate(lens):
            k = -(-n // self.page_size)
            indices += self.table[b][:k]
            indptr.append(len(indices))
            last.append(n - (k - 1) * self.page_size)
        return indptr, indices, last


def _start_lens(n: int, shape: Shape, seed: int) -> list[int]:
    import random

    rnd = random.Random(seed)
    # room for every advance: one at construction, then per mode its steps and the check after the window
    top = shape.pages_per_request * shape.page_size - 1 - len(MODES) * (shape.steps + 1) - 1
    return [rnd.randint(shape.page_size, max(shape.page_size, top)) for _ in range(n)]


class DecodeGraph:
    """One padded batch size of one backend: static buffers, layers' pools and weights, the step (what is captured),
    its graph, and the fp32 reference."""

    def __init__(self, backend: str, padded: int, n: int, shape: Shape, device, seed: int) -> None:
        import torch

        self.torch = torch
        self.backend, self.padded, self.shape, self.device = backend, padded, shape, device
        s = shape
        self.dtype = getattr(torch, s.dtype)
        gen = torch.Generator(device=device).manual_seed(seed)
        self.gen = gen
        self.requests = Requests(n, padded, page_size=s.page_size, pages_per_request=s.pages_per_request,
                                 start_lens=_start_lens(n, s, seed), first_page=1)
        num_pages = 1 + padded * s.pages_per_request
        draw = lambda *dims: torch.randn(*dims, generator=gen, device=device, dtype=torch.float32).to(self.dtype)  # noqa: E731
        pool = (num_pages, s.page_size, s.num_kv_heads, s.head_dim)
        self.k_pages = [draw(*pool) for _ in range(s.layers)]
        self.v_pages = [draw(*pool) for _ in range(s.layers)]
        width = s.num_q_heads * s.head_dim
        self.weights = [(draw(width, width) / math.sqrt(width)) for _ in range(s.layers)]
        self.q0 = draw(padded, s.num_q_heads, s.head_dim)
        self.k_new = draw(s.layers, padded, s.num_kv_heads, s.head_dim)
        self.v_new = draw(s.layers, padded, s.num_kv_heads, s.head_dim)
        self.slots = torch.zeros(padded, dtype=torch.int64, device=device)
        self.seq_lens = torch.ones(padded, dtype=torch.int32, device=device)
        self.block_table = torch.tensor(self.requests.table, dtype=torch.int32, device=device)
        self.max_len = s.pages_per_request * s.page_size
        self.out = None
        self.graph = None
        self._attend = self._make_attention()
        self.kv_lens: list[int] = []
        self.advance()  # step 0's metadata, so warm-up and capture see valid lengths

    # ---- the step --------------------------------------------------------------------------------------------
    def _gathered(self, layer: int):
        """The layer's pool gathered through the block table: K, V ``[padded, Hkv, max_len, d]``."""
        b, s = self.padded, self.shape
        table = self.block_table.long()
        k = self.k_pages[layer][table].reshape(b, -1, s.num_kv_heads, s.head_dim).transpose(1, 2)
        v = self.v_pages[layer][table].reshape(b, -1, s.num_kv_heads, s.head_dim).transpose(1, 2)
        return k, v

    def _make_attention(self):
        torch, s = self.torch, self.shape
        if self.backend == "sdpa":
            import torch.nn.functional as F

            positions = torch.arange(self.max_len, device=self.device)

            def sdpa(x, layer):
                k, v = self._gathered(layer)
                mask = (positions[None, :] < self.seq_lens[:, None])[:, None, None, :]
                return F.scaled_dot_product_attention(x.unsqueeze(2), k, v, attn_mask=mask, enable_gqa=True).squeeze(2)

            return sdpa
        if self.backend == "flex":
            from torch.nn.attention.flex_attention import flex_attention

            compiled = torch.compile(flex_attention, dynamic=False)
            lens = self.seq_lens

            def score_mod(score, b, h, q_idx, kv_idx):  # noqa: ANN001 - FlexAttention's signature
                return torch.where(kv_idx < lens[b], score, -float("inf"))

            def flex(x, layer):
                k, v = self._gathered(layer)
                return compiled(x.unsqueeze(2), k, v, score_mod=score_mod, enable_gqa=True).squeeze(2)

            return flex
        if self.backend == "triton":
            from profattn.backends.triton_paged import paged_decode

            sms = torch.cuda.get_device_properties(self.device).multi_processor_count if self.device.type == "cuda" else 132
            workspaces = [{} for _ in range(s.layers)]

            def triton(x, layer):
                return paged_decode(x, self.k_pages[layer], self.v_pages[layer], self.block_table, self.seq_lens,
                                    max_kv_len=self.max_len, num_sms=sms, workspace=workspaces[layer])

            return triton
        if self.backend == "flashinfer":
            import flashinfer

            ws = torch.zeros(128 << 20, dtype=torch.uint8, device=self.device)
            self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                ws, "NHD", use_cuda_graph=True, use_tensor_cores=False,
                paged_kv_indptr_buffer=torch.empty(self.padded + 1, dtype=torch.int32, device=self.device),
                paged_kv_indices_buffer=torch.empty(self.padded * s.pages_per_request, dtype=torch.int32, device=self.device),
                paged_kv_last_page_len_buffer=torch.empty(self.padded, dtype=torch.int32, device=self.device))

            def fi(x, layer):
                return self.wrapper.run(x, (self.k_pages[layer], self.v_pages[layer]))

            return fi
        raise ValueError(f"unknown backend {self.backend!r}")

    def step(self):
        """The captured step: per layer, append the new K/V through the slot mapping, attend, project."""
        from profattn.workload.paged import reshape_and_cache

        s, x = self.shape, self.q0
        for layer in range(s.layers):
            reshape_and_cache(self.k_new[layer], self.v_new[layer], self.k_pages[layer], self.v_pages[layer], self.slots)
            o = self._attend(x, layer)
            x = (o.reshape(self.padded, -1) @ self.weights[layer]).view(self.padded, s.num_q_heads, s.head_dim)
        self.out = x
        return x

    def reference(self):
        """The step's output in fp32 from the pools as they are after the step (its append is idempotent)."""
        torch, s = self.torch, self.shape
        x = self.q0.float()
        group = s.num_q_heads // s.num_kv_heads
        positions = torch.arange(self.max_len, device=self.device)
        for layer in range(s.layers):
            k, v = (t.float().repeat_interleave(group, dim=1) for t in self._gathered(layer))
            scores = torch.einsum("bhd,bhld->bhl", x, k) / math.sqrt(s.head_dim)
            scores = scores.masked_fill(~(positions[None, :] < self.seq_lens[:, None])[:, None, :], float("-inf"))
            o = torch.einsum("bhl,bhld->bhd", torch.softmax(scores, dim=-1), v)
            x = (o.reshape(self.padded, -1) @ self.weights[layer].float()).view(self.padded, s.num_q_heads, s.head_dim)
        return x

    # ---- host side between replays ---------------------------------------------------------------------------
    def advance(self) -> None:
        """The next step's metadata: the requests advance one token; slots, lengths (and FlashInfer's plan) are
        written into the static buffers; fresh inputs drawn into q0 / k_new / v_new."""
        torch, s = self.torch, self.shape
        slots, lens = self.requests.advance()
        self.slots.copy_(torch.tensor(slots, dtype=torch.int64))
        self.seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))
        self.kv_lens = lens[: self.requests.n]
        for t in (self.q0, self.k_new, self.v_new):
            t.copy_(torch.randn(t.shape, generator=self.gen, device=self.device, dtype=torch.float32).to(self.dtype))
        if self.backend == "flashinfer":
            indptr, indices, last = self.requests.csr(lens)
            as_i32 = lambda xs: torch.tensor(xs, dtype=torch.int32, device=self.device)  # noqa: E731
            self.wrapper.plan(as_i32(indptr), as_i32(indices), as_i32(last), s.num_q_heads, s.num_kv_heads, s.head_dim,
                              s.page_size, q_data_type=self.dtype, kv_data_type=self.dtype)

    def capture(self) -> None:
        """Capture :meth:`step` into a CUDA graph (profattn's ``capture_graph``: warm-up calls on a side stream
        first); on a CPU nothing is captured and :meth:`replay` calls the step."""
        if self.device.type != "cuda":
            return
        from profattn.harness.timing import capture_graph

        self.graph = capture_graph(self.step, self.device)

    def replay(self) -> None:
        if self.graph is None:
            self.step()
        else:
            self.graph.replay()

    def check(self) -> float:
        """Relative error of the last output against :meth:`reference` (fp32)."""
        torch = self.torch
        got, want = self.out.float(), self.reference()
        return float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want))


def backend_reason(backend: str, device) -> str | None:
    """Why ``backend`` cannot run on ``device`` here (None when it can): profattn's own checks for FlashInfer and
    Triton."""
    if backend == "flashinfer":
        from profattn.backends.flashinfer import flashinfer_reason

        return flashinfer_reason(device)
    if backend == "triton":
        from profattn.backends.triton_paged import triton_available

        return triton_available(device)
    return None


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _profile():
    """torch.profiler recording throughout, with ``ProfilerStep#N`` markers (torch adds them only with a schedule)."""
    import torch
    from torch.profiler import ProfilerAction, ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    return profile(activities=activities, record_shapes=True, with_stack=False,
                   schedule=lambda step: ProfilerAction.RECORD)


def eager_kernels(graph: DecodeGraph, tmp: Path) -> list[str]:
    """The kernel names one eager step of ``graph`` launches, in launch order (a profile of its own, discarded)."""
    from profattn.trace import load_trace

    with _profile() as prof:
        graph.step()
        _sync(graph.device)
    path = tmp / f"eager-{graph.backend}-{graph.padded}.json"
    prof.export_chrome_trace(str(path))
    k = load_trace(path).kernels
    path.unlink()
    return k.sort_values("ts_us")["name"].tolist()


def attention_family(names: list[str]) -> tuple[str | None, list[str]]:
    """The profattn family the attention kernels among ``names`` belong to, and those kernels (first family that
    matches any: the fused ones, then the dense path)."""
    from profattn.families import ATTENTION_FAMILIES, DENSE

    for fam in (*ATTENTION_FAMILIES, DENSE):
        own = list(dict.fromkeys(n for n in names if fam.matches_kernel(n)))
        if own:
            return fam.name, own
    return None, []


def record(backend: str, modes: tuple[str, ...], shape: Shape, device, out: Path, tmp: Path, seed: int) -> list[dict]:
    """One backend: build its padded batches, warm up (every compile and JIT), read one eager step's kernels of each
    size, then per mode capture (inside or before the window), profile the steps, write the trace, and check each
    graph against the fp32 reference after the window. Returns one manifest entry per mode."""
    from torch.profiler import record_function

    graphs = [DecodeGraph(backend, bs, n, shape, device, seed + i) for i, (bs, n) in
              enumerate(zip(shape.batch_sizes, shape.real_batches))]
    for g in graphs:  # compile / JIT everything before any window (engines warm up before capturing)
        g.step()
    _sync(device)
    kernels = {str(g.padded): eager_kernels(g, tmp) for g in graphs} if device.type == "cuda" else {}
    family, attn = attention_family([n for names in kernels.values() for n in names])
    entries = []
    for mode in modes:
        in_window = mode == "capture-in-window"
        for g in graphs:
            g.graph = None
        if not in_window:
            for g in graphs:
                g.capture()
        replays: list[dict] = []
        with _profile() as prof:
            if in_window:
                for g in graphs:
                    with record_function(f"graph_capture bs={g.padded}"):
                        g.capture()
                        _sync(device)
            step = 0
            for _ in range(shape.steps):
                for g in graphs:  # the batch size changes every step, as requests come and go
                    if step:
                        prof.step()  # ProfilerStep#<step> (the first also holds the captures)
                    g.advance()  # host side: new slots and lengths, fresh inputs, FlashInfer's plan
                    annotation = step_annotation(g.kv_lens)
                    with record_function(annotation):
                        g.replay()
                        _sync(device)
                    replays.append({"step": step, "batch": g.requests.n, "padded_batch": g.padded,
                                    "kv_lens": list(g.kv_lens), "annotation": annotation})
                    step += 1
        name = f"{backend}.{mode}.pt.trace.json"
        raw = tmp / name
        prof.export_chrome_trace(str(raw))
        gz = out / f"{name}.gz"
        with open(raw, "rb") as src, gzip.open(gz, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
        from profattn.privacy import scrub_trace_file

        scrub_trace_file(gz)
        errors = {}
        for g in graphs:  # after the window: one more step, checked against the fp32 reference
            g.advance()
            g.replay()
            _sync(device)
            errors[str(g.padded)] = g.check()
        entries.append({
            "file": gz.name, "bytes": gz.stat().st_size, "backend": backend, "mode": mode,
            "graphs": [{"padded_batch": g.padded, "batch": g.requests.n, "captured": g.graph is not None,
                        "captured_in_window": in_window and g.graph is not None} for g in graphs],
            "replays": replays, "graph_launches": len(replays) if device.type == "cuda" else 0,
            "attention_calls_per_replay": shape.layers,
            "eager_kernels_per_step": kernels, "attention_kernels": attn, "family": family,
            "rel_err": errors, "tolerance": TOLERANCE[shape.dtype],
            "correct": all(e <= TOLERANCE[shape.dtype] for e in errors.values()),
        })
    return entries


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad argument as one line on stderr (no usage block) and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"graph_traces: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = _Parser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="directory for the traces and manifest.json (created)")
    p.add_argument("--backend", action="append", choices=BACKENDS, help="repeatable; default: all four")
    p.add_argument("--mode", action="append", choices=MODES, help="repeatable; default: both")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    out: Path = args.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"graph_traces: error: --out {out} exists and is not an empty directory", file=sys.stderr)
        return 2
    if args.device == "cpu" and "triton" in (args.backend or BACKENDS):
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    import torch

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print("graph_traces: error: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    shape = GPU if device.type == "cuda" else CPU
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"schema": SCHEMA, "version": VERSION, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                "torch": torch.__version__, "shape": shape.__dict__ | {"batch_sizes": list(shape.batch_sizes),
                                                                    "real_batches": list(shape.real_batches)},
                "flashinfer": _version("flashinfer-python"), "traces": [], "skipped": []}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmpdir:
        for backend in args.backend or BACKENDS:
            reason = backend_reason(backend, device)
            if reason:
                manifest["skipped"].append({"backend": backend, "reason": reason})
                print(f"{backend}: skipped: {reason}", flush=True)
                continue
            try:
                entries = record(backend, tuple(args.mode or MODES), shape, device, out, Path(tmpdir), args.seed)
            except Exception as exc:  # noqa: BLE001 - one backend's failure must not lose the others
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                manifest["skipped"].append({"backend": backend, "reason": f"{type(exc).__name__}: {first}"})
                print(f"{backend}: failed: {type(exc).__name__}: {first}", flush=True)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                continue
            for entry in entries:
                manifest["traces"].append(entry)
                errs = ", ".join(f"bs {k}: {v:.1e}" for k, v in entry["rel_err"].items())
                print(f"{backend:<10} {entry['mode']:<18} {len(entry['replays'])} steps, {entry['graph_launches']} graph "
                      f"launches, {entry['bytes'] / 1e3:.0f} kB, family {entry['family']}, rel err {errs}"
                      + ("" if entry["correct"] else "  INCORRECT"), flush=True)
    manifest["wall_s"] = round(time.perf_counter() - t0, 1)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
