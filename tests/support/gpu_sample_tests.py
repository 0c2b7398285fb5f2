"""The sample kernels' GPU tests that run twice: in runtime/test_gpu.py on the samples built
by the system nvcc, and in toolchains/test_gpu_toolchains.py on each toolchain's modules (each
module that imports them collects them, with its own `samples` and `poisonable` fixtures).
Also `fresh`, the random data the GPU tests of the samples call them with."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from .environment import ROOT

sys.path.insert(0, str(ROOT / "kernels"))
import references  # noqa: E402  (kernels/references.py: the float64 references)

SIZES = (1, 7, 1000, 2**20 + 3)


def fresh(rng, n, dtype=np.float32):
    """Random, never zero, both signs."""
    return (rng.uniform(0.25, 4.0, n) * rng.choice([-1.0, 1.0], n)).astype(dtype)


def nan(n):
    return np.full(n, np.nan, np.float32)


@pytest.mark.parametrize("n", SIZES)
def test_simple_mul(samples, poisonable, n):
    rng = np.random.default_rng()
    lhs, rhs = fresh(rng, n), fresh(rng, n)
    # One float32 multiply is correctly rounded: equal to the float64 product rounded once.
    want = references.simple_mul(lhs, rhs).astype(np.float32)
    got = samples.simple_mul(lhs, rhs)
    assert got.dtype == np.float32 and got.shape == (n,)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(poisonable.simple_mul(lhs, rhs, nan(n)), want)


@pytest.mark.parametrize("n", SIZES)
def test_simple_mul_inplace(samples, n):
    rng = np.random.default_rng()
    lhs, rhs = fresh(rng, n), fresh(rng, n)
    rhs_before = rhs.copy()
    got = samples.simple_mul_inplace(lhs, rhs)
    np.testing.assert_array_equal(got, references.simple_mul_inplace(lhs, rhs_before).astype(np.float32))
    np.testing.assert_array_equal(rhs, rhs_before)  # a numpy argument is never written behind the caller's back


@pytest.mark.parametrize("n", SIZES + (4 * 1024 * 1024 + 1,))
def test_axpby(samples, poisonable, n):
    rng = np.random.default_rng()
    x, y = fresh(rng, n), fresh(rng, n)
    alpha, beta = float(rng.uniform(-3, 3)), float(rng.uniform(-3, 3))
    want = references.axpby(x, y, np.float32(alpha), np.float32(beta))
    # Two float32 products and a sum (possibly fused): a few ulps of the largest term.
    bound = 4 * np.finfo(np.float32).eps * (abs(alpha) * np.abs(x) + abs(beta) * np.abs(y))
    for got in (samples.axpby(x, y, alpha, beta), poisonable.axpby(x, y, nan(n), alpha, beta)):
        assert got.shape == (n,) and np.all(np.abs(got - want) <= bound)
