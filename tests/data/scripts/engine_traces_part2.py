"""Write the synthetic serving-engine traces of ``tests/data/engine-traces/synthetic/`` (issue 35).

Each reproduces a structure seen in real public traces that profattn's committed vLLM fixtures lack, with the real
kernel, op and range names (AMD-AGI/TraceLens's SGLang test traces on an MI300-class GPU, a Qwen3 model: 36 layers,
Hq 32, Hkv 8, d 128, bf16, SGLang's aiter backend; a Hugging Face Qwen1.5-0.5B generate on an H100):

- ``sglang_extend_aiter.json.gz`` — one SGLang EXTEND step of 15 prefill sequences of 1,024 tokens, annotated twice
  over the same interval (SGLang's base ``step[EXTEND bs=15 toks=15360]`` and the detailed roofline range of
  sgl-project/sglang#24911); the step first builds its page indices (``create_flashinfer_kv_indices_triton``, a
  Triton kernel), then per layer ``sglang::store_cache`` and ``aiter::mha_batch_prefill`` (ck_tile's
  ``FmhaBatchPrefillWithPagedKVCacheKernel``).
- ``sglang_decode_graph/replay.json.gz`` + ``capture.json.gz`` — a decode step of 32 sequences over 32,785 KV tokens
  run as one HIP graph: 544 replayed kernels under one ``hipGraphLaunch`` (15 per layer + 4), among them per layer
  aiter's ``paged_attention_ragged`` pair ``paged_attention_ll4mi_QKV_mfma16_kernel`` + ``…_reduce_kernel``; the
  capture holds the ops with input shapes that launched each node, in the same order (ROCm launch events name
  their kernels).
- ``hf_qwen_sdpa.json.gz`` — 34 ``aten::scaled_dot_product_attention`` calls (flash backend, q ``[1, 16, 128,
  64]``); 10 of their flash kernels have no runtime launch event and no External id (as 436 of 1,465 kernels of the
  real trace lack their launch), each between GEMMs that do.

Deterministic; run from the repository root: ``python tests/data/scripts/engine_traces_part2.py``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "engine-traces" / "synthetic"
PID, TID, GPU_PID, STREAM = 851, 851, 2, 3
LAYERS, HQ, HKV, D = 36, 32, 8, 128
POOL = 835874  # SGLang's token pool (page size 1)
BF16 = "c10::BFloat16"

CK_PREFILL = ("_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefill"
              "PipelineQRKSVSAsyncINS_36BlockFmhaBatchPrefillPipelineProblemIDF16bDF16bDF16bffDF16bEEEEEEEvDpT1_")
LL4MI_QKV = ("void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, "
             "(vllm::Fp8KVCacheDataType)0, 1, 128, 256, false, 4, 1, ck_tile::ComposedAttention<0u, false> >"
             "(__hip_bfloat16 const*, __hip_bfloat16 const*, __hip_bfloat16 const*, float, int const*)")
LL4MI_REDUCE = ("void paged_attention_ll4mi_reduce_kernel<__hip_bfloat16, __hip_bfloat16, 128, 128, 256, 3, false>"
                "(__hip_bfloat16*, float const*, float const*, __hip_bfloat16 const*, int const*, int const*, int, int)")
INDICES = "create_flashinfer_kv_indices_triton"
STORE = "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::StoreKVCacheParams)"
GEMM = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x128x64_MI16x16x1"
RMSNORM = "void aiter::rmsnorm_kernel<__hip_bfloat16, 256, 8>(aiter::RmsnormParams)"


class Writer:
    """Events of one trace: CPU ops, ranges, runtime launches and their kernels, on one process and stream."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.corr = 1000
        self.ext = 1

    def op(self, name: str, ts: float, dur: float, *, dims: list | None = None, types: list | None = None,
           concrete: list | None = None, cat: str = "cpu_op") -> int:
        args: dict[str, Any] = {"External id": self.ext}
        if dims is not None:
            args.update({"Input Dims": dims, "Input type": types or [], "Concrete Inputs": concrete or [""] * len(dims)})
        self.events.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": PID, "tid": TID,
                            "args": args})
        self.ext += 1
        return self.ext - 1

    def range(self, name: str, ts: float, dur: float) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, "pid": PID,
                            "tid": TID, "args": {}})

    def runtime(self, name: str, ts: float, *, kernel: str | None = None, ext: int | None = None) -> int:
        self.corr += 1
        args: dict[str, Any] = {"correlation": self.corr}
        if ext is not None:
            args["External id"] = ext
        if kernel is not None:
            args.update({"kernel": kernel, "grid": [256, 1, 1], "block": [256, 1, 1], "shared memory": 0})
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "ts": ts, "dur": 3.0, "pid": PID,
                            "tid": TID, "args": args})
        return self.corr

    def kernel(self, name: str, ts: float, dur: float, corr: int | None, *, ext: int | None = None,
               grid: tuple[int, int, int] = (256, 1, 1)) -> None:
        args: dict[str, Any] = {"device": 0, "stream": STREAM, "grid": list(grid), "block": [256, 1, 1]}
        if corr is not None:
            args["correlation"] = corr
        if ext is not None:
            args["External id"] = ext
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": GPU_PID,
                            "tid": STREAM, "args": args})

    def launched(self, op: str, kernel: str, cpu: float, gpu: float, dur: float, *, dims: list | None = None,
                 types: list | None = None, concrete: list | None = None, launch: str = "hipLaunchKernel") -> None:
        """An op of 10 µs at ``cpu`` launching ``kernel``, which runs at ``gpu`` for ``dur`` µs."""
        ext = self.op(op, cpu, 10.0, dims=dims, types=types, concrete=concrete)
        self.kernel(kernel, gpu, dur, self.runtime(launch, cpu + 2.0, ext=ext), ext=ext)

    def write(self, path: Path, device: str) -> Path:
        doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": device, "numSms": 304 if "MI" in device
                                                         else 132}],
               "distributedInfo": {"rank": 0}, "traceEvents": self.events}
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.GzipFile(path, "wb", mtime=0) as f:  # mtime 0: the same bytes on every run
            f.write(json.dumps(doc, separators=(",", ":")).encode())
        return path


