"""q, k and v projections merged into one Linear (models/projections.py): tiny BERT exports with
their weights as module globals (as benchmarks/model.py and IREE parameters hold them) take one
GEMM of N = 3E per layer and the attention kernel that reads q, k and v in place from its result;
the rewritten model computes what the original computes on the CPU, in bf16 and in f32. Where the
weights are call arguments, or no kernel given reads the merged layout, or the three chains
differ, the model is left as it was and the report says why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree_dispatch.models.compiler import compile_model, rewrite_model  # noqa: E402
from iree_dispatch.models.projections import NOT_ONE_CHAIN, PASSED_IN  # noqa: E402
from iree_dispatch.models.torch_export import _arguments_to_globals  # noqa: E402

from ..support.environment import ROOT  # noqa: E402
from ..support.model_references import _compile_cpu, _random_args, _run_with_parameters, with_reference_kernels  # noqa: E402

MODELS = Path(__file__).parent
FLASH = ROOT / "kernels" / "flash_attention.toml"
FLASH_F32 = ROOT / "kernels" / "flash_attention_f32.toml"
GEMM_F32 = ROOT / "kernels" / "gemm_f32.toml"
GEMM_NT_FUSED = MODELS / "kernels" / "gemm_nt_fused.toml"  # gemm_nt.cu's bias kernels, declared for any size
MERGED = "q, k and v of 2 attentions computed by one Linear each, over the weights and biases concatenated once, at load"
QKV_NOTE = "q, k and v are read from the qkv projection's [B, S, 3E] result and the result is written in [B, S, E] layout (the slices and transposes are not computed)"
INPUTS = {"bert_default_bf16": 1, "bert_default_padded_bf16": 2, "bert_default_padded_f32": 2}


def _with_globals(name: str, folder: Path) -> tuple[Path, list[str]]:
    """The committed export `name` (its weights trailing arguments) with its weights as globals
    read from IREE parameters p0, p1, ...; the path and the parameters' names."""
    from iree.compiler import ir

    with ir.Context():
        module = ir.Module.parse((MODELS / f"{name}.torch.mlir").read_text())
        func = next(op for op in module.body.operations if op.operation.name == "func.func")
        names = [f"p{i}" for i in range(len(func.regions[0].blocks[0].arguments) - INPUTS[name])]
        _arguments_to_globals(module, "main", names)
        path = folder / f"{name}_globals.torch.mlir"
        path.write_text(str(module))
    return path, names


def _inputs_and_parameters(path: Path, name: str, names: list[str], rng):
    """Fresh token ids (and a padding mask whose second sequence ends in 4 padding tokens) and
    random weights at a trained model's scale, as (name, array) parameters."""
    text = path.read_text()
    n = INPUTS[name]
    original = (MODELS / f"{name}.torch.mlir").read_text()
    values = _random_args(original, "main", rng)
    inputs = [rng.integers(0, 1000, values[0].shape)]
    if n == 2:
        mask = np.ones(values[1].shape, np.int64)
        mask[1, -4:] = 0
        inputs.append(mask)
    weights = [(a.astype(np.float32) * 0.1).astype(a.dtype) for a in values[n:]]
    assert "util.global private @__parameter_0" in text and len(weights) == len(names)
    return inputs, list(zip(names, weights))


def _assert_computes_the_same(tmp_path: Path, path: Path, name: str, names: list[str], report, program: str) -> None:
    """The export and its rewritten program (the kernels given reference bodies) compiled for the
    CPU and run on the same fresh inputs and parameters: within 3% of the result's largest value."""
    expected_vmfb = _compile_cpu(path.read_text(), tmp_path / "original.vmfb")
    got_vmfb = _compile_cpu(with_reference_kernels(program, report), tmp_path / "rewritten.vmfb")
    inputs, parameters = _inputs_and_parameters(path, name, names, np.random.default_rng())
    (expected,) = _run_with_parameters(expected_vmfb, "main", inputs, parameters)
    (got,) = _run_with_parameters(got_vmfb, "main", inputs, parameters)
    expected, got = np.asarray(expected, np.float32), np.asarray(got, np.float32)
    assert expected.shape == got.shape and np.all(np.isfinite(expected)) and np.any(expected != 0)
    assert np.max(np.abs(expected - got)) <= 3e-2 * max(1.0, float(np.max(np.abs(expected))))


