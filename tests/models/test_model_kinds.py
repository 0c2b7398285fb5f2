"""The op kind registry (iree_dispatch/models/kinds/): every kind listed once, each family's
matcher on small IR, typed frozen match results, and a new kind added through the registry alone
(its matcher finds it, a spec declares it, the selection and the rewrite call its kernel)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("iree.compiler")

from iree.compiler import ir  # noqa: E402

from iree_dispatch.core.errors import SpecError  # noqa: E402
from iree_dispatch.models import rewrite  # noqa: E402
from iree_dispatch.models.capability import load_kernels  # noqa: E402
from iree_dispatch.models.compiler import to_input_level  # noqa: E402
from iree_dispatch.models.ir_match import as_generic, location, shape_text, tensor_info  # noqa: E402
from iree_dispatch.models.kinds import REGISTRY, Candidate, Family, Form, Matcher, OpKind, Splat, find_candidates  # noqa: E402
from iree_dispatch.models.kinds.base import operand  # noqa: E402
from iree_dispatch.models.select import decide  # noqa: E402

MODELS = Path(__file__).parent
ALL_KINDS = ("matmul", "matmul+bias", "matmul+bias+residual", "matmul+bias+gelu", "matmul+bias+gelu_erf", "matmul_nt+bias", "matmul_nt+bias+residual",
             "matmul_nt+bias+gelu", "matmul_nt+bias+gelu_erf", "matmul_nt+extf", "matmul_nt", "batch_matmul",
             "softmax", "layernorm", "rmsnorm", "attention", "attention_qkv", "sdpa", "sdpa_causal", "sdpa_mask", "sdpa_qkv", "sdpa_qkv_causal", "sdpa_qkv_mask",
             "sdpa_bshd", "sdpa_bshd_causal", "sdpa_bshd_mask", "swiglu")

MATMUL_BIAS = """
func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %bias: tensor<16xf32>, %init: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %c = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%f : tensor<4x16xf32>) -> tensor<4x16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]} ins(%c, %bias : tensor<4x16xf32>, tensor<16xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  %acc = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%init : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %r, %acc : tensor<4x16xf32>, tensor<4x16xf32>
}
"""

SOFTMAXES = """
func.func @f(%x: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %e = tensor.empty() : tensor<4x16xf32>
  %rows = linalg.softmax dimension(1) ins(%x : tensor<4x16xf32>) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %cols = linalg.softmax dimension(0) ins(%x : tensor<4x16xf32>) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %rows, %cols : tensor<4x16xf32>, tensor<4x16xf32>
}
"""

NEGATE_IR = """
func.func @f(%x: tensor<16xf32>) -> tensor<16xf32> {
  %e = tensor.empty() : tensor<16xf32>
  %n = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
       ins(%x : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %y = arith.negf %a : f32
    linalg.yield %y : f32
  } -> tensor<16xf32>
  return %n : tensor<16xf32>
}
"""


def _candidates(text: str, registry=REGISTRY) -> list[Candidate]:
    with ir.Context():
        return find_candidates(ir.Module.parse(text), registry)


def _model_candidates(path: Path) -> list[tuple[str, tuple[str, ...], tuple[str, str] | None, list[Form]]]:
    """(kind, form kinds, refusal, forms) per candidate of a model file brought to IREE's input level."""
    with tempfile.TemporaryDirectory() as tmp:
        input_ir = Path(tmp) / "input.mlir"
        to_input_level(path, input_ir)
        with ir.Context():
            found = find_candidates(ir.Module.parse(input_ir.read_text()))
            return [(c.kind, tuple(f.kind for f in c.forms), c.refusal, list(c.forms)) for c in found]


