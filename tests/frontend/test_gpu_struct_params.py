"""Structs and CUDA vector types by value on the GPU (tests/kernels/structs.cu) against numpy, on
fresh random data and fields: a struct whose fields size the grid and shapes, a __grid_constant__
struct with padding and a double, nested structs with an array and a float2, float2, half2 and
int4 by value. Every output is checked fresh and passed in poisoned (artifacts/structs.py)."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.artifacts.structs import LAYOUT, build_all
from ..support.gpu_modules import module_paths

pytestmark = pytest.mark.gpu

SIZES = (1, 3, 257, 4097)


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    return {name: runtime.load(path) for name, path in module_paths(tmp_path_factory, "structs", LAYOUT, build_all).items()}


def _both(modules, function, x, *scalars, out_shape, out_dtype):
    """The fresh output and the output written into a poisoned (NaN) array, of a kernel of one
    input `x`, one output and `scalars`."""
    fresh = np.asarray(getattr(modules["structs"], function)(x, *scalars))
    poisoned = np.full(out_shape, np.nan, out_dtype)
    written = np.asarray(getattr(modules["structs_poisonable"], function)(x, poisoned, *scalars))
    return fresh, written


@pytest.mark.parametrize("m, n", [(1, 1), (3, 5), (17, 129)])
def test_struct_fields_size_the_call(modules, m, n):
    rng = np.random.default_rng(m * 1000 + n)
    a = rng.standard_normal((m, n)).astype(np.float32)
    alpha = float(rng.standard_normal())
    want = np.float32(alpha) * a + np.float32(n)
    for got in _both(modules, "scale_shape", a, {"m": m, "n": n, "alpha": alpha}, out_shape=(m, n), out_dtype=np.float32):
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("n", SIZES)
def test_a_grid_constant_struct_with_padding_and_a_double(modules, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n)
    fields = {"negate": bool(rng.integers(2)), "offset": int(rng.integers(-300, 300)), "count": int(rng.integers(0, n + 1)),
              "scale": float(rng.standard_normal()), "bias": int(rng.integers(0, 256))}
    v = x * fields["scale"] + fields["offset"] + fields["bias"]
    want = np.where(np.arange(n) < fields["count"], -v if fields["negate"] else v, np.nan)
    fresh, written = _both(modules, "mixed", x, fields, out_shape=(n,), out_dtype=np.float64)
    np.testing.assert_allclose(written, want, rtol=1e-12)  # elements past count keep the poison
    np.testing.assert_allclose(fresh[: fields["count"]], want[: fields["count"]], rtol=1e-12)


@pytest.mark.parametrize("n", SIZES)
def test_nested_structs_arrays_and_vector_fields(modules, n):
    rng = np.random.default_rng(n + 1)
    x = rng.standard_normal(n).astype(np.float32)
    pair_a, pair_b = int(rng.integers(-50, 50)), float(rng.standard_normal())
    dims = rng.integers(-100, 100, 3)
    shift = rng.standard_normal(2).astype(np.float32)
    fields = {"pair": {"a": pair_a, "b": pair_b}, "dims": dims.tolist(), "shift": shift}
    want = x * np.float32(pair_b) + pair_a + dims[np.arange(n) % 3] + shift[0] - shift[1]
    for got in _both(modules, "nested", x, fields, out_shape=(n,), out_dtype=np.float32):
        np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", SIZES)
def test_vectors_by_value(modules, n):
    rng = np.random.default_rng(n + 2)
    x = rng.standard_normal(n).astype(np.float32)
    ab = rng.standard_normal(2).astype(np.float32)
    h = rng.standard_normal(2).astype(np.float16)
    q = rng.integers(-1000, 1000, 4)
    want = ab[0] * x + ab[1] + np.float32(h[0]) * np.float32(h[1]) + np.float32(q.sum())
    for got in _both(modules, "axpy_vectors", x, ab, h, {"x": int(q[0]), "y": int(q[1]), "z": int(q[2]), "w": int(q[3])}, out_shape=(n,), out_dtype=np.float32):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
