"""f32 models' SDPA taken by kernels/flash_attention_f32.toml's kernels in the strict build: the
committed exports of a tiny BERT in f32 (tests/support/default_exports.py; without a mask and with
a [B, S] padding mask) and the f32 SDPA module (tests/support/sdpa_exports.py) with the kernel
library (`--kernels kernels/`): every attention op takes the f32 kernel its mask allows, on the
layout BERT's projections hold q, k and v in ([B, S, H, D]: f32 model, f32 kernel, f32
accumulation: an exact match, no --allow-wider-accumulation), the
rewritten model computes what the original computes on the CPU (the kernels given reference
bodies), and the padded BERT compiles for CUDA with the f32 kernels linked in. No torch needed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.compiler")  # the model compiler: not in a runtime-only install

from iree_dispatch.models import compile_model  # noqa: E402
from iree_dispatch.models.compiler import rewrite_model  # noqa: E402

from ..support.environment import ROOT, needs_build_tools  # noqa: E402
from ..support.model_references import _compile_cpu, _random_args, _run, with_reference_kernels  # noqa: E402

MODELS = Path(__file__).parent
LIBRARY = ROOT / "kernels"
FLASH_F32 = ROOT / "kernels" / "flash_attention_f32.toml"
ZERO_NOTE = "the mask is 0 everywhere (every query sees every key): the kernel without a mask, the mask not read"
CAUSAL_NOTE = "the mask is the causal triangle (0 where key j <= query i, -inf or at most half the lowest value elsewhere): the kernel's causal masking, the mask not read"
BROADCAST_NOTE = "the mask is read as 2x1x16x16, broadcast over its dims of size 1"

# Each f32 export: the kernel both of its attention ops take, and their notes.
# BERT's q, k and v come from three projections, as stored: the [B, S, H, D] kernels read them so;
# the library's qkv-layout kinds say why not them.
NOT_QKV = "not as {}: q, k and v are not slices of one [B, S, 3E] tensor"
BSHD_NOTE = "q, k and v are read from their projections' [B, S, E] results and the result is written in [B, S, E] layout (the transposes are not computed)"

TAKEN = {
    "bert_default_f32": ("flash_attn_bshd_f32_d64", [BSHD_NOTE, ZERO_NOTE, NOT_QKV.format("sdpa_qkv")]),
    "bert_default_padded_f32": ("flash_attn_bshd_f32_d64_mask", [BSHD_NOTE, BROADCAST_NOTE, NOT_QKV.format("sdpa_qkv_mask")]),
}


def _model(name: str) -> Path:
    return MODELS / f"{name}.torch.mlir"


@pytest.mark.parametrize("name", list(TAKEN))
def test_bert_f32_attention_taken(name):
    """With the whole kernel library, strict: both layers' SDPA by the f32 kernel, none left to IREE."""
    report = compile_model(_model(name), [LIBRARY], dry_run=True)
    assert report.counts()["sdpa"] == {"found": 2, "replaced": 2, "left": 0}
    kernel, notes = TAKEN[name]
    for d in (d for d in report.replaced if d.candidate.kind == "sdpa"):
        assert (d.capability.label, d.notes) == (f"flash_attention_f32.{kernel}", notes)
        assert [o.shape for o in d.form.operands[:3]] == [(2, 16, 4, 64)] * 3
        assert {o.dtype for o in d.form.operands} == {"f32"}


def test_sdpa_f32_module_taken():
    """The f32 SDPA module: the plain attention by the kernel without a mask, is_causal by the causal one."""
    report = compile_model(MODELS / "sdpa_f32.torch.mlir", [FLASH_F32], dry_run=True)
    assert report.counts() == {"sdpa": {"found": 2, "replaced": 2, "left": 0}}
    assert sorted((d.capability.label, tuple(d.notes)) for d in report.replaced) == [
        ("flash_attention_f32.flash_attn_f32_d64", ()), ("flash_attention_f32.flash_attn_f32_d64_causal", (CAUSAL_NOTE,))]


def test_bf16_model_not_taken_by_f32_kernels():
    """A bf16 model's attention is not the f32 kernel's: each op left, with a dtype reason naming it."""
    report = compile_model(_model("bert_default_bf16"), [FLASH_F32], dry_run=True)
    assert report.counts()["sdpa"] == {"found": 2, "replaced": 0, "left": 2}
    for d in (d for d in report.left if d.candidate.kind == "sdpa"):
        assert ("dtype", "flash_attention_f32.flash_attn_f32_d64: takes f32, f32, f32, the model has bf16, bf16, bf16") in d.reasons


def _padding(shape) -> np.ndarray:
    """A [B, S] padding mask as users pass it: the last quarter of the second sequence is padding."""
    mask = np.ones(shape, np.int64)
    mask[1, -shape[1] // 4:] = 0
    return mask


@pytest.mark.parametrize("name", list(TAKEN))
def test_rewritten_computes_the_same(tmp_path, name):
    """The rewritten BERT (each attention the f32 kernel with a reference body in plain linalg)
    against IREE's own attention on the CPU, on fresh random parameters at a trained model's
    scale. Both compute in f32: they differ by roundings alone."""
    model = _model(name)
    report, program = rewrite_model(model, [FLASH_F32])
    assert [d.capability.label for d in report.replaced] == [f"flash_attention_f32.{TAKEN[name][0]}"] * 2
    original = model.read_text()
    expected_vmfb = _compile_cpu(original, tmp_path / "original.vmfb")
    got_vmfb = _compile_cpu(with_reference_kernels(program, report), tmp_path / "rewritten.vmfb")
    rng = np.random.default_rng()
    args = _random_args(original, "main", rng)
    args[0] = rng.integers(0, 1000, args[0].shape)
    start = 2 if "padded" in name else 1
    if "padded" in name:
        args[1] = _padding(args[1].shape)
    args = args[:start] + [(a * 0.1).astype(np.float32) for a in args[start:]]
    (expected,), (got,) = _run(expected_vmfb, "main", args), _run(got_vmfb, "main", args)
    expected, got = np.asarray(expected, np.float64), np.asarray(got, np.float64)
    assert expected.shape == got.shape and np.all(np.isfinite(expected))
    assert np.max(np.abs(expected - got)) <= 1e-4 * max(1.0, float(np.max(np.abs(expected))))


@needs_build_tools
def test_padded_bert_f32_compiles(tmp_path):
    """The padded BERT compiles for CUDA with the f32 attention kernels linked in (nvcc, sm_90a and sm_80)."""
    report = compile_model(_model("bert_default_padded_f32"), [FLASH_F32], tmp_path / "flash_f32.vmfb")
    assert (tmp_path / "flash_f32.vmfb").stat().st_size > 0
    assert [d.capability.label for d in report.replaced] == ["flash_attention_f32.flash_attn_bshd_f32_d64_mask"] * 2
