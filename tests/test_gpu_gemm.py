"""On a CUDA device: the tensor-core GEMM (kernels/gemm.toml) against a float64 reference,
through IREE (iree_dispatch.runtime), at sizes that are not multiples of the 128 x 256 x 64
tile, and at sizes where N or K is not a multiple of 8 (the element-by-element load path).

Each case runs three ways: the module as built (IREE allocates c; on an H100 the sm_90a wgmma
object runs), the copy whose output is declared in place called with c filled with NaN (an
element the kernel fails to write stays NaN and fails), and the sm_80-PTX-only copy, poisoned
the same way, which makes a Hopper GPU JIT and run the mma.sync body.

Error bound, element by element: |c - c64| <= RTOL * (|a| @ |b|) with c64 the float64 product
of the same (rounded) bf16/f16 inputs, so only accumulation error remains. Products of two
bf16 (8-bit significand) or f16 (11-bit) values are exact in float32; what remains is float32
accumulation over K terms, measured at most 2.1e-6 of |a| @ |b| (K = 8192) on an H100, below
RTOL = 1e-5 (~170 float32 ulps of the absolute sum). A dropped, doubled or misplaced term
shows as ~1/K of that sum per element: at least 2.4e-4 (K = 4097), 24x above RTOL.

The tests also cover the cluster launch (the sm_90a kernel runs in clusters of 2 blocks
declared in the kernel, launched by IREE's plain cuLaunchKernel) and per-arch dynamic shared
memory through IREE (the sm_90a export's workgroup_local_memory, 193 KB, above the 48 KB default).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from iree_dispatch import runtime

from .conftest import ROOT, module_paths
from .gemm_artifacts import LAYOUT, build_all

pytestmark = pytest.mark.gpu

# (M, N, K). (1,1,1), (7,33,9), (33,1000,17), (130,257,72), (1000,7,4097): N or K not a multiple
# of 8, element loads everywhere. On sm_90a the rest load with TMA, with partial tiles at the M,
# N and K edges, except clusters where a tile can't hold the tensor maps, which load element
# by element in the same launch: (129, 264, 520) and (200, 776, 1032) in their last 8-column
# tiles, (100, 512, 256) in the cluster's second block (rows past M). (300, 1000, 264): rows of c
# not 128-byte aligned (maps placed inside the tile's first row).
SIZES = [(1, 1, 1), (7, 33, 9), (33, 1000, 17), (130, 257, 72), (1000, 7, 4097), (129, 264, 520), (200, 776, 1032),
         (100, 512, 256), (300, 1000, 264), (256, 256, 256), (1024, 1024, 1024), (384, 2048, 4096)]
RTOL = 1e-5
DTYPES = {"gemm_bf16": "bfloat16", "gemm_f16": "float16"}


def _references():
    loader = importlib.util.spec_from_file_location("gemm_references", ROOT / "kernels" / "references.py")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


REFERENCES = _references()


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict[str, runtime.Module]:
    return {name: runtime.load(path) for name, path in module_paths(tmp_path_factory, "gemm", LAYOUT, build_all).items()}


def numpy_dtype(name: str) -> np.dtype:
    if DTYPES[name] == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(np.float16)


def check(name: str, got: np.ndarray, a: np.ndarray, b: np.ndarray) -> str:
    want = getattr(REFERENCES, name)(a, b)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert got.shape == want.shape and got.dtype == np.float32, (got.shape, got.dtype, want.shape)
    err = np.abs(got.astype(np.float64) - want)
    bad = ~(err <= RTOL * scale)  # NaN fails
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} elements off, first at {np.argwhere(bad)[0].tolist()}: got {got[tuple(np.argwhere(bad)[0])]}, want {want[tuple(np.argwhere(bad)[0])]}"
    return f"max err/scale {np.max(err / scale):.2e}"


def test_reference_is_the_float64_product():
    rng = np.random.default_rng()
    a, b = rng.standard_normal((5, 3)).astype(np.float16), rng.standard_normal((3, 4)).astype(np.float16)
    want = [[sum(float(a[i, k]) * float(b[k, j]) for k in range(3)) for j in range(4)] for i in range(5)]
    np.testing.assert_allclose(REFERENCES.gemm_f16(a, b), want, rtol=1e-15)


@pytest.mark.parametrize("m, n, k", SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in SIZES])
@pytest.mark.parametrize("name", list(DTYPES))
def test_gemm_matches_float64(modules, name, m, n, k):
    rng = np.random.default_rng()
    dtype = numpy_dtype(name)
    # Nonzero means, so that tiles read from the wrong place or left out change the sums.
    a = rng.normal(0.25, 1.0, (m, k)).astype(dtype)
    b = rng.normal(-0.25, 1.0, (k, n)).astype(dtype)
    reports = [check(name, getattr(modules["gemm"], name)(a, b), a, b)]
    for module in ("gemm_poisonable", "gemm_sm80_ptx_poisonable"):
        poisoned = np.full((m, n), np.nan, np.float32)
        reports.append(check(name, getattr(modules[module], name)(a, b, poisoned), a, b))
    print(f"\n{name} {m}x{n}x{k}: sm_90a {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")
