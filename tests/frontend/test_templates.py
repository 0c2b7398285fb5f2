"""Template kernels taken unchanged from real sources: non-type parameters, defaults, no
explicit instantiation (the build instantiates the named one), a source that instantiates its
own, a relative #include, both toolchains (tests/kernels/templates/; run on the GPU by
tests/frontend/test_gpu_templates.py)."""

from __future__ import annotations

import json
import re

import pytest

from iree_dispatch.backend.pipeline import build
from iree_dispatch.core.errors import DispatchError, SignatureError
from iree_dispatch.frontend.cxx_names import same_template_arguments, template_argument
from iree_dispatch.frontend.signature import find_kernel
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

from ..support.artifacts.templates import EXPLICIT_CU, REDUCE_CU, templates_module
from ..support.environment import needs_build_tools


def _descriptions(mlir: str) -> dict[str, dict]:
    found = re.findall(r'iree_dispatch\.kernel = "((?:[^"\\]|\\.)*)"', mlir)
    return {d["function"]: d for d in (json.loads(json.loads(f'"{text}"')) for text in found)}


def _signature(d: dict) -> list[str]:
    return [f"{t['name']}:{t['dtype']}{t['shape']}" for t in d["inputs"]] + [f"{s['name']}:{s['ctype']}" for s in d["scalars"]] + [
        f"->{t['name']}:{t['dtype']}{t['shape']}{'(inplace)' if t['inplace'] else ''}" for t in d["outputs"]
    ]


def test_template_parameters_and_defaults_are_read():
    reduce = find_kernel(REDUCE_CU, "reduce<float, 256, false>")
    assert [str(t) for t in reduce.template_params] == ["class T", "unsigned int blockSize", "bool nIsPow2"]
    assert [(p.name, p.ctype, p.pointer) for p in reduce.params] == [("g_idata", "float", True), ("g_odata", "float", True), ("n", "unsigned int", False)]
    assert find_kernel(REDUCE_CU, "add_n<float>").name == "add_n<float, 4>"  # the default, as the compiler's name spells it
    assert find_kernel(REDUCE_CU, "add_n< double , 2 >").params[0].ctype == "double"
    assert find_kernel(REDUCE_CU, "scale_tiles").name == "scale_tiles<256>"  # every parameter defaulted


@pytest.mark.parametrize(
    "name, message",
    [
        ("reduce<float, 256>", r"'reduce<float, 256>' gives 2 template argument\(s\); reduce has 3 \(template <class T, unsigned int blockSize, "
                               r"bool nIsPow2>\); nIsPow2 has no default"),
        ("add_n<float, 1, 2>", r"gives 3 template argument\(s\); add_n has 2 \(template <class T, int N = 4>\)"),
        ("reduce", r"kernel reduce is a template; name an instantiation, e\.g\. reduce<float, 256, false> \(template <class T, unsigned int blockSize, bool nIsPow2>\)"),
        ("add_n<float; int x>", r"has ';', which no template argument needs"),
        ("add_n<float", r"has no closing '>'"),
    ],
)
def test_bad_instantiations_are_refused_by_name(name, message):
    with pytest.raises(SignatureError, match=message):
        find_kernel(REDUCE_CU, name)


def test_a_parameter_type_that_depends_on_a_non_type_parameter_is_refused(cu):
    source = cu("template <int N> __global__ void k(N* x) {}\n")
    with pytest.raises(SignatureError, match=r"parameter 'x' has a type that depends on the non-type template parameter 'N'"):
        find_kernel(source, "k<4>")


def test_constants_match_as_the_demangler_prints_them():
    assert [template_argument(a) for a in ("256u", "0x100", "256", "(bool)0", "false", "(char)97", "'a'", "5ul", "-3l")] == [
        "256", "256", "256", "0", "0", "97", "97", "5", "-3"]
    assert same_template_arguments("float, 256u, false", ["float", "256", "false"])
    assert not same_template_arguments("float, 128u, true", ["float", "256", "false"])
    assert not same_template_arguments("float, 256u", ["float", "256", "false"])


