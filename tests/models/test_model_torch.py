"""Torch models through torch.export + IREE's FX importer into compile_model (skipped without
torch; the GPT-2 test also needs transformers)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree_dispatch.models import compile_model  # noqa: E402
from iree_dispatch.models.compiler import rewrite_model  # noqa: E402
from iree_dispatch.models.torch_export import export_mlir, parameter_names  # noqa: E402

from ..support.environment import needs_build_tools  # noqa: E402
from ..support.model_references import _compile_cpu, _run, with_reference_kernels  # noqa: E402

KERNELS = Path(__file__).parent / "kernels"
LIBRARY_DIR = Path(__file__).parents[2] / "kernels"  # the kernel library; KERNELS holds the test-only specs
ALL = [KERNELS / "naive.toml", LIBRARY_DIR / "library.toml", LIBRARY_DIR / "gemm.toml"]
BATCHED = KERNELS / "gemm_batched.toml"  # the batched GEMM as a batch_matmul replacement (not in GPT-2's specs)
GEMM_NT = LIBRARY_DIR / "gemm_nt.toml"  # the NT GEMM as the LM head (matmul_nt)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 128)
        self.norm = torch.nn.LayerNorm(128, eps=1e-5)

    def forward(self, x, q, k):
        h = self.norm(torch.addmm(self.proj.bias, x, self.proj.weight.t().contiguous()))
        return h, torch.softmax(q @ k.transpose(-1, -2), dim=-1)


def _inputs(dtype):
    torch.manual_seed(0)
    return torch.randn(32, 64, dtype=dtype), torch.randn(2, 16, 32, dtype=dtype), torch.randn(2, 16, 32, dtype=dtype)


def _counts(report):
    return {k: (c["replaced"], c["found"]) for k, c in report.counts().items()}


@pytest.mark.parametrize("params_as_inputs", [False, True])
def test_torch_block_f32(tmp_path, params_as_inputs):
    block = Block().eval()
    mlir = export_mlir(block, _inputs(torch.float32), tmp_path / "block.mlir", params_as_inputs=params_as_inputs)
    assert "torch.aten" in mlir.read_text()
    r = compile_model(mlir, ALL, dry_run=True)
    assert _counts(r) == {"batch_matmul": (1, 1), "layernorm": (1, 1), "matmul": (1, 1), "softmax": (1, 1)}
    labels = [d.capability.label for d in r.replaced]
    assert labels == ["naive.matmul_bias_f32", "library.layernorm_warp_f32", "naive.batch_matmul_f32", "library.softmax_warp_f32"]
    assert r.replaced[1].form.eps == pytest.approx(1e-5)


def test_torch_block_bf16(tmp_path):
    block = Block().eval().to(torch.bfloat16)
    mlir = export_mlir(block, _inputs(torch.bfloat16), tmp_path / "block.mlir")
    r = compile_model(mlir, [*ALL, BATCHED], dry_run=True)
    # bf16 matmuls and batch matmuls accumulate in f32 (torch imports them so) and the kernels do
    # too; the LayerNorm computes in bf16, which the f32-math kernel refuses unless allowed.
    assert [d.capability.label for d in r.replaced] == ["gemm.gemm_bf16", "gemm_batched.gemm_batched_bf16", "library.softmax_warp_bf16"]
    assert [d.candidate.kind for d in r.left] == ["layernorm"]
    # Allowed wider: the LayerNorm, and the matmul with its bias add (f32, rounded once to bf16).
    wide = compile_model(mlir, [*ALL, BATCHED], dry_run=True, allow_wider_accumulation=True)
    assert [d.capability.label for d in wide.replaced] == ["gemm.gemm_bias_bf16", "library.layernorm_warp_bf16", "gemm_batched.gemm_batched_bf16",
                                                           "library.softmax_warp_bf16"]
    # Without gemm_batched.toml (GPT-2's specs) the batch matmul is IREE's.
    default = compile_model(mlir, ALL, dry_run=True)
    assert [d.capability.label for d in default.replaced] == ["gemm.gemm_bf16", "library.softmax_warp_bf16"]
    assert sorted(d.candidate.kind for d in default.left) == ["batch_matmul", "layernorm"]


@needs_build_tools
def test_torch_block_compiles(tmp_path):
    mlir = export_mlir(Block().eval(), _inputs(torch.float32), tmp_path / "block.mlir")
    r = compile_model(mlir, ALL, tmp_path / "block.vmfb", program=tmp_path / "block.program.mlir")
    assert (tmp_path / "block.vmfb").stat().st_size > 0 and len(r.replaced) == 4
    program = (tmp_path / "block.program.mlir").read_text()
    for label in ("naive.matmul_bias_f32", "library.layernorm_warp_f32", "naive.batch_matmul_f32", "library.softmax_warp_f32"):
        assert f"func.call @{label}(" in program


def test_parameters_as_inputs_keep_the_weights_out(tmp_path):
    block = Block().eval()
    frozen = export_mlir(block, _inputs(torch.float32), tmp_path / "frozen.mlir")
    lifted = export_mlir(block, _inputs(torch.float32), tmp_path / "lifted.mlir", params_as_inputs=True)
    assert "dense_resource" in frozen.read_text() and "dense_resource" not in lifted.read_text()
    assert parameter_names(block) == ["proj.weight", "proj.bias", "norm.weight", "norm.bias"]


def _tiny_gpt2(tmp_path, dtype=torch.float32, vocab=256):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=vocab, n_positions=64, use_cache=False, attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(config).eval().to(dtype)
    ids = torch.randint(0, vocab, (2, 32))
    causal = torch.tril(torch.ones(32, 32, dtype=torch.bool))
    mask = torch.zeros(2, 1, 32, 32, dtype=dtype).masked_fill(~causal, torch.finfo(dtype).min)
    mlir = export_mlir(model, (ids,), tmp_path / "gpt2.mlir", kwargs={"attention_mask": mask}, params_as_inputs=True, output=lambda o: o.logits.float())
    return model, ids, mask, mlir


def test_tiny_gpt2_report(tmp_path):
    _, _, _, mlir = _tiny_gpt2(tmp_path)
    r = compile_model(mlir, ALL, dry_run=True)
    # Per layer: 2 LayerNorms, 4 Conv1D matmuls (addmm: matmul + bias), 2 attention batch
    # matmuls and a softmax; then the final LayerNorm and the LM head (a batch matmul whose rhs is
    # the tied embedding, transposed and broadcast: one matmul over batch * tokens rows).
    assert _counts(r) == {"batch_matmul": (5, 5), "layernorm": (5, 5), "matmul": (8, 8), "softmax": (2, 2)}
    kinds = {(d.candidate.kind, d.form.kind, d.capability.label) for d in r.replaced}
    assert ("matmul", "matmul+bias", "naive.matmul_bias_f32") in kinds
    assert ("batch_matmul", "matmul", "naive.matmul_f32") in kinds  # the LM head
    assert ("softmax", "softmax", "library.softmax_warp_f32") in kinds


def _original_and_rewritten(tmp_path, mlir, program, report, model, ids, mask):
    """The logits of the imported model and of its rewrite (kernels given reference bodies),
    both compiled for and run on the CPU with the model's parameters."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    original = _compile_cpu(mlir.read_text(), tmp_path / "original.vmfb")
    rewritten = _compile_cpu(with_reference_kernels(program, report), tmp_path / "rewritten.vmfb")

    def host(t):
        t = t.detach().contiguous()
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16 else t.numpy()

    args = [host(ids), host(mask), *(host(p) for p in model.parameters())]
    (expected,) = _run(original, "main", args)
    (got,) = _run(rewritten, "main", args)
    return expected, got


