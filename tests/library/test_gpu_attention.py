"""On a CUDA device: the fused attention kernels (kernels/attention.toml, attention_bf16 and
attention_qkv_bf16) against their float64 reference, through IREE (iree_dispatch.runtime).

out[z] = softmax(q[z] @ kt[z] / 8 + mask[z // H]) @ v[z], q [Z, S, 64], kt [Z, 64, S], v [Z, S, 64],
mask [B, S, S], H = Z // B. Sequence lengths not multiples of the 64-row and 64-key tiles (1, 37,
40, 129, 200, 1000) and multiples (64, 1024); S not a multiple of 8 takes the element-by-element
loads of kt and the mask. Several heads per mask entry (H = 6, 12), so that a block reading another
batch entry's mask fails. Masks: causal with bf16's minimum above the diagonal (GPT-2's), causal
with -inf, causal with keys padded out on the left (rows whose keys are all masked: the whole row
is then uniform, every score equal to the mask value, as in the model and the reference), random
additive values with some keys masked (no causal structure: no tile can be skipped but by the
mask), and rows masked entirely with -inf (NaN in the output, as torch's softmax).

attention_qkv_bf16 computes the same from a [B, S, 3, H, 64] projection result into [B, S, H, 64]:
its result, brought to the [B * H, S, 64] layout, is checked against attention_bf16's reference
on q, kt and v taken from the same tensor (a head reading another head's columns, or k where v
belongs, fails: every head's v has its own mean).

Each case runs three ways: the module as built (IREE allocates the output; an H100 runs the
sm_90 cubin), the copy whose output is declared in place called with the output filled with NaN
(an element the kernel fails to write stays NaN and fails), and the sm_80-PTX-only copy, poisoned
the same way.

Error bound, element by element: |out - out64| <= 1e-2 * (p64 @ |v|) + 1e-6, with out64 and p64
the float64 result and probabilities from the same (rounded) bf16 inputs. What the kernel adds:
the probabilities rounded to bf16 before the second product (at most 2^-8 of each term: 2^-8 of
p64 @ |v|), the result rounded to bf16 (2^-8 of |out| <= 2^-8 of p64 @ |v|), f32 accumulation of
64-term scores (~1e-5 absolute on scores of a few units, the same relative in p) and exp2's
approximation (2^-22): at most about 2^-7 = 7.8e-3 in all, under 1e-2. A key dropped, doubled or
taken from the wrong place moves its p (here up to a few tenths: q and k are drawn with standard
deviation 1.5, scores of standard deviation ~2.3) times |v| (values with per-z means), far above
the bound.
"""

from __future__ import annotations

import numpy as np
import pytest

from ..support.artifacts.attention import LAYOUT, build_all
from ..support.gpu_modules import loaded_modules
from ..support.references import bfloat16, load_references

pytestmark = pytest.mark.gpu

NAME = "attention_bf16"
RTOL = 1e-2
BF16_MIN = -3.3895313892515355e38  # torch.finfo(torch.bfloat16).min


REFERENCES = load_references()


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    return loaded_modules(tmp_path_factory, "attention", LAYOUT, build_all)


def make_mask(kind: str, batch: int, s: int, rng) -> np.ndarray:
    causal = np.tril(np.ones((s, s), dtype=bool))
    if kind == "causal":
        m = np.where(causal, 0.0, BF16_MIN)[None].repeat(batch, 0)
    elif kind == "causal_inf":
        m = np.where(causal, 0.0, -np.inf)[None].repeat(batch, 0)
    elif kind == "causal_left_padded":  # batch entry b has its first (b * 7) % s keys masked out
        m = np.empty((batch, s, s))
        for b in range(batch):
            keep = causal.copy()
            keep[:, : (b * 7) % s] = False
            m[b] = np.where(keep, 0.0, BF16_MIN)
    elif kind == "random":  # additive values, about a third of the keys masked, no causal structure
        m = rng.normal(0.0, 1.0, (batch, s, s))
        m[rng.random((batch, s, s)) < 0.3] = BF16_MIN
    elif kind == "rows_inf":  # causal, and every 5th row masked entirely with -inf
        m = np.where(causal, 0.0, BF16_MIN)[None].repeat(batch, 0)
        m[:, ::5, :] = -np.inf
    else:
        raise ValueError(kind)
    return m.astype(np.float32).astype(bfloat16())


