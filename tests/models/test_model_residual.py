"""The residual add after a bf16 Linear's bias add, as one call of gemm_bias_residual_bf16 (op kind
matmul+bias+residual): the attention output projection and the MLP's second matmul of the
committed tiny GPT-2 and BERT exports (through the importer's [B*S, N] -> [B, S, N] reshape in
GPT-2, on the batch matmul with a broadcast weight in BERT); the rewritten model computes what the
original computes on IREE's CPU (the kernels given reference bodies); where the bias add's result
has another use, plain matmul+bias and the add left to IREE; f32 models' residual adds found the
same way (the f32 kernels that take them: tests/models/test_model_default_exports.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree_dispatch.models import compile_model  # noqa: E402
from iree_dispatch.models.compiler import rewrite_model  # noqa: E402

from ..support.environment import ROOT  # noqa: E402
from ..support.model_references import _compile_cpu, _random_args, _run, with_reference_kernels  # noqa: E402

MODELS = Path(__file__).parent
GEMM = ROOT / "kernels" / "gemm.toml"
GEMM_RESIDUAL = MODELS / "kernels" / "gemm_residual.toml"  # the kernel with its replaces (kernels/gemm.toml declares only its persistent form)
FLASH = ROOT / "kernels" / "flash_attention.toml"
RESIDUAL = "gemm_residual.gemm_bias_residual_bf16"
# Per export: (projections followed by a residual add, other Linears with a bias, residual adds
# not after a Linear: the embeddings' sum in BERT).
COUNTS = {"gpt2_default_bf16": (4, 2, 0), "bert_default_bf16": (4, 8, 1)}


def _model(name: str) -> Path:
    return MODELS / f"{name}.torch.mlir"


@pytest.mark.parametrize("name", list(COUNTS))
def test_projections_before_a_residual_add_take_it(name):
    """With --allow-wider-accumulation (as matmul+bias), each output projection and second MLP
    matmul takes the residual add; the other Linears take gemm_bias_bf16; the adds taken are no
    longer listed as left to IREE without a kind."""
    fused, plain, left = COUNTS[name]
    report = compile_model(_model(name), [FLASH, GEMM, GEMM_RESIDUAL], dry_run=True, allow_wider_accumulation=True)
    counts = report.kernel_counts()
    assert (counts[RESIDUAL], counts["gemm.gemm_bias_bf16"]) == (fused, plain)
    for d in (d for d in report.replaced if d.capability.label == RESIDUAL):
        assert d.form.kind == "matmul+bias+residual" and d.form.result_shape == (32, 256)
        assert [o.shape for o in d.form.operands] == [(32, d.form.operands[0].shape[1]), (d.form.operands[0].shape[1], 256), (256,), (32, 256)]
        assert [o.dtype for o in d.form.operands] == ["bf16"] * 4 and d.widen == {2: "f32"}
        assert d.form.result_dims == ((3, 0), (3, 1), (3, 2))  # the model's [B, S, N] add, its dims the residual's
    assert [u.what for u in report.unkinded] == ["residual add"] * left
    strict = compile_model(_model(name), [FLASH, GEMM, GEMM_RESIDUAL], dry_run=True)
    assert RESIDUAL not in strict.kernel_counts() and "gemm.gemm_bias_bf16" not in strict.kernel_counts()


@pytest.mark.parametrize("name", ["linear_bias_bf16", "gpt2_default_bf16"])
def test_rewritten_computes_the_same(tmp_path, name):
    """The rewritten model (the GEMMs given reference bodies: f32 accumulation and bias add, one
    rounding, then the residual add in bf16) against IREE's own on the CPU, on fresh random
    parameters: the same bf16 steps but the rounding between matmul and bias add, so close."""
    model = MODELS / (f"{name}.torch.mlir")
    report, program = rewrite_model(model, [GEMM, GEMM_RESIDUAL], allow_wider_accumulation=True)
    assert report.kernel_counts()[RESIDUAL] == (1 if name.startswith("linear") else 4)
    original = model.read_text()
    expected_vmfb = _compile_cpu(original, tmp_path / "original.vmfb")
    got_vmfb = _compile_cpu(with_reference_kernels(program, report), tmp_path / "rewritten.vmfb")
    rng = np.random.default_rng()
    args = _random_args(original, "main", rng)
    start = 0
    if name.startswith("gpt2"):
        args[0], start = rng.integers(0, 1000, args[0].shape), 1
    args = args[:start] + [(a.astype(np.float32) * 0.1).astype(a.dtype) for a in args[start:]]
    (expected,), (got,) = _run(expected_vmfb, "main", args), _run(got_vmfb, "main", args)
    expected, got = np.asarray(expected, np.float32), np.asarray(got, np.float32)
    assert expected.shape == got.shape and np.all(np.isfinite(expected)) and np.any(expected != 0)
    assert np.max(np.abs(expected - got)) <= 3e-2 * max(1.0, float(np.max(np.abs(expected))))


# A bf16 Linear as IREE's input level has it (f32 accumulation, rounded to bf16, + bf16 bias),
# whose result goes to an add with a [16, 64] residual; @twice returns the biased result too.
LINEAR = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @{name}(%x: tensor<16x32xbf16>, %w: tensor<32x64xbf16>, %b: tensor<64xbf16>, %r: tensor<16x64xbf16>) -> {results} {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x64xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<16x64xf32>) -> tensor<16x64xf32>
  %c = linalg.matmul ins(%x, %w : tensor<16x32xbf16>, tensor<32x64xbf16>) outs(%f : tensor<16x64xf32>) -> tensor<16x64xf32>
  %en = tensor.empty() : tensor<16x64xbf16>
  %n = linalg.generic {{indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}} ins(%c : tensor<16x64xf32>) outs(%en : tensor<16x64xbf16>) {{
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  }} -> tensor<16x64xbf16>
  %h = linalg.generic {{indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}}
      ins(%n, %b : tensor<16x64xbf16>, tensor<64xbf16>) outs(%en : tensor<16x64xbf16>) {{
  ^bb0(%in: bf16, %in1: bf16, %out: bf16):
    %s = arith.addf %in, %in1 : bf16
    linalg.yield %s : bf16
  }} -> tensor<16x64xbf16>
  %y = linalg.generic {{indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}}
      ins(%h, %r : tensor<16x64xbf16>, tensor<16x64xbf16>) outs(%en : tensor<16x64xbf16>) {{
  ^bb0(%in: bf16, %in1: bf16, %out: bf16):
    %s = arith.addf %in, %in1 : bf16
    linalg.yield %s : bf16
  }} -> tensor<16x64xbf16>
  return {returned}
}}
"""


