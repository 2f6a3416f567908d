"""``torch.nn.functional.scaled_dot_product_attention`` pinned to one kernel family.

Each backend enters ``torch.nn.attention.sdpa_kernel([one backend])`` so PyTorch cannot fall back to
another kernel. GQA is passed natively with ``enable_gqa=True``; where the pinned kernel refuses it,
the cell is "unsupported" with PyTorch's own reason (collected from the warnings SDPA emits when it
rejects a kernel), never run on another kernel.

``sdpa-nested`` (:class:`SdpaNestedBackend`) calls the same function on jagged nested tensors
(``torch.nested.nested_tensor_from_jagged``): each sequence's own query rows and keys, packed in ``bind``.
What torch's jagged path (``torch/nested/_internal/sdpa.py``) can express, read from its source (torch 2.13)
and the kernels it calls:

- no ``attn_mask`` ("Masks are not yet supported!"), so a mask is ``is_causal`` or nothing;
- on CUDA it picks FlashAttention-2, memory-efficient, math, cuDNN; FlashAttention-2's variable-length
  kernel masks each sequence with its own lengths (``Mask(binfo.actual_seqlen_k, binfo.actual_seqlen_q)``:
  key ``j`` ≤ ``t + Lk − Lq``, bottom-right — torch's dense-path check that refuses non-square causal calls
  for this reason skips nested inputs), while the memory-efficient path passes ``is_causal`` as
  ``custom_mask_type`` 1, top-left. ``sdpa-nested`` therefore pins FlashAttention-2 on CUDA;
- on a CPU only the math path exists for jagged inputs, and it refuses ``is_causal=True``; it converts to
  strided nested tensors, and torch's nested matmul pads both GEMMs to the longest sequence
  (``to_padded_tensor`` + ``bmm``; the softmax runs per sequence);
- the fused paths need equal head counts ("This path is currently not implemented for jagged layout NT."),
  and ``enable_gqa`` reaches no jagged kernel, so K/V are expanded to ``Hq`` heads in ``bind`` (untimed);
- training: ``nested_tensor_from_jagged(values, offsets)`` is a view of ``values``, so the jagged q/k/v are made
  inside the timed call from packed leaves (``bind_train``; K/V leaves at ``Hq`` heads, their gradients summed
  back to ``Hkv`` outside the timing) and the backward reaches them.
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from profattn.interfaces import ADOPTIONS
from profattn.backends.base import AttentionInputs, KernelFamily, Prepared, TrainLeaves, Unsupported
from profattn.families import CUDNN, DENSE, EFFICIENT, FLASH, NESTED
from profattn.backends.eager import dense_path_bytes, dense_path_reason
from profattn.backends.masks import (SdpaMaskArgs, dense_mask, padded_pairs, padding_note, sdpa_mask_args, varlen_mask,
                                    window_applies)
from profattn.backends.memory import fit_reason, human_bytes
from profattn.backends.packing import PackedLeaves, pack_rows, row_offsets, unpack_rows
from profattn.workload import Mask, Phase, Workload


@dataclass(frozen=True)
class SdpaBackend:
    """SDPA restricted to ``sdpa_backend`` (MATH, FLASH_ATTENTION, EFFICIENT_ATTENTION, CUDNN_ATTENTION)."""

    name: str
    sdpa_backend: SDPBackend
    family: KernelFamily
    description: str
    cuda_only: bool
    #: Takes variable-length calls (padded to the longest sequence, an explicit boolean mask; kernels that
    #: refuse an arbitrary mask are unsupported with PyTorch's reason from the trial call) and appending ones.
    varlen = True

    @property
    def adoption(self):  # noqa: ANN201
        """The interface it implements and the layout it reads (:data:`profattn.interfaces.ADOPTIONS`)."""
        return ADOPTIONS[self.name]

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        if workload.kv_len_dist.drawn:
            return "ragged KV lengths need a per-sequence key-padding mask on a padded dense cache; see the paged backends"
        if self.cuda_only and device.type != "cuda":
            return f"{self.sdpa_backend.name} runs on CUDA only (device is {device.type})"
        if self.sdpa_backend is SDPBackend.CUDNN_ATTENTION and device.type == "cuda" and not torch.backends.cudnn.is_available():
            return "cuDNN is not available in this torch build"
        if self.sdpa_backend is SDPBackend.MATH:
            return dense_path_reason(workload, device)
        return None

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        margs = sdpa_mask_args(workload, device)
        if workload.is_varlen:
            margs = SdpaMaskArgs(dense_mask(workload, device), False,
                                 "explicit boolean mask [B, 1, Lq_max, Lk_max] from per-sequence lengths")
        gqa = workload.is_gqa
        backend = self.sdpa_backend

        def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=margs.attn_mask, is_causal=margs.is_causal, enable_gqa=gqa
            )

        # Trial call on tiny tensors of the same head layout, dtype and mask class: PyTorch's kernel
        # selection depends on those, not on the lengths; a rejection raises "No available kernel".
        _trial(workload, device, backend)
        varlen = workload.is_varlen
        return Prepared(
            forward=forward,
            context=lambda: sdpa_kernel([backend]),
            notes=(margs.how, "enable_gqa=True" if gqa else "MHA") + ((padding_note(workload),) if varlen else ()),
            executed_pairs=padded_pairs(workload) if varlen else None,
        )


def _trial(workload: Workload, device: torch.device, backend: SDPBackend) -> None:
    """Run SDPA once on small inputs under ``sdpa_kernel([backend])``; raise Unsupported on rejection."""
    lq, lk = workload.q_len, workload.kv_len
    if lq == lk:
        lq = lk = min(lk, 16)
    elif lq == 1:
        lk = min(lk, 16)
    else:  # keep Lq < Lk (bottom-right bias) or Lq > Lk
        lq, lk = (min(lq, 8), min(lk, 16)) if lq < lk else (min(lq, 16), min(lk, 8))
    phase = Phase.PREFILL if workload.phase is Phase.MIXED else workload.phase
    small = Workload(phase=phase, batch=1, q_len=lq, kv_len=lk, num_q_heads=workload.num_q_heads,
                     num_kv_heads=workload.num_kv_heads, head_dim=workload.head_dim, dtype=workload.dtype, mask=workload.mask)
    margs = sdpa_mask_args(small)
    if workload.is_varlen or window_applies(workload):  # the same mask class as the real call: a boolean tensor
        margs = SdpaMaskArgs(varlen_mask((lq,), (lk,), causal=True, device=device), False, "")
    dtype = getattr(torch, workload.dtype)
    q = torch.randn(small.q_shape, device=device, dtype=dtype)
    k = torch.randn(small.kv_shape, device=device, dtype=dtype)
    v = torch.randn(small.kv_shape, device=device, dtype=dtype)

    def forward(q, k, v):  # noqa: ANN001
        return F.scaled_dot_product_attention(q, k, v, attn_mask=margs.attn_mask, is_causal=margs.is_causal,
                                              enable_gqa=small.is_gqa)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel([backend]):
                if workload.phase is Phase.TRAIN:
                    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
                    forward(q, k, v).sum().backward()
                else:
                    forward(q, k, v)
        except RuntimeError as exc:
            detail = _rejection_reasons([str(w.message) for w in caught]) or str(exc).splitlines()[0]
            raise Unsupported(f"{backend.name} rejected this workload: {detail[:600]}") from None


def _rejection_reasons(messages: list[str]) -> str:
    """PyTorch's reasons for rejecting the pinned kernel, from SDPA's warnings.

    SDPA warns a header ("Memory efficient kernel not used because:") then the reason, for every
    kernel it considered; the kernels we disabled on purpose ("... has been runtime disabled.") are
    dropped with their headers, as is each "(Triggered internally at file:line)" suffix. The sizes in
    the text are those of the small trial call (same heads, head_dim and dtype; lengths capped at 16).
    """
    cleaned = [_clean(m) for m in messages]
    out: list[str] = []
    for i, m in enumerate(cleaned):
        if not m or "runtime disabled" in m:
            continue
        nxt = cleaned[i + 1] if i + 1 < len(cleaned) else ""
        if m.endswith(":") and (not nxt or "runtime disabled" in nxt):
            continue
        out.append(m)
    return " ".join(dict.fromkeys(out))


def _clean(message: str) -> str:
    """A PyTorch kernel-selection warning without its "(Triggered internally at file:line.)" suffix."""
    return re.sub(r"\s*\(Triggered internally at [^)]*\)\.?", "", message).strip()


SDPA_BACKENDS: tuple[SdpaBackend, ...] = (
    SdpaBackend("sdpa-math", SDPBackend.MATH, DENSE, "SDPA math backend: composite aten ops (K/V expanded for GQA)", False),
    SdpaBackend("sdpa-flash", SDPBackend.FLASH_ATTENTION, FLASH, "SDPA FlashAttention-2 kernels on CUDA (split-KV for decode); on a CPU, ATen's flash-attention CPU kernel", False),
    SdpaBackend("sdpa-efficient", SDPBackend.EFFICIENT_ATTENTION, EFFICIENT, "SDPA memory-efficient (xFormers CUTLASS) kernels", True),
    SdpaBackend("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION, CUDNN, "SDPA cuDNN fused attention", True),
)


# ---- SDPA on jagged nested tensors ----------------------------------------------------------------------------

#: The one kernel ``sdpa-nested`` lets torch's jagged SDPA run, by device type (see the module docstring): the only
#: jagged kernel whose ``is_causal`` is profattn's bottom-right mask on CUDA, the only jagged path on a CPU.
NESTED_KERNELS: dict[str, SDPBackend] = {"cuda": SDPBackend.FLASH_ATTENTION, "cpu": SDPBackend.MATH}
#: The logger torch's jagged SDPA writes its kernel-rejection reasons to (``log.warning``, not ``warnings``).
_NESTED_LOGGER = "torch.nested._internal.sdpa"


def nested_call_reason(workload: Workload, device_type: str) -> str | None:
    """Why torch's jagged SDPA cannot run ``workload`` exactly on a ``device_type`` device (``cuda``, ``cpu``, ...),
    or None. Static: no tensor is allocated and no GPU is needed (the memory check and the trial call, which
    collects PyTorch's own reasons, come after it)."""
    w = workload
    if window_applies(w):
        return (f"sliding window of {w.window} keys: torch's jagged SDPA takes no attn_mask (\"Masks are not yet "
                "supported!\") and no window argument, so the window cannot be expressed")
    kernel = NESTED_KERNELS.get(device_type)
    if kernel is None:
        return (f"jagged SDPA is pinned to FlashAttention-2 on CUDA and to the math path on a CPU; {device_type} "
                "is neither")
    if kernel is SDPBackend.FLASH_ATTENTION and w.dtype == "float32":
        return "jagged SDPA on CUDA is pinned to FlashAttention-2, which takes float16/bfloat16, not float32"
    rows = sum(q > 1 for q in w.q_lens)
    if kernel is SDPBackend.MATH and w.mask is Mask.CAUSAL and rows:
        return (f"causal, with {rows} of {w.batch} sequences holding more than one query row: on a CPU torch's "
                "jagged SDPA has only its math path, which refuses is_causal=True (\"Nested tensors for query / key "
                "are not supported when is_causal=True\"), and jagged SDPA takes no attn_mask (\"Masks are not yet "
                "supported!\"), so the bottom-right causal mask cannot be expressed (on CUDA FlashAttention-2's "
                "variable-length kernel runs it)")
    return None


def nested_bytes(workload: Workload) -> int:
    """Bytes ``sdpa-nested`` allocates beyond the cell's inputs, in bytes: q and the output packed
    (``Σ q_len · Hq · d`` each) and K and V packed at ``Hq`` heads (``2 · Σ kv_len · Hq · d``, the GQA expansion
    included), in the input dtype; for train their gradients as much again, plus dO packed."""
    w = workload
    packed = (2 * w.q_tokens + 2 * w.logical_kv_tokens) * w.num_q_heads * w.head_dim * w.itemsize
    return 2 * packed + w.q_tokens * w.num_q_heads * w.head_dim * w.itemsize if w.phase is Phase.TRAIN else packed


class SdpaNestedBackend:
    """``sdpa-nested``: SDPA on jagged nested tensors, one sequence's own rows and keys each (no padding row or
    key slot is passed), under ``sdpa_kernel([FLASH_ATTENTION])`` on CUDA and ``sdpa_kernel([MATH])`` on a CPU.

    ``bind`` packs the padded ``q [B, Hq, Lq_max, d]`` and ``k``/``v [B, Hkv, Lk_max, d]`` (the dense copy of
    a paged cache) to ``[Σ len, H, d]`` (K/V expanded to ``Hq`` heads for GQA) and wraps them with
    ``nested_tensor_from_jagged`` (int32 offsets, cached min/max lengths, so the call converts nothing and
    reads nothing back); the timed call returns the jagged ``[B, Hq, j, d]`` output, which ``to_contract``
    unpacks to ``[B, Hq, Lq_max, d]``. ``is_causal`` is passed only when a sequence has more than one query row
    (one row sees all its keys). Where torch cannot express the call exactly the reason says why
    (:func:`nested_call_reason`)."""

    name = "sdpa-nested"
    #: The interface it implements and the layout it reads (:mod:`profattn.interfaces`).
    adoption = ADOPTIONS['sdpa-nested']
    family = NESTED
    description = ("SDPA on jagged nested tensors (torch.nested, layout=torch.jagged): FlashAttention-2's "
                   "variable-length kernel on CUDA, the math path on a CPU (K/V expanded to Hq heads)")
    #: Takes variable-length calls (packed per sequence in bind) and appending ones (it reads the dense copy).
    varlen = True

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        reason = nested_call_reason(workload, device.type)
        if reason:
            return reason
        if NESTED_KERNELS[device.type] is SDPBackend.MATH:
            return fit_reason(nested_bytes(workload) + dense_path_bytes(workload), device,
                              "the packed q/k/v and the padded score matrices of torch's nested matmul")
        return fit_reason(nested_bytes(workload), device, "the packed q/k/v (K/V at Hq heads)")

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        w = workload
        kernel = NESTED_KERNELS[device.type]
        causal = w.mask is Mask.CAUSAL and any(q > 1 for q in w.q_lens)
        _nested_trial(w, device, kernel, causal)
        q_lens, kv_lens, group, l_max = w.q_lens, w.kv_lens, w.group_size, w.q_len

        def bind(inputs: AttentionInputs):
            q, k, v = (t.detach() for t in (inputs.q, inputs.k, inputs.v))
            qn = jagged(pack_rows(q, q_lens), q_lens)
            k, v = pack_rows(k, kv_lens), pack_rows(v, kv_lens)
            if group > 1:
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            kv_offsets = row_offsets(kv_lens, k.device)  # one offsets tensor: K and V share their ragged size
            kn, vn = jagged(k, kv_lens, kv_offsets), jagged(v, kv_lens, kv_offsets)

            def call() -> torch.Tensor:
                return F.scaled_dot_product_attention(qn, kn, vn, is_causal=causal)

            return call

        def to_contract(out: torch.Tensor) -> torch.Tensor:
            return unpack_rows(out.transpose(1, 2).values(), q_lens, l_max)

        def bind_train(inputs: AttentionInputs) -> TrainLeaves:
            leaves = PackedLeaves(inputs.q, inputs.k, inputs.v, q_lens, kv_lens, kv_repeat=group)
            q_off, kv_off = row_offsets(q_lens, leaves.q.device), row_offsets(kv_lens, leaves.q.device)
            grad_out = jagged(pack_rows(inputs.grad_out, q_lens), q_lens, q_off)

            def call() -> torch.Tensor:  # the jagged tensors are views of the leaves, made here so autograd sees them
                return F.scaled_dot_product_attention(jagged(leaves.q, q_lens, q_off), jagged(leaves.k, kv_lens, kv_off),
                                                      jagged(leaves.v, kv_lens, kv_off), is_causal=causal)

            return TrainLeaves(call, grad_out, leaves.grads, leaves.zero_grads)

        def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return to_contract(bind(AttentionInputs(q, k, v))())

        return Prepared(forward=forward, context=lambda: sdpa_kernel([kernel]), bind=bind, to_contract=to_contract,
                        bind_train=bind_train if w.phase is Phase.TRAIN else None,
                        notes=_nested_notes(w, kernel, causal),
                        executed_pairs=padded_pairs(w) if kernel is SDPBackend.MATH and _unequal(w) else None)


def jagged(values: torch.Tensor, lengths: "tuple[int, ...] | list[int]", offsets: torch.Tensor | None = None
           ) -> torch.Tensor:
    """Packed ``values [Σ lengths, H, d]`` as a jagged nested tensor ``[B, H, j, d]`` (SDPA's layout; the ragged
    dimension is ``j``), with int32 ``offsets`` (``row_offsets(lengths)`` when None; pass the same tensor for K
    and V so they share one ragged size) and the min/max lengths cached, so torch's jagged SDPA neither converts
    offsets nor reads lengths back from the device."""
    if offsets is None:
        offsets = row_offsets(lengths, values.device)
    nt = torch.nested.nested_tensor_from_jagged(values, offsets, min_seqlen=min(lengths), max_seqlen=max(lengths))
    return nt.transpose(1, 2)


def _unequal(w: Workload) -> bool:
    """True when the call's sequences differ in length (padding is then more than the call's own pairs)."""
    return len(set(w.q_lens)) > 1 or len(set(w.kv_lens)) > 1


def _nested_notes(w: Workload, kernel: SDPBackend, causal: bool) -> tuple[str, ...]:
    """The cell notes of ``sdpa-nested`` on ``w``: layout, mask, GQA expansion, and padding on the math path."""
    notes = [f"jagged q [{w.batch}, {w.num_q_heads}, j, {w.head_dim}] ({w.q_tokens:,} rows) and K/V "
             f"({w.logical_kv_tokens:,} rows) packed per sequence in bind, outside the timed call; output unpacked to "
             "[B, Hq, Lq_max, d] for the check, outside the timing"]
    if w.phase is Phase.TRAIN:
        notes.append("train: the packed q/k/v are the autograd leaves; the jagged tensors are views of them made in the "
                     "timed call (nested_tensor_from_jagged), forward and backward timed; gradients unpacked for the "
                     "check outside the timing" + (f" (dK/dV summed from Hq to Hkv heads there: that reduction is not "
                                                   "timed)" if w.is_gqa else ""))
    if kernel is SDPBackend.FLASH_ATTENTION:
        notes.append("FlashAttention-2's variable-length kernel (pinned): each sequence's own rows and keys, no "
                     "padded row or key slot computed")
    if causal:
        notes.append("is_causal=True on FlashAttention-2's variable-length kernel: bottom-right per sequence (it "
                     "masks with each sequence's own q/kv lengths)")
    elif w.mask is Mask.CAUSAL:
        notes.append("no mask: every sequence has one query row, which sees all its keys")
    else:
        notes.append("no mask")
    if w.is_gqa:
        kv = 2 * w.logical_kv_tokens * w.head_dim * w.itemsize
        notes.append(f"K/V expanded from Hkv={w.num_kv_heads} to Hq={w.num_q_heads} heads in bind (torch's jagged "
                     "SDPA requires equal head counts and passes enable_gqa to no kernel): the copy is not timed (a "
                     "server would pay it every step, or hold its cache at Hq heads), and the kernel reads "
                     f"{human_bytes(kv * w.num_q_heads)} of K/V instead of the {human_bytes(kv * w.num_kv_heads)} at "
                     f"Hkv heads ({w.group_size}×; the byte ledger counts Hkv heads)")
    if kernel is SDPBackend.MATH:
        pad = padding_note(w) if _unequal(w) else "every sequence the same length: nothing padded"
        notes.append("math path (the CPU's only jagged kernel): q/k/v converted to strided nested tensors inside "
                     "the timed call; torch's nested matmul pads both GEMMs to the longest sequence "
                     f"(to_padded_tensor + bmm), softmax per sequence; {pad}")
    return tuple(notes)


class _Collect(logging.Handler):
    """Appends every record's message to ``sink`` (torch's jagged SDPA logs its rejection reasons)."""

    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


def _nested_trial(workload: Workload, device: torch.device, kernel: SDPBackend, causal: bool) -> None:
    """Run jagged SDPA once on two short sequences with the workload's heads (K/V at Hq, as bound), head_dim,
    dtype and ``is_causal`` under ``sdpa_kernel([kernel])``, with its backward for train.

    Raises:
        Unsupported: the pinned kernel rejected the call; the reason is PyTorch's, from the warnings and log
            records its kernel selection emits (the sizes in it are the trial's: lengths 3 and 2).
    """
    w = workload
    dtype = getattr(torch, w.dtype)
    lens = (3, 2)
    train = w.phase is Phase.TRAIN
    values = [torch.randn(sum(lens), w.num_q_heads, w.head_dim, device=device, dtype=dtype, requires_grad=train)
              for _ in range(3)]
    offsets = row_offsets(lens, device)
    q, k, v = (jagged(x, lens, offsets) for x in values)
    messages: list[str] = []
    logger = logging.getLogger(_NESTED_LOGGER)
    handler, propagate = _Collect(messages), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False  # the reasons go into the cell's reason, not onto stderr
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = lambda message, *args, **kwargs: messages.append(str(message))
            with sdpa_kernel([kernel]):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                if train:
                    out.backward(jagged(torch.randn_like(values[0]), lens, offsets))
    except (RuntimeError, ValueError) as exc:
        detail = _kernel_section(messages, kernel) or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise Unsupported(f"jagged SDPA with {kernel.name} rejected this workload: {detail[:600]}") from None
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


#: The header torch's kernel selection writes before each kernel's reasons ("Flash attention kernel not used
#: because:").
_SECTION_HEADERS = {
    SDPBackend.FLASH_ATTENTION: "Flash attention kernel", SDPBackend.MATH: "Math attention kernel",
    SDPBackend.EFFICIENT_ATTENTION: "Memory efficient kernel", SDPBackend.CUDNN_ATTENTION: "cuDNN attention kernel",
}


def _kernel_section(messages: list[str], kernel: SDPBackend) -> str:
    """The reasons PyTorch gave for rejecting ``kernel`` alone: the messages after its "… not used because:"
    header up to the next header (the other kernels were disabled on purpose)."""
    out: list[str] = []
    inside = False
    for m in (_clean(x) for x in messages):
        if m.endswith("not used because:"):
            inside = m.startswith(_SECTION_HEADERS[kernel])
            continue
        if inside and m and "runtime disabled" not in m:
            out.append(m)
    return " ".join(dict.fromkeys(out))


SDPA_NESTED = SdpaNestedBackend()
