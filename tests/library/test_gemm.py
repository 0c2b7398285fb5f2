"""The tensor-core GEMM (kernels/gemm.toml) on the CPU: the spec declares what the kernels
need, the module builds for sm_90a and sm_80 (the build checks each kernel's ABI against its
PTX entry), each arch gets the body meant for it, and a plain sm_90 build takes the mma.sync
body. Runs on a GPU: tests/library/test_gpu_gemm.py."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from iree_dispatch.backend.pipeline import build
from iree_dispatch.cli import main
from iree_dispatch.core.archs import parse_arch
from iree_dispatch.core.errors import SpecError
from iree_dispatch.frontend.spec_file import load_spec

from ..support.environment import ROOT, needs_build_tools
from ..support.references import load_references

SPEC = ROOT / "kernels" / "gemm.toml"
KERNELS = ["gemm_bf16", "gemm_f16", "gemm_bias_gelu_bf16", "gemm_bias_bf16", "gemm_bias_bf16_persistent", "gemm_bias_gelu_bf16_persistent",
           "gemm_bias_residual_bf16_persistent", "gemm_nt_bias_bf16_persistent", "gemm_nt_bf16_persistent", "gemm_nt_bias_gelu_bf16_persistent",
           "gemm_nt_bias_residual_bf16_persistent", "gemm_bias_residual_f32", "gemm_bias_residual_bf16", "gemm_batched_bf16"]
# Buffers each kernel takes before M, N, K: a, b, (bias, residual,) output.
BUFFERS = {"gemm_bf16": 3, "gemm_f16": 3, "gemm_bias_gelu_bf16": 4, "gemm_bias_bf16": 4, "gemm_bias_bf16_persistent": 4, "gemm_bias_gelu_bf16_persistent": 4,
           "gemm_bias_residual_bf16_persistent": 5, "gemm_nt_bias_bf16_persistent": 4, "gemm_nt_bf16_persistent": 3, "gemm_nt_bias_gelu_bf16_persistent": 4,
           "gemm_nt_bias_residual_bf16_persistent": 5, "gemm_bias_residual_f32": 5, "gemm_bias_residual_bf16": 5, "gemm_batched_bf16": 3}
NT = {"gemm_nt_bias_bf16_persistent", "gemm_nt_bf16_persistent", "gemm_nt_bias_gelu_bf16_persistent", "gemm_nt_bias_residual_bf16_persistent"}  # b [N, K], bf16 bias
PERSISTENT = {"gemm_bias_bf16_persistent", "gemm_bias_gelu_bf16_persistent", "gemm_bias_residual_bf16_persistent", *NT}  # grid (min(tile pairs, 66), 2)
BATCHED = {"gemm_batched_bf16"}  # a [B, M, K], b [B, K, N], c [B, M, N]; the batch along grid z
# gemm.cu, per arch: sm_90a 4 stages x (16 KB of A + 32 KB of B) + 1 KB to align the tiles to
# 1024 bytes; sm_80 two buffers of A (128 x 40) and B (32 x 264) bf16 tiles + 8 warps' 16 x 16
# float scratch tiles + 128 for alignment, under the 99 KB of sm_86/sm_89.
SHARED_MEMORY = {"sm_90a": 4 * (16384 + 32768) + 1024, "sm_80": 2 * (128 * 40 + 32 * 264) * 2 + 8 * 1024 + 128}
# The persistent kernels on sm_90a: 3 stages + two warpgroups' 64 x 264 bf16 staging buffers + 1024.
PERSISTENT_SHARED_MEMORY = {"sm_90a": 3 * (16384 + 32768) + 2 * 64 * 264 * 2 + 1024, "sm_80": SHARED_MEMORY["sm_80"]}


def test_spec_declares_shapes_block_grid_and_shared_memory():
    spec = load_spec(SPEC)
    assert spec.name == "gemm"
    assert [a.name for a in spec.archs] == ["sm_90a", "sm_80"]
    assert [k.function for k in spec.kernels] == KERNELS
    operands = [("a", ["M", "K"]), ("b", ["K", "N"])]
    expected = {
        "gemm_bf16": ([("a", "bf16"), ("b", "bf16")], ("c", "f32")),
        "gemm_f16": ([("a", "f16"), ("b", "f16")], ("c", "f32")),
        "gemm_bias_gelu_bf16": ([("a", "bf16"), ("b", "bf16"), ("bias", "f32")], ("h", "bf16")),
        "gemm_bias_bf16": ([("a", "bf16"), ("b", "bf16"), ("bias", "f32")], ("h", "bf16")),
        "gemm_bias_bf16_persistent": ([("a", "bf16"), ("b", "bf16"), ("bias", "f32")], ("h", "bf16")),
        "gemm_bias_gelu_bf16_persistent": ([("a", "bf16"), ("b", "bf16"), ("bias", "f32")], ("h", "bf16")),
        "gemm_bias_residual_bf16_persistent": ([("a", "bf16"), ("b", "bf16"), ("bias", "f32"), ("residual", "bf16")], ("h", "bf16")),
        "gemm_bias_residual_f32": ([("a", "bf16"), ("b", "bf16"), ("bias", "f32"), ("residual", "f32")], ("c", "f32")),
        "gemm_bias_residual_bf16": ([("a", "bf16"), ("b", "bf16"), ("bias", "f32"), ("residual", "bf16")], ("h", "bf16")),
        "gemm_batched_bf16": ([("a", "bf16"), ("b", "bf16")], ("c", "f32")),
        "gemm_nt_bias_bf16_persistent": ([("a", "bf16"), ("b", "bf16"), ("bias", "bf16")], ("h", "bf16")),
        "gemm_nt_bf16_persistent": ([("a", "bf16"), ("b", "bf16")], ("h", "bf16")),
        "gemm_nt_bias_gelu_bf16_persistent": ([("a", "bf16"), ("b", "bf16"), ("bias", "bf16")], ("h", "bf16")),
        "gemm_nt_bias_residual_bf16_persistent": ([("a", "bf16"), ("b", "bf16"), ("bias", "bf16"), ("residual", "bf16")], ("h", "bf16")),
    }
    for kernel in spec.kernels:
        d = kernel.describe().to_dict()
        batched = kernel.function in BATCHED
        lead = ["B"] if batched else []
        shapes = {name: lead + dims for name, dims in operands} | {"bias": ["N"], "residual": ["M", "N"]} | ({"b": ["N", "K"]} if kernel.function in NT else {})
        inputs, (out, out_dtype) = expected[kernel.function]
        assert [(t["name"], t["dtype"], t["shape"]) for t in d["inputs"]] == [(name, dtype, shapes[name]) for name, dtype in inputs]
        assert [(t["name"], t["dtype"], t["shape"], t["inplace"]) for t in d["outputs"]] == [(out, out_dtype, [*lead, "M", "N"], False)]
        assert d["scalars"] == []  # M, N, K come from the shapes (B only sizes the grid)
        assert d["block"] == [384, 1, 1]
        if kernel.function in PERSISTENT:
            assert d["grid"] == ["min((ceildiv(N, 256) * ceildiv(M, 256)), 66)", "2", "1"]
            assert d["shared_memory"] == PERSISTENT_SHARED_MEMORY
            assert [r["relation"] for r in d["requires"]] == ["M % 256 == 0", "N % 256 == 0"]
            continue
        assert d["grid"] == ["ceildiv(N, 256)", "(2 * ceildiv(M, 256))", "B" if batched else "1"]
        assert d["shared_memory"] == SHARED_MEMORY
    assert SHARED_MEMORY["sm_80"] <= 99 * 1024


def test_every_kernel_has_a_float64_reference():
    references = load_references()
    assert all(callable(getattr(references, name, None)) for name in KERNELS)


def test_residual_reference_rounds_between_bias_and_residual():
    ml_dtypes = pytest.importorskip("ml_dtypes")

    a, b = np.ones((1, 1), ml_dtypes.bfloat16), np.ones((1, 1), ml_dtypes.bfloat16)
    bias, residual = np.array([2.0**-9], np.float32), np.array([[2.0**-9]], ml_dtypes.bfloat16)
    # 1 + 2^-9 rounds to 1 in bf16 (8-bit significand); unrounded, the sum would be 1 + 2^-8
    assert load_references().gemm_bias_residual_bf16(a, b, bias, residual)[0, 0] == 1.0 + 2.0**-9


def _entry(ptx: str, name: str) -> str:
    """The text of `.entry name` up to its body's opening brace (params and directives)."""
    start = ptx.index(f".entry {name}(")
    return ptx[start : ptx.index("{", start)]


