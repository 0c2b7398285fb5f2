"""On a CUDA device: template kernels the build instantiated (non-type parameters, defaults, a
source's own explicit instantiation; built with nvcc and with NVRTC) and kernels over CUDA
vector types (float4, half2, uchar4, int2), against numpy on fresh random data at awkward
sizes. Every output is checked fresh and passed in poisoned (artifacts/templates.py)."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.artifacts.templates import LAYOUT, build_all
from ..support.gpu_modules import module_paths

pytestmark = pytest.mark.gpu

SIZES = (1, 3, 257, 1000, 4097, 65537)
POWERS_OF_TWO = (256, 4096, 65536)


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    return {name: runtime.load(path) for name, path in module_paths(tmp_path_factory, "templates", LAYOUT, build_all).items()}


def _poison(shape, dtype):
    """An output's contents before the call: a pattern no kernel here computes (NaN for floats)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.full(shape, np.nan, dtype)
    return np.full(shape, np.iinfo(dtype).max - 3, dtype)


def _partial_sums(x: np.ndarray, per_block: int) -> np.ndarray:
    """What each block of reduce<...> writes: the sum of its `per_block` elements, in float64."""
    blocks = -(-len(x) // per_block)
    padded = np.zeros(blocks * per_block, np.float64)
    padded[: len(x)] = x
    return padded.reshape(blocks, per_block).sum(axis=1)


@pytest.mark.parametrize("built", ["templates_nvcc", "templates_nvrtc"])
@pytest.mark.parametrize("function, block, sizes", [("reduce_float_256_false", 256, SIZES), ("reduce_float_128_true", 128, POWERS_OF_TWO)])
def test_reduce_instantiations(modules, built, function, block, sizes):
    rng = np.random.default_rng()
    for n in sizes:
        x = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        want = _partial_sums(x, 2 * block)
        tolerance = 1e-5 * (2 * block)
        np.testing.assert_allclose(np.asarray(getattr(modules[built], function)(x)), want, atol=tolerance)
        got = getattr(modules["templates_poisonable"], function)(x, _poison(len(want), np.float32))
        np.testing.assert_allclose(np.asarray(got), want, atol=tolerance)


@pytest.mark.parametrize("built", ["templates_nvcc", "templates_nvrtc"])
@pytest.mark.parametrize("n", SIZES)
def test_elementwise_instantiations(modules, built, n):
    rng = np.random.default_rng()
    x = rng.uniform(-100.0, 100.0, n).astype(np.float32)
    i = rng.integers(-1000, 1000, n).astype(np.int32)
    s = float(rng.uniform(-3.0, 3.0))
    cases = {  # function → (arguments, reference)
        "add_n_float": ((x,), x + 4),  # N = 4, the default
        "add_n_int_7": ((i,), i + 7),
        "scale_tiles": ((x, s), np.float32(s) * x),
        "scale_tiles_128": ((x, s), np.float32(s) * x),
        # The source's own explicit instantiation. x * 3 - 1 rounded once: the compiler fuses it
        # into one fma (checked below to within an ulp of the product, as unfused code would be).
        "shift_float_3": ((x,), (x.astype(np.float64) * 3 - 1).astype(np.float32)),
        "shift_int_5": ((i,), i * 5 - 1),
    }
    for function, (args, want) in cases.items():
        fresh = np.asarray(getattr(modules[built], function)(*args))
        # The caller-output form takes the output right after the input (the kernel's parameter order).
        poisoned = np.asarray(getattr(modules["templates_poisonable"], function)(args[0], _poison(n, want.dtype), *args[1:]))
        for got in (fresh, poisoned):
            assert got.dtype == want.dtype, function
            ulp = np.spacing(np.abs(args[0] * 3)) if function == "shift_float_3" else 0
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=np.max(ulp), err_msg=function)


@pytest.mark.parametrize("n", SIZES)
def test_vector_element_types(modules, n):
    rng = np.random.default_rng()
    x4 = rng.uniform(-2.0, 2.0, (n, 4)).astype(np.float32)
    a = float(rng.uniform(-3.0, 3.0))
    h = rng.uniform(-2.0, 2.0, (n, 2)).astype(np.float16)
    y = rng.uniform(-2.0, 2.0, (n, 2)).astype(np.float16)
    rgba = rng.integers(0, 256, (n, 4)).astype(np.uint8)
    i2 = rng.integers(-(2**31), 2**31 - 1, (n, 2)).astype(np.int32)
    fresh, poisonable = modules["vectors"], modules["vectors_poisonable"]

    np.testing.assert_allclose(np.asarray(fresh.scale_f4(x4, a)), np.float32(a) * x4, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(poisonable.scale_f4(x4, _poison((n, 4), np.float32), a)), np.float32(a) * x4, rtol=1e-6)
    want = (h.astype(np.float32) + y.astype(np.float32)).astype(np.float16)
    for module in (fresh, poisonable):  # y is in place in both
        np.testing.assert_allclose(np.asarray(module.add_h2(h, y.copy())).astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(np.asarray(fresh.invert_rgba(rgba)), 255 - rgba)
    np.testing.assert_array_equal(np.asarray(poisonable.invert_rgba(rgba, _poison((n, 4), np.uint8))), 255 - rgba)
    np.testing.assert_array_equal(np.asarray(fresh.swap_lanes_int2(i2)), i2[:, ::-1])
    np.testing.assert_array_equal(np.asarray(poisonable.swap_lanes_int2(i2, _poison((n, 2), np.int32))), i2[:, ::-1])
    np.testing.assert_array_equal(np.asarray(fresh.swap_lanes___half2(h)), h[:, ::-1])
    np.testing.assert_array_equal(np.asarray(poisonable.swap_lanes___half2(h, _poison((n, 2), np.float16))), h[:, ::-1])


def test_a_vector_pointer_refuses_an_array_without_its_lanes(modules):
    with pytest.raises((TypeError, ValueError)):
        modules["vectors"].scale_f4(np.ones(16, np.float32), 1.0)  # an f32[16], not f32[n, 4]
