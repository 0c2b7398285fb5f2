"""The kernel library's GPU test, run twice: in library/test_gpu_library.py on the library as
built by the system nvcc, and in toolchains/test_gpu_toolchains.py on each toolchain's build
(each module that imports it collects it, with its own `modules` fixture).

On a CUDA device: every kernel of the library (kernels/library.toml) against its float64
reference (kernels/references.py), on fresh random data (never zeros) at sizes that are not
multiples of any vector width, block or tile: 1, 7, 33, 1000, 4097, 8193 and 20001 columns take
the scalar paths, 1024, 8192, 12288 and 20000 the float4 paths (bf16 and f16 kernels: 1000
columns also takes the 8-element vector path). Row caches of the kernels that write rows: block
per row f32, 1024 columns in registers (256 unaligned) + 8192 in shared memory; bf16 and f16,
4096 (1024) + 8192; so 8192 and 8193 columns are cached, 12288 only by bf16/f16, 20000 and 20001
by neither (read twice from global memory). Warp per row: 1024 columns in registers (16-bit
vectors: 2048, LayerNorm 1024), longer rows stream.

Each kernel runs twice: as built (IREE allocates the output) and from a copy of the module
whose outputs are declared in place, called with outputs filled with NaN, so an element the
kernel fails to write shows up.

Error bounds, element by element, |got - want| <= rtol * scale + atol, with scale = |want|
except for row sums (scale = sum |x| of the row, the sum's condition):
- float32 results: rtol 1e-5 (float accumulation over up to 12288 terms, expf, rsqrtf);
  max and transpose are exact.
- float16 results (bias_gelu_f16): rtol 1e-3, about two f16 roundings (2^-11 each).
- bfloat16 results (bias_gelu_bf16, bias_gelu_f32_bf16): rtol 4e-3, one bf16 rounding of the
  result (up to 2^-8 = 3.9e-3 relative); the reference starts from the same (rounded) inputs,
  so only the result's rounding counts.
- bfloat16 row kernels (softmax_bf16, layernorm_bf16, rmsnorm_bf16 and their _warp_ forms: bf16
  in and out, float32 arithmetic): rtol 4e-3, one rounding of the result (bf16 keeps 8
  significant bits: up to 2^-8 = 3.9e-3 relative, measured 3.9e-3) plus float32 arithmetic and
  softmax's __expf (~1e-6); atol as their float32 forms (softmax 1e-12, LayerNorm 1e-5,
  RMSNorm 1e-6).
- LayerNorm, every type, also: 4e-5 of |(x - mean) * rstd * w| + |bias| (the row statistics'
  f32 error, which an output that cancels to near 0 keeps; LAYERNORM_STATISTICS below).
- float16 row kernels (softmax_f16, layernorm_f16, rmsnorm_f16 and their _warp_ forms): rtol
  1e-3, one rounding of the result (f16 keeps 11 significant bits: up to 2^-11 = 4.9e-4
  relative) plus the same float32 arithmetic; atol as the bf16 forms except softmax, 6e-8:
  f16's exponent is short, outputs below its smallest normal (6.1e-5: most of a long row's
  softmax) are subnormal, spaced 2^-24 = 6e-8 apart, so their rounding is up to 3e-8 absolute,
  not relative (below that they round to 0). bf16 has float's exponent range and no such floor.
"""

from __future__ import annotations

import numpy as np
import pytest

from .references import bfloat16, load_references

# 8193 and 12288 columns: past the row kernels' register caches; 20000 and 20001: past registers
# and shared memory together.
SHAPES = [(1, 1), (1, 7), (7, 33), (33, 1000), (3, 4097), (1000, 7), (130, 1024), (2, 8192), (3, 8193), (2, 12288), (2, 20000), (1, 20001)]
# kernel → (rtol, atol)
BOUNDS = {
    "bias_gelu_f32": (1e-5, 1e-6),
    "bias_gelu_f16": (1e-3, 1e-6),
    "bias_gelu_bf16": (4e-3, 1e-6),
    "bias_gelu_f32_bf16": (4e-3, 1e-6),
    "row_sum_f32": (1e-5, 0.0),
    "row_max_f32": (0.0, 0.0),
    "softmax_f32": (1e-5, 1e-12),
    "layernorm_f32": (1e-5, 1e-5),
    "rmsnorm_f32": (1e-5, 1e-6),
    "softmax_bf16": (4e-3, 1e-12),
    "layernorm_bf16": (4e-3, 1e-5),
    "rmsnorm_bf16": (4e-3, 1e-6),
    "softmax_f16": (1e-3, 6e-8),
    "layernorm_f16": (1e-3, 1e-5),
    "rmsnorm_f16": (1e-3, 1e-6),
    "softmax_warp_f32": (1e-5, 1e-12),
    "layernorm_warp_f32": (1e-5, 1e-5),
    "softmax_warp_bf16": (4e-3, 1e-12),
    "layernorm_warp_bf16": (4e-3, 1e-5),
    "rmsnorm_warp_bf16": (4e-3, 1e-6),
    "softmax_warp_f16": (1e-3, 6e-8),
    "layernorm_warp_f16": (1e-3, 1e-5),
    "rmsnorm_warp_f16": (1e-3, 1e-6),
    "transpose_f32": (0.0, 0.0),
}