def _body(ptx: str, name: str) -> str:
    """The text of `.entry name` to the end of its body (the next entry or the end of the file)."""
    start = ptx.index(f".entry {name}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start : end if end >= 0 else len(ptx)]


@needs_build_tools
def test_builds_for_sm90a_and_sm80_with_the_body_for_each(tmp_path):
    result = build(load_spec(SPEC), tmp_path / "gemm.vmfb", emit_mlir=tmp_path / "gemm.mlir")
    assert result.vmfb.stat().st_size > 0
    assert sorted(p.name for p in result.objects_dir.iterdir()) == [f"gemm.{arch}.{kind}" for arch in ("sm_80", "sm_90a") for kind in ("cubin", "ptx")]
    hopper = (result.objects_dir / "gemm.sm_90a.ptx").read_text()
    ampere = (result.objects_dir / "gemm.sm_80.ptx").read_text()
    mlir = result.mlir.read_text()
    # Each variant's exports declare that arch's shared memory (sm_90a PTX: the sm_90a size).
    for variant, arch in (("sm_90a_cubin", "sm_90a"), ("sm_80_cubin", "sm_80"), ("sm_90a", "sm_90a")):
        text = mlir.split(f"hal.executable.variant public @{variant} ", 1)[1].split("hal.executable.variant", 1)[0]
        want = [str((PERSISTENT_SHARED_MEMORY if name in PERSISTENT else SHARED_MEMORY)[arch]) for name in KERNELS]
        assert re.findall(r"workgroup_local_memory = (\d+) : index", text) == want, variant
    for name in KERNELS:
        assert f"func.func @{name}(" in mlir
        # The buffers, then M, N, K as 32-bit push constants: what IREE passes.
        for ptx in (hopper, ampere):
            entry = _entry(ptx, name)
            assert len(re.findall(r"\.param \.u64", entry)) == BUFFERS[name] and len(re.findall(r"\.param \.u32", entry)) == 3, entry
            assert ".maxntid 384, 1, 1" in entry
        # The grid's y dimension is a multiple of 2 because the sm_90a kernel runs in clusters of two.
        assert ".reqnctapercluster 1, 2, 1" in _entry(hopper, name)
        assert "reqnctapercluster" not in _entry(ampere, name)
        # The batched kernel's batch is blockIdx.z; the others ignore z.
        for ptx in (hopper, ampere):
            assert ("%ctaid.z" in _body(ptx, name)) == (name in BATCHED), name
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.bf16\.bf16", hopper)
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.f16\.f16", hopper)
    # TMA through tensor maps the kernel builds itself, B multicast across the cluster.
    assert "tensormap.replace.tile.global_address" in hopper and "tensormap.cp_fenceproxy" in hopper
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster" in hopper
    assert "mma.sync" not in hopper
    assert "wmma.mma.sync.aligned.row.row.m16n16k16" in ampere and "wgmma" not in ampere


@needs_build_tools
def test_plain_sm90_build_takes_the_mma_sync_body(tmp_path):
    # wgmma exists only on sm_90a; a plain sm_90 object (forward-compatible PTX) must not use it.
    spec = load_spec(SPEC)
    # The spec sizes shared memory for its own archs only; sm_90 compiles the mma.sync body, sm_80's size.
    with pytest.raises(SpecError, match="shared_memory has no size for sm_90"):
        spec.with_archs(["sm_90"])
    sm90 = (parse_arch("sm_90"), SHARED_MEMORY["sm_80"])
    spec = dataclasses.replace(spec, kernels=tuple(dataclasses.replace(k, shared_memory_by_arch=(sm90, *k.shared_memory_by_arch)) for k in spec.kernels))
    result = build(spec.with_archs(["sm_90"]), tmp_path / "gemm.vmfb")
    ptx = (result.objects_dir / "gemm.sm_90.ptx").read_text()
    assert "wgmma" not in ptx and "wmma.mma.sync.aligned.row.row.m16n16k16" in ptx


@needs_build_tools
def test_inspect_spec(capsys):
    assert main(["inspect", str(SPEC)]) == 0
    out = capsys.readouterr().out
    assert "kernel gemm_bf16(a: bf16[M, K], b: bf16[K, N]) -> (c: f32[M, N])" in out
    assert "kernel gemm_f16(a: f16[M, K], b: f16[K, N]) -> (c: f32[M, N])" in out
    assert "kernel gemm_bias_gelu_bf16(a: bf16[M, K], b: bf16[K, N], bias: f32[N]) -> (h: bf16[M, N])" in out
    assert "kernel gemm_bias_bf16(a: bf16[M, K], b: bf16[K, N], bias: f32[N]) -> (h: bf16[M, N])" in out
    assert "kernel gemm_bias_residual_f32(a: bf16[M, K], b: bf16[K, N], bias: f32[N], residual: f32[M, N]) -> (c: f32[M, N])" in out
    assert "kernel gemm_batched_bf16(a: bf16[B, M, K], b: bf16[B, K, N]) -> (c: f32[B, M, N])" in out
    assert "grid ['ceildiv(N, 256)', '(2 * ceildiv(M, 256))', 'B']" in out
    assert f"shared memory sm_90a {SHARED_MEMORY['sm_90a']}, sm_80 {SHARED_MEMORY['sm_80']} B" in out


N128_SPEC = ROOT / "kernels" / "gemm_n128.toml"
N192_SPEC = ROOT / "kernels" / "gemm_n192.toml"


@pytest.mark.parametrize("spec, columns, stages", [(N128_SPEC, 128, 5), (N192_SPEC, 192, 4)], ids=["n128", "n192"])
def test_narrow_tile_specs_build_gemm_cu_with_their_tiles(spec, columns, stages):
    """kernels/gemm_n128.toml and gemm_n192.toml: gemm.cu's persistent kernels with -DGEMM_BN and
    their stages, their grid over those tiles, the shared memory of those flags: the stages of 16 KB
    of A and columns x 64 bf16 of B, two 64 x (columns + 8) bf16 staging buffers and 1024 for
    alignment; sm_80 the mma.sync body's two stages of A (128 x 40) and B (32 x (columns + 8)) and
    its scratch."""
    loaded = load_spec(spec)
    assert loaded.name == f"gemm_n{columns}" and loaded.nvcc_flags == (f"-DGEMM_BN={columns}", f"-DGEMM_PERSISTENT_STAGES={stages}")
    sm90a = stages * (16384 + columns * 128) + 2 * 64 * (columns + 8) * 2 + 1024
    sm80 = 2 * (128 * 40 + 32 * (columns + 8)) * 2 + 8 * 1024 + 128
    for kernel in loaded.kernels:
        d = kernel.describe().to_dict()
        assert d["grid"] == [f"min((ceildiv(N, {columns}) * ceildiv(M, 256)), 66)", "2", "1"]
        assert d["shared_memory"] == {"sm_90a": sm90a, "sm_80": sm80}
        assert [r["relation"] for r in d["requires"]] == ["M % 256 == 0", f"N % {columns} == 0"]


@needs_build_tools
def test_n192_build_multiplies_192_columns(tmp_path):
    result = build(load_spec(N192_SPEC), tmp_path / "gemm_n192.vmfb")
    hopper = (result.objects_dir / "gemm.sm_90a.ptx").read_text()
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n192k16\.f32\.bf16\.bf16", hopper)
    assert "m64n256k16" not in hopper and "m64n128k16" not in hopper


@needs_build_tools
def test_n128_build_multiplies_128_columns(tmp_path):
    result = build(load_spec(N128_SPEC), tmp_path / "gemm_n128.vmfb")
    hopper = (result.objects_dir / "gemm.sm_90a.ptx").read_text()
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16", hopper)
    assert "m64n256k16" not in hopper
