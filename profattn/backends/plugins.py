"""Bring-your-own kernel: backends from other packages, through the interface the built-ins use.

Two ways in, both resolving to a :class:`~profattn.backends.base.Backend` (``name``, ``family``,
``description``, ``unsupported_reason(workload, device)``, ``prepare(workload, device) → Prepared``):

* ``--backend package.module:object`` on the command line (:func:`load_spec`);
* the ``profattn.backends`` entry-point group of installed packages (:func:`installed_plugins`), e.g. in the
  plugin's ``pyproject.toml``::

      [project.entry-points."profattn.backends"]
      onehead-decode = "profattn_plugin_decode:backend"

``object`` may be a backend instance, a backend class (called with no arguments) or a zero-argument
factory returning a backend. A plugin must never kill a run: one that fails to import, or whose object is
not a backend, becomes a :class:`BrokenPlugin` whose every cell is an error naming the plugin; one that
raises in ``unsupported_reason``, ``prepare`` or a call gets that cell's error, with the plugin's name
(:class:`PluginBackend` carries its :class:`PluginOrigin`; :mod:`profattn.harness.cell` prefixes it).

This module only *produces* backends; :mod:`profattn.backends.registry` registers them
(``load_installed``, ``resolve_backend``) and never the other way round.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import types
from dataclasses import dataclass
from typing import Any

import torch

from profattn.backends.base import Backend, KernelFamily, Prepared
from profattn.errors import ProfattnError
from profattn.workload import Workload

ENTRY_POINT_GROUP = "profattn.backends"
_SPEC = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


class PluginSpecError(ProfattnError):
    """A ``--backend module:object`` that is not of that form (exit 2; a spec that fails to import is not
    an error of the command line but of the plugin, reported per cell)."""


class PluginLoadError(RuntimeError):
    """Raised by :meth:`BrokenPlugin.prepare`: the plugin could not be loaded (message says why)."""


@dataclass(frozen=True)
class PluginOrigin:
    """Where a plugin backend came from: ``name`` (entry-point name, or the spec given on the command
    line), ``spec`` (``module:object``) and the installed ``distribution`` (None for ``--backend`` specs)."""

    name: str
    spec: str
    distribution: str | None = None

    @property
    def label(self) -> str:
        """``plugin onehead-decode (profattn_plugin_decode:backend)``-style text for error messages."""
        where = self.spec if self.distribution is None else f"{self.spec} from {self.distribution}"
        return f"plugin {self.name}" + (f" ({where})" if self.name != self.spec else "")


class PluginBackend:
    """A plugin's backend, unchanged, with its :class:`PluginOrigin` attached (``origin``). ``prepare`` and
    the timed call are the plugin's own: nothing is wrapped inside the timed window."""

    def __init__(self, inner: Backend, origin: PluginOrigin) -> None:
        self.inner, self.origin = inner, origin
        self.name: str = inner.name
        self.family: KernelFamily = inner.family
        self.description: str = f"{inner.description} [{origin.label}]"

    @property
    def varlen(self) -> bool:
        """Whether the plugin declares it takes variable-length calls (``varlen = True``; default False)."""
        return getattr(self.inner, "varlen", False) is True

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        return self.inner.unsupported_reason(workload, device)

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        return self.inner.prepare(workload, device)


class BrokenPlugin:
    """Stands in for a plugin that could not be loaded: it claims every workload, and ``prepare`` raises
    :class:`PluginLoadError`, so each cell records why (the run goes on)."""

    def __init__(self, origin: PluginOrigin, error: str) -> None:
        self.origin, self.error = origin, error
        self.name = origin.name
        self.family = KernelFamily(f"plugin:{origin.name}", kernel_patterns=(), op_patterns=())
        self.description = f"{origin.label}: failed to load: {error}"

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        return None

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        raise PluginLoadError(f"failed to load: {self.error}")


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"


def interface_problems(obj: Any) -> list[str]:
    """What ``obj`` lacks of the backend interface (empty when it is a backend)."""
    problems = []
    for attr, kind in (("name", str), ("description", str), ("family", KernelFamily)):
        if not isinstance(getattr(obj, attr, None), kind):
            problems.append(f"{attr} ({kind.__name__})")
    for meth in ("unsupported_reason", "prepare"):
        if not callable(getattr(obj, meth, None)):
            problems.append(f"{meth}()")
    return problems


