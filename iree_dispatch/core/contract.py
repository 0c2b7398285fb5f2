"""The contract between the build half and the run-time half, dependency-free (numpy only).

- Where a generated function's description lives in the vmfb: an `iree.reflection` entry
  (REFLECTION_KEY for a kernel's function, PROGRAM_REFLECTION_KEY for a program's), compact JSON.
- The description's scalar entries (`scalar_description`) and how a Python number travels as a
  scalar argument (`scalar_argument`): the builder writes the unpacking, the runtime packs.
"""

from __future__ import annotations

import json
import math
import operator

import numpy as np

from .dtypes import ScalarType

REFLECTION_KEY = "iree_dispatch.kernel"
# The relations between sizes a description's checks use, by their arith.cmpi predicate: the
# generated functions assert them, the runtime checks them before a call.
RELATIONS = {"eq": operator.eq, "ne": operator.ne, "sge": operator.ge, "sle": operator.le}
PROGRAM_REFLECTION_KEY = "iree_dispatch.program"
# A kernel description's launch plan (emit.py writes it, runtime/launch.py launches from it): the
# executable, its variants and their conditions, the entry, the binding order, the push constants.
LAUNCH_KEY = "launch"


def encode(description: dict) -> str:
    return json.dumps(description, sort_keys=True, separators=(",", ":"))


def decode(text: str) -> dict:
    return json.loads(text)


def scalar_description(name: str, stype: ScalarType) -> dict:
    """A scalar argument as descriptions list it."""
    return {"name": name, "ctype": stype.ctype, "kind": stype.kind, "bytes": stype.nbytes}


def scalar_argument(kernel: str, scalar: dict, value) -> int | float:
    """A Python number as the generated function's argument for `scalar` (a description's
    scalar entry): range-checked against its C type, double/half/bf16 as their bits (what the
    generated function unpacks). Used at call time, and by programs for their constants."""
    where = f"{kernel}(): argument {scalar['name']!r} ({scalar['ctype']})"
    kind, bits = scalar["kind"], 8 * scalar["bytes"]
    if kind in ("float", "double", "half", "bf16"):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{where} must be a number, got {type(value).__name__}")
        # A finite value that rounds to an infinity in the C type is refused, as an out-of-range
        # integer is (infinities and NaN themselves pass as they are).
        if kind != "double" and math.isfinite(float(value)) and math.isinf(_rounded(kind, float(value))):
            raise ValueError(f"{where} = {value!r} is out of the range of {scalar['ctype']}")
        # double, half and bf16 travel as their bits (see dtypes.SCALAR_TYPES).
        if kind == "double":
            return int(np.array(float(value), np.float64).view(np.int64))
        if kind == "half":
            return int(np.array(float(value), np.float16).view(np.uint16))
        if kind == "bf16":
            return bfloat16_bits(float(value))
        return float(value)
    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)) and value not in (0, 1):
            raise TypeError(f"{where} must be a bool (or 0/1), got {value!r}")
        return int(bool(value))
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{where} must be an integer, got {type(value).__name__}")
    value = int(value)
    lo, hi = (0, 2**bits - 1) if kind == "uint" else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if not lo <= value <= hi:
        raise ValueError(f"{where} = {value} is out of range [{lo}, {hi}]")
    # The argument is an i32 (i64 for 64-bit types): unsigned values travel as the same bits.
    width = 64 if bits == 64 else 32
    return value - 2**width if value >= 2 ** (width - 1) else value


def bfloat16_bits(value: float) -> int:
    """bf16 bits of `value`, rounded to nearest even (as __float2bfloat16 does)."""
    bits = int(np.array(value, np.float32).view(np.uint32))
    if (bits & 0x7FFFFFFF) > 0x7F800000:  # NaN: keep it a (quiet) NaN
        return (bits >> 16) | 0x0040
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _rounded(kind: str, value: float) -> float:
    """`value` rounded to the scalar kind's type (float, half or bf16), as a Python float."""
    with np.errstate(over="ignore"):
        if kind == "bf16":
            return float(np.array(bfloat16_bits(value) << 16, np.uint32).view(np.float32))
        return float(np.float16(value) if kind == "half" else np.float32(value))
