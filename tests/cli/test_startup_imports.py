"""Fast start: the quick commands import only what they use (heavy packages — pandas, numpy, plotly, jinja2, torch —
where used). Checked in a fresh interpreter: ``recommend`` answering from a store loads none of them; ``analyze``
loads pandas and numpy (the trace frames) and jinja2 (the page), never plotly or torch. The timings are a benchmark
(``benchmarks/startup.py``), not a test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "numpy", "plotly", "jinja2", "torch", "triton", "rich")

_PROBE = """
import json, sys
from profattn.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "loaded": sorted(m for m in {heavy} if m in sys.modules)}), file=sys.stderr)
"""


def _loaded(tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    res = subprocess.run([sys.executable, "-c", _PROBE.replace("{heavy}", repr(set(HEAVY))), *args], env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    report = json.loads(res.stderr.strip().splitlines()[-1])
    return report["code"], report["loaded"]


def test_recommend_imports_no_heavy_package(tmp_path: Path):
    db = tmp_path / "store.sqlite"
    code, _ = _loaded(tmp_path, "db", "import", str(REPO / "examples" / "h200-seed"), "--db", str(db))
    assert code in (0, None)
    code, loaded = _loaded(tmp_path, "recommend", "--workload", "phase=decode,b=8,q=1,kv=8192,hq=16,hkv=4,d=128,page=16",
                           "--db", str(db))
    assert code in (0, None) and loaded == [], loaded


def test_analyze_imports_no_plotly_and_no_torch(tmp_path: Path):
    trace = REPO / "tests" / "data" / "traces" / "h200_sdpa_decode_flash_gqa.pt.trace.json.gz"
    code, loaded = _loaded(tmp_path, "analyze", str(trace), "--out", str(tmp_path / "a.html"))
    assert code in (0, None) and set(loaded) == {"pandas", "numpy", "jinja2"}, loaded


def test_an_unknown_device_is_refused_before_any_heavy_import(tmp_path: Path):
    """``profile --device tpu`` imported torch and every backend (~3 s) before refusing; now one line, exit 2,
    nothing heavy loaded (likewise ``backends`` and ``sweep``)."""
    for args in (["profile", "--device", "tpu", "--out", str(tmp_path / "r")], ["backends", "--device", "tpu"],
                 ["sweep", "decode", "--device", "tpu"]):
        code, loaded = _loaded(tmp_path, *args)
        assert code == 2 and loaded == [], (args, loaded)
    assert not (tmp_path / "r").exists()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-m", "profattn", "profile", "--device", "tpu"], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 2 and res.stderr == "profattn: error: unknown device 'tpu'; valid: cuda, cuda:N, cpu\n"