def inputs(z: int, batch: int, s: int, kind: str, seed=None):
    rng = np.random.default_rng(seed)
    bf16 = bfloat16()
    shift = np.arange(z, dtype=np.float32)[:, None, None]  # per-z means: reading another z's v shows
    q = rng.normal(0.0, 1.5, (z, s, 64)).astype(bf16)
    kt = rng.normal(0.0, 1.5, (z, 64, s)).astype(bf16)
    v = (rng.normal(0.0, 1.0, (z, s, 64)).astype(np.float32) + 0.25 * shift).astype(bf16)
    return q, kt, v, make_mask(kind, batch, s, rng)


def probabilities(q, kt, mask) -> np.ndarray:
    heads = q.shape[0] // mask.shape[0]
    x = np.matmul(q.astype(np.float64), kt.astype(np.float64)) * 0.125 + np.repeat(mask.astype(np.float64), heads, axis=0)
    x = x.astype(np.float32).astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=2, keepdims=True))
        return e / e.sum(axis=2, keepdims=True)


def check(got: np.ndarray, q, kt, v, mask) -> str:
    want = REFERENCES.attention_bf16(q, kt, v, mask)
    p = probabilities(q, kt, mask)
    scale = np.matmul(p, np.abs(v.astype(np.float64)))
    bound = RTOL * scale + 1e-6
    assert got.shape == want.shape, (got.shape, want.shape)
    got64 = got.astype(np.float64)
    nan_rows = np.isnan(want)  # rows masked entirely with -inf: NaN, as torch's softmax
    assert (np.isnan(got64) == nan_rows).all(), f"NaN where the reference has none, or not where it has: {int((np.isnan(got64) != nan_rows).sum())} elements"
    err = np.where(nan_rows, 0.0, np.abs(got64 - want))
    bad = ~(err <= np.where(nan_rows, 1.0, bound))
    first = tuple(np.argwhere(bad)[0]) if bad.any() else ()
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} elements off, first at {list(first)}: got {got[first]}, want {want[first]}"
    ok = ~nan_rows
    return f"max err/bound {np.max(err[ok] / bound[ok]) if ok.any() else 0.0:.2f}"


def test_reference_fully_masked_rows():
    """A row masked with bf16's minimum everywhere averages v; with -inf everywhere it is NaN."""
    q, kt, v = np.ones((1, 3, 64)), np.arange(192.0).reshape(1, 64, 3) / 100, np.arange(192.0).reshape(1, 3, 64)
    mask = np.zeros((1, 3, 3))
    mask[0, 0, :] = BF16_MIN
    mask[0, 1, :] = -np.inf
    out = REFERENCES.attention_bf16(q, kt, v, mask)
    np.testing.assert_allclose(out[0, 0], v[0].mean(axis=0))
    assert np.isnan(out[0, 1]).all() and not np.isnan(out[0, 2]).any()


