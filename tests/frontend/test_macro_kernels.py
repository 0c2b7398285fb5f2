"""Kernels a macro defines: the signature reader doesn't expand macros, so the spec declares
their C signature (`signature = "void k(...)"`) and the build checks it against the entry nvcc
compiled; a kernel the reader does see can't be declared twice."""

from __future__ import annotations

import pytest

from iree_dispatch.backend.pipeline import build
from iree_dispatch.core.errors import DispatchError
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

from ..support.environment import needs_build_tools

MACRO_SOURCE = """
#define SCALE_KERNEL(NAME, T) \\
  extern "C" __global__ void NAME(const T* x, T* out, int n) { \\
    int i = blockIdx.x * blockDim.x + threadIdx.x; \\
    if (i < n) out[i] = x[i] * T(2); \\
  }
SCALE_KERNEL(scale_f32, float)
SCALE_KERNEL(scale_f64, double)
"""


def declare(cu, name: str, signature: str | None) -> KernelSpec:
    return KernelSpec.declare(cu(MACRO_SOURCE), name, block=64, grid="ceildiv(n, 64)", shape=["n"], signature=signature)


def test_without_a_signature_the_error_says_how_to_declare_one(cu):
    with pytest.raises(DispatchError, match=r"no __global__ kernel named 'scale_f32'.*if a macro defines it.*signature = \"void scale_f32\(\.\.\.\)\""):
        declare(cu, "scale_f32", None)


def test_declared_signature_gives_the_abi(cu):
    kernel = declare(cu, "scale_f64", "void scale_f64(const double* x, double* out, int n)")
    assert [t.name for t in kernel.inputs] == ["x"] and [t.name for t in kernel.outputs] == ["out"]
    assert kernel.inputs[0].dtype == "f64"


def test_a_kernel_the_reader_sees_may_be_declared_if_the_declaration_agrees(cu):
    path = cu('typedef float real;\nextern "C" __global__ void k(real* out, int n) {}\n')
    kernel = KernelSpec.declare(path, "k", block=64, grid="n", shape=["n"], signature="void k(float* out, int n)")
    assert kernel.outputs[0].dtype == "f32" and kernel.signature.extern_c and kernel.signature.line == 2
    with pytest.raises(DispatchError, match=r"k\.cu:2: kernel k: signature 'void k\(float\* out\)' disagrees with the source's parameters \(out\*, n\)"):
        KernelSpec.declare(path, "k", block=64, grid="n", shape=["n"], signature="void k(float* out)")


@needs_build_tools
def test_builds_and_a_wrong_signature_is_caught_against_the_ptx(cu, tmp_path):
    good = declare(cu, "scale_f32", "void scale_f32(const float* x, float* out, int n)")
    assert build(ModuleSpec("macros", (good,)), tmp_path / "ok" / "macros.vmfb").vmfb.stat().st_size > 0
    # One parameter too few: the compiled entry has three.
    wrong = declare(cu, "scale_f32", "void scale_f32(const float* x, float* out)")
    with pytest.raises(DispatchError, match=r"scale_f32"):
        build(ModuleSpec("macros", (wrong,)), tmp_path / "bad" / "macros.vmfb")


def test_outputs_in_place_keep_the_declared_signature(cu):
    kernel = declare(cu, "scale_f32", "void scale_f32(const float* x, float* out, int n)").with_outputs_in_place()
    assert [t.role for t in kernel.tensors] == ["input", "inplace"] and kernel.signature.declared
