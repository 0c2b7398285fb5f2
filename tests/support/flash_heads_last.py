"""What the GPU tests of the flash-attention entry points that read and write heads last
([B, S, H, D]: flash_attn_qkv_* from one qkv projection, flash_attn_bshd_* from separate ones)
share: their inputs' masks, the float64 check of a result and the three ways each case runs."""

from __future__ import annotations

import numpy as np

from .references import bfloat16, load_references

RTOL = 1e-2
REFERENCES = load_references()
LOWEST = {"bf16": -3.3895313892515355e38, "f16": -65504.0}  # torch.finfo(dtype).min: how transformers hides a key


def type_of(function: str) -> tuple[str, type, int]:
    """(type name, numpy type, head dim) of flash_attn_<layout>_<type>_d<D>[...]."""
    name, d = function.split("_")[3:5]
    return name, (bfloat16() if name == "bf16" else np.float16), int(d[1:])


def mask_input(shape: tuple[int, ...], type_name: str, np_type, rng) -> np.ndarray:
    """Additive values, about a quarter of the keys hidden by the type's lowest value, key 0 never."""
    m = rng.normal(0.0, 2.0, shape)
    hidden = rng.random(shape) < 0.25
    hidden[..., 0] = False
    return np.where(hidden, LOWEST[type_name], m).astype(np.float32).astype(np_type)


def check(got, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, causal: bool, scale: float) -> str:
    """got [B, Sq, Hq, D] against the float64 reference on q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D]
    (transposed to [B, H, S, D] for it): within RTOL of p @ |v| everywhere, NaN nowhere."""
    got = np.asarray(got.to_host() if hasattr(got, "to_host") else got)
    assert got.shape == q.shape, got.shape
    qh, kh, vh = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))
    want = REFERENCES.flash_attention(qh, kh, vh, mask=mask, causal=causal, scale=scale).transpose(0, 2, 1, 3)
    weights = REFERENCES.flash_attention(qh, kh, np.abs(vh.astype(np.float64)), mask=mask, causal=causal, scale=scale).transpose(0, 2, 1, 3)  # p64 @ |v|
    bound = RTOL * weights + 1e-6
    err = np.abs(got.astype(np.float64) - want)
    bad = ~(err <= bound)  # NaN (an element not written) is bad too
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else ()
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} elements off, first at {list(first)}: got {got[first]}, want {want[first]}"
    return f"max err/bound {np.max(err / bound):.2f}"


def run_three_ways(modules: dict, function: str, args: list[np.ndarray], out_shape: tuple[int, ...], np_type, scale: float, checked) -> list[str]:
    """`function` on the module as built, then on both poisonable copies with a NaN-filled output."""
    reports = [checked(getattr(modules["flash_attention"], function)(*args, scale))]
    for module in ("flash_attention_poisonable", "flash_attention_sm80_ptx_poisonable"):
        poisoned = np.full(out_shape, np.nan, np_type)
        reports.append(checked(getattr(modules[module], function)(*args, poisoned, scale)))
    return reports
