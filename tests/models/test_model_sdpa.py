"""Op kinds sdpa, sdpa_causal, sdpa_mask: torch's scaled_dot_product_attention as IREE imports it
(one iree_linalg_ext.attention op) replaced by flash_attention.toml's kernels. Exports of small
SDPA modules, a GPT-2 and a Llama (grouped-query attention) layer (tests/support/sdpa_exports.py):
which kernel each attention takes, the report's lines for those replaced and those left, the
rewritten model against the original on the CPU (the kernels given reference bodies in plain
linalg), and that the rewritten model compiles for CUDA."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree_dispatch.models import compile_model, load_kernels  # noqa: E402
from iree_dispatch.models.compiler import rewrite_model  # noqa: E402

from ..support.environment import ROOT, needs_build_tools  # noqa: E402
from ..support.model_references import _compile_cpu, _random_args, _run, with_reference_kernels  # noqa: E402

MODELS = Path(__file__).parent
FLASH = ROOT / "kernels" / "flash_attention.toml"
SDPA_BF16, SDPA_F32 = MODELS / "sdpa_bf16.torch.mlir", MODELS / "sdpa_f32.torch.mlir"
GPT2, LLAMA = MODELS / "gpt2_sdpa_bf16.torch.mlir", MODELS / "llama_sdpa_bf16.torch.mlir"
CAUSAL_NOTE = "the mask is the causal triangle (0 where key j <= query i, -inf or at most half the lowest value elsewhere): the kernel's causal masking, the mask not read"
GQA_NOTE = "k and v repeat 2 heads 2 times each (grouped-query attention): the kernel reads them as stored (the repeat is not computed)"
BROADCAST_NOTE = "the mask is read as 1x1x16x16, broadcast over its dims of size 1"
QKV_NOTE = "q, k and v are read from the qkv projection's [B, S, 3E] result and the result is written in [B, S, E] layout (the slices and transposes are not computed)"


def _by_line(report) -> dict[int, object]:
    """Each decision by the line of the model that defines its op."""
    return {int(d.candidate.location.rsplit(":", 1)[1]): d for d in report.decisions}


def _function_lines(model: Path) -> dict[str, int]:
    """Each function's attention op, by the function's name: the line torch's SDPA is on."""
    lines, found, name = model.read_text().splitlines(), {}, None
    for i, line in enumerate(lines, start=1):
        if "func.func @" in line:
            name = line.split("@", 1)[1].split("(", 1)[0]
        if "torch.aten.scaled_dot_product_attention" in line and name not in found:
            found[name] = i
    return found


def test_sdpa_kernels_taken():
    """Each function of the SDPA export: which kernel, as which op kind, with which notes."""
    report = compile_model(SDPA_BF16, [FLASH], dry_run=True)
    at = _function_lines(SDPA_BF16)
    by_line = _by_line(report)
    taken = {name: (by_line[line].capability.label.split(".")[1] if by_line[line].replaced else None) for name, line in at.items()}
    assert taken == {
        "plain": "flash_attn_bf16_d64", "causal": "flash_attn_bf16_d64_causal", "masked": "flash_attn_bf16_d64_mask",
        "masked_full": "flash_attn_bf16_d64_mask", "scaled": "flash_attn_bf16_d64", "gqa": "flash_attn_bf16_d64_causal",
        "transposed": "flash_attn_bf16_d64_causal", "head_dim_32": None, "head_dim_128": "flash_attn_bf16_d128", "f16": "flash_attn_f16_d64_causal",
    }
    d = {name: by_line[line] for name, line in at.items()}
    assert d["causal"].notes == [CAUSAL_NOTE] and d["causal"].form.kind == "sdpa_causal"
    assert d["gqa"].notes == [GQA_NOTE, CAUSAL_NOTE]
    assert [o.shape for o in d["gqa"].form.operands] == [(1, 4, 16, 64), (1, 2, 16, 64), (1, 2, 16, 64)]
    assert d["masked"].notes == [BROADCAST_NOTE] and d["masked"].form.operands[3].shape == (1, 1, 16, 16)
    assert d["masked_full"].notes == [] and d["masked_full"].form.operands[3].shape == (1, 4, 16, 16)
    assert d["plain"].form.scale == 0.125 and d["scaled"].form.scale == 0.30078125  # SDPA's scale=0.3, as the model holds it (bf16)
    assert report.counts() == {"sdpa": {"found": 10, "replaced": 9, "left": 1}}
    text = report.text()
    assert f"  #1 sdpa q 4x16x64, k 4x16x64, v 4x16x64 bf16 -> 4x16x64 bf16 at sdpa_bf16.torch.mlir:{at['plain']} -> flash_attention.flash_attn_bf16_d64\n" in text
    assert f" -> flash_attention.flash_attn_bf16_d64_causal (as sdpa_causal)\n      note: {CAUSAL_NOTE}\n" in text
    assert "  sdpa: 10 found, 9 replaced, 1 left to IREE\n" in text


