"""Tests for profattn.trace.windows: the interval index, on hand-made intervals."""

from __future__ import annotations

import numpy as np
import pytest

from profattn.trace.windows import IntervalIndex, group_keys

T1, T2, P2 = ("p", 1), ("p", 2), ("q", 1)


def nested() -> IntervalIndex:
    # row 0: [0, 10] outer; row 1: [2, 5] inside it; row 2: [3, 4] inside row 1; row 3: [12, 20] next top;
    # row 4: [12, 14] same start as row 3, shorter; row 5: [0, 10] on another thread of the same process.
    return IntervalIndex([0, 2, 3, 12, 12, 0], [10, 5, 4, 20, 14, 10], [T1, T1, T1, T1, T1, T2])


def test_innermost_nesting_and_climb() -> None:
    idx = nested()
    got = idx.innermost([T1] * 8, [-1, 0, 2.5, 3.5, 4.5, 7, 11, 13])
    # 7 is after row 2 (latest start <= 7) ended: climbs row 2 -> row 1 (ended) -> row 0.
    assert got.tolist() == [-1, 0, 1, 2, 1, 0, -1, 4]


def test_innermost_boundaries_are_closed() -> None:
    idx = nested()
    assert idx.innermost([T1] * 5, [10, 5, 4, 3, 20]).tolist() == [0, 1, 2, 2, 3]
    assert idx.innermost([T1], [14]).tolist() == [4]  # tie of start: the shorter one while it lasts
    assert idx.innermost([T1], [14.5]).tolist() == [3]


def test_innermost_groups_threads_and_processes() -> None:
    idx = nested()
    assert idx.innermost([T2, P2, ("p", None), T1], [3, 3, 3, np.nan]).tolist() == [5, -1, -1, -1]


def test_outermost_and_top_level() -> None:
    idx = nested()
    assert idx.outermost([T1] * 6, [3.5, 10, 11, 12, 20, 21]).tolist() == [0, 0, -1, 3, 3, -1]
    assert idx.outermost([T2], [0]).tolist() == [5]
    assert idx.top_level().tolist() == [0, 0, 0, 3, 3, 5]


def test_top_level_follows_the_sweep_for_improper_nesting() -> None:
    # [0, 30] then [10, 50] (starts inside the first: belongs to it) then [40, 45]: starts after the
    # top-level [0, 30] ended, so it is top-level itself even though [10, 50] holds it.
    idx = IntervalIndex([0, 10, 40], [30, 50, 45], ["a", "a", "a"])
    assert idx.top_level().tolist() == [0, 0, 2]
    assert idx.innermost(["a"], [42]).tolist() == [2]
    assert idx.outermost(["a", "a"], [35, 42]).tolist() == [-1, 2]


def test_points_inside_counts_every_enclosing_interval() -> None:
    idx = nested()
    counts, sums = idx.points_inside([T1, T1, T1, T2, P2], [0, 3, 13, 3, 3], [1.0, 2.0, 4.0, 8.0, 16.0])
    assert counts.tolist() == [2, 1, 1, 1, 1, 1]
    assert sums.tolist() == [3.0, 2.0, 2.0, 4.0, 4.0, 8.0]


def test_unusable_rows_and_empty() -> None:
    idx = IntervalIndex([0, np.nan, 5], [10, 3, 4], ["a", "a", "a"])  # NaN start; end < start
    assert idx.innermost(["a", "a"], [2, 4.5]).tolist() == [0, 0]
    assert idx.top_level().tolist() == [0, -1, -1]
    empty = IntervalIndex([], [], [])
    assert empty.innermost(["a"], [1.0]).tolist() == [-1]
    assert empty.outermost([], []).tolist() == []
    assert empty.points_inside(["a"], [1.0])[0].tolist() == []
    with pytest.raises(ValueError):
        IntervalIndex([0], [1, 2], ["a"])


def test_keys_compare_by_value_and_group_keys() -> None:
    idx = IntervalIndex([0, 0], [5, 5], group_keys([7, "7"], [1, 1]))
    assert idx.innermost(group_keys(["7", 7, 8], [1, 1, 1]), [1, 1, 1]).tolist() == [1, 0, -1]
    assert group_keys([1, 2]) == [1, 2]


def test_missing_key_rows_form_their_own_groups_for_top_level() -> None:
    idx = IntervalIndex([0, 1, 0], [5, 2, 5], [(None, 1), (None, 1), (1, 1)])
    assert idx.top_level().tolist() == [0, 0, 2]
    assert idx.innermost([(None, 1)], [1.5]).tolist() == [-1]


def test_a_point_before_every_interval_of_its_group_is_outside() -> None:
    # The group of (1, 2) starts at position 2 of the sorted intervals: a point before it must not fall
    # back to the previous group's intervals.
    idx = IntervalIndex([0, 1, 2], [0, 1, 2], [(1, 1), (1, 1), (1, 2)])
    assert idx.innermost([(1, 2), (1, 2)], [0.0, 2.0]).tolist() == [-1, 2]
    assert idx.outermost([(1, 2), (1, 2)], [0.0, 2.0]).tolist() == [-1, 2]
