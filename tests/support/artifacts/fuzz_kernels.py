"""Random CUDA kernels that exercise the kernel ABI, with exact numpy references.

`generate(seed)` returns one `FuzzKernel`: the CUDA text of a `__global__` kernel, the options
to declare it with (`KernelSpec.declare`), and a numpy reference. `generate_modules(seed, count)`
groups kernels into modules (one .cu file each). Both are pure functions of their arguments, so
a CPU machine can build the modules and a GPU machine can regenerate the same kernels and
references from the seed alone.

What is randomized: the number, order and kind of parameters (`const T*` inputs, fresh `T*`
outputs, in-place and read-only non-const pointers, scalars before, between and after
pointers), element and scalar types, several fresh outputs of one dtype, how the kernel is named
(extern "C", C++, in a namespace, a template instantiation), element types spelled through
`typedef`, `using` and a preprocessor-chosen alias, block and grid (one thread per element or a
grid-stride loop), and the declaration options (`shape` or `shapes`, scalars computed from the
size, an explicit function name), and how non-const pointers are used: their roles declared in
the spec (`readonly`, `inplace`, `outputs`) or left for the build to read from the PTX, each
pointer accessed by index, through an offset pointer or a local alias, in the kernel or in a
device function that is not inlined.

Exactness: every kernel computes, for each writable pointer, two accumulators per element:
  f = f0 + sum_j c_j * F(src_j) + c_i * (i & 255)    (double; F: floats as they are, integers' low 4 bits)
  u = u0 + sum_j C_j * U(src_j) + C_i * i             (uint64, wrapping; U: integers as they are, floats * 4)
where src_j runs over every input pointer's element i and every scalar. A float output stores f,
an integer output the low bits of u, a bool output bit 32 of u. Float data are multiples of 1/4
small enough that f is exact in float32 (< 2^15 in quarter steps), so the only rounding is the
store into f16/bf16, which CUDA (`__float2half_rn`, `__float2bfloat16_rn`) and numpy/ml_dtypes
both round to nearest even from the same float32 value: references are bit-exact for every
dtype, and the tests compare bytes. Integer arithmetic wraps modulo 2^64 on both sides.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import random
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# ---------------------------------------------------------------------------------------------
# Feature switches, in one place. Remove a style from STYLES (or set a flag to False) to stop
# generating it, e.g. while iree_dispatch does not support it yet.
STYLES = {"extern_c", "cxx", "namespace", "template", "typedef", "using", "pp_alias"}
SCALARS_ANYWHERE = True  # scalars before and between pointers (else: every pointer first)
SAME_DTYPE_OUTPUTS = True  # kernels with several fresh outputs of one dtype and shape
# ---------------------------------------------------------------------------------------------

NAME_STYLES = ("extern_c", "cxx", "namespace", "template")
ALIAS_STYLES = ("typedef", "using", "pp_alias")
ALL_STYLES = NAME_STYLES + ALIAS_STYLES
# Features a kernel may show beyond its styles; `generate(require=...)` can force each of them.
FEATURES = ALL_STYLES + ("scalars_anywhere", "same_dtype_outputs")

PP_ALIAS_MACRO = "FUZZ_BF16"  # -DFUZZ_BF16 makes floatX __nv_bfloat16, else float
PP_ALIAS = "floatX"
MAX_N = 5000  # the references' exactness bounds assume n <= MAX_N (see _F_BOUND)
AWKWARD_SIZES = (1, 3, 32, 1000, 1023, 4097)
DEFAULT_ARCHS = ("sm_90",)

# Pointee C spelling → (numpy dtype name, MLIR element type).
POINTEE: dict[str, tuple[str, str]] = {
    "float": ("float32", "f32"),
    "double": ("float64", "f64"),
    "__half": ("float16", "f16"),
    "__nv_bfloat16": ("bfloat16", "bf16"),
    "bool": ("bool", "i1"),
    "int8_t": ("int8", "i8"),
    "signed char": ("int8", "i8"),
    "int16_t": ("int16", "i16"),
    "short": ("int16", "i16"),
    "int32_t": ("int32", "i32"),
    "int": ("int32", "i32"),
    "int64_t": ("int64", "i64"),
    "long long": ("int64", "i64"),
    "uint8_t": ("uint8", "ui8"),
    "unsigned char": ("uint8", "ui8"),
    "uint16_t": ("uint16", "ui16"),
    "unsigned short": ("uint16", "ui16"),
    "uint32_t": ("uint32", "ui32"),
    "unsigned": ("uint32", "ui32"),
    "unsigned int": ("uint32", "ui32"),
    "uint64_t": ("uint64", "ui64"),
    "unsigned long long": ("uint64", "ui64"),
}
# Scalar C spelling → numpy dtype name (the value's type; 1- and 2-byte types included).
SCALAR: dict[str, str] = {
    **{c: np_name for c, (np_name, _) in POINTEE.items()},
    "char": "int8",
    "long": "int64",
    "unsigned long": "uint64",
    "size_t": "uint64",
}
SIZE_TYPES = ("int", "unsigned", "int64_t", "uint64_t", "size_t", "long long", "unsigned int", "short", "long", "int32_t")
# Types a computed scalar may have: wide enough for every expression below at n <= MAX_N.
COMPUTED_TYPES = ("int", "unsigned", "int64_t", "uint64_t", "size_t", "short", "uint16_t", "int32_t", "float", "long long")
# Template arguments whose demangled spelling is the C spelling (names like int64_t demangle to `long`).
TEMPLATE_ARGS = ("float", "double", "int", "__half", "__nv_bfloat16", "bool", "short", "unsigned int", "long long", "unsigned char", "signed char")
SIZE_NAMES = ("n", "count", "len", "num", "elems")
POINTER_NAMES = ("x", "y", "z", "a", "b", "src", "dst", "in", "out", "buf", "w", "acc", "lhs", "rhs", "data", "res", "v", "p")
SCALAR_NAMES = ("alpha", "beta", "s", "k", "scale", "bias", "flag", "off", "c", "m", "eps", "t", "q")
# (spec expression over the size symbol, its value)
COMPUTED = (
    ("{n} + 3", lambda n: n + 3),
    ("{n} * 2", lambda n: n * 2),
    ("ceildiv({n}, 7)", lambda n: -(-n // 7)),
    ("{n} // 3", lambda n: n // 3),
    ("{n} % 5", lambda n: n % 5),
    ("max({n}, 100)", lambda n: max(n, 100)),
    ("min({n}, 17)", lambda n: min(n, 17)),
    ("{n} - 1", lambda n: n - 1),
)
BLOCKS = (1, 32, 64, 96, 128, 192, 256, 512, 1024)

POINTER_ROLES = ("in", "ro", "io", "out")  # const T*, readonly T*, inplace T*, fresh output T*
POINTER_ACCESS = ("index", "offset", "alias")
SCALAR_ROLES = ("arg", "size", "computed")  # call argument, the size symbol, an expression of it
_FLOAT_KINDS = ("float16", "bfloat16", "float32", "float64")
# Float data are k / 4 with |k| <= _QUARTERS[dtype]: every such value is exact in its type
# (bf16 keeps 8 significant bits: 255), and sums of them stay exact in float32.
_QUARTERS = {"float16": 255, "bfloat16": 255, "float32": 2047, "float64": 2047}
_F_COEFS = (-3, -2, -1, 1, 2, 3)
_U64 = 2**64


@dataclass(frozen=True)
class FuzzParam:
    name: str
    role: str  # one of POINTER_ROLES or SCALAR_ROLES
    spelled: str  # the type as the kernel writes it: a C type, an alias, or T
    ctype: str  # the C type it resolves to
    decl: str  # the parameter as declared in the kernel, e.g. "const float* __restrict__ x"
    expr: str = ""  # computed scalars: the spec expression over the size symbol

    @property
    def pointer(self) -> bool:
        return self.role in POINTER_ROLES

    @property
    def numpy(self) -> str:
        return (POINTEE[self.ctype][0] if self.pointer else SCALAR[self.ctype])

    @property
    def mlir(self) -> str:
        return POINTEE[self.ctype][1]

    @property
    def writable(self) -> bool:
        return self.role in ("io", "out")

    @property
    def nbytes(self) -> int:
        return 8 if self.pointer else numpy_dtype(self.numpy).itemsize


@dataclass(frozen=True)
class Formula:
    """One writable pointer's per-element formula (see the module docstring)."""

    f0: float
    u0: int
    f_coefs: tuple[int, ...]  # per source (FuzzKernel.sources), then:
    u_coefs: tuple[int, ...]
    f_index: int
    u_index: int