def test_sdpa_refusals():
    """Head dim 32: shape, for every kernel of its type; an f32 model: dtype; no kernel: kernel."""
    report = compile_model(SDPA_BF16, [FLASH], dry_run=True)
    (left,) = report.left
    assert left.candidate.location.endswith(f":{_function_lines(SDPA_BF16)['head_dim_32']}")
    assert ("shape", "flash_attention.flash_attn_bf16_d64_causal: q dim must be 64, the model's is 32") in left.reasons
    assert ("shape", "flash_attention.flash_attn_bf16_d128_mask: q dim must be 128, the model's is 32") in left.reasons
    assert ("dtype", "flash_attention.flash_attn_f16_d64_causal: takes f16, f16, f16, the model has bf16, bf16, bf16") in left.reasons
    f32 = compile_model(SDPA_F32, [FLASH], dry_run=True)
    assert f32.counts() == {"sdpa": {"found": 2, "replaced": 0, "left": 2}}
    assert {c for d in f32.left for c, _ in d.reasons} == {"dtype"}
    assert ("dtype", "flash_attention.flash_attn_bf16_d64: takes bf16, bf16, bf16, the model has f32, f32, f32") in f32.left[0].reasons
    # With specs that declare no sdpa kind, every SDPA op is still in the report, with its reason.
    none = compile_model(SDPA_BF16, [MODELS / "kernels" / "naive.toml"], dry_run=True)
    assert none.counts() == {"sdpa": {"found": 10, "replaced": 0, "left": 10}}
    assert none.left[0].reasons == [("kernel", "no kernel declares 'sdpa'")]
    assert none.left[1].reasons == [("kernel", "no kernel declares 'sdpa_causal' or 'sdpa_mask'")]


LAYOUT_MODEL = """
func.func @main(%q: tensor<4x16x64xbf16>, %kt: tensor<4x64x16xbf16>, %v: tensor<4x16x64xbf16>) -> tensor<4x16x64xbf16> {
  %scale = arith.constant 0.125 : f32
  %e = tensor.empty() : tensor<4x16x64xbf16>
  %r = iree_linalg_ext.attention <indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>,
      affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d2)>, affine_map<(d0, d1, d2, d3, d4) -> ()>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>]>
      ins(%q, %kt, %v, %scale : tensor<4x16x64xbf16>, tensor<4x64x16xbf16>, tensor<4x16x64xbf16>, f32) outs(%e : tensor<4x16x64xbf16>) {
    ^bb0(%s: f32):
      iree_linalg_ext.yield %s : f32
  } -> tensor<4x16x64xbf16>
  return %r : tensor<4x16x64xbf16>
}
"""


def test_sdpa_layout_refused(tmp_path):
    """An attention op that reads k as [Z, D, Sk] (its map (b, k1, k2)): layout, named."""
    model = tmp_path / "kt.mlir"
    model.write_text(LAYOUT_MODEL)
    report = compile_model(model, [FLASH], dry_run=True)
    (d,) = report.left
    assert d.reasons == [("layout", "the op reads k as (b, k1, k2), over (batch, m, n, k1, k2); the kernels take [B, H, Sk, D] as stored, (b, k2, k1)")]


def test_transformers_exports():
    """GPT-2 (q, k and v sliced from its qkv projection: the qkv mask kernel; its [1, 1, 16, 16]
    mask an input, read unbroadcast) and a Llama with 4 query heads over 2 key/value heads (the
    repeat folded into the kernel's indexing; q and k rotated after their transposes: no qkv
    layout, no note of it)."""
    gpt2 = compile_model(GPT2, [FLASH], dry_run=True)
    (d,) = gpt2.replaced
    assert (d.capability.label, d.notes) == ("flash_attention.flash_attn_qkv_bf16_d64_mask", [QKV_NOTE, BROADCAST_NOTE])
    assert [o.shape for o in d.form.operands] == [(1, 16, 3, 2, 64), (1, 1, 16, 16)] and d.form.result_shape == (1, 16, 2, 64)
    assert gpt2.counts()["sdpa"] == {"found": 1, "replaced": 1, "left": 0}
    llama = compile_model(LLAMA, [FLASH], dry_run=True)
    (d,) = llama.replaced
    assert (d.capability.label, d.notes) == ("flash_attention.flash_attn_bf16_d64_mask", [GQA_NOTE, BROADCAST_NOTE])
    assert [o.shape for o in d.form.operands] == [(1, 4, 16, 64), (1, 2, 16, 64), (1, 2, 16, 64), (1, 1, 16, 16)]


