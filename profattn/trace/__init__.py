"""The trace layer: Kineto traces and Nsight Compute CSV read into DataFrames. Torch-free; knows nothing
of cells or backends."""

from profattn.trace.kineto import (
    GRAPH_LAUNCHERS, KERNEL_ARG_SPEC, KERNEL_COLUMNS, OP_COLUMNS, RANGE_COLUMNS, ArgSpec, Trace,
    TraceWarning, kernels_in_range, load_trace, ops_in_range,
)

__all__ = [
    "GRAPH_LAUNCHERS", "KERNEL_ARG_SPEC", "KERNEL_COLUMNS", "OP_COLUMNS", "RANGE_COLUMNS", "ArgSpec",
    "Trace", "TraceWarning", "kernels_in_range", "load_trace", "ops_in_range",
]
