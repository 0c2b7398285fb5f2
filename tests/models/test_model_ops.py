"""The ops of Llama, BERT and GPT-2 models that kinds beyond matmul, softmax and attention account
for, on small torch exports (tests/models/ops_<name>_<dtype>.torch.mlir, written by
`python -m tests.support.op_exports tests/models`): RMSNorm as Llama writes it, SwiGLU, a Linear
with the exact (erf) GELU, and RoPE and residual adds, which no kind covers and the report lists."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.compiler")

from iree.compiler import ir  # noqa: E402

from iree_dispatch.models.compiler import compile_model, report_json, rewrite_model, to_input_level  # noqa: E402
from iree_dispatch.models.ir_match import truncf_source  # noqa: E402
from iree_dispatch.models.kinds import Candidate, Splat, find_candidates, find_unkinded  # noqa: E402

from ..support.model_references import _compile_cpu, _random_args, _run, with_reference_kernels  # noqa: E402
from ..support.references import load_references  # noqa: E402

MODELS = Path(__file__).parent
ROOT = MODELS.parents[1]
K = ROOT / "kernels"  # the kernel library
MODEL_OPS = ROOT / "kernels" / "model_ops.toml"


@contextmanager
def _found(name: str) -> Iterator[tuple[list[Candidate], list]]:
    """The model's candidates and the ops no kind covers, while its IR lives (their values point into it)."""
    with tempfile.TemporaryDirectory() as tmp:
        input_ir = Path(tmp) / "input.mlir"
        to_input_level(MODELS / name, input_ir)
        with ir.Context():
            module = ir.Module.parse(input_ir.read_text())
            candidates = find_candidates(module)
            yield candidates, find_unkinded(module, candidates)


def _dry(name: str, kernels, wide: bool = False):
    return compile_model(MODELS / name, kernels, dry_run=True, allow_wider_accumulation=wide)


# ---- RMSNorm as Llama writes it ----

def test_llama_rmsnorm_f32_is_one_candidate_with_its_weight():
    with _found("ops_rmsnorm_f32.torch.mlir") as ((cand,), unkinded):
        assert cand.kind == "rmsnorm" and cand.refusal is None and unkinded == []
        assert cand.description == "2x8x32 f32 over dim 2, eps 1e-06"  # x.pow(2) (math.fpowi), mean as sum / 32, eps from an f64 constant
        (form,) = cand.forms
        assert [(o.shape, o.dtype) for o in form.operands] == [((16, 32), "f32"), ((32,), "f32")]
        assert not isinstance(form.operands[1].value, Splat) and form.compute == "f32"
        assert form.eps == np.float32(1e-6)  # the f64 constant truncated to f32, where the model adds it


def test_llama_rmsnorm_f32_replaced_in_the_strict_build():
    r = _dry("ops_rmsnorm_f32.torch.mlir", [K / "library.toml"])
    (d,) = r.replaced
    assert d.capability.label == "library.rmsnorm_f32" and d.notes == [] and r.left == []


def test_llama_rmsnorm_bf16_forms():
    with _found("ops_rmsnorm_bf16.torch.mlir") as ((cand,), _):
        assert cand.description == "2x8x32 bf16, computed in f32 over dim 2, eps 1e-06, rounded to bf16 before the weight multiply"
        whole, rounded, wide = cand.forms
        # x and the weight to the weight multiply's result: the model computes in bf16 from its rounding on
        assert [(o.dtype, isinstance(o.value, Splat)) for o in whole.operands] == [("bf16", False), ("bf16", False)]
        assert (whole.compute, whole.eps_type, whole.result_dtype) == ("bf16", "f32", "bf16")
        assert whole.steps == "rounds to bf16 after the normalization and multiplies by the weight in bf16"
        # the normalization alone, up to the model's rounding (exact with ones), and the same in f32
        assert [o.value for o in rounded.operands[1:]] == [Splat(1.0)] and (rounded.compute, rounded.result_dtype) == ("f32", "bf16")
        assert [o.dtype for o in wide.operands] == ["f32", "f32"] and wide.result_dtype == "f32"


