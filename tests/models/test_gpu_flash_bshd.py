"""On a CUDA device: the flash-attention entry points that read q, k and v each from its own
projection as stored (kernels/flash_attention.toml: flash_attn_bshd_{bf16,f16}_d{64,128}[_causal|_mask],
the sdpa_bshd kinds' kernels) against the float64 reference of torch's scaled_dot_product_attention
(kernels/references.py: flash_attention) on q, k and v transposed to [B, H, S, D], through IREE
(iree_dispatch.runtime).

q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] (separate projections' [B, S, H * D] results as stored)
-> out [B, Sq, Hq, D]: out[b, :, h] = softmax(q[b, :, h] @ k[b, :, h / G]ᵀ * scale + mask) @ v[b, :, h / G],
G = Hq / Hkv. Sequence lengths off the 128-row and 64-key tiles (1, 37, 200, 333, 70, 257) and on
them (128), keys past the d128 body's ring of key tiles (1300: 11 tiles of 128 through 3
stages), B > 1 and several heads, grouped-query (Hq 4 over Hkv 2) and multi-query (Hkv 1)
attention, so that q's and k's / v's different row strides (Hq * D, Hkv * D) are both exercised,
and Sq != Sk (causal top-left, as torch's is_causal): a block reading another head's or batch
entry's rows, the wrong key/value head, or writing another head's columns, fails (every (b, kv
head)'s v has its own mean). The scale is 0.9 / sqrt(D), not the default 1 / sqrt(D). Masks
[B, 1, 1, Sk] (a padding mask, BERT's), [B, 1, Sq, Sk], [B, Hq, Sq, Sk] and [1, 1, Sq, Sk]: random
additive values with about a quarter of the keys hidden by the type's lowest value, key 0 never
hidden. Hq % Hkv != 0: refused before launch (the spec's `requires`).

Each case runs three ways (tests/support/artifacts/flash_attention.py): the module as built (IREE
allocates the output; an H100 runs the sm_90a body), the copy whose output is declared in place
called with the output filled with NaN (an element the kernel fails to write stays NaN and fails),
and the sm_80-PTX-only copy (the mma.sync body, JIT-compiled), poisoned the same way.

Error bound, element by element: |out - out64| <= 1e-2 * (p64 @ |v|) + 1e-6, as
tests/models/test_gpu_flash_qkv.py."""

from __future__ import annotations

import numpy as np
import pytest

from ..support.artifacts.flash_attention import LAYOUT, build_all
from ..support.flash_heads_last import REFERENCES, check, mask_input, run_three_ways, type_of
from ..support.gpu_modules import loaded_modules

pytestmark = pytest.mark.gpu

# (B, Hq, Hkv, Sq, Sk)
SIZES = [(1, 1, 1, 1, 1), (2, 3, 3, 37, 37), (2, 4, 2, 128, 128), (3, 2, 2, 200, 200), (2, 4, 1, 333, 333), (2, 2, 2, 100, 257), (1, 4, 2, 300, 70), (1, 4, 2, 700, 1300)]
# mask name → its shape [MB, MH, MQ, Sk] for (B, Hq, Sq, Sk)
MASKS = {
    "b11s": lambda b, h, sq, sk: (b, 1, 1, sk),
    "b1ss": lambda b, h, sq, sk: (b, 1, sq, sk),
    "bhss": lambda b, h, sq, sk: (b, h, sq, sk),
    "11ss": lambda b, h, sq, sk: (1, 1, sq, sk),
}
FUNCTIONS = [f"flash_attn_bshd_{t}_d{d}{m}" for t in ("bf16", "f16") for d in (64, 128) for m in ("", "_causal")]
MASKED = [f"flash_attn_bshd_{t}_d{d}_mask" for t in ("bf16", "f16") for d in (64, 128)]


def size_id(size: tuple[int, ...]) -> str:
    b, hq, hkv, sq, sk = size
    return f"B{b}_H{hq}over{hkv}_S{sq}x{sk}"


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    return loaded_modules(tmp_path_factory, "flash_attention", LAYOUT, build_all)



