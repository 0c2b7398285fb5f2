"""Bad input → the exact error users see. Each case is a test (tests/core/test_error_matrix.py) and
a row of docs/errors.md, generated from the same table so the docs quote real messages:

    python -m tests.support.error_matrix > docs/errors.md
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import iree_dispatch
from iree_dispatch.core.contract import REFLECTION_KEY, FunctionDescription, Requirement, ScalarDescription, TensorDescription, read_description
from iree_dispatch.core.errors import ContractError, DispatchError
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec
from iree_dispatch.frontend.spec_file import load_spec
from iree_dispatch.runtime import KernelFunction
from iree_dispatch.runtime.multi_device import check_device_count

MUL = 'extern "C" __global__ void mul(const float* a, const float* b, float* out, int n) {}\n'
TWO_DEVICES = ("--iree-compile-arg=--iree-hal-target-device=gpu0=cuda[0]", "--iree-compile-arg=--iree-hal-target-device=gpu1=cuda[1]")
READS_A = 'extern "C" __global__ void mul(float* a, float* out, int n) { out[threadIdx.x] = a[threadIdx.x]; }'


@dataclass(frozen=True)
class Case:
    title: str
    run: Callable[[Path], object]  # given a scratch folder; must raise
    error: type[Exception]
    needs_build_tools: bool = False


def _cu(folder: Path, text: str | bytes, name: str = "k.cu") -> Path:
    path = folder / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def _declare(folder: Path, source: str | bytes, name: str = "mul", **kw) -> KernelSpec:
    kw.setdefault("block", 64)
    kw.setdefault("grid", "ceildiv(n, 64)")
    kw.setdefault("shape", ["n"])
    return KernelSpec.declare(_cu(folder, source), name, **kw)


def _build(folder: Path, source: str, name: str = "mul", flags: tuple[str, ...] = (), toolchain: str | None = None, **kw) -> None:
    from iree_dispatch.backend.pipeline import build

    build(ModuleSpec("m", (_declare(folder, source, name, **kw),), nvcc_flags=flags), folder / "m.vmfb", toolchain=toolchain)


def _spec_file(folder: Path, text: str) -> None:
    _cu(folder, MUL, "mul.cu")
    (folder / "k.toml").write_text(text)
    load_spec(folder / "k.toml")


def _call(*args):
    description = FunctionDescription(
        name="axpby",
        function="axpby",
        inputs=(TensorDescription("x", "f32", ("n",)), TensorDescription("y", "f32", ("n",))),
        scalars=(ScalarDescription("alpha", "float", "float", 4), ScalarDescription("count", "uint16_t", "uint", 2)),
        outputs=(),
    )
    KernelFunction(description, lambda *a: None, device=None)(*args)


def _call_requiring(*args):
    """A kernel of q [Hq] and k [Hkv] whose spec requires Hq % Hkv == 0."""
    description = FunctionDescription(
        name="attend",
        function="attend",
        inputs=(TensorDescription("q", "f32", ("Hq",)), TensorDescription("k", "f32", ("Hkv",))),
        outputs=(),
        requires=(Requirement("Hq % Hkv == 0", "requires Hq % Hkv == 0"),),
    )
    KernelFunction(description, lambda *a: None, device=None)(*args)


def _call_struct(*args):
    """A kernel taking `struct S { int m; float alpha; } s` and a float2 `c` by value; x's size is s.m."""
    int_, float_ = ScalarDescription("m", "int", "int", 4), ScalarDescription("alpha", "float", "float", 4)
    description = FunctionDescription(
        name="scale",
        function="scale",
        inputs=(TensorDescription("x", "f32", ("s.m",)),),
        scalars=(ScalarDescription("s", "S", "struct", 8, ((int_, 0), (float_, 4))),
                 ScalarDescription("c", "float2", "struct", 8, ((dataclasses.replace(float_, name="x"), 0), (dataclasses.replace(float_, name="y"), 4)))),
        outputs=(),
    )
    KernelFunction(description, lambda *a: None, device=None)(*args, *(() if len(args) == 3 else ((1.0, 2.0),)))


def _old_description():
    """A kernel description as builds wrote it before descriptions had a version."""
    old = '{"kernel":"mul","inputs":[{"name":"a","dtype":"f32","shape":["n"]}],"outputs":[],"scalars":[]}'
    read_description({REFLECTION_KEY: old}, "m.vmfb: function mul")