def test_llama_rmsnorm_bf16_strict_takes_the_normalization_wide_takes_the_weight():
    strict = _dry("ops_rmsnorm_bf16.torch.mlir", [K / "library.toml"])
    (d,) = strict.replaced
    assert d.capability.label == "library.rmsnorm_warp_bf16" and isinstance(d.form.operands[1].value, Splat)
    assert d.notes == ["the model multiplies by its weight after rounding to bf16: that multiply is left to IREE, the kernel gets ones"]
    wide = _dry("ops_rmsnorm_bf16.torch.mlir", [K / "library.toml"], wide=True)
    (d,) = wide.replaced
    assert d.capability.label == "library.rmsnorm_warp_bf16" and not isinstance(d.form.operands[1].value, Splat)
    assert d.notes == ["computes in f32 and rounds once, where the model rounds to bf16 after the normalization and multiplies by the weight in bf16 "
                       "(--allow-wider-accumulation)"]


@pytest.mark.parametrize("model, wide, tol", [("ops_rmsnorm_f32.torch.mlir", False, 1e-5), ("ops_rmsnorm_bf16.torch.mlir", False, 1e-2),
                                              ("ops_rmsnorm_bf16.torch.mlir", True, 2e-2)])
def test_rewritten_llama_rmsnorm_computes_the_same(tmp_path, model, wide, tol):
    """The rewritten model (the kernel as a reference body, f32 math) against the original, on IREE's CPU."""
    report, program = rewrite_model(MODELS / model, [K / "library.toml"], allow_wider_accumulation=wide)
    assert len(report.replaced) == 1
    _assert_rewritten_computes_the_same(tmp_path, model, report, program, tol, results=1)


def _assert_rewritten_computes_the_same(tmp_path, model: str, report, program: str, tol: float, results: int) -> None:
    """The export `model` and its rewritten `program` (the kernels given reference bodies) compiled
    for IREE's CPU and run on the same fresh random inputs: each of the `results` [2, 8, 32] results
    the same within `tol` of its largest value."""
    original = (MODELS / model).read_text()
    if "bf16" in model:
        pytest.importorskip("ml_dtypes")
    expected_vmfb = _compile_cpu(original, tmp_path / "original.vmfb")
    got_vmfb = _compile_cpu(with_reference_kernels(program, report), tmp_path / "rewritten.vmfb")
    args = _random_args(original, "main", np.random.default_rng())
    expected, got = _run(expected_vmfb, "main", args), _run(got_vmfb, "main", args)
    assert len(expected) == len(got) == results
    for e, g in zip(expected, got):
        e, g = np.asarray(e, np.float32), np.asarray(g, np.float32)
        assert e.shape == g.shape == (2, 8, 32) and np.max(np.abs(e - g)) <= tol * max(1.0, float(np.max(np.abs(e))))


# ---- SwiGLU ----

@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_swiglu_candidates(dtype):
    with _found(f"ops_swiglu_{dtype}.torch.mlir") as (found, _):
        swiglus = [c for c in found if c.kind == "swiglu"]
        assert [c.description for c in swiglus] == [f"silu(gate) * up 2x8x32 {dtype}, gate and up two tensors",
                                                    f"silu(gate) * up 2x8x32 {dtype}, gate and up two slices of one tensor"]
        for c in swiglus:
            (form,) = c.forms
            assert [(o.shape, o.dtype) for o in form.operands] == [((16, 32), dtype)] * 2 and form.result_shape == (16, 32)
            assert form.compute == dtype
        separate, fused = (c.forms[0] for c in swiglus)
        # operands in the kernel's order: the gate (silu's input: the first projection, #1), then up (#2)
        gate_proj, up_proj = found[0].root, found[1].root
        assert [truncf_source(o.value) for o in separate.operands] == [gate_proj, up_proj]
        # the fused projection's halves: gate the first (offset 0), up the second (offset 32)
        slices = [o.value.owner for o in fused.operands]
        assert [s.name for s in slices] == ["tensor.extract_slice"] * 2
        assert [list(ir.DenseI64ArrayAttr(s.attributes["static_offsets"])) for s in slices] == [[0, 0, 0], [0, 0, 32]]