def factory_problem(obj: Any) -> str | None:
    """Why ``obj`` cannot be a backend class or factory to call with no arguments (None when it can, or when
    it is not meant to be called: an object that already has the backend interface).

    Nothing is called to find out: a builtin (``os:system``, ``os:fork``) is never a factory, and a class
    or function whose signature requires arguments is refused before it runs.
    """
    if not interface_problems(obj) and not isinstance(obj, type):
        return None
    if not callable(obj):
        return None
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType)) or (
            isinstance(obj, type) and obj.__module__ == "builtins"):
        return f"a builtin ({name}), not a backend class or factory"
    module = (getattr(obj, "__module__", None) or type(obj).__module__ or "").partition(".")[0]
    if module in sys.stdlib_module_names:  # builtins:exit (site.Quitter), pdb:set_trace, os:…, shutil:…
        return f"{name} comes from Python's standard library ({module}), not a backend class or factory"
    if isinstance(obj, type) and getattr(obj, "_is_protocol", False):
        return f"{name} is an interface (a Protocol); name a class that implements it"
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None  # no signature to read (a C extension type): let the call tell
    required = [p.name for p in sig.parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if required:
        return f"{getattr(obj, '__qualname__', type(obj).__name__)} needs arguments ({', '.join(required)}); a backend factory takes none"
    return None


def _instantiate(obj: Any) -> Any:
    if isinstance(obj, type):  # a backend class
        return obj()
    if interface_problems(obj) and callable(obj):  # a factory function
        return obj()
    return obj


def name_problem(name: str) -> str | None:
    """Why a plugin's ``name`` cannot name its cells (None when it can): it is empty, or holds a double quote, a
    backslash or a control character — torch's Kineto writer puts a cell's range name (``<workload>.<backend>``) into
    the trace's JSON unescaped, so such a name makes the trace unreadable."""
    if not name.strip():
        return "its name is empty"
    bad = sorted({ch for ch in name if ch in '"\\' or ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0})
    if bad:
        shown = ", ".join(repr(ch) for ch in bad)
        return f"its name {name!r} holds {shown}, which torch's trace writer does not escape; rename it"
    return None


def make_backend(obj_loader, origin: PluginOrigin) -> Backend:
    """Load and check one plugin; a :class:`PluginBackend`, or a :class:`BrokenPlugin` saying what failed.
    Never raises (``BaseException`` such as ``KeyboardInterrupt`` excepted)."""
    try:
        obj = _instantiate(obj_loader())
    except Exception as exc:  # noqa: BLE001 - a plugin may raise anything on import
        return BrokenPlugin(origin, _first_line(exc))
    missing = interface_problems(obj)
    if missing:
        return BrokenPlugin(origin, f"{type(obj).__name__} does not implement the backend interface (missing: {', '.join(missing)})")
    named = name_problem(obj.name)
    if named:
        return BrokenPlugin(origin, f"{type(obj).__name__}: {named}")
    return PluginBackend(obj, origin)


def load_spec(spec: str) -> Backend:
    """The backend ``package.module:object`` names (see the module docstring).

    What the command line got wrong is an error before anything runs; what the plugin's own code does
    wrong is the plugin's, reported per cell (:class:`BrokenPlugin`): a module that *raises* while
    importing (a missing dependency of it included), or a factory that raises.

    Raises:
        PluginSpecError: ``spec`` is not of the form ``module:object``; no module of that name exists; the
            module has no such attribute; the object is a builtin or a callable that needs arguments
            (:func:`factory_problem`, checked before anything is called); or the object is not a backend.
    """
    if not _SPEC.match(spec):
        raise PluginSpecError(f"--backend {spec!r}: expected a backend name or package.module:object")
    origin = PluginOrigin(spec, spec)
    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise PluginSpecError(f"--backend {spec!r}: no module named {exc.name!r} (is the plugin installed, "
                                  "or on PYTHONPATH?)") from None
        return BrokenPlugin(origin, _first_line(exc))  # the plugin's own import of something missing
    except Exception as exc:  # noqa: BLE001 - a plugin may raise anything on import
        return BrokenPlugin(origin, _first_line(exc))
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginSpecError(f"--backend {spec!r}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    problem = factory_problem(obj)
    if problem:
        raise PluginSpecError(f"--backend {spec!r}: not a profattn backend: {problem} (see profattn.backends.Backend)")
    try:
        obj = _instantiate(obj)
    except Exception as exc:  # noqa: BLE001 - the plugin's class or factory raised
        return BrokenPlugin(origin, _first_line(exc))
    missing = interface_problems(obj)
    if missing:
        raise PluginSpecError(f"--backend {spec!r}: {type(obj).__name__} is not a profattn backend "
                              f"(missing: {', '.join(missing)}; see profattn.backends.Backend)")
    named = name_problem(obj.name)
    if named:
        raise PluginSpecError(f"--backend {spec!r}: {named}")
    return PluginBackend(obj, origin)


def installed_plugins() -> list[Backend]:
    """One backend per installed ``profattn.backends`` entry point, in entry-point order: a
    :class:`PluginBackend`, or a :class:`BrokenPlugin` saying why it failed to load. Registers nothing
    (:func:`profattn.backends.registry.load_installed` does). Never raises for a plugin's own failure."""
    from importlib.metadata import entry_points

    out: list[Backend] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None) or "unknown distribution"
        out.append(make_backend(ep.load, PluginOrigin(ep.name, ep.value, dist)))
    return out
