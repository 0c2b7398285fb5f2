"""Pointers to CUDA vector types (float4, half2, uchar4, int2, ...): a vector pointer of shape
[n] is, for the caller, an array of its lane type with a trailing lanes dim, [n, 4]; vector
loads and stores give pointer roles like scalar ones (tests/kernels/vectors.cu; run on the GPU
by tests/frontend/test_gpu_templates.py)."""

from __future__ import annotations

import json
import re

from iree_dispatch.backend.pipeline import build
from iree_dispatch.backend.ptx_roles import pointer_uses
from iree_dispatch.core.dtypes import VECTOR_TYPES
from iree_dispatch.frontend.spec import KernelSpec

from ..support.artifacts.templates import VECTORS_CU, vectors_module
from ..support.environment import needs_build_tools


def _descriptions(mlir: str) -> dict[str, dict]:
    found = re.findall(r'iree_dispatch\.kernel = "((?:[^"\\]|\\.)*)"', mlir)
    return {d["function"]: d for d in (json.loads(json.loads(f'"{text}"')) for text in found)}


def test_vector_types_map_to_their_lanes():
    lanes = {name: (v.element, v.lanes, v.align) for name, v in VECTOR_TYPES.items()}
    assert lanes["float4"] == ("f32", 4, 16) and lanes["float3"] == ("f32", 3, 4) and lanes["double2"] == ("f64", 2, 16)
    assert lanes["half2"] == lanes["__half2"] == ("f16", 2, 4) and lanes["__nv_bfloat162"] == ("bf16", 2, 4)
    assert lanes["uchar4"] == ("ui8", 4, 4) and lanes["char4"] == ("i8", 4, 4) and lanes["short2"] == ("i16", 2, 4)
    assert lanes["int4"] == ("i32", 4, 16) and lanes["uint2"] == ("ui32", 2, 8) and lanes["double4_32a"] == ("f64", 4, 32)


def test_a_vector_pointers_shape_counts_vectors_and_the_caller_sees_the_lanes():
    kernel = KernelSpec.declare(VECTORS_CU, "scale_f4", block=128, grid="ceildiv(n, 128)", shape=["n"])
    x, y = kernel.tensors
    assert (x.dtype, [str(d) for d in x.shape], x.lanes, x.role) == ("f32", ["n", "4"], 4, "input")
    assert (y.dtype, [str(d) for d in y.shape], y.declared_shape) == ("f32", ["n", "4"], y.shape[:1])
    assert kernel.describe().inputs[0].shape == ("n", 4)
    again = kernel.with_outputs_in_place()  # declared again from the source: the lanes are not added twice
    assert [t.shape for t in again.tensors] == [x.shape, y.shape] and again.tensors[1].role == "inplace"
    # A template over a vector type substitutes it like any type.
    swapped = KernelSpec.declare(VECTORS_CU, "swap_lanes<__half2>", block=128, grid="ceildiv(n, 128)", shape=["n"])
    assert [(t.dtype, [str(d) for d in t.shape]) for t in swapped.tensors] == [("f16", ["n", "2"]), ("f16", ["n", "2"])]


def test_a_vector_scalar_is_a_struct_of_its_lanes(cu):
    source = cu('#include <cuda_fp16.h>\nextern "C" __global__ void k(float* x, half2 alpha, int n) {}\n')
    alpha = KernelSpec.declare(source, "k", block=64, grid=1, shape=["n"]).scalars[0].stype
    assert (alpha.kind, alpha.nbytes, alpha.align, alpha.slots) == ("struct", 4, 4, 1)
    assert [(f.name, f.stype.ctype, f.offset) for f in alpha.fields] == [("x", "__half", 0), ("y", "__half", 2)]


@needs_build_tools
def test_vector_kernels_build_with_lanes_as_a_trailing_dim_and_roles_from_vector_accesses(tmp_path):
    result = build(vectors_module(), tmp_path / "v.vmfb", emit_mlir=tmp_path / "v.mlir", cache=False)
    mlir = result.mlir.read_text()
    d = _descriptions(mlir)

    def io(function):
        return ([(t["name"], t["dtype"], t["shape"]) for t in d[function]["inputs"]],
                [(t["name"], t["dtype"], t["shape"], t["inplace"]) for t in d[function]["outputs"]])

    assert io("scale_f4") == ([("x", "f32", ["n", 4])], [("y", "f32", ["n", 4], False)])
    # half2* x, half2* y, non-const: x only read (an input), y read and written (in place).
    assert io("add_h2") == ([("x", "f16", ["n", 2]), ("y", "f16", ["n", 2])], [("y", "f16", ["n", 2], True)])
    assert io("invert_rgba") == ([("in", "ui8", ["n", 4])], [("out", "ui8", ["n", 4], False)])
    assert io("swap_lanes_int2") == ([("x", "i32", ["n", 2])], [("out", "i32", ["n", 2], False)])
    assert "func.func @scale_f4(%x: tensor<?x4xf32>, %a: f32) -> tensor<?x4xf32>" in mlir


@needs_build_tools
def test_vector_loads_and_stores_are_reads_and_writes(tmp_path):
    from iree_dispatch.core.archs import parse_arch
    from iree_dispatch.toolchains import select_toolchain

    ptx = select_toolchain("nvcc").compile_ptx(VECTORS_CU, parse_arch("sm_90"), tmp_path / "v.ptx").text()
    assert "ld.global.nc.v4.f32" in ptx and "st.global.v4.f32" in ptx
    uses = pointer_uses(ptx, "scale_f4")  # parameter index → use: x (0) only read, y (1) only written
    assert (uses[0].read_at > 0, uses[0].written_at > 0, uses[0].unknown) == (True, False, "")
    assert (uses[1].read_at > 0, uses[1].written_at > 0, uses[1].unknown) == (False, True, "")