def test_biased_result_used_twice_keeps_the_add_iree_s(tmp_path):
    """Where the Linear's biased result is also returned, the add can't be the kernel's: plain
    matmul+bias (gemm_bias_bf16), the residual add left to IREE without a kind; the same Linear
    whose result only goes to the add takes gemm_bias_residual_bf16."""
    once = LINEAR.format(name="once", results="tensor<16x64xbf16>", returned="%y : tensor<16x64xbf16>")
    twice = LINEAR.format(name="twice", results="(tensor<16x64xbf16>, tensor<16x64xbf16>)",
                          returned="%y, %h : tensor<16x64xbf16>, tensor<16x64xbf16>")
    for text, label, unkinded in ((once, RESIDUAL, []), (twice, "gemm.gemm_bias_bf16", ["residual add"])):
        path = tmp_path / "linear.mlir"
        path.write_text(text)
        report = compile_model(path, [GEMM, GEMM_RESIDUAL], dry_run=True, allow_wider_accumulation=True)
        assert [d.capability.label for d in report.replaced] == [label]
        assert [u.what for u in report.unkinded] == unkinded


def test_f32_residual_forms_found_and_left_to_bf16_kernels():
    """f32 BERT: the attention output projection and the second MLP Linear of both layers have a
    matmul+bias+residual form as in bf16; the bf16 kernels take none of them (their dtypes), so
    every residual add is still listed as left to IREE without a kind."""
    report = compile_model(_model("bert_default_f32"), [GEMM, GEMM_RESIDUAL], dry_run=True, allow_wider_accumulation=True)
    assert sum(any(f.kind == "matmul+bias+residual" for f in d.candidate.forms) for d in report.decisions) == 4
    assert RESIDUAL not in report.kernel_counts()
    assert [u.what for u in report.unkinded] == ["residual add"] * 5
