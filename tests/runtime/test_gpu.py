"""On a CUDA device: every sample kernel against its float64 numpy reference, the mixed
program, arch selection, and the no-variant error. Skipped where no CUDA device exists."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from iree_dispatch import runtime
from iree_dispatch.core.errors import DeviceError

from ..support.environment import ROOT
from ..support.gpu_sample_tests import SIZES, fresh, nan, references, test_axpby, test_simple_mul, test_simple_mul_inplace  # noqa: F401  (collected here too)

pytestmark = pytest.mark.gpu


def test_axpby_misaligned_pointers_take_the_scalar_path(artifacts):
    """IREE may hand a kernel a binding at any element offset. Launch the same PTX with CuPy
    on pointers 4 bytes past a 16-byte boundary: the float4 path must not be taken."""
    cupy = pytest.importorskip("cupy")
    kernel = cupy.RawModule(path=str(artifacts["samples"].parent / "samples.objects" / "axpby.sm_80.ptx")).get_function("axpby")
    rng = np.random.default_rng()
    n = 4099
    x, y = fresh(rng, n + 1), fresh(rng, n + 1)
    dx, dy, dout = cupy.asarray(x), cupy.asarray(y), cupy.full(n + 1, cupy.nan, dtype=cupy.float32)
    assert dout[1:].data.ptr % 16 == 4
    kernel((8,), (256,), (dx[1:], dy[1:], dout[1:], np.int32(n), np.float32(1.5), np.float32(-0.5)))
    got = cupy.asnumpy(dout[1:])
    assert np.allclose(got, references.axpby(x[1:], y[1:], 1.5, -0.5), rtol=1e-6, atol=1e-6)


def test_a_kernel_that_skips_elements_is_caught(artifacts):
    """The checks above can fail: a kernel writing only even elements leaves the poison in
    place, and through IREE-allocated outputs leaves values that don't match either."""
    rng = np.random.default_rng()
    n = 1000
    a, b = fresh(rng, n), fresh(rng, n)
    got = runtime.load(artifacts["broken_poisonable"]).mul_even_only(a, b, nan(n))
    np.testing.assert_array_equal(got[::2], (a * b)[::2])
    assert np.isnan(got[1::2]).all()
    got = runtime.load(artifacts["broken"]).mul_even_only(a, b)
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(got, a * b)


def test_device_arrays_stay_on_device(samples):
    rng = np.random.default_rng()
    a, b = fresh(rng, 1000), fresh(rng, 1000)
    out = samples.simple_mul(samples.to_device(a), samples.to_device(b))
    assert not isinstance(out, np.ndarray)
    chained = samples.simple_mul_inplace(out, samples.to_device(b))
    np.testing.assert_array_equal(chained.to_host(), (a * b) * b)


def test_bad_call_on_gpu_raises_before_launch(samples):
    with pytest.raises(ValueError, match=r"argument 'rhs' dim 0 is 3, but n = 4"):
        samples.simple_mul(np.ones(4, np.float32), np.ones(3, np.float32))


def test_mixed_program_returns_96(artifacts):
    program = runtime.load(artifacts["mixed_invocation"])
    got = program.mixed_invocation(np.full(8, 2, np.float32), np.full(8, 4, np.float32)).to_host()
    np.testing.assert_array_equal(got, np.full(8, 96, np.float32))
    rng = np.random.default_rng()
    for n in SIZES:
        lhs, rhs = fresh(rng, n), fresh(rng, n)
        got = program.mixed_invocation(lhs, rhs).to_host()
        np.testing.assert_allclose(got, references.mixed_invocation(lhs, rhs), rtol=1e-6)


def test_sm100_variant_listed_first_is_skipped_on_older_gpus(artifacts):
    capability = runtime.cuda_compute_capability()
    assert capability is not None
    if capability >= (10, 0):
        pytest.skip("this GPU runs sm_100 itself")
    module = runtime.load(artifacts["samples_sm100_first"])
    assert module.simple_mul.description.archs[0] == "sm_100"
    rng = np.random.default_rng()
    a, b = fresh(rng, 2**20 + 3), fresh(rng, 2**20 + 3)
    # Had the sm_100 PTX been picked, loading it would fail with CUDA_ERROR_INVALID_PTX.
    np.testing.assert_array_equal(module.simple_mul(a, b), a * b)
    assert runtime.runs_on(module.simple_mul.description.archs, capability) != "sm_100"


def test_no_runnable_variant_names_gpu_and_archs(artifacts):
    capability = runtime.cuda_compute_capability()
    if capability >= (10, 0):
        pytest.skip("this GPU can run sm_100")
    with pytest.raises(DeviceError) as err:
        runtime.load(artifacts["samples_only_sm100"])
    message = str(err.value)
    assert f"compute capability {capability[0]}.{capability[1]}" in message and "built for sm_100" in message


def test_cli_run_mirrors_iree_run_module(artifacts):
    result = subprocess.run(
        [sys.executable, "-m", "iree_dispatch.cli", "run", str(artifacts["mixed_invocation"]),
         "--function=mixed_invocation", "--input=8xf32=2", "--input=8xf32=4"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "8xf32=96 96 96 96 96 96 96 96"
    result = subprocess.run(
        [sys.executable, "-m", "iree_dispatch.cli", "run", str(artifacts["samples"]), "--function=axpby",
         "--input=5xf32=1", "--input=5xf32=2", "--input=f32=3", "--input=0.5"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "5xf32=4 4 4 4 4"


def test_device_name_is_reported():
    name = runtime.cuda_device_name()
    assert name and re.search(r"NVIDIA", name)
