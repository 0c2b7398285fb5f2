"""On a CUDA device: kernels from prebuilt objects (PTX JIT-compiled forward, cubins, fatbins)
and Triton kernels run through IREE and match numpy on fresh random data. Every kernel is also
called through the module copy whose outputs are in place, with outputs filled with NaN, so an
element the kernel fails to write shows up (IREE-allocated outputs arrive zeroed)."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.artifacts.prebuilt import KINDS, TRITON, build_all, layout
from ..support.gpu_modules import module_paths

pytestmark = pytest.mark.gpu
SIZES = (1, 7, 1000, 2**20 + 3)


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict[str, runtime.Module]:
    # The Triton modules exist only where triton was installed when they were built.
    paths = module_paths(tmp_path_factory, "prebuilt", layout(), build_all, keep=lambda name, path: path.exists() or not name.startswith(TRITON))
    return {name: runtime.load(path) for name, path in paths.items()}


def poisoned(shape, dtype) -> np.ndarray:
    return np.full(shape, np.nan, dtype) if np.dtype(dtype).kind == "f" else np.full(shape, np.iinfo(dtype).max, dtype)


def floats(rng, n: int) -> np.ndarray:
    return rng.uniform(-2, 2, n).astype(np.float32)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", SIZES)
def test_simple_mul(modules, kind, n):
    rng = np.random.default_rng()
    a, b = floats(rng, n), floats(rng, n)
    # A float32 product is exact in float64 and rounds once: the kernel must match bit for bit.
    want = (a.astype(np.float64) * b).astype(np.float32)
    np.testing.assert_array_equal(modules[kind].simple_mul(a, b), want)
    np.testing.assert_array_equal(modules[f"{kind}_poisonable"].simple_mul(a, b, poisoned(n, np.float32)), want)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", SIZES)
def test_axpby(modules, kind, n):
    rng = np.random.default_rng()
    x, y = floats(rng, n), floats(rng, n)
    alpha, beta = float(rng.uniform(-3, 3)), float(rng.uniform(-3, 3))
    want = np.float32(alpha) * x.astype(np.float64) + np.float32(beta) * y.astype(np.float64)
    for got in (modules[kind].axpby(x, y, alpha, beta), modules[f"{kind}_poisonable"].axpby(x, y, poisoned(n, np.float32), alpha, beta)):
        # |alpha x| + |beta y| ≤ 12: two float32 roundings (or one with FMA) stay below 4 ulp of 16.
        np.testing.assert_allclose(got, want, rtol=0, atol=4 * np.finfo(np.float32).eps * 16)


@pytest.mark.parametrize("n", (1, 1000, 2**20 + 3))
def test_ptx_size_t_scalar_is_adapted(modules, n):
    """iota_sized takes a size_t: prebuilt PTX is adapted like nvcc's (two 32-bit halves)."""
    want = np.arange(n, dtype=np.int64)
    np.testing.assert_array_equal(modules["ptx"].iota_sized(n), want)
    np.testing.assert_array_equal(modules["ptx_poisonable"].iota_sized(poisoned(n, np.int64)), want)


def triton_modules(modules) -> tuple[runtime.Module, runtime.Module]:
    if "triton" not in modules:
        pytest.skip("no Triton modules: triton was not installed where the modules were built")
    return modules["triton"], modules["triton_poisonable"]


@pytest.mark.parametrize("n", SIZES)
def test_triton_axpy(modules, n):
    plain, poisonable = triton_modules(modules)
    rng = np.random.default_rng()
    x, y = floats(rng, n), floats(rng, n)
    alpha = float(rng.uniform(-3, 3))
    want = np.float32(alpha) * x.astype(np.float64) + y
    for got in (plain.axpy(x, y, alpha), poisonable.axpy(x, y, poisoned(n, np.float32), alpha)):
        np.testing.assert_allclose(got, want, rtol=0, atol=4 * np.finfo(np.float32).eps * 8)


@pytest.mark.parametrize("rows, cols", [(1, 1), (3, 7), (257, 1000), (4096, 1024)])
def test_triton_softmax(modules, rows, cols):
    plain, poisonable = triton_modules(modules)
    rng = np.random.default_rng()
    x = rng.normal(0, 4, (rows, cols)).astype(np.float32)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    for got in (plain.softmax_rows(x), poisonable.softmax_rows(x, poisoned((rows, cols), np.float32))):
        # exp and the division each round in float32; values lie in [0, 1].
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)
