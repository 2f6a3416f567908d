"""The ``--workload`` text of a :class:`Workload`, written and read back.

Grammar (comma-separated ``field=value`` items; whitespace around tokens ignored)::

    spec     := item ("," item)*
    item     := field "=" value
    field    := a Workload field name, or an alias:
                b=batch  q=q_len  kv=kv_len  hq=num_q_heads  hkv=num_kv_heads  d=head_dim
                page=page_size (also sets kv_layout=paged)  layout=kv_layout  dist=kv_len_dist
                seed=kv_len_seed  prefix=shared_prefix_len  mix=seqs  w=window  cp=cp_ranks
                docs (packed documents: seqs of (n, n), see below)
    seqs     := group ("+" group)*            -- per-sequence lengths of a variable-length call, in order
    group    := [count "x"] "(" "q" int "," "kv" int ")"
    docs     := doc ("+" doc)*                -- a packed train/prefill batch: each document (q n, kv n)
    doc      := [count "x"] int
    append   := true | false | 1 | 0
    kv_dtype := float8_e4m3fn | fp8 | fp8_e4m3 | e4m3 | none   -- the paged cache's storage (default: dtype)
    cp_scheme := ring | allgather | ulysses | torch-cp       -- with cp=N (N >= 2 ranks): context parallelism

Examples: ``phase=decode,b=8,q=1,kv=8192,hq=16,hkv=4,d=128,page=16`` (uniform decode);
``mix=2x(q2048,kv8192)+32x(q1,kv4096),hq=32,hkv=8,d=128,page=16,append=true`` (a serving step: two
prompts' prefill chunks of 2048 new tokens over 8192-token contexts beside 32 sequences decoding one token
over 4096; the phase, batch, q_len and kv_len follow from ``mix``: here ``mixed``, 34, 2048, 8192).
``phase=train,docs=512+1024+2x256,hq=16,hkv=4,d=128`` (a packed training batch of four documents, 2048 tokens;
``Workload.is_packed``; without ``phase`` it is a prefill).
``window=4096`` (alias ``w=4096``) makes any causal call a sliding-window one: each query sees at most its last
4096 keys. ``phase=train,q=8192,kv=8192,hq=16,hkv=4,d=128,cp=4,cp_scheme=ring`` splits that training call's sequence
over 4 ranks (processes) attending by ring passing of K/V blocks. Every error names the item or token that is wrong.
"""

from __future__ import annotations

import re
from dataclasses import fields

from profattn.errors import WorkloadError
from profattn.workload.contract import KVLayout, Workload, parse_kv_dtype

_INT_FIELDS = ("batch", "q_len", "kv_len", "num_q_heads", "num_kv_heads", "head_dim", "page_size", "kv_len_seed",
               "shared_prefix_len", "window", "cp_ranks")
_STR_FIELDS = ("phase", "dtype", "mask", "kv_layout", "kv_len_dist")
_OTHER_FIELDS = ("seqs", "append", "kv_dtype", "cp_scheme")
#: Short names accepted for fields (the left column of the module docstring's grammar).
ALIASES = {"b": "batch", "q": "q_len", "kv": "kv_len", "hq": "num_q_heads", "hkv": "num_kv_heads", "d": "head_dim",
           "page": "page_size", "layout": "kv_layout", "dist": "kv_len_dist", "seed": "kv_len_seed",
           "prefix": "shared_prefix_len", "mix": "seqs", "w": "window", "cp": "cp_ranks"}
_SHAPE = ("num_q_heads", "num_kv_heads", "head_dim")
_DOC = re.compile(r"^(?:([0-9]+)\s*x\s*)?([0-9]+)$", re.ASCII)
_GROUP = re.compile(r"^(?:([0-9]+)\s*x\s*)?\(\s*q\s*([0-9]+)\s*,\s*kv\s*([0-9]+)\s*\)$", re.ASCII)
#: Most sequences one ``mix=`` may describe (a bound before anything is allocated from the text).
MAX_SEQS = 1 << 16


