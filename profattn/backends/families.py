"""The kernel families, re-exported from :mod:`profattn.families` (torch-free, outside this package)."""

from profattn.families import (  # noqa: F401
    ATTENTION_FAMILIES,
    CUDNN,
    DENSE,
    EFFICIENT,
    FLASH,
    FLEX,
    PAGED_GATHER,
    TRITON,
    KernelFamily,
)