def _f32(n):
    return np.ones(n, np.float32)


class CliError(DispatchError):
    """What `iree-dispatch` printed (after `iree-dispatch COMMAND: error: `), exit code 1."""


CASES = [
    Case("struct by value with a pointer field", lambda d: _declare(d, 'struct P { const float* x; int n; };\nextern "C" __global__ void mul(float* out, P p, int n) {}'), DispatchError, True),
    Case("struct by value over IREE's push-constant limit", lambda d: _declare(d, 'struct P { int v[65]; };\nextern "C" __global__ void mul(float* out, P p, int n) {}'), DispatchError, True),
    Case("struct by value not defined in the source", lambda d: _declare(d, '#include <vector_types.h>\ntypedef struct dim3 P;\nextern "C" __global__ void mul(float* out, P p, int n) {}'), DispatchError, True),
    Case("struct by value with a bit-field", lambda d: _declare(d, 'struct P { int a : 3; int b; };\nextern "C" __global__ void mul(float* out, P p, int n) {}'), DispatchError, True),
    Case("pointer to pointer", lambda d: _declare(d, 'extern "C" __global__ void mul(float** out, int n) {}'), DispatchError),
    Case("variadic kernel", lambda d: _declare(d, 'extern "C" __global__ void mul(float* out, int n, ...) {}'), DispatchError),
    Case("unknown element type", lambda d: _declare(d, 'struct pair { float a, b; };\nextern "C" __global__ void mul(pair* out, int n) {}'), DispatchError, True),
    Case("element type through an alias to an unsupported type", lambda d: _declare(d, 'struct pair { float a, b; };\ntypedef pair vec_t;\nextern "C" __global__ void mul(vec_t* out, int n) {}'), DispatchError, True),
    Case("type alias the compiler doesn't know", lambda d: _declare(d, 'extern "C" __global__ void mul(my_t* out, int n) {}'), DispatchError, True),
    Case("type alias defined only under a -D flag that isn't given", lambda d: _declare(d, '#ifdef USE_F32\ntypedef float real_t;\n#endif\nextern "C" __global__ void mul(real_t* out, int n) {}'), DispatchError, True),
    Case("signature = disagreeing with the source's parameters", lambda d: _declare(d, MUL, signature="void mul(const float* a, float* out, int n)"), DispatchError),
    Case("unknown scalar type", lambda d: _declare(d, 'extern "C" __global__ void mul(float* out, long double n) {}'), DispatchError),
    Case("overloaded kernel", lambda d: _declare(d, "__global__ void mul(float* o, int n) {}\n__global__ void mul(double* o, int n) {}"), DispatchError),
    Case("template named without arguments", lambda d: _declare(d, "template <typename T, int N = 4> __global__ void mul(T* out, int n) {}"), DispatchError),
    Case("wrong number of template arguments", lambda d: _declare(d, "template <typename T, int N = 4> __global__ void mul(T* out, int n) {}", "mul<float, 4, 2>"), DispatchError),
    Case("template argument of the wrong kind (the compiler's message)",
         lambda d: _build(d, "template <typename T, int N> __global__ void mul(T* out, int n) {}", "mul<float, 2.5>"), DispatchError, True),
    Case("kernel not in the source", lambda d: _declare(d, MUL, "mull"), DispatchError),
    Case("kernel compiled out (#if 0)", lambda d: _build(d, '#if 0\n' + MUL + '#endif\nextern "C" __global__ void other(float* o) {}'), DispatchError, True),
    Case("empty .cu file", lambda d: _declare(d, "\n"), DispatchError),
    Case("non-UTF-8 source", lambda d: _declare(d, b"// caf\xe9\n" + MUL.encode()), DispatchError),
    Case("nvcc compile error", lambda d: _build(d, 'extern "C" __global__ void mul(float* out, int n) {\n  out[0] = oops;\n}'), DispatchError, True),
    Case("NVRTC compile error", lambda d: _build(d, 'extern "C" __global__ void mul(float* out, int n) {\n  out[0] = oops;\n}', toolchain="nvrtc"), DispatchError, True),
    Case("NVRTC: a C++ header it doesn't have", lambda d: _build(d, "#include <cmath>\n" + MUL, toolchain="nvrtc"), DispatchError, True),
    Case("nvcc warnings as errors", lambda d: _build(d, 'extern "C" __global__ void mul(float* out, int n) { int unused; }', flags=("-Werror", "all-warnings")), DispatchError, True),
    Case("__launch_bounds__ violated by the block size", lambda d: _build(d, 'extern "C" __global__ void __launch_bounds__(128) mul(float* out, int n) {}', block=256), DispatchError, True),
    Case("signature changed after the spec was written", lambda d: _changed_signature(d), DispatchError, True),
    Case("scalar declared as a tensor", lambda d: _declare(d, MUL, shapes={"n": ["n"]}), DispatchError),
    Case("tensor declared as a scalar", lambda d: _declare(d, MUL, scalars={"a": "n"}), DispatchError),
    Case("prebuilt cubin with a pointer after a scalar", lambda d: _prebuilt(d, "void mul(int n, const float* a, const float* b, float* out)"), DispatchError, True),
    Case("in-place const pointer", lambda d: _declare(d, MUL, inplace=["a"]), DispatchError),
    Case("pointer listed with two roles", lambda d: _declare(d, MUL.replace("const float* a", "float* a"), readonly=["a"], outputs=["a"]), DispatchError),
    Case("fresh output declared for a pointer the kernel reads", lambda d: _build(d, READS_A, outputs=["a"]), DispatchError, True),
    Case("readonly declared for a pointer the kernel writes", lambda d: _build(d, 'extern "C" __global__ void mul(float* a, float* out, int n) { a[0] = 1; out[0] = 2; }',
                                                                          readonly=["a"]), DispatchError, True),
    Case("const pointer the kernel writes through a cast", lambda d: _build(d, 'extern "C" __global__ void mul(const float* a, float* out, int n) { *(float*)a = 1; *out = 2; }'),
         DispatchError, True),
    Case("kernel writes no tensor (every pointer const)", lambda d: _declare(d, 'extern "C" __global__ void mul(const float* a, int n) {}'), DispatchError),
    Case("kernel with no pointer parameter", lambda d: _declare(d, 'extern "C" __global__ void mul(int n) {}', grid=1, shape=None), DispatchError),
    Case("zero on an input", lambda d: _declare(d, MUL, zero=["a"]), DispatchError),
    Case("zero on an in-place pointer", lambda d: _declare(d, MUL.replace("const float* a", "float* a"), inplace=["a"], zero=["a"]), DispatchError),
    Case("zero in the out= form", lambda d: _declare(d, MUL, zero=["out"]).with_outputs_in_place(), DispatchError),
    Case("17 bindings", lambda d: _declare(d, 'extern "C" __global__ void mul(' + ", ".join(f"float* p{i}" for i in range(17)) + ", int n) {}"), DispatchError),
    Case("65 push constants", lambda d: _declare(d, 'extern "C" __global__ void mul(float* out, ' + ", ".join(f"int s{i}" for i in range(65)) + ") {}", shape=[4], grid=1), DispatchError),
    Case("missing block size", lambda d: _declare(d, MUL, block=None), DispatchError),
    Case("block over 1024 threads", lambda d: _declare(d, MUL, block=[64, 32]), DispatchError),
    Case("grid names an unknown variable", lambda d: _declare(d, MUL, grid="ceildiv(m, 64)"), DispatchError),
    Case("grid divides by zero", lambda d: _declare(d, MUL, grid="n // (4 - 4)"), DispatchError),
    Case("grid divides by a size difference that is always zero", lambda d: _declare(d, MUL, grid="n % (n - n)"), DispatchError),
    Case("integer constant beyond 64 bits", lambda d: _declare(d, MUL, grid="ceildiv(n, 99999999999999999999)"), DispatchError),
    Case("nvcc_flags choosing the target arch", lambda d: _spec_file(d, "[module]\nnvcc_flags = ['-arch=sm_75']\n[[kernel]]\nname = 'mul'\nsource = 'mul.cu'\nblock = [64]\ngrid = ['n']\nshape = ['n']\n"), DispatchError),
    Case("variadic template kernel", lambda d: _declare(d, "template <typename... Ts> __global__ void mul(float* out, Ts... rest) {}", "mul<int>"), DispatchError),
    Case("list of .cu files as a source", lambda d: _spec_file(d, "[[kernel]]\nname = 'mul'\nsource = ['mul.cu']\nblock = [64]\ngrid = ['n']\nshape = ['n']\n"), DispatchError),
    Case("parallel splits a tensor that isn't an input", lambda d: _spec_file(
        d, "[[kernel]]\nname = 'mul'\nsource = 'mul.cu'\nblock = [64]\ngrid = ['n']\nshape = ['n']\nparallel = { split = { out = 0 }, combine = { out = 'concat' } }\n"), DispatchError),
    Case("grid uses '/'", lambda d: _declare(d, MUL, grid="n / 64"), DispatchError),
    Case("output dim with no input defining it", lambda d: _declare(d, MUL, shapes={"out": ["m"]}, outputs=["out"]), DispatchError),
    Case("output dim only an input could define, and the PTX shows an output", lambda d: _build(d, 'extern "C" __global__ void mul(float* out) { *out = 1; }',
                                                                                               grid=1, shape=["m"]), DispatchError, True),
    Case("shared memory over the limit", lambda d: ModuleSpec("m", (_declare(d, MUL, shared_memory=200 * 1024),)), DispatchError),
    Case("shared memory depending on a size, without a bound", lambda d: _declare(d, MUL, shared_memory="n * 4"), DispatchError),
    Case("shared memory size with only its bound missing", lambda d: _declare(d, MUL, shared_memory={"size": "n * 4"}), DispatchError),
    Case("call: shared memory size beyond its bound", lambda d: _declare(d, MUL, shared_memory={"size": "n * 4", "max": 4096}).describe().shared_memory_for_call({"n": 2048}),
         ValueError),
    Case("per-arch shared memory missing a built arch", lambda d: ModuleSpec("m", (_declare(d, MUL, shared_memory={"sm_90": 65536}),)), DispatchError),
    Case("per-arch shared memory for an arch not built", lambda d: _spec_file(d, "[module]\narchs = ['sm_90a', 'sm_80']\n[[kernel]]\nname = 'mul'\nsource = 'mul.cu'\nblock = [64]\ngrid = ['n']\nshape = ['n']\nshared_memory = { sm_90 = 200000, sm_80 = 65536 }\n"), DispatchError),
    Case("malformed arch", lambda d: _spec_file(d, "[module]\narchs = ['sm8']\n[[kernel]]\nname = 'mul'\nsource = 'mul.cu'\nblock = [64]\ngrid = ['n']\nshape = ['n']\n"), DispatchError),
    Case("misspelled spec key", lambda d: _spec_file(d, "[[kernel]]\nname = 'mul'\nsource = 'mul.cu'\nblok = [64]\n"), DispatchError),
    Case("call: struct argument missing a field", lambda d: _call_struct(_f32(4), {"m": 4}), ValueError),
    Case("call: struct argument with an unknown field", lambda d: _call_struct(_f32(4), {"m": 4, "alpha": 1.0, "beta": 2.0}), ValueError),
    Case("call: struct field out of its C type's range", lambda d: _call_struct(_f32(4), {"m": 4, "alpha": 1e39}), ValueError),
    Case("call: struct field disagreeing with a size it names", lambda d: _call_struct(_f32(4), {"m": 5, "alpha": 1.0}), ValueError),
    Case("call: vector argument with the wrong number of lanes", lambda d: _call_struct(_f32(4), {"m": 4, "alpha": 1.0}, (1.0, 2.0, 3.0)), ValueError),
    Case("requires: not a relation", lambda d: _declare(d, MUL, requires=["n % 4"]), DispatchError),
    Case("requires: a name no input dim or argument defines", lambda d: _declare(d, MUL, requires=["n % m == 0"]), DispatchError),
    Case("requires: 'and' inside one relation", lambda d: _spec_file(
        d, "[[kernel]]\nname = 'mul'\nsource = 'mul.cu'\nblock = [64]\ngrid = ['n']\nshape = ['n']\nrequires = ['n >= 1 and n <= 8']\n"), DispatchError),
    Case("call: a relation the kernel requires doesn't hold", lambda d: _call_requiring(_f32(6), _f32(4)), ValueError),
    Case("call: wrong dtype", lambda d: _call(_f32(4).astype(np.float64), _f32(4), 1.0, 2), TypeError),
    Case("call: shapes that must match don't", lambda d: _call(_f32(4), _f32(5), 1.0, 2), ValueError),
    Case("call: wrong rank", lambda d: _call(np.ones((2, 2), np.float32), _f32(4), 1.0, 2), ValueError),
    Case("call: missing argument", lambda d: _call(_f32(4), _f32(4), 1.0), TypeError),
    Case("call: scalar out of its C type's range", lambda d: _call(_f32(4), _f32(4), 1.0, 70000), ValueError),
    Case("call: float scalar that would round to infinity", lambda d: _call(_f32(4), _f32(4), 1e40, 2), ValueError),
    Case("load: a module built by an older iree_dispatch (its descriptions have no version)", lambda d: _old_description(), ContractError),
    # Prebuilt objects (iree_dispatch/frontend/prebuilt.py): a cubin of `mul`, declared by a signature.
    Case("prebuilt object without a signature", lambda d: KernelSpec.declare(_cubin(d), "mul", block=64, grid="n", shape=["n"]), DispatchError, True),
    Case("prebuilt cubin with a 64-bit scalar", lambda d: _prebuilt(d, "void mul(const float* a, const float* b, float* out, long long n)"), DispatchError, True),
    Case("prebuilt signature differs from the cubin", lambda d: _prebuilt(d, "void mul(const float* a, float* out, int n)", build=True), DispatchError, True),
    # Outputs and inputs (iree_dispatch/backend/pipeline.py check_outputs; the command line's checks): refused before anything is compiled or written.
    Case("build(): output is the kernel source", lambda d: _build_to(d, "k.cu"), DispatchError),
    Case("build(): emit_mlir is the output", lambda d: _build_to(d, "m.vmfb", emit_mlir="m.vmfb"), DispatchError),
    Case("build -o is the kernel source", lambda d: _cli(d, "-o", "<dir>/mul.cu"), CliError),
    Case("build -o is the spec", lambda d: _cli(d, "-o", "<dir>/k.toml"), CliError),
    Case("build --emit-mlir=the spec", lambda d: _cli(d, "-o", "<dir>/m.vmfb", "--emit-mlir=<dir>/k.toml"), CliError),
    Case("build --emit-mlir equal to -o", lambda d: _cli(d, "-o", "<dir>/m.vmfb", "--emit-mlir=<dir>/m.vmfb"), CliError),
    Case("build --depfile equal to -o", lambda d: _cli(d, "-o", "<dir>/m.vmfb", "--depfile", "<dir>/m.vmfb"), CliError),
    Case("build -o names a folder", lambda d: _cli(d, "-o", "<dir>"), CliError),
    Case("build --depfile names a folder", lambda d: _cli(d, "-o", "<dir>/m.vmfb", "--depfile", "<dir>"), CliError),
    Case("build -o under a file", lambda d: _cli(d, "-o", "<dir>/mul.cu/m.vmfb"), CliError),
    Case("build --emit-mlir: the objects folder's name is taken by a file", lambda d: (_cu(d, "", "k.objects"), _cli(d, "-o", "<dir>/m.vmfb", "--emit-mlir")), CliError),
    Case("build -o in a folder that isn't writable", lambda d: _cli(d, "-o", "<dir>/locked/m.vmfb", unwritable="locked"), CliError),
    Case("build -o is a device", lambda d: _cli(d, "-o", "/dev/null"), CliError),
    Case("build: a kernel source that is a device (/dev/zero)", lambda d: _cli(d, "-o", "<dir>/m.vmfb", source="/dev/zero"), CliError),
    Case("build: a kernel source over 64 MiB", lambda d: _cli(d, "-o", "<dir>/m.vmfb", source=_sparse(d / "huge.cu", 65 << 20)), CliError),
    Case("build: the spec is a folder", lambda d: _cli(d, "-o", "<dir>/m.vmfb", spec="<dir>"), CliError),
    Case("build: the build cache is a file", lambda d: _cli(d, "-o", "<dir>/out/m.vmfb", cache=_cu(d, "", "cache")), CliError, True),
    Case("build without iree-base-compiler (a runtime-only install)", lambda d: _cli(d, "-o", "<dir>/m.vmfb", compiler=False), CliError),
    Case("inspect a folder", lambda d: _cli(d, command="inspect", spec="<dir>"), CliError),
    Case("compile --kernels: a folder with no spec that declares replacements",
         lambda d: (_cu(d, "func.func @f() {\n  return\n}\n", "m.mlir"), _cli(d, "--kernels", "<dir>", "--dry-run", command="compile", spec="<dir>/m.mlir")), CliError),
    Case("inspect a file that isn't a module", lambda d: _cli(d, command="inspect", spec="<dir>/mul.cu"), CliError, True),
    # Flags for iree-compile (--iree-compile-arg=FLAG, or after --): refused before any CUDA compiler runs.
    Case("build: an iree-compile flag the build sets itself", lambda d: _cli(d, "-o", "<dir>/m.vmfb", "--iree-compile-arg=--iree-hal-target-device=vulkan"), CliError),
    Case("build: two CUDA devices without names and ordinals", lambda d: _cli(d, "-o", "<dir>/m.vmfb", *(f"--iree-compile-arg=--iree-hal-target-device={v}" for v in ("cuda", "cuda"))),
         CliError),
    Case("build: two CUDA devices but no program", lambda d: _cli(d, "-o", "<dir>/m.vmfb", *TWO_DEVICES), CliError),
    Case("build: a program on two devices calls a kernel without naming its device", lambda d: _cli(d, "-o", "<dir>/m.vmfb", "--program", str(_unplaced_program(d)), *TWO_DEVICES),
         CliError, True),
    Case("load: a program on two devices given one", lambda d: check_device_count(d / "m.vmfb", ("gpu0", "gpu1"), 1), ValueError),
    Case("build: an iree-compile flag's value as its own item after --", lambda d: _cli(d, "-o", "<dir>/m.vmfb", "--", "--iree-opt-level", "O3"), CliError),
    Case("build: an iree-compile flag iree-compile doesn't know", lambda d: _cli(d, "-o", "<dir>/m.vmfb", "--", "--iree-opt-levle=O3"), CliError, True),
    # The CUDA compiler: nvcc found, but no host compiler for it, and no NVRTC either.
    Case("no host C++ compiler for nvcc and no NVRTC", lambda d: _no_host_compiler(d), DispatchError),
    # run, iree-run-module's way: checked before a device is opened.
    Case("run: the module FILE and --module= differ", lambda d: _cli(d, "--module=<dir>/other.vmfb", "--function=mul", command="run", spec="<dir>/m.vmfb"), CliError),
    Case("run: --output_max_element_count that isn't a count", lambda d: _cli(d, "--function=mul", "--output_max_element_count=all", command="run", spec="<dir>/m.vmfb"), CliError),
    Case("run: an --input value beyond its element type", lambda d: _cli(d, "--function=mul", "--input=4xi8=300", command="run", spec=str(_module_file(d))), CliError, True),
]