def test_registry_lists_every_kind_once_in_order():
    assert REGISTRY.names == ALL_KINDS
    assert all(name in REGISTRY and REGISTRY.kind(name).name == name for name in ALL_KINDS)
    with pytest.raises(KeyError):
        REGISTRY.kind("conv")
    with_eps = [k.name for k in REGISTRY if k.epsilon]
    assert with_eps == ["layernorm", "rmsnorm"]
    assert [k.name for k in REGISTRY if k.fused] == ["matmul+bias", "matmul+bias+residual", "matmul+bias+gelu", "matmul+bias+gelu_erf", "matmul_nt+bias",
                                                       "matmul_nt+bias+residual", "matmul_nt+bias+gelu", "matmul_nt+bias+gelu_erf", "matmul_nt+extf", "matmul_nt",
                                                       "attention", "attention_qkv",
                                                       "sdpa_qkv", "sdpa_qkv_causal", "sdpa_qkv_mask", "sdpa_bshd", "sdpa_bshd_causal", "sdpa_bshd_mask"]


def test_matmul_matcher_forms_and_refusal():
    found = _candidates(MATMUL_BIAS)
    assert [c.kind for c in found] == ["matmul", "matmul"]
    assert [c.order for c in found] == [1, 2]
    biased, accumulating = found
    assert [f.kind for f in biased.forms] == ["matmul+bias", "matmul"]
    assert biased.refusal is None
    assert [o.shape for o in biased.forms[0].operands] == [(4, 8), (8, 16), (16,)]
    assert biased.description == "4x8 @ 8x16 f32 x f32 -> 4x16 f32"
    assert accumulating.forms == ()
    assert accumulating.refusal == ("init", "accumulates into an existing tensor (its init is not a zero fill); kernels write a fresh result")


def test_match_results_are_frozen():
    cand = _candidates(MATMUL_BIAS)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cand.order = 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        cand.forms[0].result_dtype = "bf16"
    with pytest.raises(dataclasses.FrozenInstanceError):
        REGISTRY.kind("matmul").pads = False
    assert isinstance(cand.forms, tuple) and isinstance(cand.forms[0].operands, tuple)


def test_softmax_matcher():
    rows, cols = _candidates(SOFTMAXES)
    assert (rows.kind, [f.kind for f in rows.forms], rows.refusal) == ("softmax", ["softmax"], None)
    assert rows.forms[0].operands[0].shape == (4, 16) and rows.forms[0].compute == "f32"
    assert cols.refusal == ("layout", "softmax over dim 0, not the last (1); kernels normalize contiguous rows")


def test_norm_matchers():
    found = _model_candidates(MODELS / "norms_f32.torch.mlir")
    assert [c[0] for c in found] == ["rmsnorm", "layernorm", "layernorm"]
    rms = found[0][3][-1]
    assert rms.kind == "rmsnorm" and len(rms.operands) == 2 and abs(rms.eps - 1e-6) < 1e-12
    bare = found[1][3][-1]  # LayerNorm without weight and bias: ones and zeros for the kernel
    assert [o.value for o in bare.operands[1:]] == [Splat(1.0), Splat(0.0)]
    assert bare.notes == ("the model has no weight: the kernel gets ones", "the model has no bias: the kernel gets zeros")


def test_attention_fusion_on_batch_matmul_candidates():
    found = _model_candidates(MODELS / "attention_qkv_bf16.mlir")  # five functions: @qkv first, then layouts qkv refuses
    assert [c[0] for c in found[:3]] == ["batch_matmul", "softmax", "batch_matmul"]
    scores, _, context = found[:3]
    assert scores[1] == ("batch_matmul",)  # the scores' batch matmul has no attention around it
    assert context[1] == ("attention_qkv", "attention", "batch_matmul")  # fusions before the plain op
    qkv, att = context[3][0], context[3][1]
    assert qkv.refusal is None and len(qkv.operands) == 2 and qkv.operands[0].shape == (2, 40, 3, 2, 64) and qkv.result_shape == (2, 40, 2, 64)
    assert len(att.operands) == 4 and att.scale == 0.125 and att.covers == (scores[3][0].result, found[1][3][-1].result)
    separate = found[5]
    assert separate[1] == ("attention_qkv", "attention", "batch_matmul")
    assert separate[3][0].refusal == ("layout", "q, k and v are not slices of one [B, S, 3E] tensor") and separate[3][1].refusal is None
    # Eager attention without a mask is no attention form: the batch matmuls stay plain.
    plain = _model_candidates(MODELS / "attention_f32.mlir")
    assert all("attention" not in c[1] and "attention_qkv" not in c[1] for c in plain)


