"""issue 33, item 15: a step annotation claiming more requests than a workload's batch bound is refused on its parsed
counts, before any per-request tuple is built (1e9 requests were expanded first: > 4 GiB)."""

from __future__ import annotations

import time

from profattn.analysis.calls.call_records import PhaseSums
from profattn.analysis.calls.steps import parse_step_annotation, uniform_seqs
from profattn.workload.contract import FIELD_LIMITS


def test_requests_beyond_the_batch_bound_are_never_expanded():
    n = FIELD_LIMITS["batch"] + 1
    assert uniform_seqs(PhaseSums(n, n, 2 * n, n, 2 * n)) is None
    t0 = time.perf_counter()
    huge = 10**9
    assert uniform_seqs(PhaseSums(huge, huge, 2 * huge, huge, 2 * huge)) is None
    assert time.perf_counter() - t0 < 1.0
    bound = FIELD_LIMITS["batch"]
    assert uniform_seqs(PhaseSums(bound, bound, 2 * bound, bound, 2 * bound)) is not None


def test_a_huge_vllm_annotation_parses_without_expanding():
    name = "execute_1000000000_context_0(sq0sk0sqsq0sqsk0)_generation_1000000000(sq1000000000sk2000000000sqsq1000000000sqsk2000000000)"
    step = parse_step_annotation(name)
    assert step is None or not isinstance(step, str) and uniform_seqs(step.generation) is None  # type: ignore[union-attr]