@pytest.mark.parametrize("name", ["bert_default_bf16", "bert_default_padded_bf16"])
def test_bert_q_k_v_computed_by_one_linear(tmp_path, name):
    """Each layer's three projections are one matmul+bias of N = 768 over the concatenated weight
    [768, 256] (read as stored), and the attention reads q, k and v from its [2, 16, 768] result;
    the rewritten model computes what the original computes."""
    path, names = _with_globals(name, tmp_path)
    report, program = rewrite_model(path, [FLASH, GEMM_NT_FUSED], allow_wider_accumulation=True)
    attention = "flash_attention.flash_attn_qkv_bf16_d64" + ("_mask" if "padded" in name else "")
    assert report.projections == MERGED
    assert report.kernel_counts() == {attention: 2, "gemm_nt_fused.gemm_nt_bias_bf16": 2, "gemm_nt_fused.gemm_nt_bias_residual_bf16": 4,
                                      "gemm_nt_fused.gemm_nt_bias_gelu_erf_bf16": 2}
    qkv = [d for d in report.replaced if d.capability.label == "gemm_nt_fused.gemm_nt_bias_bf16"]
    assert [(d.form.operands[1].shape, d.form.result_shape[-1]) for d in qkv] == [((768, 256), 768)] * 2
    for d in (d for d in report.replaced if d.capability.label == attention):
        assert QKV_NOTE in d.notes and d.form.operands[0].shape == (2, 16, 3, 4, 64)
    assert program.count("tensor.concat") == 4  # per layer: the weights and the biases
    _assert_computes_the_same(tmp_path, path, name, names, report, program)


def test_merged_projections_alone_compute_the_same(tmp_path):
    """With the attention kernel only, the merged Linear is IREE's own matmul: the model computes
    what it computed with three."""
    name = "bert_default_padded_bf16"
    path, names = _with_globals(name, tmp_path)
    report, program = rewrite_model(path, [FLASH])
    assert report.projections == MERGED and report.kernel_counts() == {"flash_attention.flash_attn_qkv_bf16_d64_mask": 2}
    _assert_computes_the_same(tmp_path, path, name, names, report, program)


def test_f32_bert_q_k_v_computed_by_one_linear(tmp_path):
    """f32 BERT: each layer's three projections are one gemm_nt_bias_f32 of N = 768 over the
    concatenated weight, and flash_attn_qkv_f32 reads q, k and v from its [2, 16, 768] result; the
    rewritten model computes what the original computes."""
    name = "bert_default_padded_f32"
    path, names = _with_globals(name, tmp_path)
    report, program = rewrite_model(path, [GEMM_F32, FLASH_F32])
    assert report.projections == MERGED
    assert report.kernel_counts() == {"gemm_f32.gemm_nt_bias_f32": 2, "gemm_f32.gemm_nt_bias_residual_f32": 4, "gemm_f32.gemm_nt_bias_gelu_erf_f32": 2,
                                      "flash_attention_f32.flash_attn_qkv_f32_d64_mask": 2}
    qkv = [d for d in report.replaced if d.capability.label == "gemm_f32.gemm_nt_bias_f32"]
    assert [(d.form.operands[1].shape, d.form.result_shape[-1]) for d in qkv] == [((768, 256), 768)] * 2
    assert program.count("tensor.concat") == 4
    _assert_computes_the_same(tmp_path, path, name, names, report, program)


