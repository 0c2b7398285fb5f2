"""On a CUDA device: kernels/model_ops.toml's kernels (the op kinds swiglu and matmul+bias+gelu_erf)
against their float64 references (kernels/references.py), through IREE (iree_dispatch.runtime), on
fresh random data, every element checked.

Each case runs three ways: the module as built (IREE allocates the output; an H100 runs the sm_90a
cubin), the copy whose output is declared in place called with the output filled with NaN (an
element the kernel fails to write stays NaN and fails), and the sm_80-PTX-only copy, poisoned the
same way (tests/support/artifacts/model_ops.py).

swiglu_f32 / swiglu_bf16: out = silu(gate) * up over [rows, n]. Sizes whose element count is not a
multiple of the 16-byte vector (the tail taken element by element) and large ones (many blocks,
the grid-stride loop); a few gates far out on both sides (silu saturating to -0 and to gate).
Bounds per element, with want the float64 value from the (rounded) inputs:
- f32: 1e-6 * |want| + 1e-30 (expf within 2 ulp, an IEEE division, two products: a few ulp of 2^-23);
- bf16: 4e-3 * |want| + 1e-30 (one rounding to bf16, 2^-9 relative, plus __expf / __fdividef's
  ~2^-21). A gate and up swapped, an element taken from a neighbour or a missing silu is far off.

gemm_bias_gelu_erf_bf16: h = bf16(gelu_erf(a @ b + bias)), gemm.cu's GEMM with the exact-GELU
epilogue, at sizes that take the TMA path, partial tiles and the element-by-element loads (N or K
not multiples of 8). Bound, as gemm_bias_gelu_bf16's (tests/library/test_gpu_gemm.py): 1.2e-5 *
(|a| @ |b|) (the f32 accumulation, through GELU's slope <= 1.13) + 4e-3 * |want| (one bf16 rounding)
+ 1e-6 (erff within 2 ulp). (GELU's tanh form differs from the erf form by less than 5e-4, under
one bf16 rounding: that the reference is the erf form is checked on the CPU, test_model_ops.py.)
"""

from __future__ import annotations

import numpy as np
import pytest

from ..support.artifacts.model_ops import LAYOUT, build_all
from ..support.gpu_modules import loaded_modules
from ..support.references import bfloat16, load_references

pytestmark = pytest.mark.gpu

REFERENCES = load_references()
POISONABLE = ("model_ops_poisonable", "model_ops_sm80_ptx_poisonable")
# (rows, n): 1 element; counts not multiples of 4 or 8 (the tail); Llama-like MLP rows.
SWIGLU_SIZES = [(1, 1), (3, 5), (7, 33), (2, 4), (64, 1024), (129, 2752), (1024, 11008)]
# (M, N, K) as in test_gpu_gemm.py: element loads where N or K is not a multiple of 8, partial tiles, clusters.
GEMM_SIZES = [(1, 1, 1), (7, 33, 9), (130, 257, 72), (129, 264, 520), (300, 1000, 264), (1024, 3072, 768)]


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    return loaded_modules(tmp_path_factory, "model_ops", LAYOUT, build_all)


def _assert_within(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> str:
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.abs(np.asarray(got, np.float64) - want)
    bad = ~(err <= bound)  # NaN fails
    first = tuple(np.argwhere(bad)[0]) if bad.any() else ()
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} elements off, first at {list(first)}: got {got[first]}, want {want[first]}"
    return f"max err/bound {np.max(err / bound):.2f}"

def _nt_gelu_erf_case(m: int, n: int, k: int):
    """Fresh bf16 a [M, K], a Linear's weight w [N, K] and its bf16 bias, with the float64
    reference of bf16(gelu_erf(a @ w^T + bias)) and its bound, element by element."""
    bf16 = bfloat16()
    rng = np.random.default_rng()
    a = rng.normal(0.25, 1.0, (m, k)).astype(np.float32).astype(bf16)
    w = rng.normal(-0.25, 1.0, (n, k)).astype(np.float32).astype(bf16)
    bias = rng.normal(0.5, 2.0, n).astype(np.float32).astype(bf16)
    want = REFERENCES.gemm_nt_bias_gelu_erf_bf16_persistent(a, w, bias)
    bound = 1.2e-5 * (np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64)).T) + 4e-3 * np.abs(want) + 1e-6
    return a, w, bias, want, bound



