"""On a CUDA device: every kernel of the library (kernels/library.toml) against its float64
reference (kernels/references.py), on fresh random data (never zeros) at sizes that are not
multiples of any vector width, block or tile: 1, 7, 33, 1000, 4097 and 8193 columns take the
scalar paths, 1024, 8192 and 12288 the float4 paths.

Each kernel runs twice: as built (IREE allocates the output) and from a copy of the module
whose outputs are declared in place, called with outputs filled with NaN, so an element the
kernel fails to write shows up.

Error bounds, element by element, |got - want| <= rtol * scale + atol, with scale = |want|
except for row sums (scale = sum |x| of the row, the sum's condition):
- float32 results: rtol 1e-5 (float accumulation over up to 12288 terms, expf, rsqrtf);
  max and transpose are exact.
- float16 results (bias_gelu_f16): rtol 1e-3, about two f16 roundings (2^-11 each).
- bfloat16 results (bias_gelu_bf16, bias_gelu_f32_bf16): rtol 4e-3, about two bf16 roundings
  (2^-9 each); the reference starts from the same (rounded) inputs, so only the result's
  rounding counts.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from iree_dispatch import runtime

from .conftest import ROOT, module_paths
from .library_artifacts import LAYOUT, build_all

pytestmark = pytest.mark.gpu

# 8193 and 12288 columns: rows longer than the row kernels' shared-memory cache (8192 floats).
SHAPES = [(1, 1), (1, 7), (7, 33), (33, 1000), (3, 4097), (1000, 7), (130, 1024), (2, 8192), (3, 8193), (2, 12288)]
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
    "softmax_warp_f32": (1e-5, 1e-12),
    "layernorm_warp_f32": (1e-5, 1e-5),
    "transpose_f32": (0.0, 0.0),
}


def _references():
    loader = importlib.util.spec_from_file_location("library_references", ROOT / "kernels" / "references.py")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


REFERENCES = _references()


def bfloat16() -> np.dtype:
    """numpy has no bfloat16; ml_dtypes (as iree_dispatch.runtime) provides it."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict[str, runtime.Module]:
    return {name: runtime.load(path) for name, path in module_paths(tmp_path_factory, "library", LAYOUT, build_all).items()}


def arguments(name: str, rows: int, cols: int, rng: np.random.Generator) -> tuple[list[np.ndarray], list[float]]:
    """(tensor inputs, scalar arguments) of kernel `name`, random and nonzero."""
    f32 = np.float32
    if name.startswith("bias_gelu"):
        dtype = {"bias_gelu_f16": np.float16, "bias_gelu_bf16": bfloat16()}.get(name, f32)
        return [rng.uniform(-4, 4, (rows, cols)).astype(dtype), rng.uniform(-1, 1, cols).astype(dtype)], []
    if name in ("softmax_f32", "softmax_warp_f32"):
        return [rng.normal(0, 3, (rows, cols)).astype(f32)], []
    if name in ("layernorm_f32", "layernorm_warp_f32"):
        # A mean larger than the spread, as the kernel's shifted variance must handle.
        x = rng.normal(2, 1.5, (rows, cols)).astype(f32)
        return [x, rng.uniform(0.5, 1.5, cols).astype(f32), rng.uniform(-1, 1, cols).astype(f32)], [1e-5]
    if name == "rmsnorm_f32":
        return [rng.normal(0, 1.5, (rows, cols)).astype(f32), rng.uniform(0.5, 1.5, cols).astype(f32)], [1e-6]
    return [rng.normal(0.5, 2, (rows, cols)).astype(f32)], []


def check(name: str, got: np.ndarray, want: np.ndarray, inputs: list[np.ndarray]) -> str:
    rtol, atol = BOUNDS[name]
    assert got.shape == want.shape, (name, got.shape, want.shape)
    scale = np.abs(inputs[0].astype(np.float64)).sum(axis=1) if name == "row_sum_f32" else np.abs(want)
    err = np.abs(got.astype(np.float64) - want)
    bad = ~(err <= rtol * scale + atol)  # NaN fails
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
