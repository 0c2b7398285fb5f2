"""On a CUDA device: the f32 CUDA-core GEMMs (kernels/gemm_f32.toml: gemm_f32, c = a @ b, and
gemm_nt_f32, c = a @ b^T with b [N, K], and its Linear epilogues; gemm_f32 also built with
96-row tiles, kernels/gemm_f32_m96.toml) against their float64 references, through IREE
(iree_dispatch.runtime); the 96-row gemm_f32 against the 128-row one, and gemm_nt_f32 against
gemm_f32 of the transposed b, bit for bit.

Sizes: 1 x 1 x 1; sizes that are not multiples of the tiles (128 x 128 x 8, 96 x 128 x 8, NT 128 x 128 x 16); K not a multiple of 4
(a's rows, and NT's b rows, not 16-byte aligned: element loads); N odd (b's rows for gemm_f32 and
c's rows not 16-byte aligned: element loads and stores); multiples of the tiles (float4 loads and
stores); GPT-2 small's f32 matmuls at 8 x 1024 tokens: the MLP's up-projection 8192 x 3072 x 768
and down-projection 8192 x 768 x 3072 (gemm_f32), and the LM head 8192 x 50257 x 768 with the
tied embedding as stored (gemm_nt_f32). Every element of c is checked. The runtime passes
16-byte aligned buffers, so bases that are only 4-byte aligned (IREE's bindings inside a model)
are not reached here: tests/library/test_gemm_f32.py runs the same source on the host with such pointers.

Each case runs three ways, with fresh random data: the module as built (IREE allocates c; an
H100 runs the sm_90 cubin), the copy whose output is declared in place called with c filled
with NaN (an element the kernel fails to write stays NaN and fails), and the sm_80-PTX-only copy,
poisoned the same way.

Error bound, element by element: |c - c64| <= RTOL * (|a| @ |b|) + 1e-30, with c64 the float64
product of the same f32 inputs. The kernel sums K fused products in f32 (one rounding per step,
2^-24 relative each). The worst case of such a sum is K * 2^-24 of |a| @ |b| (2.4e-4 at K = 4096),
reached only if every rounding goes the same way; random data's roundings are independent, so
the error grows as sqrt(K) * 2^-24 (3.8e-6 at K = 4096). A float32 simulation of the sequential
sum on inputs drawn as here (131072 elements, K = 4096) came to 2.5e-6 of |a| @ |b| at most:
RTOL = 1e-5 leaves a factor of 4 for the tails of the large cases, while a missing or doubled
term (|a_k b_k|, about (|a| @ |b|) / K) or a value from another row or column (inputs have
per-row means in a and per-column means in b) is off by far more.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from ..support.artifacts import gemm_f32, gemm_f32_m96
from ..support.gpu_modules import loaded_modules
from ..support.references import load_references

pytestmark = pytest.mark.gpu

RTOL = 1e-5
CHUNK = 1024  # rows of c checked at a time (the LM head's float64 product is 3.3 GB)

REFERENCES = load_references()


BUILDS = ("gemm_f32", "gemm_f32_m96")  # 128- and 96-row tiles
# (build, kernel): gemm_f32 in both builds; the NT kernels (128-row tiles in every build) where
# they are declared, gemm_f32.toml.
BUILD_KERNELS = [("gemm_f32", "gemm_f32"), ("gemm_f32_m96", "gemm_f32"), ("gemm_f32", "gemm_nt_f32")]


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    return {**loaded_modules(tmp_path_factory, "gemm_f32", gemm_f32.LAYOUT, gemm_f32.build_all),
            **loaded_modules(tmp_path_factory, "gemm_f32_m96", gemm_f32_m96.LAYOUT, gemm_f32_m96.build_all)}


def inputs(name: str, m: int, n: int, k: int, seed=None):
    """a [M, K] with per-row means, b ([K, N], or [N, K] for gemm_nt_f32) with per-column-of-c means."""
    rng = np.random.default_rng(seed)
    a = (rng.normal(0.0, 1.0, (m, k)) + rng.normal(0.0, 0.5, (m, 1))).astype(np.float32)
    if name == "gemm_nt_f32":
        b = (rng.normal(0.0, 1.0, (n, k)) + rng.normal(0.0, 0.5, (n, 1))).astype(np.float32)
    else:
        b = (rng.normal(0.0, 1.0, (k, n)) + rng.normal(0.0, 0.5, (1, n))).astype(np.float32)
    return a, b


def check(name: str, results: list, a: np.ndarray, b: np.ndarray) -> list[str]:
    """Each of `results` (c from one call) against the float64 reference, element by element;
    the reference and the bound are computed once per chunk of rows for all of them."""
    results = [np.asarray(got) for got in results]
    m = a.shape[0]
    b_kn = b.T if name == "gemm_nt_f32" else b  # [K, N]
    n = b_kn.shape[1]
    for got in results:
        assert got.shape == (m, n) and got.dtype == np.float32, (got.shape, got.dtype)
    reference = getattr(REFERENCES, name)
    abs_b64 = np.abs(b_kn.astype(np.float64))
    worst = [0.0] * len(results)
    for r0 in range(0, m, CHUNK):
        rows = a[r0 : r0 + CHUNK]
        want = reference(rows, b)
        bound = RTOL * (np.abs(rows.astype(np.float64)) @ abs_b64) + 1e-30
        for w, got in enumerate(results):
            err = np.abs(got[r0 : r0 + CHUNK].astype(np.float64) - want)
            bad = ~(err <= bound)  # NaN fails
            if bad.any():
                i, j = np.argwhere(bad)[0]
                pytest.fail(f"{name} ({WAYS[w]}): {int(bad.sum())} elements off in rows {r0}..{r0 + rows.shape[0] - 1}, "
                            f"first at [{r0 + i}, {j}]: got {got[r0 + i, j]}, want {want[i, j]}")
            worst[w] = max(worst[w], float(np.max(err / bound)))
    return [f"max err/bound {x:.3f}" for x in worst]


WAYS = ("as built", "poisoned", "sm_80 PTX poisoned")


def run_three_ways(modules, build: str, name: str, a, b) -> list[str]:
    n = b.shape[0] if name == "gemm_nt_f32" else b.shape[1]
    results = [np.asarray(getattr(modules[build], name)(a, b))]
    for module in (f"{build}_poisonable", f"{build}_sm80_ptx_poisonable"):
        poisoned = np.full((a.shape[0], n), np.nan, np.float32)
        results.append(np.asarray(getattr(modules[module], name)(a, b, poisoned)))
    return check(name, results, a, b)


# (M, N, K): see the module docstring.
SIZES = [(1, 1, 1), (1, 77, 5), (3, 8, 8), (37, 101, 13), (128, 128, 8), (129, 129, 33), (200, 1001, 9), (1000, 77, 100),
         (517, 1000, 17), (256, 384, 768), (1024, 1024, 1024), (300, 2048, 4096), (300, 50257, 64)]


@pytest.mark.parametrize("build, name", BUILD_KERNELS)
@pytest.mark.parametrize("m, n, k", SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in SIZES])
def test_matches_float64(modules, build, name, m, n, k):
    a, b = inputs(name, m, n, k)
    reports = run_three_ways(modules, build, name, a, b)
    print(f"\n{build}.{name} {m}x{n}x{k}: " + " | ".join(f"{way} {r}" for way, r in zip(WAYS, reports)))


# (M, N, K): one tile of 96 rows and one of 128, rows that leave the last 96-row tile part full,
# and BERT-base's narrow Linears at 16 x 512 tokens (q, k, v and the attention output; the second
# MLP matmul).
SAME_BITS = [(96, 128, 8), (128, 128, 8), (1000, 77, 100), (8192, 768, 768), (8192, 768, 3072)]


@pytest.mark.parametrize("m, n, k", SAME_BITS, ids=[f"{m}x{n}x{k}" for m, n, k in SAME_BITS])
def test_96_row_tiles_give_the_same_bits(modules, m, n, k):
    """Each element's sum over K runs in the same order whatever the tile's height: the 96-row
    build's c is the 128-row build's, bit for bit (the output poisoned with NaN first)."""
    a, b = inputs("gemm_f32", m, n, k)
    want = np.asarray(modules["gemm_f32"].gemm_f32(a, b))
    _same_bits("gemm_f32_m96", np.asarray(modules["gemm_f32_m96_poisonable"].gemm_f32(a, b, np.full(want.shape, np.nan, np.float32))), want)


@pytest.mark.parametrize("m, n, k", SAME_BITS, ids=[f"{m}x{n}x{k}" for m, n, k in SAME_BITS])
def test_nt_kernel_gives_the_bits_of_gemm_f32(modules, m, n, k):
    """gemm_nt_f32 (asynchronous copies, 16-deep steps) sums each element over K in gemm_f32's
    order (register-staged loads, 8-deep steps): a @ b^T from it is gemm_f32's a @ (b^T), bit for
    bit (the output poisoned with NaN first)."""
    a, b = inputs("gemm_nt_f32", m, n, k)
    want = np.asarray(modules["gemm_f32"].gemm_f32(a, np.ascontiguousarray(b.T)))
    _same_bits("gemm_nt_f32", np.asarray(modules["gemm_f32_poisonable"].gemm_nt_f32(a, b, np.full(want.shape, np.nan, np.float32))), want)


def _wall_tflops(module, name: str, a: np.ndarray, b: np.ndarray, n: int, calls: int = 5) -> float:
    """2 M N K / the median wall time of a synchronous call on device-resident inputs (the call's
    overhead and c's allocation included: a lower bound on the kernel's own rate)."""
    da, db = module.to_device(a), module.to_device(b)
    function = getattr(module, name)
    function(da, db)  # warm-up: module loading, the output pool
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        function(da, db)
        times.append(time.perf_counter() - start)
    return 2.0 * a.shape[0] * n * a.shape[1] / float(np.median(times)) / 1e12


# (M, N, K): edges of both tile heights, N and K not multiples of 4, and BERT-base's Linears at
# 16 x 512 tokens (q, k, v and the attention output; the first MLP Linear at a quarter of the rows).
EPILOGUE_SIZES = [(1, 1, 1), (37, 101, 13), (1000, 77, 100), (517, 1000, 17), (8192, 768, 768), (2048, 3072, 768)]


def _same_bits(what: str, got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32, (what, got.shape, got.dtype)
    differ = got.view(np.uint32) != want.view(np.uint32)
    assert not differ.any(), f"{what}: {int(differ.sum())} elements differ, first at {np.argwhere(differ)[0].tolist()}"


@pytest.mark.parametrize("m, n, k", EPILOGUE_SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in EPILOGUE_SIZES])
def test_linear_epilogues(modules, m, n, k):
    """The Linear kernels, as built and poisoned (NaN outputs) and as sm_80 PTX: gemm_nt_bias_f32 and
    gemm_nt_bias_residual_f32 store the bits of gemm_nt_f32's c followed by the model's own f32
    adds, computed here (c + bias, then + residual); gemm_nt_bias_gelu_erf_f32 the erf-GELU of
    x = c + bias close to float64's GELU of those f32 values: within 4 ulps of the result, plus
    |x| 2^-21 for erff's absolute error (about 2^-24 near +-1, where 1 + erf cancels for very
    negative x and the result is tiny). gemm_nt_f32's c itself is checked against float64 by
    test_matches_float64."""
    build = "gemm_f32"
    a, b = inputs("gemm_nt_f32", m, n, k)
    rng = np.random.default_rng()
    bias = rng.normal(0.0, 1.0, n).astype(np.float32)
    residual = rng.normal(0.0, 4.0, (m, n)).astype(np.float32)
    c = np.asarray(modules[build].gemm_nt_f32(a, b))
    with_bias = c + bias  # f32 adds, rounded to nearest as the GPU's
    gelu = REFERENCES._gelu_erf(with_bias.astype(np.float64))
    for way, module in zip(WAYS, (build, f"{build}_poisonable", f"{build}_sm80_ptx_poisonable")):
        poison = () if way == "as built" else (np.full((m, n), np.nan, np.float32),)
        f = modules[module]
        _same_bits(f"{build} {way} gemm_nt_bias_f32", np.asarray(f.gemm_nt_bias_f32(a, b, bias, *poison)), with_bias)
        _same_bits(f"{build} {way} gemm_nt_bias_residual_f32", np.asarray(f.gemm_nt_bias_residual_f32(a, b, bias, residual, *poison)), with_bias + residual)
        got = np.asarray(f.gemm_nt_bias_gelu_erf_f32(a, b, bias, *poison)).astype(np.float64)
        bound = 4 * np.spacing(np.abs(gelu).astype(np.float32)).astype(np.float64) + np.abs(with_bias).astype(np.float64) * 2.0**-21 + 1e-30
        bad = ~(np.abs(got - gelu) <= bound)  # NaN fails
        assert not bad.any(), f"{build} {way} gemm_nt_bias_gelu_erf_f32: {int(bad.sum())} elements off, first at {np.argwhere(bad)[0].tolist()}"


# GPT-2 small in f32 at 8 x 1024 tokens: (build, kernel, M, N, K).
GPT2 = [(build, "gemm_f32", 8192, n, k) for build in BUILDS for n, k in ((3072, 768), (768, 3072))] + [("gemm_f32", "gemm_nt_f32", 8192, 50257, 768)]


@pytest.mark.parametrize("build, name, m, n, k", GPT2, ids=[f"{build}.{name}-{m}x{n}x{k}" for build, name, m, n, k in GPT2])
def test_gpt2_shapes(modules, build, name, m, n, k):
    """The MLP's two matmuls and the LM head (vocabulary 50257, odd: element loads of b's rows
    for gemm_f32, element stores of c's rows), every element checked."""
    a, b = inputs(name, m, n, k)
    reports = run_three_ways(modules, build, name, a, b)
    tflops = _wall_tflops(modules[build], name, a, b, n)
    print(f"\n{build}.{name} {m}x{n}x{k}: " + " | ".join(f"{way} {r}" for way, r in zip(WAYS, reports)) + f" | {tflops:.1f} TFLOP/s (wall, as built)")


