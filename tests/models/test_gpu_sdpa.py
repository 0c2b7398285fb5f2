"""On a CUDA device: the SDPA export (tests/models/sdpa_bf16.torch.mlir) compiled with its
attention ops replaced by flash_attention.toml's kernels, each function against the float64
reference of torch's scaled_dot_product_attention (kernels/references.py: flash_attention), on
fresh random inputs. The model allocates its own outputs (no poisoned output buffer as the kernel
tests have): a row the kernel fails to write holds whatever the allocator gave, which the bound
catches unless it happens to be right.

Error bound, element by element: |out - out64| <= 1e-2 * (p64 @ |v|) + 1e-6 (the kernel's own
test's bound: the probabilities and the result rounded to bf16 or f16, f32 scores)."""

from __future__ import annotations

import numpy as np
import pytest

from ..support.artifacts.sdpa_model import LAYOUT, build_all
from ..support.gpu_modules import loaded_modules
from ..support.references import bfloat16, load_references

pytestmark = pytest.mark.gpu

B, H, S = 1, 4, 16
# function → (head dim, key/value heads, mask shape or None, causal, scale, dtype)
CASES = {
    "plain": (64, H, None, False, None, "bf16"),
    "causal": (64, H, None, True, None, "bf16"),
    "masked": (64, H, (B, 1, S, S), False, None, "bf16"),
    "masked_full": (64, H, (B, H, S, S), False, None, "bf16"),
    "scaled": (64, H, None, False, 0.30078125, "bf16"),  # SDPA's scale=0.3 as the model holds it (bf16)
    "gqa": (64, H // 2, None, True, None, "bf16"),
    "head_dim_128": (128, H, None, False, None, "bf16"),
    "f16": (64, H, None, True, None, "f16"),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return loaded_modules(tmp_path_factory, "sdpa_model", LAYOUT, build_all)["sdpa"]


@pytest.mark.parametrize("function", [*CASES, "transposed"])
def test_gpu_sdpa_model(model, function):
    refs = load_references()
    d, hkv, mask_shape, causal, scale, dtype = CASES.get(function, (64, H, None, True, None, "bf16"))
    np_dtype = bfloat16() if dtype == "bf16" else np.float16
    rng = np.random.default_rng(abs(hash(function)) % 2**32)
    q = (rng.standard_normal((B, H, S, d)) * 1.5).astype(np.float32).astype(np_dtype)
    k = (rng.standard_normal((B, hkv, S, d)) * 1.5).astype(np.float32).astype(np_dtype)
    v = (rng.standard_normal((B, hkv, S, d)) + rng.standard_normal((1, hkv, 1, 1)) * 2).astype(np.float32).astype(np_dtype)
    mask = (rng.standard_normal(mask_shape) * 2).astype(np.float32).astype(np_dtype) if mask_shape else None
    args = [q, k, v] + ([mask] if mask is not None else [])
    if function == "transposed":  # the model takes and returns [B, S, H, D]
        args = [np.ascontiguousarray(a.transpose(0, 2, 1, 3)) for a in args]
    out = model[function](*args)
    out = np.asarray(out.to_host() if hasattr(out, "to_host") else out, np.float64)
    if function == "transposed":
        out = out.transpose(0, 2, 1, 3)
    expected = refs.flash_attention(q, k, v, mask=mask, causal=causal, scale=scale)
    weights = refs.flash_attention(q, k, np.abs(v.astype(np.float64)), mask=mask, causal=causal, scale=scale)  # p64 @ |v|
    assert out.shape == expected.shape
    assert np.all(np.abs(out - expected) <= 1e-2 * weights + 1e-6), function
