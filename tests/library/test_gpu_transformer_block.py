"""On a CUDA device: the transformer-block programs (mlir/transformer_block_*.mlir, sizes
T = 8192, D = 1024, H = 4096) against a float64 numpy reference and against each other, on fresh
random data; then each hand-written kernel at the block's sizes, with NaN-poisoned outputs.

The reference follows the programs' roundings: x and h are rounded to bf16 (round to nearest
even, as arith.truncf and the kernels do), everything else is float64. What remains between a
program and the reference is f32 arithmetic: the matmuls' f32 accumulation (K = 1024, 4096), f32
LayerNorm and softmax, and the bf16 rounding of h, which goes the other way wherever the f32
value of gelu(x W1 + b1) lies within its error of a rounding boundary (about one element of h
per row). One such element moves y by one bf16 ulp of h times |W2| (up to 2^-5 x 0.09 = 3e-3
at |h| ~ 5, |W2| < 6/sqrt(H); typically 1e-5). A float32 numpy emulation of the block is off
by 5e-5 at the 99th percentile and 9.4e-4 at most in z, so:
- z = layernorm(y):  |got - want| <= 5e-3 (absolute: z is O(1) and crosses zero);
- out = softmax(z):  |got - want| <= 1e-2 |want| + 1e-12 (a softmax's relative error is at
  most twice the largest absolute error of its inputs).
A wrong eps (1e-2 for 1e-5) alone moves z by 2.5e-2.
The mixed programs must equal the codegen program within the same bounds, taking the codegen
result as `want`; mixed_gemm_epilogues (GEMMs with bias + GELU and the residual fused in) must
give mixed_gemm's bits exactly. IREE allocates a program's outputs itself, so they can't be poisoned; but no
element of z or out is zero here (out > 0 always, z is continuous), so an element a program
fails to write (zeroed) can't pass. The kernels themselves run with NaN-filled outputs below.

Kernel bounds at the block's sizes (float64 reference from the same inputs):
- bias_gelu, layernorm, softmax: as tests/library/test_gpu_library.py (rtol 1e-5; bias_gelu_f32_bf16,
  which rounds to bf16: rtol 4e-3, one bf16 rounding of the result, up to 2^-8);
- gemm_bf16: |got - want| <= K 2^-23 (|a| @ |b|), the worst-case error of f32 accumulation of K
  products (exact in f32), doubled for an accumulator that truncates rather than rounds.
"""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.artifacts.transformer import BLOCKS, EPS, LAYOUT, NEEDS_GEMM, D, H, T, bf16, block_inputs, block_reference, build_all, have_gemm, references
from ..support.gpu_modules import module_paths

pytestmark = pytest.mark.gpu
Z_ATOL = 5e-3
OUT_RTOL, OUT_ATOL = 1e-2, 1e-12
REFERENCES = references()


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict[str, runtime.Module]:
    paths = module_paths(tmp_path_factory, "transformer", LAYOUT, build_all, keep=lambda name, path: name not in NEEDS_GEMM or have_gemm())
    return {name: runtime.load(path) for name, path in paths.items()}


@pytest.fixture(scope="module")
def block():
    """Inputs and the float64 reference, once per module (the reference's matmuls take seconds)."""
    inputs = block_inputs(np.random.default_rng())
    return inputs, block_reference(inputs)


@pytest.fixture(scope="module")
def results(modules, block) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    inputs, _ = block
    got = {}
    for name in BLOCKS:
        if name in modules:
            z, out = modules[name].transformer_block(*inputs.values())
            got[name] = (z.to_host(), out.to_host())
    return got


def check_block(label: str, z: np.ndarray, out: np.ndarray, want_z: np.ndarray, want_out: np.ndarray) -> str:
    assert z.shape == out.shape == (T, D) and z.dtype == out.dtype == np.float32, (label, z.shape, z.dtype, out.shape, out.dtype)
    z_err = np.abs(z.astype(np.float64) - want_z)
    out_err = np.abs(out.astype(np.float64) - want_out)
    bad_z = ~(z_err <= Z_ATOL)  # NaN fails
    bad_out = ~(out_err <= OUT_RTOL * np.abs(want_out) + OUT_ATOL)
    assert not bad_z.any(), f"{label}: z: {int(bad_z.sum())} of {z.size} elements off, first at {np.argwhere(bad_z)[0].tolist()}, max err {np.nanmax(z_err):.2e}"
    assert not bad_out.any(), f"{label}: out: {int(bad_out.sum())} of {out.size} elements off, first at {np.argwhere(bad_out)[0].tolist()}"
    return f"z max|err| {z_err.max():.2e}, out max rel err {np.max(out_err / np.abs(want_out)):.2e}"


