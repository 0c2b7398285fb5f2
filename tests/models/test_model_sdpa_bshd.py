"""Op kinds sdpa_bshd, sdpa_bshd_causal, sdpa_bshd_mask: torch's scaled_dot_product_attention on q, k
and v viewed as heads of [B, S, E] tensors and transposed, its result transposed back to
[B, S, E] (BERT's self-attention), replaced by flash_attention.toml's flash_attn_bshd_* kernels,
which read and write those tensors as stored. An export of small modules
(tests/support/sdpa_exports.py: sdpa_bshd_bf16.torch.mlir, B = 2, H = 4, S = 16, D = 64): which
kernel each attention takes and why not the others, the refusals (the plain kernel is taken, the
report says why), a spec without the bshd kernels, and the rewritten model against the original
on the CPU (the kernels given reference bodies in plain linalg); built for CUDA, BERT's padded
export computes no transpose of q, k, v or of the result. No torch needed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree_dispatch.models import compile_model  # noqa: E402
from iree_dispatch.models.compiler import rewrite_model  # noqa: E402

from ..support.environment import ROOT, needs_build_tools  # noqa: E402
from ..support.model_references import _compile_cpu, _flow_dispatches, _random_args, _run, with_reference_kernels  # noqa: E402

MODELS = Path(__file__).parent
MODEL = MODELS / "sdpa_bshd_bf16.torch.mlir"
FLASH = ROOT / "kernels" / "flash_attention.toml"
BSHD_NOTE = "q, k and v are read from their projections' [B, S, E] results and the result is written in [B, S, E] layout (the transposes are not computed)"
CAUSAL_NOTE = "the mask is the causal triangle (0 where key j <= query i, -inf or at most half the lowest value elsewhere): the kernel's causal masking, the mask not read"
GQA_NOTE = "k and v repeat 2 heads 2 times each (grouped-query attention): the kernel reads them as stored (the repeat is not computed)"
NOT_SLICES = "q, k and v are not slices of one [B, S, 3E] tensor"
OTHER_USES = "the transposed q, k or v has other uses (the transposes would still be computed)"
NOT_BACK = "the result has other uses than its transpose back to [B, S, E]"

# Each function: the kernel its attention takes, the form's q, k, v (and mask) shapes, and the notes.
TAKEN = {
    "plain": ("flash_attn_bshd_bf16_d64", [(2, 16, 4, 64)] * 3, [BSHD_NOTE, f"not as sdpa_qkv: {NOT_SLICES}"]),
    "gqa_causal": ("flash_attn_bshd_bf16_d64_causal", [(2, 16, 4, 64), (2, 16, 2, 64), (2, 16, 2, 64)], [BSHD_NOTE, GQA_NOTE, CAUSAL_NOTE]),
    "padding_mask": ("flash_attn_bshd_bf16_d64_mask", [(2, 16, 4, 64)] * 3 + [(2, 1, 1, 16)],
                     [BSHD_NOTE, "the mask is read as 2x1x1x16, broadcast over its dims of size 1", f"not as sdpa_qkv_mask: {NOT_SLICES}"]),
    "cross": ("flash_attn_bshd_bf16_d64", [(2, 16, 4, 64), (2, 32, 4, 64), (2, 32, 4, 64)],
              [BSHD_NOTE, "not as sdpa_qkv: q, k and v need the same static [B, S, H, D] heads"]),
    "same_tensor": ("flash_attn_bshd_bf16_d64", [(2, 16, 4, 64)] * 3, [BSHD_NOTE, f"not as sdpa_qkv: {OTHER_USES}"]),
    # the structure broken: the [B, H, S, D] kernel, the report says why not the layouts' kernels
    "q_used": ("flash_attn_bf16_d64", [(2, 4, 16, 64)] * 3, [f"not as sdpa_qkv: {OTHER_USES}", f"not as sdpa_bshd: {OTHER_USES}"]),
    "context_used": ("flash_attn_bf16_d64", [(2, 4, 16, 64)] * 3, [f"not as sdpa_qkv: {NOT_SLICES}", f"not as sdpa_bshd: {NOT_BACK}"]),
}


def _by_function(report) -> dict[str, object]:
    """Each decision by the function its attention op is in (one op per function, in order)."""
    assert len(report.decisions) == len(TAKEN)
    return dict(zip(TAKEN, sorted(report.decisions, key=lambda d: d.candidate.order)))


def test_each_function_takes_its_kernel():
    report = compile_model(MODEL, [FLASH], dry_run=True)
    assert report.counts() == {"sdpa": {"found": 7, "replaced": 7, "left": 0}}
    for function, d in _by_function(report).items():
        kernel, shapes, notes = TAKEN[function]
        assert (d.capability.label, d.notes) == (f"flash_attention.{kernel}", notes), function
        assert [o.shape for o in d.form.operands] == shapes, function
        assert d.form.result_shape == ((2, 16, 4, 64) if "bshd" in kernel else (2, 4, 16, 64)), function
    text = report.text()
    assert f"      note: {BSHD_NOTE}\n" in text and f"      note: not as sdpa_bshd: {NOT_BACK}\n" in text


def test_without_the_bshd_kernels(tmp_path):
    """A spec without flash_attn_bshd_*: the [B, H, S, D] kernels, and nothing about sdpa_bshd in the report."""
    blocks = FLASH.read_text().split("\n[[kernel]]\n")
    spec = tmp_path / "flash_attention.toml"
    spec.write_text("\n[[kernel]]\n".join(b for b in blocks if 'name = "flash_attn_bshd_' not in b).replace(
        'source = "flash_attention.cu"', f'source = "{ROOT / "kernels" / "flash_attention.cu"}"'))
    report = compile_model(MODEL, [spec], dry_run=True)
    assert report.counts() == {"sdpa": {"found": 7, "replaced": 7, "left": 0}}
    assert {d.form.kind for d in report.decisions} == {"sdpa", "sdpa_causal", "sdpa_mask"}
    text = report.text().replace(MODEL.name, "")
    assert "sdpa_bshd" not in text and "flash_attn_bshd" not in text


@pytest.fixture(scope="module")
def cpu_modules(tmp_path_factory) -> tuple[Path, Path]:
    """The export and its rewrite (each kernel a reference body in plain linalg), compiled for the CPU."""
    out = tmp_path_factory.mktemp("sdpa_bshd")
    report, program = rewrite_model(MODEL, [FLASH])
    assert program.count("func.call @flash_attention.flash_attn_bshd_") == 5
    return _compile_cpu(MODEL.read_text(), out / "original.vmfb"), _compile_cpu(with_reference_kernels(program, report), out / "rewritten.vmfb")


@pytest.mark.parametrize("function", list(TAKEN))
def test_rewritten_computes_the_same(cpu_modules, function):
    """Every output of the rewritten function against IREE's own attention on the CPU, on fresh random data."""
    original, rewritten = cpu_modules
    args = _random_args(MODEL.read_text(), function, np.random.default_rng())
    expected, got = _run(original, function, args), _run(rewritten, function, args)
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        e, g = np.asarray(e, np.float32), np.asarray(g, np.float32)
        assert e.shape == g.shape and np.all(np.isfinite(e))
        assert np.max(np.abs(e - g)) <= 2e-2 * max(1.0, float(np.max(np.abs(e))))


@needs_build_tools
def test_compiled_bert_computes_no_transposes(tmp_path):
    """BERT's padded export built for CUDA: one flash_attn_bshd_bf16_d64_mask dispatch per layer, and
    IREE dispatches no transpose (the heads' [B, S, H, D] <-> [B, H, S, D] copies are gone; the
    Linears' transposed weights fold into their matmuls)."""
    compile_model(MODELS / "bert_default_padded_bf16.torch.mlir", [FLASH], tmp_path / "b.vmfb", emit_mlir=tmp_path / "b.linked.mlir")
    dispatches = _flow_dispatches(tmp_path / "b.linked.mlir")
    assert sum("flash_attn_bshd_bf16_d64_mask" in d for d in dispatches) == 2
    assert not [d for d in dispatches if "transpose" in d], dispatches
