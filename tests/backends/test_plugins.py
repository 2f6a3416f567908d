"""Bring-your-own kernel: the example plugin package found through entry-point metadata and run end to
end on the CPU (Triton interpreter); ``--backend module:object``; plugins that fail stay local."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from profattn.backends import plugins, registry
from profattn.cli import main
from profattn.results import CellStatus, read_results
from profattn.harness.session import SessionConfig, run_session
from profattn.workload import Phase, Preset, Workload

REPO = Path(__file__).resolve().parents[2]
PLUGIN_SRC = REPO / "examples" / "plugin-decode" / "src"
#: Interpreter-sized decode (the interpreter runs one program at a time in numpy): GQA group 2, two pages.
TINY = Preset("tiny-decode", "test", (
    Workload(phase="decode", batch=2, q_len=1, kv_len=40, num_q_heads=4, num_kv_heads=2, head_dim=16,
             kv_layout="paged", page_size=16),
))


@pytest.fixture
def clean_registry():
    with registry.preserved():
        yield
    for name in [m for m in sys.modules if m.startswith(("profattn_plugin_decode", "byok_"))]:
        del sys.modules[name]


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch, clean_registry) -> Path:
    """The example package "installed": its source and a dist-info with its entry point on sys.path
    (what pip writes for ``pip install examples/plugin-decode``)."""
    site = tmp_path / "site"
    info = site / "profattn_plugin_decode-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: profattn-plugin-decode\nVersion: 0.1.0\n")
    entry = (REPO / "examples" / "plugin-decode" / "pyproject.toml").read_text().split('[project.entry-points."profattn.backends"]')[1].split("\n\n")[0]
    (info / "entry_points.txt").write_text("[profattn.backends]" + entry.replace("\"", "") + "\n")  # TOML quotes off
    monkeypatch.syspath_prepend(str(PLUGIN_SRC))
    monkeypatch.syspath_prepend(str(site))
    registry.load_installed(refresh=True)
    return site


def _module(tmp_path: Path, monkeypatch, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_entry_point_plugin_runs_end_to_end(installed_plugin, tmp_path: Path, cpu):
    from profattn.backends import all_backends, get_backend

    b = get_backend("onehead-decode")
    assert isinstance(b, plugins.PluginBackend), b.description
    assert b.origin.distribution == "profattn-plugin-decode"
    assert "onehead-decode" in [x.name for x in all_backends()]
    run = run_session(SessionConfig(preset=TINY, regimes=(Phase.DECODE,), backends=(b, get_backend("torch-paged-reference")),
                                    device=cpu, out_dir=tmp_path / "run", measure_ceilings=False, repeat=2, profile_calls=1))
    c = next(c for c in run.cells if c.backend == "onehead-decode")
    assert c.status == CellStatus.OK, c.reason
    assert c.correctness.passed and c.correctness.out_rel_err < 6e-3  # bf16 output rounding (2^-9 relative), fp32 accumulation, vs fp64
    assert c.family == "onehead-triton" and len(c.timing_repeats) == 2 and len(c.latency_samples_us) == 2
    assert c.notes == ("one program per (seq, query head): 8 programs, BLOCK_N 64",)
    assert c.trace is not None and c.trace.calls == 1
    again = read_results(tmp_path / "run")
    assert again.repeat == 2 and again.cells == run.cells


def test_backend_spec_on_the_command_line(tmp_path: Path, monkeypatch, clean_registry):
    """``--backend module:Class`` (a class is instantiated); a torch kernel keeps the CLI run quick — the
    Triton plugin's own end-to-end run is the entry-point test above."""
    _module(tmp_path, monkeypatch, "byok_sdpa", """
        import torch
        from profattn.backends import KernelFamily, Prepared

        class Sdpa:
            name, description = "byok-sdpa", "SDPA with GQA, as a plugin"
            family = KernelFamily("byok", kernel_patterns=(), op_patterns=(r"scaled_dot_product",))
            def unsupported_reason(self, workload, device): return None
            def prepare(self, workload, device):
                causal = workload.mask.value == "causal" and workload.q_len > 1
                return Prepared(forward=lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=causal, enable_gqa=True))
    """)
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["profile", "--preset", "small", "--regime", "decode", "--device", "cpu", "--no-counters",
                                    "--backend", "byok_sdpa:Sdpa", "--backend", "eager", "--out", str(out),
                                    "--profile-calls", "1", "--repeat", "3"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    cells = [c for c in read_results(out).cells if c.backend == "byok-sdpa"]
    assert len(cells) == 3 and all(c.status == CellStatus.OK and c.correctness.passed for c in cells), [c.reason for c in cells]
    assert all(len(c.latency_samples_us) == 3 for c in cells)
    assert all(c.trace is not None and c.trace.calls == 1 for c in cells)  # profiled by its registered name


def test_failing_plugins_become_cell_errors_with_their_name(tmp_path: Path, monkeypatch, clean_registry, cpu):
    _module(tmp_path, monkeypatch, "byok_import", "raise ImportError('libfancy.so: cannot open shared object file')\n")
    _module(tmp_path, monkeypatch, "byok_cell", """
        from profattn.backends import Prepared
        from profattn.families import DENSE

        class Prep:
            name, family, description = "byok-prepare", DENSE, "raises in prepare"
            def unsupported_reason(self, workload, device): return None
            def prepare(self, workload, device): raise RuntimeError("no kernel for this shape")

        class Call(Prep):
            name, description = "byok-call", "raises when called"
            def prepare(self, workload, device):
                def forward(q, k, v): raise ValueError("bad launch")
                return Prepared(forward=forward)

        class Garbage(Prep):
            name, description = "byok-garbage", "prepare returns 42"
            def prepare(self, workload, device): return 42

        class Exits(Prep):
            name, description = "byok-exit", "calls exit(3) when called"
            def prepare(self, workload, device):
                def forward(q, k, v): raise SystemExit(3)
                return Prepared(forward=forward)
    """)
    specs = ["byok_import:backend", "byok_cell:Prep", "byok_cell:Call", "byok_cell:Garbage", "byok_cell:Exits"]
    backends = tuple(registry.resolve_backend(s) for s in specs)
    from profattn.backends import get_backend

    run = run_session(SessionConfig(preset=TINY, regimes=(Phase.DECODE,), backends=(*backends, get_backend("eager")),
                                    device=cpu, out_dir=tmp_path / "run", measure_ceilings=False, profile_calls=1))
    by = {c.backend: c for c in run.cells}
    assert by["eager"].status == CellStatus.OK  # the run went on
    assert by["byok_import:backend"].status == CellStatus.ERROR
    assert by["byok_import:backend"].reason == ("plugin byok_import:backend: prepare failed: PluginLoadError: failed to load: "
                                               "ImportError: libfancy.so: cannot open shared object file")
    assert by["byok-prepare"].reason == "plugin byok_cell:Prep: prepare failed: RuntimeError: no kernel for this shape"
    assert by["byok-call"].reason == "plugin byok_cell:Call: ValueError: bad launch"
    assert by["byok-garbage"].reason == "plugin byok_cell:Garbage: prepare returned int, not a profattn.backends.Prepared"
    assert by["byok-exit"].status == CellStatus.ERROR and by["byok-exit"].reason == "plugin byok_cell:Exits: SystemExit: 3"


def test_malformed_backend_spec_is_a_usage_error(tmp_path: Path, monkeypatch, clean_registry):
    """What the command line got wrong exits 2 before anything runs (and leaves no --out behind)."""
    _module(tmp_path, monkeypatch, "byok_spec", "not_a_backend = object()\nimport json\n"
            "def needs_args(path):\n    raise AssertionError('called')\n")
    for spec, msg in (("a:b:c", "expected a backend name or package.module:object"),
                      ("nosuch.module:obj", "no module named 'nosuch'"),
                      ("byok_spec:missing", "byok_spec has no attribute 'missing'"),
                      ("byok_spec:not_a_backend", "object is not a profattn backend (missing: name (str)"),
                      # callables that are not backend factories are refused before anything calls them (os:system
                      # was called with no arguments and every cell errored, exit 0)
                      ("os:system", "not a profattn backend: a builtin (system), not a backend class or factory"),
                      ("os:fork", "not a profattn backend: a builtin (fork)"),
                      ("builtins:dict", "not a profattn backend: a builtin (dict)"),
                      ("shutil:rmtree", "not a profattn backend: rmtree comes from Python's standard library (shutil)"),
                      ("byok_spec:needs_args", "needs_args needs arguments (path); a backend factory takes none"),
                      # exit 0 with no output, and a debugger prompt, before: callables of the standard library
                      ("builtins:exit", "comes from Python's standard library (_sitebuiltins)"),
                      # (pdb:set_trace dropped into the debugger; under pytest it is pytest's wrapper, so pdb:Pdb here)
                      ("pdb:Pdb", "Pdb comes from Python's standard library (pdb)"),
                      ("profattn.backends:Backend", "Backend is an interface (a Protocol)")):
        out = tmp_path / "never"
        res = CliRunner().invoke(main, ["profile", "--device", "cpu", "--backend", spec, "--out", str(out)])
        assert res.exit_code == 2 and msg in res.output and "Traceback" not in res.output, (spec, res.output)
        assert not out.exists()


def test_same_plugin_named_twice_runs_once(installed_plugin, clean_registry):
    """By entry-point name and by module:object: one backend, not a name clash."""
    from profattn.backends import get_backend

    by_name = get_backend("onehead-decode")
    assert registry.resolve_backend("profattn_plugin_decode:backend") is by_name


def test_backends_lists_a_broken_installed_plugin_as_unavailable(tmp_path: Path, monkeypatch, clean_registry):
    site = tmp_path / "site"
    info = site / "byok_broken-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: byok-broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[profattn.backends]\nbyok-broken = byok_broken_mod:backend\n")
    (site / "byok_broken_mod.py").write_text("raise ImportError('needs libfoo')\n")
    monkeypatch.syspath_prepend(str(site))
    registry.load_installed(refresh=True)
    res = CliRunner().invoke(main, ["backends", "--device", "cpu"])
    line = next(ln for ln in res.output.splitlines() if ln.startswith("byok-broken"))
    assert res.exit_code == 0 and "unavailable: failed to load: ImportError: needs libfoo" in line
