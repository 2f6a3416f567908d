"""Shared test helpers: fixture paths, small workloads, a CPU device."""

from __future__ import annotations

import os

# Triton's interpreter mode is fixed when ``triton`` is first imported (its ``@jit`` library functions are built then):
# set before anything imports it, so a test file run alone sees the same Triton the whole suite does (the kernel tests
# set it at import, which collecting them does first). Unset, a CLI test that imports Triton through Inductor before
# a later test asks for the interpreter fails with "Cannot call @triton.jit'd outside of the scope of a kernel".
os.environ.setdefault("TRITON_INTERPRET", "1")

from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path

import pytest  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# The real traces and Nsight Compute output the tests read live in ``tests/data`` (see its README.md).
DATA = Path(__file__).resolve().parent / "data"

# File names of the real traces in ``tests/data/traces``.
FLASH = "h200_sdpa_decode_flash_gqa.pt.trace.json.gz"
MATH = "h200_sdpa_decode_math_gqa.pt.trace.json.gz"
ALEXNET = "hta_critical_path_alexnet_benchmark_result_2869224_1695835535_trace.json.gz"
CPU_ONLY = "hta_cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
AMD = "hta_amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
OLD_SCHEMA = "hta_trace_file_list_inference_rank_1.json.gz"
NCCL = "hta_nccl_parser_config_nccl_data.json.gz"  # 40,573 events, 2,700 kernels, 14,346 CPU ops


def trace_fixture(name: str) -> Path:
    """A real trace fixture, ``tests/data/traces/<name>``.

    Raises:
        FileNotFoundError: the file is not in ``tests/data/traces`` (a missing fixture is a failure, not a skip).
    """
    path = DATA / "traces" / name
    if not path.is_file():
        raise FileNotFoundError(f"trace fixture {path} is missing from the repository")
    return path


def ncu_fixture(name: str) -> Path:
    """A real Nsight Compute CSV fixture, ``tests/data/ncu/<name>``.

    Raises:
        FileNotFoundError: the file is not in ``tests/data/ncu``.
    """
    path = DATA / "ncu" / name
    if not path.is_file():
        raise FileNotFoundError(f"ncu fixture {path} is missing from the repository")
    return path


@pytest.fixture
def fixtures_dir() -> Path:
    """``tests/data`` (``traces/`` and ``ncu/`` below it)."""
    return DATA


@pytest.fixture
def cpu() -> torch.device:
    return torch.device("cpu")


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="session", autouse=True)
def _private_store_for_the_session(tmp_path_factory):
    """The results store (``$PROFATTN_DB``) and the cache directory (``$XDG_CACHE_HOME``) are temporary for the whole
    session, before any module- or class-scoped fixture runs (issue 33: a module-scoped fixture's ``profile`` wrote
    into ``~/.cache/profattn/results.sqlite`` before the per-test store below was set)."""
    with pytest.MonkeyPatch.context() as mp:
        base = tmp_path_factory.mktemp("session-store")
        mp.setenv("PROFATTN_DB", str(base / "results.sqlite"))
        mp.setenv("XDG_CACHE_HOME", str(base / "cache"))
        yield base


@pytest.fixture(autouse=True)
def _private_results_store(tmp_path_factory, monkeypatch):
    """Every test's results store is its own temporary file (``$PROFATTN_DB``): ``profile`` runs in tests never
    write to the user's cache directory."""
    monkeypatch.setenv("PROFATTN_DB", str(tmp_path_factory.mktemp("store") / "results.sqlite"))


@contextmanager
def script_module(path: Path, name: str):
    """The Python file ``path`` (a script outside the package: ``benchmarks/``, ``tests/data/scripts/``) imported as
    module ``name``, registered in ``sys.modules`` while in use (its dataclasses look their module up there)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


@dataclass(frozen=True)
class CpuRun:
    """A ``profattn profile`` made once for the session: its run directory and what it printed."""

    out: Path
    output: str


@pytest.fixture(scope="session")
def small_cpu_run(tmp_path_factory, _private_store_for_the_session) -> CpuRun:
    """``profattn profile --regime all --preset small --device cpu`` (the default backends), once for the whole
    session (tests read it, never write into it)."""
    from click.testing import CliRunner

    from profattn.cli import main

    out = tmp_path_factory.mktemp("run") / "small"
    # as a CPU user runs it: without the Triton interpreter our Triton kernels are unsupported with the reason
    # (under it their interpreted cells took 100 of this run's 118 s; tests/backends runs them)
    try:  # triton.jit reads TRITON_INTERPRET at import: the kernels are imported here under it, as every other
        import profattn.backends.kernels.paged_decode  # noqa: F401  test has them
        import profattn.backends.kernels.paged_varlen  # noqa: F401
    except ImportError:  # no Triton installed: its backends are unsupported either way
        pass

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("TRITON_INTERPRET", raising=False)
        res = CliRunner().invoke(main, ["profile", "--regime", "all", "--preset", "small", "--device", "cpu",
                                        "--out", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return CpuRun(out, res.output)