REFERENCES = load_references()


def arguments(name: str, rows: int, cols: int, rng: np.random.Generator) -> tuple[list[np.ndarray], list[float]]:
    """(tensor inputs, scalar arguments) of kernel `name`, random and nonzero."""
    f32 = np.float32
    if name.startswith("bias_gelu"):
        dtype = {"bias_gelu_f16": np.float16, "bias_gelu_bf16": bfloat16()}.get(name, f32)
        return [rng.uniform(-4, 4, (rows, cols)).astype(dtype), rng.uniform(-1, 1, cols).astype(dtype)], []
    # row kernels: every tensor of the kernel's type
    dtype = bfloat16() if name.endswith("_bf16") else np.float16 if name.endswith("_f16") else f32
    if name.startswith("softmax"):
        return [rng.normal(0, 3, (rows, cols)).astype(dtype)], []
    if name.startswith("layernorm"):
        # A mean larger than the spread, as the kernel's shifted variance must handle.
        x = rng.normal(2, 1.5, (rows, cols)).astype(dtype)
        return [x, rng.uniform(0.5, 1.5, cols).astype(dtype), rng.uniform(-1, 1, cols).astype(dtype)], [1e-5]
    if name.startswith("rmsnorm"):
        return [rng.normal(0, 1.5, (rows, cols)).astype(dtype), rng.uniform(0.5, 1.5, cols).astype(dtype)], [1e-6]
    return [rng.normal(0.5, 2, (rows, cols)).astype(f32)], []


# LayerNorm's row statistics are f32 sums over up to 20001 elements (each lane adds up to 626 of
# them in turn: up to 626 * 2^-24 = 3.7e-5 of their scale, usually far less). Their error scales
# the normalized term (x - mean) * rstd * w, which an output near 0 cancels against the bias: the
# error is then a fraction of |term| + |bias|, not of the output. Measured on an H100 at 3 x 8193
# (f16, 300 x 3 rows of each form): the element nearest the old bound was off by 8e-6, 4e-6 of its
# |term| + |bias| (1.93).
LAYERNORM_STATISTICS = 4e-5


def _layernorm_terms(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """|(x - mean) * rstd * weight| + |bias| per element, in float64 (eps 1e-5 as the tests pass)."""
    x64 = x.astype(np.float64)
    centered = x64 - x64.mean(axis=1, keepdims=True)
    rstd = 1.0 / np.sqrt((centered**2).mean(axis=1, keepdims=True) + 1e-5)
    return np.abs(centered * rstd * weight.astype(np.float64)) + np.abs(bias.astype(np.float64))


def check(name: str, got: np.ndarray, want: np.ndarray, inputs: list[np.ndarray]) -> str:
    rtol, atol = BOUNDS[name]
    assert got.shape == want.shape, (name, got.shape, want.shape)
    scale = np.abs(inputs[0].astype(np.float64)).sum(axis=1) if name == "row_sum_f32" else np.abs(want)
    err = np.abs(got.astype(np.float64) - want)
    bound = rtol * scale + atol
    if name.startswith("layernorm"):
        bound = bound + LAYERNORM_STATISTICS * _layernorm_terms(*inputs)
    bad = ~(err <= bound)  # NaN fails
    assert not bad.any(), f"{name}: {int(bad.sum())} of {bad.size} elements off, first at {np.argwhere(bad)[0].tolist()}"
    return f"max|err| {err.max():.2e}  max err/scale {np.max(err / np.maximum(scale, 1e-30)):.2e}"


@pytest.mark.parametrize("rows, cols", SHAPES, ids=[f"{r}x{c}" for r, c in SHAPES])
@pytest.mark.parametrize("name", list(BOUNDS))
def test_kernel_matches_reference(modules, name, rows, cols):
    rng = np.random.default_rng()
    inputs, scalars = arguments(name, rows, cols, rng)
    want = getattr(REFERENCES, name)(*inputs, *scalars)
    got = getattr(modules["library"], name)(*inputs, *scalars)
    report = check(name, got, want, inputs)
    poisoned = np.full(want.shape, np.nan, got.dtype)
    got = getattr(modules["library_poisonable"], name)(*inputs, poisoned, *scalars)
    report_poisoned = check(name, got, want, inputs)
    print(f"\n{name} {rows}x{cols}: {report} | NaN-poisoned output: {report_poisoned}")
