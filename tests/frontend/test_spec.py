"""KernelSpec / ModuleSpec: one model from the C signature plus the spec; every bad declaration
is a SpecError that names the file, the kernel and what to change."""

import pytest

from iree_dispatch.core.archs import parse_arch, parse_archs
from iree_dispatch.core.errors import DispatchError, SpecError
from iree_dispatch.frontend.spec import KernelSpec
from iree_dispatch.frontend.spec_file import load_spec

from ..support.environment import SAMPLES_SPEC

MUL = 'extern "C" __global__ void mul(const float* a, const float* b, float* out, int n) {}\n'


def declare(path, name="mul", **kw):
    kw.setdefault("block", [64])
    kw.setdefault("grid", "ceildiv(n, 64)")
    kw.setdefault("shape", ["n"])
    return KernelSpec.declare(path, name, **kw)


def test_samples_spec_loads():
    spec = load_spec(SAMPLES_SPEC)
    assert spec.name == "samples"
    assert [a.name for a in spec.archs] == ["sm_90", "sm_80"]  # newest first
    by_name = {k.name: k for k in spec.kernels}
    mul = by_name["simple_mul"]
    assert [t.role for t in mul.tensors] == ["input", "input", "output"]
    assert [t.dtype for t in mul.tensors] == ["f32"] * 3
    assert mul.scalars[0].value is not None and not mul.scalar_args  # n comes from the shapes
    assert mul.workloads == ("n",) and mul.block == (64, 1, 1)
    assert [t.role for t in by_name["simple_mul_inplace"].tensors] == ["input", "inplace"]
    assert [s.name for s in by_name["axpby"].scalar_args] == ["alpha", "beta"]


def test_derived_dims_scalars_and_3d_grid(cu):
    path = cu('extern "C" __global__ void t(const float* x, float* y, int rows, int cols, unsigned pad) {}')
    k = KernelSpec.declare(
        path, "t", block=[16, 16], grid=["ceildiv(cols, 16)", "ceildiv(rows, 16)"],
        shapes={"x": ["rows", "cols"], "y": ["cols + pad", "rows"]},
    )
    assert k.block == (16, 16, 1) and str(k.grid[2]) == "1"
    assert [s.name for s in k.scalar_args] == ["pad"]  # rows/cols come from x's shape
    assert k.workloads == ("cols", "rows")


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"block": None}, "missing block size"),
        ({"block": [0]}, "block must be 1 to 3 positive integers"),
        ({"block": [32, 32, 2]}, "2048 threads; CUDA allows at most 1024"),
        ({"grid": None}, "missing grid"),
        ({"grid": "ceildiv(m, 64)"}, "uses 'm', which no input dim or integer argument defines"),
        ({"grid": "n // 0"}, "divides by zero"),
        ({"grid": ["1", "1", "1", "1"]}, "1 to 3 expressions"),
        ({"shape": None}, "pointer parameter 'a' needs a shape"),
        ({"shape": "n"}, "must be a non-empty list"),
        ({"shapes": {"n": ["n"]}}, r"shapes names 'n', but the signature declares it as a scalar \(int\)"),
        ({"scalars": {"a": "n"}}, r"scalars names 'a', but the signature declares it as a pointer"),
        ({"shapes": {"q": ["n"]}}, "shapes names 'q', which is not a parameter"),
        ({"inplace": ["a"]}, "points to const data, so it can't be in-place"),
        ({"shapes": {"a": ["2 * n"]}}, "input dims must be a name or an integer"),
        ({"shapes": {"out": ["k"]}, "outputs": ["out"]}, "output 'out' dim 0"),
    ],
)
def test_bad_declarations(kw, message, cu):
    path = cu(MUL)
    with pytest.raises(SpecError, match=message) as err:
        declare(path, **kw)
    assert str(path) in str(err.value) and "mul" in str(err.value)


@pytest.mark.parametrize(
    "source, message",
    [
        ('extern "C" __global__ void mul(const float* a, int n) {}', "writes no tensor"),
        ('extern "C" __global__ void mul(float* out, long double n) {}', "has type 'long double'; scalars may be bool"),
        ('extern "C" __global__ void mul(my_t* out, int n) {}', "compiling the source to resolve it as an alias failed"),
    ],
)
def test_signatures_that_cannot_be_dispatched(source, message, cu):
    with pytest.raises(DispatchError, match=message):
        declare(cu(source))


def test_binding_and_constant_limits(cu):
    ptrs = ", ".join(f"float* p{i}" for i in range(17))
    with pytest.raises(SpecError, match="17 pointer parameters, but IREE's CUDA HAL allows at most 16 bindings"):
        declare(cu(f'extern "C" __global__ void mul({ptrs}, int n) {{}}'))
    ints = ", ".join(f"int s{i}" for i in range(64))
    with pytest.raises(SpecError, match=r"need 65 32-bit push constants \(64-bit values take two, a struct its bytes. words\), but IREE allows at most 64"):
        declare(cu(f'extern "C" __global__ void mul(float* out, {ints}, int n) {{}}'))
    longs = ", ".join(f"long long s{i}" for i in range(32))
    with pytest.raises(SpecError, match="need 65 32-bit push constants"):
        declare(cu(f'extern "C" __global__ void mul(float* out, {longs}, int n) {{}}'))


@pytest.mark.parametrize("text", ["sm80x", "compute_80", "sm_", "sm_3", "", "hopper"])
def test_malformed_archs(text):
    with pytest.raises(SpecError, match="malformed CUDA architecture|older than sm_50"):
        parse_arch(text)


def test_arch_forms_and_order():
    assert [a.name for a in parse_archs("80,sm_100,sm90a,90,sm_86")] == ["sm_100", "sm_90a", "sm_90", "sm_86", "sm_80"]
    assert parse_arch(90).runs_on(10, 0) and not parse_arch("sm_90a").runs_on(10, 0) and not parse_arch("sm_100").runs_on(9, 0)


def test_spec_file_errors(tmp_path, cu):
    cu(MUL, "mul.cu")
    cases = {
        "[module]\nname='m'\n": "no \\[\\[kernel\\]\\] tables",
        "[[kernel]]\nname='mul'\nsource='mul.cu'\nblok=[64]\n": r"unknown keys \['blok'\]",
        "[[kernel]]\nname='mul'\nblock=[64]\n": "missing 'source'",
        "[[kernel]\n": "invalid TOML",
        "[module]\nname='m'\narchs=['sm_8x']\n[[kernel]]\nname='mul'\nsource='mul.cu'\nblock=[64]\ngrid=['n']\nshape=['n']\n": "malformed CUDA architecture",
        "[module]\nname='bad name'\n[[kernel]]\nname='mul'\nsource='mul.cu'\nblock=[64]\ngrid=['n']\nshape=['n']\n": "must be an identifier",
    }
    for i, (text, message) in enumerate(cases.items()):
        spec = tmp_path / f"s{i}.toml"
        spec.write_text(text)
        with pytest.raises(SpecError, match=message):
            load_spec(spec)
