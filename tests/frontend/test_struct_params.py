"""Structs and CUDA vector types passed by value (tests/kernels/structs.cu): the layout from the
compiler (padding, alignment, nested structs, arrays, vector fields), the PTX entry's check and
adaptation, the generated function and its description, the packing of a call's argument, and
the refusals. Run on the GPU by tests/frontend/test_gpu_struct_params.py."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from iree_dispatch.backend.abi import check_entry, ptx_entries
from iree_dispatch.backend.pipeline import build
from iree_dispatch.backend.ptx_adapt import adapt_entry
from iree_dispatch.core.contract import KernelDescription, ScalarDescription, decode, struct_argument
from iree_dispatch.core.errors import AbiError, SignatureError, SpecError
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec
from iree_dispatch.runtime import KernelFunction

from ..support.artifacts.structs import STRUCTS_CU, structs_module
from ..support.environment import needs_build_tools

pytestmark = needs_build_tools


def _fields(spec: KernelSpec, name: str) -> list[tuple[str, str, int]]:
    stype = next(s.stype for s in spec.scalars if s.name == name)
    return [(f.name, f.stype.ctype, f.offset) for f in stype.fields]


def test_the_layout_comes_from_the_compiler_with_padding_alignment_and_nesting():
    kernels = {k.name: k for k in structs_module().kernels}
    assert _fields(kernels["scale_shape"], "s") == [("m", "int", 0), ("n", "int", 4), ("alpha", "float", 8)]
    mixed = next(s.stype for s in kernels["mixed"].scalars if s.name == "p")
    assert (mixed.nbytes, mixed.align, mixed.slots) == (24, 8, 6)  # the double aligns the struct to 8, the tail is padded
    assert _fields(kernels["mixed"], "p") == [("negate", "bool", 0), ("offset", "short", 2), ("count", "int", 4), ("scale", "double", 8), ("bias", "unsigned char", 16)]
    assert _fields(kernels["nested"], "s") == [("pair.a", "int", 0), ("pair.b", "float", 4), ("dims[0]", "int", 8), ("dims[1]", "int", 12),
                                               ("dims[2]", "int", 16), ("shift.x", "float", 24), ("shift.y", "float", 28)]
    vectors = {s.name: (s.stype.nbytes, s.stype.align) for s in kernels["axpy_vectors"].scalars}
    assert vectors == {"ab": (8, 8), "h": (4, 4), "q": (16, 16), "n": (4, 0)}


def test_the_layout_is_the_same_through_nvrtc():
    from iree_dispatch.frontend.struct_layout import struct_type

    spec = next(k for k in structs_module().kernels if k.name == "mixed")
    param = spec.signature.params[0]
    by_nvrtc = struct_type(spec.signature, param, (), spec.types_resolved_with[1], "nvrtc")
    assert by_nvrtc == spec.scalars[0].stype


def test_grids_and_shapes_use_integer_fields_by_dotted_name():
    spec = next(k for k in structs_module().kernels if k.name == "scale_shape")
    assert [str(d) for d in spec.tensors[0].shape] == ["s.m", "s.n"] and spec.workloads == ("s.m", "s.n")
    with pytest.raises(SpecError, match=r"uses 's.alpha', which no input dim or integer argument defines"):
        KernelSpec.declare(STRUCTS_CU, "scale_shape", block=64, grid="s.alpha", shapes={"a": ["s.m", "s.n"], "c": ["s.m", "s.n"]})


def test_the_ptx_entry_is_checked_and_rebuilt_from_32_bit_words(tmp_path):
    result = build(structs_module(), tmp_path / "s.vmfb", emit_mlir=tmp_path / "s.mlir", cache=False)
    mlir = result.mlir.read_text()
    assert "func.func @scale_shape(%a: tensor<?x?xf32>, %s.w0: i32, %s.w1: i32, %s.w2: i32)" in mlir
    assert "func.func @mixed(%x: tensor<?xf64>, %p.w0: i32, %p.w1: i32, %p.w2: i32, %p.w3: i32, %p.w4: i32, %p.w5: i32)" in mlir
    # Every adapted entry takes 4-byte words after its pointers (a __grid_constant__ struct read through its address too).
    ptx = next(result.objects_dir.glob("*sm_90*.ptx")).read_text()
    mixed = ptx_entries(ptx)["mixed"]
    assert [p.nbytes for p in mixed.params] == [8, 8] + [4] * 7 and not re.search(r"\bmixed_param_0\b(?!__w)", ptx)
    descriptions = [decode(KernelDescription, json.loads(f'"{t}"'), "s") for t in re.findall(r'iree_dispatch\.kernel = "((?:[^"\\]|\\.)*)"', mlir)]
    s = next(d for d in descriptions if d.name == "scale_shape").scalars[0]
    assert s.signature() == "s: Shape {m: int @0, n: int @4, alpha: float @8}" and s.words == 3


def test_a_ptx_entry_with_another_alignment_is_refused():
    spec = next(k for k in structs_module().kernels if k.name == "scale_shape")
    ptx = ".visible .entry scale_shape(\n.param .u64 a,\n.param .u64 c,\n.param .align 8 .b8 s[12]\n)\n{\nret;\n}\n"
    with pytest.raises(AbiError, match=r"parameter 2 's': the compiler laid Shape out aligned to 4 bytes, but the PTX entry aligns it to 8"):
        check_entry(spec, "scale_shape", ptx, "sm_90")


def test_a_struct_whose_address_is_used_otherwise_is_refused():
    spec = next(k for k in structs_module().kernels if k.name == "scale_shape")
    ptx = (".visible .entry scale_shape(\n.param .u64 a,\n.param .u64 c,\n.param .align 4 .b8 s[12]\n)\n{\n.reg .b64 %rd<3>;\n"
           "mov.b64 %rd1, s;\nst.global.u64 [%rd2], %rd1;\nret;\n}\n")
    with pytest.raises(AbiError, match=r"uses Shape parameter 's' other than by loading its fields"):
        adapt_entry(ptx, spec, "scale_shape", "k")


def test_field_loads_map_onto_words():
    spec = next(k for k in structs_module().kernels if k.name == "mixed")
    ptx = (".visible .entry mixed(\n.param .align 8 .b8 p[24],\n.param .u64 x,\n.param .u64 y,\n.param .u32 n\n)\n{\n"
           "ld.param.v4.u8 {%rs1, %rs2, %rs3, %rs4}, [p+16];\nld.param.f64 %fd1, [p+8];\nld.param.u16 %rs5, [p+2];\nret;\n}\n")
    adapted = adapt_entry(ptx, spec, "mixed", "k")
    assert "ld.param.u8 %rs1, [p__w4]; ld.param.u8 %rs2, [p__w4+1];" in adapted and "ld.param.u16 %rs5, [p__w0+2];" in adapted
    assert "ld.param.u32 %iree_dispatch_lo, [p__w2]; ld.param.u32 %iree_dispatch_hi, [p__w3]; mov.b64 %fd1" in adapted
    assert [p.nbytes for p in ptx_entries(adapted)["mixed"].params] == [8, 8] + [4] * 7


def _description(name: str) -> KernelDescription:
    spec = next(k for k in structs_module().kernels if k.name == name)
    return spec.describe()


def test_a_struct_parameter_leaves_the_loads_of_parameters_whose_names_it_prefixes(cu, tmp_path):
    # The struct is parameter 1, so its PTX name (k_param_1) begins parameter 10's (k_param_10).
    pointers = ", ".join(f"const float* p{i}" for i in range(2, 10))
    source = cu(f"""struct S {{ int a; int b; }};