@pytest.mark.parametrize("rows, n", SWIGLU_SIZES, ids=[f"{r}x{n}" for r, n in SWIGLU_SIZES])
@pytest.mark.parametrize("name", ["swiglu_f32", "swiglu_bf16"])
def test_swiglu_matches_float64(modules, name, rows, n):
    dtype = np.dtype(np.float32) if name == "swiglu_f32" else bfloat16()
    rng = np.random.default_rng()
    gate = rng.normal(0.0, 3.0, (rows, n))
    gate.flat[: min(6, gate.size)] = [-100.0, -30.0, -0.5, 0.0, 30.0, 100.0][: min(6, gate.size)]  # saturating ends
    gate = gate.astype(np.float32).astype(dtype)
    up = rng.normal(0.5, 2.0, (rows, n)).astype(np.float32).astype(dtype)
    want = getattr(REFERENCES, name)(gate, up)
    bound = (1e-6 if name == "swiglu_f32" else 4e-3) * np.abs(want) + 1e-30
    reports = [_assert_within(getattr(modules["model_ops"], name)(gate, up), want, bound)]
    for module in POISONABLE:
        poisoned = np.full((rows, n), np.nan, dtype)
        reports.append(_assert_within(getattr(modules[module], name)(gate, up, poisoned), want, bound))
    print(f"\n{name} {rows}x{n}: as built {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


@pytest.mark.parametrize("m, n, k", GEMM_SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in GEMM_SIZES])
def test_gemm_bias_gelu_erf_matches_float64(modules, m, n, k):
    bf16 = bfloat16()
    rng = np.random.default_rng()
    a = rng.normal(0.25, 1.0, (m, k)).astype(np.float32).astype(bf16)
    b = rng.normal(-0.25, 1.0, (k, n)).astype(np.float32).astype(bf16)
    bias = rng.normal(0.5, 2.0, n).astype(np.float32)
    want = REFERENCES.gemm_bias_gelu_erf_bf16(a, b, bias)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    bound = 1.2e-5 * scale + 4e-3 * np.abs(want) + 1e-6
    name = "gemm_bias_gelu_erf_bf16"
    reports = [_assert_within(getattr(modules["model_ops"], name)(a, b, bias), want, bound)]
    for module in POISONABLE:
        poisoned = np.full((m, n), np.nan, bf16)
        reports.append(_assert_within(getattr(modules[module], name)(a, b, bias, poisoned), want, bound))
    print(f"\n{name} {m}x{n}x{k}: as built {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


PERSISTENT_SIZES = [(256, 256, 72), (1024, 3072, 768)]  # one tile pair, K not a multiple of 64; BERT's MLP shape at 1024 rows


@pytest.mark.parametrize("m, n, k", PERSISTENT_SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in PERSISTENT_SIZES])
def test_gemm_bias_gelu_erf_persistent_gives_the_one_tile_kernels_bits(modules, m, n, k):
    bf16 = bfloat16()
    rng = np.random.default_rng()
    a = rng.normal(0.25, 1.0, (m, k)).astype(np.float32).astype(bf16)
    b = rng.normal(-0.25, 1.0, (k, n)).astype(np.float32).astype(bf16)
    bias = rng.normal(0.5, 2.0, n).astype(np.float32)
    want = REFERENCES.gemm_bias_gelu_erf_bf16_persistent(a, b, bias)
    bound = 1.2e-5 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))) + 4e-3 * np.abs(want) + 1e-6
    for module in ("model_ops", *POISONABLE):
        given = () if module == "model_ops" else (np.full((m, n), np.nan, bf16),)
        got = modules[module].gemm_bias_gelu_erf_bf16_persistent(a, b, bias, *given)
        _assert_within(got, want, bound)
        one_tile = modules[module].gemm_bias_gelu_erf_bf16(a, b, bias, *(np.full((m, n), np.nan, bf16) for _ in given))
        np.testing.assert_array_equal(np.asarray(got).view(np.uint16), np.asarray(one_tile).view(np.uint16), err_msg=module)


@pytest.mark.parametrize("m, n, k", [*PERSISTENT_SIZES, (512, 768, 8)], ids=[f"{m}x{n}x{k}" for m, n, k in [*PERSISTENT_SIZES, (512, 768, 8)]])
def test_gemm_nt_bias_gelu_erf_persistent_reads_the_weight_as_stored(modules, m, n, k):
    """gemm_nt_bias_gelu_erf_bf16_persistent (w [N, K], bf16 bias) within the float64 bound, and bit
    for bit gemm_bias_gelu_erf_bf16_persistent given w transposed and the bias widened to f32."""
    bf16 = bfloat16()
    a, w, bias, want, bound = _nt_gelu_erf_case(m, n, k)
    b, bias32 = np.ascontiguousarray(w.T), bias.astype(np.float32)
    for module in ("model_ops", *POISONABLE):
        given = () if module == "model_ops" else (np.full((m, n), np.nan, bf16),)
        got = modules[module].gemm_nt_bias_gelu_erf_bf16_persistent(a, w, bias, *given)
        _assert_within(got, want, bound)
        kn = modules[module].gemm_bias_gelu_erf_bf16_persistent(a, b, bias32, *(np.full((m, n), -np.inf, bf16) for _ in given))
        np.testing.assert_array_equal(np.asarray(got).view(np.uint16), np.asarray(kn).view(np.uint16), err_msg=module)


@pytest.mark.parametrize("m, n, k", [(256, 192, 72), (1024, 3072, 768)], ids=["256x192x72", "1024x3072x768"])
def test_n192_gelu_erf_persistent_gives_the_one_tile_kernels_bits(modules, tmp_path_factory, m, n, k):
    """kernels/gemm_n192.toml's gemm_nt_bias_gelu_erf_bf16_persistent (192-column tiles) within the
    float64 bound, and bit for bit model_ops' one-tile gemm_bias_gelu_erf_bf16 given w transposed and
    the bias widened: as built, poisoned, and the sm_80 PTX body."""
    from ..support.artifacts import gemm_n192

    n192 = loaded_modules(tmp_path_factory, "gemm_n192", gemm_n192.LAYOUT, gemm_n192.build_all)
    bf16 = bfloat16()
    a, w, bias, want, bound = _nt_gelu_erf_case(m, n, k)
    b, bias32 = np.ascontiguousarray(w.T), bias.astype(np.float32)
    for suffix, module in (("", "model_ops"), ("_poisonable", POISONABLE[0]), ("_sm80_ptx_poisonable", POISONABLE[1])):
        given = () if suffix == "" else (np.full((m, n), np.nan, bf16),)
        got = n192[f"gemm_n192{suffix}"].gemm_nt_bias_gelu_erf_bf16_persistent(a, w, bias, *given)
        _assert_within(got, want, bound)
        same = modules[module].gemm_bias_gelu_erf_bf16(a, b, bias32, *(np.full((m, n), -np.inf, bf16) for _ in given))
        np.testing.assert_array_equal(np.asarray(got).view(np.uint16), np.asarray(same).view(np.uint16), err_msg=suffix)
