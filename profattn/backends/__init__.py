"""The backends layer: every kernel family profattn can run, by name, and the interface a plugin implements.

The plugin interface is the one the built-ins implement, exported here: :class:`Backend`,
:class:`KernelFamily`, :class:`Prepared`, :class:`AttentionInputs`, :class:`Unsupported`, and the helpers
:func:`paged_decode_reason` / :func:`paged_only_forward` for kernels that read the paged cache. The
registry is :mod:`profattn.backends.registry`; plugins are :mod:`profattn.backends.plugins`.
"""

from profattn.backends.base import (
    AttentionInputs, Backend, BackendInfo, KernelFamily, Prepared, TrainLeaves, Unsupported, paged_decode_reason,
    paged_only_forward,
)
from profattn.backends.registry import (
    all_backends, backend_info, get_backend, load_installed, preserved, register, resolve_backend, unregister,
)

__all__ = [
    "AttentionInputs", "Backend", "BackendInfo", "KernelFamily", "Prepared", "TrainLeaves", "Unsupported", "all_backends",
    "backend_info", "get_backend", "load_installed", "paged_decode_reason", "paged_only_forward", "preserved",
    "register", "resolve_backend", "unregister",
]
