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


def test_machine_state_is_recorded_and_read_back(tmp_path):
    """Threads, load average and (on a GPU) clocks/temperature are part of the result."""
    import dataclasses

    import torch

    from profattn.harness.environment import collect_environment, load_average
    from profattn.results import RunResult, read_results, write_results

    env = collect_environment(torch.device("cpu"))
    assert env.cpu_count and env.cpu_count >= 1
    assert env.torch_threads == torch.get_num_threads()
    la = load_average()
    assert la is not None and len(la) == 3 and env.load_avg_start is not None
    env = dataclasses.replace(env, load_avg_end=(9.5, 3.0, 1.0))
    path = write_results(RunResult(environment=env, preset="p", preset_description="", cells=()), tmp_path / "results.json")
    back = read_results(path).environment
    assert back.load_avg_end == (9.5, 3.0, 1.0) and back.load_avg_start == env.load_avg_start
    assert back.torch_threads == env.torch_threads


def test_noise_findings_from_spread_and_load():
    """A loaded 2-core machine: many cells with p90/p10 > 1.5 and a load above the cores are both findings;
    a quiet run has none."""
    import dataclasses

    from factories import SEED, cell, environment, run
    from profattn.analysis.run.noise import NoiseKind, noise_findings
    from profattn.results import Timing

    w = SEED.workloads
    quiet = run([cell(w[0], "a", 100.0), cell(w[1], "a", 50.0), cell(w[2], "a", 10.0)])
    assert noise_findings(quiet) == ()
    # the medians on a loaded CPU: 7,993 / 7,998 / 23,994 µs with wide spreads
    noisy_cells = [dataclasses.replace(cell(wl, "a", m), timing=Timing(m, m / 2, m * 1.5, m / 2, 20, "t"))
                   for wl, m in zip(w, (7993.0, 7998.0, 23994.0))]
    env = dataclasses.replace(environment("cpu", None), cpu_count=2, load_avg_start=(3.9, 2.0, 1.0), load_avg_end=(1.0, 1.0, 1.0))
    noisy = dataclasses.replace(run(noisy_cells, device="cpu"), environment=env)
    found = {f.kind: f for f in noise_findings(noisy)}
    assert found[NoiseKind.SPREAD].count == 3 and found[NoiseKind.SPREAD].of == 3
    assert found[NoiseKind.SPREAD].worst == pytest.approx(3.0)
    assert found[NoiseKind.LOAD].worst == 3.9 and found[NoiseKind.LOAD].threshold == 2.0


def test_optional_kernel_packages_are_recorded_by_their_metadata(tmp_path, monkeypatch):
    """FlashInfer's and the cuDNN frontend's versions come from their distributions' metadata (no import), reach
    results.json and the results store's ``flashinfer`` column; absent packages are None."""
    from importlib import metadata

    from profattn.harness import environment
    from profattn.results import RunResult, read_results, write_results
    from profattn.store.records import stored_run

    installed = {"flashinfer-python": "0.5.3"}

    def version(dist):
        if dist not in installed:
            raise metadata.PackageNotFoundError(dist)
        return installed[dist]

    monkeypatch.setattr(metadata, "version", version)
    assert environment.package_version("flashinfer-python") == "0.5.3"
    assert environment.package_version("nvidia-cudnn-frontend") is None
    env = collect_environment(torch.device("cpu"))
    assert (env.flashinfer, env.cudnn_frontend) == ("0.5.3", None)
    run = RunResult(environment=env, preset="p", preset_description="", cells=())
    back = read_results(write_results(run, tmp_path / "results.json")).environment
    assert (back.flashinfer, back.cudnn_frontend) == ("0.5.3", None)
    assert stored_run(run, str(tmp_path), "2026-12-02T00:00:00Z", 0).flashinfer == "0.5.3"
    installed["nvidia-cudnn-frontend"] = "1.16.0"
    assert collect_environment(torch.device("cpu")).cudnn_frontend == "1.16.0"


def test_results_written_by_a_later_profattn_are_read(tmp_path):
    """Fields a later profattn adds to the environment or a trace summary are skipped, not a failed read."""
    import json

    from profattn.results import RunResult, read_results, write_results

    path = write_results(RunResult(environment=collect_environment(torch.device("cpu")), preset="p",
                                   preset_description="", cells=()), tmp_path / "results.json")
    data = json.loads(path.read_text())
    data["environment"]["some_future_version"] = "9"
    path.write_text(json.dumps(data))
    assert read_results(path).environment.device == "cpu"
