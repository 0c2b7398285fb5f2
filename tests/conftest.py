"""Shared fixtures. CPU tests need nvcc and iree-base-compiler (both on every build machine);
GPU tests (marker `gpu`) need a CUDA device and skip cleanly without one."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES_SPEC = ROOT / "kernels" / "samples.toml"
MIXED_PROGRAM = ROOT / "mlir" / "mixed_invocation.mlir"


def have_compiler() -> bool:
    return importlib.util.find_spec("iree.compiler") is not None


def have_nvcc() -> bool:
    from iree_dispatch.errors import ToolchainError
    from iree_dispatch.toolchain import find_nvcc

    try:
        find_nvcc()
        return True
    except ToolchainError:
        return False


@pytest.fixture(scope="session", autouse=True)
def isolated_build_cache(tmp_path_factory):
    """Tests share one fresh build cache, never the user's."""
    os.environ["IREE_DISPATCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("build-cache"))


needs_build_tools = pytest.mark.skipif(
    not (have_compiler() and (os.environ.get("NVCC") or shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists())),
    reason="needs nvcc and iree-base-compiler",
)


@pytest.fixture
def cu(tmp_path):
    """Writes a .cu file into tmp_path and returns its path: cu(text, name="k.cu")."""

    def write(text: str, name: str = "k.cu") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


def pytest_collection_modifyitems(config, items):
    """GPU tests skip (not fail) where no CUDA device can be opened."""
    if not any("gpu" in item.keywords for item in items):
        return
    from iree_dispatch.runtime import cuda_device_available

    if cuda_device_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