@pytest.mark.parametrize("dtype, wide, tol", [(torch.float32, False, 1e-4), (torch.bfloat16, True, 3e-2)])
def test_tiny_gpt2_rewritten_computes_the_same(tmp_path, dtype, wide, tol):
    """The rewritten GPT-2, kernels given reference bodies, against IREE alone and PyTorch on the CPU."""
    model, ids, mask, mlir = _tiny_gpt2(tmp_path, dtype)
    report, program = rewrite_model(mlir, [*ALL, BATCHED], allow_wider_accumulation=wide)
    # bf16: the 4 attention batch matmuls (K and N 16 or 32) by gemm_batched_bf16, the LM head (N = 256) as one matmul
    assert {k: c["replaced"] for k, c in report.counts().items()} == {"batch_matmul": 5, "layernorm": 5, "matmul": 8, "softmax": 2}
    if dtype == torch.bfloat16:  # each MLP's matmul + bias + gelu_new, and the qkv and output projections' matmul + bias, fused
        assert report.kernel_counts()["gemm.gemm_bias_gelu_bf16"] == 2  # (computed in f32, rounded once)
        assert report.kernel_counts()["gemm.gemm_bias_bf16"] == 6
        assert report.kernel_counts()["gemm_batched.gemm_batched_bf16"] == 4
    expected, got = _original_and_rewritten(tmp_path, mlir, program, report, model, ids, mask)
    with torch.no_grad():
        eager = model(ids, attention_mask=mask).logits.float().numpy()
    scale = float(abs(eager).max())
    assert abs(got - expected).max() <= tol * scale
    assert abs(got - eager).max() <= tol * scale


def test_tiny_gpt2_lm_head_as_matmul_nt(tmp_path):
    """A bf16 GPT-2 whose vocabulary (77) is not a multiple of 8: its LM head (the tied embedding,
    transposed and broadcast, accumulated in f32, rounded to bf16 and, as the export's
    `logits.float()` asks, widened to f32) is one call of the NT GEMM writing f32, in the strict
    build (the model's own numerics), and the rewritten model, kernels given reference bodies,
    computes what IREE alone computes on the CPU."""
    model, ids, mask, mlir = _tiny_gpt2(tmp_path, torch.bfloat16, vocab=77)
    report, program = rewrite_model(mlir, [*ALL, GEMM_NT])
    head = [d for d in report.replaced if d.capability.label == "gemm_nt.gemm_nt_bf16_f32out"]
    assert len(head) == 1 and head[0].candidate.kind == "batch_matmul" and head[0].form.result_shape == (64, 77)
    assert head[0].form.kind == "matmul_nt+extf"
    assert head[0].form.operands[1].shape == (77, 64)  # the embedding as stored
    expected, got = _original_and_rewritten(tmp_path, mlir, program, report, model, ids, mask)
    assert got.shape == (2, 32, 77)
    assert abs(got - expected).max() <= 1e-2 * float(abs(expected).max())
