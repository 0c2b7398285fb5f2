"""On a CUDA device: kernels that pass inputs through non-const pointers (tests/kernels/nonconst.cu,
declared without saying which pointer is an input) against numpy references, at awkward sizes,
on fresh random data. Each runs twice: with fresh outputs, and from the build that takes every
output as an argument, each output poisoned with a NaN pattern of its own first. An input the
build mistook for an output would be read uninitialised (or poisoned) and show."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.artifacts.nonconst import LAYOUT, build_all
from ..support.gpu_modules import module_paths

pytestmark = pytest.mark.gpu

SIZES = (1, 3, 255, 1000, 4097, 65537)
SHAPES = ((1, 1), (3, 5), (31, 33), (64, 96), (257, 130))


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    return {name: runtime.load(path) for name, path in module_paths(tmp_path_factory, "nonconst", LAYOUT, build_all).items()}


def _poison(shape, k, dtype=np.float32):
    """Poison pattern k: a NaN (floats) or an integer no result has, different per output."""
    if np.dtype(dtype).kind == "f":
        return np.full(shape, 0x7FC00001 + k, np.uint32).view(np.float32)
    return np.full(shape, 0xDEAD0000 + k, dtype)


def _random(rng, shape):
    return rng.uniform(-2.0, 2.0, shape).astype(np.float32)


@pytest.mark.parametrize("kernel", ["transpose_naive", "transpose_tiled"])
@pytest.mark.parametrize("height,width", SHAPES)
def test_transpose(modules, kernel, height, width):
    idata = _random(np.random.default_rng(), (height, width))
    fresh = getattr(modules["nonconst"], kernel)(idata)
    poisoned = getattr(modules["nonconst_poisonable"], kernel)(_poison((width, height), 0), idata)
    for got in (fresh, poisoned):
        np.testing.assert_array_equal(np.asarray(got), idata.T)


@pytest.mark.parametrize("n", SIZES)
def test_saxpy_updates_y_in_place(modules, n):
    rng = np.random.default_rng()
    x, y, a = _random(rng, n), _random(rng, n), float(rng.uniform(-3, 3))
    want = (np.float64(np.float32(a)) * x + y).astype(np.float32)  # one fused multiply-add on the GPU
    for name in LAYOUT:
        np.testing.assert_allclose(np.asarray(modules[name].saxpy(x, y.copy(), a)), want, rtol=2e-7, atol=0)


@pytest.mark.parametrize("n", SIZES)
def test_histogram_accumulates_into_the_callers_bins(modules, n):
    rng = np.random.default_rng()
    data = rng.integers(0, 256, n, dtype=np.uint8)
    bins = rng.integers(0, 1000, 256, dtype=np.uint32)
    want = bins + np.bincount(data, minlength=256).astype(np.uint32)
    for name in LAYOUT:
        np.testing.assert_array_equal(np.asarray(modules[name].histogram256(bins.copy(), data)), want)


@pytest.mark.parametrize("n", SIZES)
def test_block_sums(modules, n):
    g_idata = np.random.default_rng().integers(-64, 64, n).astype(np.float32) / 4  # exact sums in any order
    blocks = -(-n // 256)
    want = np.add.reduceat(g_idata, np.arange(0, n, 256)).astype(np.float32)
    fresh = modules["nonconst"].block_sums(g_idata)
    poisoned = modules["nonconst_poisonable"].block_sums(g_idata, _poison(blocks, 1))
    for got in (fresh, poisoned):
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("hA,wA,wB", [(1, 1, 1), (3, 5, 7), (33, 17, 65), (128, 64, 96)])
def test_matrix_mul(modules, hA, wA, wB):
    rng = np.random.default_rng()
    A, B = _random(rng, (hA, wA)), _random(rng, (wA, wB))
    want = A.astype(np.float64) @ B.astype(np.float64)
    fresh = modules["nonconst"].matrix_mul(A, B)
    poisoned = modules["nonconst_poisonable"].matrix_mul(_poison((hA, wB), 2), A, B)
    for got in (fresh, poisoned):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5 * wA)


@pytest.mark.parametrize("n", SIZES)
def test_gather_through_a_device_function(modules, n):
    rng = np.random.default_rng()
    table = _random(rng, 777)
    idx = rng.integers(0, 777, n).astype(np.int32)
    fresh = modules["nonconst"].gather(table, idx)
    poisoned = modules["nonconst_poisonable"].gather(_poison(n, 3), table, idx)
    for got in (fresh, poisoned):
        np.testing.assert_array_equal(np.asarray(got), table[idx])


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("use_a", [0, 1])
def test_untraceable_sources_are_passed_in_and_returned(modules, n, use_a):
    rng = np.random.default_rng()
    a, b = _random(rng, n), _random(rng, n)
    fresh = modules["nonconst"].pick(a, b, use_a)
    poisoned = modules["nonconst_poisonable"].pick(_poison(n, 4), a, b, use_a)
    for out, got_a, got_b in (fresh, poisoned):
        np.testing.assert_array_equal(np.asarray(out), 2 * (a if use_a else b))
        np.testing.assert_array_equal(np.asarray(got_a), a)
        np.testing.assert_array_equal(np.asarray(got_b), b)
