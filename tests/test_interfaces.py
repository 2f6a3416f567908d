"""The interfaces backends declare and what a caller of one changes to adopt another."""

from __future__ import annotations

import pytest

from profattn.backends import get_backend
from profattn.interfaces import ADOPTIONS, Adoption, Change, Interface, Layout, caller_interface, changes, layout_read


def test_every_builtin_backend_declares_the_table_entry():
    for name, a in ADOPTIONS.items():
        assert get_backend(name).adoption is a  # one declaration: the backend takes it from the table
        assert a.how, name


@pytest.mark.parametrize("caller, backend, expected", [
    (Interface.SDPA, "sdpa-cudnn", ()),                                   # a drop-in: only the sdpa_kernel line
    (Interface.SDPA, "sdpa-math", ()),
    (Interface.SDPA, "triton-paged-decode", (Change.PAGED_CACHE,)),
    (Interface.SDPA, "flashinfer-decode-tc", (Change.PAGED_CACHE, Change.PLAN_RUN)),
    (Interface.SDPA, "flashinfer-prefill-ragged", (Change.PACK, Change.PLAN_RUN)),
    (Interface.SDPA, "sdpa-nested", (Change.NESTED,)),
    (Interface.SDPA, "flex", (Change.BLOCK_MASK,)),
    (Interface.SDPA, "eager", (Change.API,)),
    (Interface.PAGED, "triton-paged-decode", ()),
    (Interface.PAGED, "torch-paged-reference", ()),
    (Interface.PAGED, "sdpa-cudnn", (Change.GATHER,)),                    # a dense kernel on a paged cache: a gather
    (Interface.PAGED, "flashinfer-decode", (Change.PLAN_RUN,)),
    (Interface.PAGED, "flex-paged-decode", (Change.BLOCK_MASK,)),
    (Interface.PACKED_VARLEN, "flashinfer-prefill-ragged", ()),
    (Interface.PACKED_VARLEN, "sdpa-flash", (Change.API,)),
])
def test_changes(caller, backend, expected):
    assert changes(caller, ADOPTIONS[backend]) == expected


def test_unknown_adoption_and_layouts():
    assert changes(Interface.SDPA, None) is None
    assert layout_read(ADOPTIONS["sdpa-flash"], "paged") is Layout.DENSE  # the contiguous copy
    assert layout_read(None, "paged") is Layout.PAGED and layout_read(None, "dense", packed=True) is Layout.PACKED
    assert caller_interface("paged") is Interface.PAGED and caller_interface("dense") is Interface.SDPA
    assert caller_interface("dense", packed=True) is Interface.PACKED_VARLEN


def test_round_trip_and_refusals():
    a = ADOPTIONS["flashinfer-decode-tc"]
    assert Adoption.from_dict(a.to_dict()) == a and a.plan_run
    with pytest.raises(ValueError):
        Adoption.from_dict({"interface": "cuda", "reads": "dense"})
    with pytest.raises(ValueError, match="list of strings"):
        Adoption.from_dict({"interface": "sdpa", "reads": "dense", "how": "one string"})
