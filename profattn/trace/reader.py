"""Stream the ``traceEvents`` array of a (gzipped) Chrome/Kineto trace in decoded batches.

The trace parser (:mod:`profattn.trace.kineto`) needs a few fields of every event, never the whole JSON tree.
This module reads the file in blocks (gzip detected by its magic bytes and inflated incrementally),
finds the ``"traceEvents": [`` array, and hands the events over in batches of about
:data:`BATCH_BYTES` of JSON, each decoded on its own; the metadata around the array (``schemaVersion``,
``deviceProperties``, ``distributedInfo``, ...) is decoded at the end. Peak memory is one batch of
decoded events plus the caller's columns, not the document.

Format sources: the Chrome Trace Event format (JSON Object Format ``{"traceEvents": [...], ...}`` or
JSON Array Format ``[...]``) and Kineto's ``ChromeTraceLogger`` (``libkineto/src/output_json.cpp``),
which writes one event object per element of ``traceEvents``.

**Batches.** A batch ends at a candidate boundary ``}`` ``,`` ``{`` between two elements (found by a
regular expression near the end of the buffered bytes). Whether a candidate really is a boundary is
decided by the JSON decoder itself: ``[`` + bytes from a known element start up to the candidate + ``]``
decodes only when the candidate sits between two elements at the array's own depth, outside any string
(JSON strings cannot hold a raw control character, brackets inside strings do not count, and an
unfinished element leaves an open bracket or string). A batch is decoded by msgspec into the caller's
``event_type`` (a ``msgspec.Struct`` naming only the wanted fields: the rest is skipped without
building Python objects); where that fails (``NaN``/``Infinity`` literals, integers beyond 64 bits, a
field of an unexpected JSON type, a guess that was not a boundary), the same bytes are decoded by the
stdlib ``json`` module into dicts, and where even that fails, element by element
(:meth:`json.JSONDecoder.raw_decode`), which finds the exact boundary or the exact error.

Files that do not look like a trace at the top (another first character, no ``"traceEvents"`` key in the
first :data:`HEADER_LIMIT_BYTES`) are read whole by the stdlib ``json`` module instead, which gives the
precise error for non-traces and handles any layout.

**Bounded buffering.** Whitespace before the document and between elements is dropped as it is read,
never buffered; one element (or a document read whole) longer than :data:`MAX_EVENT_BYTES` is an error,
so a file of nothing but whitespace, or ``/dev/zero`` renamed, cannot take the machine's memory. Only
regular files are read: a device, FIFO or socket is refused before it is opened.

Errors: every unreadable input raises :class:`~profattn.errors.TraceError` with a one-line message that
names the file: missing/unreadable file, bad or truncated gzip, invalid UTF-8 (with the byte offset), not
JSON (line and column), truncated JSON, nesting too deep, not a trace, not a regular file, an element
longer than :data:`MAX_EVENT_BYTES`.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from profattn.errors import TraceError

__all__ = ["BATCH_BYTES", "HEADER_LIMIT_BYTES", "MAX_EVENTS", "MAX_EVENT_BYTES", "MAX_SUFFIX_BYTES", "MAX_TRACE_BYTES", "Batch",
           "TraceReader", "parse_int"]

#: Target size (bytes of JSON text) of one decoded batch of events.
BATCH_BYTES = 4 * 2**20
#: Size of the blocks read from the file (compressed bytes for gzip).
_BLOCK_BYTES = 2**20
#: Most bytes searched for the ``"traceEvents"`` key before the whole file is read the slow way.
HEADER_LIMIT_BYTES = 64 * 2**20
#: Most bytes of JSON text buffered for one element of ``traceEvents`` (or for a document read whole):
#: beyond it the file is refused rather than held in memory.
MAX_EVENT_BYTES = 512 * 2**20
#: Most bytes of JSON text read from one trace (inflated, for gzip): a 4 MB gzip can inflate to terabytes.
MAX_TRACE_BYTES = 32 * 2**30
#: Most elements of ``traceEvents`` read from one trace (billions of tiny events would run for minutes).
MAX_EVENTS = 2 * 10**8
#: Most bytes kept after the array's closing ``]`` (the metadata keys that follow it).
MAX_SUFFIX_BYTES = 64 * 2**20
#: Bytes of the buffer's tail searched first for a batch boundary.
_TAIL_BYTES = 256 * 2**10

_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"
_WS = b" \t\r\n"
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_WS_TEXT = re.compile(r"[ \t\r\n]*")


def parse_int(literal: str) -> int | float:
    """JSON integer hook: exact ints up to 20 digits, a float beyond (``inf`` for absurd lengths), so
    Python's int-string-length limit cannot trip and 64-bit checks see a float."""
    return int(literal) if len(literal) <= 20 else float(literal)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


