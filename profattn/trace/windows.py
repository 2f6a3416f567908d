"""One interval index for every "which window holds this timestamp" question of the trace layer and the
analysis. Torch-free; numpy only.

An :class:`IntervalIndex` holds closed intervals ``[start, end]`` (µs) tagged with a *group key* — one
value or a tuple of values per interval, e.g. ``(pid, tid)`` for "same thread" or ``pid`` for "same
process, any thread". Queries never cross groups, and a query whose key has a missing part (None, NaN,
``<NA>``) or whose time is NaN matches nothing. Keys compare by value as Python does (``7`` and ``"7"``
differ). Every query is vectorised over its points: the only Python loops run once per group (threads,
processes) or, building the nesting, once per interval.

The rules, one per question (all intervals closed, so a point on a boundary is inside):

- :meth:`IntervalIndex.innermost`: *the innermost interval enclosing t in t's group* — the
  latest-starting interval containing ``t`` (ties of start: the shorter one, then the later row). Used
  for "which ``record_function`` range launched this kernel / holds this op".
- :meth:`IntervalIndex.outermost` and :meth:`IntervalIndex.top_level`: *the top-level interval
  enclosing t in t's group*. Top-level intervals are found by a sweep in start order (ties: the longer
  first): an interval is top-level when it starts after the end of the previous top-level one, and
  otherwise belongs to that one (Kineto's CPU ops on one thread nest properly, where this is the usual
  "not nested in anything"). Used for "which top-level CPU op gets this kernel's time" and "which
  outermost attention op does this nested attention op belong to".
- :meth:`IntervalIndex.points_inside`: *the points of t's group that lie inside each interval*, at any
  nesting depth (counts and weighted sums, without choosing among overlapping intervals). Used for
  "kernels launched inside a ``ProfilerStep#N`` window of the same process".

Example::

    idx = IntervalIndex([0.0, 2.0, 10.0], [8.0, 4.0, 12.0], keys=[("p", 1), ("p", 1), ("p", 1)])
    idx.innermost([("p", 1), ("p", 1), ("p", 2)], [3.0, 8.0, 3.0])   # array([1, 0, -1])
    idx.outermost([("p", 1)], [3.0])                                   # array([0])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["IntervalIndex", "group_keys"]


def group_keys(*columns: Sequence[Any] | np.ndarray | pd.Series) -> list[Any]:
    """Per row, the tuple of the ``columns``' values (one column: the value itself): a key list for
    :class:`IntervalIndex`. Columns must have equal lengths."""
    arrays = [np.asarray(c, dtype=object) if not isinstance(c, pd.Series) else c.to_numpy(dtype=object) for c in columns]
    if len(arrays) == 1:
        return list(arrays[0])
    return list(zip(*arrays))


def _missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    if isinstance(value, float):
        return value != value
    if isinstance(value, tuple):
        return any(_missing(v) for v in value)
    return False


class IntervalIndex:
    """Closed intervals ``[start, end]`` grouped by key, for vectorised "which interval holds t" queries.

    Args:
        start, end: 1-D float arrays of equal length (µs); rows with a NaN start or end, or ``end <
            start``, are kept out of every answer.
        keys: one hashable group key per interval (see :func:`group_keys`); rows with a missing key part
            are kept out of every query answer but still form their own groups for :meth:`top_level`.

    Every answer is a row number into the arrays as given (``-1``: no interval). Raises ``ValueError``
    when the lengths differ.
    """

    def __init__(self, start: Sequence[float] | np.ndarray, end: Sequence[float] | np.ndarray, keys: Sequence[Any]) -> None:
        self._start = np.asarray(start, dtype=np.float64)
        self._end = np.asarray(end, dtype=np.float64)
        keys = list(keys)
        if not (len(self._start) == len(self._end) == len(keys)):
            raise ValueError(f"start, end and keys differ in length: {len(self._start)}, {len(self._end)}, {len(keys)}")
        n = len(keys)
        # Group codes; missing keys get their own codes too (for top_level), but are flagged.
        codes, uniques = pd.factorize(pd.Series(keys if n else [], dtype=object), use_na_sentinel=False)
        self._uniques = pd.Index(uniques, dtype=object, tupleize_cols=False)
        self._usable_group = np.array([not _missing(u) for u in uniques], dtype=bool)
        ok = ~np.isnan(self._start) & ~np.isnan(self._end) & (self._end >= self._start)
        rows = np.flatnonzero(ok)
        codes = np.asarray(codes, dtype=np.int64)
        # Sort by (group, start, longer first, row): the order every rule reads.
        order = np.lexsort((rows, -(self._end[rows] - self._start[rows]), self._start[rows], codes[rows]))
        self._rows = rows[order]
        self._codes = codes[self._rows]
        bounds = np.searchsorted(self._codes, np.arange(len(uniques) + 1), side="left")
        self._slices = {g: (int(bounds[g]), int(bounds[g + 1])) for g in range(len(uniques)) if bounds[g] < bounds[g + 1]}
        self._parents: np.ndarray | None = None
        self._tops: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self._start)

    # ---- queries ---------------------------------------------------------------------------------

    def innermost(self, keys: Sequence[Any], t: Sequence[float] | np.ndarray) -> np.ndarray:
        """Per point, the row of the innermost interval of its group that holds it (-1: none).

        Innermost = latest-starting with ``start <= t <= end``; ties of start go to the shorter one.
        Cost: O((intervals + points) log intervals) plus one step per nesting level climbed.
        """
        parents = self._parent_chain()
        start, end = self._start[self._rows], self._end[self._rows]

        def answer(lo: int, hi: int, ts: np.ndarray) -> np.ndarray:
            local = np.searchsorted(start[lo:hi], ts, side="right") - 1 + lo
            local[local < lo] = -1
            pending = local >= 0
            pending[pending] = end[local[pending]] < ts[pending]
            while pending.any():  # climb to the parent until one holds t (at most the nesting depth)
                local[pending] = parents[local[pending]]
                pending &= local >= 0
                pending[pending] = end[local[pending]] < ts[pending]
            return local

        return self._per_group(keys, t, answer)

    def outermost(self, keys: Sequence[Any], t: Sequence[float] | np.ndarray) -> np.ndarray:
        """Per point, the row of the top-level interval of its group that holds it (-1: none); see the
        module docstring for what top-level means."""
        tops = self._top_positions()
        start, end = self._start[self._rows], self._end[self._rows]
        top_start, top_end = start[tops], end[tops]
        top_lo = np.searchsorted(tops, [lo for lo, _ in self._slices.values()], side="left")
        first_top = dict(zip(self._slices, top_lo))

        def answer(lo: int, hi: int, ts: np.ndarray) -> np.ndarray:
            a = int(first_top[int(self._codes[lo])])
            b = int(np.searchsorted(tops, hi, side="left"))
            j = np.searchsorted(top_start[a:b], ts, side="right") - 1 + a
            hit = (j >= a) & (ts <= top_end[np.maximum(j, 0)])
            return np.where(hit, tops[np.maximum(j, 0)], -1)

        return self._per_group(keys, t, answer)

    def top_level(self) -> np.ndarray:
        """Per interval (rows as given), the row of the top-level interval it belongs to (itself when it
        is top-level; -1 for unusable rows). Rows with a missing key are grouped among themselves."""
        tops = self._top_positions()
        owner = np.full(len(self._start), -1, dtype=np.int64)
        if len(self._rows):
            at = np.searchsorted(tops, np.arange(len(self._rows)), side="right") - 1
            owner[self._rows] = self._rows[tops[at]]
        return owner

    def points_inside(
        self, keys: Sequence[Any], t: Sequence[float] | np.ndarray, weights: Sequence[float] | np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per interval (rows as given): how many points of its group lie in ``[start, end]``, and the sum
        of their ``weights`` (0.0 without), added in the points' given order (so the sum equals
        ``weights[inside].sum()`` to the last bit). A point counts in every interval that holds it.
        Cost: O(points log points) to sort, plus one ``numpy`` sum per interval."""
        t = np.asarray(t, dtype=np.float64)
        w = None if weights is None else np.asarray(weights, dtype=np.float64)
        counts = np.zeros(len(self._start), dtype=np.int64)
        sums = np.zeros(len(self._start), dtype=np.float64)
        codes = self._query_codes(keys, t)
        for g, positions in pd.Series(codes).groupby(codes).indices.items():
            if g < 0 or g not in self._slices:
                continue
            lo, hi = self._slices[g]
            positions = positions[np.argsort(t[positions], kind="stable")]
            ts = t[positions]
            rows = self._rows[lo:hi]
            a = np.searchsorted(ts, self._start[rows], side="left")
            b = np.searchsorted(ts, self._end[rows], side="right")
            counts[rows] = b - a
            if w is not None:
                for row, i, j in zip(rows, a, b):
                    sums[row] = w[np.sort(positions[i:j])].sum()
        return counts, sums

    # ---- internals -------------------------------------------------------------------------------

    def _query_codes(self, keys: Sequence[Any], t: np.ndarray) -> np.ndarray:
        """Group code per query point; -1 for unknown or missing keys and NaN times."""
        keys = list(keys)
        if len(keys) != len(t):
            raise ValueError(f"keys and t differ in length: {len(keys)}, {len(t)}")
        if not len(keys) or not len(self._uniques):
            return np.full(len(keys), -1, dtype=np.int64)
        qcodes, quniques = pd.factorize(pd.Series(keys, dtype=object), use_na_sentinel=False)
        mapped = self._uniques.get_indexer(pd.Index(quniques, dtype=object, tupleize_cols=False))
        mapped = np.where((mapped >= 0) & self._usable_group[np.maximum(mapped, 0)], mapped, -1)
        codes = mapped[qcodes] if len(qcodes) else np.empty(0, dtype=np.int64)
        return np.where(np.isnan(t), -1, codes).astype(np.int64)

    def _per_group(self, keys: Sequence[Any], t: Sequence[float] | np.ndarray, answer: Any) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        out = np.full(len(t), -1, dtype=np.int64)
        codes = self._query_codes(keys, t)
        for g, positions in pd.Series(codes).groupby(codes).indices.items():
            if g < 0 or g not in self._slices:
                continue
            lo, hi = self._slices[g]
            local = answer(lo, hi, t[positions])
            found = local >= 0
            out[positions[found]] = self._rows[local[found]]
        return out

    def _parent_chain(self) -> np.ndarray:
        """For the sorted intervals, each one's parent position: the latest-starting earlier interval of
        its group that contains its start (-1: none). A stack sweep, linear in the intervals."""
        if self._parents is None:
            start, end, codes = self._start[self._rows], self._end[self._rows], self._codes
            parent = np.full(len(start), -1, dtype=np.int64)
            stack: list[int] = []
            group = -1
            for i in range(len(start)):
                if codes[i] != group:
                    stack, group = [], codes[i]
                while stack and end[stack[-1]] < start[i]:
                    stack.pop()
                if stack:
                    parent[i] = stack[-1]
                stack.append(i)
            self._parents = parent
        return self._parents

    def _top_positions(self) -> np.ndarray:
        """Sorted positions of the top-level intervals: per group, the first interval, then each next
        one that starts after the end of the previous top-level one (one step per top-level interval)."""
        if self._tops is None:
            start, end = self._start[self._rows], self._end[self._rows]
            tops: list[int] = []
            for lo, hi in self._slices.values():
                s = start[lo:hi]
                nxt = np.searchsorted(s, end[lo:hi], side="right")  # first later start past each end
                i = 0
                while i < hi - lo:
                    tops.append(lo + i)
                    i = int(nxt[i])
            self._tops = np.array(sorted(tops), dtype=np.int64)
        return self._tops