def _same_on_cpu(tmp_path, model: Path, functions: list[str], tol: float, scale_from: int | None = None) -> None:
    report, program = rewrite_model(model, [FLASH])
    original = model.read_text()
    expected_vmfb = _compile_cpu(original, tmp_path / "original.vmfb")
    got_vmfb = _compile_cpu(with_reference_kernels(program, report), tmp_path / "rewritten.vmfb")
    for function in functions:
        args = _random_args(original, function, np.random.default_rng(0))
        if scale_from is not None:  # a layer's parameters at a trained model's scale
            args = args[:scale_from] + [(a.astype(np.float32) * 0.1).astype(a.dtype) for a in args[scale_from:]]
        if model in (GPT2, LLAMA):  # the explicit additive causal mask, as transformers builds it
            causal = np.tril(np.ones(args[1].shape[-2:], bool))
            args[1] = np.where(causal, 0.0, -3.3895e38).astype(np.float32).astype(args[1].dtype)[None, None]
        expected, got = _run(expected_vmfb, function, args), _run(got_vmfb, function, args)
        for e, g in zip(expected, got):
            e, g = np.asarray(e, np.float32), np.asarray(g, np.float32)
            assert e.shape == g.shape
            assert np.max(np.abs(e - g)) <= tol * max(1.0, float(np.max(np.abs(e)))), function


def test_sdpa_rewritten_computes_the_same(tmp_path):
    """Every replaced SDPA of the export, the rewritten model against IREE's own attention op on
    the CPU (bf16 and f16 results: one rounding each, about an ulp apart)."""
    functions = ["plain", "causal", "masked", "masked_full", "scaled", "gqa", "transposed", "head_dim_128", "f16"]
    _same_on_cpu(tmp_path, SDPA_BF16, functions, 1e-2)


@pytest.mark.parametrize("model", [GPT2, LLAMA], ids=["gpt2", "llama"])
def test_transformers_rewritten_computes_the_same(tmp_path, model):
    _same_on_cpu(tmp_path, model, ["main"], 3e-2, scale_from=2)


def test_flash_attention_spec_declares_the_kinds():
    kernels = load_kernels([FLASH])
    assert {(c.kernel.function, c.op) for c in kernels.capabilities} >= {
        ("flash_attn_bf16_d64", "sdpa"), ("flash_attn_bf16_d64_causal", "sdpa_causal"), ("flash_attn_f16_d128_mask", "sdpa_mask")}


@needs_build_tools
def test_sdpa_model_compiles(tmp_path):
    """The rewritten SDPA export compiles for CUDA with the kernels linked in."""
    report = compile_model(SDPA_BF16, [FLASH], tmp_path / "sdpa.vmfb")
    assert (tmp_path / "sdpa.vmfb").stat().st_size > 0 and len(report.replaced) == 9


def test_a_kernel_whose_requires_the_model_breaks_is_not_taken(tmp_path):
    """The causal kernel, its spec made to require Hq == Hkv (no grouped-query attention), is not
    given the GQA function's attention (Hq = 4, Hkv = 2, static sizes), with the relation and the
    sizes as the reason; the mask kernel (still Hq % Hkv == 0) takes it instead."""
    causal = 'replaces = { op = "sdpa_causal"'
    spec = FLASH.read_text().replace(f'requires = ["Hq % Hkv == 0"]\n{causal}', f'requires = ["Hq == Hkv"]\n{causal}')
    (tmp_path / "mha.toml").write_text(spec.replace('source = "flash_attention.cu"', f'source = "{FLASH.parent / "flash_attention.cu"}"'))
    d = _by_line(compile_model(SDPA_BF16, [tmp_path / "mha.toml"], dry_run=True))[_function_lines(SDPA_BF16)["gqa"]]
    assert d.replaced and d.capability.label == "flash_attention.flash_attn_bf16_d64_mask"
    from iree_dispatch.models.capability import load_kernels
    from iree_dispatch.models.select import _fits_shapes

    (cap,) = [c for c in load_kernels([tmp_path / "mha.toml"]).capabilities if c.label == "flash_attention.flash_attn_bf16_d64_causal"]
    gqa_form = next(f for f in d.candidate.forms if f.kind == "sdpa_causal" and f.operands[1].shape == (1, 2, 16, 64))
    assert _fits_shapes(gqa_form, cap, None, [], {})[0] == ("shape", "requires Hq == Hkv, the model's Hq = 4, Hkv = 2")
