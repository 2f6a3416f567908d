"""Named sets of workloads: the seed exercise, its CPU-sized twin and the decode sweeps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from profattn.errors import UnknownNameError
from profattn.workload.contract import KVLayout, Mask, Phase, Workload


@dataclass(frozen=True)
class Preset:
    """A named set of workloads: the seed's exercise, or a CPU-sized copy of it."""

    name: str
    description: str
    workloads: tuple[Workload, ...] = field(default_factory=tuple)

    def regime(self, phase: Phase | str | None) -> tuple[Workload, ...]:
        """Workloads of one phase (all when ``phase`` is None or ``"all"``)."""
        if phase is None or str(phase) == "all":
            return self.workloads
        p = Phase.parse(phase)
        return tuple(w for w in self.workloads if w.phase is p)


def _seed_like(batch: int, hq: int, hkv: int, d: int, dtype: str, train_len: int, decode_lens: Iterable[int]) -> tuple[Workload, ...]:
    common = dict(batch=batch, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, dtype=dtype)
    out = [
        Workload(phase=Phase.TRAIN, q_len=train_len, kv_len=train_len, mask=Mask.CAUSAL, **common),
        Workload(phase=Phase.PREFILL, q_len=train_len, kv_len=train_len, mask=Mask.CAUSAL, **common),
    ]
    out += [Workload(phase=Phase.DECODE, q_len=1, kv_len=n, mask=Mask.CAUSAL, kv_layout=KVLayout.PAGED, page_size=16, **common)
            for n in decode_lens]
    return tuple(out)


PRESETS: dict[str, Preset] = {
    "seed": Preset(
        "seed",
        "the seed lesson's exercise: B=8, Hq=16, Hkv=4, d=128, bf16; train and prefill 2048/2048 causal; "
        "decode q_len 1 at kv_len 512, 2048, 8192 from a paged KV cache (page size 16, shuffled pages; dense "
        "backends read the contiguous copy)",
        _seed_like(8, 16, 4, 128, "bfloat16", 2048, (512, 2048, 8192)),
    ),
    "small": Preset(
        "small",
        "the seed's structure at CPU size: B=2, Hq=8, Hkv=2, d=64, bf16; train and prefill 256/256 causal; "
        "decode q_len 1 at kv_len 128, 512, 2048 from a paged KV cache (page size 16)",
        _seed_like(2, 8, 2, 64, "bfloat16", 256, (128, 512, 2048)),
    ),
}


def _decode_sweep(kv_lens: Iterable[int], batches: Iterable[int], page_sizes: Iterable[int], *, hq: int, hkv: int, d: int,
                  special_batch: int, special_kv: int, prefix: int) -> tuple[Workload, ...]:
    common = dict(phase=Phase.DECODE, q_len=1, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, dtype="bfloat16",
                  mask=Mask.CAUSAL, kv_layout=KVLayout.PAGED)
    out = [Workload(batch=b, kv_len=n, page_size=p, **common) for p in page_sizes for b in batches for n in kv_lens]
    out.append(Workload(batch=special_batch, kv_len=special_kv, page_size=16, kv_len_dist="lognormal", kv_len_seed=7, **common))
    out.append(Workload(batch=special_batch, kv_len=special_kv, page_size=16, shared_prefix_len=prefix, **common))
    return tuple(out)


PRESETS["decode-sweep"] = Preset(
    "decode-sweep",
    "decode sweep at the seed's heads (Hq=16, Hkv=4, d=128, bf16, paged): kv_len {512, 2048, 8192, 32768} x batch "
    "{1, 8, 64, 128} x page_size {16, 64, 256}, plus a lognormal-ragged batch and a shared-prefix batch (B=64, kv "
    "8192, prefix 4096)",
    _decode_sweep((512, 2048, 8192, 32768), (1, 8, 64, 128), (16, 64, 256), hq=16, hkv=4, d=128,
                  special_batch=64, special_kv=8192, prefix=4096),
)
PRESETS["decode-sweep-small"] = Preset(
    "decode-sweep-small",
    "the decode sweep at CPU size (Hq=8, Hkv=2, d=64, bf16, paged): kv_len {128, 512} x batch {1, 4} x page_size "
    "{16, 64}, plus a ragged and a shared-prefix batch (B=4, kv 512, prefix 256)",
    _decode_sweep((128, 512), (1, 4), (16, 64), hq=8, hkv=2, d=64, special_batch=4, special_kv=512, prefix=256),
)
def spread_lengths(n: int, lo: int, hi: int, seed: int) -> tuple[int, ...]:
    """``n`` KV lengths drawn uniformly from ``[lo, hi]`` with Python's ``random.Random(seed)`` (reproducible,
    torch-free), the first set to ``hi`` so the longest is ``hi``: the ragged decode lengths of a mixed batch."""
    import random

    rng = random.Random(seed)
    out = [rng.randint(lo, hi) for _ in range(n)]
    out[0] = hi
    return tuple(out)


