"""The run's environment record: device and library versions, without host or user names."""

from __future__ import annotations

import datetime as _dt
import getpass
import os
import platform

import torch

import profattn
from profattn.results import Environment


def cpu_name(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> str:
    """The CPU's model name: the first ``model name`` (x86) or ``Model``/``Hardware`` (Arm) line of
    ``cpuinfo``, else :func:`platform.processor` when it says more than the machine type, else
    :func:`platform.machine` (e.g. ``x86_64``)."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                if sep and value.strip():
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    for key in ("model name", "Model", "Hardware"):
        if fields.get(key):
            return " ".join(fields[key].split())
    processor = platform.processor().strip()
    machine = platform.machine()
    return processor if processor and processor != machine else (machine or processor or "cpu")


def load_average() -> tuple[float, float, float] | None:
    """The 1, 5 and 15-minute load averages (``os.getloadavg``), None where the platform has none."""
    try:
        one, five, fifteen = os.getloadavg()
    except (OSError, AttributeError):
        return None
    return (round(one, 2), round(five, 2), round(fifteen, 2))


def _nvidia_smi(device: torch.device) -> dict[str, str]:
    """``nvidia-smi --query-gpu`` fields of ``device`` (driver, SM/memory clocks in MHz, temperature in °C);
    empty where nvidia-smi is missing or fails."""
    import subprocess

    keys = ("driver_version", "clocks.sm", "clocks.mem", "temperature.gpu")
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(keys)}", "--format=csv,noheader,nounits", f"--id={device.index or 0}"],
            capture_output=True, text=True, timeout=10, check=False,
        ).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out[0].split(",")] if out else []
    return dict(zip(keys, values)) if len(values) == len(keys) else {}


#: Distributions of the optional kernel packages whose versions a run records (``Environment`` field → distribution).
OPTIONAL_PACKAGES = {"flashinfer": "flashinfer-python", "cudnn_frontend": "nvidia-cudnn-frontend"}


def package_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` from its metadata (``importlib.metadata``, which also finds wheels
    installed with ``pip install --target DIR`` when ``DIR`` is on ``sys.path``), None when not installed. Nothing is
    imported: FlashInfer's import is heavy and may fail on a machine without CUDA."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - a broken dist-info must not stop a run
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(float(text)) if text is not None else None
    except ValueError:
        return None


def collect_environment(device: torch.device, *, keep_host_info: bool = False) -> Environment:
    """GPU name (the CPU's model name on a CPU, :func:`cpu_name`), SM count, L2 size, memory, driver and
    torch/CUDA/cuDNN/triton versions, FlashInfer's and the cuDNN frontend's where installed (:func:`package_version`);
    the host and user names only when ``keep_host_info`` (``--keep-host-info``)."""
    name, sms, l2, mem, smi = cpu_name(), None, None, None, {}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name, sms, mem = props.name, props.multi_processor_count, props.total_memory
        l2 = getattr(props, "L2_cache_size", None)
        smi = _nvidia_smi(device)
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return Environment(
        device=device.type,
        device_name=name,
        num_sms=sms,
        l2_cache_bytes=l2,
        total_memory_bytes=mem,
        driver=smi.get("driver_version") or None,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cudnn=str(cudnn) if cudnn else None,
        triton=triton_version,
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        profattn=profattn.__version__,
        created_utc=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        hostname=platform.node() if keep_host_info else None,
        user=getpass.getuser() if keep_host_info else None,
        cpu_count=os.cpu_count(),
        torch_threads=torch.get_num_threads(),
        omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
        load_avg_start=load_average(),
        gpu_sm_clock_mhz=_int(smi.get("clocks.sm")),
        gpu_mem_clock_mhz=_int(smi.get("clocks.mem")),
        gpu_temperature_c=_int(smi.get("temperature.gpu")),
        **{field: package_version(dist) for field, dist in OPTIONAL_PACKAGES.items()},
    )
