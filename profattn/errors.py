"""Errors profattn raises on bad input; the CLI turns each into one line and exit code 2.

Following memray's pattern: one exception type that carries its exit code, so "no data" and "bad input"
never look alike (an empty DataFrame means the input held no such events; a ``ProfattnError`` means the
input could not be used at all).
"""

from __future__ import annotations


class ProfattnError(Exception):
    """A user-facing error: the message is one line, ``exit_code`` is what the CLI returns (2)."""

    exit_code: int = 2


class WorkloadError(ProfattnError, ValueError):
    """A workload field is out of its domain (unknown phase, Hq not a multiple of Hkv, ...)."""


class UnknownNameError(ProfattnError, KeyError):
    """An unknown backend, preset, regime or device name; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain.
        return str(self.args[0]) if self.args else ""


class TraceError(ProfattnError):
    """A trace file cannot be read: missing, truncated, not JSON, or not a Kineto/Chrome trace."""


class ResultsError(ProfattnError):
    """A ``results.json`` is missing, malformed, or of an unsupported schema version."""


class ProfattnWarning(UserWarning):
    """Something read that profattn could use past (unknown fields ignored, unpaired surrogates replaced, ...);
    the CLI prints each as one ``warning: ...`` line on stderr; library callers get it through :mod:`warnings`."""