def workload_spec(w: "Workload") -> str:
    """The ``profattn profile --workload`` text of ``w``: comma-separated ``field=value`` of every field
    that differs from its default (phase and the shape always; ``seqs=`` in the group grammar for a
    variable-length call), e.g.
    ``phase=decode,batch=8,q_len=1,kv_len=8192,num_q_heads=16,num_kv_heads=4,head_dim=128,dtype=bfloat16``.
    :func:`parse_workload_spec` reads it back."""
    defaults = {f.name: f.default for f in fields(Workload)}
    parts = []
    sized = ("batch", "q_len", "kv_len")
    for name in (*_STR_FIELDS[:1], *_INT_FIELDS[:6], *_STR_FIELDS[1:], *_INT_FIELDS[6:]):
        if w.seqs and name in sized:
            continue
        value = getattr(w, name)
        value = getattr(value, "value", value)
        if name in ("phase", "dtype") or name in _INT_FIELDS[:6] or value != getattr(defaults[name], "value", defaults[name]):
            parts.append(f"{name}={value}")
    if w.seqs:
        parts.append(f"seqs={seqs_spec(w.seqs)}")
    if w.append:
        parts.append("append=true")
    if w.kv_dtype is not None:
        parts.append(f"kv_dtype={w.kv_dtype}")
    if w.cp_scheme is not None:
        parts.append(f"cp_scheme={w.cp_scheme}")
    return ",".join(parts)


def seqs_spec(seqs: "tuple[tuple[int, int], ...]") -> str:
    """``seqs`` in the group grammar, run-length encoded in order: ``2x(q2048,kv8192)+32x(q1,kv4096)``."""
    groups: list[list] = []
    for p in seqs:
        if groups and groups[-1][0] == p:
            groups[-1][1] += 1
        else:
            groups.append([p, 1])
    return "+".join((f"{n}x" if n > 1 else "") + f"(q{q},kv{k})" for (q, k), n in groups)


def parse_seqs(text: str) -> tuple[tuple[int, int], ...]:
    """Per-sequence ``(q_len, kv_len)`` from the group grammar (``2x(q2048,kv8192)+32x(q1,kv4096)``).

    Raises:
        WorkloadError: a group that does not match ``[N x](qINT,kvINT)`` (the message quotes it), a count
            or length of 0, or more than :data:`MAX_SEQS` sequences in all.
    """
    out: list[tuple[int, int]] = []
    for raw in str(text).split("+"):
        group = raw.strip()
        m = _GROUP.match(group)
        if not m:
            raise WorkloadError(f"--workload: mix group {group!r} is not [N x](qINT,kvINT), e.g. 32x(q1,kv4096)")
        count = int(m.group(1)) if m.group(1) is not None else 1
        q, kv = int(m.group(2)), int(m.group(3))
        if count < 1 or q < 1 or kv < 1:
            raise WorkloadError(f"--workload: mix group {group!r}: count, q and kv must be positive")
        if len(out) + count > MAX_SEQS:
            raise WorkloadError(f"--workload: mix group {group!r}: more than {MAX_SEQS:,} sequences in one call")
        out.extend([(q, kv)] * count)
    return tuple(out)


def parse_docs(text: str) -> tuple[tuple[int, int], ...]:
    """Per-sequence ``(n, n)`` of packed documents from the ``docs`` grammar (``512+1024+2x256``).

    Raises:
        WorkloadError: a document that is not ``[N x]INT`` (the message quotes it), a count or length of 0, or
            more than :data:`MAX_SEQS` documents in all.
    """
    out: list[tuple[int, int]] = []
    for raw in str(text).split("+"):
        doc = raw.strip()
        m = _DOC.match(doc)
        if not m:
            raise WorkloadError(f"--workload: docs item {doc!r} is not [N x]INT, e.g. 512 or 2x256")
        count = int(m.group(1)) if m.group(1) is not None else 1
        n = int(m.group(2))
        if count < 1 or n < 1:
            raise WorkloadError(f"--workload: docs item {doc!r}: count and length must be positive")
        if len(out) + count > MAX_SEQS:
            raise WorkloadError(f"--workload: docs item {doc!r}: more than {MAX_SEQS:,} documents in one call")
        out.extend([(n, n)] * count)
    return tuple(out)