def test_bert_keeps_three_projections_where_no_kernel_reads_the_merged_layout(tmp_path):
    """The f32 attention kernels without their qkv forms: no kernel given reads the merged layout, so
    the model is left as it was (three Linears, the attention on the projections' [B, S, H, D]
    layouts), and the report says why."""
    blocks = FLASH_F32.read_text().split("[[kernel]]")
    kept = [blocks[0], *(b for b in blocks[1:] if "_qkv_" not in b)]
    spec = tmp_path / "flash_attention_f32_without_qkv.toml"
    spec.write_text("[[kernel]]".join(kept).replace('source = "flash_attention_f32.cu"', f'source = "{ROOT / "kernels" / "flash_attention_f32.cu"}"'))
    path, _names = _with_globals("bert_default_padded_f32", tmp_path)
    report, program = rewrite_model(path, [GEMM_F32, spec])
    assert report.projections == ("q, k and v of 2 attentions are three Linears of one input, left as three: no kernel given reads them "
                                  "from one [B, S, 3E] projection (an sdpa_qkv kernel) at 2 of them")
    assert report.kernel_counts() == {"gemm_f32.gemm_nt_bias_f32": 6, "gemm_f32.gemm_nt_bias_residual_f32": 4, "gemm_f32.gemm_nt_bias_gelu_erf_f32": 2,
                                      "flash_attention_f32.flash_attn_bshd_f32_d64_mask": 2}
    assert "tensor.concat" not in program


def test_weights_passed_at_each_call_are_not_concatenated():
    """The committed export takes its weights as arguments: concatenating them would copy them at
    every call, so the projections stay three."""
    report = compile_model(MODELS / "bert_default_padded_bf16.torch.mlir", [FLASH], dry_run=True)
    assert report.projections == f"q, k and v of 2 attentions left as three projections: {PASSED_IN}"
    assert report.kernel_counts() == {"flash_attention.flash_attn_bshd_bf16_d64_mask": 2}


def _linear(name: str, bias: bool) -> str:
    """x [1, 16, 256] @ transpose(w_name [256, 256]) in f32, rounded to bf16, plus b_name as IREE imports nn.Linear."""
    text = f"""
  %wt_{name} = linalg.transpose ins(%w_{name} : tensor<256x256xbf16>) outs(%e2 : tensor<256x256xbf16>) permutation = [1, 0]
  %wb_{name} = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
      iterator_types = ["parallel", "parallel", "parallel"]}} ins(%wt_{name} : tensor<256x256xbf16>) outs(%e3 : tensor<1x256x256xbf16>) {{
    ^bb0(%in: bf16, %out: bf16):
      linalg.yield %in : bf16
  }} -> tensor<1x256x256xbf16>
  %mm_{name} = linalg.batch_matmul ins(%x, %wb_{name} : tensor<1x16x256xbf16>, tensor<1x256x256xbf16>) outs(%zero : tensor<1x16x256xf32>) -> tensor<1x16x256xf32>
  %r_{name} = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
      iterator_types = ["parallel", "parallel", "parallel"]}} ins(%mm_{name} : tensor<1x16x256xf32>) outs(%eo : tensor<1x16x256xbf16>) {{
    ^bb0(%in: f32, %out: bf16):
      %t = arith.truncf %in : f32 to bf16
      linalg.yield %t : bf16
  }} -> tensor<1x16x256xbf16>"""
    result = f"%r_{name}"
    if bias:
        text += f"""
  %y_{name} = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
      iterator_types = ["parallel", "parallel", "parallel"]}} ins(%r_{name}, %b_{name} : tensor<1x16x256xbf16>, tensor<256xbf16>) outs(%eo : tensor<1x16x256xbf16>) {{
    ^bb0(%in: bf16, %in_1: bf16, %out: bf16):
      %s = arith.addf %in, %in_1 : bf16
      linalg.yield %s : bf16
  }} -> tensor<1x16x256xbf16>"""
        result = f"%y_{name}"
    return text + f"""
  %h_{name} = tensor.expand_shape {result} [[0], [1], [2, 3]] output_shape [1, 16, 4, 64] : tensor<1x16x256xbf16> into tensor<1x16x4x64xbf16>
  %t_{name} = linalg.transpose ins(%h_{name} : tensor<1x16x4x64xbf16>) outs(%eh : tensor<1x4x16x64xbf16>) permutation = [0, 2, 1, 3]
  %c_{name} = tensor.collapse_shape %t_{name} [[0, 1], [2], [3]] : tensor<1x4x16x64xbf16> into tensor<4x16x64xbf16>"""


