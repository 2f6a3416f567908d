"""The --workload text (profattn/workload/spec.py) and the shape checks it reaches: inputs a fresh user found."""

from __future__ import annotations

import pytest

from profattn.errors import WorkloadError
from profattn.workload import parse_workload_spec


@pytest.mark.parametrize("spec,message", [
    ("phase=prefill,b=2,q=32,kv=16,hq=8,hkv=2,d=16,page=16,append=true", "q_len must be <= kv_len"),
    ("phase=decode,b=2,q=4,kv=2,hq=8,hkv=2,d=16,page=16,append=true", "q_len must be <= kv_len"),
    ("phase=prefill,b=2,q=32,kv=16,hq=8,hkv=2,d=16", "first 16 query rows would see no key"),
    ("phase=decode,b=1,q=1,kv=16,hq=8,hkv=2,d=16,page=16,dist=ragged,seed=99999999999999999999", "63-bit seed"),
    ("phase=decode,b=1,q=1,kv=16,hq=8,hkv=2,d=16,page=16,dist=ragged,seed=-5", "63-bit seed"),
    ("phase=prefill,b=2,q=1_0,kv=16,hq=8,hkv=2,d=16", "ASCII digits"),
    ("phase=prefill,b=2,q=+16,kv=16,hq=8,hkv=2,d=16", "ASCII digits"),
    ("phase=prefill,b=2,q=\uff11\uff16,kv=16,hq=8,hkv=2,d=16", "ASCII digits"),
    ("mix=(q\uff11,kv1),hq=8,hkv=2,d=16", "is not [N x](qINT,kvINT)"),
    ("mix=(q\u0661,kv1),hq=8,hkv=2,d=16", "is not [N x](qINT,kvINT)"),
    ("phase=prefill,b=1,q=32,kv=32,hq=4,hkv=2,d=16,w=99999999999999999999", "window 99,999,999,999,999,999,999 is beyond"),
    ("phase=prefill,b=1,q=32,kv=32,hq=4,hkv=2,d=16,w=300000000", "window 300,000,000 is beyond"),
])
def test_inputs_a_fresh_user_found_are_refused(spec, message):
    """Each used to run (q > kv: a traceback in the append, NaN rows; an 80-bit seed: OverflowError in torch;
    "1_0", "+16", full-width and Arabic-Indic digits: silently read as numbers by int())."""
    with pytest.raises(WorkloadError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        parse_workload_spec(spec)
    assert parse_workload_spec("phase=prefill,b=2,q=16,kv=32,hq=8,hkv=2,d=16,mask=none").q_len == 16
    assert parse_workload_spec("phase=prefill,b=2,q=32,kv=16,hq=8,hkv=2,d=16,mask=none").q_len == 32  # cross-attention
