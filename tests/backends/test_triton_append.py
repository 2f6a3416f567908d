"""Our Triton cache append (TRITON_INTERPRET=1 on CPU) against the torch ``reshape_and_cache``, bit for bit:
the cache read back through the block table (a partial last page included), unused pool slots still NaN."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

from profattn.backends.base import AttentionInputs  # noqa: E402
from profattn.backends.triton_append import append_blocks, bind_paged_append, paged_append  # noqa: E402
from profattn.workload.paged import CacheAppend, PagedKVCache, reshape_and_cache  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _bits(x: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as integers (NaN == NaN, -0.0 != 0.0): a bit-for-bit comparison."""
    return x.view({2: torch.int16, 4: torch.int32}[x.element_size()])


def _step(dtype, *, hkv=2, d=8, page=16, lens=(40, 17, 5), q_lens=(7, 2, 5), seed=3):
    """Sequences of ``lens`` tokens (pages of ``page``) whose last ``q_lens`` tokens are the step's new ones:
    the pool (shuffled pages, two spare) holds each cached prefix only; the new tokens' slots hold NaN.
    Defaults: 40, 17 and 5 tokens with 33, 15 and 0 cached — sequence 1's new tokens straddle a page boundary
    (positions 15 and 16, its second page holding one token), sequence 2 has no cached prefix."""
    g = torch.Generator().manual_seed(seed)
    n = max(lens)
    k = torch.randn(len(lens), hkv, n, d, generator=g).to(dtype)
    v = torch.randn(len(lens), hkv, n, d, generator=g).to(dtype)
    c = PagedKVCache.from_dense(k.to(DEVICE), v.to(DEVICE), page_size=page, seq_lens=list(lens), extra_pages=2,
                                generator=g)
    slots = c.slot_mapping(list(q_lens))
    new_k = torch.cat([k[b, :, m - q:m].transpose(0, 1) for b, (m, q) in enumerate(zip(lens, q_lens))])
    new_v = torch.cat([v[b, :, m - q:m].transpose(0, 1) for b, (m, q) in enumerate(zip(lens, q_lens))])
    c.clear_slots(slots)
    return c, k.to(DEVICE), v.to(DEVICE), CacheAppend(new_k.contiguous().to(DEVICE), new_v.contiguous().to(DEVICE), slots)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16])
def test_append_writes_the_cache_bit_for_bit_as_reshape_and_cache(dtype):
    c, k, v, new = _step(dtype)
    torch_k, torch_v = c.k_pages.clone(), c.v_pages.clone()
    reshape_and_cache(new.k_new, new.v_new, torch_k, torch_v, new.slot_mapping)
    assert c.check_contents(k, v) == "sequence 0: 7 of 40 tokens differ (first at position 33)"  # not yet appended
    paged_append(new.k_new, new.v_new, c.k_pages, c.v_pages, new.slot_mapping)
    assert torch.equal(_bits(c.k_pages), _bits(torch_k)) and torch.equal(_bits(c.v_pages), _bits(torch_v))
    assert c.check_contents(k, v) is None  # every token through the block table; every other slot still NaN
    for b, n in enumerate([40, 17, 5]):
        assert torch.equal(c.gather(b)[0], k[b, :, :n]) and torch.equal(c.gather(b)[1], v[b, :, :n])
    last = c.pages_of(1)[-1]  # sequence 1's partial last page: slot 0 is its appended position 16, the rest NaN
    assert torch.equal(c.k_pages[last, 0], k[1, :, 16]) and torch.equal(c.v_pages[last, 0], v[1, :, 16])
    assert torch.isnan(c.k_pages[last, 1:]).all() and torch.isnan(c.v_pages[last, 1:]).all()
    assert torch.isnan(c.k_pages[c.pages_of(2)[0], 5:]).all()
    spare = sorted(set(range(c.num_pages)) - c.unique_pages())
    assert len(spare) == 2 and torch.isnan(c.k_pages[spare]).all() and torch.isnan(c.v_pages[spare]).all()
    paged_append(new.k_new, new.v_new, c.k_pages, c.v_pages, new.slot_mapping)  # a timed repetition: idempotent
    assert torch.equal(_bits(c.k_pages), _bits(torch_k)) and torch.equal(_bits(c.v_pages), _bits(torch_v))