def _items(text: str) -> list[str]:
    """Split ``text`` on the commas outside parentheses. Raises WorkloadError on unbalanced parentheses."""
    items, depth, cur = [], 0, []
    for ch in str(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise WorkloadError(f"--workload {text!r}: unbalanced ')'")
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise WorkloadError(f"--workload {text!r}: unbalanced '('")
    items.append("".join(cur))
    return items


def parse_workload_spec(text: str) -> "Workload":
    """A :class:`Workload` from the ``--workload`` grammar (see the module docstring); the fields are the
    dataclass's or their aliases, ``mask``/``kv_layout``/``dtype`` take the same names as in Python.

    Raises:
        WorkloadError: an item that is not field=value, an unknown field, a field given twice (also through
            its alias), a value that is not an integer where one is needed, a malformed ``mix`` group, a
            missing shape field, ``batch``/``q_len``/``kv_len`` beside ``mix``, or any invalid combination
            (the message says which).
    """
    values: dict[str, object] = {}
    given_as: dict[str, str] = {}
    valid = (*_STR_FIELDS, *_INT_FIELDS, *_OTHER_FIELDS)
    for part in (p.strip() for p in _items(text)):
        if not part:
            continue
        key, eq, raw = part.partition("=")
        key, raw = key.strip(), raw.strip()
        if not eq or not raw:
            raise WorkloadError(f"--workload {text!r}: {part!r} is not field=value")
        name = "seqs" if key == "docs" else ALIASES.get(key, key)
        if name not in valid:
            raise WorkloadError(f"--workload: unknown field {key!r}; valid: {', '.join(valid)} "
                                f"(aliases: {', '.join(ALIASES)}, docs)")
        if name in values:
            raise WorkloadError(f"--workload: {name} given twice ({given_as[name]!r} and {key!r})")
        given_as[name] = key
        if name in _INT_FIELDS:
            if not re.fullmatch(r"-?[0-9]+", raw):  # int() would also take "1_0", "+16" and non-ASCII digits
                raise WorkloadError(f"--workload: {key} must be an integer, got {raw!r} (ASCII digits only)")
            values[name] = int(raw)
        elif key == "docs":
            values[name] = parse_docs(raw)
        elif name == "seqs":
            values[name] = parse_seqs(raw)
        elif name == "append":
            flag = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(raw.lower())
            if flag is None:
                raise WorkloadError(f"--workload: append must be true or false, got {raw!r}")
            values[name] = flag
        elif name == "kv_dtype":
            try:
                values[name] = parse_kv_dtype(raw)
            except WorkloadError as exc:
                raise WorkloadError(f"--workload: {key}={raw}: {exc}") from None
        elif name == "cp_scheme":
            values[name] = None if raw.lower() == "none" else raw
        else:
            values[name] = raw
    if "page_size" in values and "kv_layout" not in values:
        values["kv_layout"] = KVLayout.PAGED.value
    try:
        return _build(text, values, given_as)
    except WorkloadError as exc:  # context parallelism's fields as the user typed them (cp=, page=)
        msg = str(exc)
        for name in ("cp_ranks", "page_size"):
            if given_as.get(name, name) != name:
                msg = re.sub(rf"\b{name}\b", given_as[name], msg)
        raise WorkloadError(msg) from None


def _build(text: str, values: dict[str, object], given_as: dict[str, str]) -> Workload:
    if "seqs" in values:
        clash = [given_as[n] for n in ("batch", "q_len", "kv_len") if n in values]
        if clash:
            raise WorkloadError(f"--workload: {', '.join(clash)} {'follows' if len(clash) == 1 else 'follow'} from "
                                f"{given_as['seqs']}=...; give either {given_as['seqs']} or {', '.join(clash)}")
        missing = [n for n in _SHAPE if n not in values]
        if missing:
            raise WorkloadError(f"--workload {text!r}: missing {', '.join(missing)}")
        seqs = values.pop("seqs")
        phase = values.pop("phase", None)
        if given_as["seqs"] == "docs":
            return Workload.packed(phase if phase is not None else "prefill", (n for n, _ in seqs),  # type: ignore[arg-type]
                                   **values)
        return Workload.varlen(phase, seqs, **values)  # type: ignore[arg-type]
    missing = [n for n in ("phase", *_INT_FIELDS[:6]) if n not in values]
    if missing:
        raise WorkloadError(f"--workload {text!r}: missing {', '.join(missing)}")
    return Workload(**values)  # type: ignore[arg-type]
