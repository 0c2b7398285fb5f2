"""On a CUDA device: kernels built by each pip-installable toolchain (NVRTC, the nvidia-cuda-nvcc
wheel; tests/support/artifacts/toolchains.py) behave exactly like the system nvcc's. The sample, ABI,
C++ kernel and kernel-library tests of test_gpu.py, test_gpu_abi.py and test_gpu_library.py
run again here, unchanged, on each toolchain's modules: same float64 references, same
tolerances, outputs poisoned first (NaN or a byte pattern, through the in-place builds).
Samples also run from PTX only (the driver JIT-compiles the toolchain's PTX) besides the
default cubins."""

from __future__ import annotations

from pathlib import Path

import pytest

from iree_dispatch import runtime

from ..support.artifacts.toolchains import TOOLCHAINS, build_toolchain, layout, make_toolchain
from ..support.environment import have_compiler
from ..support.gpu_abi_tests import (  # noqa: F401
    test_3d_grid_and_blocks,
    test_block_reduction_in_dynamic_shared_memory,
    test_every_pointer_element_type_round_trips,
    test_every_scalar_type_arrives_intact,
    test_size_t_as_argument_and_from_a_shape,
    test_template_instantiations,
)
from ..support.gpu_library_tests import test_kernel_matches_reference  # noqa: F401
from ..support.gpu_modules import prebuilt_dir
from ..support.gpu_sample_tests import test_axpby, test_simple_mul, test_simple_mul_inplace  # noqa: F401  (rerun on each toolchain's modules)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", params=TOOLCHAINS)
def built(request, tmp_path_factory) -> dict[str, Path]:
    """One toolchain's modules: built here if the compiler and that toolchain are installed,
    else the prebuilt ones (python -m tests.support.artifacts); skipped if that toolchain was not
    installed where they were built either."""
    from iree_dispatch.core.errors import ToolchainError

    name = request.param
    if have_compiler():
        try:
            make_toolchain(name)
        except ToolchainError as exc:
            pytest.skip(f"{name}: {exc}")
        return build_toolchain(name, tmp_path_factory.mktemp("toolchains"))
    prebuilt = prebuilt_dir("toolchains")
    paths = {key: prebuilt / rel for key, rel in layout(name).items()}
    if not any(p.exists() for p in paths.values()):
        pytest.skip(f"no modules of {name} in {prebuilt}: it was not installed where python -m tests.support.artifacts ran")
    missing = [str(p) for p in paths.values() if not p.exists()]
    if missing:
        pytest.fail(f"prebuilt modules of {name} missing: {missing}; run python -m tests.support.artifacts")
    return paths


@pytest.fixture(scope="module", params=("cubin", "ptx"))
def objects(request) -> str:
    """Which objects the samples run from: the default cubins, or the PTX alone."""
    return request.param


@pytest.fixture(scope="module")
def samples(built, objects):
    return runtime.load(built["samples" if objects == "cubin" else "ptx"])


@pytest.fixture(scope="module")
def poisonable(built, objects):
    return runtime.load(built["poisonable" if objects == "cubin" else "ptx_poisonable"])


@pytest.fixture(scope="module")
def abi(built):
    return runtime.load(built["abi"]), runtime.load(built["abi_poisonable"])


@pytest.fixture(scope="module")
def cxx(built):
    return runtime.load(built["cxx"]), runtime.load(built["cxx_poisonable"])


@pytest.fixture(scope="module")
def modules(built) -> dict[str, runtime.Module]:
    """The library modules, as test_gpu_library.py's fixture of this name gives them."""
    return {name: runtime.load(built[name]) for name in ("library", "library_poisonable")}