@dataclass(frozen=True)
class Batch:
    """Decoded events of one batch: ``typed`` says whether they are instances of the reader's
    ``event_type`` (else arbitrary JSON values, dicts where the element was an object)."""

    events: list[Any]
    typed: bool


class TraceReader:
    """Reads one trace file; iterate :meth:`batches`, then read :attr:`metadata`.

    Args:
        name: the file (its name is in every error message).
        event_type: a ``msgspec.Struct`` type to decode events into (unknown fields are skipped).

    After :meth:`batches` is exhausted: ``metadata`` holds the document's top-level keys except
    ``traceEvents`` (empty for a bare event list), ``event_count`` the number of array elements and
    ``object_count`` how many of them were JSON objects.

    Raises (from :meth:`batches`):
        TraceError: the file cannot be read as a trace (see the module docstring).
    """

    def __init__(self, name: str, event_type: type) -> None:
        self.name = name
        self.metadata: dict[str, Any] = {}
        self.event_count = 0
        self.object_count = 0
        self._typed = msgspec.json.Decoder(list[event_type])  # type: ignore[valid-type]
        self._stdlib = json.JSONDecoder(parse_int=parse_int)
        self._lines_skipped = 0  # newlines of leading whitespace dropped before the document (for line numbers)

    # ---- the byte stream -------------------------------------------------------------------------

    def _blocks(self) -> Iterator[bytes]:
        """The file's bytes in blocks, gunzipped (all members) when it starts with the gzip magic; at most
        :data:`MAX_TRACE_BYTES` of them (TraceError beyond)."""
        total = 0
        for block in self._raw_blocks():
            total += len(block)
            if total > MAX_TRACE_BYTES:
                raise TraceError(f"{self.name}: more than {MAX_TRACE_BYTES / 2**30:g} GiB of JSON (inflated), beyond any "
                                 "trace profattn reads")
            yield block

    def _raw_blocks(self) -> Iterator[bytes]:
        name = self.name
        try:
            if not stat.S_ISREG(os.stat(name).st_mode):  # a FIFO would block, /dev/zero never end
                raise TraceError(f"{name}: not a regular file (a device, FIFO or socket); give a trace file")
            with open(name, "rb") as f:
                first = f.read(_BLOCK_BYTES)
                if first[:2] == _GZIP_MAGIC:
                    yield from self._gunzip(f, first)
                    return
                if name.endswith(".gz") and not first.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
                    # (a .gz name on plain JSON is read as what it is: the content decides, not the name)
                    raise TraceError(f"{name}: named .gz but is neither gzip-compressed nor JSON")
                block = first
                while block:
                    yield block
                    block = f.read(_BLOCK_BYTES)
        except FileNotFoundError:
            raise TraceError(f"{name}: no such trace file") from None
        except OSError as e:
            raise TraceError(f"{name}: cannot read trace file ({e.strerror or type(e).__name__})") from None

    def _gunzip(self, f: Any, first: bytes) -> Iterator[bytes]:
        name = self.name
        inflate = zlib.decompressobj(wbits=31)
        pending = first
        try:
            while True:
                if not pending:
                    pending = f.read(_BLOCK_BYTES)
                    if not pending:
                        break
                out = inflate.decompress(pending, BATCH_BYTES)
                pending = inflate.unconsumed_tail
                if out:
                    yield out
                if inflate.eof:  # end of one gzip member: another may follow, or zero padding
                    rest = inflate.unused_data + pending
                    if not rest:
                        rest = f.read(_BLOCK_BYTES)
                    while rest and not rest.strip(b"\x00"):
                        rest = f.read(_BLOCK_BYTES)
                    if not rest:
                        return
                    if rest.lstrip(b"\x00")[:2] != _GZIP_MAGIC:
                        raise TraceError(f"{name}: bad gzip data (trailing bytes after the gzip stream)")
                    inflate = zlib.decompressobj(wbits=31)
                    pending = rest.lstrip(b"\x00")
            tail = inflate.flush()
            if tail:
                yield tail
        except zlib.error as e:
            raise TraceError(f"{name}: bad gzip data ({_one_line(e)})") from None
        if not inflate.eof:
            raise TraceError(f"{name}: gzip stream is truncated")

    # ---- batches ---------------------------------------------------------------------------------

    def batches(self) -> Iterator[Batch]:
        """Decoded events, batch by batch (see the module docstring); then ``metadata`` is set."""
        blocks = self._blocks()
        buf = b""
        start = None
        skipped = 0  # bytes of leading whitespace (and BOM) dropped, not buffered
        for block in blocks:
            buf += block
            rest = buf.removeprefix(_BOM) if not skipped else buf
            if rest and not rest.strip(_WS):  # nothing but whitespace yet: keep at most the last line's
                cut = rest.rfind(b"\n") + 1
                if len(rest) - cut > _BLOCK_BYTES:  # a line of only blanks: its columns are not counted
                    cut = len(rest)
                if cut:
                    self._lines_skipped += rest.count(b"\n", 0, cut)
                    skipped += len(buf) - len(rest) + cut
                    buf = rest[cut:]
                continue
            start = self._array_start(buf)
            if start is not None or len(buf) > HEADER_LIMIT_BYTES:
                break
        else:
            start = self._array_start(buf)
        prefix_doc: dict[str, Any] | None = {}
        if start is not None and start[0]:  # an object: its keys before "traceEvents" must be top-level ones
            prefix_doc = self._prefix_keys(buf[: start[0]])
        if start is None or prefix_doc is None:
            yield from self._whole(buf, blocks)
            return
        yield from self._stream(buf[start[1] :], skipped + start[1], prefix_doc if start[0] else None, blocks)
        if self.event_count and not self.object_count:
            raise TraceError(f"{self.name}: not a Chrome trace (events are not JSON objects)")

    @staticmethod
    def _array_start(buf: bytes) -> tuple[int, int] | None:
        """(start of the ``"traceEvents"`` key or 0 for a bare list, offset after the array's ``[``), or
        None when not (yet) found or the document does not start like a trace."""
        i = 3 if buf.startswith(_BOM) else 0
        while i < len(buf) and buf[i] in _WS:
            i += 1
        head = buf[i : i + 1]
        if head == b"[":
            return (0, i + 1)
        if head != b"{":
            return None
        match = _EVENTS_KEY.search(buf, i)
        return (match.start(), match.end()) if match else None

    def _prefix_keys(self, prefix: bytes) -> dict[str, Any] | None:
        """The top-level keys before ``"traceEvents"``; None unless the key found is a top-level one
        (``prefix`` + ``"traceEvents": []}`` decodes to an object only when the prefix holds exactly one
        open brace, outside any string)."""
        try:
            document = self._stdlib.decode((prefix + b'"traceEvents": []}').decode("utf-8-sig"))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            return None
        if not isinstance(document, dict) or document.get("traceEvents") != []:
            return None
        document.pop("traceEvents")
        return document

    def _whole(self, buf: bytes, blocks: Iterator[bytes]) -> Iterator[Batch]:
        """Read the rest and decode the document as a whole (stdlib ``json``): non-traces and odd layouts."""
        pieces: list[bytes] = []
        size = 0
        for block in itertools.chain([buf], blocks):
            pieces.append(block)
            size += len(block)
            if size > MAX_EVENT_BYTES:
                raise TraceError(f"{self.name}: over {MAX_EVENT_BYTES // 2**20} MB of JSON without a 'traceEvents' "
                                 "array near the start to stream (not a trace?)")
        document = self._decode_document(b"".join(pieces))
        name = self.name
        if isinstance(document, dict):
            if "traceEvents" not in document:
                raise TraceError(f"{name}: not a Chrome trace (no 'traceEvents' key)")
            events = document.pop("traceEvents")
            if not isinstance(events, list):
                raise TraceError(f"{name}: 'traceEvents' is a {type(events).__name__}, not a list")
            self.metadata = document
        elif isinstance(document, list):
            events = document
        else:
            raise TraceError(f"{name}: not a Chrome trace (top level is a JSON {type(document).__name__})")
        self._count(events)
        if self.event_count and not self.object_count:
            raise TraceError(f"{name}: not a Chrome trace (events are not JSON objects)")
        yield Batch(events, typed=False)

    def _count(self, batch: Batch | list[Any]) -> None:
        events = batch.events if isinstance(batch, Batch) else batch
        self.event_count += len(events)
        if self.event_count > MAX_EVENTS:
            raise TraceError(f"{self.name}: more than {MAX_EVENTS:,} events in 'traceEvents', beyond any trace profattn "
                             "reads")
        if isinstance(batch, Batch) and batch.typed:
            self.object_count += len(events)
        else:
            self.object_count += sum(1 for e in events if isinstance(e, dict))

    def _decode_document(self, raw: bytes) -> Any:
        name = self.name
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise TraceError(f"{name}: not valid UTF-8 (byte offset {e.start})") from None
        try:
            return self._stdlib.decode(text)
        except json.JSONDecodeError as e:
            if not text.strip():
                raise TraceError(f"{name}: file is empty") from None
            line = e.lineno + self._lines_skipped
            if e.pos >= len(text.rstrip()):
                raise TraceError(f"{name}: JSON ends early (truncated?) at line {line}") from None
            raise TraceError(f"{name}: not JSON ({e.msg} at line {line} column {e.colno})") from None
        except RecursionError:
            raise TraceError(f"{name}: JSON nested too deeply") from None

    def _stream(self, buf: bytes, offset: int, prefix_doc: dict[str, Any] | None,
                blocks: Iterator[bytes]) -> Iterator[Batch]:
        """Batches of the array whose elements start at ``buf`` (``offset``: its position in the text)."""
        pieces, size, eof = [buf], len(buf), False

        def read_block() -> None:
            nonlocal size, eof
            block = next(blocks, None)
            if block is None:
                eof = True
            else:
                pieces.append(block)
                size += len(block)

        want = BATCH_BYTES
        while True:
            while size < want and not eof:
                read_block()
            buf = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            lead = len(buf) - len(buf.lstrip(_WS))
            if lead:  # whitespace between elements is dropped, never buffered
                buf, offset = buf[lead:], offset + lead
                pieces[:] = [buf]
                size = len(buf)
                if size < want and not eof:
                    continue
            if eof:
                consumed = yield from self._final(buf, offset)
                if len(buf) - consumed > MAX_SUFFIX_BYTES:
                    raise self._suffix_too_long()
                self._suffix_keys(prefix_doc, buf[consumed:], offset + consumed)
                return
            cut = self._boundary(buf)
            batch = self._decode_batch(buf[:cut]) if cut else None
            ended = False
            if batch is not None:
                consumed = buf.index(b"{", cut)
            else:
                batch, consumed, ended = self._exact(buf, offset, final=False)
            if batch.events:
                self._count(batch)
                yield batch
            if ended:  # the array's ']' is in the buffer (a last element longer than a batch): the metadata follows
                while not eof:
                    read_block()
                    if size - consumed > MAX_SUFFIX_BYTES:
                        raise self._suffix_too_long()
                rest = b"".join(pieces)
                self._suffix_keys(prefix_doc, rest[consumed:], offset + consumed)
                return
            offset += consumed
            buf = buf[consumed:]
            pieces[:] = [buf]
            size = len(buf)
            # An element longer than the buffer: read twice as much before trying again, so an element of
            # n bytes is decoded O(log n) times, not once per block (which took quadratic time).
            want = BATCH_BYTES if consumed else min(max(BATCH_BYTES, 2 * size), MAX_EVENT_BYTES + 1)
            if size > MAX_EVENT_BYTES:
                raise TraceError(f"{self.name}: an element of 'traceEvents' longer than {MAX_EVENT_BYTES // 2**20} MB "
                                 f"at byte offset {offset} (not a trace?)")

    def _suffix_too_long(self) -> TraceError:
        return TraceError(f"{self.name}: more than {MAX_SUFFIX_BYTES // 2**20} MB after the 'traceEvents' array (its "
                          "metadata keys are small; not a trace?)")

    @staticmethod
    def _boundary(buf: bytes) -> int:
        """Position just after the ``}`` of the last candidate ``},{`` boundary in ``buf``; 0 if none."""
        end = len(buf)
        start = max(0, end - _TAIL_BYTES)
        while True:  # windows further and further back, each scanned once (a boundary across two windows is
            last = None  # found in the later one: windows overlap by _TAIL_BYTES)
            for last in _BOUNDARY.finditer(buf, start, end):
                pass
            if last is not None:
                return last.start() + 1
            if start == 0:
                return 0
            end = start + _TAIL_BYTES
            start = max(0, start - 16 * _TAIL_BYTES)

    def _decode_batch(self, elements: bytes) -> Batch | None:
        """``elements`` (JSON values separated by commas) decoded; None when they are not exactly that."""
        data = b"[" + elements + b"]"
        try:
            return Batch(self._typed.decode(data), typed=True)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            pass
        try:
            return Batch(self._stdlib.decode(data.decode("utf-8")), typed=False)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            return None

    def _final(self, buf: bytes, offset: int) -> Iterator[Batch]:
        """The last elements, up to the array's closing ``]``; returns the bytes consumed (through it)."""
        stripped = buf.rstrip(_WS)
        end = len(stripped)
        for _ in range(4):  # the closing bracket is the last ']' unless the metadata after it holds one
            end = stripped.rfind(b"]", 0, end)
            if end < 0:
                break
            body = stripped[:end]
            if not body.strip(_WS):
                if self.event_count:
                    break  # "[..., ]": let the exact reader report it
                return end + 1
            batch = self._decode_batch(body)
            if batch is not None:
                if batch.events:
                    self._count(batch)
                    yield batch
                return end + 1
        batch, consumed, _ = self._exact(buf, offset, final=True)
        if batch.events:
            self._count(batch)
            yield batch
        return consumed

    def _exact(self, buf: bytes, offset: int, *, final: bool) -> tuple[Batch, int, bool]:
        """Elements decoded one by one from the start of ``buf`` (an element start, or the array's end):
        (the complete ones, bytes consumed, whether the array's ``]`` was reached).

        When not ``final``, an element that may continue in the next block ends the batch before it;
        TraceError for an element that is not JSON, and, when ``final``, for an unfinished array."""
        name = self.name
        usable = len(buf)
        if not final:  # stop at an ASCII byte so no UTF-8 sequence is cut
            while usable and buf[usable - 1] >= 0x80:
                usable -= 1
        try:
            text = buf[:usable].decode("utf-8")
        except UnicodeDecodeError as e:
            raise TraceError(f"{name}: not valid UTF-8 (byte offset {offset + e.start})") from None
        events: list[Any] = []
        complete, done, ended = 0, 0, False
        idx = _WS_TEXT.match(text, 0).end()
        if idx < len(text) and text[idx] == "]" and not self.event_count:
            return Batch([], typed=False), len(text[: idx + 1].encode("utf-8")), True
        while idx < len(text):
            try:
                value, idx = self._stdlib.raw_decode(text, idx)
            except json.JSONDecodeError as e:
                incomplete = e.pos >= len(text.rstrip()) - 1 or e.msg.startswith("Unterminated string")
                if not final and (incomplete or e.pos >= len(text) - 2**20):
                    break
                raise self._json_error(text, e, offset, incomplete) from None
            except RecursionError:
                raise TraceError(f"{name}: JSON nested too deeply") from None
            events.append(value)
            idx = _WS_TEXT.match(text, idx).end()
            if idx >= len(text):
                break
            if text[idx] == ",":
                idx = _WS_TEXT.match(text, idx + 1).end()
                complete, done = len(events), idx
                continue
            if text[idx] == "]":
                complete, done, ended = len(events), idx + 1, True
                break
            where = offset + len(text[:idx].encode("utf-8"))
            raise TraceError(f"{name}: not JSON (expected ',' or ']' after an event, at byte offset {where})")
        if final and not ended:
            raise TraceError(f"{name}: JSON ends early (truncated?) inside 'traceEvents'")
        return Batch(events[:complete], typed=False), len(text[:done].encode("utf-8")), ended

    def _json_error(self, text: str, e: json.JSONDecodeError, offset: int, incomplete: bool) -> TraceError:
        where = offset + len(text[: e.pos].encode("utf-8"))
        if incomplete:
            return TraceError(f"{self.name}: JSON ends early (truncated?) at byte offset {where}")
        return TraceError(f"{self.name}: not JSON ({e.msg} at byte offset {where})")

    def _suffix_keys(self, prefix_doc: dict[str, Any] | None, suffix: bytes, offset: int) -> None:
        """Metadata: the keys before the array and those after it (``suffix``: the bytes after its ``]``)."""
        name = self.name
        if prefix_doc is None:  # a bare event list: only whitespace may follow
            if suffix.strip(_WS):
                raise TraceError(f"{name}: not JSON (extra data after the event list, at byte offset {offset})")
            return
        try:
            text = '{"traceEvents": []' + suffix.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TraceError(f"{name}: not valid UTF-8 (byte offset {offset + e.start})") from None
        try:
            document = self._stdlib.decode(text)
        except json.JSONDecodeError as e:
            if e.pos >= len(text.rstrip()):
                raise TraceError(f"{name}: JSON ends early (truncated?) after 'traceEvents'") from None
            raise TraceError(f"{name}: not JSON ({e.msg}, after 'traceEvents' at byte offset "
                             f"{offset + max(0, e.pos - 18)})") from None
        except RecursionError:
            raise TraceError(f"{name}: JSON nested too deeply") from None
        if document.get("traceEvents") != []:
            raise TraceError(f"{name}: 'traceEvents' appears twice")
        document.pop("traceEvents")
        self.metadata = {**prefix_doc, **document}
