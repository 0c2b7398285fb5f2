"""On a CUDA device: kernels written in the styles real code uses (tests/kernels/styles.cu:
aliased element types chosen by -D flags, scalars before and between pointers, namespaces,
templates, two outputs of one shape, C++ kernels in prebuilt objects by plain name) against
numpy, at awkward sizes. Every output is checked twice: fresh (each must hold its own values:
two outputs sharing a buffer would show as one holding the other's) and passed in poisoned,
each with its own pattern."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.artifacts.styles import LAYOUT, build_all
from ..support.gpu_modules import module_paths
from ..support.references import bfloat16

pytestmark = pytest.mark.gpu

SIZES = (1, 3, 257, 1000, 4097, 65537)
ROWS = ((1, 1), (3, 7), (65, 130), (300, 768))


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    return {name: runtime.load(path) for name, path in module_paths(tmp_path_factory, "styles", LAYOUT, build_all).items()}


def _dtype(precision):
    return np.float32 if precision == "f32" else bfloat16()


def _random(rng, shape, dtype=np.float32):
    return rng.uniform(-2.0, 2.0, shape).astype(np.float32).astype(dtype)


def _poison(shape, dtype, k):
    """Poison pattern k: NaN-boxed bit patterns that differ per output."""
    bits = {2: np.uint16, 4: np.uint32}[np.dtype(dtype).itemsize]
    base = {2: 0x7FC0, 4: 0x7FC00000}[np.dtype(dtype).itemsize]
    return np.full(shape, base + 1 + k, bits).view(dtype)


def _close(got, want, precision):
    got = np.asarray(got, np.float32)
    rtol, atol = (1e-5, 1e-5) if precision == "f32" else (1e-2, 1e-2)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("precision", ["f32", "bf16"])
@pytest.mark.parametrize("rows,cols", ROWS)
def test_layernorm_with_mean_and_rstd(modules, precision, rows, cols):
    rng = np.random.default_rng()
    dt = _dtype(precision)
    inp, weight, bias = _random(rng, (rows, cols), dt), _random(rng, cols, dt), _random(rng, cols, dt)
    x = inp.astype(np.float32)
    mean = x.mean(axis=1)
    rstd = 1.0 / np.sqrt(((x - mean[:, None]) ** 2).mean(axis=1) + 1e-5)
    out = (x - mean[:, None]) * rstd[:, None] * weight.astype(np.float32) + bias.astype(np.float32)
    fresh = modules[f"styles_{precision}"].layernorm_forward_kernel(inp, weight, bias)
    poisoned = modules[f"styles_{precision}_poisonable"].layernorm_forward_kernel(
        _poison((rows, cols), dt, 0), _poison(rows, np.float32, 1), _poison(rows, np.float32, 2), inp, weight, bias
    )
    for got in (fresh, poisoned):
        got_out, got_mean, got_rstd = got
        _close(got_out, out, precision)
        np.testing.assert_allclose(got_mean, mean, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got_rstd, rstd, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", SIZES)
def test_scalars_before_pointers(modules, n):
    rng = np.random.default_rng()
    x, y = _random(rng, n), _random(rng, n)
    alpha = float(rng.uniform(-3, 3))
    # The GPU contracts alpha * x + y into one fused multiply-add: one rounding, not two.
    want = (np.float64(np.float32(alpha)) * x + y).astype(np.float32)
    for name in ("styles_f32", "styles_f32_poisonable"):
        np.testing.assert_allclose(modules[name].axpy(x, y, alpha), want, rtol=2e-7, atol=0)


@pytest.mark.parametrize("n", SIZES)
def test_scalars_between_pointers(modules, n):
    rng = np.random.default_rng()
    x = _random(rng, n)
    s, offset = float(rng.uniform(-3, 3)) * 1e-3 + 1.0, float(rng.uniform(-1, 1))
    want = (x.astype(np.float64) * s).astype(np.float32) + np.float32(offset)
    np.testing.assert_allclose(modules["styles_f32"].scale_offset(x, s, offset), want, rtol=2e-7, atol=1e-7)
    got = modules["styles_f32_poisonable"].scale_offset(x, _poison(n, np.float32, 3), s, offset)
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-7)


@pytest.mark.parametrize("precision", ["f32", "bf16"])
@pytest.mark.parametrize("n", SIZES)
def test_namespaced_kernel_through_an_alias(modules, precision, n):
    rng = np.random.default_rng()
    dt = _dtype(precision)
    x = _random(rng, n, dt)
    c = float(rng.uniform(-1, 1))
    want = x.astype(np.float32) ** 2 + np.float32(c)
    _close(modules[f"styles_{precision}"].ops_square_plus(x, c), want, precision)
    _close(modules[f"styles_{precision}_poisonable"].ops_square_plus(_poison(n, dt, 4), x, c), want, precision)


@pytest.mark.parametrize("precision", ["f32", "bf16"])
@pytest.mark.parametrize("n", SIZES)
def test_template_instantiations_in_nested_namespaces(modules, precision, n):
    rng = np.random.default_rng()
    factor = float(rng.uniform(-2, 2))
    for function, dt, tolerance in (("ops_detail_scale___half", np.float16, "bf16"), ("ops_detail_scale_floatX", _dtype(precision), precision)):
        x = _random(rng, n, dt)
        want = x.astype(np.float32) * np.float32(factor)
        _close(getattr(modules[f"styles_{precision}"], function)(x, factor), want, tolerance)
        _close(getattr(modules[f"styles_{precision}_poisonable"], function)(x, _poison(n, dt, 5), factor), want, tolerance)


@pytest.mark.parametrize("module", ["styles_f32", "prebuilt_cxx"])
@pytest.mark.parametrize("n", SIZES)
def test_two_outputs_of_one_shape_each_get_their_own_buffer(modules, module, n):
    rng = np.random.default_rng()
    a, b = _random(rng, n), _random(rng, n)
    lo, hi = modules[module].min_max(a, b)
    np.testing.assert_array_equal(np.asarray(lo), np.minimum(a, b))
    np.testing.assert_array_equal(np.asarray(hi), np.maximum(a, b))
    if module == "styles_f32":
        lo, hi = modules["styles_f32_poisonable"].min_max(_poison(n, np.float32, 6), _poison(n, np.float32, 7), a, b)
        np.testing.assert_array_equal(np.asarray(lo), np.minimum(a, b))
        np.testing.assert_array_equal(np.asarray(hi), np.maximum(a, b))


@pytest.mark.parametrize("n", SIZES)
def test_prebuilt_cxx_kernel_by_qualified_name(modules, n):
    rng = np.random.default_rng()
    x = _random(rng, n)
    c = float(rng.uniform(-1, 1))
    want = (x.astype(np.float64) ** 2 + np.float32(c)).astype(np.float32)  # one fused multiply-add: one rounding
    np.testing.assert_allclose(modules["prebuilt_cxx"].ops_square_plus(x, c), want, rtol=2e-7, atol=1e-7)
