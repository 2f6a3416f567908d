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
    bytes fall with Hkv while FLOPs stay (``profattn.analysis.run.gqa``)."""
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
def halton(index: int, base: int) -> float:
    """The ``index``-th term (1-based) of van der Corput's low-discrepancy sequence in ``base``, in ``[0, 1)``:
    the digits of ``index`` in ``base`` mirrored behind the radix point (Halton, 1960, "On the efficiency of
    certain quasi-random sequences of points in evaluating multi-dimensional integrals"). One prime base per
    dimension makes a Halton point set: space-filling, deterministic, torch-free."""
    f, r, i = 1.0, 0.0, index
    while i > 0:
        f /= base
        r += f * (i % base)
        i //= base
    return r


_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23)


def _pick(u: float, values: tuple) -> object:
    return values[min(int(u * len(values)), len(values) - 1)]


def _log_int(u: float, lo: int, hi: int, multiple: int = 1) -> int:
    """``lo·(hi/lo)^u`` rounded to a multiple of ``multiple`` (log-uniform between ``lo`` and ``hi``)."""
    v = lo * (hi / lo) ** u
    return max(lo, min(hi, int(round(v / multiple)) * multiple))


def _selection(*, n_decode: int, n_prefill: int, n_train: int, n_chunk: int, batches: tuple[int, int],
               kv: tuple[int, int], dense_len: tuple[int, int], head_dims: tuple[int, ...], groups: tuple[int, ...],
               kv_heads: tuple[int, ...], dense_heads: tuple[int, ...], pages: tuple[int, ...],
               dtypes: tuple[str, ...], alt_dtype_head_dim: int, min_heads: int, kv_bytes_cap: int,
               dense_tokens: tuple[int, int], extras: tuple[Workload, ...]) -> tuple[Workload, ...]:
    """A space-filling design over the fields that decide a kernel's time (Halton points, one prime per field):

    * ``n_decode`` paged decode steps: batch log-uniform in ``batches``, kv_len log-uniform in ``kv`` (a
      multiple of 64), head_dim, GQA group, Hkv, page size each from its list (Hq = group × Hkv, Hkv raised until
      Hq ≥ ``min_heads``); the batch is halved until the K/V cache fits ``kv_bytes_cap`` bytes (the dense backends'
      contiguous copy and the reference's chunks come on top);
    * the dtype is drawn from ``dtypes`` only at ``head_dim == alt_dtype_head_dim`` (else ``dtypes[0]``): the
      dtype's effect is measured at one head size, so kernels compiled per (dtype, head_dim) — FlashInfer JIT-compiles
      each on first use, ~24 s on an H200 — stay few;
    * ``n_prefill`` dense causal prefills and ``n_train`` dense causal training steps: q_len = kv_len
      log-uniform in ``dense_len`` (a multiple of 128), Hq from ``dense_heads``, group, head_dim, dtype; the batch
      brings B·L into ``dense_tokens`` (log-uniform);
    * ``n_chunk`` chunked-prefill calls over a paged cache (a chunk of q_len 2^k ≤ kv_len/2 after a prefix),
      appending their new K/V as a serving step does;
    * ``extras``: the FP8-cache, sliding-window and ragged points.
    """
    out: list[Workload] = []
    for i in range(1, n_decode + 1):
        u = [halton(i, b) for b in _PRIMES]
        d, g, hkv = _pick(u[2], head_dims), _pick(u[3], groups), _pick(u[4], kv_heads)
        hkv = max(hkv, -(-min_heads // g))  # at least min_heads query heads
        batch, n = _log_int(u[0], *batches), _log_int(u[1], *kv, multiple=64)
        while batch > 1 and 2 * batch * n * hkv * d * 2 > kv_bytes_cap:
            batch //= 2
        out.append(Workload(phase=Phase.DECODE, batch=batch, q_len=1, kv_len=n, num_q_heads=g * hkv, num_kv_heads=hkv,
                            head_dim=d, dtype=_pick(u[6], dtypes) if d == alt_dtype_head_dim else dtypes[0],
                            mask=Mask.CAUSAL, kv_layout=KVLayout.PAGED, page_size=_pick(u[5], pages)))
    for phase, count, offset in ((Phase.PREFILL, n_prefill, 101), (Phase.TRAIN, n_train, 201)):
        for i in range(offset, offset + count):
            u = [halton(i, b) for b in _PRIMES]
            length = _log_int(u[0], *dense_len, multiple=128)
            hq, d = _pick(u[1], dense_heads), _pick(u[2], head_dims)
            g = min(_pick(u[3], groups), hq)
            tokens = _log_int(u[4], *dense_tokens)
            out.append(Workload(phase=phase, batch=max(1, tokens // length), q_len=length, kv_len=length, num_q_heads=hq,
                                num_kv_heads=hq // g, head_dim=d,
                                dtype=_pick(u[6], dtypes) if d == alt_dtype_head_dim else dtypes[0], mask=Mask.CAUSAL))
    for i in range(301, 301 + n_chunk):
        u = [halton(i, b) for b in _PRIMES]
        n = _log_int(u[0], max(kv[0], 1024), kv[1] // 4, multiple=256)
        chunk = 1 << max(6, min(11, int(round(6 + 5 * u[1]))))
        chunk = min(chunk, n // 2)
        hkv, g, d = _pick(u[4], kv_heads), _pick(u[3], groups[:4]), _pick(u[2], head_dims[:2])
        out.append(Workload(phase=Phase.PREFILL, batch=_log_int(u[5], 1, 8), q_len=chunk, kv_len=n, num_q_heads=g * hkv,
                            num_kv_heads=hkv, head_dim=d, dtype="bfloat16", mask=Mask.CAUSAL, kv_layout=KVLayout.PAGED,
                            page_size=16, append=True))
    out += extras
    seen: set[str] = set()
    return tuple(w for w in out if not (w.tag in seen or seen.add(w.tag)))  # type: ignore[func-returns-value]


def _selection_extras(*, batch: int, hq: int, hkv: int, d: int, kvs: tuple[int, ...], window: int,
                      ragged_batch: int) -> tuple[Workload, ...]:
    """The selection corpus's special points: FP8-cache decode at each of ``kvs``, sliding-window decode at the
    longest with ``window``, and lognormal-ragged decode batches of ``ragged_batch`` sequences at each length."""
    paged = dict(phase=Phase.DECODE, q_len=1, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, dtype="bfloat16",
                 mask=Mask.CAUSAL, kv_layout=KVLayout.PAGED, page_size=16)
    out = [Workload(batch=batch, kv_len=n, kv_dtype="float8_e4m3fn", **paged) for n in kvs]
    out.append(Workload(batch=batch, kv_len=kvs[-1], window=window, **paged))
    out += [Workload(batch=ragged_batch, kv_len=n, kv_len_dist="lognormal", kv_len_seed=11, **paged) for n in kvs[1:]]
    return tuple(out)


PRESETS["selection"] = Preset(
    "selection",
    "the selection corpus: a space-filling (Halton) design over the fields that decide a kernel's time — 36 paged "
    "decode steps (batch 1-256, kv 512-32768, head_dim 64/128/256, GQA group 1/2/4/8/16, Hkv 1-8 with Hq >= 4, page "
    "16/64, fp16 beside bf16 at head_dim 128), 8 dense causal prefills and 6 training steps (512-8192 tokens, Hq 8-64, B·L 4k-64k), 4 chunked "
    "prefills over a paged cache, FP8-cache decode at kv 2048/8192, a sliding-window decode and two ragged batches",
    _selection(n_decode=36, n_prefill=8, n_train=6, n_chunk=4, batches=(1, 256), kv=(512, 32768), dense_len=(512, 8192),
               head_dims=(64, 128, 256), groups=(1, 2, 4, 8, 16), kv_heads=(1, 2, 4, 8), dense_heads=(8, 16, 32, 64),
               pages=(16, 64), dtypes=("bfloat16", "float16"), alt_dtype_head_dim=128, min_heads=4, kv_bytes_cap=4 << 30,
               dense_tokens=(4096, 65536),
               extras=_selection_extras(batch=16, hq=32, hkv=8, d=128, kvs=(2048, 8192), window=1024, ragged_batch=32)),
)
PRESETS["selection-small"] = Preset(
    "selection-small",
    "the selection corpus at CPU size: 6 paged decode steps (batch 1-8, kv 64-512, head_dim 16/32, group 1/2/4, "
    "page 16), 2 dense prefills and 1 training step (64-256 tokens), 1 chunked prefill, an FP8-cache decode and a "
    "ragged batch",
    _selection(n_decode=6, n_prefill=2, n_train=1, n_chunk=1, batches=(1, 8), kv=(64, 512), dense_len=(64, 256),
               head_dims=(16, 32), groups=(1, 2, 4), kv_heads=(1, 2), dense_heads=(2, 4), pages=(16,),
               dtypes=("float32",), alt_dtype_head_dim=16, min_heads=2, kv_bytes_cap=1 << 22, dense_tokens=(128, 512),
               extras=_selection_extras(batch=2, hq=4, hkv=2, d=16, kvs=(64, 256), window=32, ragged_batch=3)),
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
