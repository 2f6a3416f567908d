"""Values read from files made safe to use: numbers bounded and finite, text safe for UTF-8 output.

Everything profattn reads that someone else wrote — a ``results.json``, a row of the results store, a Kineto
trace — passes through these before a number is computed with or a string is written out:

* **Integers** must fit a signed 64-bit integer (:data:`MAX_INT`: SQLite's integer, NumPy's ``int64``; Python would
  carry ``10**400`` happily until ``float()`` raises ``OverflowError``).
* **Floats** must be finite; durations must also lie within :data:`MAX_DURATION_US` (11.6 days: no kernel, call or
  timed sample lasts longer, while a ``dur`` of 1e308 would add up to ``inf`` or print as a 300-digit total).
* **Text** must encode as UTF-8: an unpaired UTF-16 surrogate (``"\\ud800"``, half of an emoji cut by whoever
  wrote the file — JSON's ``\\uXXXX`` escapes can carry one, and Kineto writes names as the program gave them) is
  replaced by U+FFFD, the Unicode replacement character, and counted, so the caller can say how many it replaced.

The callers say what happens to a value that fails: a results file is refused with a one-line error naming the
field (:mod:`profattn.results.io`), a trace event is skipped or read as missing and counted in the trace's
warnings (:mod:`profattn.trace.columns`). No profattn imports: every layer may use this module.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = [
    "MAX_DURATION_US",
    "MAX_INT",
    "MIN_INT",
    "REPLACEMENT",
    "bounded_int",
    "finite_float",
    "number_problem",
    "safe_text",
    "short_number",
]

#: Largest integer read (int64).
MAX_INT = 2**63 - 1
#: Smallest integer read (int64).
MIN_INT = -(2**63)
#: Longest duration read, µs (1e12 µs = 11.6 days).
MAX_DURATION_US = 1e12
#: What an unpaired surrogate becomes.
REPLACEMENT = "\ufffd"

_SURROGATE = re.compile("[\ud800-\udfff]")


def number_problem(value: Any, *, integer: bool = False, limit: float | None = None) -> str | None:
    """Why ``value`` is not a usable number (``None`` when it is): not a number (a string, a bool, null), an
    integer beyond 64 bits, not finite (NaN, ±inf), not an integer where one is needed, or beyond ``limit`` in
    magnitude. The text completes "is …" in a message that names the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{short_number(value)}, not a number"
    if isinstance(value, int):
        if not MIN_INT <= value <= MAX_INT:
            return f"{short_number(value)}, beyond a 64-bit integer"
    elif not math.isfinite(value):
        return f"{value}, not a finite number"
    elif integer and not value.is_integer():
        return f"{value!r}, not an integer"
    if limit is not None and abs(value) > limit:
        return f"{short_number(value)}, beyond the limit of {limit:g}"
    return None


def finite_float(value: Any, *, limit: float | None = None) -> float | None:
    """``value`` as a float when :func:`number_problem` finds nothing wrong with it, else None."""
    return None if number_problem(value, limit=limit) is not None else float(value)


def bounded_int(value: Any) -> int | None:
    """``value`` as an int when it is an integral number within 64 bits (``3.0`` included), else None."""
    return None if number_problem(value, integer=True) is not None else int(value)


def short_number(value: Any) -> str:
    """``value`` for a message, never longer than 40 characters: an integer beyond 64 bits as ``an integer of N
    digits``; other values by ``repr``, cut."""
    if isinstance(value, int) and not isinstance(value, bool) and not MIN_INT <= value <= MAX_INT:
        return f"an integer of {int(math.log10(abs(value))) + 1:,} digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def safe_text(text: str) -> tuple[str, int]:
    """``text`` with every unpaired UTF-16 surrogate replaced by U+FFFD, and how many were replaced.

    Python keeps a ``"\\ud83d\\ude00"`` pair from a JSON file as one character (the emoji) and a lone half as a
    surrogate code point, which no UTF-8 writer accepts; only those lone halves are replaced."""
    if text.isascii():
        return text, 0
    replaced, n = _SURROGATE.subn(REPLACEMENT, text)
    return replaced, n
