"""float64 numpy references for the kernels in this folder, keyed by kernel name.

Each takes the kernel's inputs and scalar arguments in the order of its generated function
and returns its results (one array, or a tuple).
"""

from __future__ import annotations

import numpy as np


def simple_mul(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return lhs.astype(np.float64) * rhs.astype(np.float64)


def simple_mul_inplace(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return rhs.astype(np.float64) * lhs.astype(np.float64)


def axpby(x: np.ndarray, y: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return alpha * x.astype(np.float64) + beta * y.astype(np.float64)


def mixed_invocation(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """mlir/mixed_invocation.mlir: (lhs*rhs + rhs) * (lhs*rhs), with float32 rounding between steps."""
    product = (lhs * rhs).astype(np.float32)
    total = (product + rhs).astype(np.float32)
    return total.astype(np.float64) * product


# kernels/library.toml: every reference computes in float64 from the kernel's (rounded) inputs.


def _gelu_tanh(v: np.ndarray) -> np.ndarray:
    return 0.5 * v * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v**3)))


def bias_gelu_f32(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return _gelu_tanh(x.astype(np.float64) + bias.astype(np.float64))


bias_gelu_f16 = bias_gelu_f32
bias_gelu_bf16 = bias_gelu_f32
bias_gelu_f32_bf16 = bias_gelu_f32  # the kernel rounds this to bf16


def row_sum_f32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64).sum(axis=1)


def row_max_f32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64).max(axis=1)


