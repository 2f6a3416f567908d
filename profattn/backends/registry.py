"""The backend registry: every kernel family profattn can run, by name.

Built-ins: the four SDPA kernels (``sdpa-math``, ``sdpa-flash``, ``sdpa-efficient``, ``sdpa-cudnn``),
the eager reference (``eager``), FlexAttention (``flex``), our Triton paged decode kernel and the torch
paged reference. Installed plugins (the ``profattn.backends`` entry-point group, :mod:`profattn.backends.plugins`)
are registered on the first lookup; tests add more with :func:`register`. Optional kernel packages are
imported lazily inside ``prepare``.

The plugin interface is the one the built-ins implement, exported here: :class:`Backend`,
:class:`KernelFamily`, :class:`Prepared`, :class:`AttentionInputs`, :class:`Unsupported`, and the helpers
:func:`paged_decode_reason` / :func:`paged_only_forward` for kernels that read the paged cache.
"""

from __future__ import annotations

import torch

from profattn.backends.base import (
    AttentionInputs, Backend, BackendInfo, KernelFamily, Prepared, Unsupported, paged_decode_reason, paged_only_forward,
)
from profattn.backends.eager import EagerBackend
from profattn.backends.flex import FlexBackend, FlexPagedDecode
from profattn.backends.sdpa import SDPA_BACKENDS
from profattn.backends.triton_paged import TorchPagedReference, TritonPagedDecode
from profattn.errors import UnknownNameError

__all__ = [
    "AttentionInputs",
    "Backend",
    "BackendInfo",
    "KernelFamily",
    "Prepared",
    "Unsupported",
    "all_backends",
    "backend_info",
    "get_backend",
    "paged_decode_reason",
    "paged_only_forward",
    "register",
    "unregister",
]

_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend, *, replace: bool = False) -> Backend:
    """Add ``backend`` under ``backend.name``.

    Raises:
        ValueError: the name is taken and ``replace`` is False.
    """
    if backend.name in _REGISTRY and not replace:
        raise ValueError(f"backend {backend.name!r} is already registered")
    _REGISTRY[backend.name] = backend
    return backend


def unregister(name: str) -> None:
    """Remove a backend (tests use this to clean up); unknown names are ignored."""
    _REGISTRY.pop(name, None)


def _plugins() -> None:
    from profattn.backends.plugins import load_installed

    load_installed()


def all_backends() -> tuple[Backend, ...]:
    """Every registered backend (installed plugins included), in registration order (the report's column order)."""
    _plugins()
    return tuple(_REGISTRY.values())


def get_backend(name: str) -> Backend:
    """The backend called ``name``.

    Raises:
        UnknownNameError: no such backend (message lists the registered names).
    """
    _plugins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownNameError(f"unknown backend {name!r}; valid: {', '.join(_REGISTRY)}") from None


def backend_info(device: torch.device) -> list[BackendInfo]:
    """Availability of every backend on ``device``: its static check (``unsupported_reason``) on the
    ``small`` preset's GQA workload of each phase (train, prefill, paged decode). Available when any phase
    passes (``phases`` lists them); else the reason of the first. A plugin that failed to load, or whose
    check raises, is unavailable with that error."""
    from profattn.backends.plugins import BrokenPlugin
    from profattn.workload import get_preset

    probes: dict[str, object] = {}
    for w in get_preset("small").workloads:
        probes.setdefault(w.phase.value, w)
    out = []
    for b in all_backends():
        if isinstance(b, BrokenPlugin):
            out.append(BackendInfo(b.name, b.family.name, b.description, False, f"failed to load: {b.error}"))
            continue
        reasons: dict[str, str | None] = {}
        for phase, w in probes.items():
            try:
                reasons[phase] = b.unsupported_reason(w, device)
            except Exception as exc:  # noqa: BLE001 - a plugin's check may raise anything
                reasons[phase] = f"unsupported_reason raised {type(exc).__name__}: {exc}"
        phases = tuple(p for p, r in reasons.items() if r is None)
        why = "; ".join(dict.fromkeys(r for r in reasons.values() if r))
        out.append(BackendInfo(b.name, b.family.name, b.description, bool(phases), "" if phases else why, phases=phases))
    return out


for _b in (*SDPA_BACKENDS, EagerBackend(), FlexBackend(), TritonPagedDecode(), TorchPagedReference(), FlexPagedDecode()):
    register(_b)
