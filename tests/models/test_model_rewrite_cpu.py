"""The rewrite computes what the model computes: each kernel's function is given a reference body
(plain linalg, with the kernel's types and float32 math where the kernel computes in f32), the
rewritten model and the original are compiled for the CPU, and their results compared. This checks
everything but the CUDA kernels themselves (which their own GPU tests check): operand order,
collapses and expansions, casts, epsilons, narrowing, the uses redirected."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree_dispatch.models.compiler import rewrite_model  # noqa: E402

from ..support.model_references import _compile_cpu, _random_args, _run, with_reference_kernels  # noqa: E402

MODELS = Path(__file__).parent
K = MODELS / "kernels"  # the test-only specs
LIBRARY_DIR = MODELS.parents[1] / "kernels"  # the kernel library
ALL = [K / "naive.toml", LIBRARY_DIR / "library.toml", LIBRARY_DIR / "gemm.toml", K / "fixed_eps.toml"]


@pytest.mark.parametrize(
    "model, function, wide, tol",
    [
        ("mlp_f32.mlir", "mlp", False, 1e-5),
        ("attention_f32.mlir", "attention", False, 1e-5),
        ("attention_bf16.mlir", "attention", False, 1e-5),  # bf16 x bf16 -> f32 batch matmuls (gemm_batched_bf16), one left to IREE
        ("layernorm.mlir", "ln_eps5", False, 1e-5),
        ("layernorm.mlir", "ln_eps6", False, 1e-5),
        ("layernorm.mlir", "ln_bf16", True, 5e-2),  # the model computes in bf16, the kernel in f32
        ("softmax_bf16.mlir", "softmax_bf16", False, 1e-2),
        ("refusals.mlir", "bf16_accumulator", True, 5e-2),  # f32 accumulation narrowed to bf16
        ("refusals.mlir", "long_rows", False, 1e-5),
        ("norms_f32.torch.mlir", "main", False, 1e-5),  # RMSNorm; LayerNorms without weight or bias (ones and zeros passed)
        ("dynamic_f32.mlir", "linear", False, 1e-5),  # dynamic rows
        ("dynamic_f32.mlir", "softmax_rows", False, 1e-5),  # dynamic leading dim, collapsed into rows and expanded back
        # matmul + bias + GELU (tanh) fused, its bf16 bias widened
        ("mlp_gelu_bf16.torch.mlir", "main", True, 3e-2),
        ("mlp_gelu_bf16.torch.mlir", "main", False, 1e-2),
        ("mlp_gelu_bf16.torch.mlir", "padded", False, 1e-2),  # the LM-head-like matmul's N = 100 padded to 104 and sliced
        ("linear_gelu_bf16.torch.mlir", "main", True, 3e-2),  # a Linear on 3-D input (one matmul over B*M rows) + torch's tanh GELU
        # bf16 matmul + bias (addmm, and a Linear on 3-D input) fused, its bf16 bias widened, rounded once
        ("linear_bias_bf16.torch.mlir", "main", True, 3e-2),
        ("linear_bias_bf16.torch.mlir", "main", False, 1e-2),
        # torch's linear(x, w) in bf16 (f32 accumulation, rounded to bf16) as matmul_nt, w read as stored: a tied LM head on
        # 3-D input (N = 77) and a Linear on 2-D input (K = 13); the same numerics as the model's
        ("lm_head_bf16.torch.mlir", "main", False, 1e-2),
        ("matmul_nt.mlir", "lm_head", False, 1e-2),
        # the same rounded to bf16 and widened back to f32 (logits.float()) as matmul_nt+extf, and where the bf16 logits are kept
        ("matmul_nt_extf.mlir", "lm_head", False, 1e-2),
        ("matmul_nt_extf.mlir", "bf16_logits_used", False, 1e-2),
        # a GPT-2 layer (head_dim 64): its attention chain as one call (attention_qkv_bf16, computed in f32, rounded once)
        ("gpt2_layer_bf16.torch.mlir", "main", True, 3e-2),
    ],
)
def test_rewritten_model_computes_the_same(tmp_path, model, function, wide, tol):
    kernels = [*ALL[:2], K / "gemm_padded.toml", *ALL[3:]] if function == "padded" else ALL
    kernels = [*kernels, K / "gemm_batched.toml"] if model == "attention_bf16.mlir" else kernels
    kernels = [*kernels, LIBRARY_DIR / "attention.toml"] if model.startswith("gpt2_layer") else kernels
    kernels = [*kernels, LIBRARY_DIR / "gemm_nt.toml"] if model in ("lm_head_bf16.torch.mlir", "matmul_nt.mlir", "matmul_nt_extf.mlir") else kernels
    function = "main" if function == "padded" else function
    report, program = rewrite_model(MODELS / model, kernels, allow_wider_accumulation=wide)
    assert report.replaced
    original = (MODELS / model).read_text()
    if function == "bf16_accumulator":  # IREE's own CPU codegen of that op is the reference here
        pytest.importorskip("ml_dtypes")
    ref_vmfb = _compile_cpu(original, tmp_path / "original.vmfb")
    new_vmfb = _compile_cpu(with_reference_kernels(program, report), tmp_path / "rewritten.vmfb")
    rng = np.random.default_rng(0)
    args = _random_args(original, function, rng)
    if model.startswith("gpt2_layer"):  # ids, mask, then the parameters: at GPT-2's scale (N(0, 1) weights saturate the bf16 softmax)
        args = args[:2] + [(a.astype(np.float32) * 0.1).astype(a.dtype) for a in args[2:]]
    expected = _run(ref_vmfb, function, args)
    got = _run(new_vmfb, function, args)
    for e, g in zip(expected, got):
        e, g = np.asarray(e, np.float32), np.asarray(g, np.float32)
        assert e.shape == g.shape
        assert np.max(np.abs(e - g)) <= tol * max(1.0, float(np.max(np.abs(e))))