def _module_file(folder: Path) -> Path:
    """A built module of kernel mul (iree-dispatch build of k.toml)."""
    _cli(folder, "-o", "<dir>/m.vmfb")
    return folder / "m.vmfb"


def _no_host_compiler(folder: Path) -> None:
    from unittest import mock

    from iree_dispatch import toolchains
    from iree_dispatch.core.errors import ToolchainError
    from iree_dispatch.toolchains import nvrtc

    def no_bindings():
        raise ToolchainError("NVRTC needs cuda-bindings (no module cuda.bindings.nvrtc): pip install 'iree-dispatch[nvrtc]'")

    with mock.patch.dict("os.environ", {"NVCC_CCBIN": str(folder / "g++")}), mock.patch.object(toolchains, "find_nvcc", lambda: Path("/usr/local/cuda/bin/nvcc")), \
            mock.patch.object(nvrtc, "_require_bindings", no_bindings):
        toolchains.select_toolchain()


def _build_to(folder: Path, output: str, emit_mlir: str | None = None) -> None:
    from iree_dispatch.backend.pipeline import build

    build(ModuleSpec("m", (_declare(folder, MUL),)), folder / output, emit_mlir=folder / emit_mlir if emit_mlir else None)


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


def _unplaced_program(folder: Path) -> Path:
    """A program on two devices whose call of kernel mul (of _cli's k.toml) names neither."""
    program = folder / "p.mlir"
    program.write_text(
        "func.func private @k.mul(tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>\n"
        "func.func @f(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {\n"
        "  %r = func.call @k.mul(%a, %b) : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>\n"
        "  return %r : tensor<?xf32>\n}\n"
    )
    return program


