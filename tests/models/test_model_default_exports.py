"""Tiny GPT-2, Llama and BERT exported as users export them (transformers' default SDPA attention,
no hand-built mask; tests/support/default_exports.py): every attention op is found by the sdpa
kinds and takes the kernel its mask allows (the causal mask transformers builds inside GPT-2 and
Llama: sdpa_causal; BERT without a mask: sdpa; a [B, S] padding mask: sdpa_mask), on the layouts
the model holds q, k and v in where it can (GPT-2's one qkv projection: sdpa_qkv; BERT's three
projections: sdpa_bshd; Llama's q and k, rotated after the transpose, as [B, H, S, D]), the rewritten
model computes what the original computes on the CPU (the kernels given reference bodies), and
the models compile for CUDA with and without the kernels. No torch needed: the exports are committed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree_dispatch.models import compile_model  # noqa: E402
from iree_dispatch.models.compiler import rewrite_model  # noqa: E402

from ..support.environment import ROOT, needs_build_tools  # noqa: E402
from ..support.model_references import _compile_cpu, _random_args, _run, with_reference_kernels  # noqa: E402

MODELS = Path(__file__).parent
FLASH = ROOT / "kernels" / "flash_attention.toml"
GEMM_NT = ROOT / "kernels" / "gemm_nt.toml"
GEMM_F32 = ROOT / "kernels" / "gemm_f32.toml"
FLASH_F32 = ROOT / "kernels" / "flash_attention_f32.toml"
CAUSAL_NOTE = "the mask is the causal triangle (0 where key j <= query i, -inf or at most half the lowest value elsewhere): the kernel's causal masking, the mask not read"
ZERO_NOTE = "the mask is 0 everywhere (every query sees every key): the kernel without a mask, the mask not read"
BROADCAST_NOTE = "the mask is read as 2x1x16x16, broadcast over its dims of size 1"
GQA_NOTE = "k and v repeat 2 heads 2 times each (grouped-query attention): the kernel reads them as stored (the repeat is not computed)"
QKV_NOTE = "q, k and v are read from the qkv projection's [B, S, 3E] result and the result is written in [B, S, E] layout (the slices and transposes are not computed)"
BSHD_NOTE = "q, k and v are read from their projections' [B, S, E] results and the result is written in [B, S, E] layout (the transposes are not computed)"


NOT_SLICES = "q, k and v are not slices of one [B, S, 3E] tensor"


def not_qkv(masking: str) -> str:
    """BERT's q, k and v are heads of separate projections: one note for the sdpa_qkv kernels of the
    masking taken (Llama's, rotated after the transpose, are not heads as read: no note)."""
    return f"not as sdpa_qkv{masking}: {NOT_SLICES}"


# Each bf16 export: the kernel both layers' attention takes, and its notes.
TAKEN = {
    "gpt2_default_bf16": ("flash_attn_qkv_bf16_d64_causal", [QKV_NOTE, CAUSAL_NOTE]),
    "gpt2_default_padded_bf16": ("flash_attn_qkv_bf16_d64_mask", [QKV_NOTE, BROADCAST_NOTE]),
    "llama_default_bf16": ("flash_attn_bf16_d64_causal", [GQA_NOTE, CAUSAL_NOTE]),
    "bert_default_bf16": ("flash_attn_bshd_bf16_d64", [BSHD_NOTE, ZERO_NOTE, not_qkv("")]),
    "bert_default_padded_bf16": ("flash_attn_bshd_bf16_d64_mask", [BSHD_NOTE, BROADCAST_NOTE, not_qkv("_mask")]),
}
F32 = ["bert_default_f32", "bert_default_padded_f32"]


def _model(name: str) -> Path:
    return MODELS / f"{name}.torch.mlir"


@pytest.mark.parametrize("name", list(TAKEN))
def test_default_attention_taken(name):
    """Both layers' SDPA, with the mask transformers built inside the model, by the kernel its mask allows."""
    report = compile_model(_model(name), [FLASH], dry_run=True)
    assert report.counts()["sdpa"] == {"found": 2, "replaced": 2, "left": 0}
    kernel, notes = TAKEN[name]
    for d in (d for d in report.replaced if d.candidate.kind == "sdpa"):
        assert (d.capability.label, d.notes) == (f"flash_attention.{kernel}", notes)
        if "gpt2" in name:  # q, k and v as one [B, S, 3, H, D] tensor, the result [B, S, H, D]
            assert d.form.operands[0].shape == (2, 16, 3, 4, 64) and d.form.result_shape == (2, 16, 4, 64)
        elif "bert" in name:  # q, k and v as three [B, S, H, D] tensors (the projections' [B, S, E] results), the result [B, S, H, D]
            assert [o.shape for o in d.form.operands[:3]] == [(2, 16, 4, 64)] * 3 and d.form.result_shape == (2, 16, 4, 64)
        else:
            assert [o.shape for o in d.form.operands[:3]] == ([(2, 4, 16, 64), (2, 2, 16, 64), (2, 2, 16, 64)] if "llama" in name else [(2, 4, 16, 64)] * 3)


@pytest.mark.parametrize("name", ["bert_default_bf16", "bert_default_padded_bf16"])
def test_bert_rewrite_reads_the_projections_as_stored(name):
    """Each call takes q, k and v as their projections' [2, 16, 256] results, each its own tensor,
    expanded to [2, 16, 4, 64] (a free reshape, not the model's transposed heads), and its
    [2, 16, 4, 64] result, collapsed to [2, 16, 256], is what the output projection reads."""
    report, program = rewrite_model(_model(name), [FLASH])
    kernel = f"flash_attention.{TAKEN[name][0]}"
    calls = re.findall(rf"(%\w+) = func\.call @{re.escape(kernel)}\((%\w+), (%\w+), (%\w+),", program)
    assert len(calls) == 2 and report.kernel_counts() == {kernel: 2}
    for result, *args in calls:
        sources = []
        for arg in args:
            expanded = re.search(rf"{arg} = tensor\.cast (%\w+) : tensor<2x16x4x64xbf16> to tensor<\?x\?x\?x64xbf16>", program)
            assert expanded, arg
            source = re.search(rf"{expanded[1]} = tensor\.expand_shape (%\w+) \[\[0\], \[1\], \[2, 3\]\] output_shape \[2, 16, 4, 64\] : "
                               r"tensor<2x16x256xbf16> into tensor<2x16x4x64xbf16>", program)
            assert source, arg
            sources.append(source[1])
        assert len(set(sources)) == 3  # three projections
        cast = re.search(rf"(%\w+) = tensor\.cast {result} : tensor<\?x\?x\?x64xbf16> to tensor<2x16x4x64xbf16>", program)
        assert cast and re.search(rf"tensor\.collapse_shape {cast[1]} \[\[0\], \[1\], \[2, 3\]\] : tensor<2x16x4x64xbf16> into tensor<2x16x256xbf16>", program)


@pytest.mark.parametrize("name", F32)
def test_f32_attention_left_with_reasons(name):
    """f32 BERT: the kernels are bf16 and f16 only: each attention op left to IREE, with a dtype
    reason per kernel, and one layout reason for all the sdpa_qkv kernels (separate projections)."""
    report = compile_model(_model(name), [FLASH], dry_run=True)
    assert report.counts()["sdpa"] == {"found": 2, "replaced": 0, "left": 2}
    suffix, mask = ("_mask", ", bf16") if "padded" in name else ("", "")
    expected = f"flash_attention.flash_attn_bf16_d64{suffix}: takes bf16, bf16, bf16{mask}, the model has f32, f32, f32{mask.replace('bf16', 'f32')}"
    for d in (d for d in report.left if d.candidate.kind == "sdpa"):
        assert [r for r in d.reasons if r[0] != "dtype"] == [("layout", f"sdpa_qkv{suffix}: {NOT_SLICES}")] and ("dtype", expected) in d.reasons


def _padding(shape) -> np.ndarray:
    """A [B, S] padding mask as users pass it: the last quarter of the second sequence is padding."""
    mask = np.ones(shape, np.int64)
    mask[1, -shape[1] // 4:] = 0
    return mask


@pytest.mark.parametrize("name", ["gpt2_default_bf16", "gpt2_default_padded_bf16", "llama_default_bf16", "bert_default_bf16", "bert_default_padded_bf16"])
def test_rewritten_computes_the_same(tmp_path, name):
    """The rewritten model (each attention a kernel with a reference body in plain linalg) against
    IREE's own attention on the CPU, on fresh random parameters at a trained model's scale."""
    model = _model(name)
    report, program = rewrite_model(model, [FLASH])
    _assert_computes_the_same(tmp_path, name, report, program)


def _assert_computes_the_same(tmp_path, name: str, report, program: str) -> None:
    """The export `name` and its rewritten `program` (the kernels given reference bodies) compiled
    for the CPU and run on the same fresh random inputs and parameters (at a trained model's scale;
    a padding mask for the padded exports): the same result within 3% of its largest value."""
    original = _model(name).read_text()
    expected_vmfb = _compile_cpu(original, tmp_path / "original.vmfb")
    got_vmfb = _compile_cpu(with_reference_kernels(program, report), tmp_path / "rewritten.vmfb")
    rng = np.random.default_rng()
    args = _random_args(original, "main", rng)
    args[0] = rng.integers(0, 1000, args[0].shape)
    start = 2 if "padded" in name else 1
    if "padded" in name:
        args[1] = _padding(args[1].shape)
    args = args[:start] + [(a.astype(np.float32) * 0.1).astype(a.dtype) for a in args[start:]]
    (expected,), (got,) = _run(expected_vmfb, "main", args), _run(got_vmfb, "main", args)
    expected, got = np.asarray(expected, np.float32), np.asarray(got, np.float32)
    assert expected.shape == got.shape and np.all(np.isfinite(expected))
    assert np.max(np.abs(expected - got)) <= 3e-2 * max(1.0, float(np.max(np.abs(expected))))


@needs_build_tools
@pytest.mark.parametrize("name", ["gpt2_default_bf16", "llama_default_bf16", "bert_default_padded_bf16", "bert_default_f32"])
def test_default_exports_compile(tmp_path, name):
    """The export compiles for CUDA as it is (IREE alone) and with the attention kernels linked in."""
    from iree.compiler.tools.binaries import find_tool

    alone = tmp_path / "alone.vmfb"
    flags = ["--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80", "--iree-input-demote-f64-to-f32=false"]
    proc = subprocess.run([find_tool("iree-compile"), str(_model(name)), *flags, "-o", str(alone)], capture_output=True, text=True)
    assert proc.returncode == 0 and alone.stat().st_size > 0, proc.stderr[-3000:]
    report = compile_model(_model(name), [FLASH], tmp_path / "flash.vmfb")
    assert (tmp_path / "flash.vmfb").stat().st_size > 0
    assert len(report.replaced) == (0 if name.endswith("f32") else 2)


def test_f32_logits_written_by_the_lm_head(tmp_path):
    """GPT-2 whose bf16 logits are converted to f32 (`logits.float()`): the LM head (the batch
    matmul with the tied embedding, its truncf to bf16 and the extf back) is one call of
    gemm_nt_bf16_f32out; the same model without the conversion takes gemm_nt_bf16. The rewritten
    model (the kernel given a reference body) computes what IREE computes on the CPU: the same
    rounding, so at most one bf16 step apart where a sum lands differently on a rounding boundary."""
    for name, kind, kernel in (("gpt2_default_f32logits_bf16", "matmul_nt+extf", "gemm_nt_bf16_f32out"), ("gpt2_default_bf16", "matmul_nt", "gemm_nt_bf16")):
        report = compile_model(_model(name), [FLASH, GEMM_NT], dry_run=True)
        assert report.counts()["batch_matmul"] == {"found": 1, "replaced": 1, "left": 0}
        assert report.kernel_counts()[f"gemm_nt.{kernel}"] == 1
        (head,) = [d for d in report.replaced if d.candidate.kind == "batch_matmul"]
        assert head.form.kind == kind and head.form.result_shape == (32, 1000) and head.form.operands[1].shape == (1000, 256)
    model = _model("gpt2_default_f32logits_bf16")
    report, program = rewrite_model(model, [GEMM_NT])
    assert [d.capability.label for d in report.replaced] == ["gemm_nt.gemm_nt_bf16_f32out"]
    original = model.read_text()
    expected_vmfb = _compile_cpu(original, tmp_path / "original.vmfb")
    got_vmfb = _compile_cpu(with_reference_kernels(program, report), tmp_path / "rewritten.vmfb")
    rng = np.random.default_rng()
    args = _random_args(original, "main", rng)
    args[0] = rng.integers(0, 1000, args[0].shape)
    args = args[:1] + [(a.astype(np.float32) * 0.1).astype(a.dtype) for a in args[1:]]
    (expected,), (got,) = _run(expected_vmfb, "main", args), _run(got_vmfb, "main", args)
    assert expected.dtype == got.dtype == np.float32 and expected.shape == got.shape == (2, 16, 1000)
    assert np.all(np.isfinite(expected)) and np.any(expected != 0)
    assert np.all(np.abs(got - expected) <= 2.0**-7 * np.abs(expected))
    assert np.mean(got == expected) >= 0.99


def _mask_model(body: str) -> str:
    """An SDPA (4 heads, 16 tokens of 64) whose [4, 16, 16] bf16 mask a generic over the key and
    query indices computes from `body` (which yields %m from %i, the query, and %j, the key, as i64)."""
    maps = "[affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d3)>, " \
           "affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d2)>, affine_map<(d0, d1, d2, d3, d4) -> ()>, " \
           "affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>]"
    return f"""
func.func @main(%q: tensor<4x16x64xbf16>, %k: tensor<4x16x64xbf16>, %v: tensor<4x16x64xbf16>) -> tensor<4x16x64xbf16> {{
  %scale = arith.constant 0.125 : f32
  %em = tensor.empty() : tensor<4x16x16xbf16>
  %mask = linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}}
      outs(%em : tensor<4x16x16xbf16>) {{
    ^bb0(%out: bf16):
      %ii = linalg.index 1 : index
      %jj = linalg.index 2 : index
      %i = arith.index_cast %ii : index to i64
      %j = arith.index_cast %jj : index to i64
      {body}
      linalg.yield %m : bf16
  }} -> tensor<4x16x16xbf16>
  %e = tensor.empty() : tensor<4x16x64xbf16>
  %r = iree_linalg_ext.attention <indexing_maps = {maps}>
      ins(%q, %k, %v, %scale, %mask : tensor<4x16x64xbf16>, tensor<4x16x64xbf16>, tensor<4x16x64xbf16>, f32, tensor<4x16x16xbf16>)
      outs(%e : tensor<4x16x64xbf16>) {{
    ^bb0(%s: f32):
      iree_linalg_ext.yield %s : f32
  }} -> tensor<4x16x64xbf16>
  return %r : tensor<4x16x64xbf16>
}}
"""


HIDDEN = "%zero = arith.constant 0.0 : bf16\n      %low = arith.constant -1.6947656946257677e38 : bf16\n      %c = arith.cmpi {predicate}, %j, %i : i64\n      " \
         "%m = arith.select %c, %zero, %low : bf16"


@pytest.mark.parametrize("body, kind, note", [
    (HIDDEN.format(predicate="sle"), "sdpa_causal", CAUSAL_NOTE),   # exactly causal, with half the lowest value where hidden
    (HIDDEN.format(predicate="slt"), "sdpa_mask", None),  # the diagonal hidden too: not causal
    ("%f = arith.sitofp %j : i64 to bf16\n      %m = math.absf %f : bf16", "sdpa_mask",
     "the mask is computed in the model, but not checked for the causal triangle: math.absf in a linalg.generic is not evaluated"),
], ids=["causal", "not_causal", "not_evaluated"])
def test_computed_mask(tmp_path, body, kind, note):
    """A mask computed in the model: evaluated, it takes the kernel its values allow; where it cannot be, the report says why."""
    model = tmp_path / "mask.mlir"
    model.write_text(_mask_model(body))
    (d,) = compile_model(model, [FLASH], dry_run=True).decisions
    assert d.replaced and d.form.kind == kind
    assert (note in d.notes) if note else d.notes == []


GEMM_NT_FUSED = MODELS / "kernels" / "gemm_nt_fused.toml"  # gemm_nt.cu's bias kernels, declared for any size


@pytest.mark.parametrize("name", ["bert_default_bf16", "bert_default_padded_bf16"])
def test_bert_linears_read_their_weights_as_stored(tmp_path, name):
    """With --allow-wider-accumulation, BERT's Linears take gemm_nt.cu's bias kernels, each with what
    follows it (the q, k, v projections as matmul_nt+bias, the attention output and the second MLP
    Linear with their residual adds, the first MLP Linear with its erf GELU), its weight read as
    stored (each noted so). The rewritten model (the kernels given reference bodies in plain
    linalg) computes what the original does, on the CPU."""
    report, program = rewrite_model(_model(name), [GEMM_NT_FUSED], allow_wider_accumulation=True)
    assert report.kernel_counts() == {"gemm_nt_fused.gemm_nt_bias_bf16": 6, "gemm_nt_fused.gemm_nt_bias_residual_bf16": 4,
                                      "gemm_nt_fused.gemm_nt_bias_gelu_erf_bf16": 2}
    assert all("its rhs is a transposed [N, K] matrix, read as it is stored (the transpose is not computed)" in d.notes for d in report.replaced)
    _assert_computes_the_same(tmp_path, name, report, program)


@pytest.mark.parametrize("name", F32)
def test_f32_bert_takes_the_f32_kernels_on_its_layouts(tmp_path, name):
    """In f32 (strict numerics), BERT's Linears take gemm_f32.cu's kernels with their epilogues (q,
    k and v with their bias, the attention output and the second MLP Linear with their residual
    adds, the first MLP Linear with its erf GELU), each weight read as stored, and its attention the
    f32 flash kernel on the projections' [B, S, H, D] layout; the rewritten model computes what the
    original does, on the CPU."""
    report, program = rewrite_model(_model(name), [GEMM_F32, FLASH_F32])
    attention = "flash_attention_f32.flash_attn_bshd_f32_d64" + ("_mask" if "padded" in name else "")
    assert report.kernel_counts() == {"gemm_f32.gemm_nt_bias_f32": 6, "gemm_f32.gemm_nt_bias_residual_f32": 4, "gemm_f32.gemm_nt_bias_gelu_erf_f32": 2,
                                      attention: 2}
    linears = [d for d in report.replaced if d.capability.label.startswith("gemm_f32.")]
    assert all("its rhs is a transposed [N, K] matrix, read as it is stored (the transpose is not computed)" in d.notes for d in linears)
    assert all(BSHD_NOTE in d.notes for d in report.replaced if d.capability.label == attention)
    _assert_computes_the_same(tmp_path, name, report, program)
