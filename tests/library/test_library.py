"""The kernel library (kernels/library.toml) on the CPU: it builds for sm_80 and sm_90 (the
build checks every kernel's ABI against its PTX), `inspect` reads the spec, and every kernel
has a float64 reference. Runs on a GPU: tests/library/test_gpu_library.py."""

from __future__ import annotations

from iree_dispatch.backend.pipeline import build
from iree_dispatch.cli import main
from iree_dispatch.frontend.spec_file import load_spec

from ..support.environment import ROOT, needs_build_tools
from ..support.references import load_references

SPEC = ROOT / "kernels" / "library.toml"
KERNELS = ["bias_gelu_f32", "bias_gelu_f16", "bias_gelu_bf16", "bias_gelu_f32_bf16", "row_sum_f32", "row_max_f32", "softmax_f32", "layernorm_f32",
           "rmsnorm_f32", "softmax_bf16", "layernorm_bf16", "rmsnorm_bf16", "softmax_f16", "layernorm_f16", "rmsnorm_f16", "softmax_warp_f32",
           "layernorm_warp_f32", "softmax_warp_bf16", "layernorm_warp_bf16",
           "rmsnorm_warp_bf16", "softmax_warp_f16", "layernorm_warp_f16", "rmsnorm_warp_f16", "transpose_f32"]


def test_every_kernel_has_a_reference():
    spec = load_spec(SPEC)
    assert [k.function for k in spec.kernels] == KERNELS
    references = load_references()
    assert all(callable(getattr(references, name, None)) for name in KERNELS)


@needs_build_tools
def test_builds_for_sm80_and_sm90(tmp_path):
    spec = load_spec(SPEC)
    assert sorted(a.name for a in spec.archs) == ["sm_80", "sm_90"]
    result = build(spec, tmp_path / "library.vmfb", emit_mlir=tmp_path / "library.mlir")
    assert result.vmfb.stat().st_size > 0
    objects = sorted(p.name for p in result.objects_dir.iterdir())
    assert objects == [f"{src}.{arch}.{kind}" for src in ("elementwise", "rows", "transpose") for arch in ("sm_80", "sm_90") for kind in ("cubin", "ptx")]
    mlir = result.mlir.read_text()
    for name in KERNELS:
        assert f"func.func @{name}(" in mlir


@needs_build_tools
def test_inspect_spec(capsys):
    assert main(["inspect", str(SPEC)]) == 0
    out = capsys.readouterr().out
    assert "module library" in out
    assert "kernel layernorm_f32(x: f32[rows, cols], weight: f32[cols], bias: f32[cols], eps: float) -> (out: f32[rows, cols])" in out
    assert "kernel layernorm_bf16(x: bf16[rows, cols], weight: bf16[cols], bias: bf16[cols], eps: float) -> (out: bf16[rows, cols])" in out
    assert "kernel layernorm_f16(x: f16[rows, cols], weight: f16[cols], bias: f16[cols], eps: float) -> (out: f16[rows, cols])" in out
    assert "kernel transpose_f32(in: f32[rows, cols]) -> (out: f32[cols, rows])" in out