# (B, M, N, K): batches of the sizes above, and GPT-2 small's attention in f32 (96 heads of 1024
# tokens: the scores q @ k^T and the context p @ v).
BATCHED = [(1, 1, 1, 1), (3, 37, 101, 13), (5, 129, 129, 33), (2, 200, 1001, 9), (7, 128, 128, 8), (96, 1024, 1024, 64), (96, 1024, 64, 1024)]


@pytest.mark.parametrize("batch, m, n, k", BATCHED, ids=[f"{z}x{m}x{n}x{k}" for z, m, n, k in BATCHED])
def test_batched_matches_float64(modules, batch, m, n, k):
    """gemm_batched_f32: every batch's c against its own float64 product (each batch's a and b
    with its own means: a block reading another batch's matrices fails), three ways."""
    rng = np.random.default_rng()
    a = (rng.normal(0.0, 1.0, (batch, m, k)) + rng.normal(0.0, 0.5, (batch, 1, 1))).astype(np.float32)
    b = (rng.normal(0.0, 1.0, (batch, k, n)) + rng.normal(0.0, 0.5, (batch, 1, 1))).astype(np.float32)
    results = [np.asarray(modules["gemm_f32"].gemm_batched_f32(a, b))]
    for module in ("gemm_f32_poisonable", "gemm_f32_sm80_ptx_poisonable"):
        results.append(np.asarray(modules[module].gemm_batched_f32(a, b, np.full((batch, m, n), np.nan, np.float32))))
    want = REFERENCES.gemm_batched_f32(a, b)
    bound = RTOL * np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64))) + 1e-30
    for way, got in zip(WAYS, results):
        assert got.shape == (batch, m, n) and got.dtype == np.float32, (got.shape, got.dtype)
        bad = ~(np.abs(got.astype(np.float64) - want) <= bound)  # NaN fails
        if bad.any():
            z, i, j = np.argwhere(bad)[0]
            pytest.fail(f"gemm_batched_f32 ({way}): {int(bad.sum())} elements off, first at [{z}, {i}, {j}]: got {got[z, i, j]}, want {want[z, i, j]}")
    print(f"\ngemm_batched_f32 {batch}x{m}x{n}x{k}: max err/bound " + " | ".join(
        f"{way} {float(np.max(np.abs(got.astype(np.float64) - want) / bound)):.3f}" for way, got in zip(WAYS, results)))
