"""On a CUDA device: the NT GEMM (kernels/gemm_nt.toml, gemm_nt_bf16 and gemm_nt_bf16_f32out, and the
bias epilogues gemm_nt_bias_*: see their section below)
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
from ..support.gpu_modules import loaded_modules, misaligned_residual_inputs
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


# ---- The bias epilogues: gemm_nt_bias_bf16, gemm_nt_bias_gelu_bf16, gemm_nt_bias_gelu_erf_bf16,
# gemm_nt_bias_residual_bf16 (bf16 bias [N], bf16 residual [M, N]).
EPILOGUES = ("gemm_nt_bias_bf16", "gemm_nt_bias_gelu_bf16", "gemm_nt_bias_gelu_erf_bf16", "gemm_nt_bias_residual_bf16")


def epilogue_inputs(name: str, m: int, n: int, k: int):
    """Fresh random a [M, K], b [N, K], bias [N] (and residual [M, N] for the residual kernel), bf16,
    with per-row and per-column means as inputs() has them."""
    rng = np.random.default_rng()
    bf16 = bfloat16()
    a, b = inputs(m, n, k)
    bias = rng.normal(0.5, 2.0, n).astype(np.float32).astype(bf16)
    residual = rng.normal(-0.5, 4.0, (m, n)).astype(np.float32).astype(bf16) if name.endswith("residual_bf16") else None
    return (a, b, bias) if residual is None else (a, b, bias, residual)


def check_epilogue(name: str, got: np.ndarray, args: tuple) -> str:
    """Element by element against the float64 reference, with scale = |a| @ |b|^T: the accumulation
    error RTOL * scale (through GELU's slope <= 1.13: 1.2e-5 * scale), one bf16 rounding of the
    result (2^-8 |want|) and 1e-6; the residual kernel rounds twice (bf16(bf16(a @ b^T + bias) +
    residual)): its first rounding may fall on the other side of a boundary than the float64
    sum's, one bf16 ulp (2^-7) of a @ b^T + bias carried into the sum."""
    a, b = args[0], args[1]
    want = getattr(REFERENCES, name)(*args)
    assert got.shape == want.shape and got.dtype == bfloat16(), (got.shape, got.dtype)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T
    bound = (1.2e-5 if "gelu" in name else RTOL) * scale + ROUNDING * np.abs(want) + 1e-6
    if name == "gemm_nt_bias_residual_bf16":
        bound += 2 * ROUNDING * np.abs(REFERENCES.gemm_nt_bias_bf16(*args[:3]))
    err = np.abs(got.astype(np.float64) - want)
    bad = ~(err <= bound)  # NaN fails
    if bad.any():
        i, j = np.argwhere(bad)[0]
        pytest.fail(f"{name}: {int(bad.sum())} of {bad.size} elements off, first at [{i}, {j}]: got {got[i, j]}, want {want[i, j]}")
    return f"max err/bound {float(np.max(err / bound)):.2f}"


# Both sm_90a paths (TMA: K % 8 == 0 with room for the maps; the fallback: 1 x 77 x 8, K odd),
# odd N (every other row of c and of the residual misaligned), several tiles per block, BERT-base's
# Linears at 2048 tokens (N = 768 and 3072, K = 768 and 3072).
EPILOGUE_SIZES = [(1, 1, 1), (1, 77, 8), (37, 101, 13), (130, 257, 72), (517, 1000, 17), (100, 1001, 64), (70000, 300, 64), (257, 513, 136),
                  (2048, 768, 768), (2048, 3072, 768), (2048, 768, 3072)]


@pytest.mark.parametrize("m, n, k", EPILOGUE_SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in EPILOGUE_SIZES])
@pytest.mark.parametrize("name", EPILOGUES)
def test_bias_epilogues_match_float64(modules, name, m, n, k):
    args = epilogue_inputs(name, m, n, k)
    reports = [check_epilogue(name, getattr(modules["gemm_nt"], name)(*args), args)]
    for module in ("gemm_nt_poisonable", "gemm_nt_sm80_ptx_poisonable"):
        poisoned = np.full((m, n), np.nan, bfloat16())
        reports.append(check_epilogue(name, getattr(modules[module], name)(*args, poisoned), args))
    print(f"\n{name} {m}x{n}x{k}: as built {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


@pytest.mark.parametrize("m, n, k", EPILOGUE_SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in EPILOGUE_SIZES])
def test_residual_is_bias_then_the_models_add(modules, m, n, k):
    """gemm_nt_bias_residual_bf16 gives the same bits as gemm_nt_bias_bf16 followed by a bf16
    model's residual add (both widened, added in f32, rounded once), on both bodies."""
    a, b, bias, residual = epilogue_inputs("gemm_nt_bias_residual_bf16", m, n, k)
    for module in ("gemm_nt_poisonable", "gemm_nt_sm80_ptx_poisonable"):
        h = modules[module].gemm_nt_bias_bf16(a, b, bias, np.full((m, n), np.nan, bfloat16()))
        want = (np.asarray(h).astype(np.float32) + residual.astype(np.float32)).astype(bfloat16())
        got = modules[module].gemm_nt_bias_residual_bf16(a, b, bias, residual, np.full((m, n), -np.inf, bfloat16()))
        np.testing.assert_array_equal(np.asarray(got).view(np.uint16), want.view(np.uint16), err_msg=module)


def test_residual_misaligned_against_c(modules):
    """A residual 2 bytes past an aligned address (a torch view), c aligned: read element by element
    where c is stored, the same bits as with an aligned copy of it."""
    torch, a, b, bias, residual = misaligned_residual_inputs(weight_as_stored=True)
    got = modules["gemm_nt"].gemm_nt_bias_residual_bf16(a, b, bias, residual)
    aligned = modules["gemm_nt"].gemm_nt_bias_residual_bf16(a, b, bias, residual.clone())
    torch.cuda.synchronize()
    assert torch.equal(got.view(torch.int16), aligned.view(torch.int16))
    args = tuple(t.float().cpu().numpy().astype(bfloat16()) for t in (a, b, bias, residual))
    check_epilogue("gemm_nt_bias_residual_bf16", got.float().cpu().numpy().astype(bfloat16()), args)
