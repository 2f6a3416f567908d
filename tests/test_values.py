"""profattn.values: the bounds every number read must meet, and text made safe for UTF-8 output."""

from __future__ import annotations

from profattn.values import MAX_INT, bounded_int, finite_float, number_problem, safe_text, short_number


def test_number_problems_name_what_is_wrong():
    assert number_problem(3) is None and number_problem(2.5) is None and number_problem(MAX_INT) is None
    assert number_problem(MAX_INT + 1) == "an integer of 19 digits, beyond a 64-bit integer"
    assert number_problem(10**400) == "an integer of 401 digits, beyond a 64-bit integer"
    assert number_problem(float("nan")) == "nan, not a finite number"
    assert number_problem(float("-inf")) == "-inf, not a finite number"
    assert number_problem("12") == "'12', not a number" and number_problem(True) == "True, not a number"
    assert number_problem(None) == "None, not a number"
    assert number_problem(2.5, integer=True) == "2.5, not an integer" and number_problem(3.0, integer=True) is None
    assert number_problem(1e308, limit=1e12) == "1e+308, beyond the limit of 1e+12"


def test_bounded_and_finite_values():
    assert bounded_int(3.0) == 3 and bounded_int(2**63) is None and bounded_int(1.5) is None and bounded_int("3") is None
    assert finite_float(2) == 2.0 and finite_float(float("inf")) is None and finite_float(1e13, limit=1e12) is None


def test_short_number_never_prints_a_huge_integer():
    assert short_number(10**100_000) == "an integer of 100,001 digits"  # str() of it would raise (4,300-digit limit)
    assert len(short_number("x" * 1000)) == 40


def test_safe_text_replaces_only_unpaired_surrogates():
    assert safe_text("plain") == ("plain", 0)
    assert safe_text("😀 é") == ("😀 é", 0)
    assert safe_text("a\ud800b\udfff") == ("a\ufffdb\ufffd", 2)
    fixed, n = safe_text("\ud83d")  # the first half of 😀 alone
    assert n == 1 and fixed.encode("utf-8") == "\ufffd".encode("utf-8")
