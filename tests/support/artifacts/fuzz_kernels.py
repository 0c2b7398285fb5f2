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
device function that is not inlined. And the ABI kinds (ABI_KINDS, each from a seed stream of
its own): non-type template parameters (`<typename T, int N, bool B>`, `<int BLOCK>` that the
kernel indexes with; defaults, named or left out; instantiated by the source or by the build),
CUDA vector pointers (`float4*` is an [n, 4] array), structs by value (mixed field sizes with
padding, arrays, vector fields, a nested struct, `const __grid_constant__`, its int field as the
size: `shape = ["cfg.n"]`), vectors by value (`float2 c`), and a zero-filled output (`zero`)
that the kernel adds its result into with atomics.

Exactness: every kernel computes, for each writable pointer, two accumulators per element:
  f = f0 + sum_j c_j * F(src_j) + c_i * (i & 255)    (double; F: floats as they are, integers' low 4 bits)
  u = u0 + sum_j C_j * U(src_j) + C_i * i             (uint64, wrapping; U: integers as they are, floats * 4)
where src_j runs over every input pointer's element i and every scalar. A float output stores f,
an integer output the low bits of u, a bool output bit 32 of u. Float data are multiples of 1/4
small enough that f is exact in float32 (< 2^15 in quarter steps), so the only rounding is the
store into f16/bf16, which CUDA (`__float2half_rn`, `__float2bfloat16_rn`) and numpy/ml_dtypes
both round to nearest even from the same float32 value: references are bit-exact for every
dtype, and the tests compare bytes. Integer arithmetic wraps modulo 2^64 on both sides.
A vector, struct or template constant is one source: its lanes or fields weighed (LANE_F and
LANE_U; a struct's own weights), so a lane or field read from the wrong place shows; a vector
result stores lane l with offsets of its own. A zero-filled output gets its result in two atomic
adds, which is the result only from a zero start.
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
# Parameter kinds beyond plain pointers and scalars (ABI_KINDS), each drawn from a seed stream
# of its own: a kernel that draws none of them is exactly the kernel it was before they existed.
ABI_FEATURES = {"nontype_template", "vector_pointer", "struct_param", "vector_scalar", "zero_output"}
# ---------------------------------------------------------------------------------------------

NAME_STYLES = ("extern_c", "cxx", "namespace", "template")
ALIAS_STYLES = ("typedef", "using", "pp_alias")
ALL_STYLES = NAME_STYLES + ALIAS_STYLES
# nontype_template: a template with integer/bool parameters (`<typename T, int N, bool B>` or
# `<int BLOCK>`), named as an instantiation; vector_pointer: `float4*` and the like, an
# [n, lanes] array; struct_param: a struct by value (padding, nesting, __grid_constant__, its
# int field as the size); vector_scalar: `float2 c` by value; zero_output: an output the kernel
# accumulates into atomically, declared `zero`.
ABI_KINDS = ("nontype_template", "vector_pointer", "struct_param", "vector_scalar", "zero_output")
# Features a kernel may show beyond its styles; `generate(require=...)` can force each of them.
FEATURES = ALL_STYLES + ("scalars_anywhere", "same_dtype_outputs") + ABI_KINDS
# How often a kernel draws each kind (when switched on), from the kind's own seed stream.
ABI_ODDS = {"nontype_template": 0.6, "vector_pointer": 0.2, "struct_param": 0.15, "vector_scalar": 0.12, "zero_output": 0.12}

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

# CUDA vector types → (lane C type, lanes). A pointer to one is an [n, lanes] array (one lane:
# [n]); one by value is a struct of its lanes x, y, z, w.
VECTORS: dict[str, tuple[str, int]] = {
    "float1": ("float", 1), "float2": ("float", 2), "float3": ("float", 3), "float4": ("float", 4),
    "double2": ("double", 2), "int1": ("int", 1), "int2": ("int", 2), "int3": ("int", 3), "int4": ("int", 4),
    "uint2": ("unsigned int", 2), "uint4": ("unsigned int", 4), "char2": ("signed char", 2), "char4": ("signed char", 4),
    "uchar2": ("unsigned char", 2), "uchar4": ("unsigned char", 4), "short2": ("short", 2), "short4": ("short", 4),
    "ushort2": ("unsigned short", 2), "longlong2": ("long long", 2), "ulonglong2": ("unsigned long long", 2),
    "half2": ("__half", 2), "__half2": ("__half", 2), "__nv_bfloat162": ("__nv_bfloat16", 2),
}
# Vector types by value: those of at most 16 bytes iree_dispatch passes as push constants.
VECTOR_SCALARS = ("float2", "float4", "float3", "int2", "int4", "uint2", "double2", "half2", "__nv_bfloat162", "uchar4", "short2", "char4", "longlong2")
LANES = "xyzw"
# A vector's F and U: lanes weighted, so lanes read in another order show (see the module doc).
LANE_F = (1, -2, 3, -4)
LANE_U = (1, 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9)
# A vector result's lane l stores f + LANE_F_OFFSET[l], u + LANE_U_OFFSET[l] (distinct low bytes).
LANE_F_OFFSET = (0.0, 1.25, -2.5, 3.75)
LANE_U_OFFSET = (0, 0x5BD1E995A3C59AC3, 0x27D4EB2F165667C5, 0x85EBCA77C2B2AE63)
# Floats in vectors, structs and template constants are k / 4 with |k| <= this: weighted lanes
# and fields stay within what one plain element may add (see _F_BOUND).
_SMALL_QUARTERS = 127

# Scalar field types of generated structs (mixed sizes, so the layout has padding).
STRUCT_FIELD_TYPES = ("bool", "char", "signed char", "unsigned char", "short", "unsigned short", "int", "unsigned", "float",
                      "double", "long long", "unsigned long long", "int64_t", "uint16_t", "__half", "__nv_bfloat16")
STRUCT_VECTOR_FIELDS = ("float2", "int2", "half2", "uchar4", "int4", "double2")
FIELD_NAMES = ("a", "b", "c", "d", "e", "f", "g", "h", "u", "v", "w", "r", "kk", "lo", "hi", "tag")
SIZE_FIELD_TYPES = ("int", "unsigned", "int32_t", "uint32_t", "unsigned int")  # 4 bytes: a size the spec may name (`s.n`)
# Zero-filled outputs are atomically accumulated into: element types atomicAdd takes.
ZERO_TYPES = ("float", "double", "int", "unsigned", "unsigned int", "int32_t", "uint32_t", "unsigned long long")
# Non-type template parameters: C type → (lowest, highest) value drawn.
TEMPLATE_CONST_TYPES = {"int": (-100000, 100000), "unsigned": (0, 2**32 - 1), "unsigned int": (0, 2**32 - 1), "short": (-300, 300),
                        "char": (0, 127), "long long": (-(2**40), 2**40), "bool": (0, 1)}


def _scalar_layout(ctype: str) -> tuple[int, int]:
    """(size, alignment) of a scalar or CUDA vector type, as CUDA lays it out."""
    if ctype in VECTORS:
        lane, lanes = VECTORS[ctype]
        size = numpy_dtype(SCALAR[lane]).itemsize
        # Two- and four-lane vectors are aligned to their size (up to 16); three lanes to one lane.
        return size * lanes, size if lanes == 3 else min(size * lanes, 16)
    size = numpy_dtype(SCALAR[ctype]).itemsize
    return size, size


@dataclass(frozen=True)
class FuzzField:
    """A field of a generated struct: a scalar, an array of scalars (count), a CUDA vector or a
    nested struct."""

    name: str
    ctype: str = ""  # a scalar or vector C type, or an array's element type
    count: int = 0  # an array: `ctype name[count]`
    struct: FuzzStruct | None = None

    @property
    def layout(self) -> tuple[int, int]:
        if self.struct is not None:
            return self.struct.nbytes, self.struct.align
        size, align = _scalar_layout(self.ctype)
        return size * max(self.count, 1), align

    def leaves(self) -> list[tuple[str, str]]:
        """(path, scalar C type) of every scalar in it, as descriptions name them."""
        if self.struct is not None:
            return [(f"{self.name}.{path}", ctype) for path, ctype in self.struct.leaves()]
        if self.count:
            return [(f"{self.name}[{i}]", self.ctype) for i in range(self.count)]
        if self.ctype in VECTORS:
            lane, lanes = VECTORS[self.ctype]
            return [(f"{self.name}.{LANES[i]}", lane) for i in range(lanes)]
        return [(self.name, self.ctype)]


@dataclass(frozen=True)
class FuzzStruct:
    """A struct passed by value: its C definition is generated with the kernel. f_weights and
    u_weights weigh its scalars (leaves(), in order) in its F and U."""

    name: str
    fields: tuple[FuzzField, ...]
    typedef: bool = False  # `typedef struct {...} name;` rather than `struct name {...};`
    f_weights: tuple[int, ...] = ()
    u_weights: tuple[int, ...] = ()

    @property
    def align(self) -> int:
        return max(f.layout[1] for f in self.fields)

    def offsets(self) -> list[int]:
        """Each field's byte offset: aligned to its alignment, in order (C's rule)."""
        offsets, at = [], 0
        for f in self.fields:
            size, align = f.layout
            at = -(-at // align) * align
            offsets.append(at)
            at += size
        return offsets

    @property
    def nbytes(self) -> int:
        end = self.offsets()[-1] + self.fields[-1].layout[0]
        return -(-end // self.align) * self.align

    def leaves(self) -> list[tuple[str, str]]:
        return [leaf for f in self.fields for leaf in f.leaves()]

    def leaf_offsets(self) -> list[int]:
        """Each scalar's byte offset in the struct, leaves() order."""
        found = []
        for f, offset in zip(self.fields, self.offsets()):
            if f.struct is not None:
                found += [offset + o for o in f.struct.leaf_offsets()]
            else:
                lane = numpy_dtype(SCALAR[VECTORS[f.ctype][0] if f.ctype in VECTORS else f.ctype]).itemsize
                found += [offset + i * lane for i in range(len(f.leaves()))]
        return found

    def definitions(self) -> list[str]:
        """The C text that defines it (nested structs first)."""
        lines = [line for f in self.fields if f.struct is not None for line in f.struct.definitions()]
        body = " ".join(f"{f.struct.name if f.struct else f.ctype} {f.name}{f'[{f.count}]' if f.count else ''};" for f in self.fields)
        lines.append(f"typedef struct {{ {body} }} {self.name};" if self.typedef else f"struct {self.name} {{ {body} }};")
        return lines

    def value(self, flat: Mapping[str, Any]) -> dict[str, Any]:
        """A call argument from leaf values by path: nested structs as dicts, arrays as lists,
        vector fields as tuples of lanes (the forms the runtime takes)."""
        value: dict[str, Any] = {}
        for f in self.fields:
            if f.struct is not None:
                value[f.name] = f.struct.value({path[len(f.name) + 1:]: v for path, v in flat.items() if path.startswith(f"{f.name}.")})
            elif f.count or f.ctype in VECTORS:
                lanes = [flat[path] for path, _ in f.leaves()]
                value[f.name] = lanes if f.count else tuple(lanes)
            else:
                value[f.name] = flat[f.name]
        return value

    def flat(self, value: Mapping[str, Any]) -> dict[str, Any]:
        """Leaf values by path from a value() form."""
        found = {}
        for f in self.fields:
            v = value[f.name]
            if f.struct is not None:
                found.update({f"{f.name}.{path}": x for path, x in f.struct.flat(v).items()})
            elif f.count or f.ctype in VECTORS:
                found.update({path: x for (path, _), x in zip(f.leaves(), v)})
            else:
                found[f.name] = v
        return found

    def pack(self, value: Mapping[str, Any]) -> bytes:
        """Its bytes (padding zero), for the host check."""
        data = bytearray(self.nbytes)
        flat = self.flat(value)
        for (path, ctype), offset in zip(self.leaves(), self.leaf_offsets()):
            raw = np.array(flat[path], dtype=numpy_dtype(SCALAR[ctype])).tobytes()
            data[offset : offset + len(raw)] = raw
        return bytes(data)


@dataclass(frozen=True)
class TemplateConst:
    """A non-type template parameter of the kernel, with the value its instantiation gives."""

    name: str  # N, B, BLOCK
    ctype: str  # TEMPLATE_CONST_TYPES
    value: int
    written: str  # the value as the kernel's name writes it: "256", "0x100", "7u", "true"
    default: str = ""  # the default the template declares ("" for none)
    named: bool = True  # written in the kernel's name (else left to its default, which is the value)

    @property
    def numpy(self) -> str:
        return SCALAR[self.ctype]


@dataclass(frozen=True)
class FuzzParam:
    name: str
    role: str  # one of POINTER_ROLES or SCALAR_ROLES
    spelled: str  # the type as the kernel writes it: a C type, an alias, T, a vector or struct type
    ctype: str  # the C type it resolves to (a vector's: its lane type; a struct's: its name)
    decl: str  # the parameter as declared in the kernel, e.g. "const float* __restrict__ x"
    expr: str = ""  # computed scalars: the spec expression over the size symbol
    lanes: int = 0  # a CUDA vector type (`spelled`) of this many lanes; 0: not a vector
    struct: FuzzStruct | None = None  # a struct by value
    zero: bool = False  # a fresh output declared zero-filled (the kernel accumulates into it)

    @property
    def pointer(self) -> bool:
        return self.role in POINTER_ROLES

    @property
    def numpy(self) -> str:
        """The numpy dtype of an element or value (of a lane, for vectors; not for structs)."""
        return (POINTEE[self.ctype][0] if self.pointer else SCALAR[self.ctype])

    @property
    def mlir(self) -> str:
        return POINTEE[self.ctype][1]

    @property
    def value_type(self) -> str:
        """The C type of one element or value: the vector or struct type, else ctype."""
        return self.spelled if self.lanes or self.struct else self.ctype

    @property
    def by_value(self) -> bool:
        """A struct or vector scalar: passed as its bytes, one push constant per word."""
        return not self.pointer and (self.struct is not None or self.lanes > 0)

    @property
    def shape_tail(self) -> tuple[int, ...]:
        """Dims after the size: a vector pointer's lanes (none for one lane)."""
        return (self.lanes,) if self.pointer and self.lanes > 1 else ()

    @property
    def writable(self) -> bool:
        return self.role in ("io", "out")

    @property
    def nbytes(self) -> int:
        if self.pointer:
            return 8
        if self.struct is not None:
            return self.struct.nbytes
        if self.lanes:
            return _scalar_layout(self.spelled)[0]
        return numpy_dtype(self.numpy).itemsize

    @property
    def words(self) -> int:
        """32-bit push constants it takes: a struct or vector its bytes' words, a 64-bit scalar two."""
        if self.by_value:
            return -(-self.nbytes // 4)
        return 2 if self.nbytes == 8 else 1


@dataclass(frozen=True)
class Formula:
    """One writable pointer's per-element formula (see the module docstring)."""

    f0: float
    u0: int
    f_coefs: tuple[int, ...]  # per source (FuzzKernel.sources), then:
    u_coefs: tuple[int, ...]
    f_index: int
    u_index: int
    f_consts: tuple[int, ...] = ()  # per non-type template parameter (FuzzKernel.template_consts)
    u_consts: tuple[int, ...] = ()


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
    # Non-type template parameters (ABI_KINDS' nontype_template): after T, if the kernel has it.
    template_consts: tuple[TemplateConst, ...] = ()
    instantiated: bool = True  # the source instantiates the kernel itself (else iree_dispatch does)

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
        fresh = [(p.numpy, p.shape_tail) for p in self.params if p.role == "out"]
        if len(fresh) != len(set(fresh)):
            found.add("same_dtype_outputs")
        if "::" in self.namespace:
            found.add("nested_namespace")
        if not any(p.pointer and p.role != "out" for p in self.params):
            found.add("no_inputs")
        found |= self._abi_features()
        return frozenset(found)

    def _abi_features(self) -> set[str]:
        """The ABI_KINDS this kernel shows, plus detail tags."""
        found = set()
        if self.template_consts:
            found.add("nontype_template")
            if any(not c.named for c in self.template_consts):
                found.add("template_default")
            if not self.instantiated:
                found.add("instantiated_by_build")
        if any(p.pointer and p.lanes for p in self.params):
            found.add("vector_pointer")
        for p in self.params:
            if p.struct is not None:
                found.add("struct_param")
                if "__grid_constant__" in p.decl:
                    found.add("grid_constant")
                if any(f.struct is not None for f in p.struct.fields):
                    found.add("nested_struct")
        if self.size_field:
            found.add("struct_size")
        if any(p.by_value and p.lanes for p in self.params):
            found.add("vector_scalar")
        if any(p.zero for p in self.params):
            found.add("zero_output")
        return found

    @property
    def instantiation_args(self) -> list[str]:
        """Every template argument of the kernel's instantiation, defaults included."""
        return ([self.template_arg] if self.template_arg else []) + [c.written for c in self.template_consts]

    @property
    def size_field(self) -> str:
        """The struct field that holds the size (`s.n`), or ""."""
        return self.size if "." in self.size else ""

    @property
    def has_out_form(self) -> bool:
        """Whether the kernel can take its fresh outputs as arguments (a zero-filled output can't)."""
        return not any(p.zero for p in self.params)

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
        if zero := [p.name for p in self.pointers if p.zero]:
            options["zero"] = zero
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
        """Fresh random data for every readable pointer (exactly representable, see _QUARTERS):
        [n, lanes] for a vector pointer."""
        return {p.name: random_array(rng, p.numpy, n, p.lanes) for p in self.pointers if p.role != "out"}

    def random_scalars(self, rng: np.random.Generator) -> dict[str, Any]:
        """Random values of every scalar argument (full range for integers): a struct as a dict
        of its fields (nested dicts, lists, tuples), a vector as a tuple of its lanes. A struct
        field that holds the size is set by scalar_values."""
        values = {}
        for p in self.scalars:
            if p.role != "arg":
                continue
            if p.struct is not None:
                values[p.name] = p.struct.value({path: random_scalar(rng, SCALAR[ctype], _SMALL_QUARTERS) for path, ctype in p.struct.leaves()})
            elif p.lanes:
                values[p.name] = tuple(random_scalar(rng, p.numpy, _SMALL_QUARTERS) for _ in range(p.lanes))
            else:
                values[p.name] = random_scalar(rng, p.numpy)
        return values

    def scalar_values(self, scalars: Mapping[str, Any], n: int) -> dict[str, Any]:
        """Every scalar's value in the kernel: arguments (a struct's size field set to n), the
        size, computed ones."""
        values = {}
        for p in self.scalars:
            if p.role == "arg" and self.size_field.startswith(f"{p.name}."):
                values[p.name] = {**scalars[p.name], self.size_field.split(".", 1)[1]: n}
            elif p.role == "arg":
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
                assert a.shape == (n, *p.shape_tail) and a.dtype == numpy_dtype(p.numpy), (p.name, a.shape, a.dtype)
                lanes = [a] if a.ndim == 1 else [a[:, lane] for lane in range(a.shape[1])]
                f_src.append(_weighted(LANE_F, [_f_array(v) for v in lanes]))
                u_src.append(_weighted(LANE_U, [_u_array(v) for v in lanes]))
            elif p.struct is not None:
                flat = p.struct.flat(values[p.name])
                f_src.append(sum(w * _f_scalar(flat[path], SCALAR[ctype]) for w, (path, ctype) in zip(p.struct.f_weights, p.struct.leaves())))
                u_src.append(sum(w * _u_scalar(flat[path], SCALAR[ctype]) for w, (path, ctype) in zip(p.struct.u_weights, p.struct.leaves())) % _U64)
            elif p.lanes:
                f_src.append(sum(w * _f_scalar(v, p.numpy) for w, v in zip(LANE_F, values[p.name])))
                u_src.append(sum(w * _u_scalar(v, p.numpy) for w, v in zip(LANE_U, values[p.name])) % _U64)
            else:
                f_src.append(_f_scalar(values[p.name], p.numpy))
                u_src.append(_u_scalar(values[p.name], p.numpy))
        for c in self.template_consts:
            f_src.append(_f_scalar(c.value, c.numpy))
            u_src.append(_u_scalar(c.value, c.numpy))
        index = np.arange(n, dtype=np.int64)
        f_index, u_index = (index & 255).astype(np.float64), index.astype(np.uint64)
        out = {}
        for name, formula in self.formulas:
            f = np.full(n, formula.f0, np.float64) + formula.f_index * f_index
            u = np.full(n, formula.u0, np.uint64) + np.uint64(formula.u_index) * u_index
            for c, v in zip(formula.f_coefs + formula.f_consts, f_src):
                f = f + c * v
            for c, v in zip(formula.u_coefs + formula.u_consts, u_src):
                # Scalars in Python ints: numpy warns when two uint64 scalars wrap around.
                u = u + (np.uint64(c) * v if isinstance(v, np.ndarray) else np.uint64(c * v % _U64))
            p = self.param(name)
            if p.pointer and p.lanes > 1:
                lanes = [(f + LANE_F_OFFSET[lane], u + np.uint64(LANE_U_OFFSET[lane])) for lane in range(p.lanes)]
                assert all(np.all(np.abs(lf) < _F_BOUND) for lf, _ in lanes), f"{self.name}: {name} leaves the exact range"
                out[name] = np.stack([_store(lf, lu, p.numpy) for lf, lu in lanes], axis=1)
            else:
                assert np.all(np.abs(f) < _F_BOUND), f"{self.name}: {name} leaves the exact range"
                out[name] = _store(f, u, p.numpy)
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


def random_array(rng: np.random.Generator, dtype: str, n: int, lanes: int = 0) -> np.ndarray:
    """n random elements; of a vector type (lanes > 1), an [n, lanes] array with smaller floats."""
    shape = (n, lanes) if lanes > 1 else n
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype in _FLOAT_KINDS:
        k = _SMALL_QUARTERS if lanes else _QUARTERS[dtype]
        return (rng.integers(-k, k, shape, endpoint=True) / 4).astype(numpy_dtype(dtype))
    info = np.iinfo(np.dtype(dtype))
    return rng.integers(info.min, info.max, shape, dtype=info.dtype, endpoint=True)


def random_scalar(rng: np.random.Generator, dtype: str, quarters: int | None = None) -> Any:
    """A random value; floats are k / 4 with |k| <= quarters (default: _QUARTERS of the type)."""
    if dtype == "bool":
        return bool(rng.integers(2))
    if dtype in _FLOAT_KINDS:
        k = min(quarters or _QUARTERS[dtype], _QUARTERS[dtype])
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


def _weighted(weights: Sequence[int], values: Sequence[np.ndarray]) -> np.ndarray:
    """sum_l weights[l] * values[l] (uint64 arrays wrap)."""
    total = weights[0] * values[0] if values[0].dtype != np.uint64 else np.uint64(weights[0]) * values[0]
    for w, v in zip(weights[1:], values[1:]):
        total = total + (w * v if v.dtype != np.uint64 else np.uint64(w) * v)
    return total


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

# Appended to PRELUDE in modules with vector or zero-filled parameters (others keep their bytes).
ABI_PRELUDE = f"""
// Vectors: F and U weigh the lanes ({", ".join(map(str, LANE_F))}; {", ".join(map(hex, LANE_U))}), a result's lane l adds its own offset.
template <typename V> __host__ __device__ inline double fz_fv1(V v) {{ return fz_f(v.x); }}
template <typename V> __host__ __device__ inline double fz_fv2(V v) {{ return fz_f(v.x) - 2.0 * fz_f(v.y); }}
template <typename V> __host__ __device__ inline double fz_fv3(V v) {{ return fz_f(v.x) - 2.0 * fz_f(v.y) + 3.0 * fz_f(v.z); }}
template <typename V> __host__ __device__ inline double fz_fv4(V v) {{ return fz_f(v.x) - 2.0 * fz_f(v.y) + 3.0 * fz_f(v.z) - 4.0 * fz_f(v.w); }}
template <typename V> __host__ __device__ inline unsigned long long fz_uv1(V v) {{ return fz_u(v.x); }}
template <typename V> __host__ __device__ inline unsigned long long fz_uv2(V v) {{ return fz_u(v.x) + {LANE_U[1]:#x}ULL * fz_u(v.y); }}
template <typename V> __host__ __device__ inline unsigned long long fz_uv3(V v) {{ return fz_uv2(v) + {LANE_U[2]:#x}ULL * fz_u(v.z); }}
template <typename V> __host__ __device__ inline unsigned long long fz_uv4(V v) {{ return fz_uv3(v) + {LANE_U[3]:#x}ULL * fz_u(v.w); }}
template <typename V> __host__ __device__ inline void fz_putv1(V* p, double f, unsigned long long u) {{ V v; fz_put(&v.x, f, u); *p = v; }}
template <typename V> __host__ __device__ inline void fz_putv2(V* p, double f, unsigned long long u) {{
  V v; fz_put(&v.x, f, u); fz_put(&v.y, f + {LANE_F_OFFSET[1]!r}, u + {LANE_U_OFFSET[1]:#x}ULL); *p = v; }}
template <typename V> __host__ __device__ inline void fz_putv3(V* p, double f, unsigned long long u) {{
  V v; fz_put(&v.x, f, u); fz_put(&v.y, f + {LANE_F_OFFSET[1]!r}, u + {LANE_U_OFFSET[1]:#x}ULL);
  fz_put(&v.z, f + {LANE_F_OFFSET[2]!r}, u + {LANE_U_OFFSET[2]:#x}ULL); *p = v; }}
template <typename V> __host__ __device__ inline void fz_putv4(V* p, double f, unsigned long long u) {{
  V v; fz_put(&v.x, f, u); fz_put(&v.y, f + {LANE_F_OFFSET[1]!r}, u + {LANE_U_OFFSET[1]:#x}ULL);
  fz_put(&v.z, f + {LANE_F_OFFSET[2]!r}, u + {LANE_U_OFFSET[2]:#x}ULL); fz_put(&v.w, f + {LANE_F_OFFSET[3]!r}, u + {LANE_U_OFFSET[3]:#x}ULL); *p = v; }}

// Zero-filled outputs: the result arrives in two atomic adds, so it is right only from a zero start.
__host__ __device__ inline void fz_atomic_add(unsigned int* p, unsigned int v) {{
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  *p += v;
#endif
}}
__host__ __device__ inline void fz_atomic_add(unsigned long long* p, unsigned long long v) {{
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  *p += v;
#endif
}}
__host__ __device__ inline void fz_atomic_add(float* p, float v) {{
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  *p += v;
#endif
}}
__host__ __device__ inline void fz_atomic_add(double* p, double v) {{
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  *p += v;
#endif
}}
// Integers add their low bits as unsigned (wrapping); floats f - 0.75 and 0.75, both exact.
template <typename T> __host__ __device__ inline void fz_accumulate(T* p, double, unsigned long long u) {{
  if (sizeof(T) == 8) {{ fz_atomic_add((unsigned long long*)p, u - 0x9E3779B97F4A7C15ULL); fz_atomic_add((unsigned long long*)p, 0x9E3779B97F4A7C15ULL); }}
  else {{ fz_atomic_add((unsigned int*)p, (unsigned int)u - 0x9E3779B9u); fz_atomic_add((unsigned int*)p, 0x9E3779B9u); }}
}}
__host__ __device__ inline void fz_accumulate(float* p, double f, unsigned long long) {{ fz_atomic_add(p, (float)(f - 0.75)); fz_atomic_add(p, 0.75f); }}
__host__ __device__ inline void fz_accumulate(double* p, double f, unsigned long long) {{ fz_atomic_add(p, f - 0.75); fz_atomic_add(p, 0.75); }}
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
    for p in k.params:
        if p.struct is not None:
            lines += _struct_source(p.struct)
    template, elem_template, template_args = _template_text(k)
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
        if p.struct is not None:
            f_of, u_of = f"{p.struct.name}_f", f"{p.struct.name}_u"
        elif p.lanes:
            f_of, u_of = f"fz_fv{p.lanes}", f"fz_uv{p.lanes}"
        else:
            f_of, u_of = "fz_f", "fz_u"
        body.append(f"const double fz_f{j} = {f_of}({value}); const unsigned long long fz_u{j} = {u_of}({value});")
    for j, c in enumerate(k.template_consts, start=len(k.sources)):
        body.append(f"const double fz_f{j} = fz_f({c.name}); const unsigned long long fz_u{j} = fz_u({c.name});")
    for name, fm in k.formulas:
        terms = [f"double f = {fm.f0!r};", f"unsigned long long u = {fm.u0:#x}ULL;"]
        terms += [f"f += {c}.0 * fz_f{j};" for j, c in enumerate(fm.f_coefs + fm.f_consts)]
        terms += [f"u += {c:#x}ULL * fz_u{j};" for j, c in enumerate(fm.u_coefs + fm.u_consts)]
        terms += [f"f += {fm.f_index}.0 * (double)(i & 255);", f"u += {fm.u_index:#x}ULL * (unsigned long long)i;"]
        p = k.param(name)
        put = "fz_accumulate" if p.zero else f"fz_putv{p.lanes}" if p.lanes else "fz_put"
        terms.append(f"{put}(&{_element(k, name)}, f, u);")
        body.append("{ " + " ".join(terms) + " }")
    inline = "__noinline__" if k.noinline else "inline"
    lines.append(f"{elem_template}__host__ __device__ {inline} void {elem}({', '.join(elem_params)}) {{")
    lines += [f"  {line}" for line in body]
    lines.append("}")

    call = f"{'::' if k.name_style == 'namespace' else ''}{elem}{template_args}(fz_i, {', '.join(p.name for p in k.params)});"
    extern = 'extern "C" ' if k.name_style == "extern_c" else ""
    kernel = [f"{template}{extern}__global__ void {k.ident}({', '.join(decls)}) {{"]
    # A kernel templated on its block size indexes with it: a wrong instantiation shows.
    step = "BLOCK" if any(c.name == "BLOCK" for c in k.template_consts) else "blockDim.x"
    if k.grid_stride:
        kernel.append(f"  for (long long fz_i = (long long)blockIdx.x * {step} + threadIdx.x; fz_i < (long long){k.size};"
                      f" fz_i += (long long)gridDim.x * {step}) {call}")
    else:
        kernel += [f"  const long long fz_i = (long long)blockIdx.x * {step} + threadIdx.x;",
                   f"  if (fz_i < (long long){k.size}) {call}"]
    kernel.append("}")
    if k.name_style == "namespace":
        if "::" in k.namespace and k.seed % 2:  # C++17 nested form, or two blocks
            kernel = [f"namespace {k.namespace} {{", *kernel, f"}}  // namespace {k.namespace}"]
        else:
            parts = k.namespace.split("::")
            kernel = [*(f"namespace {part} {{" for part in parts), *kernel, *("}" for _ in parts)]
    lines += kernel
    if k.name_style == "template" and not k.template_consts:
        resolved = [re.sub(r"\bT\b", k.template_arg, d) for d in decls]
        lines.append(f"template __global__ void {k.ident}<{k.template_arg}>({', '.join(resolved)});")
    elif k.template_consts and k.instantiated:
        resolved = [re.sub(r"\bT\b", k.template_arg, d) for d in decls] if k.template_arg else list(decls)
        qualified = f"{k.namespace}::{k.ident}" if k.namespace else k.ident
        lines.append(f"template __global__ void {qualified}<{', '.join(k.instantiation_args)}>({', '.join(resolved)});")
    return "\n".join(lines) + "\n"


def _template_text(k: FuzzKernel) -> tuple[str, str, str]:
    """(the kernel's template head, the per-element function's, the arguments the kernel
    passes that function): empty for a kernel that is no template."""
    if k.name_style == "template" and not k.template_consts:
        return "template <typename T>\n", "template <typename T>\n", "<T>"
    if not k.template_consts:
        return "", "", ""
    head = ["typename T"] if k.template_arg else []
    names = ["T"] if k.template_arg else []
    with_defaults = [*head, *(f"{c.ctype} {c.name}{f' = {c.default}' if c.default else ''}" for c in k.template_consts)]
    head += [f"{c.ctype} {c.name}" for c in k.template_consts]
    names += [c.name for c in k.template_consts]
    return f"template <{', '.join(with_defaults)}>\n", f"template <{', '.join(head)}>\n", f"<{', '.join(names)}>"


def _struct_source(struct: FuzzStruct) -> list[str]:
    """A struct's definition and its F and U (weighted fields, see FuzzStruct)."""
    leaves = struct.leaves()
    f_terms = " + ".join(f"{w}.0 * fz_f(s.{path})" for w, (path, _) in zip(struct.f_weights, leaves))
    u_terms = " + ".join(f"{w:#x}ULL * fz_u(s.{path})" for w, (path, _) in zip(struct.u_weights, leaves))
    return [*struct.definitions(),
            f"__host__ __device__ inline double {struct.name}_f({struct.name} s) {{ return {f_terms}; }}",
            f"__host__ __device__ inline unsigned long long {struct.name}_u({struct.name} s) {{ return {u_terms}; }}"]


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
    abi_features: set[str] | frozenset[str] | None = None,
    require: Sequence[str] = (),
) -> FuzzKernel:
    """One random kernel, a pure function of the arguments.

    ident: the kernel's C identifier (unique within a module); default from the seed.
    fuzz_bf16: whether its module defines FUZZ_BF16 (what floatX means).
    styles, scalars_anywhere, same_dtype_outputs: default STYLES, SCALARS_ANYWHERE and
    SAME_DTYPE_OUTPUTS, read at call time.
    abi_features: the ABI_KINDS a kernel may draw; default ABI_FEATURES, read at call time.
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
    enabled = set(ABI_FEATURES if abi_features is None else abi_features)
    for kind, transform in _ABI_TRANSFORMS.items():
        # Each kind draws from its own stream, first whether it applies: switching one kind
        # off or on leaves every other kind's choices as they were.
        kind_rng = random.Random(_derive(f"fuzz-{kind}", seed))
        draw = kind_rng.random()
        odds = ABI_ODDS[kind] * (1 if kind != "nontype_template" or kernel.name_style == "template" else 0.3)
        if kind in require or (kind in enabled and draw < odds):
            kernel = transform(kernel, kind_rng, _Shape(anywhere, same_dtype, kind in require))
    source = _kernel_source(kernel, [p.decl for p in kernel.params])
    kernel = dataclasses.replace(kernel, source=source)
    missing = set(require) - kernel.features
    if missing:
        raise AssertionError(f"seed {seed}: required features {sorted(missing)} not generated")
    return kernel


# --- the ABI kinds: changes to a generated kernel, each from its own seed stream ---------------


@dataclass(frozen=True)
class _Shape:
    """What a change must keep: the switches the kernel was generated with."""

    anywhere: bool  # scalars may come before pointers
    same_dtype: bool  # fresh outputs may share a dtype and shape
    required: bool  # the kind must show (else a change that doesn't fit may leave the kernel be)


def _renamed(k: FuzzKernel, name: str) -> FuzzKernel:
    function = k.function if k.explicit_function else re.sub(r"\W+", "_", name).strip("_")
    return dataclasses.replace(k, name=name, function=function)


def _with_template_consts(k: FuzzKernel, rng: random.Random, shape: _Shape) -> FuzzKernel:
    """`template <typename T, int N, bool B>` (a template kernel) or `template <int BLOCK>`
    (the block size, which the kernel indexes with), sometimes with defaults left out of the name."""
    if k.name_style == "extern_c":  # extern "C" can't be a template
        if not shape.required:
            return k
        k = dataclasses.replace(k, name_style="cxx")
    if k.template_arg:
        kinds = [("N", rng.choice([t for t in TEMPLATE_CONST_TYPES if t != "bool"]))]
        if rng.random() < 0.7:
            kinds.append(("B", "bool"))
        values = [rng.randint(*TEMPLATE_CONST_TYPES[ctype]) for _, ctype in kinds]
    else:
        kinds = [("BLOCK", rng.choice(("int", "unsigned", "unsigned int")))]
        values = [k.block]
    defaulted = rng.randint(0, len(kinds))  # the last `defaulted` parameters have defaults
    omitted = rng.randint(0, defaulted)  # the last `omitted` of them are left out of the name
    consts = []
    for i, ((name, ctype), value) in enumerate(zip(kinds, values)):
        has_default = i >= len(kinds) - defaulted
        named = i < len(kinds) - omitted
        default = value if not named or rng.random() < 0.5 else rng.randint(*TEMPLATE_CONST_TYPES[ctype])
        consts.append(TemplateConst(name, ctype, value, _written(rng, ctype, value), _written(rng, ctype, default) if has_default else "", named))
    k = dataclasses.replace(k, template_consts=tuple(consts), instantiated=rng.random() < 0.5, formulas=tuple(
        (name, dataclasses.replace(fm, f_consts=tuple(rng.choice(_F_COEFS) for _ in consts), u_consts=tuple(rng.getrandbits(64) | 1 for _ in consts)))
        for name, fm in k.formulas))
    args = ([k.template_arg] if k.template_arg else []) + [c.written for c in consts if c.named]
    qualified = f"{k.namespace}::{k.ident}" if k.namespace else k.ident
    return _renamed(k, f"{qualified}<{', '.join(args)}>" if args else qualified)


def _written(rng: random.Random, ctype: str, value: int) -> str:
    """A template argument as a name may write it: 256, 0x100, 256u; true/false."""
    if ctype == "bool":
        return "true" if value else "false"
    if value >= 0 and rng.random() < 0.3:
        return hex(value)
    return f"{value}u" if ctype.startswith("unsigned") and rng.random() < 0.5 else str(value)


def _with_vector_pointers(k: FuzzKernel, rng: random.Random, shape: _Shape) -> FuzzKernel:
    """One to three pointers spelled with a plain C type become CUDA vector pointers."""
    plain = [p for p in k.pointers if p.spelled == p.ctype and not p.zero]
    params = list(k.params)
    for p in rng.sample(plain, min(len(plain), rng.choice((1, 1, 2, 3)))):
        vector = rng.choice(list(VECTORS))
        lane, lanes = VECTORS[vector]
        fresh = [(q.numpy, q.lanes > 1) for q in params if q.role == "out" and q.name != p.name]
        if p.role == "out" and not shape.same_dtype and (SCALAR[lane], lanes > 1) in fresh:
            continue
        params[params.index(p)] = dataclasses.replace(p, spelled=vector, ctype=lane, lanes=lanes, decl=_respelled(p.decl, p.spelled, vector))
    k = dataclasses.replace(k, params=tuple(params))
    if shape.required and not any(p.pointer and p.lanes for p in params):
        vector = rng.choice(list(VECTORS))
        lane, lanes = VECTORS[vector]
        name = next(n for n in _EXTRA_POINTER_NAMES if n not in {p.name for p in params})
        param = FuzzParam(name, "in", vector, lane, _pointer_decl(rng, "in", vector, name), lanes=lanes)
        k = _with_source(k, rng, _pointer_position(k, rng, shape), param)
    return k


_EXTRA_POINTER_NAMES = ("vin", "vec", "sums", "hist", "total", "accum")
_EXTRA_SCALAR_NAMES = ("cfg", "params", "opts", "lanes", "pair", "quad")


def _respelled(decl: str, old: str, new: str) -> str:
    """A pointer declaration (see _pointer_decl) with its element type `old` written `new`."""
    for head in (f"const {old}*", f"{old} const*", f"{old}*"):
        if decl.startswith(head):
            return head.replace(old, new) + decl[len(head):]
    raise ValueError(f"unexpected pointer declaration {decl!r}")


def _pointer_position(k: FuzzKernel, rng: random.Random, shape: _Shape) -> int:
    """Where a new pointer may go: anywhere, or among the pointers (before every scalar)."""
    if shape.anywhere:
        return rng.randint(0, len(k.params))
    return rng.randint(0, len(k.pointers))


def _scalar_position(k: FuzzKernel, rng: random.Random, shape: _Shape) -> int:
    if shape.anywhere:
        return rng.randint(0, len(k.params))
    return rng.randint(len(k.pointers), len(k.params))


def _with_source(k: FuzzKernel, rng: random.Random, at: int, param: FuzzParam, f_coefs: Sequence[int] = (-1, 1)) -> FuzzKernel:
    """`param` (a pointer read or a scalar) inserted at `at`, weighed in every formula."""
    j = sum(1 for p in k.params[:at] if p.role != "out")  # its index among the sources
    formulas = []
    for name, fm in k.formulas:
        f, u = rng.choice(f_coefs), rng.getrandbits(64) | 1
        formulas.append((name, dataclasses.replace(fm, f_coefs=(*fm.f_coefs[:j], f, *fm.f_coefs[j:]), u_coefs=(*fm.u_coefs[:j], u, *fm.u_coefs[j:]))))
    return dataclasses.replace(k, params=(*k.params[:at], param, *k.params[at:]), formulas=tuple(formulas))


def _with_struct(k: FuzzKernel, rng: random.Random, shape: _Shape) -> FuzzKernel:
    """A struct by value: scalars of mixed sizes (padding), sometimes an array, a vector field, a
    nested struct, `const __grid_constant__`; sometimes its int field is the size (`s.n`)."""
    name = next(n for n in _EXTRA_SCALAR_NAMES if n not in {p.name for p in k.params})
    size_field = rng.random() < 0.4
    fields = _random_fields(rng, f"{k.ident}_S", rng.randint(2, 5), depth=0, avoid={k.size} if size_field else set())
    if size_field:
        fields.insert(rng.randint(0, len(fields)), FuzzField(k.size, rng.choice(SIZE_FIELD_TYPES)))
    struct = FuzzStruct(f"{k.ident}_S", tuple(fields), typedef=rng.random() < 0.3)
    leaves = struct.leaves()
    struct = dataclasses.replace(struct, f_weights=tuple(rng.choice((-1, 1)) for _ in leaves), u_weights=tuple(rng.getrandbits(64) | 1 for _ in leaves))
    qualifier = rng.choice(("", "", "const ", "const __grid_constant__ ", "const __grid_constant__ "))
    param = FuzzParam(name, "arg", struct.name, struct.name, f"{qualifier}{struct.name} {name}", struct=struct)
    if not size_field:
        return _with_source(k, rng, _scalar_position(k, rng, shape), param)
    # The struct takes the size scalar's place (and its weight); the spec names the field.
    at = next(i for i, p in enumerate(k.params) if p.role == "size")
    dotted = f"{name}.{k.size}"
    params = [*k.params[:at], param, *k.params[at + 1:]]
    params = [dataclasses.replace(p, expr=re.sub(rf"\b{k.size}\b", dotted, p.expr)) if p.role == "computed" else p for p in params]
    return dataclasses.replace(k, params=tuple(params), size=dotted, grid=re.sub(rf"\b{k.size}\b", dotted, k.grid))


def _random_fields(rng: random.Random, struct_name: str, count: int, depth: int, avoid: set[str]) -> list[FuzzField]:
    names = iter(rng.sample([n for n in FIELD_NAMES if n not in avoid], len(FIELD_NAMES) - len(avoid & set(FIELD_NAMES))))
    fields = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.12 and depth == 0:
            inner_name = f"{struct_name}_in{len(fields)}"
            inner = FuzzStruct(inner_name, tuple(_random_fields(rng, inner_name, rng.randint(1, 3), depth + 1, set())), typedef=rng.random() < 0.3)
            fields.append(FuzzField(next(names), struct=inner))
        elif kind < 0.24:
            fields.append(FuzzField(next(names), rng.choice(("int", "float", "short", "unsigned char")), count=rng.randint(2, 3)))
        elif kind < 0.36:
            fields.append(FuzzField(next(names), rng.choice(STRUCT_VECTOR_FIELDS)))
        else:
            fields.append(FuzzField(next(names), rng.choice(STRUCT_FIELD_TYPES)))
    return fields


def _with_vector_scalar(k: FuzzKernel, rng: random.Random, shape: _Shape) -> FuzzKernel:
    """A CUDA vector by value (`float2 c`): its lanes are its fields."""
    name = next(n for n in _EXTRA_SCALAR_NAMES[::-1] if n not in {p.name for p in k.params})
    vector = rng.choice(VECTOR_SCALARS)
    lane, lanes = VECTORS[vector]
    param = FuzzParam(name, "arg", vector, lane, _scalar_decl(rng, vector, name), lanes=lanes)
    return _with_source(k, rng, _scalar_position(k, rng, shape), param)


def _with_zero_output(k: FuzzKernel, rng: random.Random, shape: _Shape) -> FuzzKernel:
    """A fresh output declared `zero` that the kernel adds its result into atomically."""
    fresh = {p.numpy for p in k.pointers if p.role == "out" and p.lanes <= 1}
    types = [t for t in ZERO_TYPES if shape.same_dtype or SCALAR[t] not in fresh]
    if not types or len(k.pointers) >= 16:
        return k
    spelled = rng.choice(types)
    name = next(n for n in _EXTRA_POINTER_NAMES[::-1] if n not in {p.name for p in k.params})
    param = FuzzParam(name, "out", spelled, spelled, _pointer_decl(rng, "out", spelled, name), zero=True)
    used = {(*fm.f_coefs, fm.f_index) for _, fm in k.formulas}
    sources = len(k.sources)
    while True:
        f_coefs = tuple(rng.choice(_F_COEFS) for _ in range(sources))
        f_index = rng.choice(_F_COEFS)
        if (*f_coefs, f_index) not in used:
            break
    f0 = rng.choice([f for f in range(-64, 65) if f / 4 not in {fm.f0 for _, fm in k.formulas}])
    formula = Formula(f0=f0 / 4, u0=rng.getrandbits(64), f_coefs=f_coefs, u_coefs=tuple(rng.getrandbits(64) | 1 for _ in range(sources)),
                      f_index=f_index, u_index=rng.getrandbits(64) | 1,
                      f_consts=tuple(rng.choice(_F_COEFS) for _ in k.template_consts), u_consts=tuple(rng.getrandbits(64) | 1 for _ in k.template_consts))
    at = _pointer_position(k, rng, shape)
    slot = sum(1 for p in k.params[:at] if p.writable)
    formulas = (*k.formulas[:slot], (name, formula), *k.formulas[slot:])
    return dataclasses.replace(k, params=(*k.params[:at], param, *k.params[at:]), formulas=formulas)


_ABI_TRANSFORMS = {
    "nontype_template": _with_template_consts,
    "vector_pointer": _with_vector_pointers,
    "struct_param": _with_struct,
    "vector_scalar": _with_vector_scalar,
    "zero_output": _with_zero_output,
}


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
        needs_abi = any(p.lanes or p.zero for k in self.kernels for p in k.params)
        return PRELUDE + (ABI_PRELUDE if needs_abi else "") + "".join(f"\n{k.source}" for k in self.kernels)

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
                args.append(f"({'const ' if p.role in ('in', 'ro') else ''}{p.value_type}*)a[{j}]")
            else:
                args.append(f"*(const {p.value_type}*)a[{j}]")
        targs = f"<{', '.join(k.instantiation_args)}>" if k.instantiation_args else ""
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
    contents. poison: the initial content of each fresh output (zero-filled ones start at zero)."""
    values = kernel.scalar_values(scalars, n)
    keep, pointers = [], []
    outputs = {}
    for p in kernel.params:
        if p.pointer:
            if p.zero:
                data = np.zeros((n, *p.shape_tail), numpy_dtype(p.numpy))
            else:
                data = np.array(poison[p.name] if p.role == "out" else arrays[p.name], copy=True)
            if p.writable:
                outputs[p.name] = data
        elif p.struct is not None:
            data = np.frombuffer(p.struct.pack(values[p.name]), np.uint8).copy()
        else:  # a scalar, or a vector's lanes in order
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
    # Zero-filled outputs have no poison: they start at zero (and have no out= form to pass one).
    for k, p in enumerate(p for p in kernel.params if p.role == "out" and not p.zero):
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