@dataclass(frozen=True)
class FuzzKernel:
    seed: int
    ident: str  # the C identifier of the kernel
    name: str  # as declared: ident, "ns::ident" or "ident<T>"
    function: str  # the generated function's expected name
    explicit_function: bool  # declared with function=...
    name_style: str
    namespace: str  # "a" or "a::b" for the namespace style
    template_arg: str  # the template style's T
    aliases: tuple[tuple[str, str, str], ...]  # (style, alias, C type) the kernel's types use
    params: tuple[FuzzParam, ...]
    size: str  # the size symbol, also the name of the size scalar
    block: int
    grid: str
    grid_stride: bool
    per_tensor_shapes: bool  # declared with shapes={...} rather than shape=[...]
    formulas: tuple[tuple[str, Formula], ...]  # writable pointer → formula
    fuzz_bf16: bool  # the module defines FUZZ_BF16 (floatX is __nv_bfloat16)
    source: str  # the kernel's CUDA text (needs the module prelude, PRELUDE)
    # How non-const pointers are used (drawn from a seed of their own, so the rest of a
    # kernel is what it was before these existed):
    roles_declared: bool = True  # readonly/inplace/outputs in the spec; else the build reads them from the PTX
    access: str = "index"  # POINTER_ACCESS: p[i], (p + k)[i - k], or through a local copy of p
    noinline: bool = False  # the per-element function is a call the analysis must follow

    # --- what the kernel declares --------------------------------------------------------
    @property
    def pointers(self) -> tuple[FuzzParam, ...]:
        return tuple(p for p in self.params if p.pointer)

    @property
    def scalars(self) -> tuple[FuzzParam, ...]:
        return tuple(p for p in self.params if not p.pointer)

    @property
    def writable(self) -> tuple[FuzzParam, ...]:
        return tuple(p for p in self.params if p.writable)

    @property
    def sources(self) -> tuple[FuzzParam, ...]:
        """What each formula reads, in parameter order: readable pointers and every scalar."""
        return tuple(p for p in self.params if p.role != "out")

    @property
    def features(self) -> frozenset[str]:
        """The styles and features (FEATURES) this kernel uses, plus detail tags."""
        spelled = {p.spelled for p in self.params}
        found = {self.name_style, *(style for style, alias, _ in self.aliases if alias in spelled)}
        first_pointer = next(i for i, p in enumerate(self.params) if p.pointer)
        last_pointer = max(i for i, p in enumerate(self.params) if p.pointer)
        if any(not p.pointer for p in self.params[:last_pointer]):
            found.add("scalars_anywhere")
        if any(not p.pointer for p in self.params[:first_pointer]):
            found.add("scalar_first")
        fresh = [p.numpy for p in self.params if p.role == "out"]
        if len(fresh) != len(set(fresh)):
            found.add("same_dtype_outputs")
        if "::" in self.namespace:
            found.add("nested_namespace")
        if not any(p.pointer and p.role != "out" for p in self.params):
            found.add("no_inputs")
        return frozenset(found)

    def declare_options(self) -> dict[str, Any]:
        """Keyword arguments of KernelSpec.declare(source, self.name, **options)."""
        options: dict[str, Any] = {"block": self.block, "grid": self.grid}
        if self.per_tensor_shapes:
            options["shapes"] = {p.name: [self.size] for p in self.pointers}
        else:
            options["shape"] = [self.size]
        computed = {p.name: p.expr for p in self.scalars if p.role == "computed"}
        if computed:
            options["scalars"] = computed
        if self.roles_declared:
            declared = {"inplace": "io", "readonly": "ro", "outputs": "out"}
            for key, role in declared.items():
                if names := [p.name for p in self.pointers if p.role == role]:
                    options[key] = names
        if self.explicit_function:
            options["function"] = self.function
        return options

    def declare(self, source: str | Path):
        """The KernelSpec of this kernel in `source` (the module's .cu file)."""
        from iree_dispatch.frontend.spec import KernelSpec

        return KernelSpec.declare(source, self.name, **self.declare_options())

    # --- the generated function's ABI ----------------------------------------------------
    def call_tensors(self, in_place: bool) -> tuple[FuzzParam, ...]:
        """Tensors the generated function takes, in order: every pointer but fresh outputs
        (all of them in the in-place form, where fresh outputs are declared in place)."""
        return tuple(p for p in self.pointers if in_place or p.role != "out")

    def call_scalars(self, in_place: bool) -> tuple[FuzzParam, ...]:
        """Scalars the generated function takes, in order. The size is an argument only when
        no tensor argument has it as its length."""
        size_is_argument = not self.call_tensors(in_place)
        return tuple(p for p in self.scalars if p.role == "arg" or (p.role == "size" and size_is_argument))

    # --- data and references -------------------------------------------------------------
    def random_arrays(self, rng: np.random.Generator, n: int, in_place: bool = False) -> dict[str, np.ndarray]:
        """Fresh random data for every readable pointer (exactly representable, see _QUARTERS)."""
        return {p.name: random_array(rng, p.numpy, n) for p in self.pointers if p.role != "out"}

    def random_scalars(self, rng: np.random.Generator) -> dict[str, Any]:
        """Random values of every scalar argument (full range for integers)."""
        return {p.name: random_scalar(rng, p.numpy) for p in self.scalars if p.role == "arg"}

    def scalar_values(self, scalars: Mapping[str, Any], n: int) -> dict[str, Any]:
        """Every scalar's value in the kernel: arguments, the size, computed ones."""
        values = {}
        for p in self.scalars:
            if p.role == "arg":
                values[p.name] = scalars[p.name]
            elif p.role == "size":
                values[p.name] = n
            else:
                value = _computed_value(p.expr, self.size, n)
                values[p.name] = float(value) if p.numpy.startswith("float") else value
        return values

    def reference(self, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, Any], n: int) -> dict[str, np.ndarray]:
        """Every writable pointer's expected content, by name (the kernel's parameter order)."""
        values = self.scalar_values(scalars, n)
        f_src, u_src = [], []
        for p in self.sources:
            if p.pointer:
                a = arrays[p.name]
                assert a.shape == (n,) and a.dtype == numpy_dtype(p.numpy), (p.name, a.shape, a.dtype)
                f_src.append(_f_array(a))
                u_src.append(_u_array(a))
            else:
                f_src.append(_f_scalar(values[p.name], p.numpy))
                u_src.append(_u_scalar(values[p.name], p.numpy))
        index = np.arange(n, dtype=np.int64)
        f_index, u_index = (index & 255).astype(np.float64), index.astype(np.uint64)
        out = {}
        for name, formula in self.formulas:
            f = np.full(n, formula.f0, np.float64) + formula.f_index * f_index
            u = np.full(n, formula.u0, np.uint64) + np.uint64(formula.u_index) * u_index
            for c, v in zip(formula.f_coefs, f_src):
                f = f + c * v
            for c, v in zip(formula.u_coefs, u_src):
                # Scalars in Python ints: numpy warns when two uint64 scalars wrap around.
                u = u + (np.uint64(c) * v if isinstance(v, np.ndarray) else np.uint64(c * v % _U64))
            assert np.all(np.abs(f) < _F_BOUND), f"{self.name}: {name} leaves the exact range"
            out[name] = _store(f, u, self.param(name).numpy)
        return out

    def param(self, name: str) -> FuzzParam:
        return next(p for p in self.params if p.name == name)


