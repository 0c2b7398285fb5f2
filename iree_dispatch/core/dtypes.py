"""C types ↔ IREE/MLIR element types ↔ numpy dtypes.

Dependency-free, shared by the build half (signature → tensor types) and the run-time half
(call-time dtype checks), so the two can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ElementType:
    mlir: str  # MLIR element type in tensor<...> and iree-run-module --input syntax
    numpy: str  # numpy dtype name
    nbytes: int


ELEMENT_TYPES: dict[str, ElementType] = {
    et.mlir: et
    for et in (
        ElementType("f16", "float16", 2),
        ElementType("bf16", "bfloat16", 2),  # numpy has none: needs ml_dtypes at run time
        ElementType("f32", "float32", 4),
        ElementType("f64", "float64", 8),
        ElementType("i1", "bool", 1),
        ElementType("i8", "int8", 1),
        ElementType("i16", "int16", 2),
        ElementType("i32", "int32", 4),
        ElementType("i64", "int64", 8),
        ElementType("ui8", "uint8", 1),
        ElementType("ui16", "uint16", 2),
        ElementType("ui32", "uint32", 4),
        ElementType("ui64", "uint64", 8),
    )
}

# Pointee C type (after removing const/volatile/__restrict__) → element type.
POINTEE_TYPES: dict[str, str] = {
    "float": "f32",
    "double": "f64",
    "__half": "f16",
    "half": "f16",
    "__nv_bfloat16": "bf16",
    "nv_bfloat16": "bf16",
    "bool": "i1",
    "char": "i8",
    "signed char": "i8",
    "int8_t": "i8",
    "unsigned char": "ui8",
    "uint8_t": "ui8",
    "short": "i16",
    "int16_t": "i16",
    "unsigned short": "ui16",
    "uint16_t": "ui16",
    "int": "i32",
    "int32_t": "i32",
    "unsigned": "ui32",
    "unsigned int": "ui32",
    "uint32_t": "ui32",
    "long": "i64",  # LP64: CUDA's device code follows the host's (64-bit) data model
    "long long": "i64",
    "int64_t": "i64",
    "unsigned long": "ui64",
    "unsigned long long": "ui64",
    "uint64_t": "ui64",
}


@dataclass(frozen=True)
class VectorType:
    """A CUDA vector type (`float4`, `half2`, `uchar4`, ...) as a pointee: an array of them is an
    array of `element` with a trailing dimension of `lanes` for the caller."""

    ctype: str
    element: str  # MLIR element type of one lane
    lanes: int
    align: int  # bytes: CUDA's alignment of the type, which every pointer to it must have


def _vectors() -> dict[str, VectorType]:
    """vector_types.h and cuda_fp16.h / cuda_bf16.h: `<prefix><lanes>` for 1 to 4 lanes. CUDA
    aligns a 1-, 2- or 4-lane type to its size (at most 16 bytes), a 3-lane one to its lane."""
    lanes_of = {
        "char": ("i8", 1), "uchar": ("ui8", 1), "short": ("i16", 2), "ushort": ("ui16", 2), "int": ("i32", 4), "uint": ("ui32", 4),
        "long": ("i64", 8), "ulong": ("ui64", 8), "longlong": ("i64", 8), "ulonglong": ("ui64", 8), "float": ("f32", 4), "double": ("f64", 8),
    }
    found = {}
    for prefix, (element, nbytes) in lanes_of.items():
        for lanes in (1, 2, 3, 4):
            found[f"{prefix}{lanes}"] = VectorType(f"{prefix}{lanes}", element, lanes, nbytes if lanes == 3 else min(nbytes * lanes, 16))
        if nbytes == 8:  # CUDA 13 spells the 32-byte four-lane types by their alignment
            found[f"{prefix}4_16a"] = VectorType(f"{prefix}4_16a", element, 4, 16)
            found[f"{prefix}4_32a"] = VectorType(f"{prefix}4_32a", element, 4, 32)
    for ctype, element in (("__half2", "f16"), ("half2", "f16"), ("__nv_bfloat162", "bf16"), ("nv_bfloat162", "bf16")):
        found[ctype] = VectorType(ctype, element, 2, 4)
    return found


# Pointee vector type → its lanes' element type, count and alignment.
VECTOR_TYPES: dict[str, VectorType] = _vectors()


@dataclass(frozen=True)
class ScalarType:
    """A scalar kernel parameter type and how it travels through IREE's 32-bit push constants.

    Values of 32 bits or fewer take one slot (sub-word values in its low bits); 64-bit values
    take two (low word first) and the PTX entry is adapted to reassemble them (ptx_adapt.py).
    """

    ctype: str
    kind: str  # int, uint, bool, float, double, half, bf16: how values are checked and packed; struct: by its fields
    nbytes: int  # sizeof in C: the size of the PTX .param nvcc emits
    func_arg: str  # MLIR type of the generated function's argument (a struct's: of each of its words)
    # A struct or CUDA vector type passed by value (kind "struct"): its scalar fields flattened
    # (`m`, `inner.a`, `dims[1]`; a vector's lanes `x`..`w`) at their byte offsets, and alignof.
    fields: tuple[Field, ...] = ()
    align: int = 0

    @property
    def slots(self) -> int:
        """32-bit push constants: a struct takes its bytes' words, padding included."""
        if self.kind == "struct":
            return -(-self.nbytes // 4)
        return 2 if self.nbytes == 8 else 1

    @property
    def integer(self) -> bool:
        return self.kind in ("int", "uint", "bool")

    def int_range(self) -> tuple[int, int]:
        bits = 8 * self.nbytes
        if self.kind == "bool":
            return 0, 1
        return (0, 2**bits - 1) if self.kind == "uint" else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


@dataclass(frozen=True)
class Field:
    """A scalar field of a struct (or a lane of a vector) passed by value: its place in the bytes."""

    name: str
    stype: ScalarType
    offset: int


def _scalars(kind: str, nbytes: int, func_arg: str, *ctypes: str) -> list[ScalarType]:
    return [ScalarType(c, kind, nbytes, func_arg) for c in ctypes]


# `double` crosses the function boundary as its IEEE bits in an i64 and half/bf16 as their
# 16 bits in an i32 (the run-time half converts): IREE's host code has no f16 arithmetic, and
# passing raw bits keeps the values exact.
SCALAR_TYPES: dict[str, ScalarType] = {
    st.ctype: st
    for st in (
        *_scalars("bool", 1, "i32", "bool"),
        *_scalars("int", 1, "i32", "char", "signed char", "int8_t"),
        *_scalars("uint", 1, "i32", "unsigned char", "uint8_t"),
        *_scalars("int", 2, "i32", "short", "short int", "int16_t"),
        *_scalars("uint", 2, "i32", "unsigned short", "unsigned short int", "uint16_t"),
        *_scalars("int", 4, "i32", "int", "signed", "signed int", "int32_t"),
        *_scalars("uint", 4, "i32", "unsigned", "unsigned int", "uint32_t"),
        *_scalars("int", 8, "i64", "long", "long int", "long long", "long long int", "int64_t", "ptrdiff_t", "ssize_t"),
        *_scalars("uint", 8, "i64", "unsigned long", "unsigned long int", "unsigned long long", "unsigned long long int", "uint64_t", "size_t"),
        *_scalars("float", 4, "f32", "float"),
        *_scalars("double", 8, "i64", "double"),
        *_scalars("half", 2, "i32", "__half", "half"),
        *_scalars("bf16", 2, "i32", "__nv_bfloat16", "nv_bfloat16"),
    )
}

# A vector's lane element type → the C type of one lane, as a struct field.
_LANE_CTYPES = {
    "f16": "__half", "bf16": "__nv_bfloat16", "f32": "float", "f64": "double", "i8": "signed char", "ui8": "unsigned char",
    "i16": "short", "ui16": "unsigned short", "i32": "int", "ui32": "unsigned int", "i64": "long long", "ui64": "unsigned long long",
}


def vector_scalar_type(ctype: str) -> ScalarType:
    """A CUDA vector type passed by value (`float2 c`, `half2 h`, `int4 v`) as a struct of its
    lanes `x`, `y`, `z`, `w`, with the vector's alignment (vector_types.h)."""
    vector = VECTOR_TYPES[ctype]
    lane = SCALAR_TYPES[_LANE_CTYPES[vector.element]]
    fields = tuple(Field("xyzw"[i], lane, i * lane.nbytes) for i in range(vector.lanes))
    return ScalarType(ctype, "struct", lane.nbytes * vector.lanes, "i32", fields, vector.align)


SCALAR_HINT = (
    "scalars may be bool, (un)signed char/short/int/long/long long, (u)int8/16/32/64_t, size_t, "
    "float, double, __half or __nv_bfloat16, a CUDA vector type (float2, half2, int4, ...) or a struct of scalars defined in the "
    "kernel's source; pass anything else (pointers to host data) in a tensor"
)
