"""On a CUDA device: the NT GEMM (kernels/gemm_nt.toml, gemm_nt_bf16 and gemm_nt_bf16_f32out)
against its float64 reference, through IREE (iree_dispatch.runtime).

c[M, N] = bf16(a[M, K] @ b[N, K]^T), f32 accumulation, one rounding; gemm_nt_bf16_f32out writes
the same values widened to f32 (checked against the same bound, every element a bf16 value, and
bit for bit the widened result of gemm_nt_bf16 from the same module: one body, the same sums; N = 7
and 1 give rows of c every 4-byte offset of a 16-byte chunk). Sizes: 1 x 1 x 1, sizes
that are not multiples of the tiles (sm_90a 128 x 256 x 64, sm_80 128 x 128 x 32), N odd (rows of
c not 4-byte aligned every other row), K not a multiple of 8 (the element loads of a and b),
multiples of the tiles, and GPT-2 small's LM head (8192 x 50257 x 768) and a short batch of it
(64 x 50257 x 768). On sm_90a they reach both of its paths: TMA (K % 8 == 0; with odd N, with
M leaving the second block of a cluster past M, with a narrow last column of tiles that can't hold
the tensor maps, with several tiles per block) and the element-by-element fallback (K % 8 != 0,
or no room in c for the tensor maps: 1 x 77 x 8, 3 x 8 x 8).

Each case runs three ways: the module as built (IREE allocates c; an H100 runs the sm_90a cubin),
the copy whose output is declared in place called with c filled with NaN (an element the kernel
fails to write stays NaN and fails; the tensor maps the sm_90a body keeps in c must be
overwritten), and the sm_80-PTX-only copy, poisoned the same way.

Error bound, element by element: |c - c64| <= 2^-8 |c64| + RTOL * (|a| @ |b|^T), with c64 the
float64 product of the same (rounded) bf16 inputs. Products of two bf16 values are exact in
float32; float32 accumulation over K terms stays below RTOL = 1e-5 of |a| @ |b|^T (as for
gemm_bf16, tests/library/test_gpu_gemm.py), and the one rounding to bf16 adds at most half a bf16 ulp,
2^-8 of |c| (reached just above a power of two: the ratio err/bound comes close to 1 on large
random sizes, and the RTOL term covers the accumulation error on top of it). Inputs
have per-row means (a) and per-column means (b), so a value taken from another row or column
of c is off by far more than the bound.
"""

from __future__ import annotations

import numpy as np
import pytest

from ..support.artifacts.gemm_nt import LAYOUT, build_all
from ..support.gpu_modules import loaded_modules
from ..support.references import bfloat16, load_references

pytestmark = pytest.mark.gpu

NAME = "gemm_nt_bf16"
RTOL = 1e-5
ROUNDING = 2.0**-8
CHUNK = 1024  # rows of c checked at a time (the float64 product of the LM head is 3.3 GB)

REFERENCES = load_references()


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    return loaded_modules(tmp_path_factory, "gemm_nt", LAYOUT, build_all)


def inputs(m: int, n: int, k: int, seed=None):
    rng = np.random.default_rng(seed)
    bf16 = bfloat16()
    a = (rng.normal(0.0, 1.0, (m, k)) + rng.normal(0.0, 0.5, (m, 1))).astype(np.float32).astype(bf16)
    b = (rng.normal(0.0, 1.0, (n, k)) + rng.normal(0.0, 0.5, (n, 1))).astype(np.float32).astype(bf16)
    return a, b


def check(got: np.ndarray, a: np.ndarray, b: np.ndarray, dtype=None) -> str:
    m, n = a.shape[0], b.shape[0]
    dtype = bfloat16() if dtype is None else dtype
    assert got.shape == (m, n) and got.dtype == dtype, (got.shape, got.dtype)
    abs_b64 = np.abs(b.astype(np.float64))
    worst = 0.0
    for r0 in range(0, m, CHUNK):
        a64 = a[r0 : r0 + CHUNK].astype(np.float64)
        want = REFERENCES.gemm_nt_bf16(a[r0 : r0 + CHUNK], b)
        bound = ROUNDING * np.abs(want) + RTOL * (np.abs(a64) @ abs_b64.T)
        err = np.abs(got[r0 : r0 + CHUNK].astype(np.float64) - want)
        bad = ~(err <= bound)  # NaN fails
        if bad.any():
            i, j = np.argwhere(bad)[0]
            pytest.fail(f"{int(bad.sum())} elements off in rows {r0}..{r0 + a64.shape[0] - 1}, first at [{r0 + i}, {j}]: got {got[r0 + i, j]}, want {want[i, j]}")
        worst = max(worst, float(np.max(err / np.maximum(bound, 1e-300))))
    return f"max err/bound {worst:.2f}"


