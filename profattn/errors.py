"""Errors profattn raises on bad input; the CLI turns each into one line and exit code 2.

Following memray's pattern: one exception type that carries its exit code, so "no data" and "bad input"
never look alike (an empty DataFrame means the input held no such events; a ``ProfattnError`` means the
input could not be used at all).
"""

from __future__ import annotations


#: Control characters (C0, DEL, C1, the Unicode line and paragraph separators) as the escapes a message shows instead
#: of them: a name or a field from a file holding a newline, CR, BEL or ESC cannot break a one-line message, forge a
#: ``profattn: error:`` line or drive the terminal.
_CONTROL = {i: f"\\x{i:02x}" for i in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_CONTROL.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r", 0x2028: "\\u2028", 0x2029: "\\u2029"})


def message_text(value: object) -> str:
    """``value`` as text for a one-line message: every control character escaped (``\\n``, ``\\x1b``, ...)."""
    return str(value).translate(_CONTROL)


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
