"""A cell of an appending call: the append runs before the attention, is timed apart, and the cache is checked."""

from __future__ import annotations

import torch

from profattn.backends import get_backend
from profattn.backends.base import Prepared
from profattn.harness.cell import run_cell
from profattn.harness.inputs import make_inputs, reference
from profattn.results import CellStatus
from profattn.workload import parse_workload_spec

W = parse_workload_spec("mix=1x(q6,kv20)+3x(q1,kv9),hq=4,hkv=2,d=8,page=4,append=true,dtype=fp32")


class _Wrapped:
    """torch-paged-reference with another append (``bind_append``)."""

    name = "torch-paged-reference"
    varlen = True

    def __init__(self, bind_append):
        self._inner = get_backend("torch-paged-reference")
        self.family = self._inner.family
        self.description = ""
        self._bind_append = bind_append

    def unsupported_reason(self, workload, device):
        return self._inner.unsupported_reason(workload, device)

    def prepare(self, workload, device):
        p = self._inner.prepare(workload, device)
        return Prepared(forward=p.forward, bind=p.bind, notes=p.notes, bind_append=self._bind_append)


def test_appending_cell_times_the_append_apart_and_checks_the_cache(cpu):
    inputs = make_inputs(W, cpu, seed=2)
    ref = reference(W, inputs)
    cell, profiled = run_cell(W, get_backend("torch-paged-reference"), inputs, ref, cpu)
    assert cell.status == CellStatus.OK, cell.reason
    assert cell.correctness.cache_ok is True and cell.append_timing is not None and cell.timing is not None
    assert profiled is not None and cell.executed_pairs is None
    # a second cell of the same inputs starts again from the cached prefixes (and passes)
    cell, _ = run_cell(W, get_backend("eager"), inputs, ref, cpu)
    assert cell.status == CellStatus.OK and cell.correctness.cache_ok is True
    assert cell.executed_pairs == 4 * 6 * 20  # padded: B · Lq_max · Lk_max


def test_a_missing_append_fails_the_attention_and_the_cache(cpu):
    inputs = make_inputs(W, cpu, seed=2)
    ref = reference(W, inputs)
    cell, _ = run_cell(W, _Wrapped(lambda inputs: (lambda: None)), inputs, ref, cpu)
    assert cell.status == CellStatus.INCORRECT and cell.correctness.cache_ok is False
    assert "out rel err" in cell.reason  # the attention read the fill where the new tokens belong
    assert "KV cache after the append: sequence 0: 6 of 20 tokens differ (first at position 14)" in cell.reason


def test_an_append_into_the_wrong_slots_is_caught_by_the_cache_check(cpu):
    inputs = make_inputs(W, cpu, seed=2)
    ref = reference(W, inputs)

    def bind_append(inputs):
        from profattn.workload.paged import reshape_and_cache

        c, n = inputs.paged, inputs.append
        return lambda: reshape_and_cache(n.k_new, n.v_new, c.k_pages, c.v_pages, n.slot_mapping.roll(1))  # every token one slot over

    cell, _ = run_cell(W, _Wrapped(bind_append), inputs, ref, cpu)
    assert cell.status == CellStatus.INCORRECT and cell.correctness.cache_ok is False
    assert "KV cache after the append" in cell.reason