# (Z, B, S): Z = B * heads
SIZES = [(1, 1, 1), (2, 1, 37), (4, 4, 40), (3, 1, 64), (12, 2, 129), (12, 2, 200), (6, 1, 1000), (24, 2, 1024)]
MASKS = ["causal", "causal_inf", "causal_left_padded", "random", "rows_inf"]


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("z, batch, s", SIZES, ids=[f"{z}x{b}x{s}" for z, b, s in SIZES])
def test_attention_matches_float64(modules, z, batch, s, mask_kind):
    q, kt, v, mask = inputs(z, batch, s, mask_kind)
    reports = [check(getattr(modules["attention"], NAME)(q, kt, v, mask), q, kt, v, mask)]
    for module in ("attention_poisonable", "attention_sm80_ptx_poisonable"):
        poisoned = np.full((z, s, 64), np.nan, bfloat16())
        reports.append(check(getattr(modules[module], NAME)(q, kt, v, mask, poisoned), q, kt, v, mask))
    print(f"\n{NAME} Z={z} B={batch} S={s} {mask_kind}: as built {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


def test_gpt2_small_shapes(modules):
    """GPT-2 small at batch 8 x 1024 tokens, 12 heads: Z = 96, the causal mask of bf16's minimum."""
    q, kt, v, mask = inputs(96, 8, 1024, "causal")
    got = getattr(modules["attention"], NAME)(q, kt, v, mask)
    print(f"\n{NAME} GPT-2 small: {check(got, q, kt, v, mask)}")


QKV_NAME = "attention_qkv_bf16"
# (B, H, S): several heads per batch entry, sequence lengths off and on the tiles
QKV_SIZES = [(1, 1, 1), (2, 1, 37), (1, 3, 129), (2, 12, 200), (3, 2, 1000)]


def qkv_inputs(batch: int, heads: int, s: int, kind: str, seed=None):
    """qkv [B, S, 3, H, 64] (v of each head with its own mean) and a mask [B, S, S]."""
    rng = np.random.default_rng(seed)
    qkv = rng.normal(0.0, 1.5, (batch, s, 3, heads, 64)).astype(np.float32)
    qkv[:, :, 2] = rng.normal(0.0, 1.0, (batch, s, heads, 64)) + 0.25 * np.arange(batch * heads, dtype=np.float32).reshape(batch, 1, heads, 1)
    return qkv.astype(bfloat16()), make_mask(kind, batch, s, rng)


def check_qkv(got: np.ndarray, qkv, mask) -> str:
    """got [B, S, H, 64] against attention_bf16's reference on the heads of qkv."""
    b, s, _, h, d = qkv.shape
    assert got.shape == (b, s, h, d), got.shape
    heads = np.transpose(qkv, (2, 0, 3, 1, 4)).reshape(3, b * h, s, d)
    q, kt, v = heads[0], np.ascontiguousarray(np.transpose(heads[1], (0, 2, 1))), heads[2]
    return check(np.transpose(got, (0, 2, 1, 3)).reshape(b * h, s, d), q, kt, v, mask)


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("batch, heads, s", QKV_SIZES, ids=[f"{b}x{h}x{s}" for b, h, s in QKV_SIZES])
def test_attention_qkv_matches_float64(modules, batch, heads, s, mask_kind):
    qkv, mask = qkv_inputs(batch, heads, s, mask_kind)
    reports = [check_qkv(getattr(modules["attention"], QKV_NAME)(qkv, mask), qkv, mask)]
    for module in ("attention_poisonable", "attention_sm80_ptx_poisonable"):
        poisoned = np.full((batch, s, heads, 64), np.nan, bfloat16())
        reports.append(check_qkv(getattr(modules[module], QKV_NAME)(qkv, mask, poisoned), qkv, mask))
    print(f"\n{QKV_NAME} B={batch} H={heads} S={s} {mask_kind}: as built {reports[0]} | poisoned {reports[1]} | sm_80 PTX poisoned {reports[2]}")


def test_attention_qkv_gpt2_small_shapes(modules):
    """GPT-2 small at batch 8 x 1024 tokens: the [8, 1024, 2304] projection result, 12 heads."""
    qkv, mask = qkv_inputs(8, 12, 1024, "causal")
    poisoned = np.full((8, 1024, 12, 64), np.nan, bfloat16())
    got = getattr(modules["attention_poisonable"], QKV_NAME)(qkv, mask, poisoned)
    print(f"\n{QKV_NAME} GPT-2 small: {check_qkv(got, qkv, mask)}")
