"""On a CUDA device: the f32 flash-attention kernels whose products are summed in f64
(kernels/flash_attention_f32_f64acc.toml: flash_attn[_bshd | _qkv]_f32_f64acc_d64[_causal | _mask])
against the float64 reference of torch's scaled_dot_product_attention (kernels/references.py:
flash_attention), through IREE (iree_dispatch.runtime), on fresh random data: the cases, inputs
and masks of test_gpu_flash_attention_f32.py (tails of the query and key tiles, causal with
Sq > Sk and Sq < Sk, grouped- and multi-query heads, rows all -inf and all finfo(f32).min,
BERT's self-attention at 4 x 512 tokens).

Each case runs three ways: as built (an H100 or H200 runs the sm_90 cubin, mma m16n8k16), and
with out declared in place and filled with NaN first, as built and as sm_80 PTX only (mma m8n8k4).
Every element: NaN exactly where the reference is NaN, elsewhere |out - ref| <= 2e-6 + 2e-6 |ref|,
a tenth of the f32 kernels' bound: the scores are rounded to f32 once and the exponentials are
ex2.approx's (~2 ulp), the rest is f64 (errors of about 2e-7 of the row's values). test_misaligned_views
passes views one element into their buffers (the element-copy path). The [B, S, H, D] and qkv
entry points give the [B, H, S, D] kernel's bits."""

from __future__ import annotations

import numpy as np
import pytest

from ..support.artifacts.flash_attention_f32_f64acc import LAYOUT, build_all
from ..support.gpu_modules import loaded_modules
from .test_gpu_flash_attention_f32 import CASES, WAYS, Case, call, inputs, reference
from .test_gpu_flash_attention_f32 import check as f32_check

pytestmark = pytest.mark.gpu

RTOL = ATOL = 2e-6
BUILD = "flash_attention_f32_f64acc"
KERNELS = [f"flash_attn_f32_f64acc_d64{m}" for m in ("", "_causal", "_mask")]


@pytest.fixture(scope="module")
def modules(tmp_path_factory) -> dict:
    return loaded_modules(tmp_path_factory, BUILD, LAYOUT, build_all)


def check(kernel: str, way: str, got, want: np.ndarray) -> float:
    return f32_check(kernel, way, got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("case", list(CASES))
def test_matches_float64(modules, kernel, case):
    q, k, v, mask, scale = inputs(kernel, CASES[case], np.random.default_rng())
    want = reference(kernel, q, k, v, mask, scale)
    results = [call(modules[BUILD], kernel, q, k, v, mask, scale)]
    for module in (f"{BUILD}_poisonable", f"{BUILD}_sm80_ptx_poisonable"):
        results.append(call(modules[module], kernel, q, k, v, mask, scale, np.full(q.shape, np.nan, np.float32)))
    worst = [check(kernel, way, got, want) for way, got in zip(WAYS, results)]
    print(f"\n{kernel} {case}: " + " | ".join(f"{way} max err/bound {w:.3f}" for way, w in zip(WAYS, worst)))


@pytest.mark.parametrize("kernel", KERNELS)
def test_misaligned_views(modules, kernel):
    """q, k, v, the mask and out as torch views one element into their buffers: 4-byte aligned
    only, so the kernel copies element by element and stores one float at a time; out poisoned."""
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
    call(modules[f"{BUILD}_poisonable"], kernel, view(q), view(k), view(v), view(mask) if mask is not None else None, scale, out)
    torch.cuda.synchronize()
    check(kernel, "misaligned, poisoned", out.cpu().numpy(), reference(kernel, q, k, v, mask, scale))


def _same_bits(kernel: str, module: str, got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    differ = got.view(np.uint32) != want.view(np.uint32)
    assert not differ.any(), f"{kernel} ({module}): {int(differ.sum())} elements differ, first at {np.argwhere(differ)[0].tolist()}"


@pytest.mark.parametrize("kernel", [f"flash_attn_bshd_f32_f64acc_d64{m}" for m in ("", "_causal", "_mask")])
@pytest.mark.parametrize("case", ["tails", "gqa", "bert"])
def test_bshd_layout_gives_the_same_bits(modules, kernel, case):
    """[B, S, H, D] q, k, v and out: the [B, H, S, D] kernel's output, transposed, bit for bit
    (sm_90 cubin and sm_80 PTX, outputs poisoned)."""
    heads_kernel = kernel.replace("_bshd", "")
    q, k, v, mask, scale = inputs(heads_kernel, CASES[case], np.random.default_rng())
    qs, ks, vs = (np.ascontiguousarray(a.transpose(0, 2, 1, 3)) for a in (q, k, v))
    for module in (f"{BUILD}_poisonable", f"{BUILD}_sm80_ptx_poisonable"):
        want = np.asarray(call(modules[module], heads_kernel, q, k, v, mask, scale, np.full(q.shape, np.nan, np.float32))).transpose(0, 2, 1, 3)
        _same_bits(kernel, module, np.asarray(call(modules[module], kernel, qs, ks, vs, mask, scale, np.full(qs.shape, np.nan, np.float32))), want)


@pytest.mark.parametrize("kernel", [f"flash_attn_qkv_f32_f64acc_d64{m}" for m in ("", "_causal", "_mask")])
@pytest.mark.parametrize("case", ["one", "tails", "bert"])
def test_qkv_layout_gives_the_same_bits(modules, kernel, case):
    """q, k and v from one qkv [B, S, 3, H, D] tensor, out [B, S, H, D]: the [B, H, S, D] kernel's
    output, transposed, bit for bit (sm_90 cubin and sm_80 PTX, outputs poisoned)."""
    c = CASES[case]
    heads_kernel = kernel.replace("_qkv", "")
    q, k, v, mask, scale = inputs(heads_kernel, Case(c.b, c.hq, c.hq, c.sq, c.sq, c.mask), np.random.default_rng())
    qkv = np.ascontiguousarray(np.stack([a.transpose(0, 2, 1, 3) for a in (q, k, v)], axis=2))
    for module in (f"{BUILD}_poisonable", f"{BUILD}_sm80_ptx_poisonable"):
        want = np.asarray(call(modules[module], heads_kernel, q, k, v, mask, scale, np.full(q.shape, np.nan, np.float32))).transpose(0, 2, 1, 3)
        buffers = [qkv] + ([mask] if mask is not None else []) + [np.full(want.shape, np.nan, np.float32)]
        _same_bits(kernel, module, np.asarray(getattr(modules[module], kernel)(*buffers, scale)), want)
