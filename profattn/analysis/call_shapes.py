"""What an attention operator's recorded arguments say: which ops are attention (their argument
positions), which kernels are fused attention, the call's shapes and causal mask, and the regime and
profattn :class:`~profattn.workload.Workload` inferred from them (rules: :mod:`profattn.analysis.calls`).

Sources: PyTorch's ``native_functions.yaml`` for the argument positions; the op's ``Input Dims``,
``Input type`` and ``Concrete Inputs`` as the trace parser keeps them. Torch-free; no display text
beyond the notes that explain a missing workload.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from profattn.analysis.call_records import AttentionCall, AttentionShape, CausalAlignment
from profattn.errors import WorkloadError
from profattn.families import ATTENTION_FAMILIES, KernelFamily
from profattn.workload import Phase, Workload

__all__ = [
    "ATTENTION_KERNEL_FAMILIES",
    "ATTENTION_OPS",
    "FLASHINFER",
    "OpSignature",
    "SHAPE_LIMITS",
    "attention_family",
    "is_attention_op",
    "kernel_direction",
    "op_dims",
    "op_shape",
    "read_causal",
    "signature",
    "with_phases",
]

#: FlashInfer's kernels (``BatchDecodeWithPagedKVCacheKernel``, ``BatchPrefillWith…``, ``SinglePrefill…``),
#: which :data:`profattn.families.ATTENTION_FAMILIES` does not list (profattn does not run them).
FLASHINFER = KernelFamily(
    "flashinfer",
    kernel_patterns=(r"flashinfer", r"Batch(Decode|Prefill)With", r"Single(Decode|Prefill)With"),
    op_patterns=(r"flashinfer",),
)
#: Kernel families that identify a fused attention kernel by name, checked in this order.
ATTENTION_KERNEL_FAMILIES: tuple[KernelFamily, ...] = (*ATTENTION_FAMILIES, FLASHINFER)

#: Names that mark a fused attention kernel in an arbitrary trace. The family patterns are written for
#: profattn's own cells, where only attention runs (``cudnn`` there is cuDNN's SDPA engine, ``triton_tem``
#: Inductor's FlexAttention template); in any other trace they also match cuDNN convolutions and batch norms
#: and Inductor's GEMM templates, so a kernel must match this as well to count as attention.
_ATTENTION_KERNEL = re.compile(
    r"flash_fwd|flash_bwd|flash_attn|pytorch_flash|fmha|AttentionKernel|AttentionBackwardKernel|mem_eff|sdpa"
    r"|sm\d+_flash_(fprop|bprop)|flex_attention|flex_decoding|flashinfer|Batch(Decode|Prefill)With"
    r"|Single(Decode|Prefill)With|_paged_decode",
    re.IGNORECASE,
)
#: The largest plausible value of each recorded dimension. A trace is any user's file: a recorded batch of
#: 1e19 would size a per-sequence list of that length (:attr:`Workload.kv_lens`). A value beyond its limit
#: is read as unknown (None) with a warning. Batch: 65,536 sequences per call (windowed attention folds
#: windows into it: thousands); lengths: 16,777,216 tokens; heads and head_dim: 65,536.
SHAPE_LIMITS: dict[str, int] = {
    "batch": 2**16, "q_len": 2**24, "kv_len": 2**24, "num_q_heads": 2**16, "num_kv_heads": 2**16, "head_dim": 2**16,
}
_DTYPES = {"c10::BFloat16": "bfloat16", "c10::Half": "float16", "float": "float32", "double": "float64"}
_AUTOGRAD_SDPA_BACKWARD = re.compile(r"ScaledDotProduct(Flash|Efficient|Cudnn)Attention\w*Backward", re.IGNORECASE)


# ----------------------------------------------------------------------------------------------------
# Attention operators
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpSignature:
    """Where an attention operator's arguments sit in its recorded ``Input Dims``/``Concrete Inputs``.

    ``backend`` is the kernel family the op commits to (None for the SDPA front door, which dispatches);
    ``layout`` is ``"BHLD"`` (q ``[B, H, L, d]``) or ``"BLHD"`` (q ``[B, L, H, d]``); ``causal_index``
    points at ``is_causal`` (``causal_kind="bool"``) or at xformers' ``custom_mask_type``
    (``"mask_type"``: 0 none, 1 top-left causal, 2 bottom-right causal); ``causal_alignment`` is what a
    true ``is_causal`` means; ``mask_index`` is the optional mask/bias tensor and ``varlen_index`` the
    optional ``cu_seqlens_q`` tensor (present: packed variable-length batch).
    """

    backend: str | None
    direction: str
    layout: str = "BHLD"
    q_index: int = 0
    k_index: int = 1
    causal_index: int | None = None
    causal_kind: str = "bool"
    causal_alignment: CausalAlignment = CausalAlignment.TOP_LEFT
    mask_index: int | None = None
    varlen_index: int | None = None


#: Attention operators by exact name, with their argument positions (PyTorch ``native_functions.yaml``).
ATTENTION_OPS: dict[str, OpSignature] = {
    "aten::scaled_dot_product_attention": OpSignature(None, "forward", causal_index=5, mask_index=3),
    "aten::_scaled_dot_product_attention_math": OpSignature("math", "forward", causal_index=5, mask_index=3),
    "aten::_scaled_dot_product_flash_attention": OpSignature("flash", "forward", causal_index=4),
    "aten::_scaled_dot_product_flash_attention_for_cpu": OpSignature("flash-cpu", "forward", causal_index=4, mask_index=5),
    "aten::_scaled_dot_product_efficient_attention": OpSignature("efficient", "forward", causal_index=6, mask_index=3),
    "aten::_scaled_dot_product_cudnn_attention": OpSignature("cudnn", "forward", causal_index=6, mask_index=3),
    "aten::_flash_attention_forward": OpSignature(
        "flash", "forward", layout="BLHD", causal_index=8, causal_alignment=CausalAlignment.BOTTOM_RIGHT, varlen_index=3
    ),
    "aten::_efficient_attention_forward": OpSignature(
        "efficient", "forward", layout="BLHD", causal_index=9, causal_kind="mask_type", mask_index=3, varlen_index=4
    ),
    "aten::_scaled_dot_product_flash_attention_backward": OpSignature(
        "flash", "backward", q_index=1, k_index=2, causal_index=11, varlen_index=6
    ),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": OpSignature(
        "flash-cpu", "backward", q_index=1, k_index=2, causal_index=7, mask_index=8
    ),
    "aten::_scaled_dot_product_efficient_attention_backward": OpSignature(
        "efficient", "backward", q_index=1, k_index=2, causal_index=11, mask_index=4
    ),
    "aten::_scaled_dot_product_cudnn_attention_backward": OpSignature(
        "cudnn", "backward", q_index=1, k_index=2, causal_index=14, mask_index=8, varlen_index=9
    ),
    "aten::_flash_attention_backward": OpSignature(
        "flash", "backward", layout="BLHD", q_index=1, k_index=2, causal_index=11, causal_alignment=CausalAlignment.BOTTOM_RIGHT,
        varlen_index=6,
    ),
    "aten::_efficient_attention_backward": OpSignature(
        "efficient", "backward", layout="BLHD", q_index=1, k_index=2, causal_index=14, causal_kind="mask_type",
        mask_index=4, varlen_index=6,
    ),
}
_FLEX_FORWARD = OpSignature("flex", "forward")
_FLEX_BACKWARD = OpSignature("flex", "backward", q_index=0, k_index=1)


def is_attention_op(name: str) -> bool:
    """Whether a CPU operator name is an attention operator (:data:`ATTENTION_OPS` or FlexAttention)."""
    return name in ATTENTION_OPS or "flex_attention" in name.lower()


def signature(name: str) -> OpSignature:
    """The :class:`OpSignature` of an attention operator (FlexAttention: q, k first; mask unknown)."""
    if name in ATTENTION_OPS:
        return ATTENTION_OPS[name]
    return _FLEX_BACKWARD if "backward" in name.lower() else _FLEX_FORWARD


def attention_family(kernel_name: str) -> str | None:
    """The attention family of a kernel: None unless the name marks a fused attention kernel
    (:data:`_ATTENTION_KERNEL`); then the first :data:`ATTENTION_KERNEL_FAMILIES` family whose patterns
    match, or ``attention`` when none does."""
    if not _ATTENTION_KERNEL.search(kernel_name):
        return None
    return next((f.name for f in ATTENTION_KERNEL_FAMILIES if f.matches_kernel(kernel_name)), "attention")


def kernel_direction(names: Iterable[str]) -> str:
    """``backward`` when any kernel name says so (``flash_bwd``, ``bprop``, ``Backward``), else ``forward``."""
    return "backward" if any(re.search(r"bwd|bprop|backward", n, re.IGNORECASE) for n in names) else "forward"


# ----------------------------------------------------------------------------------------------------
# Shapes and mask
# ----------------------------------------------------------------------------------------------------


def op_dims(op: Mapping[str, Any], index: int) -> list[Any] | None:
    """The ``Input Dims`` entry ``index`` of an op row (a list), or None when not recorded or not a list."""
    dims = op.get("input_dims")
    if not isinstance(dims, list) or index >= len(dims) or not isinstance(dims[index], list):
        return None
    return dims[index]


def op_shape(op: Mapping[str, Any], sig: OpSignature) -> AttentionShape | None:
    """The call's shapes from ``Input Dims``/``Input type``; None unless q and k are 4-D lists of positive
    ints that agree (batch, head_dim). A dimension beyond :data:`SHAPE_LIMITS` is None in the shape and
    listed in its ``beyond_limits``."""
    q, k = op_dims(op, sig.q_index), op_dims(op, sig.k_index)
    if q is None or k is None or len(q) != 4 or len(k) != 4:
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (*q, *k)):
        return None
    if sig.layout == "BLHD":
        (b, lq, hq, d), (bk, lk, hkv, dk) = q, k
    else:
        (b, hq, lq, d), (bk, hkv, lk, dk) = q, k
    if b != bk or d != dk:
        return None
    types = op.get("input_types")
    raw = types[sig.q_index] if isinstance(types, list) and sig.q_index < len(types) else None
    dtype = _DTYPES.get(raw, raw) if isinstance(raw, str) and raw else None
    dims = {"batch": b, "num_q_heads": hq, "num_kv_heads": hkv, "q_len": lq, "kv_len": lk, "head_dim": d}
    beyond = tuple((f, v) for f, v in dims.items() if v > SHAPE_LIMITS[f])
    for f, _ in beyond:
        dims[f] = None
    return AttentionShape(**dims, dtype=dtype, beyond_limits=beyond)


def read_causal(concrete: list[Any] | None, sig: OpSignature) -> tuple[bool | None, CausalAlignment]:
    """(is_causal, its alignment) from ``Concrete Inputs``; (None, ``UNKNOWN``) when not recorded."""
    unknown = (None, CausalAlignment.UNKNOWN)
    if concrete is None or sig.causal_index is None or sig.causal_index >= len(concrete):
        return unknown
    value = str(concrete[sig.causal_index]).strip()
    if sig.causal_kind == "mask_type":
        return {"0": (False, CausalAlignment.NONE), "1": (True, CausalAlignment.TOP_LEFT),
                "2": (True, CausalAlignment.BOTTOM_RIGHT)}.get(value, unknown)
    if value in ("True", "False"):
        return value == "True", (sig.causal_alignment if value == "True" else CausalAlignment.NONE)
    return unknown


# ----------------------------------------------------------------------------------------------------
# Phase and workload
# ----------------------------------------------------------------------------------------------------


#: Autograd nodes of the ops SDPA's math path is made of (``autograd::engine::evaluate_function: BmmBackward0``).
_MATH_BACKWARD = re.compile(r"(?:^|: )(?:Bmm|(?:Safe)?Softmax|UnsafeView|Baddbmm)Backward\d*$")


def with_phases(calls: list[AttentionCall], ops: pd.DataFrame) -> list[AttentionCall]:
    """Calls with ``phase`` and ``workload`` filled in (see the module docstring)."""
    backward: set[tuple[str, Any]] = set()
    for c in calls:
        if c.direction == "backward":
            backward.add((c.backend, c.shape.key() if c.shape else None))
    shaped = {backend for backend, key in backward if key is not None}
    op_names = set(ops["name"].tolist())
    for name in op_names:
        m = _AUTOGRAD_SDPA_BACKWARD.search(name)
        if m and m.group(1).lower() not in shaped:  # the node stands for a backward op we could not match
            backward.add((m.group(1).lower(), None))
    # A math-path SDPA is bmm + softmax; its backward is their autograd nodes, not one attention op.
    math_grads = sorted(n for n in op_names if _MATH_BACKWARD.search(n))
    out = []
    for c in calls:
        if c.shape is None:
            out.append(c)
            continue
        s = c.shape
        if c.direction == "backward" or (c.backend, s.key()) in backward or (c.backend, None) in backward:
            phase = Phase.TRAIN
        elif s.q_len is None or s.kv_len is None:  # beyond its limit: the regime is unknown
            out.append(replace(c, notes=(*c.notes, "phase unknown: a length is beyond its limit")))
            continue
        elif s.q_len == 1 or (s.q_len <= 16 and s.kv_len >= 8 * s.q_len):
            phase = Phase.DECODE
        else:
            phase = Phase.PREFILL
        workload, notes = _workload(c, phase)
        if c.backend == "math" and phase is not Phase.TRAIN and math_grads:
            notes = (*notes, f"may be training: the trace holds the autograd backward nodes of a math-path SDPA's "
                             f"ops ({', '.join(n.rsplit(': ', 1)[-1] for n in math_grads[:3])}), which profattn "
                             "cannot pair with this call")
        out.append(replace(c, phase=phase, workload=workload, notes=notes))
    return out


def _workload(call: AttentionCall, phase: Phase) -> tuple[Workload | None, tuple[str, ...]]:
    """The call as a :class:`Workload`, or None with the reason appended to its notes."""
    notes = list(call.notes)
    s = call.shape
    assert s is not None
    reason = None
    if s.beyond_limits:
        reason = f"{', '.join(f for f, _ in s.beyond_limits)} beyond its limit (unknown)"
    elif s.dtype is None:
        reason = "dtype not recorded"
    elif call.causal is None:
        reason = "mask unknown"
    elif call.causal_alignment is CausalAlignment.TOP_LEFT and s.q_len != s.kv_len:
        reason = ("SDPA's is_causal is top-left aligned and profattn's causal mask bottom-right: they differ "
                  f"for Lq {s.q_len} != Lk {s.kv_len}")
    elif call.varlen:
        reason = "packed variable-length batch"
    if reason is not None:
        return None, (*notes, f"no profattn Workload: {reason}")
    try:
        workload = Workload(phase=phase, batch=s.batch, q_len=s.q_len, kv_len=s.kv_len, num_q_heads=s.num_q_heads,
                            num_kv_heads=s.num_kv_heads, head_dim=s.head_dim, dtype=s.dtype, mask="causal" if call.causal else "none")
    except WorkloadError as e:
        return None, (*notes, f"no profattn Workload: {e}")
    if not call.causal and s.q_len == 1:
        notes.append("with Lq = 1 a bottom-right causal mask equals no mask (profattn's decode presets say causal)")
    if phase is Phase.TRAIN:
        notes.append("a train Workload times forward and backward together")
    return workload, tuple(notes)
