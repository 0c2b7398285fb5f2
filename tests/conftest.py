"""Fixtures shared by the test folders (each folder's own are in its conftest.py; helpers that
are not fixtures are in tests/support/). CPU tests need nvcc and iree-base-compiler (both on
every build machine); GPU tests (marker `gpu`) need a CUDA device and skip cleanly without one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iree_dispatch import runtime

from .support.artifacts.samples import LAYOUT, build_all
from .support.environment import have_compiler
from .support.gpu_modules import module_paths


@pytest.fixture(scope="session", autouse=True)
def isolated_build_cache(tmp_path_factory):
    """Tests share one fresh build cache, never the user's."""
    os.environ["IREE_DISPATCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("build-cache"))


@pytest.fixture(scope="session", autouse=True)
def every_build_checked_at_flow_level():
    """Every module a test builds is also compiled to flow level, where IREE assigns buffers,
    and fails the test if two results of one dispatch share a buffer (tests/support/flow_check.py)."""
    if not have_compiler():
        yield
        return
    from .support.flow_check import check_build_outputs

    with pytest.MonkeyPatch.context() as patch:
        check_build_outputs(patch)
        yield


@pytest.fixture
def cu(tmp_path):
    """Writes a .cu file into tmp_path and returns its path: cu(text, name="k.cu")."""

    def write(text: str, name: str = "k.cu") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


# The sample modules (tests/support/artifacts/samples.py) the GPU tests of the runtime, the
# back end and the toolchains load; built once a session, or found prebuilt.


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> dict[str, Path]:
    return module_paths(tmp_path_factory, "", LAYOUT, build_all)


@pytest.fixture(scope="session")
def samples(artifacts):
    return runtime.load(artifacts["samples"])


@pytest.fixture(scope="session")
def poisonable(artifacts):
    """The sample kernels with their outputs taken as (NaN-filled) arguments."""
    return runtime.load(artifacts["poisonable"])


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