def test_strided_pools_an_odd_row_many_token_blocks_and_a_padding_slot():
    """K and V as the two halves of one ``[P, 2, page, Hkv, d]`` pool (FlashInfer's single-tensor layout), new
    K with its heads outermost;
    a row of Hkv·d = 3·24 = 72 elements (128 lanes, 56 masked off); 291 new tokens over pages of 4 (10
    programs of 32 tokens, the last holding 3); a token whose slot is -1 (padding) writes nothing."""
    hkv, d, page = 3, 24, 4
    assert append_blocks(hkv, d) == (32, 128)
    c, k, v, new = _step(torch.float16, hkv=hkv, d=d, page=page, lens=(301, 90, 4), q_lens=(200, 90, 1), seed=7)
    both = torch.full((c.num_pages, 2, page, hkv, d), float("nan"), dtype=torch.float16, device=DEVICE)
    both[:, 0], both[:, 1] = c.k_pages, c.v_pages
    kp, vp = both[:, 0], both[:, 1]
    assert not kp.is_contiguous()
    want_k, want_v = kp.clone(), vp.clone()
    reshape_and_cache(new.k_new, new.v_new, want_k, want_v, new.slot_mapping)
    slots = new.slot_mapping.clone()
    slots[-1] = -1  # sequence 2's one new token is padding: its slot keeps NaN
    want_k.view(-1, hkv, d)[new.slot_mapping[-1]] = float("nan")
    want_v.view(-1, hkv, d)[new.slot_mapping[-1]] = float("nan")
    k_heads_first = new.k_new.transpose(0, 1).contiguous().transpose(0, 1)  # [T, Hkv, d] with strides (d, T·d, 1)
    paged_append(k_heads_first, new.v_new, kp, vp, slots)  # rows not contiguous: the kernel's head/d-stride path
    assert torch.equal(_bits(kp), _bits(want_k)) and torch.equal(_bits(vp), _bits(want_v))
    c.k_pages, c.v_pages = kp.contiguous(), vp.contiguous()  # check_contents reads the flat view
    assert c.check_contents(k, v) == "sequence 2: 1 of 4 tokens differ (first at position 3)"


def test_blocks_by_hand():
    assert append_blocks(4, 128) == (8, 512)  # the serving preset's row: 8 tokens x 512 elements per program
    assert append_blocks(2, 16) == (128, 32)
    assert append_blocks(3, 96) == (8, 512)  # 288 of 512 lanes used
    assert append_blocks(64, 128) == (1, 4096)  # an 8192-element row: two programs per token


def test_bad_arguments_are_refused_before_a_launch():
    c, k, v, new = _step(torch.float16)
    with pytest.raises(ValueError, match=r"\[num_pages, page_size, 2, 8\]"):
        paged_append(new.k_new, new.v_new, c.k_pages[..., :4], c.v_pages[..., :4], new.slot_mapping)
    with pytest.raises(ValueError, match="one dtype"):
        paged_append(new.k_new.float(), new.v_new.float(), c.k_pages, c.v_pages, new.slot_mapping)
    with pytest.raises(ValueError, match=r"slot_mapping must be \[14\] integers"):
        paged_append(new.k_new, new.v_new, c.k_pages, c.v_pages, new.slot_mapping.float())
    with pytest.raises(ValueError, match="both be \\[T, Hkv, d\\]"):
        paged_append(new.k_new, new.v_new[:3], c.k_pages, c.v_pages, new.slot_mapping)
    before = c.k_pages.clone()
    paged_append(new.k_new[:0], new.v_new[:0], c.k_pages, c.v_pages, new.slot_mapping[:0])  # nothing to write
    assert torch.equal(_bits(c.k_pages), _bits(before))
    inputs = AttentionInputs(q=k, k=k, v=v, paged=c)
    with pytest.raises(ValueError, match="append=True"):
        bind_paged_append(inputs)


def test_bind_is_the_launch_alone_and_our_decode_backend_binds_it():
    from profattn.backends.triton_paged import TritonPagedDecode
    from profattn.workload import parse_workload_spec

    c, k, v, new = _step(torch.float32)
    call = bind_paged_append(AttentionInputs(q=k, k=k, v=v, paged=c, append=new))
    assert c.check_contents(k, v) is not None  # binding writes nothing
    call()
    assert c.check_contents(k, v) is None
    w = parse_workload_spec("mix=(q1,kv70)+2x(q1,kv17),hq=8,hkv=2,d=16,page=16,append=true,dtype=float32")
    prepared = TritonPagedDecode().prepare(w, torch.device(DEVICE))
    assert prepared.bind_append is bind_paged_append
    assert "cache append: ours, one Triton launch for K and V (triton_append.paged_append)" in prepared.notes
    assert not any("cache append" in n for n in TritonPagedDecode().prepare(w.with_(append=False), torch.device(DEVICE)).notes)
