"""Attachments carry no host name, user name or absolute path by default; --keep-host-info keeps them."""

from __future__ import annotations

import gzip
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from profattn import privacy
from profattn.backends.registry import preserved
from profattn.cli import main
from profattn.results import read_results

HOST, USER = "build-host-7f3a", "alice-dev"


@pytest.fixture
def identity(monkeypatch):
    """Pretend to run on host ``build-host-7f3a`` as ``alice-dev``, so the test can look for both."""
    monkeypatch.setattr("platform.node", lambda: HOST)
    monkeypatch.setattr("getpass.getuser", lambda: USER)
    privacy.host_identifiers.cache_clear()
    yield
    privacy.host_identifiers.cache_clear()


@pytest.fixture
def leaky_plugin(tmp_path: Path, monkeypatch):
    """A plugin whose error names an absolute path, the host and the user (as real ones do)."""
    mod = tmp_path / "plugins" / "byok_leak.py"
    mod.parent.mkdir()
    mod.write_text(textwrap.dedent(f"""
        raise OSError("cannot open /home/{USER}/kernels/libfast.so on {HOST}")
    """))
    monkeypatch.syspath_prepend(str(mod.parent))
    with preserved():
        yield "byok_leak:backend"


def _texts(out: Path) -> dict[str, str]:
    files = {p: p.read_text(encoding="utf-8") for p in out.rglob("*") if p.is_file() and not p.name.endswith(".gz")}
    for p in out.rglob("*.gz"):
        with gzip.open(p, "rt", encoding="utf-8") as fh:
            files[p] = fh.read()
    return {str(p.relative_to(out)): t for p, t in files.items()}


def test_outputs_carry_no_host_user_or_absolute_path(tmp_path: Path, identity, leaky_plugin):
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["profile", "--preset", "small", "--regime", "decode", "--device", "cpu", "--no-counters",
                                    "--backend", "eager", "--backend", leaky_plugin, "--out", str(out), "--profile-calls", "1"])
    assert res.exit_code == 0, res.output
    assert CliRunner().invoke(main, ["summary", str(out), "--out", str(out / "summary.md")]).exit_code == 0
    assert CliRunner().invoke(main, ["compare", str(out), str(out), "--out", str(out / "compare.html"),
                                     "--markdown", str(out / "compare.md")]).exit_code == 0
    texts = _texts(out)
    assert {"results.json", "report.html", "summary.md", "compare.html", "compare.md"} <= set(texts)
    assert any(k.startswith("traces/decode/profattn.") for k in texts)
    for name, text in texts.items():
        for secret in (HOST, USER, str(tmp_path), "/home/", str(Path.cwd()), str(Path.home())):
            assert secret not in text, (name, secret)
    leak = next(c for c in read_results(out).cells if c.backend == leaky_plugin)
    assert leak.reason.endswith("OSError: cannot open libfast.so on <host>")


def test_keep_host_info_keeps_them(tmp_path: Path, identity):
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["profile", "--preset", "small", "--regime", "decode", "--device", "cpu", "--no-counters",
                                    "--backend", "eager", "--out", str(out), "--profile-calls", "1", "--keep-host-info"])
    assert res.exit_code == 0, res.output
    env = read_results(out).environment
    assert (env.hostname, env.user) == (HOST, USER)
    assert HOST in (out / "report.html").read_text()
    trace = next((out / "traces" / "decode").glob("*.gz"))
    assert not trace.name.startswith("profattn.")  # torch's <host>_<pid> worker name


def test_scrub_text_keeps_relative_paths_and_units(identity):
    assert privacy.scrub_text(f"/tmp/torchinductor_{USER}/j2/cj2x.py") == "cj2x.py"
    assert privacy.scrub_text("traces/decode/x.pt.trace.json.gz; 12 µs/call; https://example.org/a/b") == \
        "traces/decode/x.pt.trace.json.gz; 12 µs/call; https://example.org/a/b"
    assert privacy.scrub_text(f"{USER}@{HOST}") == "<user>@<host>"


@pytest.fixture
def short_host(monkeypatch):
    """Run on a machine called ``vm`` as user ``al`` (both shorter than the three characters once required)."""
    monkeypatch.setattr("platform.node", lambda: "vm")
    monkeypatch.setattr("getpass.getuser", lambda: "al")
    privacy.host_identifiers.cache_clear()
    yield
    privacy.host_identifiers.cache_clear()


def test_short_host_and_user_names_are_scrubbed_as_whole_words(short_host):
    assert privacy.scrub_text("cannot open libfast.so on vm as al.") == "cannot open libfast.so on <host> as <user>."
    # torch's worker name <host>_<pid>
    assert privacy.scrub_text("vm_4242.1795945608959266585.pt.trace.json") == "<host>_4242.1795945608959266585.pt.trace.json"
    # ordinary words and identifiers that contain the names stay whole
    text = "kvm vmax vm-2 gvm_x vm_x always alpha balance al_pha val"
    assert privacy.scrub_text(text) == text


def test_one_letter_names_are_not_scrubbed(monkeypatch):
    monkeypatch.setattr("platform.node", lambda: "a")
    monkeypatch.setattr("getpass.getuser", lambda: "b")
    privacy.host_identifiers.cache_clear()
    try:
        assert privacy.host_identifiers() == ()
        assert privacy.scrub_text("a b c") == "a b c"
    finally:
        privacy.host_identifiers.cache_clear()


def test_file_urls_lose_their_absolute_path(identity):
    assert privacy.scrub_text("see file:///tmp/w/x.py, line 3") == "see file://…/x.py, line 3"
    assert privacy.scrub_text(f"file://{HOST}/home/{USER}/r/report.html") == "file://…/report.html"
    assert privacy.scrub_text("https://example.org/a/b and file://x.py") == "https://example.org/a/b and file://x.py"


def test_scrub_keeps_enum_members(identity):
    from profattn.workload import Phase

    assert privacy.scrub([Phase.DECODE, "on " + HOST]) == [Phase.DECODE, "on <host>"]
    assert privacy.scrub(Phase.DECODE) is Phase.DECODE