@pytest.mark.parametrize("model, wide, tol", [("ops_swiglu_f32.torch.mlir", False, 1e-5), ("ops_swiglu_bf16.torch.mlir", True, 2e-2)])
def test_rewritten_swiglu_computes_the_same(tmp_path, model, wide, tol):
    """Both SwiGLUs (gate and up as two tensors, and as two halves of one projection) replaced, the
    kernels as reference bodies (silu(gate) * up in f32, rounded once), against the original on
    IREE's CPU: a gate and up taken the wrong way round, or the wrong halves, fail."""
    report, program = rewrite_model(MODELS / model, [MODEL_OPS], allow_wider_accumulation=wide)
    assert [d.candidate.kind for d in report.replaced].count("swiglu") == 2
    _assert_rewritten_computes_the_same(tmp_path, model, report, program, tol, results=2)  # one result per SwiGLU


def test_swiglu_f32_replaced_strictly_bf16_needs_wider():
    (a, b) = (d for d in _dry("ops_swiglu_f32.torch.mlir", [MODEL_OPS]).replaced if d.candidate.kind == "swiglu")
    assert a.capability.label == b.capability.label == "model_ops.swiglu_f32" and a.notes == []
    strict = _dry("ops_swiglu_bf16.torch.mlir", [MODEL_OPS])
    left = [d for d in strict.left if d.candidate.kind == "swiglu"]
    assert len(left) == 2 and left[0].reasons == [
        ("dtype", "model_ops.swiglu_f32: takes f32, f32, the model has bf16, bf16"),
        ("numerics", "model_ops.swiglu_bf16: computes in f32, the model in bf16; the model rounds to bf16 after each step of the sigmoid, after the SiLU "
                     "and after the product (--allow-wider-accumulation accepts a wider one)"),
    ]
    wide = [d for d in _dry("ops_swiglu_bf16.torch.mlir", [MODEL_OPS], wide=True).replaced if d.candidate.kind == "swiglu"]
    assert [d.capability.label for d in wide] == ["model_ops.swiglu_bf16"] * 2
    assert wide[0].notes == ["computes in f32 and rounds once, where the model rounds to bf16 after each step of the sigmoid, after the SiLU and after "
                             "the product (--allow-wider-accumulation)"]


def test_swiglu_rewrite_calls_the_kernel_on_gate_then_up():
    report, program = rewrite_model(MODELS / "ops_swiglu_f32.torch.mlir", [MODEL_OPS])
    assert [d.capability.label for d in report.replaced] == ["model_ops.swiglu_f32"] * 2
    assert program.count("call @model_ops.swiglu_f32(") == 2
    assert "func.func private @model_ops.swiglu_f32(tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>" in program


# ---- matmul + bias + GELU (erf) ----

def test_linear_gelu_erf_forms():
    with _found("ops_gelu_erf_bf16.torch.mlir") as ((cand,), _):
        assert [f.kind for f in cand.forms] == ["matmul_nt+bias+gelu_erf", "matmul+bias+gelu_erf", "matmul_nt+bias", "matmul+bias", "matmul_nt", "matmul",
                                                "batch_matmul"]
        as_stored, gelu = cand.forms[:2]
        assert gelu.steps == "rounds to bf16 after the matmul, after the bias add and after each GELU step" and gelu.result_dtype == "bf16"
        # The Linear's weight [N, K] as stored in place of its transpose; the rest as the plain-layout form.
        assert as_stored.operands[1].shape == gelu.operands[1].shape[::-1] and as_stored.operands[1].value != gelu.operands[1].value
        assert (as_stored.operands[0], as_stored.operands[2:], as_stored.result, as_stored.steps) == (gelu.operands[0], gelu.operands[2:], gelu.result, gelu.steps)
        assert as_stored.notes[-1] == "its rhs is a transposed [N, K] matrix, read as it is stored (the transpose is not computed)"
    with _found("ops_gelu_erf_f32.torch.mlir") as ((cand32,), _):
        assert [f.kind for f in cand32.forms[:2]] == ["matmul_nt+bias+gelu_erf", "matmul+bias+gelu_erf"]
        assert all(f.steps == "" and f.compute == "f32" for f in cand32.forms[:2])


