"""Input that used to be accepted silently or refused unclearly: divisors that are always or
sometimes zero, constants beyond 64 bits, arch flags in nvcc_flags, floating scalars beyond
their type, spec files with a byte-order mark or in another encoding, a list as a .cu source,
variadic templates and macros that define kernels."""

from __future__ import annotations

import math

import pytest

from iree_dispatch.backend.pipeline import build
from iree_dispatch.core.contract import ScalarDescription, scalar_argument
from iree_dispatch.core.errors import DispatchError, SpecError
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec
from iree_dispatch.frontend.spec_file import load_spec

from ..support.environment import needs_build_tools

TWO = 'extern "C" __global__ void mul(const float* a, const float* b, float* out, int n, int m) {}\n'


def _declare(cu, **kw):
    kw.setdefault("shapes", {"a": ["n"], "b": ["m"], "out": ["n"]})
    return KernelSpec.declare(cu(TWO), "mul", block=64, **kw)


@pytest.mark.parametrize("grid", ["n % (n - n)", "n // (n * 0)", "ceildiv(n, n % 1)", "n // (2 * n - n - n)"])
def test_a_divisor_zero_for_every_size_is_refused(cu, grid):
    with pytest.raises(SpecError, match=r"divides by zero \(.* is 0 for every size\)"):
        _declare(cu, grid=grid)


@needs_build_tools
def test_a_divisor_zero_for_some_sizes_is_checked_at_run_time(cu, tmp_path):
    kernel = _declare(cu, grid="n // (m - n)", shapes={"a": ["n"], "b": ["m"], "out": ["n // (m - n)"]})
    result = build(ModuleSpec("m", (kernel,)), tmp_path / "m.vmfb", emit_mlir=tmp_path / "m.mlir", cache=False)
    text = result.mlir.read_text()
    assert "grid[0] = (n // (m - n)) divides by (m - n), which is 0 for these sizes" in text
    assert "output out dim 0 = (n // (m - n)) divides by (m - n)" in text


@pytest.mark.parametrize("grid", ["99999999999999999999", "ceildiv(n, 99999999999999999999)", 2**64])
def test_constants_beyond_64_bits_are_refused(cu, grid):
    with pytest.raises(SpecError, match=r"doesn't fit a 64-bit size"):
        _declare(cu, grid=grid)


@pytest.mark.parametrize("flags", [("-arch=sm_75",), ("-arch", "sm_75"), ("--gpu-architecture=sm_75",), ("-gencode", "arch=compute_75,code=sm_75"), ("-code=sm_75",)])
def test_arch_flags_in_nvcc_flags_are_refused(cu, flags):
    with pytest.raises(SpecError, match=r"choose the target architecture.*\[module\] archs"):
        ModuleSpec("m", (_declare(cu, grid="n"),), nvcc_flags=flags)


def test_other_flags_are_kept(cu):
    assert ModuleSpec("m", (_declare(cu, grid="n"),), nvcc_flags=("-lineinfo", "-DARCH_X=1")).nvcc_flags == ("-lineinfo", "-DARCH_X=1")


@pytest.mark.parametrize(
    "kind, ctype, nbytes, value",
    [("float", "float", 4, 1e40), ("float", "float", 4, -3.5e38), ("half", "__half", 2, 65520.0), ("bf16", "__nv_bfloat16", 2, 1e39)],
)
def test_finite_floats_that_would_arrive_as_infinity_are_refused(kind, ctype, nbytes, value):
    with pytest.raises(ValueError, match=r"out of the range of"):
        scalar_argument("k", ScalarDescription("x", ctype, kind, nbytes), value)


@pytest.mark.parametrize("kind, ctype, nbytes, value", [("float", "float", 4, 3.4e38), ("half", "__half", 2, 65519.0), ("float", "float", 4, math.inf)])
def test_floats_in_range_and_infinities_pass(kind, ctype, nbytes, value):
    scalar_argument("k", ScalarDescription("x", ctype, kind, nbytes), value)


SPEC = '[module]\nname = "m"\n[[kernel]]\nname = "mul"\nsource = "k.cu"\nblock = [64]\ngrid = ["n"]\nshape = ["n"]\n'


def test_a_spec_with_a_byte_order_mark_loads(tmp_path):
    (tmp_path / "k.cu").write_text('extern "C" __global__ void mul(const float* a, float* out, int n) {}\n')
    (tmp_path / "k.toml").write_bytes(b"\xef\xbb\xbf" + SPEC.encode())
    assert load_spec(tmp_path / "k.toml").kernels[0].name == "mul"


def test_a_spec_not_in_utf8_names_the_file_and_line(tmp_path):
    (tmp_path / "k.toml").write_bytes(b'[module]\nname = "m\xe9"\n')
    with pytest.raises(SpecError, match=r"k\.toml:2: spec is not valid UTF-8 \(byte 0xe9\)"):
        load_spec(tmp_path / "k.toml")


def test_a_list_of_cu_sources_says_what_a_list_is_for(tmp_path):
    (tmp_path / "k.cu").write_text('extern "C" __global__ void mul(const float* a, float* out, int n) {}\n')
    (tmp_path / "k.toml").write_text(SPEC.replace('source = "k.cu"', 'source = ["k.cu"]'))
    with pytest.raises(SpecError, match=r'source is a list, which is for prebuilt object files .* source = "k\.cu"'):
        load_spec(tmp_path / "k.toml")


VARIADIC_AND_MACRO = """
template <typename... Ts> __global__ void vk(float* out, Ts... args) {}
template __global__ void vk<int, float>(float*, int, float);
#define DEFINE_KERNEL(name) \\
  extern "C" __global__ void name(float* out, int n) { }
DEFINE_KERNEL(made)
extern "C" __global__ void plain(float* out, int n) {}
"""


def test_a_variadic_template_is_refused_with_what_to_do(cu):
    with pytest.raises(DispatchError, match=r"kernel vk is a variadic template.*extern \"C\" kernel"):
        KernelSpec.declare(cu(VARIADIC_AND_MACRO), "vk<int, float>", block=64, grid="n", shape=["n"])


def test_a_kernel_inside_a_macro_is_not_a_kernel_of_the_file(cu):
    path = cu(VARIADIC_AND_MACRO)
    with pytest.raises(DispatchError, match=r"no __global__ kernel named 'name' \(kernels found: plain, vk\)"):
        KernelSpec.declare(path, "name", block=64, grid="n", shape=["n"])
    assert KernelSpec.declare(path, "plain", block=64, grid="n", shape=["n"]).signature.line == 7
    made = KernelSpec.declare(path, "made", block=64, grid="n", shape=["n"], signature="void made(float* out, int n)")
    assert made.signature.declared


@needs_build_tools
def test_a_program_checks_size_dependent_divisors_at_entry(cu, tmp_path):
    from iree_dispatch.backend.program import Program

    kernel = _declare(cu, grid="n // (m - n)")
    p = Program("divides")
    a, b = p.input("a", "f32", ["n"]), p.input("b", "f32", ["m"])
    p.output(p.call(kernel, a, b))
    assert "(m - n) != 0: program divides: call 0 to mul: grid[0] = (n // (m - n)) divides by (m - n), which is 0 for these sizes" in p.entry_checks()
    static = Program("static")
    a, b = static.input("a", "f32", [4]), static.input("b", "f32", [4])
    with pytest.raises(ValueError, match=r"grid\[0\] = \(n // \(m - n\)\) divides by \(m - n\), which is 0 for these sizes"):
        static.call(kernel, a, b)
