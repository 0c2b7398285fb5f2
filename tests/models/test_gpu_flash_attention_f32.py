"""On a CUDA device: the f32 flash-attention kernels (kernels/flash_attention_f32.toml:
flash_attn_f32_d<64|128>[_causal|_mask]) against the float64 reference of torch's
scaled_dot_product_attention (kernels/references.py: flash_attention), through IREE
(iree_dispatch.runtime), on fresh random data.

Shapes: one query and key; tails of the 64-row query tiles and of the key tiles (64 keys for d64,
32 for d128); causal with Sq > Sk and Sq < Sk; grouped-query (8 / 2 heads) and multi-query
(Hkv = 1) attention; BERT's self-attention at 4 x 512 tokens. The masked kernel takes masks
[B, 1, Sq, Sk], [B, 1, 1, Sk], [1, Hq, Sq, Sk] and [B, Hq, Sq, Sk] (by case), each with -inf at
random, and where it has 3 rows or more, per slice one row all -inf (NaN, as torch) and one all
finfo(f32).min (finite: it averages v).

Each case runs three ways: the module as built (IREE allocates out; an H100 runs the sm_90a
cubin), the copy whose output is declared in place called with out filled with NaN (an element
the kernel fails to write stays NaN and fails), and the sm_80-PTX-only copy, poisoned the same
way. Every element is checked: NaN exactly where the reference is NaN, elsewhere
|out - ref| <= ATOL + RTOL * |ref|. The runtime passes 16-byte aligned buffers (the cp.async
path); test_misaligned_views passes torch views one element into their buffers (only 4-byte
aligned, as IREE's bindings inside a model may be: the element-copy path), launched directly.
The [B, S, H, D] (flash_attn_bshd_f32_*) and one-qkv-tensor (flash_attn_qkv_f32_*) entry points
are checked bit for bit against the [B, H, S, D] kernels of the same object.

Error bound: the kernel computes in f32 throughout (FFMA scores over D products, exponentials by
ex2.approx, ~2 ulp; f32 p @ v over Sk keys): errors of a few 1e-7 relative to the row's values;
2e-5 leaves a wide margin while a key, a head or a row read from the wrong place is off by far
more (v has a mean per key/value head)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pytest

from ..support.artifacts.flash_attention_f32 import LAYOUT, build_all
from ..support.gpu_modules import loaded_modules
from ..support.references import load_references

pytestmark = pytest.mark.gpu

RTOL = ATOL = 2e-5
REFERENCES = load_references()
WAYS = ("as built", "poisoned", "sm_80 PTX poisoned")
KERNELS = [f"flash_attn_f32_d{d}{m}" for d in (64, 128) for m in ("", "_causal", "_mask")]


@dataclass(frozen=True)
class Case:
    b: int
    hq: int
    hkv: int
    sq: int
    sk: int
    mask: str = "b1qk"  # the masked kernel's mask: which of [B, Hq, Sq] it has in full ("b1qk": [B, 1, Sq, Sk])

    def mask_shape(self) -> tuple[int, int, int, int]:
        full = {"b": self.b, "h": self.hq, "q": self.sq}
        return tuple(full.get(c, 1) for c in self.mask[:3]) + (self.sk,)


CASES = {
    "one": Case(1, 1, 1, 1, 1, "111k"),
    "tails": Case(2, 3, 3, 200, 333),
    "tiles_plus_one": Case(1, 2, 2, 129, 257, "1hqk"),
    "sq_over_sk": Case(1, 2, 2, 300, 70, "b11k"),
    "sq_under_sk": Case(1, 2, 2, 100, 257, "bhqk"),
    "gqa": Case(2, 8, 2, 70, 33, "b11k"),
    "mqa": Case(1, 4, 1, 65, 64, "1hqk"),
    "bert": Case(4, 12, 12, 512, 512, "b11k"),
}


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    return loaded_modules(tmp_path_factory, "flash_attention_f32", LAYOUT, build_all)


def inputs(kernel: str, case: Case, rng: np.random.Generator):
    """q, k, v (v with a mean per key/value head), the mask (masked kernels only) and the scale."""
    d = int(kernel.split("_d")[1].split("_")[0])
    q = (rng.standard_normal((case.b, case.hq, case.sq, d)) * 1.5).astype(np.float32)
    k = (rng.standard_normal((case.b, case.hkv, case.sk, d)) * 1.5).astype(np.float32)
    v = (rng.standard_normal((case.b, case.hkv, case.sk, d)) + rng.standard_normal((case.b, case.hkv, 1, 1)) * 2).astype(np.float32)
    mask = None
    if kernel.endswith("_mask"):
        shape = case.mask_shape()
        mask = (rng.standard_normal(shape) * 2).astype(np.float32)
        mask[rng.random(shape) < 0.2] = -np.inf
        if shape[2] >= 3:
            mask[:, :, 0, :] = -np.inf
            mask[:, :, 1, :] = np.finfo(np.float32).min
    scale = float(rng.uniform(0.5, 1.5) / np.sqrt(d))
    return q, k, v, mask, scale


def reference(kernel: str, q, k, v, mask, scale) -> np.ndarray:
    return REFERENCES.flash_attention(q, k, v, mask=mask, causal=kernel.endswith("_causal"), scale=np.float32(scale))


def check(kernel: str, way: str, got, want: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> float:
    """Every element: NaN exactly where `want` is, elsewhere within atol + rtol |want|; the
    largest error over its bound."""
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == np.float32, (way, got.shape, got.dtype)
    got = got.astype(np.float64)
    nan = np.isnan(want)
    err = np.where(nan, 0.0, np.abs(got - np.where(nan, 0.0, want)))
    bound = atol + rtol * np.abs(np.where(nan, 0.0, want))
    bad = (np.isnan(got) != nan) | ~(err <= bound)
    if bad.any():
        idx = tuple(np.argwhere(bad)[0])
        pytest.fail(f"{kernel} ({way}): {int(bad.sum())} elements off, first at {idx}: got {got[idx]}, want {want[idx]}")
    return float(np.max(err / bound))


def call(module, kernel: str, q, k, v, mask, scale, out=None):
    """The kernel's call: (q, k, v[, mask][, out], scale): out only for the in-place copies."""
    buffers = [q, k, v] + ([mask] if mask is not None else []) + ([out] if out is not None else [])
    return getattr(module, kernel)(*buffers, scale)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("case", list(CASES))