def test_linear_gelu_erf_bf16_fused_with_wider_accumulation():
    kernels = [K / "gemm.toml", MODEL_OPS]
    (d,) = _dry("ops_gelu_erf_bf16.torch.mlir", kernels).replaced
    assert d.capability.label == "gemm.gemm_bf16"
    assert ("not as matmul+bias+gelu_erf: model_ops.gemm_bias_gelu_erf_bf16: accumulates in f32, the model in bf16; the model rounds to bf16 after the "
            "matmul, after the bias add and after each GELU step (--allow-wider-accumulation accepts a wider one)") in d.notes
    wide = _dry("ops_gelu_erf_bf16.torch.mlir", kernels, wide=True)
    (d,) = wide.replaced
    assert (d.capability.label, d.form.kind) == ("model_ops.gemm_bias_gelu_erf_bf16", "matmul+bias+gelu_erf")
    assert "its bias is bf16 in the model, widened to f32 for the kernel (exact)" in d.notes
    assert "-> model_ops.gemm_bias_gelu_erf_bf16 (as matmul+bias+gelu_erf)" in wide.text()


def test_linear_gelu_erf_named_when_no_kernel_declares_it():
    (d,) = _dry("ops_gelu_erf_bf16.torch.mlir", [K / "gemm.toml"]).replaced
    assert d.capability.label == "gemm.gemm_bf16"
    assert "its bias add and erf GELU are left to IREE (no kernel declares matmul+bias+gelu_erf for it)" in d.notes
    wide = _dry("ops_gelu_erf_bf16.torch.mlir", [K / "gemm.toml"], wide=True)
    (d,) = wide.replaced
    assert d.capability.label == "gemm.gemm_bias_bf16" and "its erf GELU is left to IREE (no kernel declares matmul+bias+gelu_erf for it)" in d.notes
    (d,) = _dry("ops_gelu_erf_f32.torch.mlir", [K / "gemm_f32.toml"]).replaced  # f32: the Linear with its GELU, strict numerics
    assert d.capability.label == "gemm_f32.gemm_nt_bias_gelu_erf_f32" and d.form.kind == "matmul_nt+bias+gelu_erf"
    (left,) = _dry("ops_gelu_erf_f32.torch.mlir", [K / "library.toml"]).left
    assert left.reasons[0] == ("kernel", "no kernel declares 'matmul+bias+gelu_erf' or 'matmul+bias' or 'matmul_nt' or 'matmul' or 'batch_matmul'")


def test_tanh_gelu_is_not_taken_as_erf():
    """GPT-2's tanh GELU stays matmul+bias+gelu; no erf form appears."""
    with tempfile.TemporaryDirectory() as tmp:
        input_ir = Path(tmp) / "input.mlir"
        to_input_level(MODELS / "mlp_gelu_bf16.torch.mlir", input_ir)
        with ir.Context():
            kinds = {f.kind for c in find_candidates(ir.Module.parse(input_ir.read_text())) for f in c.forms}
    assert "matmul+bias+gelu" in kinds and "matmul+bias+gelu_erf" not in kinds


# ---- RoPE and residual adds: no kind, in the report ----

ROPE_SECTION = """left to IREE, no kernel kind: 3
  rope 2x2x8x32 {t}: x * cos + rotate_half(x) * sin at ops_rope_{t}.torch.mlir:26: no op kind; IREE fuses the elementwise chain itself
  rope 2x2x8x32 {t}: x * cos + rotate_half(x) * sin at ops_rope_{t}.torch.mlir:44: no op kind; IREE fuses the elementwise chain itself
  residual add 2x8x32 {t} at ops_rope_{t}.torch.mlir:46: no op kind; IREE fuses it with the elementwise ops around it
counts:
"""


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_rope_and_residual_add_listed_without_a_kind(dtype):
    a, b = (_dry(f"ops_rope_{dtype}.torch.mlir", [K / "library.toml"]) for _ in range(2))
    assert a.decisions == [] and a.text() == b.text() and report_json(a) == report_json(b)
    assert a.text().endswith("left to IREE: 0\n" + ROPE_SECTION.format(t=dtype))
    entries = json.loads(report_json(a))["no_kind"]
    assert [(e["what"], e["op"]) for e in entries] == [("rope", f"2x2x8x32 {dtype}: x * cos + rotate_half(x) * sin")] * 2 + [("residual add", f"2x8x32 {dtype}")]
    assert entries[2]["reason"] == "no op kind; IREE fuses it with the elementwise ops around it"