extern "C" __global__ void k(const float* p0, S s, {pointers}, float* out, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = p0[i] + p2[i] + p9[i] + s.a + s.b;
}}""")
    spec = KernelSpec.declare(source, "k", block=64, grid="ceildiv(n, 64)", shape=["n"])
    result = build(ModuleSpec("prefixes", (spec,)), tmp_path / "k.vmfb", cache=False)
    ptx = next(result.objects_dir.glob("*sm_90*.ptx")).read_text()
    assert re.search(r"ld\.param\.u64\s+%rd\d+, \[k_param_10\];", ptx), "the output pointer's load was rewritten"
    assert "k_param_1__w0" in ptx and not re.search(r"\bk_param_1\b(?!__w)", ptx)


def test_a_call_packs_the_fields_bytes_from_a_dict_a_structured_scalar_or_lanes():
    rng = np.random.default_rng(7)
    scale = KernelFunction(_description("scale_shape"), lambda *a: None, device=None)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    alpha = float(rng.standard_normal())
    words = scale.check(a, {"m": 3, "n": 5, "alpha": alpha})[1:]
    assert words == [3, 5, int(np.array(alpha, np.float32).view(np.int32))]
    record = np.array((3, 5, alpha), np.dtype({"names": ["m", "n", "alpha"], "formats": ["<i4", "<i4", "<f4"]}))
    assert scale.check(a, record)[1:] == words and scale.check(a, record[()])[1:] == words
    mixed = _description("mixed").scalars[0]
    packed, ints = struct_argument("mixed", mixed, {"negate": True, "offset": -2, "count": 9, "scale": 0.25, "bias": 200})
    raw = np.array(packed, np.int32).tobytes()
    layout = np.dtype({"names": ["negate", "offset", "count", "scale", "bias"], "formats": ["?", "<i2", "<i4", "<f8", "u1"], "offsets": [0, 2, 4, 8, 16],
                       "itemsize": 24})
    assert np.frombuffer(raw, layout)[0].tolist() == (True, -2, 9, 0.25, 200) and ints == {"p.negate": 1, "p.offset": -2, "p.count": 9, "p.bias": 200}
    vectors = KernelFunction(_description("axpy_vectors"), lambda *a: None, device=None)
    lanes = vectors.check(np.ones(4, np.float32), np.array([1.5, -2.0], np.float32), (1.0, 0.5), {"x": 1, "y": 2, "z": 3, "w": -4})[1:]
    assert lanes[:2] == [int(np.array(v, np.float32).view(np.int32)) for v in (1.5, -2.0)]
    assert lanes[2] == int(np.array([1.0, 0.5], np.float16).view(np.int32)[0]) and lanes[3:] == [1, 2, 3, -4]


def test_a_call_refuses_missing_unknown_and_out_of_range_fields():
    scale = KernelFunction(_description("scale_shape"), lambda *a: None, device=None)
    a = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"argument 's' \(Shape\) is missing field 'alpha'; its fields are m, n, alpha"):
        scale.check(a, {"m": 2, "n": 3})
    with pytest.raises(ValueError, match=r"has no field 'k'"):
        scale.check(a, {"m": 2, "n": 3, "alpha": 1.0, "k": 1})
    with pytest.raises(ValueError, match=r"argument 's.m' \(int\) = 2147483648 is out of range"):
        scale.check(a, {"m": 2**31, "n": 3, "alpha": 1.0})
    with pytest.raises(ValueError, match=r"s.m = 4, but the size s.m is 2 \(from a dim 0\)"):
        scale.check(a, {"m": 4, "n": 3, "alpha": 1.0})
    with pytest.raises(TypeError, match=r"must be a dict of its fields \(m, n, alpha\)"):
        scale.check(a, 3)


def test_descriptions_round_trip_their_fields():
    d = _description("nested")
    again = KernelDescription.from_dict(json.loads(json.dumps(d.to_dict())))
    assert again == d and again.scalars[0].fields[2] == (ScalarDescription("dims[0]", "int", "int", 4), 8)


def test_refusals_name_the_field_or_the_limit(cu):
    pointer = cu('struct P { const float* x; int n; };\nextern "C" __global__ void k(float* out, P p, int n) {}\n')
    with pytest.raises(SignatureError, match=r"field 'x' of struct P is a pointer \(float const\*\); a pointer inside a struct can't be an IREE binding"):
        KernelSpec.declare(pointer, "k", block=64, grid=1, shape=["n"])
    big = cu('struct P { int v[62]; };\nextern "C" __global__ void k(float* out, P p, double d, int n) {}\n')
    with pytest.raises(SpecError, match=r"the scalar parameters need 65 32-bit push constants \(64-bit values take two, a struct its bytes' words\), but IREE allows at most 64"):
        KernelSpec.declare(big, "k", block=64, grid=1, shape=["n"], scalars={})
    computed = cu('struct P { int m; };\nextern "C" __global__ void k(float* out, P p, int n) {}\n')
    with pytest.raises(SpecError, match=r"scalars.p: a P is passed by the caller, not computed from sizes"):
        KernelSpec.declare(computed, "k", block=64, grid=1, shape=["n"], scalars={"p": "n"})
