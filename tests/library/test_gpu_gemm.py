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

The fused kernels (gemm_bias_gelu_bf16, gemm_bias_bf16, gemm_bias_residual_f32,
gemm_bias_residual_bf16) run the same three ways, with their own bounds (check_epilogue); so does the batched gemm_batched_bf16
(c[z] = a[z] @ b[z], the batch along grid z), with the plain GEMM's bound, on batches whose
inputs have different means (a tile that reads another batch's rows is off by far more than
the bound), at GPT-2 small's attention shapes among others.

The tests also cover the cluster launch (the sm_90a kernel runs in clusters of 2 blocks
declared in the kernel, launched by IREE's plain cuLaunchKernel) and per-arch dynamic shared
memory through IREE (the sm_90a export's workgroup_local_memory, 193 KB, above the 48 KB default).
"""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.artifacts.gemm import LAYOUT, TENSOR_MAPS, build_all, build_tensor_maps_cubin
from ..support.environment import have_compiler
from ..support.gpu_modules import loaded_modules, misaligned_residual_inputs, prebuilt_dir
from ..support.references import load_references

pytestmark = pytest.mark.gpu

# (M, N, K). (1,1,1), (7,33,9), (33,1000,17), (130,257,72), (1000,7,4097): N or K not a multiple
# of 8, element loads everywhere. On sm_90a the rest load with TMA, with partial tiles at the M,
# N and K edges, except clusters where a tile can't hold the tensor maps, which load element
# by element in the same launch: (129, 264, 520) and (200, 776, 1032) in their last 8-column
# tiles. (100, 512, 256): the cluster's second block starts past M and sits out, the first loads
# all of B alone. (300, 1000, 264): rows of c not 128-byte aligned (maps placed inside the tile's
# first row); the last cluster has one active block.
SIZES = [(1, 1, 1), (7, 33, 9), (33, 1000, 17), (130, 257, 72), (1000, 7, 4097), (129, 264, 520), (200, 776, 1032),
         (100, 512, 256), (300, 1000, 264), (256, 256, 256), (1024, 1024, 1024), (384, 2048, 4096)]
RTOL = 1e-5
DTYPES = {"gemm_bf16": "bfloat16", "gemm_f16": "float16"}


REFERENCES = load_references()


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    return loaded_modules(tmp_path_factory, "gemm", LAYOUT, build_all)


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
    first = tuple(np.argwhere(bad)[0]) if bad.any() else ()
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} elements off, first at {list(first)}: got {got[first]}, want {want[first]}"
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


def check_epilogue(name: str, got: np.ndarray, a: np.ndarray, b: np.ndarray, bias: np.ndarray, residual: np.ndarray | None) -> str:
    """The fused kernels against their float64 references. Bounds per element, with
    scale = |a| @ |b| as for the plain GEMM:
    - gemm_bias_gelu_bf16: 1.2e-5 * scale (the accumulation error, through GELU's slope <= 1.13)
      + 4e-3 * |want| (one bf16 rounding of the result, 2^-8) + 1e-6;
    - gemm_bias_bf16: 1e-5 * scale (the accumulation error) + 4e-3 * |want| (one bf16 rounding
      of the result) + 1e-6;
    - gemm_bias_residual_f32: 1e-5 * (scale + |bias| + |residual|);
    - gemm_bias_residual_bf16: h = bf16(bf16(a @ b + bias) + residual), two bf16 roundings. The
      reference rounds the float64 a @ b + bias, the kernel its f32 sum: where the two lie on
      either side of a rounding boundary they round to neighbouring bf16 values, one ulp apart
      (8e-3 * |a @ b + bias|, 2^-7), carried into the sum; + the accumulation error 1e-5 * scale,
      + 4e-3 * |want| for the second rounding, + 1e-6."""
    args = (a, b, bias) if residual is None else (a, b, bias, residual)
    want = getattr(REFERENCES, name)(*args)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    if name == "gemm_bias_gelu_bf16":
        bound = 1.2e-5 * scale + 4e-3 * np.abs(want) + 1e-6
    elif name == "gemm_bias_bf16":
        bound = RTOL * scale + 4e-3 * np.abs(want) + 1e-6
    elif name == "gemm_bias_residual_bf16":
        biased = REFERENCES.gemm_bias_bf16(a, b, bias)
        bound = RTOL * scale + 8e-3 * np.abs(biased) + 4e-3 * np.abs(want) + 1e-6
    else:
        bound = RTOL * (scale + np.abs(bias.astype(np.float64)) + np.abs(residual.astype(np.float64)))
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.abs(got.astype(np.float64) - want)
    bad = ~(err <= bound)  # NaN fails
    first = tuple(np.argwhere(bad)[0]) if bad.any() else ()
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} elements off, first at {list(first)}: got {got[first]}, want {want[first]}"
    return f"max err/bound {np.max(err / bound):.2f}"




RESIDUALS = ("gemm_bias_residual_f32", "gemm_bias_residual_bf16")  # residual [M, N] f32 and bf16


@pytest.mark.parametrize("m, n, k", SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in SIZES])
@pytest.mark.parametrize("name", ["gemm_bias_gelu_bf16", "gemm_bias_bf16", "gemm_bias_residual_f32", "gemm_bias_residual_bf16"])
def test_fused_epilogues_match_float64(modules, name, m, n, k):
    import ml_dtypes

    rng = np.random.default_rng()
    a = rng.normal(0.25, 1.0, (m, k)).astype(ml_dtypes.bfloat16)
    b = rng.normal(-0.25, 1.0, (k, n)).astype(ml_dtypes.bfloat16)
    bias = rng.normal(0.5, 2.0, n).astype(np.float32)
    residual_dtype = np.float32 if name == "gemm_bias_residual_f32" else ml_dtypes.bfloat16
    residual = rng.normal(-0.5, 4.0, (m, n)).astype(residual_dtype) if name in RESIDUALS else None
    args = (a, b, bias) if residual is None else (a, b, bias, residual)
    out_dtype = np.float32 if name == "gemm_bias_residual_f32" else ml_dtypes.bfloat16
    reports = [check_epilogue(name, getattr(modules["gemm"], name)(*args), a, b, bias, residual)]
    for module in ("gemm_poisonable", "gemm_sm80_ptx_poisonable"):
        poisoned = np.full((m, n), np.nan, out_dtype)
        got = getattr(modules[module], name)(*args, poisoned)
        reports.append(check_epilogue(name, got, a, b, bias, residual))
    print(f"\n{name} {m}x{n}x{k}: sm_90a {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


@pytest.mark.parametrize("m, n, k", SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in SIZES])
def test_residual_bf16_is_bias_bf16_then_the_add(modules, m, n, k):
    """gemm_bias_residual_bf16 gives the same bits as gemm_bias_bf16 followed by the model's bf16
    residual add (the two widened, added in f32, rounded once), on both bodies."""
    import ml_dtypes

    rng = np.random.default_rng()
    a = rng.normal(0.25, 1.0, (m, k)).astype(ml_dtypes.bfloat16)
    b = rng.normal(-0.25, 1.0, (k, n)).astype(ml_dtypes.bfloat16)
    bias = rng.normal(0.5, 2.0, n).astype(np.float32)
    residual = rng.normal(-0.5, 4.0, (m, n)).astype(ml_dtypes.bfloat16)
    for module in ("gemm_poisonable", "gemm_sm80_ptx_poisonable"):
        h = modules[module].gemm_bias_bf16(a, b, bias, np.full((m, n), np.nan, ml_dtypes.bfloat16))
        want = (np.asarray(h).astype(np.float32) + residual.astype(np.float32)).astype(ml_dtypes.bfloat16)
        got = modules[module].gemm_bias_residual_bf16(a, b, bias, residual, np.full((m, n), np.nan, ml_dtypes.bfloat16))
        np.testing.assert_array_equal(np.asarray(got).view(np.uint16), want.view(np.uint16), err_msg=module)


# (M, N, K) for the persistent kernels (M and N multiples of 256): one tile pair; K not a multiple
# of 64 (the last stage's columns TMA zeros); 36 pairs (fewer than the 66 clusters); 96 pairs
# (some clusters take two).
PERSISTENT_SIZES = [(256, 256, 8), (256, 512, 72), (512, 768, 1000), (1024, 2304, 768), (2048, 3072, 128)]


def _bits(x) -> np.ndarray:
    return np.asarray(x).view(np.uint16)


@pytest.mark.parametrize("m, n, k", PERSISTENT_SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in PERSISTENT_SIZES])
@pytest.mark.parametrize("name", ["gemm_bias_bf16", "gemm_bias_gelu_bf16", "gemm_bias_residual_bf16"])
def test_persistent_kernels_give_the_one_tile_kernels_bits(modules, name, m, n, k):
    """Each *_persistent kernel against the float64 reference (check_epilogue's bound), and bit
    for bit what the one-tile-per-CTA kernel gives: as built, poisoned, and the sm_80 PTX body."""
    import ml_dtypes

    rng = np.random.default_rng()
    a = rng.normal(0.25, 1.0, (m, k)).astype(ml_dtypes.bfloat16)
    b = rng.normal(-0.25, 1.0, (k, n)).astype(ml_dtypes.bfloat16)
    bias = rng.normal(0.5, 2.0, n).astype(np.float32)
    residual = rng.normal(-0.5, 4.0, (m, n)).astype(ml_dtypes.bfloat16) if name in RESIDUALS else None
    args = (a, b, bias) if residual is None else (a, b, bias, residual)
    one_tile = getattr(modules["gemm"], name)(*args)
    got = getattr(modules["gemm"], f"{name}_persistent")(*args)
    reports = [check_epilogue(name, got, a, b, bias, residual)]
    np.testing.assert_array_equal(_bits(got), _bits(one_tile))
    for module in ("gemm_poisonable", "gemm_sm80_ptx_poisonable"):
        poisoned = getattr(modules[module], f"{name}_persistent")(*args, np.full((m, n), np.nan, ml_dtypes.bfloat16))
        reports.append(check_epilogue(name, poisoned, a, b, bias, residual))
        np.testing.assert_array_equal(_bits(poisoned), _bits(getattr(modules[module], name)(*args, np.full((m, n), np.nan, ml_dtypes.bfloat16))))
    print(f"\n{name}_persistent {m}x{n}x{k}: sm_90a {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


# (M, N, K) for the gemm_nt_*_persistent kernels: as PERSISTENT_SIZES, K = 8 (one short stage) and
# BERT-base's Linears at 1024 rows.
NT_PERSISTENT_SIZES = [(256, 256, 8), (256, 512, 72), (512, 768, 1000), (1024, 768, 3072), (1024, 2304, 768)]


@pytest.mark.parametrize("m, n, k", NT_PERSISTENT_SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in NT_PERSISTENT_SIZES])
@pytest.mark.parametrize("name", ["gemm_bias_bf16", "gemm_bias_gelu_bf16", "gemm_bias_residual_bf16"])
def test_nt_persistent_kernels_read_the_weight_as_stored(modules, name, m, n, k):
    """gemm_nt_<name>_persistent takes w [N, K] (a Linear's weight as stored) and a bf16 bias: within
    check_epilogue's bound of the float64 reference, and bit for bit <name>_persistent given w
    transposed and the bias widened to f32: as built, poisoned, and the sm_80 PTX body."""
    import ml_dtypes

    rng = np.random.default_rng()
    a = rng.normal(0.25, 1.0, (m, k)).astype(ml_dtypes.bfloat16)
    w = rng.normal(-0.25, 1.0, (n, k)).astype(ml_dtypes.bfloat16)
    bias = rng.normal(0.5, 2.0, n).astype(ml_dtypes.bfloat16)
    residual = rng.normal(-0.5, 4.0, (m, n)).astype(ml_dtypes.bfloat16) if name in RESIDUALS else None
    extra = () if residual is None else (residual,)
    b, bias32 = np.ascontiguousarray(w.T), bias.astype(np.float32)
    nt_name = name.replace("gemm_", "gemm_nt_", 1) + "_persistent"
    reports = []
    for module in ("gemm", "gemm_poisonable", "gemm_sm80_ptx_poisonable"):
        given = () if module == "gemm" else (np.full((m, n), np.nan, ml_dtypes.bfloat16),)
        got = getattr(modules[module], nt_name)(a, w, bias, *extra, *given)
        reports.append(check_epilogue(name, got, a, b, bias32, residual))
        kn = getattr(modules[module], f"{name}_persistent")(a, b, bias32, *extra, *(np.full((m, n), -np.inf, ml_dtypes.bfloat16) for _ in given))
        np.testing.assert_array_equal(_bits(got), _bits(kn), err_msg=module)
    print(f"\n{nt_name} {m}x{n}x{k}: sm_90a {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


@pytest.fixture(scope="module")
def n128_modules(tmp_path_factory) -> dict:
    """kernels/gemm_n128.toml (gemm.cu's persistent kernels with 128-column tiles), three ways."""
    from ..support.artifacts import gemm_n128

    return loaded_modules(tmp_path_factory, "gemm_n128", gemm_n128.LAYOUT, gemm_n128.build_all)


# (M, N, K): one tile pair (N = 128); N = 384 and 640 (odd counts of 128-column tiles: no
# 256-column form); BERT-base's narrow Linears at 1024 rows (K = 768 and 3072, 24 tile pairs).
N128_SIZES = [(256, 128, 8), (512, 384, 72), (1024, 768, 768), (1024, 768, 3072), (2048, 640, 200)]


@pytest.fixture(scope="module")
def n192_modules(tmp_path_factory) -> dict:
    """kernels/gemm_n192.toml (gemm.cu's persistent kernels with 192-column tiles), three ways."""
    from ..support.artifacts import gemm_n192

    return loaded_modules(tmp_path_factory, "gemm_n192", gemm_n192.LAYOUT, gemm_n192.build_all)


# (M, N, K): one tile pair (N = 192); three 192-column tiles (576: no 256-column form); BERT-base's
# and GPT-2's Linears at 1024 rows (N = 768, 2304 and 3072; K = 768 and 3072); K not a multiple of 64.
N192_SIZES = [(256, 192, 8), (512, 576, 72), (1024, 768, 768), (1024, 768, 3072), (1024, 2304, 768), (1024, 3072, 768), (2048, 2304, 200)]


# (module, epilogue, M, N, K): each narrow-tile build's persistent kernels at its sizes (gemm_n128
# declares no GELU kernel).
NARROW = [("gemm_n128", name, *size) for name in ("gemm_bias_bf16", "gemm_bias_residual_bf16") for size in N128_SIZES] + \
         [("gemm_n192", name, *size) for name in ("gemm_bias_bf16", "gemm_bias_gelu_bf16", "gemm_bias_residual_bf16") for size in N192_SIZES]


@pytest.mark.parametrize("module, name, m, n, k", NARROW, ids=[f"{mod}-{name}-{m}x{n}x{k}" for mod, name, m, n, k in NARROW])
def test_narrow_tile_persistent_kernels_give_the_one_tile_kernels_bits(request, modules, module, name, m, n, k):
    """gemm_n128's and gemm_n192's <name>_persistent within check_epilogue's bound and bit for bit
    gemm's one-tile <name>; where the build has one, its gemm_nt_<...>_persistent (w [N, K], bf16
    bias) bit for bit that given w transposed and the bias widened: as built, poisoned, and the
    sm_80 PTX body."""
    import ml_dtypes

    narrow_modules = request.getfixturevalue(f"{module.removeprefix('gemm_')}_modules")
    rng = np.random.default_rng()
    a = rng.normal(0.25, 1.0, (m, k)).astype(ml_dtypes.bfloat16)
    w = rng.normal(-0.25, 1.0, (n, k)).astype(ml_dtypes.bfloat16)
    bias = rng.normal(0.5, 2.0, n).astype(ml_dtypes.bfloat16)
    residual = (rng.normal(-0.5, 4.0, (m, n)).astype(ml_dtypes.bfloat16),) if name in RESIDUALS else ()
    b, bias32 = np.ascontiguousarray(w.T), bias.astype(np.float32)
    nt_name = name.replace("gemm_", "gemm_nt_", 1) + "_persistent"
    reports = []
    for suffix in ("", "_poisonable", "_sm80_ptx_poisonable"):
        given = (lambda fill: ()) if suffix == "" else (lambda fill: (np.full((m, n), fill, ml_dtypes.bfloat16),))
        narrow = narrow_modules[f"{module}{suffix}"]
        got = getattr(narrow, f"{name}_persistent")(a, b, bias32, *residual, *given(np.nan))
        reports.append(check_epilogue(name, got, a, b, bias32, residual[0] if residual else None))
        one_tile = getattr(modules[f"gemm{suffix}"], name)(a, b, bias32, *residual, *given(-np.inf))
        np.testing.assert_array_equal(_bits(got), _bits(one_tile), err_msg=suffix)
        if hasattr(narrow, nt_name):
            nt = getattr(narrow, nt_name)(a, w, bias, *residual, *given(np.inf))
            np.testing.assert_array_equal(_bits(nt), _bits(got), err_msg=suffix)
    print(f"\n{module} {name}_persistent {m}x{n}x{k}: sm_90a {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


NT_SIZES = [*NT_PERSISTENT_SIZES, *N128_SIZES, *N192_SIZES]


@pytest.mark.parametrize("m, n, k", NT_SIZES, ids=[f"{m}x{n}x{k}" for m, n, k in NT_SIZES])
def test_nt_persistent_without_bias_rounds_gemm_bf16s_sums(request, modules, m, n, k):
    """gemm_nt_bf16_persistent (w [N, K], no bias; gemm's where N is a multiple of 256, gemm_n128's
    where N <= 768 is a multiple of 128, gemm_n192's where N is a multiple of 192) within the bound
    of one bf16 rounding of the float64 product, and bit for bit gemm_bf16's f32 sums of a @ w^T
    rounded to bf16: as built, poisoned, and the sm_80 PTX body."""
    import ml_dtypes

    rng = np.random.default_rng()
    a = rng.normal(0.25, 1.0, (m, k)).astype(ml_dtypes.bfloat16)
    w = rng.normal(-0.25, 1.0, (n, k)).astype(ml_dtypes.bfloat16)
    b, no_bias = np.ascontiguousarray(w.T), np.zeros(n, np.float32)
    kinds = ([("gemm", modules)] if n % 256 == 0 else []) + ([("gemm_n128", request.getfixturevalue("n128_modules"))] if n <= 768 and n % 128 == 0 else []) + \
            ([("gemm_n192", request.getfixturevalue("n192_modules"))] if n % 192 == 0 else [])
    assert kinds
    for module, loaded in kinds:
        reports = []
        for suffix in ("", "_poisonable", "_sm80_ptx_poisonable"):
            given = (lambda fill: ()) if suffix == "" else (lambda fill: (np.full((m, n), fill, ml_dtypes.bfloat16),))
            got = loaded[f"{module}{suffix}"].gemm_nt_bf16_persistent(a, w, *given(np.nan))
            reports.append(check_epilogue("gemm_bias_bf16", got, a, b, no_bias, None))
            sums = modules[f"gemm{suffix}"].gemm_bf16(a, b, *((np.full((m, n), -np.inf, np.float32),) if suffix else ()))
            np.testing.assert_array_equal(_bits(got), _bits(np.asarray(sums).astype(ml_dtypes.bfloat16)), err_msg=f"{module}{suffix}")
        print(f"\n{module}.gemm_nt_bf16_persistent {m}x{n}x{k}: sm_90a {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


def test_persistent_kernels_refuse_sizes_off_their_tiles(modules):
    import ml_dtypes

    a, b, bias = np.zeros((300, 64), ml_dtypes.bfloat16), np.zeros((64, 256), ml_dtypes.bfloat16), np.zeros(256, np.float32)
    with pytest.raises(ValueError, match=r"gemm_bias_bf16_persistent\(\): requires M % 256 == 0, but M = 300"):
        modules["gemm"].gemm_bias_bf16_persistent(a, b, bias)


def test_persistent_kernel_loads_misaligned_inputs_element_by_element(modules):
    """torch views 2 bytes past an aligned address: no TMA (16-byte aligned rows only), the
    element-by-element loads, the same bits as the one-tile kernel's own element path."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    m, n, k = 512, 768, 136
    g = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(m * k + 1, device="cuda", generator=g).bfloat16()[1:].view(m, k)
    b = torch.randn(k * n + 1, device="cuda", generator=g).bfloat16()[1:].view(k, n)
    bias = torch.randn(n, device="cuda", generator=g)
    assert a.data_ptr() % 16 and b.data_ptr() % 16
    got = modules["gemm"].gemm_bias_bf16_persistent(a, b, bias)
    one_tile = modules["gemm"].gemm_bias_bf16(a, b, bias)
    torch.cuda.synchronize()
    assert torch.equal(got.view(torch.int16), one_tile.view(torch.int16))
    check_epilogue("gemm_bias_bf16", got.float().cpu().numpy(), a.float().cpu().numpy(), b.float().cpu().numpy(), bias.cpu().numpy(), None)


def test_persistent_residual_reads_a_misaligned_residual(modules):
    """A residual 2 bytes past an aligned address (a torch view): read element by element where the
    results are stored, the same bits as the one-tile kernel's."""
    torch, a, b, bias, residual = misaligned_residual_inputs(weight_as_stored=False)
    got = modules["gemm"].gemm_bias_residual_bf16_persistent(a, b, bias, residual)
    one_tile = modules["gemm"].gemm_bias_residual_bf16(a, b, bias, residual)
    torch.cuda.synchronize()
    assert torch.equal(got.view(torch.int16), one_tile.view(torch.int16))
    check_epilogue("gemm_bias_residual_bf16", got.float().cpu().numpy(), a.float().cpu().numpy(), b.float().cpu().numpy(), bias.cpu().numpy(),
                   residual.float().cpu().numpy())


@pytest.fixture(scope="module")
def tensor_maps_cubin(tmp_path_factory):
    if have_compiler():
        return build_tensor_maps_cubin(tmp_path_factory.mktemp("tensor_maps") / TENSOR_MAPS)
    path = prebuilt_dir("gemm") / TENSOR_MAPS
    if not path.exists():
        pytest.fail(f"no compiler here and {path} missing; run python -m tests.support.artifacts")
    return path


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("m, n, k", [(4096, 4096, 4096), (300, 1000, 264), (129, 264, 520)])
def test_device_built_tensor_maps_equal_the_drivers(tensor_maps_cubin, dtype, m, n, k):
    """The sm_90a GEMM builds its TMA tensor maps on the device (IREE can't pass host-built
    ones): byte for byte what cuTensorMapEncodeTiled makes of the same a and b, boxes and swizzle."""
    cp = pytest.importorskip("cupy")
    driver = pytest.importorskip("cuda.bindings.driver")
    if runtime.cuda_compute_capability() != (9, 0):
        pytest.skip("the tensor-map builder is sm_90a code: needs compute capability 9.0")
    a, b = cp.empty(m * k, dtype=cp.uint16), cp.empty(k * n, dtype=cp.uint16)
    home = cp.full(32, 0xDEADBEEFDEADBEEF, dtype=cp.uint64)  # poisoned: every word must be written
    kernel = cp.RawModule(path=str(tensor_maps_cubin)).get_function(f"tensor_maps_{dtype}")
    kernel((1,), (32,), (a, b, home, np.int32(m), np.int32(n), np.int32(k)))
    got = home.get()
    element = driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 if dtype == "bf16" else driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16
    # A: [M, K], boxes of 128 rows x 64 columns; B: [K, N], boxes of 64 x 64.
    for name, ptr, rows, cols, box_rows, words in (("a", a.data.ptr, m, k, 128, got[:16]), ("b", b.data.ptr, k, n, 64, got[16:])):
        u32, u64 = driver.cuuint32_t, driver.cuuint64_t
        err, tensor_map = driver.cuTensorMapEncodeTiled(
            element, u32(2), ptr, [u64(cols), u64(rows)], [u64(cols * 2)], [u32(64), u32(box_rows)], [u32(1), u32(1)],
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B, driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        assert err == driver.CUresult.CUDA_SUCCESS, err
        want = np.array([int(w) for w in tensor_map.opaque], dtype=np.uint64)
        assert (words == want).all(), f"{name} map\n device: {[hex(w) for w in words]}\n driver: {[hex(w) for w in want]}"


# gemm_batched_bf16: (B, M, N, K). Batches of 1 and more; M and N not multiples of the 128 x 256
# tile; K = 64 (one k-tile); N < 256 (the tile's columns past N are TMA's zeros, its stores
# predicated on N). Which clusters load with TMA, for a c whose base is 128-byte aligned:
# - (1, 200, 72, 64), (3, 200, 72, 64): one and three batches, TMA, both of a cluster's blocks
#   active (rows 0-127 and 128-199), 72 of the tile's 256 columns;
# - (3, 7, 33, 9), (2, 130, 257, 72): N or K not a multiple of 8: element loads;
# - (4, 300, 40, 520): N = 40, 160-byte rows of c, too short to hold the tensor maps in a tile's
#   first row: they lie further down the tile's rows (the tile spans whole rows), TMA throughout;
# - (4, 385, 40, 520): the same, but the block of rows 384-384 has one 160-byte row, no room for
#   the maps: its cluster (rows 256-384) loads element by element, the first cluster with TMA, in
#   one launch; batches start at 61600-byte offsets, not 128-byte aligned;
# - (3, 100, 64, 128): N = 64 as attention's context; the cluster's second block starts past M
#   and sits out;
# - (2, 300, 1000, 264): several tiles along N, partial at both edges;
# - (96, 1024, 1024, 64) and (96, 1024, 64, 1024): GPT-2 small's attention scores (q @ k^T) and
#   context (p @ v) at batch 8 x 12 heads x 1024 tokens.
BATCHED_SIZES = [(1, 200, 72, 64), (3, 200, 72, 64), (3, 7, 33, 9), (2, 130, 257, 72), (4, 300, 40, 520), (4, 385, 40, 520),
                 (3, 100, 64, 128), (2, 300, 1000, 264), (96, 1024, 1024, 64), (96, 1024, 64, 1024)]


def test_batched_reference_is_the_float64_product_per_batch():
    rng = np.random.default_rng()
    a, b = rng.standard_normal((2, 5, 3)).astype(np.float16), rng.standard_normal((2, 3, 4)).astype(np.float16)
    want = [[[sum(float(a[z, i, k]) * float(b[z, k, j]) for k in range(3)) for j in range(4)] for i in range(5)] for z in range(2)]
    np.testing.assert_allclose(REFERENCES.gemm_batched_bf16(a, b), want, rtol=1e-15)


@pytest.mark.parametrize("batch, m, n, k", BATCHED_SIZES, ids=[f"{z}x{m}x{n}x{k}" for z, m, n, k in BATCHED_SIZES])
def test_batched_gemm_matches_float64(modules, batch, m, n, k):
    """Every element of every batch against the float64 product of that batch's (rounded) bf16
    inputs, |c - c64| <= RTOL * (|a| @ |b|), as gemm_bf16 (the same body per batch); three ways,
    two of them with c filled with NaN first."""
    import ml_dtypes

    rng = np.random.default_rng()
    # Per-batch means (0.25 + z/2 for a, -0.25 - z/4 for b): a tile that reads another batch's a or b
    # changes its sums.
    shift = np.arange(batch, dtype=np.float32)[:, None, None]
    a = (rng.normal(0.25, 1.0, (batch, m, k)).astype(np.float32) + 0.5 * shift).astype(ml_dtypes.bfloat16)
    b = (rng.normal(-0.25, 1.0, (batch, k, n)).astype(np.float32) - 0.25 * shift).astype(ml_dtypes.bfloat16)
    name = "gemm_batched_bf16"
    reports = [check(name, getattr(modules["gemm"], name)(a, b), a, b)]
    for module in ("gemm_poisonable", "gemm_sm80_ptx_poisonable"):
        poisoned = np.full((batch, m, n), np.nan, np.float32)
        reports.append(check(name, getattr(modules[module], name)(a, b, poisoned), a, b))
    print(f"\n{name} {batch}x{m}x{n}x{k}: sm_90a {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")