def _serving(*, batch: int, hq: int, hkv: int, d: int, prompt: int, chunks: Iterable[int],
             mixed: Iterable[tuple[tuple[int, int, int], tuple[int, int, int, int]]]) -> tuple[Workload, ...]:
    """A prompt of ``prompt`` tokens for ``batch`` sequences, unchunked and chunked at each of ``chunks`` (chunk
    ``i`` of ``C``: q_len ``C``, kv_len ``(i+1)·C``, earlier chunks read from the cache), then each mixed step —
    ``((n_prefill, q, kv), (n_decode, kv_lo, kv_hi, seed))`` — beside its prefill part alone and its decode part
    alone. Paged (page 16), bf16, causal, every call appending its new tokens to the cache."""
    common = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, dtype="bfloat16", mask=Mask.CAUSAL,
                  kv_layout=KVLayout.PAGED, page_size=16, append=True)
    out = []
    for c in (prompt, *chunks):
        out += [Workload(phase=Phase.PREFILL, batch=batch, q_len=c, kv_len=(i + 1) * c, **common)
                for i in range(prompt // c)]
    for (n_pre, q, kv), (n_dec, lo, hi, seed) in mixed:
        pre = ((q, kv),) * n_pre
        dec = tuple((1, n) for n in spread_lengths(n_dec, lo, hi, seed))
        out += [Workload.varlen(None, pre + dec, **common), Workload.varlen(None, pre, **common),
                Workload.varlen(None, dec, **common)]
    return tuple(out)


PRESETS["serving"] = Preset(
    "serving",
    "serving steps at the seed's heads (B=8, Hq=16, Hkv=4, d=128, bf16, paged 16, every call appending its new "
    "K/V): the seed's 8192-token prompt unchunked and chunked at 2048 (4 chunks) and 512 (16 chunks); mixed "
    "steps 2x(q2048,kv8192)+32 decodes (kv 1024-8192) and 1x(q512,kv4096)+64 decodes (kv 1536-2560), each "
    "beside its prefill part and its decode part alone",
    _serving(batch=8, hq=16, hkv=4, d=128, prompt=8192, chunks=(2048, 512),
             mixed=(((2, 2048, 8192), (32, 1024, 8192, 1)), ((1, 512, 4096), (64, 1536, 2560, 2)))),
)
PRESETS["serving-small"] = Preset(
    "serving-small",
    "the serving preset at CPU size (B=2, Hq=4, Hkv=2, d=32, bf16, paged 16, appending): a 128-token prompt "
    "unchunked and chunked at 64 and 32; mixed steps 1x(q32,kv128)+8 decodes (kv 16-128) and "
    "2x(q16,kv64)+6 decodes (kv 24-40), each beside its prefill and decode parts",
    _serving(batch=2, hq=4, hkv=2, d=32, prompt=128, chunks=(64, 32),
             mixed=(((1, 32, 128), (8, 16, 128, 1)), ((2, 16, 64), (6, 24, 40, 2)))),
)
def _gqa(*, batch: int, hq: int, hkvs: Iterable[int], d: int, kv_lens: Iterable[int]) -> tuple[Workload, ...]:
    """Decode steps (q_len 1, paged 16, bf16, causal) at every KV length in ``kv_lens`` and, at each, every KV-head
    count in ``hkvs`` with the same ``hq`` query heads: workloads identical but for ``num_kv_heads``, so cache
    bytes fall with Hkv while FLOPs stay (``profattn.analysis.gqa``)."""
    return tuple(Workload(phase=Phase.DECODE, batch=batch, q_len=1, kv_len=n, num_q_heads=hq, num_kv_heads=h, head_dim=d,
                          dtype="bfloat16", mask=Mask.CAUSAL, kv_layout=KVLayout.PAGED, page_size=16)
                 for n in kv_lens for h in hkvs)


PRESETS["gqa"] = Preset(
    "gqa",
    "MHA vs GQA vs MQA at the same query heads: decode (q_len 1, B=8, Hq=32, d=128, bf16, paged 16) with Hkv 32, 8 "
    "and 1 at kv_len 512, 2048, 8192, 32768 — K/V bytes fall 4x and 32x, FLOPs do not",
    _gqa(batch=8, hq=32, hkvs=(32, 8, 1), d=128, kv_lens=(512, 2048, 8192, 32768)),
)
PRESETS["gqa-small"] = Preset(
    "gqa-small",
    "the gqa preset at CPU size: decode (B=2, Hq=8, d=32, bf16, paged 16) with Hkv 8, 2 and 1 at kv_len 64 and 256",
    _gqa(batch=2, hq=8, hkvs=(8, 2, 1), d=32, kv_lens=(64, 256)),
)
def _variants(*, batch: int, hq: int, hkv: int, d: int, docs: tuple[int, ...], window_decode: tuple[int, int, int],
              window_prefill: tuple[int, int, int], quant_kvs: Iterable[int]) -> tuple[Workload, ...]:
    """The seed's variants at one size (bf16, causal): a packed training batch of ``docs`` (document lengths) and the
    same documents as a packed prefill; sliding-window decode ``(kv_len, window, full_kv)`` — paged 16, ``batch``
    sequences at ``kv_len`` with the window beside full attention at ``full_kv`` — and a ``(batch, q_len, window)``
    sliding-window prefill; FP8-KV decode (``kv_dtype=float8_e4m3fn``, paged 16) at each of ``quant_kvs`` beside its
    bf16 twin."""
    common = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, dtype="bfloat16", mask=Mask.CAUSAL)
    paged = dict(phase=Phase.DECODE, batch=batch, q_len=1, kv_layout=KVLayout.PAGED, page_size=16, **common)
    kv, w, full = window_decode
    pb, pq, pw = window_prefill
    out = [Workload.packed(Phase.TRAIN, docs, **common), Workload.packed(Phase.PREFILL, docs, **common),
           Workload(kv_len=kv, window=w, **paged), Workload(kv_len=full, **paged),
           Workload(phase=Phase.PREFILL, batch=pb, q_len=pq, kv_len=pq, window=pw, **common)]
    for n in quant_kvs:
        out += [Workload(kv_len=n, **paged), Workload(kv_len=n, kv_dtype="float8_e4m3fn", **paged)]
    return tuple(out)


PRESETS["variants"] = Preset(
    "variants",
    "the seed's variants at its heads (Hq=16, Hkv=4, d=128, bf16, causal): packed training and packed prefill of 8 "
    "documents (4096+1024+3072+512+2048+1536+2560+1536 = 16,384 tokens, attention inside each document); "
    "sliding-window decode (B=8, paged 16) at kv 32768 with window 4096 beside full decode at kv 4096; prefill 8192 "
    "(B=2) with window 1024; FP8-KV decode (B=8, paged 16) at kv 512, 2048, 8192 beside bf16",
    _variants(batch=8, hq=16, hkv=4, d=128, docs=(4096, 1024, 3072, 512, 2048, 1536, 2560, 1536),
              window_decode=(32768, 4096, 4096), window_prefill=(2, 8192, 1024), quant_kvs=(512, 2048, 8192)),
)
PRESETS["variants-small"] = Preset(
    "variants-small",
    "the variants preset at CPU size (Hq=4, Hkv=2, d=32, bf16, causal): packed training and packed prefill of 5 "
    "documents (48+16+32+24+8 = 128 tokens); sliding-window decode (B=2, paged 16) at kv 512 with window 64 beside "
    "full decode at kv 64; prefill 128 (B=2) with window 32; FP8-KV decode (B=2, paged 16) at kv 32, 128, 512 "
    "beside bf16",
    _variants(batch=2, hq=4, hkv=2, d=32, docs=(48, 16, 32, 24, 8), window_decode=(512, 64, 64),
              window_prefill=(2, 128, 32), quant_kvs=(32, 128, 512)),
)
#: Presets ``profattn sweep decode`` uses by device.
SWEEP_PRESETS = {"cuda": "decode-sweep", "cpu": "decode-sweep-small"}


def get_preset(name: str) -> Preset:
    """The preset called ``name``.

    Raises:
        UnknownNameError: no such preset (message lists the valid names).
    """
    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownNameError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}") from None


def default_preset_name(device: str) -> str:
    """``seed`` on CUDA, ``small`` on CPU."""
    return "seed" if device.startswith("cuda") else "small"
