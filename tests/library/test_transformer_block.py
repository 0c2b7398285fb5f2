"""CPU side of the transformer-block programs (mlir/transformer_block_*.mlir): the pure-codegen
program compiles with plain iree-compile for cuda, the mixed programs link and compile with the
hand-written kernels, and all of them compute a function of the same signature."""

from __future__ import annotations

import subprocess

import pytest

from ..support.artifacts.transformer import BLOCKS, GEMM_SPEC, NEEDS_GEMM, PROGRAMS, SPEC, build_all, codegen_flags, have_gemm
from ..support.environment import ROOT, needs_build_tools

pytestmark = needs_build_tools


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    return build_all(tmp_path_factory.mktemp("transformer"))


def exported_functions(vmfb) -> set[str]:
    import iree.runtime as rt

    return {name for name in rt.VmModule.mmap(rt.VmInstance(), str(vmfb)).function_names if not name.startswith("__")}


def function_type(program, name: str) -> str:
    from iree.compiler import ir

    with ir.Context():
        module = ir.Module.parse(program.read_text(encoding="utf-8"))
        for op in module.body.operations:
            if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
                return str(op.attributes["function_type"])
    raise AssertionError(f"{program} has no function @{name}")


@pytest.mark.parametrize("name", ["codegen", "ops_codegen"])
def test_codegen_programs_compile_with_plain_iree_compile(tmp_path, name):
    from iree.compiler.tools.binaries import find_tool

    out = tmp_path / f"{name}.vmfb"
    proc = subprocess.run([find_tool("iree-compile"), *codegen_flags(), str(PROGRAMS[name]), "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = {"transformer_block"} if name == "codegen" else {"bias_gelu", "bias_gelu_bf16", "layernorm", "softmax", "matmul_up", "matmul_down"}
    assert exported_functions(out) == want


def test_every_program_builds(artifacts):
    expected = {"ops_codegen", "kernels", "kernels_poisonable", *(b for b in BLOCKS if b not in NEEDS_GEMM or have_gemm())}
    assert set(artifacts) == expected
    for name in BLOCKS:
        if name in artifacts:
            assert exported_functions(artifacts[name]) == {"transformer_block"}, name
    kernels = {"bias_gelu_f32", "bias_gelu_f32_bf16", "layernorm_f32", "softmax_f32", "layernorm_warp_f32", "softmax_warp_f32"} | ({"gemm_bf16"} if have_gemm() else set())
    assert exported_functions(artifacts["kernels"]) == kernels
    assert exported_functions(artifacts["kernels_poisonable"]) == kernels


# program → the kernels it declares, as module.kernel
MIXED_KERNELS = {
    "mixed": ["transformer.bias_gelu_f32_bf16", "transformer.layernorm_warp_f32", "transformer.softmax_warp_f32"],
    "mixed_gemm": ["gemm.gemm_bf16", "transformer.bias_gelu_f32_bf16", "transformer.layernorm_warp_f32", "transformer.softmax_warp_f32"],
    "mixed_rows": ["transformer.layernorm_warp_f32", "transformer.softmax_warp_f32"],
    "mixed_gemm_fused": ["gemm.gemm_bf16", "transformer.layernorm_warp_f32", "transformer.softmax_warp_f32"],
    "mixed_gemm_epilogues": ["gemm.gemm_bias_gelu_bf16", "gemm.gemm_bias_residual_f32", "transformer.layernorm_warp_f32", "transformer.softmax_warp_f32"],
}


@pytest.mark.parametrize("name", list(MIXED_KERNELS))
def test_mixed_programs_dispatch_the_kernels(artifacts, name):
    """The linked IR launches each declared kernel through flow.dispatch (nothing left as a call
    to an undefined function), and has the codegen program's signature."""
    if name not in artifacts:
        pytest.skip("kernels/gemm.toml is not there yet")
    linked = artifacts[name].with_suffix(".mlir").read_text(encoding="utf-8")
    for kernel in MIXED_KERNELS[name]:
        assert f"::@{kernel.split('.')[1]}" in linked and f"call @{kernel}(" in linked, kernel
    assert function_type(PROGRAMS[name], "transformer_block") == function_type(PROGRAMS["codegen"], "transformer_block")


@pytest.mark.parametrize("name", ["mixed", "mixed_gemm"])
def test_mixed_program_builds_from_the_command_line(tmp_path, name):
    """mixed from one spec; mixed_gemm from two (transformer.toml and gemm.toml), each module
    keeping its name; the vmfb alone is written (no MLIR asked for, so no objects folder)."""
    if name in NEEDS_GEMM and not have_gemm():
        pytest.skip("kernels/gemm.toml is not there yet")
    out = tmp_path / f"transformer_block_{name}.vmfb"
    cli = ROOT / ".venv" / "bin" / "iree-dispatch"
    cmd = [str(cli)] if cli.exists() else ["iree-dispatch"]
    specs = [str(SPEC), str(GEMM_SPEC)] if name in NEEDS_GEMM else [str(SPEC)]
    proc = subprocess.run([*cmd, "build", *specs, "--program", str(PROGRAMS[name]), "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert exported_functions(out) == {"transformer_block"}
    assert [p.name for p in tmp_path.iterdir()] == [out.name]