# f stays below this (in quarter steps: 17 bits), so it is exact in float32 and finite in f16.
_F_BOUND = 2**15


def numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes  # numpy has no bfloat16 (iree_dispatch.runtime uses ml_dtypes too)

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def random_array(rng: np.random.Generator, dtype: str, n: int) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dtype in _FLOAT_KINDS:
        k = _QUARTERS[dtype]
        return (rng.integers(-k, k, n, endpoint=True) / 4).astype(numpy_dtype(dtype))
    info = np.iinfo(np.dtype(dtype))
    return rng.integers(info.min, info.max, n, dtype=info.dtype, endpoint=True)


def random_scalar(rng: np.random.Generator, dtype: str) -> Any:
    if dtype == "bool":
        return bool(rng.integers(2))
    if dtype in _FLOAT_KINDS:
        k = _QUARTERS[dtype]
        return int(rng.integers(-k, k, endpoint=True)) / 4
    info = np.iinfo(np.dtype(dtype))
    return int(rng.integers(info.min, info.max, dtype=info.dtype, endpoint=True))


def _f_array(a: np.ndarray) -> np.ndarray:
    if a.dtype == bool or a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        return a.astype(np.float64)
    return (a.astype(np.uint64) & np.uint64(15)).astype(np.float64)  # sign-extended, low 4 bits


