"""The trace layer: Kineto traces and Nsight Compute CSV read into DataFrames. Torch-free; knows nothing
of cells or backends."""

from profattn.trace.columns import (
    GRAPH_LAUNCHERS, KERNEL_ARG_SPEC, KERNEL_COLUMNS, OP_COLUMNS, RANGE_COLUMNS, ArgSpec, TraceWarning,
)
from profattn.trace.kineto import Trace, kernels_in_range, load_trace, ops_in_range, ranges_in_range
from profattn.trace.windows import IntervalIndex, group_keys

__all__ = [
    "GRAPH_LAUNCHERS", "KERNEL_ARG_SPEC", "KERNEL_COLUMNS", "OP_COLUMNS", "RANGE_COLUMNS", "ArgSpec", "IntervalIndex",
    "Trace", "TraceWarning", "group_keys", "kernels_in_range", "load_trace", "ops_in_range", "ranges_in_range",
]
