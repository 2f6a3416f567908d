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
    "{1, 8, 64} x page_size {16, 64, 256}, plus a lognormal-ragged batch and a shared-prefix batch (B=64, kv 8192, "
    "prefix 4096)",
    _decode_sweep((512, 2048, 8192, 32768), (1, 8, 64), (16, 64, 256), hq=16, hkv=4, d=128,
                  special_batch=64, special_kv=8192, prefix=4096),
)
PRESETS["decode-sweep-small"] = Preset(
    "decode-sweep-small",
    "the decode sweep at CPU size (Hq=8, Hkv=2, d=64, bf16, paged): kv_len {128, 512} x batch {1, 4} x page_size "
    "{16, 64}, plus a ragged and a shared-prefix batch (B=4, kv 512, prefix 256)",
    _decode_sweep((128, 512), (1, 4), (16, 64), hq=8, hkv=2, d=64, special_batch=4, special_kv=512, prefix=256),
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