def softmax_f32(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layernorm_f32(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    v = x.astype(np.float64)
    mean = v.mean(axis=1, keepdims=True)
    var = v.var(axis=1, keepdims=True)  # biased, as the kernel and torch.nn.functional.layer_norm
    return (v - mean) / np.sqrt(var + eps) * weight.astype(np.float64) + bias.astype(np.float64)


softmax_warp_f32 = softmax_f32
layernorm_warp_f32 = layernorm_f32


def rmsnorm_f32(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    v = x.astype(np.float64)
    return v / np.sqrt((v * v).mean(axis=1, keepdims=True) + eps) * weight.astype(np.float64)


# bf16 row kernels: the same float64 math from the (rounded) bf16 inputs; the kernel rounds the
# result to bf16.


def softmax_bf16(x: np.ndarray) -> np.ndarray:
    return softmax_f32(x.astype(np.float64))


def layernorm_bf16(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    return layernorm_f32(x.astype(np.float64), weight.astype(np.float64), bias.astype(np.float64), eps)


def rmsnorm_bf16(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return rmsnorm_f32(x.astype(np.float64), weight.astype(np.float64), eps)


softmax_warp_bf16 = softmax_bf16
layernorm_warp_bf16 = layernorm_bf16
rmsnorm_warp_bf16 = rmsnorm_bf16

# f16 row kernels: the same again from the (rounded) f16 inputs; the kernel rounds the result to f16.
softmax_f16 = softmax_warp_f16 = softmax_bf16
layernorm_f16 = layernorm_warp_f16 = layernorm_bf16
rmsnorm_f16 = rmsnorm_warp_f16 = rmsnorm_bf16


def transpose_f32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64).T


# kernels/gemm.toml: c = a @ b in float64 from the (rounded) bf16/f16 inputs.


def gemm_bf16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


gemm_f16 = gemm_bf16


def gemm_bias_gelu_bf16(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return _gelu_tanh(gemm_bf16(a, b) + bias.astype(np.float64))  # the kernel rounds this to bf16


def gemm_bias_bf16(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return gemm_bf16(a, b) + bias.astype(np.float64)  # the kernel rounds this to bf16


# The persistent kernels compute the same values tile by tile.
gemm_bias_bf16_persistent = gemm_bias_bf16
gemm_bias_gelu_bf16_persistent = gemm_bias_gelu_bf16


def gemm_bias_residual_f32(a: np.ndarray, b: np.ndarray, bias: np.ndarray, residual: np.ndarray) -> np.ndarray:
    return gemm_bf16(a, b) + bias.astype(np.float64) + residual.astype(np.float64)


def gemm_bias_residual_bf16(a: np.ndarray, b: np.ndarray, bias: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """gemm_bias_bf16's h (the float64 product + bias, rounded to bf16), + the bf16 residual in
    float64 (the kernel rounds this to bf16 too)."""
    import ml_dtypes  # bf16 rounding, as the kernel rounds h before the add

    return gemm_bias_bf16(a, b, bias).astype(ml_dtypes.bfloat16).astype(np.float64) + residual.astype(np.float64)


gemm_bias_residual_bf16_persistent = gemm_bias_residual_bf16  # the same values, tile by tile


def gemm_batched_bf16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """c[z] = a[z] @ b[z] for every batch z: a [B, M, K], b [B, K, N] -> [B, M, N]."""
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


# kernels/gemm_nt.toml


def gemm_nt_bf16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """c = a @ b^T in float64: a [M, K], b [N, K] (a Linear's weight as stored) -> [M, N] (the
    kernel rounds it to bf16)."""
    return a.astype(np.float64) @ b.astype(np.float64).T


# The NT kernels with a bias and what follows it: the gemm.toml references with b transposed.


def gemm_nt_bias_bf16(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return gemm_bias_bf16(a, b.T, bias)


def gemm_nt_bias_gelu_bf16(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return gemm_bias_gelu_bf16(a, b.T, bias)


def gemm_nt_bias_gelu_erf_bf16(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return gemm_bias_gelu_erf_bf16(a, b.T, bias)


def gemm_nt_bias_residual_bf16(a: np.ndarray, b: np.ndarray, bias: np.ndarray, residual: np.ndarray) -> np.ndarray:
    return gemm_bias_residual_bf16(a, b.T, bias, residual)


# gemm.cu's persistent forms (gemm.toml, model_ops.toml): the same values, tile pair by tile pair.
gemm_nt_bf16_persistent = gemm_nt_bf16
gemm_nt_bias_bf16_persistent = gemm_nt_bias_bf16
gemm_nt_bias_gelu_bf16_persistent = gemm_nt_bias_gelu_bf16
gemm_nt_bias_gelu_erf_bf16_persistent = gemm_nt_bias_gelu_erf_bf16
gemm_nt_bias_residual_bf16_persistent = gemm_nt_bias_residual_bf16


# kernels/attention.toml


def attention_bf16(q: np.ndarray, kt: np.ndarray, v: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """softmax(q[z] @ kt[z] / 8 + mask[z // H]) @ v[z] in float64, H = Z // B heads per mask:
    q [Z, S, 64], kt [Z, 64, S], v [Z, S, 64], mask [B, S, S] -> [Z, S, 64] (the kernel rounds
    it to bf16). The masked scores are rounded to float32 as the kernel holds them: a row masked
    entirely with a finite minimum (bf16's) then weighs its keys equally, as the kernel and the
    model do (the mask value absorbs the score); a row of only -inf is NaN."""
    z, s = q.shape[0], q.shape[1]
    heads = z // mask.shape[0]
    scores = np.matmul(q.astype(np.float64), kt.astype(np.float64)) * 0.125
    x = (scores + np.repeat(mask.astype(np.float64), heads, axis=0)).astype(np.float32).astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=2, keepdims=True))
        p = e / e.sum(axis=2, keepdims=True)
    assert p.shape == (z, s, s)
    return np.matmul(p, v.astype(np.float64))


def attention_qkv_bf16(qkv: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """attention_bf16 on the heads of a [B, S, 3, H, 64] projection result (q, k, v side by side
    in each row) -> [B, S, H, 64]: head h of batch entry b reads q = qkv[b, :, 0, h], k =
    qkv[b, :, 1, h], v = qkv[b, :, 2, h] and uses mask[b]."""
    b, s, _, h, d = qkv.shape
    heads = np.transpose(qkv, (2, 0, 3, 1, 4)).reshape(3, b * h, s, d)  # [3, B * H, S, 64]
    out = attention_bf16(heads[0], np.transpose(heads[1], (0, 2, 1)), heads[2], mask)
    return np.transpose(out.reshape(b, h, s, d), (0, 2, 1, 3))


# kernels/flash_attention.toml


def flash_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None, causal: bool = False,
                    scale: float | None = None) -> np.ndarray:
    """softmax(q @ k^T * scale + mask) @ v in float64, as torch's scaled_dot_product_attention:
    q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D] (query head h reads kv head h // (Hq // Hkv)), mask
    broadcast to [B, Hq, Sq, Sk] (additive), causal top-left aligned (query i sees keys j <= i),
    scale 1 / sqrt(D) by default -> [B, Hq, Sq, D] (the kernels round it to their type). A row
    whose keys are all -inf is NaN."""
    group = q.shape[1] // k.shape[1]
    k64 = np.repeat(k.astype(np.float64), group, axis=1)
    v64 = np.repeat(v.astype(np.float64), group, axis=1)
    s = q.astype(np.float64) @ np.swapaxes(k64, -1, -2) * (1.0 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        s = s + mask.astype(np.float64)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
    return p @ v64


# kernels/gemm_f32.toml: c in float64 from the f32 inputs (the kernels accumulate in f32).


def gemm_f32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """c = a @ b in float64: a [M, K], b [K, N] -> [M, N]."""
    return a.astype(np.float64) @ b.astype(np.float64)


def gemm_nt_f32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """c = a @ b^T in float64: a [M, K], b [N, K] (a Linear's weight as stored) -> [M, N]."""
    return a.astype(np.float64) @ b.astype(np.float64).T


def gemm_nt_bias_f32(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """A Linear in float64: a @ b^T + bias, b [N, K], bias [N]."""
    return gemm_nt_f32(a, b) + bias.astype(np.float64)


def gemm_nt_bias_gelu_erf_f32(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """erf-GELU of the Linear, in float64."""
    return _gelu_erf(gemm_nt_bias_f32(a, b, bias))


def gemm_nt_bias_residual_f32(a: np.ndarray, b: np.ndarray, bias: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """The Linear plus residual [M, N], in float64."""
    return gemm_nt_bias_f32(a, b, bias) + residual.astype(np.float64)


# kernels/gemm_f32_f64acc.toml: the same float64 results (those kernels round them to f32 once).
gemm_nt_f32_f64acc = gemm_nt_f32
gemm_nt_bias_f32_f64acc = gemm_nt_bias_f32
gemm_nt_bias_gelu_erf_f32_f64acc = gemm_nt_bias_gelu_erf_f32
gemm_nt_bias_residual_f32_f64acc = gemm_nt_bias_residual_f32


def gemm_batched_f32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """c[z] = a[z] @ b[z] in float64: a [B, M, K], b [B, K, N] -> [B, M, N]."""
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


# kernels/model_ops.toml: float64 from the kernel's (rounded) inputs.


def _silu(v: np.ndarray) -> np.ndarray:
    """v * sigmoid(v), each side of 0 in the form that neither overflows nor cancels (1 + tanh(v / 2)
    loses all but a few digits for v below about -20)."""
    e = np.exp(-np.abs(v))  # in (0, 1]
    return np.where(v >= 0, v / (1.0 + e), v * e / (1.0 + e))


def swiglu_f32(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    return _silu(gate.astype(np.float64)) * up.astype(np.float64)


swiglu_bf16 = swiglu_f32  # the kernel rounds this to bf16


def _gelu_erf(v: np.ndarray) -> np.ndarray:
    from math import erf, sqrt

    return 0.5 * v * (1.0 + np.vectorize(erf, otypes=[np.float64])(v / sqrt(2.0)))


def gemm_bias_gelu_erf_bf16(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return _gelu_erf(gemm_bf16(a, b) + bias.astype(np.float64))  # the kernel rounds this to bf16


gemm_bias_gelu_erf_bf16_persistent = gemm_bias_gelu_erf_bf16  # the same values, tile by tile