def test_matches_float64(modules, kernel, case):
    q, k, v, mask, scale = inputs(kernel, CASES[case], np.random.default_rng())
    want = reference(kernel, q, k, v, mask, scale)
    results = [call(modules["flash_attention_f32"], kernel, q, k, v, mask, scale)]
    for module in ("flash_attention_f32_poisonable", "flash_attention_f32_sm80_ptx_poisonable"):
        results.append(call(modules[module], kernel, q, k, v, mask, scale, np.full(q.shape, np.nan, np.float32)))
    worst = [check(kernel, way, got, want) for way, got in zip(WAYS, results)]
    print(f"\n{kernel} {case}: " + " | ".join(f"{way} max err/bound {w:.3f}" for way, w in zip(WAYS, worst)))


@pytest.mark.parametrize("kernel", KERNELS)
def test_misaligned_views(modules, kernel):
    """q, k, v, the mask and out as torch views one element into their buffers: 4-byte aligned
    only, so the kernel copies element by element; out poisoned with NaN."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    q, k, v, mask, scale = inputs(kernel, Case(1, 2, 2, 257, 255, "b1qk"), np.random.default_rng())

    def view(a: np.ndarray):
        buffer = torch.empty(a.size + 1, dtype=torch.float32, device="cuda")
        buffer[1:] = torch.from_numpy(a.reshape(-1))
        t = buffer[1:].view(a.shape)
        assert t.data_ptr() % 16 == 4
        return t

    out = view(np.full(q.shape, np.nan, np.float32))
    call(modules["flash_attention_f32_poisonable"], kernel, view(q), view(k), view(v), view(mask) if mask is not None else None, scale, out)
    torch.cuda.synchronize()
    check(kernel, "misaligned, poisoned", out.cpu().numpy(), reference(kernel, q, k, v, mask, scale))


def test_sizes_the_spec_requires_are_refused_before_launch(modules):
    """Hq % Hkv != 0 (the kernel would write NaN) and a mask dim neither 1 nor its full size are
    refused by the call's checks (the spec's `requires`), naming the relation and the sizes:
    nothing is launched, the output given in place keeps what it held."""
    rng = np.random.default_rng()
    q, k, v, _, scale = inputs("flash_attn_f32_d64", Case(1, 3, 2, 10, 10), rng)
    out = np.full(q.shape, 7.0, np.float32)
    with pytest.raises(ValueError, match=r"flash_attn_f32_d64\(\): requires Hq % Hkv == 0, but Hq = 3, Hkv = 2"):
        call(modules["flash_attention_f32_poisonable"], "flash_attn_f32_d64", q, k, v, None, scale, out)
    q, k, v, _, scale = inputs("flash_attn_f32_d64_mask", Case(3, 2, 2, 10, 10), rng)
    assert np.all(out == 7.0)
    mask = rng.standard_normal((2, 1, 10, 10)).astype(np.float32)  # MB = 2 of B = 3: would broadcast wrongly
    out = np.full(q.shape, 7.0, np.float32)
    with pytest.raises(ValueError, match=r"requires MB == 1 or MB == B, but MB = 2, B = 3"):
        call(modules["flash_attention_f32_poisonable"], "flash_attn_f32_d64_mask", q, k, v, mask, scale, out)
    assert np.all(out == 7.0)


def test_bert_shape_rate(modules):
    """BERT-base's self-attention in f32 at 16 x 512 tokens, a [16, 1, 1, 512] padding mask: every
    element checked, and the rate of a synchronous call on device-resident inputs (its overhead
    included: a lower bound on the kernel's own)."""
    kernel = "flash_attn_f32_d64_mask"
    rng = np.random.default_rng()
    q, k, v, _, scale = inputs(kernel, Case(16, 12, 12, 512, 512), rng)
    lengths = rng.integers(1, 513, 16)
    mask = np.where(np.arange(512)[None, :] < lengths[:, None], 0.0, -np.inf).astype(np.float32).reshape(16, 1, 1, 512)
    module = modules["flash_attention_f32"]
    dq, dk, dv, dm = (module.to_device(a) for a in (q, k, v, mask))
    worst = check(kernel, "as built", call(module, kernel, dq, dk, dv, dm, scale), reference(kernel, q, k, v, mask, scale))
    times = []
    for _ in range(10):
        start = time.perf_counter()
        call(module, kernel, dq, dk, dv, dm, scale)
        times.append(time.perf_counter() - start)
    tflops = 4.0 * 16 * 12 * 512 * 512 * 64 / float(np.median(times)) / 1e12
    print(f"\n{kernel} B16 H12 S512: max err/bound {worst:.3f}, {float(np.median(times)) * 1e3:.3f} ms, {tflops:.1f} TFLOP/s (wall)")


BSHD_KERNELS = [f"flash_attn_bshd_f32_d{d}{m}" for d in (64, 128) for m in ("", "_causal", "_mask")]
BSHD_CASES = ["tails", "gqa", "mqa", "bert"]


@pytest.mark.parametrize("kernel", BSHD_KERNELS)
@pytest.mark.parametrize("case", BSHD_CASES)
def test_bshd_layout_gives_the_same_bits(modules, kernel, case):
    """flash_attn_bshd_f32_*: q, k, v and out as [B, S, H, D] (the projections' layout), the same
    computation as the [B, H, S, D] kernel of the same object: its output, transposed, bit for bit
    (the sm_90a cubin and the sm_80 PTX, outputs poisoned with NaN). The heads kernels are checked
    against float64 by test_matches_float64."""
    heads_kernel = kernel.replace("_bshd", "")
    q, k, v, mask, scale = inputs(heads_kernel, CASES[case], np.random.default_rng())
    qs, ks, vs = (np.ascontiguousarray(a.transpose(0, 2, 1, 3)) for a in (q, k, v))
    for module in ("flash_attention_f32_poisonable", "flash_attention_f32_sm80_ptx_poisonable"):
        want = np.asarray(call(modules[module], heads_kernel, q, k, v, mask, scale, np.full(q.shape, np.nan, np.float32))).transpose(0, 2, 1, 3)
        got = np.asarray(call(modules[module], kernel, qs, ks, vs, mask, scale, np.full(qs.shape, np.nan, np.float32)))
        assert got.shape == want.shape
        differ = got.view(np.uint32) != want.view(np.uint32)
        assert not differ.any(), f"{kernel} ({module}): {int(differ.sum())} elements differ, first at {np.argwhere(differ)[0].tolist()}"


QKV_KERNELS = [f"flash_attn_qkv_f32_d{d}{m}" for d in (64, 128) for m in ("", "_causal", "_mask")]
QKV_CASES = ["one", "tails", "tiles_plus_one", "bert"]  # self-attention: Hq = Hkv, Sq = Sk (the CASES with both)


@pytest.mark.parametrize("kernel", QKV_KERNELS)
@pytest.mark.parametrize("case", QKV_CASES)
def test_qkv_layout_gives_the_same_bits(modules, kernel, case):
    """flash_attn_qkv_f32_*: q, k and v read from one qkv [B, S, 3, H, D] tensor (a qkv
    projection's result as stored), out written as [B, S, H, D]; the same computation as the
    [B, H, S, D] kernel of the same object: its output, transposed, bit for bit (the sm_90a cubin
    and the sm_80 PTX, outputs poisoned with NaN). q, k and v are drawn independently (v with a mean
    per head), so a row read from the wrong third or head fails."""
    c = CASES[case]
    case_self = Case(c.b, c.hq, c.hq, c.sq, c.sq, c.mask)
    heads_kernel = kernel.replace("_qkv", "")
    q, k, v, mask, scale = inputs(heads_kernel, case_self, np.random.default_rng())
    qkv = np.ascontiguousarray(np.stack([a.transpose(0, 2, 1, 3) for a in (q, k, v)], axis=2))  # [B, S, 3, H, D]
    for module in ("flash_attention_f32_poisonable", "flash_attention_f32_sm80_ptx_poisonable"):
        want = np.asarray(call(modules[module], heads_kernel, q, k, v, mask, scale, np.full(q.shape, np.nan, np.float32))).transpose(0, 2, 1, 3)
        buffers = [qkv] + ([mask] if mask is not None else []) + [np.full(want.shape, np.nan, np.float32)]
        got = np.asarray(getattr(modules[module], kernel)(*buffers, scale))
        assert got.shape == want.shape
        differ = got.view(np.uint32) != want.view(np.uint32)
        assert not differ.any(), f"{kernel} ({module}): {int(differ.sum())} elements differ, first at {np.argwhere(differ)[0].tolist()}"
