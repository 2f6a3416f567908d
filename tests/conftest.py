"""Shared test helpers: fixture paths, small workloads, a CPU device."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]

# File names of the real traces in ``shared/fixtures/traces`` (see shared/README.md).
FLASH = "h200_sdpa_decode_flash_gqa.pt.trace.json.gz"
MATH = "h200_sdpa_decode_math_gqa.pt.trace.json.gz"
ALEXNET = "hta_critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz"
CPU_ONLY = "hta_cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
AMD = "hta_amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
OLD_SCHEMA = "hta_trace_file_list_inference_rank_1.json.gz"
NCCL = "hta_nccl_parser_config_nccl_data.json.gz"  # 40,573 events, 2,700 kernels, 14,346 CPU ops


def shared_dir() -> Path:
    """``../shared`` beside the repository, or ``$PROFATTN_SHARED``."""
    env = os.environ.get("PROFATTN_SHARED")
    return Path(env) if env else REPO.parent / "shared"


def trace_fixture(name: str) -> Path:
    """A shared trace fixture (``fixtures/traces/<name>``); skips the test when it is absent."""
    path = shared_dir() / "fixtures" / "traces" / name
    if not path.is_file():
        pytest.skip(f"shared trace fixture {name} not found (set PROFATTN_SHARED)")
    return path


@pytest.fixture
def fixtures_dir() -> Path:
    d = shared_dir() / "fixtures"
    if not d.is_dir():
        pytest.skip(f"shared fixtures not found at {d}")
    return d


@pytest.fixture
def cpu() -> torch.device:
    return torch.device("cpu")


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