def run_three_ways(modules, a, b) -> list[str]:
    reports = [check(getattr(modules["gemm_nt"], NAME)(a, b), a, b)]
    for module in ("gemm_nt_poisonable", "gemm_nt_sm80_ptx_poisonable"):
        poisoned = np.full((a.shape[0], b.shape[0]), np.nan, bfloat16())
        reports.append(check(getattr(modules[module], NAME)(a, b, poisoned), a, b))
    return reports


WIDENED = "gemm_nt_bf16_f32out"


def run_widened_three_ways(modules, a, b) -> list[str]:
    """gemm_nt_bf16_f32out the three ways (poisoned with NaN where c is passed in): within the
    bound, every element a bf16 value, and the same module's gemm_nt_bf16 result widened, bit for bit."""
    shape, reports = (a.shape[0], b.shape[0]), []
    for module in ("gemm_nt", "gemm_nt_poisonable", "gemm_nt_sm80_ptx_poisonable"):
        widened, narrow = getattr(modules[module], WIDENED), getattr(modules[module], NAME)
        if module == "gemm_nt":
            got, want = widened(a, b), narrow(a, b)
        else:
            got, want = widened(a, b, np.full(shape, np.nan, np.float32)), narrow(a, b, np.full(shape, np.nan, bfloat16()))
        reports.append(check(got, a, b, np.float32))
        assert np.array_equal(got.astype(bfloat16()).astype(np.float32), got), f"{module}: values that are not bf16"
        same = got.view(np.uint32) == want.astype(np.float32).view(np.uint32)
        if not same.all():
            i, j = np.argwhere(~same)[0]
            pytest.fail(f"{module}: {int((~same).sum())} elements differ from gemm_nt_bf16's, first at [{i}, {j}]: {got[i, j]} vs {want[i, j]}")
    return reports


def test_reference_is_a_times_b_transposed():
    a = np.arange(6.0).reshape(2, 3)
    b = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(REFERENCES.gemm_nt_bf16(a, b), a @ b.T)


# (M, N, K): K = 1, 5, 9, 13, 17, 100 are not multiples of 8 (element loads); N = 1, 77, 101,
# 257, 1001, 50257 are odd (element stores on every other row). With K % 8 == 0 (sm_90a's TMA
# path): 100 x 1001 x 64 and 300 x 50257 x 200 (the second block of a cluster wholly past M;
# K not a multiple of 64), 130 x 257 x 72 (a one-column last tile), 70000 x 300 x 64 (a 44-column
# last tile, too narrow for the maps, and 3 tiles per block), 1 x 77 x 8 (no room for the maps:
# the fallback).
SIZES = [(1, 1, 1), (1, 77, 5), (3, 8, 8), (37, 101, 13), (130, 257, 72), (200, 1001, 9), (128, 128, 32), (129, 129, 33),
         (256, 384, 768), (1000, 77, 100), (517, 1000, 17), (1024, 1024, 1024), (300, 2048, 4096),
         (1, 77, 8), (100, 1001, 64), (300, 50257, 200), (70000, 300, 64), (257, 513, 136)]


@pytest.mark.parametrize("m, n, k", SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in SIZES])
def test_gemm_nt_matches_float64(modules, m, n, k):
    a, b = inputs(m, n, k)
    reports = run_three_ways(modules, a, b)
    print(f"\n{NAME} {m}x{n}x{k}: as built {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


# The same shapes for the f32 result (its store path: 16-byte chunks of 4 floats, rows of c at
# every 4-byte offset), and N = 7 on both paths: 517 x 7 x 64 (TMA, the tile spanning whole rows),
# 9 x 7 x 5 (the fallback).
WIDENED_SIZES = [*SIZES, (517, 7, 64), (9, 7, 5), (1, 7, 8)]


@pytest.mark.parametrize("m, n, k", WIDENED_SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in WIDENED_SIZES])
def test_gemm_nt_f32out_matches_float64(modules, m, n, k):
    a, b = inputs(m, n, k)
    reports = run_widened_three_ways(modules, a, b)
    print(f"\n{WIDENED} {m}x{n}x{k}: as built {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


@pytest.mark.parametrize("m", [64, 8192])
@pytest.mark.parametrize("name", [NAME, WIDENED])
def test_gpt2_lm_head(modules, m, name):
    """GPT-2 small's LM head: hidden 768, vocabulary 50257 (odd), m = batch x tokens (8 x 1024);
    its logits in bf16, or widened to f32 (`logits.float()`)."""
    a, b = inputs(m, 50257, 768)
    reports = (run_three_ways if name == NAME else run_widened_three_ways)(modules, a, b)
    print(f"\n{name} LM head {m}x50257x768: as built {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")
