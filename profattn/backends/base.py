"""The backend interface: a kernel family that may run a workload, with a plan/run split.

FlashInfer's plan/run split: :meth:`Backend.prepare` does host-side set-up (mask construction,
compilation, a trial call) outside every timed and profiled window and returns a :class:`Prepared`
whose ``forward`` is what the harness times. Backends never import the harness or the report.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Protocol, runtime_checkable

import torch

from profattn.families import KernelFamily
from profattn.workload import Workload

#: ``forward(q, k, v) -> o``; q ``[B, Hq, Lq, d]``, k/v ``[B, Hkv, Lk, d]``, o ``[B, Hq, Lq, d]``.
ForwardFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class Unsupported(Exception):
    """Raised by :meth:`Backend.prepare` when the backend cannot run the workload; the message is the reason."""


@dataclass(frozen=True)
class Prepared:
    """A backend made ready for one workload on one device.

    Attributes:
        forward: the call that is timed and profiled (see :data:`ForwardFn`).
        context: factory of a context manager the harness enters around warm-up, timing and profiling
            (e.g. ``sdpa_kernel([FLASH_ATTENTION])``), so its cost stays out of the per-call time.
        notes: set-up facts worth showing in the report (e.g. "block mask built for causal").
        bind: ``bind(inputs)`` → the zero-argument call, for backends that read their own layout (the paged
            cache); see :meth:`bound`.
        bind_append: ``bind_append(inputs)`` → the zero-argument call that writes the step's new K/V into the
            paged cache (appending workloads); None: the shared torch append
            (:func:`~profattn.workload.paged.reshape_and_cache`). See :meth:`appender`.
        executed_pairs: (query, key) pairs the kernel computes per query head when it pads a variable-length
            call to ``B · Lq_max · Lk_max`` (None when it computes only the call's own rows and keys); the
            workload's :attr:`~profattn.workload.Workload.attended_pairs` are the pairs required.
        to_contract: see the attribute's comment.
        bind_train: ``bind_train(inputs)`` → :class:`TrainLeaves`, for a backend that trains on its own layout
            (e.g. packed ``[Σ len, H, d]`` leaves): the harness times ``leaves.call`` + its backward from
            ``leaves.grad_out`` and reads the gradients from ``leaves.grads()`` instead of ``inputs.q.grad`` etc.
            (train workloads only; None: the contract's q/k/v are the leaves).
    """

    forward: ForwardFn
    context: Callable[[], ContextManager[object]] = contextlib.nullcontext
    notes: tuple[str, ...] = ()
    bind: Callable[["AttentionInputs"], Callable[[], torch.Tensor]] | None = None
    #: Converts the timed call's output to the ``[B, Hq, Lq, d]`` contract for the correctness check, outside
    #: every timing (e.g. a packed ``[Σ q_len, Hq, d]`` output of a variable-length kernel); None: already is.
    to_contract: Callable[[torch.Tensor], torch.Tensor] | None = None
    bind_append: Callable[["AttentionInputs"], Callable[[], None]] | None = None
    executed_pairs: int | None = None
    bind_train: Callable[["AttentionInputs"], "TrainLeaves"] | None = None

    def bound(self, inputs: "AttentionInputs") -> Callable[[], torch.Tensor]:
        """The zero-argument call the harness times: ``bind(inputs)`` when the backend reads its own
        layout (e.g. the paged cache; layout work happens here, untimed), else ``forward(q, k, v)``."""
        if self.bind is not None:
            return self.bind(inputs)
        q, k, v = inputs.q, inputs.k, inputs.v
        return lambda: self.forward(q, k, v)

    def appender(self, inputs: "AttentionInputs") -> Callable[[], None]:
        """The zero-argument call that appends ``inputs.append`` (the step's new K/V) into ``inputs.paged``
        through its slot mapping: ``bind_append(inputs)`` when the backend brings its own, else the torch
        :func:`~profattn.workload.paged.reshape_and_cache`.

        Raises:
            ValueError: ``inputs`` has no paged cache or no append (the workload does not append).
        """
        if inputs.paged is None or inputs.append is None:
            raise ValueError("an append needs a paged cache and the step's new K/V (workload append=True)")
        if self.bind_append is not None:
            return self.bind_append(inputs)
        from profattn.workload.paged import reshape_and_cache

        cache, new = inputs.paged, inputs.append
        return lambda: reshape_and_cache(new.k_new, new.v_new, cache.k_pages, cache.v_pages, new.slot_mapping)


@dataclass(frozen=True)
class TrainLeaves:
    """A training call on a backend's own leaf tensors (:attr:`Prepared.bind_train`).

    The backend copies the contract's padded q/k/v (``[B, H, L_max, d]``) into leaves of its own layout in
    ``bind_train`` — detached, ``requires_grad``, outside every timed window — and dO into the layout of its output.

    Attributes:
        call: the forward on the leaves (the timed call adds ``call().backward(grad_out)``); its output is in the
            backend's layout, which :attr:`Prepared.to_contract` turns into ``[B, Hq, L_max, d]``.
        grad_out: dO in the layout of ``call()``'s output (padding rows of the contract's dO are zero and dropped).
        grads: the leaves' gradients as ``{"dq": [B, Hq, L_max, d], "dk"/"dv": [B, Hkv, Lk_max, d]}`` (padding rows
            and key slots zero; a value is None when its leaf has no gradient), outside every timing.
        zero_grads: clears the leaves' gradients (``.grad = None``) before each timed call, so no timed call adds
            a gradient accumulation the contract's other backends do not pay.
    """

    call: Callable[[], torch.Tensor]
    grad_out: torch.Tensor
    grads: Callable[[], dict[str, "torch.Tensor | None"]]
    zero_grads: Callable[[], None]


@dataclass
class AttentionInputs:
    """Inputs of one workload on one device (the harness draws them; backends read them).

    ``q``: ``[B, Hq, Lq, d]``; ``k``, ``v``: ``[B, Hkv, Lk, d]`` (the logical cache, contiguous; for ragged
    workloads the slots past a sequence's length are unused); ``grad_out``: like ``q`` (train only);
    ``paged``: the same cache as a :class:`~profattn.paged.PagedKVCache` (paged workloads only).
    For train, q/k/v require grad.

    A variable-length call (``workload.seqs``) pads to the longest sequence: sequence ``b``'s queries are rows
    ``0 … q_lens[b] − 1`` of ``q`` (later rows are padding: random, and ignored by the check), its keys slots
    ``0 … kv_lens[b] − 1`` of ``k``/``v``; ``q_lens``/``kv_lens`` are ``[B]`` int32 on the device (set for
    variable-length and appending calls, else None). ``append``: the step's new K/V and their pool slots
    (a :class:`~profattn.workload.paged.CacheAppend`; appending workloads only) — before it runs, the paged
    cache holds each sequence's cached prefix (``kv_lens[b] − q_lens[b]`` tokens) only.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    grad_out: torch.Tensor | None = None
    paged: "object | None" = None
    q_lens: torch.Tensor | None = None
    kv_lens: torch.Tensor | None = None
    append: "object | None" = None

    @property
    def nbytes(self) -> int:
        ts = [self.q, self.k, self.v] + ([self.grad_out] if self.grad_out is not None else [])
        return sum(t.numel() * t.element_size() for t in ts)

    def zero_grads(self) -> None:
        for t in (self.q, self.k, self.v):
            t.grad = None


@runtime_checkable
class Backend(Protocol):
    """A kernel family that runs attention.

    Attributes:
        name: registry key, e.g. ``sdpa-flash``.
        family: the :class:`KernelFamily` whose kernels must appear in this backend's cells.
        description: one line for ``profattn backends`` and the report.
    """

    name: str
    family: KernelFamily
    description: str

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        """Cheap static check: ``None`` if it may run, else the reason (no tensors allocated)."""
        ...

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        """Host-side set-up for ``workload`` on ``device``.

        Raises:
            Unsupported: the backend cannot run this workload here (message = reason).
        """
        ...


@dataclass(frozen=True)
class BackendInfo:
    """What ``profattn backends`` prints: availability on a device and the reason when not."""

    name: str
    family: str
    description: str
    available: bool
    reason: str = ""
    extras: dict[str, str] = field(default_factory=dict)
    #: The phases (train, prefill, decode, mixed) it can run here; empty when unavailable.
    phases: tuple[str, ...] = ()


def call_shape_reason(backend: object, workload: Workload) -> str | None:
    """Why ``backend`` cannot take ``workload``'s call shape (None if it can), checked before the backend's own
    :meth:`Backend.unsupported_reason`: a variable-length call (per-sequence lengths, phase mixed) or a call
    that appends to the cache is offered only to backends that declare ``varlen = True`` (plugins that do not
    say so are never handed per-sequence lengths they might ignore). A quantized KV cache (``workload.kv_dtype``)
    is offered only to backends whose ``kv_dtypes`` names it: its pages hold codes, which a backend that does not
    dequantize would read as values."""
    if (workload.is_varlen or workload.append) and not getattr(backend, "varlen", False):
        what = "per-sequence lengths (a variable-length or mixed call)" if workload.is_varlen else "a cache append"
        return f"takes one uniform q_len/kv_len per call: no {what}"
    if workload.kv_dtype is not None and workload.kv_dtype not in getattr(backend, "kv_dtypes", ()):
        return (f"reads K/V in the compute dtype only: no {workload.kv_dtype} cache with per-KV-head scales "
                "(no dequantizing path)")
    return None


def paged_decode_reason(workload: Workload) -> str | None:
    """Why a paged-decode backend cannot run ``workload`` (None if it can): decode, one query, paged layout."""
    from profattn.workload import KVLayout, Phase

    if workload.phase is not Phase.DECODE or workload.q_len != 1:
        return "a decode path: needs phase decode with q_len 1"
    if workload.kv_layout is not KVLayout.PAGED:
        return "reads a paged KV cache; this workload's layout is dense"
    return None


def paged_only_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The ``forward`` of backends that read the paged cache through ``bind``: dense K/V are refused.

    Raises:
        Unsupported: always.
    """
    raise Unsupported("this backend reads the paged cache (bind), not dense K/V")