def _self_attention(biases: tuple[bool, bool, bool]) -> str:
    """One self-attention over x whose q, k and v are Linears with constant weights (and biases
    where `biases` says), its result transposed back to [B, S, E] as a transformer does."""
    constants = "\n".join(f"  %w_{n} = arith.constant dense<{0.01 * (i + 1)}> : tensor<256x256xbf16>\n"
                          f"  %b_{n} = arith.constant dense<{0.1 * (i + 1)}> : tensor<256xbf16>" for i, n in enumerate("qkv"))
    maps = "[affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d3)>, " \
           "affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d2)>, affine_map<(d0, d1, d2, d3, d4) -> ()>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>]"
    return f"""
func.func @main(%x: tensor<1x16x256xbf16>) -> tensor<1x16x256xbf16> {{
{constants}
  %cst = arith.constant 0.0 : f32
  %scale = arith.constant 0.125 : f32
  %e2 = tensor.empty() : tensor<256x256xbf16>
  %e3 = tensor.empty() : tensor<1x256x256xbf16>
  %ef = tensor.empty() : tensor<1x16x256xf32>
  %zero = linalg.fill ins(%cst : f32) outs(%ef : tensor<1x16x256xf32>) -> tensor<1x16x256xf32>
  %eo = tensor.empty() : tensor<1x16x256xbf16>
  %eh = tensor.empty() : tensor<1x4x16x64xbf16>
{''.join(_linear(n, b) for n, b in zip("qkv", biases))}
  %e = tensor.empty() : tensor<4x16x64xbf16>
  %r = iree_linalg_ext.attention <indexing_maps = {maps}> ins(%c_q, %c_k, %c_v, %scale : tensor<4x16x64xbf16>, tensor<4x16x64xbf16>, tensor<4x16x64xbf16>, f32)
      outs(%e : tensor<4x16x64xbf16>) {{
    ^bb0(%s: f32):
      iree_linalg_ext.yield %s : f32
  }} -> tensor<4x16x64xbf16>
  %rh = tensor.expand_shape %r [[0, 1], [2], [3]] output_shape [1, 4, 16, 64] : tensor<4x16x64xbf16> into tensor<1x4x16x64xbf16>
  %eb = tensor.empty() : tensor<1x16x4x64xbf16>
  %rt = linalg.transpose ins(%rh : tensor<1x4x16x64xbf16>) outs(%eb : tensor<1x16x4x64xbf16>) permutation = [0, 2, 1, 3]
  %out = tensor.collapse_shape %rt [[0], [1], [2, 3]] : tensor<1x16x4x64xbf16> into tensor<1x16x256xbf16>
  return %out : tensor<1x16x256xbf16>
}}
"""


@pytest.mark.parametrize("biases, merged", [((True, True, True), True), ((False, False, False), True), ((True, True, False), False)],
                         ids=["with_biases", "without_biases", "one_without_bias"])
def test_three_linears_merged_only_where_they_are_alike(tmp_path, biases, merged):
    """Three Linears of one input with constant weights are merged, with or without biases; where
    one differs (v without the bias q and k have) they stay three, and the report says why."""
    model = tmp_path / "self_attention.mlir"
    model.write_text(_self_attention(biases))
    report, program = rewrite_model(model, [FLASH])
    if merged:
        assert report.projections == "q, k and v of 1 attentions computed by one Linear each, over the weights and biases concatenated once, at load"
        assert report.kernel_counts() == {"flash_attention.flash_attn_qkv_bf16_d64": 1}
        assert program.count("tensor.concat") == (2 if biases[0] else 1) and program.count("linalg.batch_matmul") == 1
    else:
        assert report.projections == f"q, k and v of 1 attentions left as three projections: {NOT_ONE_CHAIN}"
        assert "tensor.concat" not in program and program.count("linalg.batch_matmul") == 3


def test_one_projection_sliced_is_not_reported():
    """GPT-2 computes q, k and v with one Linear and slices its result: nothing to merge, nothing to report."""
    report = compile_model(MODELS / "gpt2_default_bf16.torch.mlir", [FLASH], dry_run=True)
    assert report.projections is None
    assert report.kernel_counts() == {"flash_attention.flash_attn_qkv_bf16_d64_causal": 2}
