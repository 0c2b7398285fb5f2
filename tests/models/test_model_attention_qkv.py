"""Op kind attention_qkv: eager attention's chain with q, k and v sliced from the qkv projection's
[B, S, 3E] result and the result transposed back to [B, S, E] (transformers' GPT-2), as one call
of attention_qkv_bf16 that reads and writes those layouts: the report, the refusals (plain
attention is taken instead, the report says why), and the rewritten model computing what the
original computes on the CPU (the kernels given reference bodies in plain linalg)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree_dispatch.core.errors import SpecError  # noqa: E402
from iree_dispatch.models import compile_model, load_kernels  # noqa: E402
from iree_dispatch.models.compiler import report_json, rewrite_model  # noqa: E402

from ..support.environment import needs_build_tools  # noqa: E402
from ..support.model_references import _compile_cpu, _flow_dispatches, _random_args, _run, with_reference_kernels  # noqa: E402

MODELS = Path(__file__).parent
K = MODELS / "kernels"  # the test-only specs
LIBRARY_DIR = MODELS.parents[1] / "kernels"  # the kernel library
LIBRARY, GEMM, ATTENTION = LIBRARY_DIR / "library.toml", LIBRARY_DIR / "gemm.toml", LIBRARY_DIR / "attention.toml"
GPT2_LAYER = [LIBRARY, GEMM, ATTENTION]
QKV = "attention.attention_qkv_bf16"
QKV_NOTE = "q, k and v are read from the projection's [B, S, 3E] result and the result is written in [B, S, E] layout (the transposes are not computed)"
WIDE_NOTE = ("computes in f32 and rounds once, where the model rounds to bf16 after the scores, the scale, the mask add, the softmax and the context"
             " (--allow-wider-accumulation)")
STRICT = ("computes in f32, the model in bf16; the model rounds to bf16 after the scores, the scale, the mask add, the softmax and the context"
          " (--allow-wider-accumulation accepts a wider one)")


def _same_on_cpu(tmp_path, model: Path, function: str, report, program: str, tol: float, scale_from: int | None = None):
    original = model.read_text()
    expected_vmfb = _compile_cpu(original, tmp_path / "original.vmfb")
    got_vmfb = _compile_cpu(with_reference_kernels(program, report), tmp_path / "rewritten.vmfb")
    args = _random_args(original, function, np.random.default_rng(0))
    if scale_from is not None:  # a GPT-2 layer's parameters at GPT-2's scale (N(0, 1) weights saturate the bf16 softmax)
        args = args[:scale_from] + [(a.astype(np.float32) * 0.1).astype(a.dtype) for a in args[scale_from:]]
    expected, got = _run(expected_vmfb, function, args), _run(got_vmfb, function, args)
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        e, g = np.asarray(e, np.float32), np.asarray(g, np.float32)
        assert e.shape == g.shape
        assert np.max(np.abs(e - g)) <= tol * max(1.0, float(np.max(np.abs(e))))


# ----------------------------------------------------------------------------------------------
# A GPT-2 layer (transformers, torch.export, IREE's FX importer): B = 2, S = 40, H = 2 heads of 64
# ----------------------------------------------------------------------------------------------


def test_gpt2_layer_chain_as_attention_qkv():
    """The chain (scores batch matmul #3, softmax #4, context batch matmul #5) with the slices of
    the qkv projection and the transposes around it: one attention_qkv_bf16 call, which reads the
    projection's result (itself gemm_bias_bf16's, as matmul+bias) as [B, S, 3, H, 64]."""
    r = compile_model(MODELS / "gpt2_layer_bf16.torch.mlir", GPT2_LAYER, dry_run=True, allow_wider_accumulation=True)
    (d,) = [d for d in r.replaced if d.capability.label == QKV]
    assert (d.candidate.kind, d.form.kind, d.candidate.order) == ("batch_matmul", "attention_qkv", 5)
    assert d.notes == [QKV_NOTE, WIDE_NOTE, "with #3 batch_matmul and #4 softmax: one kernel call for the whole chain"]
    assert [o.shape for o in d.form.operands] == [(2, 40, 3, 2, 64), (2, 40, 40)]
    assert [o.dtype for o in d.form.operands] == ["bf16", "bf16"] and d.form.result_dtype == "bf16"
    assert d.form.result_shape == (2, 40, 2, 64) and d.form.scale == 0.125 and d.narrow_to is None
    text = r.text()
    assert (f"  #5 batch_matmul 4x40x40 @ 4x40x64 bf16 x bf16 -> 4x40x64 f32 at gpt2_layer_bf16.torch.mlir:120 -> {QKV} (as attention_qkv)\n"
            f"      note: {QKV_NOTE}\n      note: {WIDE_NOTE}\n      note: with #3 batch_matmul and #4 softmax: one kernel call for the whole chain\n") in text
    assert "  #3 " not in text and "  #4 " not in text and "attention.attention_bf16" not in text
    assert not r.left
    assert r.kernel_counts()[QKV] == 1 and r.kernel_counts()["gemm.gemm_bias_bf16"] == 3
    assert r.counts()["batch_matmul"] == {"found": 2, "replaced": 2, "left": 0}
    # the qkv projection, before the chain, is replaced too
    (proj,) = [d for d in r.replaced if d.candidate.order == 2]
    assert (proj.form.kind, proj.capability.label) == ("matmul+bias", "gemm.gemm_bias_bf16")


def test_gpt2_layer_report_is_deterministic():
    a = compile_model(MODELS / "gpt2_layer_bf16.torch.mlir", GPT2_LAYER, dry_run=True, allow_wider_accumulation=True)
    b = compile_model(MODELS / "gpt2_layer_bf16.torch.mlir", GPT2_LAYER, dry_run=True, allow_wider_accumulation=True)
    assert a.text() == b.text() and report_json(a) == report_json(b)
    (entry,) = [e for e in a.to_json()["replaced"] if e["kernel"] == QKV]
    assert entry["form"] == "attention_qkv" and entry["notes"][0] == QKV_NOTE


def test_gpt2_layer_rewrite_reads_the_projection_as_stored():
    """The call takes the projection's [2, 40, 384] result expanded to [2, 40, 3, 2, 64] and the
    mask collapsed to [2, 40, 40]; its [2, 40, 2, 64] result, collapsed to [80, 128], is what the
    output projection reads; the transposes of q, k, v and of the result are left dead."""
    report, program = rewrite_model(MODELS / "gpt2_layer_bf16.torch.mlir", GPT2_LAYER, allow_wider_accumulation=True)
    assert program.count(f"func.call @{QKV}(") == 1 and "attention.attention_bf16" not in program
    assert re.search(r"tensor\.expand_shape %\w+ \[\[0\], \[1\], \[2, 3, 4\]\] output_shape \[2, 40, 3, 2, 64\] : tensor<2x40x384xbf16> into tensor<2x40x3x2x64xbf16>",
                     program)
    call = re.search(rf"(%\w+) = func\.call @{re.escape(QKV)}\((%\w+), (%\w+)\) : \(tensor<\?x\?x3x\?x64xbf16>, tensor<\?x\?x\?xbf16>\) -> tensor<\?x\?x\?x64xbf16>",
                     program)
    assert call
    cast = re.search(rf"(%\w+) = tensor\.cast {call[1]} : tensor<\?x\?x\?x64xbf16> to tensor<2x40x2x64xbf16>", program)
    assert cast
    out = re.search(rf"(%\w+) = tensor\.collapse_shape {cast[1]} \[\[0, 1\], \[2, 3\]\] : tensor<2x40x2x64xbf16> into tensor<80x128xbf16>", program)
    assert out
    # the output projection (gemm_bias_bf16) takes the call's result
    assert re.search(rf"tensor\.cast {out[1]} : tensor<80x128xbf16> to tensor<\?x\?xbf16>", program)


def test_gpt2_layer_rewritten_computes_the_same(tmp_path):
    """The rewritten layer (attention_qkv_bf16 and the GEMM and LayerNorm kernels given reference
    bodies) against the imported model, on the CPU: the tolerance of the plain attention test."""
    report, program = rewrite_model(MODELS / "gpt2_layer_bf16.torch.mlir", [K / "naive.toml", *GPT2_LAYER, K / "fixed_eps.toml"], allow_wider_accumulation=True)
    assert report.kernel_counts()[QKV] == 1
    _same_on_cpu(tmp_path, MODELS / "gpt2_layer_bf16.torch.mlir", "main", report, program, 3e-2, scale_from=2)


def test_gpt2_layer_refusals():
    """Strict numerics: both attention kernels refused for numerics (as plain attention is), the
    softmax replaced alone. An f32 model: dtype; head_dim 32: shape; the qkv form is tried first."""
    strict = compile_model(MODELS / "gpt2_layer_bf16.torch.mlir", GPT2_LAYER, dry_run=True)
    (ctx,) = [d for d in strict.left if d.candidate.order == 5]
    assert ctx.reasons == [("numerics", f"{QKV}: {STRICT}"), ("numerics", f"attention.attention_bf16: {STRICT}")]
    assert [d.capability.label for d in strict.replaced if d.candidate.kind == "softmax"] == ["library.softmax_warp_bf16"]
    assert QKV not in strict.kernel_counts()

    f32 = compile_model(MODELS / "gpt2_layer_f32.torch.mlir", GPT2_LAYER, dry_run=True, allow_wider_accumulation=True)
    (ctx,) = [d for d in f32.left if d.candidate.order == 5]
    assert ctx.reasons == [("dtype", f"{QKV}: takes bf16, bf16, the model has f32, f32"),
                           ("dtype", "attention.attention_bf16: takes bf16, bf16, bf16, bf16, the model has f32, f32, f32, f32")]

    hd32 = compile_model(MODELS / "gpt2_layer_hd32_bf16.torch.mlir", GPT2_LAYER, dry_run=True, allow_wider_accumulation=True)
    (ctx,) = [d for d in hd32.left if d.candidate.order == 5]
    assert ctx.reasons == [("shape", f"{QKV}: qkv dim must be 64, the model's is 32"), ("shape", "attention.attention_bf16: q dim must be 64, the model's is 32")]


# ----------------------------------------------------------------------------------------------
# Hand-written models (tests/models/attention_qkv_bf16.mlir): B = 2, S = 40, H = 2 heads of 64
# ----------------------------------------------------------------------------------------------

NOT_AS = {
    "separate": "q, k and v are not slices of one [B, S, 3E] tensor",
    "swapped": "q, k and v are not the slices at 0, E and 2E of the last dim of one [B, S, 3E] tensor",
    "context_used": "the result has other uses than its transpose back to [B, S, E]",
    "q_used": "the transposed q, k or v has other uses (the transposes would still be computed)",
}
FUNCTIONS = ["qkv", *NOT_AS]


def test_hand_written_models_report():
    """@qkv as attention_qkv (its result collapsed to [B, S, E]); each of the others as plain
    attention, with the reason attention_qkv did not apply."""
    r = compile_model(MODELS / "attention_qkv_bf16.mlir", [ATTENTION], dry_run=True, allow_wider_accumulation=True)
    assert not r.left and len(r.replaced) == len(FUNCTIONS)
    first, *rest = r.replaced
    assert (first.form.kind, first.capability.label, first.form.result_shape) == ("attention_qkv", QKV, (2, 40, 2, 64))
    assert first.notes == [QKV_NOTE, WIDE_NOTE, "with #1 batch_matmul and #2 softmax: one kernel call for the whole chain"]
    for d, function in zip(rest, NOT_AS):
        assert (d.form.kind, d.capability.label) == ("attention", "attention.attention_bf16"), function
        order = d.candidate.order
        assert d.notes == [WIDE_NOTE, f"not as attention_qkv: {QKV}: {NOT_AS[function]}",
                           f"with #{order - 2} batch_matmul and #{order - 1} softmax: one kernel call for the whole chain"], function
        assert f"      note: not as attention_qkv: {QKV}: {NOT_AS[function]}\n" in r.text()
    assert r.kernel_counts() == {"attention.attention_bf16": 4, QKV: 1}


def test_hand_written_models_strict_and_without_the_qkv_kernel(tmp_path):
    """Without --allow-wider-accumulation: the numerics refusal of both kernels (@qkv) or the
    structural reason and attention's numerics (@separate). A spec without attention_qkv_bf16:
    plain attention, and nothing about attention_qkv in the report."""
    strict = compile_model(MODELS / "attention_qkv_bf16.mlir", [ATTENTION], dry_run=True)
    assert not strict.replaced
    reasons = {d.candidate.order: d.reasons for d in strict.left if d.candidate.order in (3, 6)}
    assert reasons[3] == [("numerics", f"{QKV}: {STRICT}"), ("numerics", f"attention.attention_bf16: {STRICT}")]
    assert reasons[6] == [("layout", f"{QKV}: {NOT_AS['separate']}"), ("numerics", f"attention.attention_bf16: {STRICT}")]

    text = ATTENTION.read_text()
    head, sep, _ = text.partition('\n[[kernel]]\nname = "attention_qkv_bf16"')
    assert sep
    plain_spec = tmp_path / "attention.toml"
    plain_spec.write_text(head.replace('source = "attention.cu"', f'source = "{LIBRARY_DIR / "attention.cu"}"') + "\n")
    plain = compile_model(MODELS / "attention_qkv_bf16.mlir", [plain_spec], dry_run=True, allow_wider_accumulation=True)
    assert [d.form.kind for d in plain.replaced] == ["attention"] * len(FUNCTIONS)
    assert "attention_qkv_bf16 (" not in plain.text() and "not as attention_qkv" not in plain.text()


@pytest.mark.parametrize("function", FUNCTIONS)
def test_hand_written_models_rewritten_compute_the_same(tmp_path, function):
    report, program = rewrite_model(MODELS / "attention_qkv_bf16.mlir", [ATTENTION], allow_wider_accumulation=True)
    _same_on_cpu(tmp_path, MODELS / "attention_qkv_bf16.mlir", function, report, program, 3e-2)


def test_spec_shapes_must_say_attention_qkv(tmp_path):
    source = (LIBRARY_DIR / "attention.cu").resolve()
    spec = (f'[module]\nname = "t"\narchs = ["sm_80"]\n\n[[kernel]]\nname = "attention_qkv_bf16"\nsource = "{source}"\nblock = [128]\ngrid = ["B * H"]\n'
            'shapes = {{ qkv = ["B", "S", 3, "H", 64], mask = ["B", "S", "S"], out = {out} }}\nreplaces = {{ op = "attention_qkv" }}\n')
    path = tmp_path / "t.toml"
    path.write_text(spec.format(out='["B", "H", "S", 64]'))
    with pytest.raises(SpecError, match=re.escape("replaces 'attention_qkv', but the kernel's shapes") + ".*" + re.escape("the output must be ['B', 'S', 'H', '64']")):
        load_kernels([path])
    path.write_text(spec.format(out='["B", "S", "H", 64]'))
    (cap,) = load_kernels([path]).capabilities
    assert (cap.op, cap.accumulate) == ("attention_qkv", "f32")


@needs_build_tools
def test_compiled_gpt2_layer_dispatches_attention_qkv(tmp_path):
    """Built for CUDA: one dispatch of attention_qkv_bf16, and IREE computes no slice or transpose
    of q, k, v or of the result (with attention_bf16 it had three copies of the slices and four
    transposes: 2x40x2x64 and 2x40x128), nor the chain's batch matmuls and softmax. The one
    transpose left is the LM head's weight (64x128)."""

    compile_model(MODELS / "gpt2_layer_bf16.torch.mlir", GPT2_LAYER, tmp_path / "g.vmfb", emit_mlir=tmp_path / "g.linked.mlir", program=tmp_path / "g.program.mlir",
                  allow_wider_accumulation=True)
    program = (tmp_path / "g.program.mlir").read_text()
    assert program.count(f"func.call @{QKV}(") == 1
    dispatches = _flow_dispatches(tmp_path / "g.linked.mlir")
    assert sum("attention_qkv_bf16" in d for d in dispatches) == 1
    ours = ("attention_cu", "rows_cu", "gemm_cu")
    theirs = [d for d in dispatches if not any(o in d for o in ours)]
    assert not [d for d in theirs if re.search(r"transpose_\d+x\d+x|memcpy|batch_matmul|softmax|math\.exp", d)], theirs
    assert len([d for d in theirs if "transpose" in d]) == 1
