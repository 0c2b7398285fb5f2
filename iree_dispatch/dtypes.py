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
    "long long": "i64",
    "int64_t": "i64",
    "unsigned long long": "ui64",
    "uint64_t": "ui64",
}


@dataclass(frozen=True)
class ScalarType:
    """A scalar kernel parameter type that IREE can pass as one 32-bit push constant."""

    ctype: str
    func_arg: str  # MLIR type of the wrapper function's argument
    kind: str  # "int", "uint" or "float": how Python values are checked and converted
    ptx: frozenset[str]  # PTX .param types nvcc emits for it


# IREE passes push constants as 32-bit slots only (IREE_CUDA_FACTS.md). 64-bit and sub-word
# scalars need an ABI adapter; until that exists they are refused at build time, never
# passed half-filled.
SCALAR_TYPES: dict[str, ScalarType] = {
    st.ctype: st
    for st in (
        ScalarType("int", "i32", "int", frozenset({".u32", ".s32", ".b32"})),
        ScalarType("int32_t", "i32", "int", frozenset({".u32", ".s32", ".b32"})),
        ScalarType("unsigned", "i32", "uint", frozenset({".u32", ".b32"})),
        ScalarType("unsigned int", "i32", "uint", frozenset({".u32", ".b32"})),
        ScalarType("uint32_t", "i32", "uint", frozenset({".u32", ".b32"})),
        ScalarType("float", "f32", "float", frozenset({".f32", ".b32"})),
    )
}

UNSUPPORTED_SCALARS_HINT = (
    "only 32-bit scalars (int, unsigned, int32_t, uint32_t, float) can be passed as IREE push "
    "constants today; pass a wider value as two 32-bit halves, or put it in a 1-element tensor"
)