def _prefill_dims() -> tuple[list, list, list]:
    """``aiter::mha_batch_prefill``'s recorded inputs for 15 sequences of 1,024 tokens (as TraceLens's CSV shows)."""
    dims = [[15360, HQ, D], [POOL, HKV, D], [POOL, HKV, D], [16], [16], [15616]] + [[]] * 12
    types = [BF16, BF16, BF16, "int", "int", "int"] + ["Scalar"] * 12
    concrete = ["", "", "", "", "", "", "1024", "1024", "0.", "0.088388347648318447", "0.", "False", "True", "-1",
                "-1", "0", "False", "False"]
    return dims, types, concrete


def sglang_extend(out: Path) -> Path:
    w = Writer()
    t0 = 1000.0
    dur = 200 + LAYERS * 100.0
    w.range("step[EXTEND bs=15 toks=15360]", t0, dur)
    w.range("step[EXTEND bs=15 toks=15360 c_sq=15360 c_sqsq=15728640 c_sqsk=15728640 c_sk=15360]", t0 + 1.0, dur - 2)
    w.launched("triton_kernel_launch", INDICES, t0 + 20, t0 + 40, 6.0, launch="hipModuleLaunchKernel")
    dims, types, concrete = _prefill_dims()
    store_dims = [[15360, 1024], [15360, 1024], [POOL, 1024], [POOL, 1024], [15360], [], []]
    for layer in range(LAYERS):
        c = t0 + 100 + layer * 100.0
        g = c + 30
        w.launched("aten::mm", GEMM, c, g, 1400.0 / LAYERS)
        w.launched("sglang::store_cache", STORE, c + 20, g + 40, 35.0, dims=store_dims,
                   types=[BF16] * 4 + ["long int", "Scalar", "Scalar"])
        w.launched("aiter::mha_batch_prefill", CK_PREFILL, c + 40, g + 80, 550.0 + layer, dims=dims, types=types,
                   concrete=concrete)
    return w.write(out / "sglang_extend_aiter.json.gz", "AMD Instinct MI300X")


def _decode_layer_kernels() -> list[tuple[str, str, bool]]:
    """One decoder layer's 15 kernels in launch order: (op, kernel, inside the attention op)."""
    return [("aiter::rmsnorm", RMSNORM, False), ("aten::mm", GEMM, False), ("aten::copy_", "copy_kernel_qkv", False),
            ("sgl_kernel::rotary_embedding", "rotary_embedding_kernel", False),
            ("sglang::store_cache", STORE, False), ("aiter::paged_attention_ragged", LL4MI_QKV, True),
            ("aiter::paged_attention_ragged", LL4MI_REDUCE, True), ("aten::mm", GEMM, False),
            ("aiter::add_rmsnorm", "add_rmsnorm_kernel", False), ("aten::mm", GEMM, False),
            ("sgl_kernel::silu_and_mul", "act_and_mul_kernel", False), ("aten::mm", GEMM, False),
            ("aten::add_", "elementwise_add_kernel", False), ("aten::copy_", "copy_kernel_out", False),
            ("aten::fill_", "fill_kernel", False)]