def bshd_inputs(b: int, hq: int, hkv: int, sq: int, sk: int, d: int, np_type, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D]: q and k of standard deviation 1.5 (scores of a
    few units), v of each (b, kv head) with its own mean."""
    q = rng.normal(0.0, 1.5, (b, sq, hq, d))
    k = rng.normal(0.0, 1.5, (b, sk, hkv, d))
    v = rng.normal(0.0, 1.0, (b, sk, hkv, d)) + 0.25 * np.arange(b * hkv).reshape(b, 1, hkv, 1)
    return tuple(x.astype(np.float32).astype(np_type) for x in (q, k, v))





@pytest.mark.parametrize("size", SIZES, ids=[size_id(s) for s in SIZES])
@pytest.mark.parametrize("function", FUNCTIONS)
def test_flash_bshd_matches_float64(modules, function, size):
    type_name, np_type, d = type_of(function)
    causal = function.endswith("_causal")
    rng = np.random.default_rng()
    q, k, v = bshd_inputs(*size, d, np_type, rng)
    scale = float(np.float32(0.9 / np.sqrt(d)))
    reports = run_three_ways(modules, function, [q, k, v], q.shape, np_type, scale, lambda got: check(got, q, k, v, None, causal, scale))
    print(f"\n{function} {size_id(size)}: as built {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


@pytest.mark.parametrize("mask_name", MASKS)
@pytest.mark.parametrize("size", SIZES, ids=[size_id(s) for s in SIZES])
@pytest.mark.parametrize("function", MASKED)
def test_flash_bshd_mask_matches_float64(modules, function, size, mask_name):
    type_name, np_type, d = type_of(function)
    b, hq, _, sq, sk = size
    rng = np.random.default_rng()
    q, k, v = bshd_inputs(*size, d, np_type, rng)
    mask = mask_input(MASKS[mask_name](b, hq, sq, sk), type_name, np_type, rng)
    scale = float(np.float32(0.9 / np.sqrt(d)))
    reports = run_three_ways(modules, function, [q, k, v, mask], q.shape, np_type, scale, lambda got: check(got, q, k, v, mask, False, scale))
    print(f"\n{function} {size_id(size)} mask {mask.shape}: as built {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


@pytest.mark.parametrize("function", ["flash_attn_bshd_bf16_d64", "flash_attn_bshd_f16_d128_mask"])
def test_flash_bshd_heads_that_dont_divide_are_refused_before_launch(modules, function):
    """Hq = 3 over Hkv = 2: no key/value head to read. Refused by the call's check of the spec's
    `requires`, naming the relation and the sizes, on every module; the poisoned output that a
    launch would have written keeps its poison."""
    type_name, np_type, d = type_of(function)
    rng = np.random.default_rng()
    q, k, v = bshd_inputs(2, 3, 2, 70, 70, d, np_type, rng)
    args = [q, k, v] + ([mask_input((2, 1, 1, 70), type_name, np_type, rng)] if function.endswith("_mask") else [])
    refused = rf"{function}\(\): requires Hq % Hkv == 0, but Hq = 3, Hkv = 2"
    with pytest.raises(ValueError, match=refused):
        getattr(modules["flash_attention"], function)(*args, 0.125)
    for module in ("flash_attention_poisonable", "flash_attention_sm80_ptx_poisonable"):
        poisoned = np.full(q.shape, np.nan, np_type)
        with pytest.raises(ValueError, match=refused):
            getattr(modules[module], function)(*args, poisoned, 0.125)
        assert np.all(np.isnan(poisoned.astype(np.float32)))


def test_reference_reads_the_heads_as_stored():
    """The reference on the transposed tensors is attention per (b, h) on q[b, :, h] and the key/value
    head h / G, computed directly by numpy from the [B, S, H, D] tensors."""
    rng = np.random.default_rng()
    q, k, v = rng.normal(0.0, 1.0, (2, 5, 4, 8)), rng.normal(0.0, 1.0, (2, 6, 2, 8)), rng.normal(0.0, 1.0, (2, 6, 2, 8))
    got = REFERENCES.flash_attention(*(x.transpose(0, 2, 1, 3) for x in (q, k, v)), scale=0.7).transpose(0, 2, 1, 3)
    b, h = 1, 3
    scores = q[b, :, h] @ k[b, :, h // 2].T * 0.7
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got[b, :, h], (p / p.sum(axis=1, keepdims=True)) @ v[b, :, h // 2], rtol=1e-12)
