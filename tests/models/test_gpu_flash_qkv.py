"""On a CUDA device: the flash-attention entry points that read q, k and v from one qkv projection
(kernels/flash_attention.toml: flash_attn_qkv_{bf16,f16}_d{64,128}[_causal|_mask], the sdpa_qkv
kinds' kernels) against the float64 reference of torch's scaled_dot_product_attention
(kernels/references.py: flash_attention) on q, k and v sliced out of the same tensor, through IREE
(iree_dispatch.runtime).

qkv [B, S, 3, H, D] (the projection's [B, S, 3E] result as stored) -> out [B, S, H, D]:
out[b, :, h] = softmax(q @ kᵀ * scale + mask) @ v with q = qkv[b, :, 0, h], k = qkv[b, :, 1, h],
v = qkv[b, :, 2, h]. Sequence lengths off the 128-row and 64-key tiles (1, 37, 200, 333) and on
them (128), one past the d128 body's ring of key tiles (1100: 9 tiles of 128 through 3 stages),
B > 1 and several heads, so that a block reading another head's or batch entry's rows,
k where v belongs, or writing another head's columns, fails: every (b, h)'s v has its own mean.
The scale is 0.9 / sqrt(D), not the default 1 / sqrt(D), so that a kernel ignoring its scale
argument fails. Masks [B, 1, 1, S] (a padding mask), [B, 1, S, S], [B, H, S, S] and [1, 1, S, S]
(each broadcast dim of size 1 read as such): random additive values with about a quarter of the
keys hidden by the type's lowest value, key 0 never hidden (no row is masked entirely).

Each case runs three ways (tests/support/artifacts/flash_attention.py): the module as built (IREE
allocates the output; an H100 runs the sm_90a body), the copy whose output is declared in place
called with the output filled with NaN (an element the kernel fails to write stays NaN and fails),
and the sm_80-PTX-only copy (the mma.sync body, JIT-compiled), poisoned the same way.

Error bound, element by element: |out - out64| <= 1e-2 * (p64 @ |v|) + 1e-6 (the kernels' bound,
tests/library/test_gpu_attention.py: the probabilities and the result rounded to bf16 or f16, f32
scores and softmax)."""

from __future__ import annotations

import numpy as np
import pytest

from ..support.artifacts.flash_attention import LAYOUT, build_all
from ..support.flash_heads_last import REFERENCES, check, mask_input, run_three_ways, type_of
from ..support.gpu_modules import loaded_modules
from ..support.references import bfloat16

pytestmark = pytest.mark.gpu

# (B, H, S): S off and on the tiles, B > 1 and several heads
SIZES = [(1, 1, 1), (2, 3, 37), (2, 2, 128), (3, 2, 200), (2, 2, 333), (1, 2, 1100)]
# mask name → its shape [MB, MH, MQ, S] for (B, H, S)
MASKS = {
    "b11s": lambda b, h, s: (b, 1, 1, s),
    "b1ss": lambda b, h, s: (b, 1, s, s),
    "bhss": lambda b, h, s: (b, h, s, s),
    "11ss": lambda b, h, s: (1, 1, s, s),
}
FUNCTIONS = [f"flash_attn_qkv_{t}_d{d}{m}" for t in ("bf16", "f16") for d in (64, 128) for m in ("", "_causal")]
MASKED = [f"flash_attn_qkv_{t}_d{d}_mask" for t in ("bf16", "f16") for d in (64, 128)]


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    return loaded_modules(tmp_path_factory, "flash_attention", LAYOUT, build_all)



def qkv_input(batch: int, heads: int, s: int, d: int, np_type, rng) -> np.ndarray:
    """qkv [B, S, 3, H, D]: q and k of standard deviation 1.5 (scores of a few units), v of each
    (b, h) with its own mean."""
    qkv = rng.normal(0.0, 1.5, (batch, s, 3, heads, d)).astype(np.float32)
    means = 0.25 * np.arange(batch * heads, dtype=np.float32).reshape(batch, 1, heads, 1)
    qkv[:, :, 2] = rng.normal(0.0, 1.0, (batch, s, heads, d)) + means
    return qkv.astype(np_type)





def heads_of(qkv: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, k and v [B, S, H, D] sliced out of qkv [B, S, 3, H, D]."""
    return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]


@pytest.mark.parametrize("batch, heads, s", SIZES, ids=[f"{b}x{h}x{s}" for b, h, s in SIZES])
@pytest.mark.parametrize("function", FUNCTIONS)
def test_flash_qkv_matches_float64(modules, function, batch, heads, s):
    type_name, np_type, d = type_of(function)
    causal = function.endswith("_causal")
    rng = np.random.default_rng()
    qkv = qkv_input(batch, heads, s, d, np_type, rng)
    scale = float(np.float32(0.9 / np.sqrt(d)))
    reports = run_three_ways(modules, function, [qkv], (batch, s, heads, d), np_type, scale, lambda got: check(got, *heads_of(qkv), None, causal, scale))
    print(f"\n{function} B={batch} H={heads} S={s}: as built {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


@pytest.mark.parametrize("mask_name", MASKS)
@pytest.mark.parametrize("batch, heads, s", SIZES, ids=[f"{b}x{h}x{s}" for b, h, s in SIZES])
@pytest.mark.parametrize("function", MASKED)
def test_flash_qkv_mask_matches_float64(modules, function, batch, heads, s, mask_name):
    type_name, np_type, d = type_of(function)
    rng = np.random.default_rng()
    qkv = qkv_input(batch, heads, s, d, np_type, rng)
    mask = mask_input(MASKS[mask_name](batch, heads, s), type_name, np_type, rng)
    scale = float(np.float32(0.9 / np.sqrt(d)))
    reports = run_three_ways(modules, function, [qkv, mask], (batch, s, heads, d), np_type, scale, lambda got: check(got, *heads_of(qkv), mask, False, scale))
    print(f"\n{function} B={batch} H={heads} S={s} mask {mask.shape}: as built {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


def test_reference_slices_the_heads():
    """The reference on qkv's slices is attention per (b, h) on its own columns: one head's result
    computed directly, by numpy, from qkv[b, :, i, h]."""
    rng = np.random.default_rng()
    qkv = rng.normal(0.0, 1.0, (2, 5, 3, 3, 4))
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    got = REFERENCES.flash_attention(q, k, v, scale=0.7).transpose(0, 2, 1, 3)
    b, h = 1, 2
    scores = qkv[b, :, 0, h] @ qkv[b, :, 1, h].T * 0.7
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got[b, :, h], (p / p.sum(axis=1, keepdims=True)) @ qkv[b, :, 2, h], rtol=1e-12)


def test_gqa_heads_that_dont_divide_are_refused_before_launch(modules):
    """flash_attn_bf16_d64 with Hq = 6 query heads over Hkv = 4 key/value heads (Hq % Hkv != 0,
    where the kernel would write NaN): refused by the call's check of the spec's `requires`,
    naming the relation and the sizes, before anything is launched."""
    rng = np.random.default_rng()
    q = rng.standard_normal((1, 6, 40, 64)).astype(bfloat16())
    k, v = (rng.standard_normal((1, 4, 40, 64)).astype(bfloat16()) for _ in range(2))
    with pytest.raises(ValueError, match=r"flash_attn_bf16_d64\(\): requires Hq % Hkv == 0, but Hq = 6, Hkv = 4"):
        modules["flash_attention"].flash_attn_bf16_d64(q, k, v, 0.125)
