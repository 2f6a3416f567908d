"""The backend registry: every kernel family profattn can run, by name.

Built-ins: the four SDPA kernels (``sdpa-math``, ``sdpa-flash``, ``sdpa-efficient``, ``sdpa-cudnn``),
SDPA on jagged nested tensors (``sdpa-nested``), the eager reference (``eager``), FlexAttention (``flex``),
our Triton paged decode kernel and the torch paged reference, FlashInfer's kernels. Installed plugins (the ``profattn.backends`` entry-point group) are produced by
:mod:`profattn.backends.plugins` and registered here, after the built-ins, on the first lookup
(:func:`load_installed`); ``module:object`` specs are loaded and registered by :func:`resolve_backend`.
Tests add more with :func:`register` and put the registry back with :func:`preserved`. Optional kernel
packages are imported lazily inside ``prepare``.

The plugin interface is the one the built-ins implement, exported here: :class:`Backend`,
:class:`KernelFamily`, :class:`Prepared`, :class:`AttentionInputs`, :class:`Unsupported`, and the helpers
:func:`paged_decode_reason` / :func:`paged_only_forward` for kernels that read the paged cache.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from profattn.backends.base import (
    AttentionInputs, Backend, BackendInfo, KernelFamily, Prepared, Unsupported, call_shape_reason, paged_decode_reason,
    paged_only_forward,
)
from profattn.backends.eager import EagerBackend
from profattn.backends.flashinfer import FLASHINFER_BACKENDS
from profattn.backends.flashinfer_hopper import FLASHINFER_HOPPER_BACKENDS
from profattn.backends.flex import FlexBackend, FlexPagedDecode
from profattn.backends.plugins import BrokenPlugin, PluginBackend, PluginSpecError, installed_plugins, load_spec
from profattn.backends.sdpa import SDPA_BACKENDS, SDPA_NESTED
from profattn.backends.triton_paged import TorchPagedReference, TritonPagedDecode
from profattn.backends.triton_paged_prefill import TritonPagedPrefill
from profattn.errors import UnknownNameError

__all__ = [
    "AttentionInputs",
    "Backend",
    "BackendInfo",
    "KernelFamily",
    "Prepared",
    "Unsupported",
    "ALL",
    "COUNTER_PASS_SKIPS",
    "DEFAULT_BACKENDS",
    "all_backends",
    "backend_info",
    "counter_pass_backends",
    "default_backends",
    "get_backend",
    "left_out_of_default",
    "load_installed",
    "paged_decode_reason",
    "paged_only_forward",
    "preserved",
    "register",
    "resolve_backend",
    "unregister",
]

_REGISTRY: dict[str, Backend] = {}
_plugins_loaded = False


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
    if not _plugins_loaded:
        load_installed()


def load_installed(*, refresh: bool = False) -> list[Backend]:
    """Register the backends of every installed ``profattn.backends`` entry point (once per process unless
    ``refresh``); returns them. A plugin whose name is taken is registered as a
    :class:`~profattn.backends.plugins.BrokenPlugin` under ``<entry-point name>`` saying so (or skipped if
    that name is taken too)."""
    global _plugins_loaded
    if _plugins_loaded and not refresh:
        return [b for b in _REGISTRY.values() if isinstance(b, (PluginBackend, BrokenPlugin)) and b.origin.distribution is not None]
    _plugins_loaded = True
    out: list[Backend] = []
    for backend in installed_plugins():
        origin = backend.origin
        existing = _REGISTRY.get(backend.name)
        if existing is not None:
            if getattr(existing, "origin", None) == origin:
                register(backend, replace=True)  # the same plugin, reloaded
                out.append(backend)
                continue
            backend = BrokenPlugin(origin, f"backend name {backend.name!r} is already registered")
            if backend.name in _REGISTRY:
                continue
        register(backend)
        out.append(backend)
    return out


def resolve_backend(name: str) -> Backend:
    """A registered backend by name (built-ins and installed plugins), or a ``module:object`` spec loaded
    and registered (so the session and reports find it by name).

    Raises:
        UnknownNameError: neither a registered name nor a spec.
        PluginSpecError: a malformed spec, one that does not resolve to a backend, or a backend whose name
            another backend (a built-in or another plugin) already has.
    """
    if ":" not in name:
        return get_backend(name)
    backend = load_spec(name)
    existing = _REGISTRY.get(backend.name)
    if existing is not None and getattr(existing, "origin", None) != getattr(backend, "origin", None):
        if isinstance(existing, PluginBackend) and isinstance(backend, PluginBackend) and type(existing.inner) is type(backend.inner):
            return existing  # the same plugin, named twice (by entry point and by module:object)
        taken_by = getattr(getattr(existing, "origin", None), "label", None) or "a built-in backend"
        raise PluginSpecError(f"--backend {name!r}: its name {backend.name!r} is already taken by {taken_by}; "
                              "rename the plugin's backend")
    register(backend, replace=True)
    return backend


@contextmanager
def preserved() -> Iterator[None]:
    """Put the registry back as it was on exit: the registered backends and whether installed plugins
    were loaded (tests that register plugins wrap themselves in it)."""
    global _plugins_loaded
    before, loaded = dict(_REGISTRY), _plugins_loaded
    try:
        yield
    finally:
        _REGISTRY.clear()
        _REGISTRY.update(before)
        _plugins_loaded = loaded


#: What ``profattn profile`` runs when no ``--backend`` is given: every kernel family once — the SDPA kernels, the
#: eager and torch paged references, FlexAttention (dense and paged), our Triton decode and prefill kernels and
#: FlashInfer's tensor-core decode (the decode a vLLM FlashInfer deployment calls). Left out (``--backend NAME`` adds
#: one, ``--backend all`` runs every registered backend): FlashInfer's paged prefill (its batch-prefill module is a
#: 76-79 s JIT build per head_dim on a fresh H200 machine: NOTES, issue 37), its CUDA-core decode, its ragged prefill,
#: the explicit FA2/FA3 prefill paths, cuDNN's paged decode and prefill through FlashInfer (cuDNN is in the set as
#: ``sdpa-cudnn``) and XQA — each a JIT or graph build of its own on first use.
DEFAULT_BACKENDS = (
    "sdpa-math", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-nested", "eager", "flex", "triton-paged-decode",
    "triton-paged-prefill", "torch-paged-reference", "flex-paged-decode", "flashinfer-decode-tc",
)
#: Backends whose call is a chain of unfused kernels (composite aten ops, or a gather of the pages and then SDPA):
#: the counter pass of ``profattn profile`` leaves their cells out when the run has a backend that is not one of
#: them. They launched 189 of the 263 kernels Nsight Compute profiled (each replayed once per metric pass) in the
#: seed preset's pass on an H200 (NOTES, issue 37), and their bytes are the sum the byte ledger already predicts from
#: the shapes; ``profattn counters RUN --backend NAME`` adds them to a run.
COUNTER_PASS_SKIPS = ("sdpa-math", "eager", "torch-paged-reference")
#: The ``--backend`` value that selects every registered backend.
ALL = "all"


def default_backends() -> tuple[Backend, ...]:
    """The backends ``profattn profile`` runs by default: :data:`DEFAULT_BACKENDS` and every installed plugin, in
    registration order."""
    left_out = set(left_out_of_default())
    return tuple(b for name, b in _REGISTRY.items() if name not in left_out)


def counter_pass_backends(names: Sequence[str]) -> tuple[str, ...]:
    """The backends of ``names`` (a run's backend names, in run order) whose cells ``profattn profile``'s counter
    pass profiles: all but :data:`COUNTER_PASS_SKIPS`, or all of them when every one is a skip (a run of only the
    unfused paths still gets its counters)."""
    kept = tuple(n for n in dict.fromkeys(names) if n not in COUNTER_PASS_SKIPS)
    return kept or tuple(dict.fromkeys(names))


def left_out_of_default() -> tuple[str, ...]:
    """The built-in backends :func:`default_backends` leaves out, in registration order (a backend registered by a
    plugin or a caller is never left out)."""
    _plugins()
    return tuple(name for name in _REGISTRY if name in _BUILTIN and name not in DEFAULT_BACKENDS)


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
    """Availability of every backend on ``device``: its call-shape check and its static check
    (``unsupported_reason``) on every workload of the ``small`` preset (train, prefill, paged decode) and of the
    ``serving-small`` preset (paged prefill unchunked and chunked, decode, mixed steps). Available when any
    workload passes; ``phases`` lists the phases (in :class:`~profattn.workload.Phase` order) with a passing
    workload. Else ``reason`` is one refusal: the one most concentrated in the phases it blocks (most workloads
    per phase; ties: the first seen) — a set-up reason (e.g. Triton without ``TRITON_INTERPRET=1`` on a CPU)
    blocks every workload of the phases the backend is written for, a shape reason is spread over the phases it
    is not. A plugin that failed to load, or whose check raises, is unavailable with that error."""
    from profattn.workload import Phase, get_preset

    probes = [*get_preset("small").workloads, *get_preset("serving-small").workloads]
    out = []
    for b in all_backends():
        if isinstance(b, BrokenPlugin):
            out.append(BackendInfo(b.name, b.family.name, b.description, False, f"failed to load: {b.error}"))
            continue
        passed: set[str] = set()
        refusals: dict[str, list[str]] = {}  # reason -> phases of the workloads it refused (one entry each)
        for w in probes:
            try:
                reason = call_shape_reason(b, w) or b.unsupported_reason(w, device)
            except Exception as exc:  # noqa: BLE001 - a plugin's check may raise anything
                reason = f"unsupported_reason raised {type(exc).__name__}: {exc}"
            if reason:
                refusals.setdefault(reason, []).append(w.phase.value)
            else:
                passed.add(w.phase.value)
        phases = tuple(p.value for p in Phase if p.value in passed)
        why = max(refusals, key=lambda r: len(refusals[r]) / len(set(refusals[r])), default="")
        out.append(BackendInfo(b.name, b.family.name, b.description, bool(phases), "" if phases else why, phases=phases))
    return out


for _b in (*SDPA_BACKENDS, SDPA_NESTED, EagerBackend(), FlexBackend(), TritonPagedDecode(), TritonPagedPrefill(), TorchPagedReference(),
           FlexPagedDecode(),
           *FLASHINFER_BACKENDS, *FLASHINFER_HOPPER_BACKENDS):
    register(_b)
#: The built-in backends' names, in registration order.
_BUILTIN = tuple(_REGISTRY)