@pytest.mark.parametrize("name", BLOCKS)
def test_program_matches_float64_reference(results, block, name):
    if name not in results:
        pytest.skip("kernels/gemm.toml is not there yet")
    print(f"\n{name} vs float64: {check_block(name, *results[name], *block[1])}")


@pytest.mark.parametrize("name", BLOCKS[1:])
def test_mixed_program_equals_codegen(results, name):
    if name not in results:
        pytest.skip("kernels/gemm.toml is not there yet")
    want_z, want_out = (a.astype(np.float64) for a in results["codegen"])
    print(f"\n{name} vs codegen: {check_block(f'{name} vs codegen', *results[name], want_z, want_out)}")


def test_fused_gemm_epilogues_give_mixed_gemms_bits(results):
    """mixed_gemm_epilogues does mixed_gemm's arithmetic in the same order, fused into the GEMMs
    (bias + GELU + bf16 into the first, bias + residual into the second): the same bits."""
    if not {"mixed_gemm", "mixed_gemm_epilogues"} <= results.keys():
        pytest.skip("kernels/gemm.toml is not there yet")
    for label, got, want in zip(("z", "out"), results["mixed_gemm_epilogues"], results["mixed_gemm"]):
        differ = got.view(np.uint32) != want.view(np.uint32)
        assert not differ.any(), f"{label}: {int(differ.sum())} of {got.size} elements differ, first at {np.argwhere(differ)[0].tolist()}"


def kernel_case(name: str, rng: np.random.Generator):
    """(inputs, scalars, float64 reference, |error| bound as a function of the reference) of a
    kernel at the block's sizes, with the block's distributions."""
    f32 = np.float32
    if name == "bias_gelu_f32":
        inputs = [rng.standard_normal((T, H), dtype=f32), rng.uniform(-0.5, 0.5, H).astype(f32)]
        return inputs, [], REFERENCES.bias_gelu_f32(*inputs), lambda want: 1e-5 * np.abs(want) + 1e-6
    if name == "bias_gelu_f32_bf16":
        inputs = [rng.standard_normal((T, H), dtype=f32), rng.uniform(-0.5, 0.5, H).astype(f32)]
        return inputs, [], REFERENCES.bias_gelu_f32_bf16(*inputs), lambda want: 4e-3 * np.abs(want) + 1e-6
    if name.startswith("layernorm"):
        inputs = [rng.normal(0.3, 1.2, (T, D)).astype(f32), rng.uniform(0.5, 1.5, D).astype(f32), rng.uniform(-0.5, 0.5, D).astype(f32)]
        return inputs, [EPS], REFERENCES.layernorm_f32(*inputs, EPS), lambda want: 1e-5 * np.abs(want) + 1e-5
    if name.startswith("softmax"):
        inputs = [rng.normal(0, 1.2, (T, D)).astype(f32)]
        return inputs, [], REFERENCES.softmax_f32(*inputs), lambda want: 1e-5 * np.abs(want) + 1e-12
    m, k, n = {"gemm_bf16_up": (T, D, H), "gemm_bf16_down": (T, H, D)}[name]
    a, b = bf16(rng.standard_normal((m, k), dtype=f32)), bf16(rng.standard_normal((k, n), dtype=f32) / np.sqrt(k))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    bound = k * 2.0**-23 * (np.abs(a64) @ np.abs(b64))
    return [a, b], [], a64 @ b64, lambda want: bound


KERNEL_CASES = ["bias_gelu_f32", "bias_gelu_f32_bf16", "layernorm_warp_f32", "softmax_warp_f32", "layernorm_f32", "softmax_f32", "gemm_bf16_up", "gemm_bf16_down"]


@pytest.mark.parametrize("case", KERNEL_CASES)
def test_kernel_at_block_size(modules, case):
    kernel = "gemm_bf16" if case.startswith("gemm") else case
    if kernel == "gemm_bf16" and not have_gemm():
        pytest.skip("kernels/gemm.toml is not there yet")
    inputs, scalars, want, bound = kernel_case(case, np.random.default_rng())
    out_dtype = bf16(np.zeros(1)).dtype if case == "bias_gelu_f32_bf16" else np.dtype(np.float32)
    poisoned = np.full(want.shape, np.nan, out_dtype)
    got = getattr(modules["kernels_poisonable"], kernel)(*inputs, poisoned, *scalars)
    assert got.dtype == poisoned.dtype, (case, got.dtype)
    err = np.abs(got.astype(np.float64) - want)
    bad = ~(err <= bound(want))
    assert not bad.any(), f"{case}: {int(bad.sum())} of {bad.size} elements off, first at {np.argwhere(bad)[0].tolist()}"
    print(f"\n{case} {list(want.shape)} NaN-poisoned: max|err| {err.max():.2e}")
