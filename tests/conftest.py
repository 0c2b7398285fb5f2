"""Shared fixtures. CPU tests need nvcc and iree-base-compiler (both on every build machine);
GPU tests (marker `gpu`) need a CUDA device and skip cleanly without one."""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES_SPEC = ROOT / "kernels" / "samples.toml"
MIXED_PROGRAM = ROOT / "mlir" / "mixed_invocation.mlir"


def have_compiler() -> bool:
    return importlib.util.find_spec("iree.compiler") is not None


def have_nvcc() -> bool:
    from iree_dispatch.core.errors import ToolchainError
    from iree_dispatch.toolchains import find_nvcc

    try:
        find_nvcc()
        return True
    except ToolchainError:
        return False


def prebuilt_dir(subdir: str = "") -> Path:
    """Where `python -m artifacts` put the GPU tests' modules, for a GPU machine with
    no compiler: $IREE_DISPATCH_PREBUILT (default build/gpu-tests), then `subdir`."""
    return Path(os.environ.get("IREE_DISPATCH_PREBUILT", ROOT / "build" / "gpu-tests")) / subdir


def load_references():
    """kernels/references.py (the kernels' float64 references), loaded by path as a fresh module."""
    loader = importlib.util.spec_from_file_location("references", ROOT / "kernels" / "references.py")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def module_paths(tmp_path_factory, subdir: str, layout: Mapping[str, str], build_all: Callable[[Path], dict[str, Path]],
                 keep: Callable[[str, Path], bool] = lambda name, path: True) -> dict[str, Path]:
    """name → module path for a GPU test: built into a fresh folder where the compiler is
    installed, else layout's paths under prebuilt_dir(subdir) that `keep` keeps; a missing
    one fails the test and names the command that builds them."""
    if have_compiler():
        return build_all(tmp_path_factory.mktemp(subdir))
    prebuilt = prebuilt_dir(subdir)
    paths = {name: prebuilt / rel for name, rel in layout.items() if keep(name, prebuilt / rel)}
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        pytest.fail(f"no compiler here and prebuilt modules missing: {missing}; run python -m artifacts")
    return paths


def loaded_modules(tmp_path_factory, subdir: str, layout: Mapping[str, str], build_all: Callable[[Path], dict[str, Path]]) -> dict:
    """module_paths' vmfbs, loaded on the GPU: name → iree_dispatch.runtime.Module."""
    from iree_dispatch import runtime

    paths = module_paths(tmp_path_factory, subdir, layout, build_all)
    return {name: runtime.load(path) for name, path in paths.items() if path.suffix == ".vmfb"}


def bfloat16():
    """numpy has no bfloat16; ml_dtypes (as iree_dispatch.runtime) provides it."""
    import numpy as np

    ml_dtypes = pytest.importorskip("ml_dtypes")
    return np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(scope="session", autouse=True)
def isolated_build_cache(tmp_path_factory):
    """Tests share one fresh build cache, never the user's."""
    os.environ["IREE_DISPATCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("build-cache"))


@pytest.fixture(scope="session", autouse=True)
def every_build_checked_at_flow_level():
    """Every module a test builds is also compiled to flow level, where IREE assigns buffers,
    and fails the test if two results of one dispatch share a buffer (tests/flow_check.py)."""
    if not have_compiler():
        yield
        return
    from .flow_check import check_build_outputs

    with pytest.MonkeyPatch.context() as patch:
        check_build_outputs(patch)
        yield


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