def _u_array(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        return (a.astype(np.float64) * 4).astype(np.int64).astype(np.uint64)
    return a.astype(np.uint64)


def _f_scalar(value, dtype: str) -> float:
    return float(value) if dtype in _FLOAT_KINDS or dtype == "bool" else float(int(value) & 15)


def _u_scalar(value, dtype: str) -> int:
    return int(float(value) * 4) % _U64 if dtype in _FLOAT_KINDS else int(value) % _U64


def _store(f: np.ndarray, u: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bool":
        # Bit 32, not bit 0: with odd coefficients, bit 0 is the same parity in every formula.
        return ((u >> np.uint64(32)) & np.uint64(1)).astype(bool)
    if dtype in _FLOAT_KINDS:
        # f is exact in float32; f16/bf16 round once from there, as __float2half_rn does.
        return f.astype(np.float32).astype(numpy_dtype(dtype)) if dtype != "float64" else f
    return u.astype(np.dtype(dtype))  # the low bits, as the C conversion from uint64


def _computed_value(expr: str, size: str, n: int) -> int:
    for template, value in COMPUTED:
        if template.format(n=size) == expr:
            return value(n)
    raise ValueError(f"unknown computed expression {expr!r}")


# --- CUDA text ---------------------------------------------------------------------------------

PRELUDE = f"""\
// Generated by tests/support/artifacts/fuzz_kernels.py: random kernels for the kernel-ABI fuzz tests.
#include <cstddef>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// An element type the preprocessor chooses: modules built with -D{PP_ALIAS_MACRO} get bf16.
#if defined({PP_ALIAS_MACRO})
typedef __nv_bfloat16 {PP_ALIAS};
#else
typedef float {PP_ALIAS};
#endif

// F (double) and U (uint64) of every element and scalar type, and the store of a result;
// see tests/support/artifacts/fuzz_kernels.py. Host and device, so the references can be checked on a CPU too.
template <typename T> __host__ __device__ inline double fz_f(T v) {{ return (double)((long long)v & 15); }}
__host__ __device__ inline double fz_f(bool v) {{ return v ? 1.0 : 0.0; }}
__host__ __device__ inline double fz_f(float v) {{ return (double)v; }}
__host__ __device__ inline double fz_f(double v) {{ return v; }}
__host__ __device__ inline double fz_f(__half v) {{ return (double)__half2float(v); }}
__host__ __device__ inline double fz_f(__nv_bfloat16 v) {{ return (double)__bfloat162float(v); }}
template <typename T> __host__ __device__ inline unsigned long long fz_u(T v) {{ return (unsigned long long)v; }}
__host__ __device__ inline unsigned long long fz_u(float v) {{ return (unsigned long long)(long long)(fz_f(v) * 4.0); }}
__host__ __device__ inline unsigned long long fz_u(double v) {{ return (unsigned long long)(long long)(v * 4.0); }}
__host__ __device__ inline unsigned long long fz_u(__half v) {{ return (unsigned long long)(long long)(fz_f(v) * 4.0); }}
__host__ __device__ inline unsigned long long fz_u(__nv_bfloat16 v) {{ return (unsigned long long)(long long)(fz_f(v) * 4.0); }}
template <typename T> __host__ __device__ inline void fz_put(T* p, double, unsigned long long u) {{ *p = (T)u; }}
__host__ __device__ inline void fz_put(bool* p, double, unsigned long long u) {{ *p = ((u >> 32) & 1ULL) != 0; }}
__host__ __device__ inline void fz_put(float* p, double f, unsigned long long) {{ *p = (float)f; }}
__host__ __device__ inline void fz_put(double* p, double f, unsigned long long) {{ *p = f; }}
__host__ __device__ inline void fz_put(__half* p, double f, unsigned long long) {{ *p = __float2half_rn((float)f); }}
__host__ __device__ inline void fz_put(__nv_bfloat16* p, double f, unsigned long long) {{ *p = __float2bfloat16_rn((float)f); }}
"""


def _pointer_decl(rng: random.Random, role: str, spelled: str, name: str) -> str:
    qualifier = rng.choice(("", "", " __restrict__", " const"))
    if role == "in":
        pointee = rng.choice((f"const {spelled}", f"{spelled} const"))
        return f"{pointee}*{qualifier} {name}"
    return f"{spelled}*{qualifier} {name}"


def _scalar_decl(rng: random.Random, spelled: str, name: str) -> str:
    return f"{rng.choice(('', '', 'const '))}{spelled} {name}"


def _element(k: FuzzKernel, pointer: str) -> str:
    """Element i of `pointer` as the kernel's access style writes it."""
    if k.access == "offset":
        return f"({pointer} + 3)[i - 3]"
    return f"fz_{pointer}[i]" if k.access == "alias" else f"{pointer}[i]"


def _kernel_source(k: FuzzKernel, decls: Sequence[str]) -> str:
    lines = [f"// kernel {k.name} (seed {k.seed})"]
    for style, alias, ctype in k.aliases:
        if style == "typedef":
            lines.append(f"typedef {ctype} {alias};")
        elif style == "using":
            lines.append(f"using {alias} = {ctype};")
    template = "template <typename T>\n" if k.name_style == "template" else ""
    elem = f"{k.ident}_elem"

    # The per-element function: every load first (an in-place pointer is read before any
    # output is written), then each writable pointer's formula.
    elem_params = ["long long i"]
    for p in k.params:
        if p.role == "in" or p.role == "ro":
            elem_params.append(f"const {p.spelled}* {p.name}")
        elif p.pointer:
            elem_params.append(f"{p.spelled}* {p.name}")
        else:
            elem_params.append(f"{p.spelled} {p.name}")
    body = []
    if k.access == "alias":  # every pointer through a local copy
        for p in k.pointers:
            const = "const " if p.role in ("in", "ro") else ""
            body.append(f"{const}{p.spelled}* fz_{p.name} = {p.name};")
    for j, p in enumerate(k.sources):
        value = _element(k, p.name) if p.pointer else p.name
        body.append(f"const double fz_f{j} = fz_f({value}); const unsigned long long fz_u{j} = fz_u({value});")
    for name, fm in k.formulas:
        terms = [f"double f = {fm.f0!r};", f"unsigned long long u = {fm.u0:#x}ULL;"]
        terms += [f"f += {c}.0 * fz_f{j};" for j, c in enumerate(fm.f_coefs)]
        terms += [f"u += {c:#x}ULL * fz_u{j};" for j, c in enumerate(fm.u_coefs)]
        terms += [f"f += {fm.f_index}.0 * (double)(i & 255);", f"u += {fm.u_index:#x}ULL * (unsigned long long)i;"]
        terms.append(f"fz_put(&{_element(k, name)}, f, u);")
        body.append("{ " + " ".join(terms) + " }")
    inline = "__noinline__" if k.noinline else "inline"
    lines.append(f"{template}__host__ __device__ {inline} void {elem}({', '.join(elem_params)}) {{")
    lines += [f"  {line}" for line in body]
    lines.append("}")

    call = f"{'::' if k.name_style == 'namespace' else ''}{elem}{'<T>' if template else ''}(fz_i, {', '.join(p.name for p in k.params)});"
    extern = 'extern "C" ' if k.name_style == "extern_c" else ""
    kernel = [f"{template}{extern}__global__ void {k.ident}({', '.join(decls)}) {{"]
    if k.grid_stride:
        kernel.append(f"  for (long long fz_i = (long long)blockIdx.x * blockDim.x + threadIdx.x; fz_i < (long long){k.size};"
                      f" fz_i += (long long)gridDim.x * blockDim.x) {call}")
    else:
        kernel += ["  const long long fz_i = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
                   f"  if (fz_i < (long long){k.size}) {call}"]
    kernel.append("}")
    if k.name_style == "namespace":
        if "::" in k.namespace and k.seed % 2:  # C++17 nested form, or two blocks
            kernel = [f"namespace {k.namespace} {{", *kernel, f"}}  // namespace {k.namespace}"]
        else:
            parts = k.namespace.split("::")
            kernel = [*(f"namespace {part} {{" for part in parts), *kernel, *("}" for _ in parts)]
    lines += kernel
    if k.name_style == "template":
        resolved = [re.sub(r"\bT\b", k.template_arg, d) for d in decls]
        lines.append(f"template __global__ void {k.ident}<{k.template_arg}>({', '.join(resolved)});")
    return "\n".join(lines) + "\n"


# --- the generator -----------------------------------------------------------------------------


def _derive(*parts: object) -> int:
    """A 63-bit seed from parts, stable across Python versions and runs."""
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "little") >> 1


def generate(
    seed: int,
    *,
    ident: str | None = None,
    fuzz_bf16: bool = False,
    styles: set[str] | frozenset[str] | None = None,
    scalars_anywhere: bool | None = None,
    same_dtype_outputs: bool | None = None,
    require: Sequence[str] = (),
) -> FuzzKernel:
    """One random kernel, a pure function of the arguments.

    ident: the kernel's C identifier (unique within a module); default from the seed.
    fuzz_bf16: whether its module defines FUZZ_BF16 (what floatX means).
    styles, scalars_anywhere, same_dtype_outputs: default STYLES, SCALARS_ANYWHERE and
    SAME_DTYPE_OUTPUTS, read at call time.
    require: features (FEATURES) the kernel must show, whatever the switches say; a name
    style here picks the name style.
    """
    rng = random.Random(_derive("fuzz-kernel", seed))
    styles = set(STYLES if styles is None else styles) | set(require)
    anywhere = (SCALARS_ANYWHERE if scalars_anywhere is None else scalars_anywhere) or "scalars_anywhere" in require
    same_dtype = (SAME_DTYPE_OUTPUTS if same_dtype_outputs is None else same_dtype_outputs) or "same_dtype_outputs" in require
    ident = ident or f"fz{seed % 10**8}"

    forced_names = [s for s in NAME_STYLES if s in require]
    if len(forced_names) > 1:
        raise ValueError(f"require names two name styles: {forced_names}")
    name_candidates = forced_names or [s for s in NAME_STYLES if s in styles]
    if not name_candidates:
        raise ValueError("no name style enabled: STYLES needs at least one of " + ", ".join(NAME_STYLES))
    name_style = rng.choice(name_candidates)
    template_arg = rng.choice(TEMPLATE_ARGS) if name_style == "template" else ""
    namespace = ""
    if name_style == "namespace":
        namespace = f"{ident}_ns" if rng.random() < 0.6 else f"fzlib::{ident}_ns"

    alias_styles = [s for s in ALIAS_STYLES if s in require or (s in styles and rng.random() < 0.3)]
    aliases = []
    for style in alias_styles:
        if style == "typedef":
            aliases.append((style, f"{ident}_real_t", rng.choice(list(POINTEE))))
        elif style == "using":
            aliases.append((style, f"{ident}_acc_t", rng.choice(list(POINTEE))))
        else:
            aliases.append((style, PP_ALIAS, "__nv_bfloat16" if fuzz_bf16 else "float"))

    # Pointers: roles, then how each element type is spelled.
    count = rng.choice((1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 5, 6, 8))
    roles = [rng.choice(("in", "in", "in", "ro", "io", "out", "out")) for _ in range(count)]
    if not any(r in ("io", "out") for r in roles):
        roles[rng.randrange(count)] = rng.choice(("io", "out", "out"))
    spellings = [_spelling(rng, aliases, template_arg) for _ in roles]  # (spelled, C type)
    if same_dtype and ("same_dtype_outputs" in require or rng.random() < 0.35):
        # Two or three fresh outputs of one dtype: outputs sharing a buffer would show.
        outs = [i for i, r in enumerate(roles) if r == "out"]
        while len(outs) < 2:
            roles.append("out")
            spellings.append(_spelling(rng, aliases, template_arg))
            outs.append(len(roles) - 1)
        if rng.random() < 0.3:
            roles.append("out")
            spellings.append(spellings[outs[0]])
            outs.append(len(roles) - 1)
        for i in outs[1:]:
            if POINTEE[spellings[i][1]][0] != POINTEE[spellings[outs[0]][1]][0]:
                spellings[i] = spellings[outs[0]] if rng.random() < 0.5 else _same_dtype_spelling(rng, spellings[outs[0]][1], aliases)
    # Each alias and the template's T spell at least one pointer; a pointer added for that
    # leaves the outputs above as they are.
    for spelled, ctype in [(alias, ctype) for _, alias, ctype in aliases] + ([("T", template_arg)] if template_arg else []):
        if not any(s == spelled for s, _ in spellings):
            roles.append(rng.choice(("in", "ro", "io", "out")))
            spellings.append((spelled, ctype))
    if not same_dtype:
        # Switched off: fresh outputs of one dtype become in-place pointers (the alias or T
        # that spells them stays).
        seen: set[str] = set()
        for i, role in enumerate(roles):
            if role == "out":
                dtype = POINTEE[spellings[i][1]][0]
                if dtype in seen:
                    roles[i] = "io"
                seen.add(dtype)
    names = rng.sample(POINTER_NAMES, len(roles))

    size = rng.choice(SIZE_NAMES)
    scalars: list[tuple[str, str, str, str]] = [(size, "size", rng.choice(SIZE_TYPES), "")]  # (name, role, spelled, expr)
    scalar_names = iter(rng.sample(SCALAR_NAMES, len(SCALAR_NAMES)))
    for _ in range(rng.choice((0, 0, 1, 1, 2, 2, 3, 4, 5))):
        spelled = "T" if template_arg and rng.random() < 0.3 else rng.choice(list(SCALAR))
        scalars.append((next(scalar_names), "arg", spelled, ""))
    if rng.random() < 0.3:
        expr = rng.choice(COMPUTED)[0].format(n=size)
        scalars.append((next(scalar_names), "computed", rng.choice(COMPUTED_TYPES), expr))

    pointers = [(names[i], roles[i], *spellings[i]) for i in range(len(roles))]
    rng.shuffle(pointers)
    rng.shuffle(scalars)
    order: list[tuple[str, Any]] = [("p", p) for p in pointers] + [("s", s) for s in scalars]
    if anywhere:
        rng.shuffle(order)
        if "scalars_anywhere" in require and order[0][0] == "p":
            # At least one scalar ahead of a pointer.
            first_scalar = next(i for i, (kind, _) in enumerate(order) if kind == "s")
            order.insert(0, order.pop(first_scalar))

    params = []
    for kind, item in order:
        if kind == "p":
            name, role, spelled, ctype = item
            params.append(FuzzParam(name, role, spelled, ctype, _pointer_decl(rng, role, spelled, name)))
        else:
            name, role, spelled, expr = item
            ctype = template_arg if spelled == "T" else spelled
            params.append(FuzzParam(name, role, spelled, ctype, _scalar_decl(rng, spelled, name), expr))

    sources = [p for p in params if p.role != "out"]
    formulas = []
    f0s = rng.sample(range(-64, 65), len([p for p in params if p.writable]))
    used: set[tuple[int, ...]] = set()
    for f0, p in zip(f0s, (p for p in params if p.writable)):
        # Float weights differ between any two outputs (more than f0, which rounding to bf16
        # can hide), so outputs sharing a buffer show in float outputs too. The size is always
        # a source, so there are at least 36 weight vectors to choose from.
        while True:
            # A computed float scalar can reach 2 * MAX_N: weight +-1 keeps f within _F_BOUND.
            f_coefs = tuple(rng.choice((-1, 1)) if s.role == "computed" else rng.choice(_F_COEFS) for s in sources)
            f_index = rng.choice(_F_COEFS)
            if (*f_coefs, f_index) not in used:
                used.add((*f_coefs, f_index))
                break
        formulas.append((p.name, Formula(
            f0=f0 / 4,
            u0=rng.getrandbits(64),
            f_coefs=f_coefs,
            # Odd: multiplying by it loses none of a source's bits in any integer width.
            u_coefs=tuple(rng.getrandbits(64) | 1 for _ in sources),
            f_index=f_index,
            u_index=rng.getrandbits(64) | 1,
        )))

    block = rng.choice(BLOCKS)
    grid_stride = rng.random() < 0.5
    if not grid_stride:
        grid = f"ceildiv({size}, {block})"
    else:
        grid = rng.choice((str(rng.randint(1, 6)), f"min(ceildiv({size}, {block}), {rng.randint(1, 8)})", f"ceildiv({size}, {4 * block})"))
    name = {"namespace": f"{namespace}::{ident}", "template": f"{ident}<{template_arg}>"}.get(name_style, ident)
    explicit_function = rng.random() < 0.25
    function = f"{ident}_fn" if explicit_function else re.sub(r"\W+", "_", name).strip("_")

    kernel = FuzzKernel(
        seed=seed, ident=ident, name=name, function=function, explicit_function=explicit_function, name_style=name_style,
        namespace=namespace, template_arg=template_arg, aliases=tuple(aliases), params=tuple(params), size=size, block=block,
        grid=grid, grid_stride=grid_stride, per_tensor_shapes=rng.random() < 0.3, formulas=tuple(formulas), fuzz_bf16=fuzz_bf16,
        source="",
    )
    uses = random.Random(_derive("fuzz-pointer-use", seed))
    kernel = dataclasses.replace(kernel, roles_declared=uses.random() < 0.4, access=uses.choice(POINTER_ACCESS), noinline=uses.random() < 0.3)
    source = _kernel_source(kernel, [p.decl for p in params])
    kernel = dataclasses.replace(kernel, source=source)
    missing = set(require) - kernel.features
    if missing:
        raise AssertionError(f"seed {seed}: required features {sorted(missing)} not generated")
    return kernel


def _spelling(rng: random.Random, aliases, template_arg: str) -> tuple[str, str]:
    """How a pointer's element type is written: a C type, one of the kernel's aliases, or T."""
    options = [(c, c) for c in POINTEE]
    extra = [(alias, ctype) for _, alias, ctype in aliases] + ([("T", template_arg)] if template_arg else [])
    if extra and rng.random() < 0.4:
        return rng.choice(extra)
    return rng.choice(options)


def _same_dtype_spelling(rng: random.Random, ctype: str, aliases) -> tuple[str, str]:
    """Another spelling of `ctype`'s dtype (int vs int32_t), or an alias that resolves to it."""
    dtype = POINTEE[ctype][0]
    options = [(c, c) for c, (d, _) in POINTEE.items() if d == dtype]
    options += [(alias, c) for _, alias, c in aliases if POINTEE[c][0] == dtype]
    return rng.choice(options)


@dataclass(frozen=True)
class FuzzModule:
    name: str
    seed: int
    fuzz_bf16: bool  # built with -DFUZZ_BF16
    kernels: tuple[FuzzKernel, ...]

    @property
    def nvcc_flags(self) -> tuple[str, ...]:
        return (f"-D{PP_ALIAS_MACRO}",) if self.fuzz_bf16 else ()

    @property
    def source(self) -> str:
        """The module's .cu file: the prelude, then every kernel."""
        return PRELUDE + "".join(f"\n{k.source}" for k in self.kernels)

    def write(self, folder: Path) -> Path:
        """Writes the .cu file into `folder` (unchanged bytes are not rewritten, so the
        build cache keeps its entry) and returns its path."""
        path = Path(folder) / f"{self.name}.cu"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != self.source:
            path.write_text(self.source, encoding="utf-8")
        return path

    def spec(self, source: Path, kernels: Sequence | None = None, archs: Sequence[str] = DEFAULT_ARCHS, name: str | None = None):
        """The ModuleSpec of `kernels` (KernelSpecs; default: every kernel declared from `source`)."""
        from iree_dispatch.core.archs import parse_archs
        from iree_dispatch.frontend.spec import ModuleSpec

        kernels = tuple(k.declare(source) for k in self.kernels) if kernels is None else tuple(kernels)
        return ModuleSpec(name or self.name, kernels, tuple(parse_archs(list(archs))), self.nvcc_flags)

    def digest(self) -> str:
        """Identifies the generated source and flags: artifacts built from other text are stale."""
        return hashlib.sha256((self.source + "\0" + " ".join(self.nvcc_flags)).encode()).hexdigest()[:16]


def generate_module(seed: int, index: int, count: int, *, fuzz_bf16: bool | None = None, **options) -> FuzzModule:
    """Module `index` of the batch `seed`: `count` kernels. Odd modules define FUZZ_BF16 (unless
    fuzz_bf16 says otherwise), so both meanings of floatX are built. options: as generate()."""
    bf16 = index % 2 == 1 if fuzz_bf16 is None else fuzz_bf16
    kernels = tuple(
        generate(_derive("fuzz-batch", seed, index, j), ident=f"fz{index}_{j}", fuzz_bf16=bf16, **options) for j in range(count)
    )
    return FuzzModule(f"fuzz{index:02d}", seed, bf16, kernels)


def generate_modules(seed: int, count: int, per_module: int = 20, **options) -> list[FuzzModule]:
    """`count` kernels in modules of `per_module` (the last may have fewer)."""
    sizes = [min(per_module, count - start) for start in range(0, count, per_module)]
    return [generate_module(seed, i, size, **options) for i, size in enumerate(sizes)]


def call_sizes(rng: np.random.Generator) -> list[int]:
    """Sizes to call a kernel with: a few awkward ones and a random one, all <= MAX_N."""
    return sorted({*rng.choice(AWKWARD_SIZES, 3, replace=False).tolist(), int(rng.integers(1, MAX_N + 1))})


# --- checking the references on the CPU --------------------------------------------------------
# Every kernel's per-element function is __host__ __device__: compiled for the host with a loop
# over i, it shows on a machine without a GPU that the numpy reference computes what the CUDA
# text computes (the GPU tests then check that the kernel gets the right arguments).


def host_source(module: FuzzModule) -> str:
    """The module's source plus, per kernel, `extern "C" void fzhost_<ident>(long long n, void** a)`
    that runs its per-element function for i < n; a[j] points to parameter j's data or value."""
    lines = [module.source]
    for k in module.kernels:
        args = []
        for j, p in enumerate(k.params):
            if p.pointer:
                args.append(f"({'const ' if p.role in ('in', 'ro') else ''}{p.ctype}*)a[{j}]")
            else:
                args.append(f"*(const {p.ctype}*)a[{j}]")
        targs = f"<{k.template_arg}>" if k.template_arg else ""
        lines.append(f'extern "C" void fzhost_{k.ident}(long long n, void** a) {{\n'
                     f"  for (long long i = 0; i < n; ++i) {k.ident}_elem{targs}(i, {', '.join(args)});\n}}\n")
    return "\n".join(lines)


def build_host_library(module: FuzzModule, folder: Path) -> Path:
    """Compiles host_source(module) into a shared library with nvcc."""
    from iree_dispatch.toolchains import find_nvcc

    folder.mkdir(parents=True, exist_ok=True)
    source = folder / f"{module.name}_host.cu"
    source.write_text(host_source(module), encoding="utf-8")
    library = folder / f"lib{module.name}_host.so"
    cmd = [str(find_nvcc()), "-shared", "-Xcompiler", "-fPIC", "-std=c++17", "-O1", "-arch=sm_90", *module.nvcc_flags, str(source), "-o", str(library)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"host build of {source} failed:\n{proc.stderr[-4000:]}")
    return library


def run_on_host(library: ctypes.CDLL, kernel: FuzzKernel, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, Any], n: int,
                poison: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Runs the kernel's per-element function on the host; returns the writable pointers'
    contents. poison: the initial content of each fresh output."""
    values = kernel.scalar_values(scalars, n)
    keep, pointers = [], []
    outputs = {}
    for p in kernel.params:
        if p.pointer:
            data = np.array(poison[p.name] if p.role == "out" else arrays[p.name], copy=True)
            if p.writable:
                outputs[p.name] = data
        else:
            data = np.array(values[p.name], dtype=numpy_dtype(p.numpy))
        keep.append(data)
        pointers.append(data.ctypes.data)
    getattr(library, f"fzhost_{kernel.ident}")(ctypes.c_longlong(n), (ctypes.c_void_p * len(pointers))(*pointers))
    return outputs


def poison_for(kernel: FuzzKernel, want: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """An initial content for each fresh output that differs from its expected content in every
    element, and a pattern of its own per output: NaN with the output's own payload for floats,
    the expected bits XOR an output-specific mask for integers, byte 0xA0 + k for bools
    (not a valid bool: the kernel writes 0 or 1)."""
    poisons = {}
    for k, p in enumerate(p for p in kernel.params if p.role == "out"):
        w = want[p.name]
        dtype = w.dtype
        if p.numpy == "bool":
            poisons[p.name] = np.full(w.shape, 0xA0 + k, np.uint8).view(bool)
        elif p.numpy in _FLOAT_KINDS:
            bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
            quiet_nan = {2: 0x7E00 if p.numpy == "float16" else 0x7FC0, 4: 0x7FC00000, 8: 0x7FF8000000000000}[dtype.itemsize]
            poisons[p.name] = np.full(w.shape, quiet_nan | (k + 1), bits).view(dtype)
        else:
            unsigned = np.dtype(f"u{dtype.itemsize}")
            byte = ((0x5A + 0x22 * k) & 0xFF) | 1  # odd, so never 0; differs per output
            mask = np.array(int.from_bytes(bytes([byte]) * dtype.itemsize, "little"), unsigned)
            poisons[p.name] = (w.view(unsigned) ^ mask).view(dtype)
    return poisons
