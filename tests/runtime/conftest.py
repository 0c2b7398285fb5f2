"""Fixtures of the runtime's tests."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from iree_dispatch.runtime import compiled


@pytest.fixture
def private_module(tmp_path, monkeypatch):
    """A copy of the compiled launch module of its own (its own driver functions)."""
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    module, where = compiled.compile_at_first_use()
    assert module is not None, where
    assert str(tmp_path / "cache" / "launch") in where
    copy = tmp_path / Path(module.__file__).name.replace("_launch_", "_launch_copy_")
    shutil.copy(module.__file__, copy)
    spec = importlib.util.spec_from_file_location(compiled._MODULE_NAME, copy)
    private = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(private)
    return private


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    return torch


@pytest.fixture(scope="module")
def cupy():
    return pytest.importorskip("cupy")