def _cli(folder: Path, *argv: str, command: str = "build", spec: str = "<dir>/k.toml", source: str | Path = "mul.cu", unwritable: str | None = None,
         cache: Path | None = None, compiler: bool = True) -> None:
    """Runs `iree-dispatch COMMAND SPEC ARGV` on k.toml (kernel mul of mul.cu) in `folder`;
    raises CliError with what it printed."""
    import contextlib
    import importlib.metadata
    import io
    import os
    from unittest import mock

    from iree_dispatch import cli

    _cu(folder, MUL, "mul.cu")
    (folder / "k.toml").write_text(f"[[kernel]]\nname = 'mul'\nsource = '{source}'\nblock = [64]\ngrid = ['ceildiv(n, 64)']\nshape = ['n']\n")
    (folder / "locked").mkdir(exist_ok=True)
    access, version = os.access, importlib.metadata.version
    err = io.StringIO()
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stderr(err))
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        if unwritable:
            stack.enter_context(mock.patch.object(os, "access", lambda p, m, **kw: Path(p) != folder / unwritable and access(p, m, **kw)))
        if not compiler:
            stack.enter_context(mock.patch.object(importlib.metadata, "version", lambda n: _missing(n) if n == "iree-base-compiler" else version(n)))
        if cache is not None:
            stack.enter_context(mock.patch.dict(os.environ, {"IREE_DISPATCH_CACHE_DIR": str(cache)}))
        code = cli.main([command, spec.replace("<dir>", str(folder)), *(a.replace("<dir>", str(folder)) for a in argv)])
    if code == 0:
        return
    text = err.getvalue().strip()
    raise CliError(text.split(": error: ", 1)[1] if ": error: " in text else text)


