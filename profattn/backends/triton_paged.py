"""Our decode kernel: split-KV flash-decoding over a paged KV cache, in Triton, with GQA reuse.

Schedule (Dao et al., "Flash-Decoding for long-context inference", 2023; the split-KV scheme of
flash-attn's ``flash_fwd_splitkv_kernel`` and FlashInfer's decode kernels):

* ``_paged_decode_split_kernel`` — one program per (sequence, KV head, split). It loads the query rows of
  the whole GQA group (``Hq / Hkv`` rows, padded to 16 for the tensor-core dot), walks its split's tokens
  ``BLOCK_N`` at a time, translating each token's logical position to a physical page through the block
  table, loads each K/V tile **once for the whole group**, keeps the running max and sum in fp32
  (online softmax, Milakov & Gimelshein 2018), and writes the split's normalised partial output and its
  log-sum-exp. With one split it writes the final output directly and no combine runs.
* The combine, when there is more than one split: with few splits (≤ :data:`FUSED_MAX_SPLITS`) the last-arriving
  split program of each (sequence, KV head) combines them in the same launch (an arrival counter; the partials
  loaded a chunk of splits at a time, the loads in flight together); with more, a second kernel
  ``_paged_decode_combine_kernel``, one program per (sequence, query head), rescales the splits' partial
  outputs by ``exp(lse_s − max lse)`` and sums them (one program walking many splits' partials is a serial
  tail; spread over ``B·Hq`` programs it is not).

Split rule (:func:`choose_num_splits`, the work decomposition): a wave-quantization model. ``CTAS_PER_SM ×
SMs`` programs make a wave (4 per SM, fitted to the measured optimum); a split
count ``s`` makes ``B·Hkv·s`` programs of ``ceil(tiles/s)`` tiles each, so the step takes about
``waves(s) · (tiles per split + start-up)`` plus the combine's cost — the rule picks the ``s`` that minimises
it. At the seed shape (32 pairs) that is 16 splits, 512 programs, one wave; at B·Hkv = 256 two splits (512
programs) rather than the three (768 programs, 1.45 waves) a "fill the GPU" rule picks; from B·Hkv ≈ 512 no
split at all. Measured on the H200 over 58 decode points (batch 1–256, kv 512–32768, GQA groups 1/4/8):
within 3.5 % of the best split count at every point (NOTES.md, "Issue 15").
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from enum import Enum

import torch

from profattn.interfaces import ADOPTIONS
from profattn.backends.base import AttentionInputs, Prepared, Unsupported, paged_decode_reason, paged_only_forward
from profattn.backends.triton_append import bind_paged_append, kernel_launch
from profattn.families import TRITON
from profattn.workload.paged import dequantize
from profattn.workload import Workload

# Defaults chosen on the H200 (``benchmarks/decode_paged.py --tune`` and the 58-point exploration in NOTES.md):
#: Tokens per inner-loop tile (one tl.dot of ``[16, d] × [d, BLOCK_N]``).
BLOCK_N = 32
#: The split rule's wave, in programs per SM: 4 fitted the measured optimum over 58 tuned decode points (mean
#: regret 0.1 %, worst 3.5 %; NOTES.md), e.g. 512 programs (two splits) at B·Hkv = 256 beat 768 (three) by 1.24×.
CTAS_PER_SM = 4
#: Shortest split, in tiles (a one-tile split measured best at batch 1, kv 512: 9.3 vs 10.3 µs for two tiles).
MIN_BLOCKS_PER_SPLIT = 1
NUM_WARPS = 4
#: Three stages: within 0–3 % of the best of 8 launch configurations wherever the plan splits (4 stages: 1–8 %
#: slower there, e.g. 19.9 vs 18.9 µs at the seed's kv 2048); where no split is needed and the programs exceed
#: a wave (3 stages lost 4–21 % there) :func:`choose_launch` takes the direct launch instead.
NUM_STAGES = 3
#: A plan without a split streams 64-token tiles in 2 stages when a program walks ≥ 2,048 keys or the programs
#: fill more than a wave: 1.0–1.8 % faster than the 32-token, 4-stage launch at every such tuned point (B·Hkv ≥ 512),
#: 2.5 % slower at kv 512 in a single wave (:func:`choose_launch`).
DIRECT_BLOCK_N = 64
DIRECT_NUM_STAGES = 2
DIRECT_MIN_KV = 2048
#: The head_dim the tiles above are counted at: a smaller head_dim takes proportionally more tokens per tile, so a
#: tile moves the same bytes of K and V (:func:`tile_tokens`; ``benchmarks/decode_tile_rule.py``, NOTES.md).
TILE_HEAD_DIM = 128
#: The largest tile :func:`tile_tokens` gives (tokens): the largest measured.
MAX_TILE_TOKENS = 128
#: Stages of a split plan whose busy programs exceed a wave (a ragged batch's work list): 149.2–151.4 vs 182.6 µs
#: with 3 stages on the lognormal batch (B=64, kv ≤ 8192, 7 splits, 1,036 programs), as 3 stages lost wherever
#: programs exceeded a wave.
MULTIWAVE_NUM_STAGES = 4
#: The split rule's model (:func:`choose_num_splits`), in tiles of streaming per program: a program's start-up (the
#: dependent sequence-length → block-table → first K/V round trips), the combine's fixed cost and its cost per split.
SPLIT_STARTUP_TILES = 2.0
COMBINE_FIXED_TILES = 1.0
COMBINE_TILES_PER_SPLIT = 1 / 64
#: Relative cost difference the split rule treats as a tie (to fewer splits).
SPLIT_COST_TIE = 0.015


class Combine(str, Enum):
    """How a split plan's partial outputs are combined (a ``str`` enum: members equal their text, JSON writes it):
    ``auto`` (fused up to :data:`FUSED_MAX_SPLITS` splits, else the second kernel), ``separate`` (a second kernel),
    ``fused`` (the last-arriving split program combines; one launch) — the settings — and ``direct``, what runs with
    one split (it writes the output; no combine)."""

    AUTO = "auto"
    FUSED = "fused"
    SEPARATE = "separate"
    DIRECT = "direct"

    def __str__(self) -> str:
        return self.value


#: The default combine setting. The backend reads ``$PROFATTN_PAGED_COMBINE`` (:func:`combine_setting`) so a run can
#: review another schedule.
COMBINE = Combine.AUTO
#: Up to this many splits the fused combine was as fast or within 1 % (0.90–1.01× the two-kernel path at 2 and 4
#: splits over 16 points); above, 0.98–4.8× (more than 1 % slower at 14 of 20 points: one program reads every
#: split's partials).
FUSED_MAX_SPLITS = 4
#: The combine settings a caller may ask for (``direct`` is not one: it follows from one split).
COMBINES = (Combine.AUTO.value, Combine.FUSED.value, Combine.SEPARATE.value)
#: An FP8 cache's tile and warps (:func:`choose_launch`): the codes are half the bytes, so a 64-token tile streams what
#: a 32-token bf16 tile does; two warps keep the 108-register FP8 path at 4 programs per SM. Chosen on the H200
#: (NOTES.md, "FP8 decode": 32.2 µs vs 38.8 µs for the bf16 defaults at the seed's kv 8192).
FP8_BLOCK_N = 64
FP8_NUM_WARPS = 2
#: The FP8 launch keeps the 3 stages it was tuned with (NOTES.md, "FP8 decode").
FP8_NUM_STAGES = 3
COMBINE_ENV = "PROFATTN_PAGED_COMBINE"
#: The fused combine loads the partial outputs ``[group, chunk, d]`` at a time, at most this many fp32 elements
#: (16 registers per thread at 4 warps; 4,096 took group 8 from 96 to 142 registers, compiled for sm_90), the chunks
#: unrolled so their loads are in flight together.
COMBINE_CHUNK_ELEMS = 2048


@dataclass(frozen=True)
class SplitPlan:
    """How the KV sequence is split: ``num_splits`` splits of ``tokens_per_split`` tokens (a multiple of
    ``block_n``); ``ctas`` = programs of the split kernel."""

    num_splits: int
    tokens_per_split: int
    block_n: int
    ctas: int


def split_plan(*, batch: int, num_kv_heads: int, max_kv_len: int, num_splits: int, block_n: int = BLOCK_N) -> SplitPlan:
    """A plan of (at most) ``num_splits`` splits: tokens per split rounded up to whole ``block_n`` tiles, the split
    count then recomputed so no split is empty for the longest sequence (e.g. 3 splits of 256 tiles → 86 tiles
    each, 3 splits; 3 splits of 4 tiles → 2 tiles each, 2 splits).

    Raises:
        ValueError: ``num_splits`` or ``block_n`` below 1.
    """
    if num_splits < 1 or block_n < 1:
        raise ValueError(f"num_splits and block_n must be >= 1, got {num_splits}, {block_n}")
    blocks = max(1, math.ceil(max_kv_len / block_n))
    per_split = math.ceil(blocks / min(num_splits, blocks))
    splits = math.ceil(blocks / per_split)
    return SplitPlan(splits, per_split * block_n, block_n, batch * num_kv_heads * splits)


def choose_num_splits(*, batch: int, num_kv_heads: int, max_kv_len: int, num_sms: int,
                      block_n: int = BLOCK_N, ctas_per_sm: int = CTAS_PER_SM,
                      min_blocks_per_split: int = MIN_BLOCKS_PER_SPLIT,
                      kv_lens: tuple[int, ...] | None = None) -> SplitPlan:
    """The split-KV plan for a decode step: the split count that minimises the wave-quantization model

    ``cost(s) = ceil(P·s / W) · (ceil(T / s) + SPLIT_STARTUP_TILES) + [s > 1] · (COMBINE_FIXED_TILES +
    s · COMBINE_TILES_PER_SPLIT)``

    with ``P = batch · num_kv_heads`` (sequence, KV head) pairs, ``W = ctas_per_sm · num_sms`` programs per wave
    and ``T = ceil(max_kv_len / block_n)`` tiles, over the split counts that leave no split empty and no split
    shorter than ``min_blocks_per_split`` tiles; costs within :data:`SPLIT_COST_TIE` of the least count as ties,
    which go to fewer splits (the model's resolution: many waves of small splits shave a partial last wave the
    hardware's scheduling already smooths).
    Examples (132 SMs, defaults: 32-token tiles, W = 528):
    B=8, Hkv=4, kv 8192 → 16 splits of 512 tokens (512 CTAs, one wave); kv 512 → 16 splits of 32;
    B=64, Hkv=4, kv 8192 → 2 splits of 4096 (512 CTAs; 3 splits would be 768 CTAs, 1.45 waves);
    B=96, Hkv=8, kv 8192 → 2 splits (1,536 CTAs, 2.9 waves, where one split is 768 CTAs in 2 waves);
    B=256, Hkv=8, kv 32768 → 1 split (B·Hkv = 2,048 fills two waves by itself); B=1, Hkv=4, kv 100 → 4 splits of 32.

    ``kv_lens`` (each sequence's keys, host-side, as a serving engine's scheduler knows them; FlashInfer's
    ``plan()`` reads them the same way): a ragged batch launches only its busy programs (:func:`work_list`), so
    the waves count those, ``P·s`` replaced by ``Hkv · Σ_b ceil(len_b / tokens per split)`` — a batch of mostly
    short sequences is split further than its longest one alone would be.

    Raises:
        ValueError: a non-positive batch, head count, SM count, tile, CTAs per SM or split length; ``kv_lens``
            not ``batch`` lengths of at most ``max_kv_len``.
    """
    if min(batch, num_kv_heads, num_sms, block_n, ctas_per_sm, min_blocks_per_split) < 1:
        raise ValueError("batch, num_kv_heads, num_sms, block_n, ctas_per_sm and min_blocks_per_split must be >= 1")
    if kv_lens is not None and (len(kv_lens) != batch or max(kv_lens) > max_kv_len):
        raise ValueError(f"kv_lens must hold {batch} lengths of at most max_kv_len {max_kv_len}")
    pairs = batch * num_kv_heads
    wave = ctas_per_sm * num_sms
    blocks = max(1, math.ceil(max_kv_len / block_n))
    costs: dict[int, float] = {}
    # Pairs alone filling two waves: one split (measured at B·Hkv = 1,024 and 2,048, splitting never won; the
    # model's lockstep waves overstate a many-wave tail that the hardware's scheduling evens out).
    top = 1 if pairs >= 2 * wave else min(max(1, blocks // min_blocks_per_split), 2 * wave)
    for s in range(1, top + 1):
        per_split = math.ceil(blocks / s)
        if math.ceil(blocks / per_split) != s:  # the same plan as a smaller split count
            continue
        busy = pairs * s if kv_lens is None else num_kv_heads * sum(
            max(1, math.ceil(n / (per_split * block_n))) for n in kv_lens)
        cost = math.ceil(busy / wave) * (per_split + SPLIT_STARTUP_TILES)
        if s > 1:
            cost += COMBINE_FIXED_TILES + s * COMBINE_TILES_PER_SPLIT
        costs[s] = cost
    floor = min(costs.values()) * (1 + SPLIT_COST_TIE)
    splits = min(s for s, c in costs.items() if c <= floor)
    return split_plan(batch=batch, num_kv_heads=num_kv_heads, max_kv_len=max_kv_len, num_splits=splits,
                      block_n=block_n)


def work_list(kv_lens: tuple[int, ...], plan: SplitPlan, window: int | None = None) -> list[int]:
    """The busy (sequence, split) items of a ragged batch under ``plan``: sequence ``b`` of ``n`` keys (its last
    ``window`` with a window) has ``ceil(n / tokens_per_split)`` splits; each item packed as ``b << 16 | split``.
    Example: lengths (100, 20, 64), 32-token splits → [0, 1, 2, 3, 65536, 131072, 131073].

    Raises:
        ValueError: more than 65,536 sequences or splits (the packing's 16 bits).
    """
    items = []
    for b, n in enumerate(kv_lens):
        span = n if window is None else min(n, window)
        splits = max(1, math.ceil(span / plan.tokens_per_split))
        if b >= 1 << 16 or splits > 1 << 16:
            raise ValueError(f"work list packs 16-bit sequence and split ids: sequence {b}, {splits} splits")
        items += [b << 16 | s for s in range(splits)]
    return items


def tile_tokens(tokens: int, head_dim: int) -> int:
    """A tile of ``tokens`` at :data:`TILE_HEAD_DIM` re-counted for ``head_dim``: the same bytes per K (and V) tile,
    ``tokens · (TILE_HEAD_DIM // head_dim)`` (whole multiples: a head_dim above 64 keeps ``tokens``), at least
    ``tokens`` and at most :data:`MAX_TILE_TOKENS`.
    Examples: (32, 64) → 64; (64, 64) → 128; (64, 128) → 64; (32, 256) → 32.

    Raises:
        ValueError: ``tokens`` or ``head_dim`` below 1.
    """
    if tokens < 1 or head_dim < 1:
        raise ValueError(f"tokens and head_dim must be >= 1, got {tokens}, {head_dim}")
    return max(tokens, min(MAX_TILE_TOKENS, tokens * max(1, TILE_HEAD_DIM // head_dim)))


@dataclass(frozen=True)
class DecodeLaunch:
    """The launch :func:`choose_launch` picks: the split plan (its ``block_n`` is the tile), warps, pipeline stages,
    the ragged batch's :func:`work_list` (None: the full ``(batch, Hkv, splits)`` grid) and the programs it launches."""

    plan: SplitPlan
    num_warps: int
    num_stages: int
    work: tuple[int, ...] | None = None
    programs: int = 0


def choose_launch(*, batch: int, num_kv_heads: int, max_kv_len: int, num_sms: int, head_dim: int,
                  ctas_per_sm: int = CTAS_PER_SM, kv_lens: tuple[int, ...] | None = None,
                  quantized: bool = False) -> DecodeLaunch:
    """The decode launch for a step: the split count of :func:`choose_num_splits` on :data:`BLOCK_N`-token tiles (4
    warps, 3 stages, or :data:`MULTIWAVE_NUM_STAGES` when the busy programs exceed a wave); a plan that needs no split
    streams :data:`DIRECT_BLOCK_N`-token tiles in :data:`DIRECT_NUM_STAGES` stages when each program walks a long
    sequence (``max_kv_len ≥`` :data:`DIRECT_MIN_KV`) or the programs fill more than a wave. Both tiles are counted at
    :data:`TILE_HEAD_DIM` and re-counted for ``head_dim`` by :func:`tile_tokens` (head_dim 64: 64 and 128 tokens).
    An FP8 cache keeps its own launch (:data:`FP8_BLOCK_N`, :data:`FP8_NUM_WARPS`, :data:`FP8_NUM_STAGES`). With
    ``kv_lens`` (a ragged batch) the launch runs the plan's :func:`work_list`.

    Raises:
        ValueError: as :func:`choose_num_splits`; ``head_dim`` below 1.
    """
    wave = ctas_per_sm * num_sms
    if quantized:
        plan = choose_num_splits(batch=batch, num_kv_heads=num_kv_heads, max_kv_len=max_kv_len, num_sms=num_sms,
                                 block_n=FP8_BLOCK_N, ctas_per_sm=ctas_per_sm, kv_lens=kv_lens)
        warps, stages = FP8_NUM_WARPS, FP8_NUM_STAGES
    else:
        plan = choose_num_splits(batch=batch, num_kv_heads=num_kv_heads, max_kv_len=max_kv_len, num_sms=num_sms,
                                 block_n=tile_tokens(BLOCK_N, head_dim), ctas_per_sm=ctas_per_sm, kv_lens=kv_lens)
        warps, stages = NUM_WARPS, None
        if plan.num_splits == 1 and (max_kv_len >= DIRECT_MIN_KV or plan.ctas > wave):
            plan = split_plan(batch=batch, num_kv_heads=num_kv_heads, max_kv_len=max_kv_len, num_splits=1,
                              block_n=tile_tokens(DIRECT_BLOCK_N, head_dim))
            stages = DIRECT_NUM_STAGES
    work = None if kv_lens is None else tuple(work_list(kv_lens, plan))
    programs = plan.ctas if work is None else len(work) * num_kv_heads
    if stages is None:
        stages = NUM_STAGES if programs <= wave else MULTIWAVE_NUM_STAGES
    return DecodeLaunch(plan, warps, stages, work, programs)


def combine_for(num_splits: int, combine: "Combine | str" = COMBINE) -> Combine:
    """The :class:`Combine` that runs: ``direct`` (one split, no combine), else ``combine`` with ``auto`` resolved to
    ``fused`` up to :data:`FUSED_MAX_SPLITS` splits and ``separate`` above.

    Raises:
        ValueError: ``combine`` is not one of :data:`COMBINES`.
    """
    if combine not in COMBINES:
        raise ValueError(f"combine must be one of {', '.join(COMBINES)}, got {combine!r}")
    if num_splits == 1:
        return Combine.DIRECT
    if combine == Combine.AUTO:
        return Combine.FUSED if num_splits <= FUSED_MAX_SPLITS else Combine.SEPARATE
    return Combine(combine)


def paged_decode(q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor, block_table: torch.Tensor,
                 seq_lens: torch.Tensor, *, max_kv_len: int, num_sms: int, scale: float | None = None,
                 plan: SplitPlan | None = None, workspace: dict | None = None,
                 num_warps: int | None = None, num_stages: int | None = None, prefetch: bool = True,
                 combine: str | None = None, k_scale: torch.Tensor | None = None,
                 v_scale: torch.Tensor | None = None, window: int | None = None,
                 fp8_dot: str = "float16", work: torch.Tensor | None = None) -> torch.Tensor:
    """Decode attention over a paged KV cache.

    Args:
        q: ``[batch, num_q_heads, head_dim]`` (one new token per sequence).
        k_pages, v_pages: ``[num_pages, page_size, num_kv_heads, head_dim]`` (NHD pages).
        block_table: ``[batch, max_pages_per_seq]`` int32.
        seq_lens: ``[batch]`` int32, each ≥ 1 and ≤ ``max_kv_len``.
        max_kv_len: the longest sequence (host-side int: sizes the split plan without a device sync).
        num_sms: SMs of the device (for :func:`choose_num_splits`).
        scale: softmax scale, default ``1/sqrt(head_dim)``.
        plan: a precomputed :class:`SplitPlan` (its ``block_n`` is the tile size); None: :func:`choose_launch`'s
            (which also sets ``num_warps``/``num_stages`` left None; with a given plan they default to
            :data:`NUM_WARPS`/:data:`NUM_STAGES`).
        workspace: a dict reused across calls for the fp32 partial buffers and the arrival counters
            (keeps CUDA-graph replays allocation-free).
        combine: ``"auto"`` (:func:`combine_for`), ``"fused"`` (the last-arriving split program combines; one
            launch) or ``"separate"`` (a second combine kernel); default :data:`COMBINE`.
        k_scale, v_scale: for ``torch.float8_e4m3fn`` pages (FP8 codes), fp32 ``[num_kv_heads]`` scales: a value is
            ``code · scale``. The kernel loads the codes, converts them (exactly) to the dot's dtype and applies the
            scales folded — ``k_scale`` into the softmax scale, ``v_scale`` into the output — which equals
            dequantizing every loaded element (the ledger's ``dequant_ops``) in exact arithmetic.
        fp8_dot: the FP8 path's dot dtype: ``"float16"`` (default: e4m3 → fp16 is one hardware conversion per pair
            of codes on sm_89+, and q is converted to fp16 once — exact for |q| ≤ 65,504 and above fp16's subnormal
            range, so a bf16 query beyond fp16's range would overflow) or ``"query"`` (q's own dtype; bf16 takes a
            longer conversion sequence: 44.3 vs 38.8 µs at the seed's kv 8192 on the H200).
        work: a ragged batch's work list (:func:`work_list`: int32 ``[items]``, the busy (sequence, split) pairs of
            ``plan``, each ``sequence << 16 | split``): one program per item and KV head, none for the splits past a
            short sequence's end. None: the full ``(batch, Hkv, splits)`` grid.
        window: sliding window: each sequence attends its last ``window`` keys only, its key loop starting at
            ``max(0, seq_len − window)`` (pages before it are not read); the split plan then covers
            ``min(max_kv_len, window)`` tokens. None: every key.

    Returns:
        ``[batch, num_q_heads, head_dim]`` in q's dtype.

    Raises:
        ValueError: head_dim not a power of two ≥ 16, Hq not a multiple of Hkv, an unknown ``combine``, FP8
            pages without ``[num_kv_heads]`` scales (or scales beside pages that are not FP8), a window below 1, or an
            unknown ``fp8_dot``.
    """
    from profattn.backends.kernels.paged_decode import combine_kernel, split_kernel

    batch, hq, d = q.shape
    _, page_size, hkv, d_k = k_pages.shape
    if d != d_k or d < 16 or d & (d - 1):
        raise ValueError(f"head_dim must be a power of two >= 16 and match the cache, got q {d}, cache {d_k}")
    if hq % hkv:
        raise ValueError(f"num_q_heads {hq} is not a multiple of num_kv_heads {hkv}")
    group = hq // hkv
    quant = k_pages.dtype == torch.float8_e4m3fn
    if quant != (k_scale is not None and v_scale is not None) or (v_pages.dtype == torch.float8_e4m3fn) != quant:
        raise ValueError("FP8 (float8_e4m3fn) K and V pages need k_scale and v_scale, and only they take scales")
    if quant and (tuple(k_scale.shape) != (hkv,) or tuple(v_scale.shape) != (hkv,)):
        raise ValueError(f"k_scale and v_scale must be [num_kv_heads] = [{hkv}]")
    if window is not None and window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if fp8_dot not in ("float16", "query"):
        raise ValueError(f"fp8_dot must be 'float16' or 'query', got {fp8_dot!r}")
    span = max_kv_len if window is None else min(max_kv_len, window)
    if plan is None:
        launch = choose_launch(batch=batch, num_kv_heads=hkv, max_kv_len=span, num_sms=num_sms, head_dim=d,
                               quantized=quant)
        plan = launch.plan
        num_warps = launch.num_warps if num_warps is None else num_warps
        num_stages = launch.num_stages if num_stages is None else num_stages
    num_warps = NUM_WARPS if num_warps is None else num_warps
    num_stages = NUM_STAGES if num_stages is None else num_stages
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = torch.empty_like(q)
    ws = workspace if workspace is not None else {}
    direct = plan.num_splits == 1
    key = (batch, hq, hkv, plan.num_splits, d, q.device)
    if ws.get("key") != key:
        ws["key"] = key
        ws["partial"] = torch.empty((batch, hq, max(plan.num_splits, 1), d), dtype=torch.float32, device=q.device)
        ws["lse"] = torch.empty((batch, hq, max(plan.num_splits, 1)), dtype=torch.float32, device=q.device)
        ws["arrivals"] = torch.zeros((batch * hkv,), dtype=torch.int32, device=q.device)
    partial, lse, arrivals = ws["partial"], ws["lse"], ws["arrivals"]
    fused = combine_for(plan.num_splits, COMBINE if combine is None else combine) is Combine.FUSED
    block_g = max(16, 1 << (group - 1).bit_length())
    group_p2 = max(2, 1 << (group - 1).bit_length())
    block_s = max(2, 1 << (plan.num_splits - 1).bit_length())
    chunk = max(1, min(block_s, COMBINE_CHUNK_ELEMS // (group_p2 * d)))
    grid = (batch, hkv, plan.num_splits) if work is None else (work.numel(), hkv, 1)
    kernel_launch(split_kernel, grid, q.device)(
        q, k_pages, v_pages, block_table, seq_lens, out, partial, lse,
        scale * 1.4426950408889634,  # log2(e): the kernel works in base 2 (exp2)
        q.stride(0), q.stride(1),
        k_pages.stride(0), k_pages.stride(1), k_pages.stride(2),
        v_pages.stride(0), v_pages.stride(1), v_pages.stride(2),
        block_table.stride(0),
        out.stride(0), out.stride(1),
        partial.stride(0), partial.stride(1), partial.stride(2),
        lse.stride(0), lse.stride(1),
        plan.tokens_per_split, plan.num_splits, arrivals,
        k_scale if quant else seq_lens, v_scale if quant else seq_lens,  # unread without KV_QUANT
        0 if window is None else window, block_table.shape[1] * page_size, seq_lens if work is None else work,
        GROUP=group, BLOCK_G=block_g, HEAD_DIM=d, BLOCK_N=plan.block_n, PAGE_SIZE=page_size, DIRECT=direct,
        PREFETCH=prefetch, FUSED=fused, KV_QUANT=quant, DOT_F16=quant and fp8_dot == "float16",
        GROUP_P2=group_p2, BLOCK_S=block_s, COMBINE_CHUNK=chunk, WORK_LIST=work is not None,
        num_warps=num_warps, num_stages=num_stages,
    )
    if not direct and not fused:
        kernel_launch(combine_kernel, (batch, hq), q.device)(
            partial, lse, out, seq_lens, plan.tokens_per_split, 0 if window is None else window,
            partial.stride(0), partial.stride(1), partial.stride(2), lse.stride(0), lse.stride(1),
            out.stride(0), out.stride(1),
            HEAD_DIM=d, BLOCK_S=block_s,
            num_warps=4,
        )
    return out


def triton_available(device: torch.device) -> str | None:
    """None if Triton can run on ``device``, else why not (CPU needs ``TRITON_INTERPRET=1``)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed"
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return "Triton kernels run on CUDA (on a CPU, only under TRITON_INTERPRET=1)"
    return None


def interpreter_dtype(device: torch.device, dtype: str) -> str:
    """The dtype a Triton kernel runs in: ``dtype``, except ``float16`` for ``bfloat16`` under Triton's CPU
    interpreter, whose bf16 ``tl.dot`` gives wrong results (relative errors ~1e9 seen with triton 3.6) —
    the kernel is then checked in fp16, and the cell says so, instead of being blamed for the interpreter."""
    if dtype == "bfloat16" and device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        return "float16"
    return dtype


#: Environment variable that overrides :data:`CTAS_PER_SM`, the split rule's wave (e.g. ``1``: a wave of one program
#: per SM, so 4 splits instead of 16 at the seed's kv 8192) — a real schedule change to review with
#: ``profattn compare``; the cell's notes record it.
CTAS_PER_SM_ENV = "PROFATTN_PAGED_CTAS_PER_SM"


def ctas_per_sm_setting() -> int:
    """:data:`CTAS_PER_SM`, or ``$PROFATTN_PAGED_CTAS_PER_SM`` when set (1 … 32: an SM holds at most 32 blocks).

    Raises:
        Unsupported: the variable is not an integer from 1 to 32 in ASCII digits (the cell says why; the run goes on).
    """
    raw = os.environ.get(CTAS_PER_SM_ENV)
    if raw is None or not raw.strip():
        return CTAS_PER_SM
    text = raw.strip()
    value = int(text) if text.isascii() and text.isdigit() else 0
    if not 1 <= value <= 32:
        raise Unsupported(f"${CTAS_PER_SM_ENV}={raw!r} is not an integer from 1 to 32")
    return value


def combine_setting() -> Combine:
    """:data:`COMBINE`, or ``$PROFATTN_PAGED_COMBINE`` when set (one of :data:`COMBINES`).

    Raises:
        Unsupported: the variable is none of ``auto``, ``fused``, ``separate`` (the cell says why; the run goes on).
    """
    raw = (os.environ.get(COMBINE_ENV) or "").strip()
    if not raw:
        return COMBINE
    if raw not in COMBINES:
        raise Unsupported(f"${COMBINE_ENV}={raw!r} is none of {', '.join(COMBINES)}")
    return Combine(raw)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132  # interpreter runs: plan as for the H200 so CPU tests exercise the same split counts


class TritonPagedDecode:
    """``triton-paged-decode``: our split-KV paged decode kernel (see module docstring); an appending decode
    step writes its new K/V with our Triton append (:func:`~profattn.backends.triton_append.bind_paged_append`)."""

    name = "triton-paged-decode"
    #: The interface it implements and the layout it reads (:mod:`profattn.interfaces`).
    adoption = ADOPTIONS['triton-paged-decode']
    family = TRITON
    description = "ours: Triton split-KV flash-decoding over the paged cache, one program per (seq, KV head, split) for the whole GQA group"
    #: Takes per-sequence KV lengths of a decode step (one query each; it reads ``seq_lens``) and appending calls.
    varlen = True
    #: Reads an FP8 E4M3 cache with per-KV-head scales (dequantized in registers, scales folded).
    kv_dtypes = ("float8_e4m3fn",)

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        reason = paged_decode_reason(workload)
        if reason:
            return reason
        d = workload.head_dim
        if d < 16 or d & (d - 1):
            return f"head_dim {d} is not a power of two >= 16"
        return triton_available(device)

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        sms = _num_sms(device)
        ctas_per_sm = ctas_per_sm_setting()
        combine = combine_setting()
        window = workload.window
        span = workload.kv_len if window is None else min(workload.kv_len, window)  # tokens one sequence reads
        quant = workload.is_kv_quantized
        lens = None
        if workload.is_ragged:  # plan with each sequence's span (as FlashInfer's plan() does)
            lens = tuple(n if window is None else min(n, window) for n in workload.kv_lens)
        launch = choose_launch(batch=workload.batch, num_kv_heads=workload.num_kv_heads, max_kv_len=span,
                               num_sms=sms, head_dim=workload.head_dim, ctas_per_sm=ctas_per_sm, kv_lens=lens,
                               quantized=quant)
        plan, num_warps, num_stages = launch.plan, launch.num_warps, launch.num_stages
        work_items, programs = launch.work, launch.programs
        workspace: dict = {}

        run_dtype = interpreter_dtype(device, workload.dtype)

        def bind(inputs: AttentionInputs):
            cache = inputs.paged
            q, k_pages, v_pages = inputs.q[:, :, 0, :], cache.k_pages, cache.v_pages
            out_dtype = q.dtype
            if run_dtype != workload.dtype:  # cast once, outside the timed call (FP8 codes stay FP8)
                cast = getattr(torch, run_dtype)
                q = q.to(cast)
                if not workload.is_kv_quantized:
                    k_pages, v_pages = k_pages.to(cast), v_pages.to(cast)

            work = None if work_items is None else torch.tensor(work_items, dtype=torch.int32, device=q.device)

            def call() -> torch.Tensor:
                return paged_decode(q, k_pages, v_pages, cache.block_table, cache.seq_lens,
                                    max_kv_len=workload.kv_len, num_sms=sms, plan=plan, workspace=workspace, work=work,
                                    combine=combine, k_scale=cache.k_scale, num_warps=num_warps,
                                    num_stages=num_stages,
                                    v_scale=cache.v_scale, window=window).unsqueeze(2).to(out_dtype)

            return call

        interp_note = (f"ran in {run_dtype} under TRITON_INTERPRET=1 (the interpreter's bf16 dot is wrong); "
                       "output cast back to bfloat16",) if run_dtype != workload.dtype else ()
        append_note = ("cache append: ours, one Triton launch for K and V (triton_append.paged_append)",) if workload.append else ()
        fp8_note = ("FP8 E4M3 pages loaded as codes, converted in registers to fp16 (q too) for the tensor-core dots; "
                    "per-KV-head k_scale folded into the softmax scale, v_scale into the output",) if quant else ()
        if window is not None:
            append_note += (f"sliding window of {window} key{'s' * (window != 1)}: each sequence's key loop starts at max(0, kv_len − "
                            f"{window}), so only the window's pages are read; the split plan covers {span:,} tokens",)
        ran = combine_for(plan.num_splits, combine)
        waves = programs / (ctas_per_sm * sms)
        return Prepared(forward=paged_only_forward, bind=bind, bind_append=bind_paged_append, notes=interp_note + append_note + fp8_note + (
            f"split plan: {plan.num_splits} split{'s' * (plan.num_splits != 1)} x {plan.tokens_per_split} tokens, "
            f"{programs} CTA{'s' * (programs != 1)} = {waves:.2f} waves of {ctas_per_sm} per SM on {sms} SMs"
            + (" (the H200's count, assumed under the interpreter)" if device.type == "cpu" else "")
            + f" (BLOCK_N {plan.block_n}, {num_warps} warps, {num_stages} stages; wave-quantization split rule"
            + (f"; a work list of the ragged batch's {len(work_items)} busy (sequence, split) items" if work_items else "")
            + (f", {ctas_per_sm} CTA{'s' * (ctas_per_sm != 1)} per SM from ${CTAS_PER_SM_ENV}" if ctas_per_sm != CTAS_PER_SM else "") + ")",
            "split combine: " + {Combine.DIRECT: "none (one split writes the output)",
                                 Combine.FUSED: "last-arriving split program (one launch)",
                                 Combine.SEPARATE: "second kernel"}[ran]
            + (f" (${COMBINE_ENV}={combine})" if combine != COMBINE else ""),
        ))


class TorchPagedReference:
    """``torch-paged-reference``: gather the pages through the block table in PyTorch, then SDPA.

    The correctness reference for paged kernels and the "address translation done in PyTorch" baseline.
    Decode (one query per sequence): every call materialises a dense ``[B, Hkv, max_len, d]`` copy of the
    cache (index kernels), then runs SDPA once (default kernel choice, GQA native; a boolean key-padding mask
    when lengths differ). Prefill, chunked prefill and variable-length / mixed calls: sequence by sequence,
    its pages gathered into ``[1, Hkv, kv_len_b, d]`` and SDPA on its own ``q_len_b`` rows with the
    bottom-right causal mask — slow (one launch group per sequence) but exact, with no padding computed.
    """

    name = "torch-paged-reference"
    #: The interface it implements and the layout it reads (:mod:`profattn.interfaces`).
    adoption = ADOPTIONS['torch-paged-reference']
    description = "gathers pages through the block table with torch indexing, then SDPA on the dense copy"
    #: Takes variable-length and appending calls (per-sequence gather and attention).
    varlen = True
    #: Reads an FP8 E4M3 cache: the gathered codes are dequantized (code · scale, in q's dtype) before SDPA.
    kv_dtypes = ("float8_e4m3fn",)

    @property
    def family(self):
        from profattn.families import PAGED_GATHER

        return PAGED_GATHER

    def unsupported_reason(self, workload: Workload, device: torch.device) -> str | None:
        from profattn.workload import KVLayout, Phase

        if workload.phase is Phase.DECODE and not workload.is_varlen:
            return paged_decode_reason(workload)
        if workload.kv_layout is not KVLayout.PAGED:
            return "reads a paged KV cache; this workload's layout is dense"
        if workload.phase is Phase.TRAIN:
            return "a forward path over the paged cache (serving): no backward"
        return None

    def prepare(self, workload: Workload, device: torch.device) -> Prepared:
        reason = self.unsupported_reason(workload, device)
        if reason:
            raise Unsupported(reason)
        if workload.q_len == 1:
            return self._prepare_decode(workload)
        return self._prepare_per_sequence(workload, device)

    def _prepare_decode(self, workload: Workload) -> Prepared:
        import torch.nn.functional as F

        from profattn.backends.masks import window_applies

        max_len = workload.kv_len
        pages_needed = math.ceil(max_len / workload.page_size)
        ragged = workload.is_ragged
        window = workload.window if window_applies(workload) else None

        def bind(inputs: AttentionInputs):
            cache = inputs.paged
            q = inputs.q
            table = cache.block_table[:, :pages_needed].long().clamp(min=0)
            mask = None
            if ragged or window is not None:
                pos, lens = torch.arange(max_len, device=q.device)[None, :], cache.seq_lens[:, None].long()
                keep = pos < lens
                if window is not None:  # the sliding window: the last `window` keys of each sequence
                    keep = keep & (pos >= lens - window)
                mask = keep[:, None, None, :]

            def call() -> torch.Tensor:
                b = table.shape[0]
                k = cache.k_pages[table].reshape(b, -1, cache.num_kv_heads, cache.head_dim)[:, :max_len].transpose(1, 2)
                v = cache.v_pages[table].reshape(b, -1, cache.num_kv_heads, cache.head_dim)[:, :max_len].transpose(1, 2)
                if cache.k_scale is not None:  # FP8 codes: dequantize the gathered copy (one multiply per element)
                    k = dequantize(k, cache.k_scale, head_axis=1, dtype=q.dtype)
                    v = dequantize(v, cache.v_scale, head_axis=1, dtype=q.dtype)
                if mask is not None:  # masked slots may hold whatever the pool held (NaN in tests)
                    k = k.masked_fill(~mask.transpose(-1, -2), 0)
                    v = v.masked_fill(~mask.transpose(-1, -2), 0)
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

            return call

        return Prepared(forward=paged_only_forward, bind=bind,
                        notes=("gather + SDPA (default kernel choice)" + (", key-padding mask" if ragged else "")
                               + (", FP8 codes dequantized after the gather" if workload.is_kv_quantized else "")
                               + (f", sliding-window mask of {window} keys (the whole cache is gathered)"
                                  if window is not None else ""),))

    def _prepare_per_sequence(self, workload: Workload, device: torch.device) -> Prepared:
        import torch.nn.functional as F

        from profattn.backends.masks import sdpa_mask_args
        from profattn.workload import Phase

        page = workload.page_size
        seqs = list(zip(workload.q_lens, workload.kv_lens))
        margs = [sdpa_mask_args(Workload(phase=Phase.PREFILL, batch=1, q_len=nq, kv_len=nk,
                                         num_q_heads=workload.num_q_heads, num_kv_heads=workload.num_kv_heads,
                                         head_dim=workload.head_dim, dtype=workload.dtype, mask=workload.mask,
                                         window=workload.window), device)
                 for nq, nk in seqs]

        def bind(inputs: AttentionInputs):
            cache = inputs.paged
            q = inputs.q
            hkv, d = cache.num_kv_heads, cache.head_dim
            tables = [cache.block_table[b, :math.ceil(nk / page)].long() for b, (_, nk) in enumerate(seqs)]

            def call() -> torch.Tensor:
                out = torch.zeros_like(q)  # padding rows (past q_len_b) stay zero
                for b, (nq, nk) in enumerate(seqs):
                    k = cache.k_pages[tables[b]].reshape(-1, hkv, d)[:nk].transpose(0, 1).unsqueeze(0)
                    v = cache.v_pages[tables[b]].reshape(-1, hkv, d)[:nk].transpose(0, 1).unsqueeze(0)
                    if cache.k_scale is not None:  # FP8 codes: dequantize this sequence's gathered copy
                        k = dequantize(k, cache.k_scale, head_axis=1, dtype=q.dtype)
                        v = dequantize(v, cache.v_scale, head_axis=1, dtype=q.dtype)
                    m = margs[b]
                    out[b:b + 1, :, :nq] = F.scaled_dot_product_attention(
                        q[b:b + 1, :, :nq], k, v, attn_mask=m.attn_mask, is_causal=m.is_causal, enable_gqa=True)
                return out

            return call

        return Prepared(forward=paged_only_forward, bind=bind,
                        notes=("per sequence: gather its pages, SDPA on its own rows (default kernel choice, "
                               "bottom-right causal per sequence; no padding computed)"
                               + (f"; sliding window of {workload.window} keys" if workload.window else ""),))