# ---- a kind added through the registry alone ----

NEGATE = OpKind("negate", (1,), 1, lambda ins: (ins[0], []))


def _match_negate(op: ir.Operation) -> Candidate | None:
    g = as_generic(op)
    if g is None or g.exprs != (("negf", ("in", 0)),) or not g.parallel:
        return None
    x = g.inputs[0]
    info = tensor_info(x)
    form = Form(NEGATE, (operand(x, info),), op.results[0], info[0], info[1], info[1], op, result_dims=((0, 0),))
    return Candidate("negate", f"{shape_text(info[0])} {info[1]}", location(op), op.results[0], (form,))


TOY = Family(kinds=(NEGATE,), matchers=(Matcher(frozenset({"linalg.generic"}), _match_negate),))

TOY_SPEC = """
[module]
name = "toy"
archs = ["sm_80"]

[[kernel]]
name = "neg_f32"
source = "neg.cu"
block = [64]
grid = ["ceildiv(n, 64)"]
shapes = { x = ["n"], y = ["n"] }
replaces = { op = "negate" }
"""
TOY_SOURCE = 'extern "C" __global__ void neg_f32(const float* __restrict__ x, float* __restrict__ y, int n) {\n' \
             "  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = -x[i];\n}\n"


def test_new_kind_through_the_registry(tmp_path):
    registry = REGISTRY.register(TOY)
    assert registry.names == (*ALL_KINDS, "negate") and REGISTRY.names == ALL_KINDS
    with pytest.raises(ValueError, match="op kind negate is registered already"):
        registry.register(TOY)
    (tmp_path / "neg.cu").write_text(TOY_SOURCE)
    spec = tmp_path / "toy.toml"
    spec.write_text(TOY_SPEC)
    with pytest.raises(SpecError, match=r"replaces.op must be one of 'matmul', .*'swiglu', got 'negate'"):
        load_kernels([spec])
    kernels = load_kernels([spec], registry)
    assert [c.op for c in kernels.capabilities] == ["negate"]
    assert _candidates(NEGATE_IR) == []  # not a kind of the default registry
    with ir.Context():
        module = ir.Module.parse(NEGATE_IR)
        found = find_candidates(module, registry)
        assert [(c.kind, c.description) for c in found] == [("negate", "16 f32")]
        decisions = decide(found, kernels)
        assert decisions[0].replaced and decisions[0].capability.label == "toy.neg_f32"
        rewrite.declare(module, decisions)
        rewrite.apply(decisions[0], {})
        module.operation.verify()
        text = module.operation.get_asm(enable_debug_info=False)
    assert "call @toy.neg_f32(" in text and "func.func private @toy.neg_f32(tensor<?xf32>) -> tensor<?xf32>" in text


def test_new_kind_refused_by_its_own_rules(tmp_path):
    """A spec whose kernel's shapes don't say the kind is refused with the kind's declared shapes."""
    registry = REGISTRY.register(TOY)
    (tmp_path / "neg.cu").write_text(TOY_SOURCE.replace("float* __restrict__ y, int n", "float* __restrict__ y, int n, int m"))
    spec = tmp_path / "toy.toml"
    spec.write_text(TOY_SPEC.replace('y = ["n"]', 'y = ["m"]'))
    with pytest.raises(SpecError, match=r"replaces 'negate', but the kernel's shapes \(x \['n'\]; y \['m'\]\) don't say it: the output must be \['n'\]"):
        load_kernels([spec], registry)
