"""The environment record names the CPU by its model, not by the machine type (``x86_64``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from profattn.harness.environment import collect_environment, cpu_name

X86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)  Platinum 8480+\n\nprocessor\t: 1\nmodel name\t: other\n"
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd40\n\nHardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n"


def test_cpu_name_from_cpuinfo(tmp_path: Path):
    (tmp_path / "x86").write_text(X86)
    (tmp_path / "arm").write_text(ARM)
    assert cpu_name(tmp_path / "x86") == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu_name(tmp_path / "arm") == "Raspberry Pi 4 Model B Rev 1.4"


@pytest.mark.parametrize("processor,machine,expected", [
    ("", "x86_64", "x86_64"),
    ("x86_64", "x86_64", "x86_64"),
    ("Intel64 Family 6 Model 143 Stepping 8, GenuineIntel", "AMD64", "Intel64 Family 6 Model 143 Stepping 8, GenuineIntel"),
])
def test_cpu_name_falls_back_to_platform(tmp_path: Path, monkeypatch, processor, machine, expected):
    monkeypatch.setattr("platform.processor", lambda: processor)
    monkeypatch.setattr("platform.machine", lambda: machine)
    assert cpu_name(tmp_path / "missing") == expected


def test_cpu_environment_names_the_model():
    env = collect_environment(torch.device("cpu"))
    assert env.device_name == cpu_name()
    cpuinfo = Path("/proc/cpuinfo")
    models = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
              if line.startswith("model name")] if cpuinfo.is_file() else []
    if not models:
        pytest.skip("no 'model name' in /proc/cpuinfo here")
    assert env.device_name == " ".join(models[0].split())
