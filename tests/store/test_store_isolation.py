"""issue 33, item 8: the test suite never writes into the user's results store — not even from a module-scoped
fixture, which runs before any function-scoped one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from profattn.store import default_db_path


@pytest.fixture(scope="module")
def module_store() -> Path:
    return Path(default_db_path())


def test_a_module_scoped_fixture_sees_a_temporary_store(module_store: Path, tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    assert module_store.is_relative_to(base), module_store
    assert not module_store.is_relative_to(Path.home() / ".cache")
    assert Path(os.environ["XDG_CACHE_HOME"]).is_relative_to(base)
