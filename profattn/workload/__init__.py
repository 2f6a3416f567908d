"""The workload layer: one attention call's shape contract, its FLOP and byte ledgers, the ``--workload``
text, and the presets.

Torch-free. The paged KV cache (:mod:`profattn.workload.paged`) needs torch and is imported from there
by the layers that build tensors (backends, harness); it is not re-exported here.
"""

from profattn.workload.contract import (
    DTYPE_BYTES, KV_LEN_DISTS, CpScheme, KVLayout, KVLenDist, Mask, Phase, TensorTraffic, Workload, causal_pairs,
    parse_dtype,
)
from profattn.workload.presets import PRESETS, SWEEP_PRESETS, Preset, default_preset_name, get_preset
from profattn.workload.spec import parse_workload_spec, workload_spec

__all__ = [
    "DTYPE_BYTES", "KV_LEN_DISTS", "CpScheme", "KVLayout", "KVLenDist", "Mask", "PRESETS", "Phase", "Preset", "SWEEP_PRESETS", "TensorTraffic",
    "Workload", "causal_pairs", "default_preset_name", "get_preset", "parse_dtype", "parse_workload_spec",
    "workload_spec",
]