def test_no_section_where_nothing_is_unkinded():
    """Models without RoPE or residual adds keep the report as it was: no new heading, an empty JSON list."""
    r = _dry("ops_rmsnorm_f32.torch.mlir", [K / "library.toml"])
    assert "no kernel kind" not in r.text() and r.to_json()["no_kind"] == []


def test_gelu_inner_add_is_no_residual_add():
    """GELU-tanh's x + 0.044715 x^3 adds two full tensors, one a function of the other: not a residual add."""
    with _found("mlp_gelu_bf16.torch.mlir") as (_, unkinded):
        assert [u.what for u in unkinded] == []


def test_llama_layer_every_op_accounted_for():
    """transformers' Llama (one layer, bf16, SDPA: tests/models/llama_sdpa_bf16.torch.mlir): its three
    RMSNorms, its SwiGLU, the RoPE of q and k and both residual adds all in the report."""
    kernels = [K / "library.toml", MODEL_OPS, K / "gemm.toml", ROOT / "kernels" / "flash_attention.toml"]
    wide = _dry("llama_sdpa_bf16.torch.mlir", kernels, wide=True)
    counts = wide.counts()
    assert counts["rmsnorm"] == {"found": 3, "replaced": 3, "left": 0} and counts["swiglu"] == {"found": 1, "replaced": 1, "left": 0}
    assert wide.kernel_counts()["model_ops.swiglu_bf16"] == 1 and wide.left == []
    assert [(u.what, u.description) for u in wide.unkinded] == [("rope", "1x4x16x64 bf16: x * cos + rotate_half(x) * sin"),
                                                                 ("rope", "1x2x16x64 bf16: x * cos + rotate_half(x) * sin"),
                                                                 ("residual add", "1x16x256 bf16"), ("residual add", "1x16x256 bf16")]


def test_gpt2_layer_residual_adds_listed():
    """A GPT-2 layer's two residual adds, and nothing else (its bias adds, mask add and GELU's inner sum are no residual adds)."""
    r = _dry("gpt2_layer_bf16.torch.mlir", [K / "library.toml"])
    assert [(u.what, u.description) for u in r.unkinded] == [("residual add", "2x40x128 bf16")] * 2


# ---- the new kernels' float64 references (kernels/references.py), which their GPU tests compare with ----

_REFERENCES = load_references()


def test_gelu_erf_reference_is_exact_gelu():
    """The reference is torch's gelu(x) (erf form): known values, and not the tanh form."""
    a = np.eye(4, dtype=np.float32)
    b = np.array([[-3.0, -1.0, 0.0, 1.0], [2.0, 0.5, -0.5, 3.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]], np.float32)
    got = _REFERENCES.gemm_bias_gelu_erf_bf16(a, b, np.zeros(4, np.float32))
    np.testing.assert_allclose(got[0], [-0.00404969, -0.15865525, 0.0, 0.84134475], atol=1e-8)
    assert abs(got[1, 0] - 1.9544997361) < 1e-9 and abs(got[1, 0] - _REFERENCES.gemm_bias_gelu_bf16(a, b, np.zeros(4, np.float32))[1, 0]) > 5e-5


def test_swiglu_reference_is_silu_times_up():
    gate = np.array([-100.0, -1.0, 0.0, 1.0, 2.0, 100.0])
    got = _REFERENCES.swiglu_f32(gate, np.full(6, 2.0))
    np.testing.assert_allclose(got[1:], 2.0 * gate[1:] / (1.0 + np.exp(-gate[1:])), rtol=1e-14)
    assert abs(got[0]) < 1e-30 and got[-1] == 200.0  # silu(-100) = -3.7e-42: the GPU tests' absolute slack is 1e-30