_TAIL = [("aten::embedding", "indexSelectLargeIndex"), ("aiter::rmsnorm", RMSNORM), ("aten::mm", GEMM),
         ("aten::argmax", "reduce_kernel_argmax")]
#: ``aiter::paged_attention_ragged``'s recorded inputs for 32 decoding sequences (aiter/ops/attention.py's order).
_DECODE_DIMS = [[32, HQ, D], [10905190400], [32, HQ, D], [POOL, 1, HKV, D], [POOL, 1, HKV, D], [], [33], [20971520],
                [4096], [], [], [], [], [], [], [1], [1]]
_DECODE_TYPES = [BF16, "unsigned char", BF16, BF16, BF16, "Scalar", "int", "int", "int", "Scalar", "Scalar", "", "",
                 "", "Scalar", "float", "float"]


def sglang_decode(out: Path) -> tuple[Path, Path]:
    layer = _decode_layer_kernels()
    order = [(op, k, att) for _ in range(LAYERS) for op, k, att in layer] + [(op, k, False) for op, k in _TAIL]
    assert len(order) == 544
    # the capture: ops launching each node, in order, between begin and end capture
    cap = Writer()
    t = 500.0
    cap.range("capture_32_decode", t - 5, 8000.0)
    cap.runtime("hipStreamBeginCapture", t)
    t += 10
    i = 0
    while i < len(order):
        op, k, att = order[i]
        if att:  # one op launches the QKV and the reduce kernel
            ext = cap.op(op, t, 12.0, dims=_DECODE_DIMS, types=_DECODE_TYPES)
            cap.runtime("hipLaunchKernel", t + 2, kernel=order[i][1], ext=ext)
            cap.runtime("hipLaunchKernel", t + 7, kernel=order[i + 1][1], ext=ext)
            i += 2
        else:
            ext = cap.op(op, t, 6.0)
            cap.runtime("hipLaunchKernel", t + 2, kernel=k, ext=ext)
            i += 1
        t += 14
    cap.runtime("hipStreamEndCapture", t)
    capture = cap.write(out / "sglang_decode_graph" / "capture.json.gz", "AMD Instinct MI300X")
    # the replay: one graph launch inside the step annotation, 544 kernels on one stream
    rep = Writer()
    t0 = 90000.0
    rep.range("step[DECODE bs=32 g_sq=32 g_sqsq=32 g_sqsk=32785 g_sk=32785]", t0, 3000.0)
    rep.launched("aten::copy_", "copy_kernel_inputs", t0 + 10, t0 + 20, 3.0)
    corr = rep.runtime("hipGraphLaunch", t0 + 50)
    g = t0 + 60
    for op, k, att in order:
        d = 54.0 if k == LL4MI_QKV else 5.0 if k == LL4MI_REDUCE else 8.0
        rep.kernel(k, g, d, corr)
        g += d + 1.0
    return rep.write(out / "sglang_decode_graph" / "replay.json.gz", "AMD Instinct MI300X"), capture


FLASH = ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
         "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, "
         "false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)")
GEMM_CUDA = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
#: Which SDPA calls' flash kernels lack a launch event (and an External id).
HF_MISSING = frozenset({1, 4, 7, 10, 13, 16, 19, 22, 25, 28})


def hf_qwen(out: Path) -> Path:
    w = Writer()
    q = [1, 16, 128, 64]
    t = 1000.0
    for call in range(34):
        w.launched("aten::mm", GEMM_CUDA, t, t + 5, 12.0, launch="cudaLaunchKernel")
        s = t + 20
        w.op("aten::scaled_dot_product_attention", s, 40.0, dims=[q, q, q, [], [], []],
             types=[BF16] * 3 + ["", "Scalar", "Scalar"], concrete=["", "", "", "", "0.", "True"])
        w.op("aten::_scaled_dot_product_flash_attention", s + 2, 36.0, dims=[q, q, q, [], []],
             types=[BF16] * 3 + ["Scalar", "Scalar"], concrete=["", "", "", "0.", "True"])
        ext = w.op("aten::_flash_attention_forward", s + 4, 30.0)
        if call in HF_MISSING:
            w.kernel(FLASH, s + 30, 20.0, None)  # neither its launch event nor an External id was recorded
        else:
            w.kernel(FLASH, s + 30, 20.0, w.runtime("cudaLaunchKernel", s + 10, ext=ext), ext=ext)
        w.launched("aten::mm", GEMM_CUDA, s + 50, s + 60, 12.0, launch="cudaLaunchKernel")
        t += 100
    return w.write(out / "hf_qwen_sdpa.json.gz", "NVIDIA H100 80GB HBM3")


def main() -> int:
    paths = [sglang_extend(OUT), *sglang_decode(OUT), hf_qwen(OUT)]
    for p in paths:
        print(f"{p} {p.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
