"""The ``--workload`` text of a :class:`Workload`: ``field=value`` pairs, written and read back."""

from __future__ import annotations

from dataclasses import fields

from profattn.errors import WorkloadError
from profattn.workload.contract import Workload


_INT_FIELDS = ("batch", "q_len", "kv_len", "num_q_heads", "num_kv_heads", "head_dim", "page_size", "kv_len_seed",
               "shared_prefix_len")
_STR_FIELDS = ("phase", "dtype", "mask", "kv_layout", "kv_len_dist")


def workload_spec(w: "Workload") -> str:
    """The ``profattn profile --workload`` text of ``w``: comma-separated ``field=value`` of every field
    that differs from its default (phase and the shape always), e.g.
    ``phase=decode,batch=8,q_len=1,kv_len=8192,num_q_heads=16,num_kv_heads=4,head_dim=128,dtype=bfloat16``.
    :func:`parse_workload_spec` reads it back."""
    defaults = {f.name: f.default for f in fields(Workload)}
    parts = []
    for name in (*_STR_FIELDS[:1], *_INT_FIELDS[:6], *_STR_FIELDS[1:], *_INT_FIELDS[6:]):
        value = getattr(w, name)
        value = getattr(value, "value", value)
        if name in ("phase", "dtype") or name in _INT_FIELDS[:6] or value != getattr(defaults[name], "value", defaults[name]):
            parts.append(f"{name}={value}")
    return ",".join(parts)


def parse_workload_spec(text: str) -> "Workload":
    """A :class:`Workload` from ``field=value`` pairs separated by commas (see :func:`workload_spec`);
    the fields are the dataclass's, ``mask``/``kv_layout``/``dtype`` take the same names as in Python.

    Raises:
        WorkloadError: an unknown field, a repeated field, a value that is not an integer where one is
            needed, a missing shape field, or any invalid combination (message says which).
    """
    values: dict[str, object] = {}
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        name, eq, raw = part.partition("=")
        name, raw = name.strip(), raw.strip()
        if not eq or not raw:
            raise WorkloadError(f"--workload {text!r}: {part!r} is not field=value")
        if name not in (*_INT_FIELDS, *_STR_FIELDS):
            raise WorkloadError(f"--workload: unknown field {name!r}; valid: {', '.join((*_STR_FIELDS, *_INT_FIELDS))}")
        if name in values:
            raise WorkloadError(f"--workload: {name} given twice")
        if name in _INT_FIELDS:
            try:
                values[name] = int(raw)
            except ValueError:
                raise WorkloadError(f"--workload: {name} must be an integer, got {raw!r}") from None
        else:
            values[name] = raw
    missing = [n for n in ("phase", *_INT_FIELDS[:6]) if n not in values]
    if missing:
        raise WorkloadError(f"--workload {text!r}: missing {', '.join(missing)}")
    return Workload(**values)  # type: ignore[arg-type]
