"""Shared test helpers: fixture paths, small workloads, a CPU device."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """``../shared`` beside the repository, or ``$PROFATTN_SHARED``."""
    env = os.environ.get("PROFATTN_SHARED")
    return Path(env) if env else REPO.parent / "shared"


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
