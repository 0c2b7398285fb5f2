"""On a CUDA device: the f32 GEMMs summed in f64 (kernels/gemm_f32_f64acc.toml: gemm_nt_f32_f64acc, c = a @ b^T
with b [N, K], and its Linear epilogues) against their float64 references, through IREE
(iree_dispatch.runtime), every element, with fresh random data.

Each case runs three ways: the module as built (IREE allocates c; an H100 or H200 runs the
sm_90 cubin, mma m16n8k16), the copy whose output is declared in place called with c filled with
NaN (an element the kernel fails to write stays NaN and fails), and the sm_80-PTX-only copy
(mma m8n8k4), poisoned the same way.

Error bound: the products are exact in f64 and summed in f64, so the f64 sum is within
K 2^-53 (|a| @ |b|) of the exact one (the worst case, far below an f32 ulp), and it is rounded to
f32 once: |c - c64| <= ulp(c64) + K 2^-52 (|a| @ |b| + |bias| + |residual|). That is one ulp where
an f32 sum of random data is off by about sqrt(K) 2^-24 of |a| @ |b|: a missing or doubled
term, a wrong fragment element or a value from another row or column fails by far more. The
erf-GELU is computed in f32 on the rounded x = round(sum + bias): within 4 ulps of the float64
GELU of x, plus |x| 2^-21 for erff, plus 1.2 ulps of x for x's own rounding (GELU's slope is at
most 1.13).
"""

from __future__ import annotations

import numpy as np
import pytest

from ..support.artifacts import gemm_f32_f64acc
from ..support.gpu_modules import loaded_modules
from ..support.references import load_references

pytestmark = pytest.mark.gpu

REFERENCES = load_references()
BUILD = "gemm_f32_f64acc"
WAYS = ("as built", "poisoned", "sm_80 PTX poisoned")
KERNELS = ("gemm_nt_f32_f64acc", "gemm_nt_bias_f32_f64acc", "gemm_nt_bias_gelu_erf_f32_f64acc", "gemm_nt_bias_residual_f32_f64acc")


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    return loaded_modules(tmp_path_factory, BUILD, gemm_f32_f64acc.LAYOUT, gemm_f32_f64acc.build_all)


def _inputs(m: int, n: int, k: int):
    """a [M, K] with per-row means, b [N, K] with per-row means, bias [N], residual [M, N]."""
    rng = np.random.default_rng()
    a = (rng.normal(0.0, 1.0, (m, k)) + rng.normal(0.0, 0.5, (m, 1))).astype(np.float32)
    b = (rng.normal(0.0, 1.0, (n, k)) + rng.normal(0.0, 0.5, (n, 1))).astype(np.float32)
    bias = rng.normal(0.0, 1.0, n).astype(np.float32)
    residual = rng.normal(0.0, 4.0, (m, n)).astype(np.float32)
    return a, b, bias, residual


def _ulp(x: np.ndarray) -> np.ndarray:
    return np.spacing(np.abs(x).astype(np.float32)).astype(np.float64)


def _bound(name: str, want: np.ndarray, magnitude: np.ndarray, k: int, x: np.ndarray | None) -> np.ndarray:
    sum_error = k * 2.0**-52 * magnitude
    if x is None:
        return _ulp(want) + sum_error + 1e-30
    return 4 * _ulp(want) + np.abs(x) * 2.0**-21 + 1.2 * _ulp(x) + sum_error + 1e-30


def _check(name: str, got: np.ndarray, want: np.ndarray, bound: np.ndarray, way: str) -> None:
    assert got.shape == want.shape and got.dtype == np.float32, (name, way, got.shape, got.dtype)
    err = np.abs(got.astype(np.float64) - want)
    bad = ~(err <= bound)  # NaN fails
    if bad.any():
        i, j = np.argwhere(bad)[0]
        pytest.fail(f"{name} ({way}): {int(bad.sum())} elements off, first at [{i}, {j}]: got {got[i, j]}, want {want[i, j]}")


# (M, N, K): one element; sizes that are not multiples of the 128 x 128 x 16 tiles, K not a
# multiple of 4 (element loads) and a multiple (asynchronous copies); BERT-base's Linears at
# 16 x 512 tokens (q, k, v and the attention output; the first MLP Linear at a quarter of the rows).
SIZES = [(1, 1, 1), (37, 101, 13), (129, 129, 33), (1000, 77, 100), (517, 1000, 17), (256, 384, 768), (1024, 1024, 1024), (8192, 768, 768),
         (2048, 3072, 768)]


@pytest.mark.parametrize("m, n, k", SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in SIZES])
def test_matches_float64(modules, m, n, k):
    a, b, bias, residual = _inputs(m, n, k)
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T + np.abs(bias)
    args = {"gemm_nt_f32_f64acc": (a, b), "gemm_nt_bias_f32_f64acc": (a, b, bias), "gemm_nt_bias_gelu_erf_f32_f64acc": (a, b, bias),
            "gemm_nt_bias_residual_f32_f64acc": (a, b, bias, residual)}
    x = (REFERENCES.gemm_nt_bias_f32(a, b, bias)).astype(np.float32).astype(np.float64)  # the GELU's input, rounded as the kernel rounds it
    for name in KERNELS:
        if name == "gemm_nt_bias_gelu_erf_f32_f64acc":
            want, bound = REFERENCES._gelu_erf(x), _bound(name, REFERENCES._gelu_erf(x), magnitude, k, x)
        else:
            want = getattr(REFERENCES, name)(*args[name])
            bound = _bound(name, want, magnitude + (np.abs(residual) if "residual" in name else 0.0), k, None)
        for way, module in zip(WAYS, (BUILD, f"{BUILD}_poisonable", f"{BUILD}_sm80_ptx_poisonable")):
            poison = () if way == "as built" else (np.full((m, n), np.nan, np.float32),)
            _check(name, np.asarray(getattr(modules[module], name)(*args[name], *poison)), want, bound, way)
