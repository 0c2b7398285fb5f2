"""On a CUDA device: every kernel of the library (kernels/library.toml) against its float64
reference (kernels/references.py), as built and with its outputs NaN-poisoned first. The test
and its error bounds: tests/support/gpu_library_tests.py (toolchains/test_gpu_toolchains.py
runs it again on each toolchain's build)."""

from __future__ import annotations

import pytest

from iree_dispatch import runtime

from ..support.artifacts.library import LAYOUT, build_all
from ..support.gpu_library_tests import test_kernel_matches_reference  # noqa: F401  (collected here too)
from ..support.gpu_modules import module_paths

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict[str, runtime.Module]:
    return {name: runtime.load(path) for name, path in module_paths(tmp_path_factory, "library", LAYOUT, build_all).items()}
