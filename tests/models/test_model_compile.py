"""iree_dispatch.models: finding the ops kernels can replace in a model, the report, refusals,
and the compiled module calling the kernels (no GPU: the IR is inspected at flow level)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree_dispatch.core.errors import DispatchError, SpecError  # noqa: E402
from iree_dispatch.models import compile_model, load_kernels  # noqa: E402
from iree_dispatch.models.capability import spec_files  # noqa: E402
from iree_dispatch.models.cli import add_compile_command  # noqa: E402
from iree_dispatch.models.compiler import rewrite_model  # noqa: E402

from ..support.environment import needs_build_tools  # noqa: E402
from ..support.model_references import _flow_dispatches  # noqa: E402

MODELS = Path(__file__).parent
NAIVE = MODELS / "kernels" / "naive.toml"
LIBRARY_DIR = MODELS.parents[1] / "kernels"  # the kernel library; MODELS / "kernels" holds the test-only specs
LIBRARY = LIBRARY_DIR / "library.toml"
GEMM = LIBRARY_DIR / "gemm.toml"
GEMM_RESIDUAL = MODELS / "kernels" / "gemm_residual.toml"  # gemm_bias_residual_bf16 with its replaces (kernels/gemm.toml declares only its persistent form)
GEMM_PADDED = MODELS / "kernels" / "gemm_padded.toml"
GEMM_BATCHED = MODELS / "kernels" / "gemm_batched.toml"
ATTENTION = LIBRARY_DIR / "attention.toml"
FIXED = MODELS / "kernels" / "fixed_eps.toml"
ALL = [NAIVE, LIBRARY, GEMM]


def _dry(model: str, kernels=ALL, **kw):
    return compile_model(MODELS / model, kernels, dry_run=True, **kw)


def _by_kernel(report) -> list[tuple[str, str, str]]:
    return [(d.candidate.kind, d.form.kind, d.capability.label) for d in report.replaced]


def _reasons(report) -> list[list[tuple[str, str]]]:
    return [d.reasons for d in report.left]


def test_mlp_matmul_with_bias_and_without():
    r = _dry("mlp_f32.mlir")
    assert _by_kernel(r) == [("matmul", "matmul+bias", "naive.matmul_bias_f32"), ("matmul", "matmul", "naive.matmul_f32")]
    assert r.counts() == {"matmul": {"found": 2, "replaced": 2, "left": 0}}
    text = r.text()
    assert "#1 matmul 32x64 @ 64x128 f32 x f32 -> 32x128 f32 at mlp_f32.mlir:7 -> naive.matmul_bias_f32 (as matmul+bias)" in text
    assert "naive.matmul_f32: 1 calls" in text


def test_matmul_without_a_bias_kernel_leaves_the_add_to_iree():
    r = _dry("mlp_f32.mlir", kernels=[MODELS / "kernels" / "naive.toml"])
    assert r.replaced[0].capability.label == "naive.matmul_bias_f32"
    spec = MODELS / "kernels" / "naive.toml"
    text = spec.read_text()
    assert 'replaces = { op = "matmul+bias" }' in text


def test_matmul_bias_gelu_fused_only_when_wider_is_allowed():
    """GPT-2's Conv1D + gelu_new (a chain of generics), and addmm + view + torch's gelu(approximate="tanh")
    (one generic), in bf16: the model rounds to bf16 after the matmul, the bias add and each GELU
    step; gemm_bias_gelu_bf16 computes all in f32 and rounds once."""
    strict = _dry("mlp_gelu_bf16.torch.mlir", kernels=[GEMM])
    # the LM-head-like matmul (N = 100, not a multiple of 8) stays IREE's: gemm.toml doesn't pad
    assert _by_kernel(strict) == [("matmul", "matmul", "gemm.gemm_bf16"), ("matmul", "matmul", "gemm.gemm_bf16")]
    # Each kernel that would take the op is named with its reason: the persistent forms (preferred) first.
    gelu_refused = ("accumulates in f32, the model in bf16; the model rounds to bf16 after the matmul, after the bias add and after each GELU step "
                    "(--allow-wider-accumulation accepts a wider one)")
    bias_refused = "accumulates in f32, the model in bf16; the model rounds to bf16 after the matmul and after the bias add (--allow-wider-accumulation accepts a wider one)"
    assert strict.replaced[0].notes == [
        f"not as matmul+bias+gelu: gemm.gemm_bias_gelu_bf16_persistent: {gelu_refused}",
        f"not as matmul+bias+gelu: gemm.gemm_bias_gelu_bf16: {gelu_refused}",
        f"not as matmul+bias: gemm.gemm_bias_bf16_persistent: {bias_refused}",
        f"not as matmul+bias: gemm.gemm_bias_bf16: {bias_refused}",
    ]
    wide = _dry("mlp_gelu_bf16.torch.mlir", kernels=[GEMM], allow_wider_accumulation=True)
    fused = ("matmul", "matmul+bias+gelu", "gemm.gemm_bias_gelu_bf16")
    assert _by_kernel(wide) == [fused, fused]
    d = wide.replaced[0]
    assert d.widen == {2: "f32"} and d.narrow_to is None
    assert d.notes == [
        "its bias is bf16 in the model, widened to f32 for the kernel (exact)",
        "computes in f32 and rounds once, where the model rounds to bf16 after the matmul, after the bias add and after each GELU step (--allow-wider-accumulation)",
    ]
    assert wide.kernel_counts() == {"gemm.gemm_bias_gelu_bf16": 2}


def test_linear_on_3d_input_with_gelu_fused():
    wide = _dry("linear_gelu_bf16.torch.mlir", kernels=[GEMM], allow_wider_accumulation=True)
    assert _by_kernel(wide) == [("batch_matmul", "matmul+bias+gelu", "gemm.gemm_bias_gelu_bf16")]
    assert wide.replaced[0].notes[0] == "the batch's rhs is one [K, N] matrix broadcast: one matmul over B*M rows"


def test_bf16_linear_with_bias_fused_only_when_wider_is_allowed():
    """A bf16 Linear with its bias (GPT-2's Conv1D as addmm, and nn.Linear on 3-D input, followed by
    a residual add): the model accumulates in f32, rounds to bf16, adds the bf16 bias and rounds
    again; gemm_bias_bf16 adds the (widened) bias in f32 and rounds once, and so does
    gemm_bias_residual_bf16 before it adds the residual as the model does."""
    strict = _dry("linear_bias_bf16.torch.mlir", kernels=[GEMM, GEMM_RESIDUAL])
    assert _by_kernel(strict) == [("matmul", "matmul", "gemm.gemm_bf16"), ("batch_matmul", "matmul", "gemm.gemm_bf16")]
    reason = "accumulates in f32, the model in bf16; the model rounds to bf16 after the matmul and after the bias add (--allow-wider-accumulation accepts a wider one)"
    # The persistent form (preferred where the sizes allow) named first, each with its reason.
    refused = [f"not as matmul+bias: gemm.gemm_bias_bf16_persistent: {reason}", f"not as matmul+bias: gemm.gemm_bias_bf16: {reason}"]
    assert strict.replaced[0].notes == refused
    residual_reason = ("accumulates in f32, the model in bf16; the model rounds to bf16 after the matmul and after the bias add, then adds the residual in "
                       "bf16 (--allow-wider-accumulation accepts a wider one)")
    refused_residual = [f"not as matmul+bias+residual: gemm.gemm_bias_residual_bf16_persistent: {residual_reason}",
                        f"not as matmul+bias+residual: gemm_residual.gemm_bias_residual_bf16: {residual_reason}"]
    # The nn.Linear's weight is a transposed [N, K] matrix: each bias form's twin reading it as stored is tried first.
    nt_refused = [f"not as matmul_nt+bias+residual: gemm.gemm_nt_bias_residual_bf16_persistent: {residual_reason}", *refused_residual,
                  f"not as matmul_nt+bias: gemm.gemm_nt_bias_bf16_persistent: {reason}", *refused,
                  "not as matmul_nt: gemm.gemm_nt_bf16_persistent: needs M % 256 == 0, the model's M = 16"]
    assert strict.replaced[1].notes == ["the batch's rhs is one [K, N] matrix broadcast: one matmul over B*M rows", *nt_refused]
    assert "its bias add is left to IREE" not in strict.text()
    wide = _dry("linear_bias_bf16.torch.mlir", kernels=[GEMM, GEMM_RESIDUAL], allow_wider_accumulation=True)
    assert _by_kernel(wide) == [("matmul", "matmul+bias", "gemm.gemm_bias_bf16"), ("batch_matmul", "matmul+bias+residual", "gemm_residual.gemm_bias_residual_bf16")]
    d = wide.replaced[0]
    assert d.widen == {2: "f32"} and d.narrow_to is None
    assert d.form.result_dtype == "bf16" and d.form.compute == "bf16"
    assert d.notes == [
        "its bias is bf16 in the model, widened to f32 for the kernel (exact)",
        "computes in f32 and rounds once, where the model rounds to bf16 after the matmul and after the bias add (--allow-wider-accumulation)",
    ]
    assert wide.kernel_counts() == {"gemm.gemm_bias_bf16": 1, "gemm_residual.gemm_bias_residual_bf16": 1}
    assert wide.replaced[1].notes[-2:] == [
        "computes in f32 and rounds once, where the model rounds to bf16 after the matmul and after the bias add, then adds the residual in bf16 "
        "(--allow-wider-accumulation)",
        "not as matmul_nt+bias+residual: gemm.gemm_nt_bias_residual_bf16_persistent: needs M % 256 == 0, the model's M = 16",
    ]
    assert not wide.unkinded  # the residual add is the kernel's
    assert "#1 matmul 16x64 @ 64x192 bf16 x bf16 -> 16x192 f32 at linear_bias_bf16.torch.mlir:8 -> gemm.gemm_bias_bf16 (as matmul+bias)" in wide.text()
    # Without a bias kernel, the matmul alone, its bias add left to IREE.
    no_bias = _dry("linear_bias_bf16.torch.mlir", kernels=[GEMM_PADDED])
    assert no_bias.replaced[0].notes == ["its bias add is left to IREE (no kernel declares matmul+bias for it)"]


def test_lm_head_padded_to_the_kernels_multiple():
    r = _dry("mlp_gelu_bf16.torch.mlir", kernels=[GEMM_PADDED])
    d = r.replaced[2]
    assert d.pad == {"N": (100, 104)}
    assert "N = 100 padded to 104 with zeros (sliced off the result: the same values)" in d.notes
    _, program = rewrite_model(MODELS / "mlp_gelu_bf16.torch.mlir", [GEMM_PADDED])
    assert "tensor.pad" in program and "tensor<64x104xbf16>" in program and "tensor<16x104xf32> to tensor<16x100xf32>" in program


def test_attention_batch_matmul_and_softmax():
    r = _dry("attention_f32.mlir")
    assert _by_kernel(r) == [
        ("batch_matmul", "batch_matmul", "naive.batch_matmul_f32"),
        ("softmax", "softmax", "library.softmax_warp_f32"),
        ("batch_matmul", "batch_matmul", "naive.batch_matmul_f32"),
    ]


def test_bf16_attention_batch_matmuls_take_the_batched_gemm():
    """bf16 x bf16 -> f32 batch matmuls (torch's eager attention in bf16) go to gemm_batched_bf16;
    one whose N is not a multiple of 8 stays IREE's, and the f32 model's are refused by type."""
    r = _dry("attention_bf16.mlir", kernels=[GEMM_BATCHED])
    batched = ("batch_matmul", "batch_matmul", "gemm_batched.gemm_batched_bf16")
    assert _by_kernel(r) == [batched, batched]
    assert all(d.notes == [] and d.narrow_to is None for d in r.replaced)
    text = r.text()
    assert "#1 batch_matmul 6x40x64 @ 6x64x40 bf16 x bf16 -> 6x40x40 f32 at attention_bf16.mlir:11 -> gemm_batched.gemm_batched_bf16\n" in text
    assert "#3 batch_matmul 6x40x40 @ 6x40x64 bf16 x bf16 -> 6x40x64 f32 at attention_bf16.mlir:22 -> gemm_batched.gemm_batched_bf16\n" in text
    assert r.counts() == {"batch_matmul": {"found": 3, "replaced": 2, "left": 1}, "softmax": {"found": 1, "replaced": 0, "left": 1}}
    assert r.kernel_counts() == {"gemm_batched.gemm_batched_bf16": 2}
    assert "gemm_batched.gemm_batched_bf16: 2 calls" in text
    (left,) = [d for d in r.left if d.candidate.kind == "batch_matmul"]
    assert left.reasons == [("shape", "gemm_batched.gemm_batched_bf16: needs N % 8 == 0, the model's N = 20")]
    # With the f32 kernels too: the bf16 batch matmuls stay with the bf16 kernel, the softmax is the library's.
    full = _dry("attention_bf16.mlir", kernels=[*ALL, GEMM_BATCHED])
    assert [d.capability.label for d in full.replaced] == ["gemm_batched.gemm_batched_bf16", "library.softmax_warp_f32", "gemm_batched.gemm_batched_bf16"]
    f32 = _dry("attention_f32.mlir", kernels=[GEMM_BATCHED])
    assert [d.reasons for d in f32.left if d.candidate.kind == "batch_matmul"] == [[("dtype", "gemm_batched.gemm_batched_bf16: takes bf16, bf16, the model has f32, f32")]] * 2


def test_bf16_batch_matmul_accumulating_in_bf16_is_refused(tmp_path):
    """A batch matmul with a bf16 result accumulates in bf16: refused for numerics; allowed wider,
    still refused (narrowing a kernel's result is done for matmul kinds only), by its f32 result."""
    text = """func.func @f(%a: tensor<4x16x32xbf16>, %b: tensor<4x32x24xbf16>) -> tensor<4x16x24xbf16> {
  %zero = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<4x16x24xbf16>
  %f = linalg.fill ins(%zero : bf16) outs(%e : tensor<4x16x24xbf16>) -> tensor<4x16x24xbf16>
  %c = linalg.batch_matmul ins(%a, %b : tensor<4x16x32xbf16>, tensor<4x32x24xbf16>) outs(%f : tensor<4x16x24xbf16>) -> tensor<4x16x24xbf16>
  return %c : tensor<4x16x24xbf16>
}
"""
    path = tmp_path / "bmm_bf16.mlir"
    path.write_text(text)
    strict = compile_model(path, [GEMM_BATCHED], dry_run=True)
    assert strict.left[0].reasons == [("numerics", "gemm_batched.gemm_batched_bf16: accumulates in f32, the model in bf16 (--allow-wider-accumulation accepts a wider one)")]
    wide = compile_model(path, [GEMM_BATCHED], dry_run=True, allow_wider_accumulation=True)
    assert wide.left[0].reasons == [("dtype", "gemm_batched.gemm_batched_bf16: writes f32, the model's result is bf16")]


def test_gpt2_attention_shapes_report():
    """GPT-2 small's bf16 batch matmuls (8 x 1024 tokens, 12 heads of 64). With the GPT-2 kernel
    specs (library.toml + gemm.toml) the attention batch matmuls stay IREE's (no kernel declares
    batch_matmul: the batched GEMM made GPT-2 slower, gemm_batched.toml says why); with
    gemm_batched.toml both go to gemm_batched_bf16. The LM head (N = 50257) stays IREE's."""
    r = _dry("gpt2_attention_bf16.mlir", kernels=[LIBRARY, GEMM])
    assert not r.replaced
    scores, context, head = r.left
    assert scores.reasons == context.reasons == [("kernel", "no kernel declares 'batch_matmul'")]
    assert head.reasons == [
        ("shape", "gemm.gemm_bf16: needs N % 8 == 0, the model's N = 50257"),
        ("dtype", "gemm.gemm_f16: takes f16, f16, the model has bf16, bf16"),
    ]
    assert r.counts() == {"batch_matmul": {"found": 3, "replaced": 0, "left": 3}}
    r = _dry("gpt2_attention_bf16.mlir", kernels=[LIBRARY, GEMM, GEMM_BATCHED])
    text = r.text()
    assert "#1 batch_matmul 96x1024x64 @ 96x64x1024 bf16 x bf16 -> 96x1024x1024 f32 at gpt2_attention_bf16.mlir:12 -> gemm_batched.gemm_batched_bf16\n" in text
    assert "#2 batch_matmul 96x1024x1024 @ 96x1024x64 bf16 x bf16 -> 96x1024x64 f32 at gpt2_attention_bf16.mlir:22 -> gemm_batched.gemm_batched_bf16\n" in text
    (head,) = r.left
    assert head.reasons == [
        ("shape", "gemm.gemm_bf16: needs N % 8 == 0, the model's N = 50257"),
        ("dtype", "gemm.gemm_f16: takes f16, f16, the model has bf16, bf16"),
        ("shape", "gemm_batched.gemm_batched_bf16: needs N % 8 == 0, the model's N = 50257"),
    ]
    assert r.counts() == {"batch_matmul": {"found": 3, "replaced": 2, "left": 1}}
    assert r.kernel_counts() == {"gemm_batched.gemm_batched_bf16": 2}


GPT2_LAYER = [LIBRARY, GEMM, ATTENTION]
QKV_STRICT = ("numerics", "attention.attention_qkv_bf16: computes in f32, the model in bf16; the model rounds to bf16 after the scores, the scale, "
                          "the mask add, the softmax and the context (--allow-wider-accumulation accepts a wider one)")


def _attention_alone(tmp_path) -> Path:
    """attention.toml without attention_qkv_bf16: the chain as plain attention."""
    head, sep, _ = ATTENTION.read_text().partition('\n[[kernel]]\nname = "attention_qkv_bf16"')
    assert sep
    path = tmp_path / "attention.toml"
    path.write_text(head.replace('source = "attention.cu"', f'source = "{(LIBRARY_DIR / "attention.cu").resolve()}"') + "\n")
    return path


ATTENTION_NOTE = ("computes in f32 and rounds once, where the model rounds to bf16 after the scores, the scale, the mask add, the softmax and the context"
                  " (--allow-wider-accumulation)")


def test_gpt2_attention_chain_as_one_kernel(tmp_path):
    """A GPT-2 layer as benchmarks/model.py exports it (bf16, 2 heads of 64, batch 2 x 40 tokens):
    scores batch matmul, * 0.125, + the [2, 1, 40, 40] mask, softmax, context batch matmul, one
    call to attention_bf16 with --allow-wider-accumulation (a spec without attention_qkv_bf16,
    which would take it with its layouts: tests/models/test_model_attention_qkv.py); the scores batch
    matmul (#3) and the softmax (#4) are no candidates of their own then."""
    r = _dry("gpt2_layer_bf16.torch.mlir", kernels=[LIBRARY, GEMM, _attention_alone(tmp_path)], allow_wider_accumulation=True)
    (d,) = [d for d in r.replaced if d.capability.label == "attention.attention_bf16"]
    assert (d.candidate.kind, d.form.kind, d.candidate.order) == ("batch_matmul", "attention", 5)
    assert d.notes == [ATTENTION_NOTE, "with #3 batch_matmul and #4 softmax: one kernel call for the whole chain"]
    assert d.form.scale == 0.125 and d.form.compute == "bf16" and d.narrow_to is None
    assert [o.shape for o in d.form.operands] == [(4, 40, 64), (4, 64, 40), (4, 40, 64), (2, 40, 40)]
    assert [o.dtype for o in d.form.operands] == ["bf16"] * 4 and d.form.result_dtype == "bf16"
    text = r.text()
    assert "#5 batch_matmul 4x40x40 @ 4x40x64 bf16 x bf16 -> 4x40x64 f32 at gpt2_layer_bf16.torch.mlir:120 -> attention.attention_bf16 (as attention)\n" in text
    assert "  #3 " not in text and "  #4 " not in text
    assert not r.left
    assert r.counts()["batch_matmul"] == {"found": 2, "replaced": 2, "left": 0}  # the context (as attention) and the LM head
    assert "softmax" not in r.counts()
    assert r.kernel_counts()["attention.attention_bf16"] == 1


def test_gpt2_attention_refusals(tmp_path):
    """Strict numerics: the model rounds to bf16 between the steps, the kernel once (numerics; the
    softmax and the batch matmuls are then candidates as before). An f32 model (dtype), head_dim
    32 (shape), a scale other than 1/sqrt(64) (numerics). Without the attention spec, nothing about
    attention in the report."""
    strict = _dry("gpt2_layer_bf16.torch.mlir", kernels=GPT2_LAYER)
    (ctx,) = [d for d in strict.left if d.candidate.order == 5]
    assert ctx.reasons == [QKV_STRICT, ("numerics", "attention.attention_bf16: computes in f32, the model in bf16; the model rounds to bf16 after the scores, the scale, "
                                                    "the mask add, the softmax and the context (--allow-wider-accumulation accepts a wider one)")]
    assert [d.capability.label for d in strict.replaced if d.candidate.kind == "softmax"] == ["library.softmax_warp_bf16"]
    assert [d.candidate.order for d in strict.left if d.candidate.kind == "batch_matmul"] == [3, 5]

    f32 = _dry("gpt2_layer_f32.torch.mlir", kernels=GPT2_LAYER, allow_wider_accumulation=True)
    (ctx,) = [d for d in f32.left if d.candidate.order == 5]
    assert ctx.reasons == [("dtype", "attention.attention_qkv_bf16: takes bf16, bf16, the model has f32, f32"),
                           ("dtype", "attention.attention_bf16: takes bf16, bf16, bf16, bf16, the model has f32, f32, f32, f32")]

    hd32 = _dry("gpt2_layer_hd32_bf16.torch.mlir", kernels=GPT2_LAYER, allow_wider_accumulation=True)
    (ctx,) = [d for d in hd32.left if d.candidate.order == 5]
    assert ctx.reasons == [("shape", "attention.attention_qkv_bf16: qkv dim must be 64, the model's is 32"),
                           ("shape", "attention.attention_bf16: q dim must be 64, the model's is 32")]

    text = (MODELS / "gpt2_layer_bf16.torch.mlir").read_text()
    assert text.count("torch.constant.float 1.250000e-01") == 1
    (tmp_path / "scale.mlir").write_text(text.replace("torch.constant.float 1.250000e-01", "torch.constant.float 2.500000e-01"))
    scaled = compile_model(tmp_path / "scale.mlir", GPT2_LAYER, dry_run=True, allow_wider_accumulation=True)
    (ctx,) = [d for d in scaled.left if d.candidate.order == 5]
    assert ctx.reasons == [("numerics", "attention.attention_qkv_bf16: scales the scores by 1/sqrt(64) = 0.125, the model by 0.25"),
                           ("numerics", "attention.attention_bf16: scales the scores by 1/sqrt(64) = 0.125, the model by 0.25")]

    plain = _dry("gpt2_layer_bf16.torch.mlir", kernels=[LIBRARY, GEMM], allow_wider_accumulation=True)
    assert "attention" not in plain.text()
    assert [d.reasons for d in plain.left] == [[("kernel", "no kernel declares 'batch_matmul'")]] * 2


def test_attention_probabilities_used_elsewhere_stay_iree(tmp_path):
    """When the probabilities are also a result of the model (output_attentions), the chain is not one kernel's."""
    text = (MODELS / "gpt2_layer_bf16.torch.mlir").read_text()
    head, _, rest = text.partition("torch.aten.softmax.int ")
    softmax = head.rsplit("%", 1)[1].split(" ", 1)[0]
    result = re.search(r"return (%\w+) : (!torch.vtensor<[^>]+>)", text)
    probs_type = re.search(r"torch.aten.softmax.int [^\n]* -> (!torch.vtensor<[^>]+>)", text)[1]
    changed = text.replace(result[0], f"return {result[1]}, %{softmax} : {result[2]}, {probs_type}")
    changed = re.sub(r"(func.func @main\([^)]*\) -> )(!torch.vtensor<[^>]+>)", lambda m: f"{m[1]}({m[2]}, {probs_type})", changed, count=1)
    (tmp_path / "probs.mlir").write_text(changed)
    r = compile_model(tmp_path / "probs.mlir", GPT2_LAYER, dry_run=True, allow_wider_accumulation=True)
    assert "attention.attention_bf16" not in r.kernel_counts() and "attention.attention_qkv_bf16" not in r.kernel_counts()
    assert r.kernel_counts()["library.softmax_warp_bf16"] == 1


def test_no_kernel_for_an_op_kind():
    r = _dry("attention_f32.mlir", kernels=[LIBRARY])
    assert [d.candidate.kind for d in r.left] == ["batch_matmul", "batch_matmul"]
    assert r.left[0].reasons == [("kernel", "no kernel declares 'batch_matmul'")]
    assert "no kernel declares 'batch_matmul'" in r.text()


def test_softmax_bf16_keeps_bf16_io_and_f32_math():
    r = _dry("softmax_bf16.mlir")
    (d,) = r.replaced
    assert d.capability.label == "library.softmax_warp_bf16"
    assert [o.dtype for o in d.form.operands] == ["bf16"] and d.form.result_dtype == "bf16" and d.form.compute == "f32"
    assert "2x4x16x16 bf16, computed in f32 over dim 3" in r.text()


def test_layernorm_dag_found_with_its_epsilon():
    r = _dry("layernorm.mlir", kernels=[LIBRARY])
    assert [(d.candidate.kind, d.capability.label) for d in r.replaced] == [("layernorm", "library.layernorm_warp_f32")] * 2
    assert [d.form.eps for d in r.replaced] == [pytest.approx(1e-5), pytest.approx(1e-6)]
    # The bf16 LayerNorm computes in bf16 (its sums too): the f32-math kernel would change its numerics.
    (left,) = r.left
    assert ("numerics", "library.layernorm_warp_bf16: computes in f32, the model in bf16 (--allow-wider-accumulation accepts a wider one)") in left.reasons
    assert ("dtype", "library.layernorm_f32: takes f32, f32, f32, the model has bf16, bf16, bf16") in left.reasons


def test_wider_accumulation_only_when_allowed():
    r = _dry("layernorm.mlir", kernels=[LIBRARY], allow_wider_accumulation=True)
    assert len(r.replaced) == 3
    d = r.replaced[2]
    assert d.capability.label == "library.layernorm_warp_bf16"
    assert d.form.eps == pytest.approx(1.0013580322265625e-05)  # 1e-5 as the model adds it: rounded to bf16
    assert "computes in f32 where the model computes in bf16" in d.notes[0]


def test_fixed_epsilon_mismatch_refused():
    r = _dry("layernorm.mlir", kernels=[FIXED])
    assert [d.candidate.order for d in r.replaced] == [1]
    assert ("numerics", "fixed.layernorm_eps5_f32: its epsilon is 1e-05, the model's 1e-06") in r.left[0].reasons


def test_refusals_say_why():
    r = _dry("refusals.mlir")
    reasons = {d.candidate.order: d.reasons for d in r.left}
    assert ("numerics", "gemm.gemm_bf16: accumulates in f32, the model in bf16 (--allow-wider-accumulation accepts a wider one)") in reasons[1]
    assert ("dtype", "naive.matmul_f32: takes f32, f32, the model has f64, f64") in reasons[2]
    assert ("shape", "naive.matmul_f32: needs K % 4 == 0, the model's K = 6") in reasons[3]
    assert reasons[4] == [("layout", "rhs transposed (linalg.matmul: rhs read as (d1, d2)); kernels take row-major lhs [M, K] and rhs [K, N]")]
    assert reasons[5] == [("init", "accumulates into an existing tensor (its init is not a zero fill); kernels write a fresh result")]
    assert reasons[6] == [("layout", "softmax over dim 0, not the last (1); kernels normalize contiguous rows")]
    # Rows longer than the warp kernel's 1024 columns go to the block-per-row kernel.
    assert [(d.candidate.order, d.capability.label) for d in r.replaced] == [(7, "library.softmax_f32")]


def test_bf16_matmul_accumulating_in_bf16_narrowed_when_allowed():
    r = _dry("refusals.mlir", allow_wider_accumulation=True)
    d = next(d for d in r.replaced if d.candidate.order == 1)
    assert d.capability.label == "gemm.gemm_bf16" and d.narrow_to == "bf16"


def test_report_is_deterministic_and_json():
    a, b = _dry("refusals.mlir"), _dry("refusals.mlir")
    assert a.text() == b.text()
    data = a.to_json()
    assert data["counts"] == {"matmul": {"found": 5, "left": 5, "replaced": 0}, "softmax": {"found": 2, "left": 1, "replaced": 1}}
    assert data["left"][0]["reasons"][0]["category"] == "dtype"
    json.dumps(data)


@needs_build_tools
def test_compiled_module_dispatches_the_kernels(tmp_path):
    r = compile_model(MODELS / "mlp_f32.mlir", ALL, tmp_path / "mlp.vmfb", emit_mlir=tmp_path / "mlp.linked.mlir", program=tmp_path / "mlp.program.mlir", cache=False)
    assert (tmp_path / "mlp.vmfb").stat().st_size > 0
    # What was asked for, and the objects the linked MLIR refers to: nothing else.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.linked.mlir", "mlp.program.mlir", "mlp.vmfb", "naive.objects"]
    program = (tmp_path / "mlp.program.mlir").read_text()
    assert "func.call @naive.matmul_bias_f32" in program and "func.call @naive.matmul_f32" in program
    assert r.output == tmp_path / "mlp.vmfb"
    dispatches = _flow_dispatches(tmp_path / "mlp.linked.mlir")
    ours = [d for d in dispatches if "@naive_cu::" in d]
    assert len(ours) == 2 and any("matmul_bias_f32" in d for d in ours) and any("@matmul_f32" in d for d in ours)
    # What IREE still generates: the relu between them, no matmul.
    assert not [d for d in dispatches if "naive_cu" not in d and "matmul" in d]


@needs_build_tools
def test_compiled_attention_and_layernorm(tmp_path):
    compile_model(MODELS / "attention_f32.mlir", ALL, tmp_path / "att.vmfb", emit_mlir=tmp_path / "att.linked.mlir")
    dispatches = _flow_dispatches(tmp_path / "att.linked.mlir")
    assert sum("batch_matmul_f32" in d for d in dispatches) == 2 and sum("softmax_warp_f32" in d for d in dispatches) == 1
    compile_model(MODELS / "layernorm.mlir", [LIBRARY], tmp_path / "ln.vmfb", emit_mlir=tmp_path / "ln.linked.mlir", allow_wider_accumulation=True)
    dispatches = _flow_dispatches(tmp_path / "ln.linked.mlir")
    assert sum("layernorm_warp_f32" in d for d in dispatches) == 2 and sum("layernorm_warp_bf16" in d for d in dispatches) == 1
    assert not [d for d in dispatches if "rows_cu" not in d]  # the whole LayerNorm DAGs are gone


@needs_build_tools
def test_compiled_bf16_attention_dispatches_the_batched_gemm(tmp_path):
    compile_model(MODELS / "attention_bf16.mlir", [GEMM_BATCHED], tmp_path / "att.vmfb", emit_mlir=tmp_path / "att.linked.mlir", program=tmp_path / "att.program.mlir")
    program = (tmp_path / "att.program.mlir").read_text()
    assert program.count("func.call @gemm_batched.gemm_batched_bf16(") == 2
    dispatches = _flow_dispatches(tmp_path / "att.linked.mlir")
    assert sum("gemm_batched_bf16" in d for d in dispatches) == 2
    # What IREE still generates: the softmax, the rounding and the N = 20 batch matmul.
    assert sum("batch_matmul" in d and "gemm_batched_bf16" not in d for d in dispatches) == 1


@needs_build_tools
def test_compiled_gpt2_layer_dispatches_the_attention_kernel(tmp_path):
    compile_model(MODELS / "gpt2_layer_bf16.torch.mlir", GPT2_LAYER, tmp_path / "g.vmfb", emit_mlir=tmp_path / "g.linked.mlir", program=tmp_path / "g.program.mlir",
                  allow_wider_accumulation=True)
    program = (tmp_path / "g.program.mlir").read_text()
    assert program.count("func.call @attention.attention_qkv_bf16(") == 1
    dispatches = _flow_dispatches(tmp_path / "g.linked.mlir")
    assert sum("attention_qkv_bf16" in d for d in dispatches) == 1
    # What IREE still generates: no batch matmul, softmax, exp or max reduction of the chain.
    ours = ("attention_cu", "rows_cu", "gemm_cu")
    theirs = [d for d in dispatches if not any(o in d for o in ours)]
    assert not [d for d in theirs if "batch_matmul" in d or "softmax" in d or "math.exp" in d], theirs


def test_nothing_replaced_still_compiles(tmp_path):
    r = compile_model(MODELS / "mlp_f32.mlir", [GEMM], tmp_path / "r.vmfb")
    assert not r.replaced and (tmp_path / "r.vmfb").stat().st_size > 0
    assert [p.name for p in tmp_path.iterdir()] == ["r.vmfb"]


@needs_build_tools
def test_program_is_deterministic(tmp_path):
    compile_model(MODELS / "attention_f32.mlir", ALL, tmp_path / "a" / "m.vmfb", program=tmp_path / "a" / "m.program.mlir")
    compile_model(MODELS / "attention_f32.mlir", ALL, tmp_path / "b" / "m.vmfb", program=tmp_path / "b" / "m.program.mlir")
    assert (tmp_path / "a" / "m.program.mlir").read_text() == (tmp_path / "b" / "m.program.mlir").read_text()
    assert (tmp_path / "a" / "m.vmfb").read_bytes() == (tmp_path / "b" / "m.vmfb").read_bytes()


def _cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="iree-dispatch")
    add_compile_command(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(argv)
    return args.func(args)


def test_cli_dry_run_and_json(tmp_path, capsys):
    report = tmp_path / "r.json"
    assert _cli(["compile", str(MODELS / "mlp_f32.mlir"), "--kernels", str(NAIVE), "--dry-run", "--report-json", str(report), "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model mlp_f32.mlir: 2 candidate ops; kernels: naive (3 kernels), 3 declare replacements\nreplaced: 2\n")
    assert json.loads(report.read_text())["kernels"] == {"naive.matmul_bias_f32": 1, "naive.matmul_f32": 1}
    assert not list(tmp_path.glob("*.vmfb"))


def test_cli_needs_output_unless_dry_run():
    with pytest.raises(DispatchError, match="an output path"):
        _cli(["compile", str(MODELS / "mlp_f32.mlir"), "--kernels", str(NAIVE)])


def test_cli_registered_in_main_command_line(tmp_path, capsys):
    from iree_dispatch import cli

    try:
        cli.parser().parse_args(["compile", "m.mlir", "--kernels", "k.toml", "--dry-run"])
    except SystemExit:
        pytest.skip("the compile command is not registered in iree_dispatch/cli.py yet")
    assert cli.main(["compile", str(MODELS / "mlp_f32.mlir"), "--kernels", str(NAIVE), "--dry-run", "-q"]) == 0
    assert "naive.matmul_bias_f32" in capsys.readouterr().out


def test_model_that_does_not_parse(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @f( {\n")
    with pytest.raises(DispatchError, match="bad.mlir"):
        compile_model(bad, [NAIVE], dry_run=True)


def _spec(tmp_path, replaces: str, shapes='{ a = ["M", "K"], b = ["K", "N"], c = ["M", "N"] }', name="matmul_f32") -> Path:
    src = (MODELS / "kernels" / "naive.cu").resolve()
    text = f'[module]\nname = "t"\narchs = ["sm_80"]\n\n[[kernel]]\nname = "{name}"\nsource = "{src}"\nblock = [64]\ngrid = ["1"]\nshapes = {shapes}\nreplaces = {replaces}\n'
    path = tmp_path / "t.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "replaces, message",
    [
        ('{ op = "conv" }', "replaces.op must be one of 'matmul', 'matmul+bias', 'matmul+bias+residual', 'matmul+bias+gelu', 'matmul+bias+gelu_erf', "
         "'matmul_nt+bias', 'matmul_nt+bias+residual', 'matmul_nt+bias+gelu', 'matmul_nt+bias+gelu_erf', 'matmul_nt+extf', 'matmul_nt', 'batch_matmul', "
         "'softmax', 'layernorm', 'rmsnorm', 'attention', 'attention_qkv', 'sdpa', 'sdpa_causal', 'sdpa_mask', 'sdpa_qkv', 'sdpa_qkv_causal', "
         "'sdpa_qkv_mask', 'sdpa_bshd', 'sdpa_bshd_causal', 'sdpa_bshd_mask', 'swiglu', got 'conv'"),
        ('{ op = "batch_matmul" }', "replaces 'batch_matmul' needs input tensors of ranks [3, 3] in parameter order; the kernel's inputs have ranks [2, 2]"),
        ('{ op = "matmul", blocks = 2 }', "replaces: unknown keys ['blocks']"),
        ('{ op = "matmul", divisible = { Q = 8 } }', "replaces.divisible names ['Q'], which are not shape symbols of the kernel's inputs (K, M, N)"),
        ('{ op = "matmul", max = { K = 0 } }', "replaces.max must be a table of positive integers"),
        ('{ op = "matmul", accumulate = "f8" }', "replaces.accumulate must be one of"),
        ('{ op = "layernorm" }', "replaces 'layernorm' needs input tensors of ranks [2, 1, 1]"),
        ('{ op = "matmul", eps = 1e-5 }', "replaces.eps is a number, for op = \"layernorm\" or \"rmsnorm\""),
        ('"matmul"', "replaces must be a table"),
        ('{ op = "matmul", pad = ["N"] }', "replaces.pad names ['N'], which replaces.divisible does not constrain"),
        ('{ op = "matmul", divisible = { N = 8 }, pad = "N" }', "replaces.pad must be a list of shape symbols"),
    ],
)
def test_bad_replaces_refused(tmp_path, replaces, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        load_kernels([_spec(tmp_path, replaces)])


def test_replaces_needs_shapes_that_say_the_op(tmp_path):
    path = _spec(tmp_path, '{ op = "matmul" }', shapes='{ a = ["M", "K"], b = ["K", "N"], c = ["N", "M"] }')
    message = "replaces 'matmul', but the kernel's shapes (a ['M', 'K']; b ['K', 'N']; c ['N', 'M']) don't say it: the output must be ['M', 'N']"
    with pytest.raises(SpecError, match=re.escape(message)):
        load_kernels([path])
    path = _spec(tmp_path, '{ op = "matmul" }', shapes='{ a = ["M", "K"], b = ["J", "N"], c = ["M", "N"] }')
    with pytest.raises(SpecError, match=re.escape("sizes that must agree: K vs J")):
        load_kernels([path])


def test_replaces_errors_name_the_spec(tmp_path):
    path = _spec(tmp_path, '{ op = "conv" }')
    with pytest.raises(SpecError, match=re.escape(f"{path}: [[kernel]] #1 (matmul_f32)")):
        load_kernels([path])


def test_spec_errors_name_the_original_file(tmp_path):
    path = _spec(tmp_path, '{ op = "matmul" }')
    path.write_text(path.read_text().replace('archs = ["sm_80"]', 'archs = ["sm_80"]\nnvcc_flags = "-O3"'))
    with pytest.raises(SpecError) as info:
        load_kernels([path])
    assert str(info.value) == f"{path}: [module] nvcc_flags must be a list of strings"


def test_spec_without_replaces_declares_nothing():
    kernels = load_kernels([Path(__file__).parents[2] / "kernels" / "samples.toml"])
    assert kernels.capabilities == ()
    r = compile_model(MODELS / "mlp_f32.mlir", [Path(__file__).parents[2] / "kernels" / "samples.toml"], dry_run=True)
    assert r.left[0].reasons[0] == ("kernel", "no kernel declares 'matmul+bias' or 'matmul'")


def test_missing_model_named(tmp_path):
    with pytest.raises(DispatchError, match=re.escape(f"can't read model {tmp_path / 'none.mlir'}: No such file or directory")):
        compile_model(tmp_path / "none.mlir", [NAIVE], dry_run=True)
    with pytest.raises(DispatchError, match="is not a regular file"):
        compile_model(tmp_path, [NAIVE], dry_run=True)


def test_module_entry_point(capsys):
    from iree_dispatch.models.__main__ import main

    assert main(["compile", str(MODELS / "mlp_f32.mlir"), "--kernels", str(NAIVE), "--dry-run", "-q"]) == 0
    assert "replaced: 2" in capsys.readouterr().out
    assert main(["compile", str(MODELS / "mlp_f32.mlir"), "--kernels", str(MODELS / "none.toml"), "--dry-run"]) == 1
    assert "iree-dispatch compile: error: can't read spec" in capsys.readouterr().err


def _variant(tmp_path, model: str, old: str, new: str, count: int = 1) -> Path:
    text = (MODELS / model).read_text()
    assert text.count(old) >= count, old
    path = tmp_path / model
    path.write_text(text.replace(old, new, count))
    return path


def test_look_alikes_are_not_candidates(tmp_path):
    """What only resembles a softmax or a LayerNorm is not one: no candidate, nothing replaced."""
    # The row max starts from 0, not -inf: max(x, 0), not max(x).
    zero_max = _variant(tmp_path, "softmax_bf16.mlir", "0xFF800000", "0.000000e+00")
    assert compile_model(zero_max, ALL, dry_run=True).decisions == []
    # The variance of x itself, not of x - mean.
    uncentered = _variant(tmp_path, "layernorm.mlir", "ins(%d, %d : tensor<4x8x96xf32>", "ins(%x, %x : tensor<4x8x96xf32>")
    found = [d.candidate.description for d in compile_model(uncentered, [LIBRARY], dry_run=True).decisions]
    assert found == ["4x8x96 f32 over dim 2, eps 1e-06", "4x8x96 bf16 over dim 2, eps 1.00136e-05"]  # ln_eps6 and ln_bf16 only


def test_broadcast_rhs_must_be_the_same_matrix(tmp_path):
    text = """func.func @f(%x: tensor<2x16x64xf32>, %w: tensor<64x128xf32>) -> tensor<2x16x128xf32> {
  %zero = arith.constant 0.0 : f32
  %eb = tensor.empty() : tensor<2x64x128xf32>
  %wb = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (MAP)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%w : tensor<64x128xf32>) outs(%eb : tensor<2x64x128xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x64x128xf32>
  %e = tensor.empty() : tensor<2x16x128xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2x16x128xf32>) -> tensor<2x16x128xf32>
  %y = linalg.batch_matmul ins(%x, %wb : tensor<2x16x64xf32>, tensor<2x64x128xf32>) outs(%f : tensor<2x16x128xf32>) -> tensor<2x16x128xf32>
  return %y : tensor<2x16x128xf32>
}
"""
    path = tmp_path / "m.mlir"
    path.write_text(text.replace("MAP", "d1, d2"))
    (d,) = compile_model(path, [NAIVE], dry_run=True).replaced
    assert (d.form.kind, d.capability.label) == ("matmul", "naive.matmul_f32")
    # A square weight read transposed while broadcast is not the same matrix: only a batch matmul.
    path.write_text(text.replace("MAP", "d2, d1").replace("64x128xf32>) outs(%eb", "64x64xf32>) outs(%eb").replace("%w: tensor<64x128xf32>", "%w: tensor<64x64xf32>")
                    .replace("2x64x128", "2x64x64").replace("2x16x128", "2x16x64").replace("tensor<2x64x64xf32>) outs(%f", "tensor<2x64x64xf32>) outs(%f"))
    r = compile_model(path, [NAIVE], dry_run=True)
    assert [f.kind for f in r.decisions[0].candidate.forms] == ["batch_matmul"]


def test_rmsnorm_and_layernorms_without_affine():
    r = _dry("norms_f32.torch.mlir", kernels=[LIBRARY])
    assert [(d.candidate.kind, d.capability.label) for d in r.replaced] == [
        ("rmsnorm", "library.rmsnorm_f32"),
        ("layernorm", "library.layernorm_warp_f32"),
        ("layernorm", "library.layernorm_warp_f32"),
    ]
    text = r.text()
    assert "#1 rmsnorm 4x8x96 f32 over dim 2, eps 1e-06 at norms_f32.torch.mlir:9 -> library.rmsnorm_f32" in text
    assert "#2 layernorm 4x8x96 f32 over dim 2, eps 1e-05 (no weight, no bias)" in text
    assert r.replaced[1].notes == ["the model has no weight: the kernel gets ones", "the model has no bias: the kernel gets zeros"]
    assert r.replaced[2].notes == ["the model has no bias: the kernel gets zeros"]


def test_dynamic_sizes():
    r = _dry("dynamic_f32.mlir", kernels=[NAIVE, LIBRARY])
    assert [(d.candidate.description, d.capability.label) for d in r.replaced] == [
        ("?x64 @ 64x32 f32 x f32 -> ?x32 f32", "naive.matmul_bias_f32"),
        ("?x4x48 f32 over dim 2", "library.softmax_warp_f32"),
    ]
    assert r.left[0].reasons == [("shape", "naive.matmul_f32: needs K % 4 == 0, the model's K is dynamic")]


GEMM_NT = LIBRARY_DIR / "gemm_nt.toml"


def test_lm_head_as_matmul_nt():
    """torch's linear(x, w) without bias in bf16: the matmul of x with w transposed (broadcast over
    the batch on 3-D input), accumulated in f32 and rounded to bf16, is one call of the NT GEMM,
    which reads w as stored and writes the rounded result: any N (77) and K (13), no
    --allow-wider-accumulation (the model's own numerics). The head's logits, converted to f32 by
    the model, are written as f32 by gemm_nt_bf16_f32out (matmul_nt+extf)."""
    r = _dry("lm_head_bf16.torch.mlir", kernels=[GEMM, GEMM_NT])
    assert _by_kernel(r) == [("batch_matmul", "matmul_nt+extf", "gemm_nt.gemm_nt_bf16_f32out"), ("matmul", "matmul_nt", "gemm_nt.gemm_nt_bf16")]
    head, proj = r.replaced
    assert head.form.result_dtype == "f32" and head.form.compute == "f32" and head.narrow_to is None
    assert head.form.operands[0].shape == (10, 32) and head.form.operands[1].shape == (77, 32) and head.form.result_shape == (10, 77)
    assert proj.form.operands[1].shape == (77, 13) and proj.form.result_dtype == "bf16" and proj.narrow_to is None
    assert "its rhs is a transposed [N, K] matrix, read as it is stored (the transpose is not computed)" in head.notes
    assert "with the bf16 rounding of its f32 result: one rounding, as the model's truncf" in head.notes
    text = r.text()
    assert "#1 batch_matmul 2x5x32 @ 2x32x77 bf16 x bf16 -> 2x5x77 f32 at lm_head_bf16.torch.mlir:4 -> gemm_nt.gemm_nt_bf16_f32out (as matmul_nt+extf)" in text
    # Without the any-size NT kernel: gemm's persistent one needs M and N multiples of 256, gemm_bf16 N and K multiples of 8.
    r = _dry("lm_head_bf16.torch.mlir", kernels=[GEMM])
    reasons = _reasons(r)[0]
    assert reasons[0] == ("shape", "gemm.gemm_nt_bf16_persistent: needs M % 256 == 0, the model's M = 10")
    assert ("shape", "gemm.gemm_bf16: needs N % 8 == 0, the model's N = 77") in reasons
    _, program = rewrite_model(MODELS / "lm_head_bf16.torch.mlir", [GEMM_NT])
    assert program.count("func.call @gemm_nt.gemm_nt_bf16(") == 1 and program.count("func.call @gemm_nt.gemm_nt_bf16_f32out(") == 1
    assert "(tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>" in program
    assert "(tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xf32>" in program


EXTF_NOTE = "with the f32 widening of its bf16 result (the model's extf; the kernel writes the rounded values in f32)"


def test_f32_logits_as_matmul_nt_extf(tmp_path):
    """The bf16 logits widened to f32 (truncf then extf, each the only use of the one before): one
    call of gemm_nt_bf16_f32out, the same computation (no --allow-wider-accumulation). Where the
    bf16 logits have another use, or are widened to f64, gemm_nt_bf16 writes them and IREE widens
    them; with no kernel declaring matmul_nt+extf, gemm_nt_bf16 and a note of what is left."""
    r = _dry("matmul_nt_extf.mlir", kernels=[GEMM_NT])
    assert _by_kernel(r) == [("batch_matmul", "matmul_nt+extf", "gemm_nt.gemm_nt_bf16_f32out"), ("matmul", "matmul_nt", "gemm_nt.gemm_nt_bf16"),
                             ("matmul", "matmul_nt", "gemm_nt.gemm_nt_bf16")]
    head, used, f64 = r.replaced
    assert head.form.operands[0].shape == (10, 32) and head.form.operands[1].shape == (77, 32) and head.form.result_shape == (10, 77)
    assert EXTF_NOTE in head.notes and "with the bf16 rounding of its f32 result: one rounding, as the model's truncf" in head.notes
    assert [f.kind for f in used.candidate.forms if f.kind.startswith("matmul_nt")] == ["matmul_nt"]  # the bf16 logits are returned too
    assert EXTF_NOTE not in used.notes and used.form.result_dtype == "bf16"
    assert "not as matmul_nt+extf: gemm_nt.gemm_nt_bf16_f32out: writes f32, the model's result is f64" in f64.notes
    _, program = rewrite_model(MODELS / "matmul_nt_extf.mlir", [GEMM_NT])
    assert program.count("func.call @gemm_nt.gemm_nt_bf16_f32out(") == 1 and program.count("func.call @gemm_nt.gemm_nt_bf16(") == 2
    # Only gemm_nt_bf16 declared: the head as matmul_nt, its widening left to IREE.
    spec = tmp_path / "gemm_nt.toml"
    spec.write_text(GEMM_NT.read_text().split("\n# The same GEMM writing")[0].replace('source = "gemm_nt.cu"', f'source = "{LIBRARY_DIR / "gemm_nt.cu"}"'))
    r = _dry("matmul_nt_extf.mlir", kernels=[spec])
    assert [k for _, k, _ in _by_kernel(r)] == ["matmul_nt"] * 3
    assert "its widening back to f32 is left to IREE (no kernel declares matmul_nt+extf for it)" in r.replaced[0].notes


def test_matmul_nt_refusals_say_why():
    r = _dry("matmul_nt.mlir", kernels=[GEMM_NT])
    assert _by_kernel(r) == [("batch_matmul", "matmul_nt", "gemm_nt.gemm_nt_bf16")]
    assert _reasons(r) == [
        [("dtype", "gemm_nt.gemm_nt_bf16: writes bf16, the model's result is f32 (the model keeps it: its only use is not one rounding to bf16)")],
        [("dtype", "gemm_nt.gemm_nt_bf16: takes bf16, bf16, the model has f32, f32")],
        [("numerics", "gemm_nt.gemm_nt_bf16: accumulates in f32, the model in bf16 (--allow-wider-accumulation accepts a wider one)")],
    ]
    wide = _dry("matmul_nt.mlir", kernels=[GEMM_NT], allow_wider_accumulation=True)
    assert [d.candidate.order for d in wide.replaced] == [1, 4]
    assert "computes in f32 where the model computes in bf16 (--allow-wider-accumulation)" in wide.replaced[1].notes
    # An untransposed rhs is no matmul_nt form: no kernel declares what it is.
    r = _dry("mlp_f32.mlir", kernels=[GEMM_NT])
    assert all(reasons[0][0] == "kernel" for reasons in _reasons(r))


def test_matmul_nt_shapes_must_say_it(tmp_path):
    with pytest.raises(SpecError, match="replaces 'matmul_nt', but the kernel's shapes"):
        compile_model(MODELS / "matmul_nt.mlir", [_spec(tmp_path, '{ op = "matmul_nt", accumulate = "f32" }')], dry_run=True)


@needs_build_tools
def test_compiled_lm_head_dispatches_the_nt_gemm(tmp_path):
    compile_model(MODELS / "lm_head_bf16.torch.mlir", [GEMM_NT], tmp_path / "h.vmfb", emit_mlir=tmp_path / "h.linked.mlir")
    dispatches = _flow_dispatches(tmp_path / "h.linked.mlir")
    assert sum("gemm_nt_bf16_f32out" in d for d in dispatches) == 1 and sum("gemm_nt_bf16" in d for d in dispatches) == 2
    # Nothing of the head left to IREE: no matmul, transpose, rounding or f32 cast of the logits.
    assert not [d for d in dispatches if "gemm_nt" not in d and ("matmul" in d or "transpose" in d or "bf16xf32" in d)], dispatches


# ---- a folder of specs (--kernels kernels/) ----

def _matmul_spec(folder: Path, file: str, module: str, replaces: bool = True) -> Path:
    """A spec of naive.cu's matmul_f32 as module `module`, declaring what it replaces or not."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (f'[module]\nname = "{module}"\narchs = ["sm_80"]\n\n[[kernel]]\nname = "matmul_f32"\nsource = "{(MODELS / "kernels" / "naive.cu").resolve()}"\n'
            'block = [64]\ngrid = ["ceildiv(N, 64)", "M"]\nshapes = { a = ["M", "K"], b = ["K", "N"], c = ["M", "N"] }\n')
    (folder / file).write_text(text + ('replaces = { op = "matmul" }\n' if replaces else ""))
    return folder / file


def test_a_kernel_folder_is_its_specs_that_declare_replacements(tmp_path):
    lib = tmp_path / "lib"
    b, a = _matmul_spec(lib, "b.toml", "b"), _matmul_spec(lib, "a.toml", "a")
    plain = _matmul_spec(lib, "plain.toml", "plain", replaces=False)
    (lib / "notes.txt").write_text("not a spec\n")
    _matmul_spec(lib / "sub", "c.toml", "c")  # only the folder's own files
    assert spec_files([lib]) == [a, b]
    r = compile_model(MODELS / "mlp_f32.mlir", [lib], dry_run=True)
    assert [m.name for m in r.kernels.modules] == ["a", "b"]
    assert [d.capability.label for d in r.replaced] == ["a.matmul_f32", "a.matmul_f32"]  # equal kernels: the first by name wins
    assert "kernels: a (1 kernels), b (1 kernels), 2 declare replacements" in r.text()
    # A spec named by itself and through its folder counts once, where first named.
    assert spec_files([b, lib]) == [b, a]
    assert [d.capability.label for d in compile_model(MODELS / "mlp_f32.mlir", [b, lib], dry_run=True).replaced] == ["b.matmul_f32", "b.matmul_f32"]
    # Named by itself, a spec without replacements is taken as before: it replaces nothing.
    r = compile_model(MODELS / "mlp_f32.mlir", [plain], dry_run=True)
    assert [m.name for m in r.kernels.modules] == ["plain"] and not r.replaced


def test_a_kernel_folder_without_replacements_is_refused(tmp_path):
    _matmul_spec(tmp_path, "plain.toml", "plain", replaces=False)
    with pytest.raises(SpecError) as refused:
        compile_model(MODELS / "mlp_f32.mlir", [tmp_path], dry_run=True)
    assert str(refused.value) == (f"kernel folder {tmp_path} holds no spec (*.toml) whose kernels declare what they replace (replaces = {{ op = ... }}); "
                                  "give a folder of such specs, or the spec files themselves")


def test_one_module_name_in_two_specs_names_both(tmp_path):
    """Two specs of one module name (in a folder, or named): refused naming both; the same kernel
    name in two modules is fine (a.matmul_f32 and b.matmul_f32 above)."""
    one, two = _matmul_spec(tmp_path, "one.toml", "same"), _matmul_spec(tmp_path, "two.toml", "same")
    for given in ([tmp_path], [one, two]):
        with pytest.raises(SpecError) as refused:
            load_kernels(given)
        assert str(refused.value) == f"module name same given by more than one kernel spec ({one}, {two}); each module needs its own name"


def test_the_kernel_library_holds_the_benchmarks_kernels():
    """kernels/ taken whole: every kernel the model benchmark substitutes declares what it
    replaces there; the batched bf16 GEMM and gemm_nt.cu's bias kernels do not (measured slower)."""
    labels = {c.label: c.op for c in load_kernels([LIBRARY_DIR]).capabilities}
    for label, op in {"gemm.gemm_bf16": "matmul", "gemm.gemm_bias_bf16": "matmul+bias", "gemm.gemm_bias_gelu_bf16": "matmul+bias+gelu",
                      "gemm_nt.gemm_nt_bf16": "matmul_nt", "gemm_nt.gemm_nt_bf16_f32out": "matmul_nt+extf",
                      "gemm.gemm_nt_bias_bf16_persistent": "matmul_nt+bias", "gemm.gemm_nt_bias_residual_bf16_persistent": "matmul_nt+bias+residual",
                      "model_ops.gemm_nt_bias_gelu_erf_bf16_persistent": "matmul_nt+bias+gelu_erf",
                      "gemm_n128.gemm_bias_residual_bf16_persistent": "matmul+bias+residual", "gemm_n128.gemm_nt_bias_bf16_persistent": "matmul_nt+bias",
                      "attention.attention_bf16": "attention", "attention.attention_qkv_bf16": "attention_qkv",
                      "gemm_f32.gemm_f32": "matmul", "gemm_f32.gemm_nt_f32": "matmul_nt", "gemm_f32.gemm_batched_f32": "batch_matmul",
                      "gemm_f32_m96.gemm_f32": "matmul",
                      "library.softmax_warp_bf16": "softmax", "library.layernorm_warp_bf16": "layernorm", "library.rmsnorm_f32": "rmsnorm"}.items():
        assert labels.get(label) == op, label
    assert "gemm.gemm_batched_bf16" not in labels
    # gemm_nt.cu's any-size bias kernels: slower than gemm.cu's one-tile ones (tests/models/kernels/gemm_nt_fused.toml declares them)
    assert not [label for label in labels if label.startswith("gemm_nt.gemm_nt_bias")]
