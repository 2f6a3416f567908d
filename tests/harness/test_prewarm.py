"""The JIT pre-build: which builds a run needs (one per backend and value of its ``jit_fields``) and how the child
processes' outcomes are read (statuses from exit code and last line, a time-out stopped)."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

from profattn.harness.prewarm import PrewarmTarget, _child, jit_targets, prewarm
from profattn.workload import parse_workload_spec

SEED = "hq=16,hkv=4,d=128,page=16"


@dataclass
class FakeBackend:
    name: str
    jit_fields: tuple[str, ...] = ("dtype", "head_dim")
    refuse_head_dim: int | None = None

    def unsupported_reason(self, workload, device):  # noqa: ANN001
        return "refused" if workload.head_dim == self.refuse_head_dim else None


def w(spec: str):
    return parse_workload_spec(spec)


def test_one_build_per_distinct_jit_fields_the_smallest_workload_kept():
    small = w(f"phase=decode,b=2,q=1,kv=512,{SEED}")
    big = w(f"phase=decode,b=8,q=1,kv=8192,{SEED}")
    d64 = w("phase=decode,b=8,q=1,kv=8192,hq=16,hkv=4,d=64,page=16")
    targets = jit_targets([FakeBackend("fi")], [big, small, d64], "cuda")
    assert [(t.backend, t.workload.head_dim, t.workload.batch) for t in targets] == [("fi", 128, 2), ("fi", 64, 8)]


def test_no_builds_on_a_cpu_for_undeclared_backends_or_refused_workloads():
    ws = [w(f"phase=decode,b=2,q=1,kv=512,{SEED}"), w("phase=decode,b=8,q=1,kv=8192,hq=16,hkv=4,d=64,page=16")]
    assert jit_targets([FakeBackend("fi")], ws, "cpu") == []
    assert jit_targets([FakeBackend("plain", jit_fields=())], ws, "cuda") == []
    only = jit_targets([FakeBackend("fi", refuse_head_dim=64)], ws, "cuda")
    assert [t.workload.head_dim for t in only] == [128]


def test_flashinfer_backends_declare_their_build_keys():
    from profattn.backends import get_backend

    assert get_backend("flashinfer-decode-tc").jit_fields == ("dtype", "kv_dtype", "head_dim", "window")
    assert "group_size" in get_backend("flashinfer-xqa-decode").jit_fields  # XQA builds per GQA group
    assert not getattr(get_backend("sdpa-cudnn"), "jit_fields", ())
    # two decode shapes of one dtype and head_dim share one build of the tensor-core decode; XQA's differ by group
    ws = [w(f"phase=decode,b=2,q=1,kv=512,{SEED}"), w("phase=decode,b=2,q=1,kv=512,hq=16,hkv=8,d=128,page=16")]
    tc = jit_targets([FakeBackend("tc", get_backend("flashinfer-decode-tc").jit_fields)], ws, "cuda")
    xqa = jit_targets([FakeBackend("xqa", get_backend("flashinfer-xqa-decode").jit_fields)], ws, "cuda")
    assert len(tc) == 1 and len(xqa) == 2


def _fake_python(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "python"
    exe.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


@pytest.mark.parametrize(("body", "status"), [
    ("echo building; echo prepared", "ok"),
    ("echo 'unsupported: FlashInfer runs on CUDA GPUs only'", "unsupported"),
    ("echo 'RuntimeError: nvcc failed'; exit 1", "failed"),
])
def test_child_outcomes(tmp_path: Path, body: str, status: str):
    t = PrewarmTarget("fi", w(f"phase=decode,b=2,q=1,kv=512,{SEED}"))
    (r,) = prewarm([t], python=_fake_python(tmp_path, body))
    assert r.status == status and r.target is t and r.seconds >= 0
    assert r.detail == {"ok": "prepared", "unsupported": "unsupported: FlashInfer runs on CUDA GPUs only",
                        "failed": "RuntimeError: nvcc failed"}[status]


def test_children_run_in_parallel_and_a_slow_one_is_stopped(tmp_path: Path):
    t = PrewarmTarget("fi", w(f"phase=decode,b=2,q=1,kv=512,{SEED}"))
    slow = _fake_python(tmp_path, "sleep 30; echo prepared")
    results = prewarm([t, t, t], python=slow, max_procs=3, timeout_s=0.5)
    assert [r.status for r in results] == ["timeout"] * 3
    assert all(r.seconds < 5 for r in results)  # all three at once, each stopped at its limit


def test_child_usage_and_unknown_backend(capsys):
    assert _child([]) == 2
    assert _child(["no-such-backend", f"phase=decode,b=2,q=1,kv=512,{SEED}"]) == 1
    assert "unknown backend" in capsys.readouterr().out