def _missing(name: str):
    raise importlib.metadata.PackageNotFoundError(name)


def _cubin(folder: Path) -> Path:
    import subprocess

    from iree_dispatch.toolchains import find_nvcc

    subprocess.run([str(find_nvcc()), "-cubin", "-arch=sm_90", str(_cu(folder, MUL)), "-o", str(folder / "mul.sm_90.cubin")], check=True, capture_output=True)
    return folder / "mul.sm_90.cubin"


def _prebuilt(folder: Path, signature: str, build: bool = False) -> None:
    from iree_dispatch.backend.pipeline import build as build_module

    kernel = KernelSpec.declare(_cubin(folder), "mul", signature=signature, block=64, grid="n", shape=["n"])
    if build:
        build_module(ModuleSpec("m", (kernel,)), folder / "m.vmfb", cache=False)


def _changed_signature(folder: Path) -> None:
    from iree_dispatch.backend.pipeline import build

    spec = ModuleSpec("m", (_declare(folder, 'extern "C" __global__ void mul(float* out, int n) {}'),))
    _cu(folder, 'extern "C" __global__ void mul(float* out, int n, int extra) {}')
    build(spec, folder / "m.vmfb")


def message(case: Case) -> str:
    """The error text, with the scratch folder written as <dir>; raises if nothing is raised."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp).resolve()
        try:
            case.run(folder)
        except case.error as exc:
            text = str(exc).replace(str(folder), "<dir>")
            # Install locations differ between machines (NVRTC's messages list its include folders).
            text = text.replace(str(Path(iree_dispatch.__file__).parent), "<iree_dispatch>").replace(sysconfig.get_paths()["purelib"], "<site-packages>")
            return re.sub(r"/tmp/[\w./-]+\.cubin\.cu|[^\s(]*/nvcc", "<nvcc>", text)
    raise AssertionError(f"{case.title}: no {case.error.__name__} raised")


def markdown() -> str:
    lines = [
        "# Errors: bad input and what you see",
        "",
        "Generated by `python -m tests.support.error_matrix > docs/errors.md` from the cases in",
        "`tests/support/error_matrix.py`; each row is also a test. `<dir>` is the folder of the files involved.",
        "Build-time errors come from `iree-dispatch build` / `iree_dispatch.build` (also as",
        "`iree-dispatch build: error: ...`, exit 1), call errors from `iree_dispatch.runtime`, before",
        "anything is launched.",
        "",
        "| # | bad input | error | message |",
        "|---|---|---|---|",
    ]
    for i, case in enumerate(CASES, 1):
        text = message(case).split("\ncommand:")[0]
        text = text.replace("|", "\\|").replace("\n", "<br>")
        kind = {DispatchError: "build", CliError: "iree-dispatch"}.get(case.error, case.error.__name__)
        lines.append(f"| {i} | {case.title} | `{kind}` | {text} |")
    lines += [
        "",
        "On a GPU, loading a module with no variant for it (tests/runtime/test_gpu.py):",
        "`<dir>/samples.vmfb: no kernel variant can run on this GPU (compute capability 9.0, sm_90); the module was built",
        "for sm_100. rebuild with --arch sm_90 (or an older arch, whose PTX JITs forward)`",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
