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


def collect_environment(device: torch.device, *, keep_host_info: bool = False) -> Environment:
    """GPU name (the CPU's model name on a CPU, :func:`cpu_name`), SM count, L2 size, memory, driver and
    torch/CUDA/cuDNN/triton versions; the host and user names only when ``keep_host_info`` (``--keep-host-info``)."""
    name, sms, l2, mem, driver = cpu_name(), None, None, None, None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name, sms, mem = props.name, props.multi_processor_count, props.total_memory
        l2 = getattr(props, "L2_cache_size", None)
        try:
            import subprocess

            driver = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10, check=False,
            ).stdout.strip().splitlines()[0] or None
        except (OSError, IndexError, subprocess.SubprocessError):
            driver = None
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
        driver=driver,
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
    )