@needs_build_tools
@pytest.mark.parametrize("toolchain", ["nvcc", "nvrtc"])
def test_named_instantiations_are_built_without_an_edit_to_the_source(tmp_path, toolchain):
    result = build(templates_module(), tmp_path / "t.vmfb", emit_mlir=tmp_path / "t.mlir", toolchain=toolchain, cache=False)
    mlir = result.mlir.read_text()
    d = _descriptions(mlir)
    assert _signature(d["reduce_float_256_false"]) == ["g_idata:f32['n']", "->g_odata:f32['ceildiv(n, 512)']"]
    assert _signature(d["reduce_float_128_true"]) == ["g_idata:f32['n']", "->g_odata:f32['ceildiv(n, 256)']"]
    assert _signature(d["add_n_float"]) == ["x:f32['n']", "->y:f32['n']"]
    assert _signature(d["add_n_int_7"]) == ["x:i32['n']", "->y:i32['n']"]
    assert _signature(d["scale_tiles"]) == ["x:f32['n']", "s:float", "->y:f32['n']"]
    assert _signature(d["scale_tiles_128"]) == ["x:f32['n']", "s:float", "->y:f32['n']"]
    assert _signature(d["shift_float_3"]) == ["x:f32['n']", "->y:f32['n']"]
    assert _signature(d["shift_int_5"]) == ["x:i32['n']", "->y:i32['n']"]
    # Each function dispatches its own instantiation, told apart by the constants alone where the types agree.
    entries = {function: description["launch"]["entry"] for function, description in d.items()}
    assert entries == {
        "reduce_float_256_false": "_Z6reduceIfLj256ELb0EEvPT_S1_j", "reduce_float_128_true": "_Z6reduceIfLj128ELb1EEvPT_S1_j",
        "add_n_float": "_Z5add_nIfLi4EEvPKT_PS0_i", "add_n_int_7": "_Z5add_nIiLi7EEvPKT_PS0_i",
        "scale_tiles": "_Z11scale_tilesILi256EEvPKfPffi", "scale_tiles_128": "_Z11scale_tilesILi128EEvPKfPffi",
        "shift_float_3": "_Z5shiftIfLi3EEvPKT_PS0_i", "shift_int_5": "_Z5shiftIiLi5EEvPKT_PS0_i",
    }


@needs_build_tools
@pytest.mark.parametrize("toolchain", ["nvcc", "nvrtc"])
def test_a_relative_include_resolves_beside_the_source_and_is_a_dependency(tmp_path, toolchain):
    folder = tmp_path / "my kernels"  # a space: nvcc sees the source only through its private link
    (folder / "inc").mkdir(parents=True)
    (folder / "inc" / "offset.h").write_text("#define OFFSET 3\n")
    source = folder / "k.cu"
    source.write_text('#include "inc/offset.h"\ntemplate <typename T, int N>\n'
                      "__global__ void k(const T* x, T* y, int n) { int i = threadIdx.x; if (i < n) y[i] = x[i] + N + OFFSET; }\n")
    kernel = KernelSpec.declare(source, "k<float, 2>", block=64, grid=1, shape=["n"])
    result = build(ModuleSpec("m", (kernel,)), tmp_path / "m.vmfb", toolchain=toolchain, cache=False)
    assert folder / "inc" / "offset.h" in result.dependencies and source in result.dependencies


@needs_build_tools
@pytest.mark.parametrize("toolchain", ["nvcc", "nvrtc"])
def test_a_non_type_argument_of_the_wrong_kind_is_the_compilers_message_said_of_the_kernel(tmp_path, toolchain):
    kernel = KernelSpec.declare(REDUCE_CU, "add_n<float, 2.5>", block=64, grid="ceildiv(n, 64)", shape=["n"])
    with pytest.raises(DispatchError) as err:
        build(ModuleSpec("m", (kernel,)), tmp_path / "m.vmfb", toolchain=toolchain, cache=False)
    message = str(err.value)
    assert message.startswith(f"{REDUCE_CU}:30: kernel add_n<float, 2.5>: the compiler can't instantiate add_n<float, 2.5> (template <class T, int N = 4>)")
    assert "error" in message


@needs_build_tools
def test_the_explicit_instantiation_of_a_source_is_not_repeated(tmp_path):
    kernel = KernelSpec.declare(EXPLICIT_CU, "shift<float, 3>", block=64, grid="ceildiv(n, 64)", shape=["n"])
    result = build(ModuleSpec("m", (kernel,)), tmp_path / "m.vmfb", emit_mlir=tmp_path / "m.mlir", cache=False)
    assert "_Z5shiftIfLi3EEvPKT_PS0_i" in result.mlir.read_text()
