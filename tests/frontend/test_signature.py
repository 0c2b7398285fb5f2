"""Stage 1: reading kernel signatures out of .cu text."""

from pathlib import Path

import pytest

from iree_dispatch.core.errors import SignatureError
from iree_dispatch.frontend.signature import find_kernel, parse_kernels


def kernels(text):
    return {k.name: k for k in parse_kernels(text, Path("k.cu"))}


def test_pointers_scalars_and_qualifiers():
    k = kernels(
        'extern "C" __global__ void f(const float* __restrict__ a, float * const b,\n'
        "                             const __half* c, unsigned int n, float s) {}"
    )["f"]
    assert [(p.name, p.ctype, p.pointer, p.const) for p in k.params] == [
        ("a", "float", True, True),
        ("b", "float", True, False),  # T* const: the pointer is const, the data is not
        ("c", "__half", True, True),
        ("n", "unsigned int", False, False),
        ("s", "float", False, False),
    ]
    assert k.extern_c and not k.template and k.params[3].line == 2


def test_extern_block_launch_bounds_comments_and_lines():
    k = kernels(
        "// __global__ void commented_out(int x) {}\n"
        "/* __global__ void also_not(int) */\n"
        'extern "C" {\n'
        "__global__ void __launch_bounds__(256, 2)\n"
        "  g(int* out) { out[0] = 1; }\n"
        "}\n"
    )
    assert list(k) == ["g"]
    assert k["g"].extern_c and k["g"].launch_bounds == "256, 2" and k["g"].line == 4


def test_template_instantiations_substitute_types(cu):
    path = cu(
        "template <typename T, class U> __global__ void axpy(const T* x, U* y, T a, int n) {}\n"
        "template __global__ void axpy<float, double>(const float*, double*, float, int);\n"
        "__global__ void plain(float* x);  // a declaration: skipped, the definition follows\n"
        "__global__ void plain(float* x) {}\n"
    )
    k = find_kernel(path, "axpy<float, double>")
    assert [(p.name, p.ctype, p.pointer, p.const) for p in k.params] == [
        ("x", "float", True, True), ("y", "double", True, False), ("a", "float", False, False), ("n", "int", False, False)
    ]
    assert k.template and not k.extern_c and k.name == "axpy<float, double>"
    assert find_kernel(path, "plain").line == 4
    with pytest.raises(SignatureError, match="is a template; name an instantiation, e.g. axpy<float, float>"):
        find_kernel(path, "axpy")
    with pytest.raises(SignatureError, match="gives 1 template argument"):
        find_kernel(path, "axpy<float>")
    with pytest.raises(SignatureError, match="is not a template"):
        find_kernel(path, "plain<int>")


def test_cxx_and_template_kernels_are_flagged():
    k = kernels("__global__ void plain(int* x) {}\ntemplate <typename T> __global__ void scale(T* x) {}")
    assert not k["plain"].extern_c
    assert k["scale"].template


@pytest.mark.parametrize(
    "params, message",
    [
        ("float** x", "pointer to pointer"),
        ("int n, ...", "variadic"),
        ("float (&a)[4]", "not a plain pointer or scalar"),
        ("Vec<float> v", "template type"),
        ("float", "can't read parameter"),
    ],
)
def test_unmappable_parameters(params, message, cu):
    path = cu(f'extern "C" __global__ void k({params}) {{}}')
    with pytest.raises(SignatureError, match=message) as err:
        parse_kernels(path.read_text(), path)
    assert f"{path}:1" in str(err.value)


def test_missing_kernel_lists_the_ones_found(cu):
    path = cu('extern "C" __global__ void a(int* x) {}\nextern "C" __global__ void b(int* x) {}')
    with pytest.raises(SignatureError, match=r"no __global__ kernel named 'c' \(kernels found: a, b\)"):
        find_kernel(path, "c")


def test_overloaded_kernel_is_ambiguous(cu):
    path = cu("__global__ void k(int* x) {}\n__global__ void k(float* x) {}")
    with pytest.raises(SignatureError, match=r"declared 2 times \(line 1: k\(int\* x\); line 2: k\(float\* x\)\)"):
        find_kernel(path, "k")


def test_empty_and_non_utf8_and_missing_sources(tmp_path):
    empty = tmp_path / "empty.cu"
    empty.write_text("  \n")
    with pytest.raises(SignatureError, match="file is empty"):
        find_kernel(empty, "k")
    latin = tmp_path / "latin.cu"
    latin.write_bytes(b"// caf\xe9\n__global__ void k(int* x) {}")
    with pytest.raises(SignatureError, match=r"latin.cu:1: source is not valid UTF-8 \(byte 0xe9\)"):
        find_kernel(latin, "k")
    with pytest.raises(SignatureError, match="can't read kernel source"):
        find_kernel(tmp_path / "nope.cu", "k")
