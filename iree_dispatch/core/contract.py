"""The contract between the build half and the run-time half, dependency-free (numpy only).

- What the build tells the runtime about each generated function, as typed data: a kernel's
  `KernelDescription` (its arguments, results, grid and block, the archs and objects it was
  built for, and the `LaunchPlan` the runtime launches it directly with), a program's
  `ProgramDescription` (its arguments, results and the relations between sizes it checks).
- Where they live in the vmfb: an `iree.reflection` entry of the function (REFLECTION_KEY for a
  kernel's, PROGRAM_REFLECTION_KEY for a program's), one versioned compact JSON form written by
  `encode` and read by `read_description`, the one parser of both. A description of another
  version (an older build's) is refused with a `ContractError` that says to rebuild.
- How a Python number travels as a scalar argument (`scalar_argument`): the builder writes the
  unpacking, the runtime packs.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import expr as ex
from .dtypes import ScalarType
from .errors import ContractError

REFLECTION_KEY = "iree_dispatch.kernel"
PROGRAM_REFLECTION_KEY = "iree_dispatch.program"
# A program over several devices: its devices' names, comma-separated, in the order the module is
# loaded with them, in every public function's reflection (a plain string, not a description).
DEVICES_REFLECTION_KEY = "iree_dispatch.devices"
# The version of the JSON form below. Any change to what a description holds or means gets a
# new number: the runtime then refuses the modules an older build wrote instead of misreading them.
CONTRACT_VERSION = 3
# The relations between sizes a description's checks use, by their arith.cmpi predicate: the
# generated functions assert them, the runtime checks them before a call.
RELATIONS = {"eq": operator.eq, "ne": operator.ne, "sge": operator.ge, "sle": operator.le, "sgt": operator.gt, "slt": operator.lt}

Dim = str | int  # a dim as descriptions write it: a size's name or expression, or a static size


@dataclass(frozen=True)
class ScalarDescription:
    """A scalar argument (or push constant) by its C type: `kind` and `nbytes` say how it travels.
    A struct or vector by value (kind "struct") travels as its bytes in 32-bit words: `fields`
    are its scalar fields, each a ScalarDescription named by its path (`m`, `inner.a`,
    `dims[1]`, a vector's `x`) with its byte offset."""

    name: str
    ctype: str
    kind: str  # ScalarType.kind: int, uint, bool, float, double, half, bf16, struct
    nbytes: int
    fields: tuple[tuple[ScalarDescription, int], ...] = ()  # (field, byte offset) of a struct

    @classmethod
    def of(cls, name: str, stype: ScalarType) -> ScalarDescription:
        return cls(name, stype.ctype, stype.kind, stype.nbytes, tuple((cls.of(f.name, f.stype), f.offset) for f in stype.fields))

    @property
    def words(self) -> int:
        """32-bit push constants it takes: a struct its bytes' words, a 64-bit value two."""
        if self.kind == "struct":
            return -(-self.nbytes // 4)
        return 2 if self.nbytes == 8 else 1

    def to_dict(self) -> dict:
        fields = [{**f.to_dict(), "offset": offset} for f, offset in self.fields]
        return {"name": self.name, "ctype": self.ctype, "kind": self.kind, "bytes": self.nbytes, "fields": fields}

    @classmethod
    def from_dict(cls, d: Mapping) -> ScalarDescription:
        return cls(d["name"], d["ctype"], d["kind"], d["bytes"], tuple((cls.from_dict(f), f["offset"]) for f in d["fields"]))

    def signature(self) -> str:
        """How `inspect` shows it: `s: Shape {m: int @0, alpha: float @4}`."""
        if self.kind != "struct":
            return f"{self.name}: {self.ctype}"
        return f"{self.name}: {self.ctype} {{{', '.join(f'{f.name}: {f.ctype} @{offset}' for f, offset in self.fields)}}}"


@dataclass(frozen=True)
class TensorDescription:
    """A tensor argument or result: element type (MLIR's name) and dims. inplace: a result
    that is the input of the same name, written in place. zero: a fresh result zero-filled
    before the kernel runs (else its memory is uninitialised)."""

    name: str
    dtype: str
    shape: tuple[Dim, ...]
    inplace: bool = False
    zero: bool = False

    def to_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "inplace": self.inplace, "zero": self.zero}

    @classmethod
    def from_dict(cls, d: Mapping) -> TensorDescription:
        return cls(d["name"], d["dtype"], tuple(d["shape"]), d["inplace"], d["zero"])


@dataclass(frozen=True)
class SizeCheck:
    """A relation between sizes a function checks at entry: `lhs op rhs` (op: a key of
    RELATIONS; lhs, rhs: core/expr.py expressions), failing with `message`."""

    op: str
    lhs: str
    rhs: str
    message: str

    def to_dict(self) -> dict:
        return {"op": self.op, "lhs": self.lhs, "rhs": self.rhs, "message": self.message}

    @classmethod
    def from_dict(cls, d: Mapping) -> SizeCheck:
        return cls(d["op"], d["lhs"], d["rhs"], d["message"])


@dataclass(frozen=True)
class Requirement:
    """A relation between sizes a kernel's spec requires (`requires`), which its function
    checks at entry: `relation` in core/expr.py's relation syntax (comparisons joined by `or`),
    failing with `message` and the sizes it names."""

    relation: str
    message: str

    def to_dict(self) -> dict:
        return {"relation": self.relation, "message": self.message}

    @classmethod
    def from_dict(cls, d: Mapping) -> Requirement:
        return cls(d["relation"], d["message"])

    def refusal(self, function: str, env: Mapping[str, int]) -> str | None:
        """None when the relation holds for these sizes, else why the call is refused: the
        function, the message and the value of every size the relation names."""
        relation = _parsed_relation(self.relation)
        try:
            if ex.holds(relation, env):
                return None
            why = "but"
        except ZeroDivisionError:
            why = "which divides by zero for"
        given = ", ".join(f"{n} = {env[n]}" for n in ex.relation_symbols(relation))  # only for the message
        return f"{function}(): {self.message}, {why} {given}"


@dataclass(frozen=True)
class LaunchVariant:
    """One variant of a kernel's executable: the compute-capability rules under which IREE
    takes it (core/variants.py's Rule: major, minor, how) and the dynamic shared memory its
    export declares."""

    name: str
    rules: tuple[tuple[int, int, str], ...]
    shared_memory: int

    def to_dict(self) -> dict:
        return {"name": self.name, "rules": [list(rule) for rule in self.rules], "shared_memory": self.shared_memory}

    @classmethod
    def from_dict(cls, d: Mapping) -> LaunchVariant:
        return cls(d["name"], tuple((int(a), int(b), str(how)) for a, b, how in d["rules"]), d["shared_memory"])


@dataclass(frozen=True)
class PushConstant:
    """A scalar as the kernel receives it, in push-constant order: `value` None is the call's
    argument of that name, else the size expression the function computes it from."""

    scalar: ScalarDescription
    value: str | None

    def to_dict(self) -> dict:
        return {**self.scalar.to_dict(), "value": self.value}

    @classmethod
    def from_dict(cls, d: Mapping) -> PushConstant:
        return cls(ScalarDescription.from_dict(d), d["value"])


@dataclass(frozen=True)
class LaunchPlan:
    """What the runtime needs to launch a kernel itself exactly as its generated function's
    dispatch does (runtime/launch.py): the executable and its variants in IREE's order of
    preference, the entry, the block, the tensors in binding order, every push constant."""

    executable: str
    entry: str
    block: tuple[int, int, int]
    variants: tuple[LaunchVariant, ...]
    bindings: tuple[str, ...]
    constants: tuple[PushConstant, ...]

    def to_dict(self) -> dict:
        return {
            "executable": self.executable, "entry": self.entry, "block": list(self.block), "variants": [v.to_dict() for v in self.variants],
            "bindings": list(self.bindings), "constants": [c.to_dict() for c in self.constants],
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> LaunchPlan:
        return cls(d["executable"], d["entry"], tuple(d["block"]), tuple(map(LaunchVariant.from_dict, d["variants"])), tuple(d["bindings"]),
                   tuple(map(PushConstant.from_dict, d["constants"])))


COMBINE_KINDS = ("concat", "sum")


@dataclass(frozen=True)
class ParallelPlan:
    """How a kernel's calls split over GPUs (runtime/parallel.py's DataParallel), as its spec
    declares (`parallel = { split = { x = 0 }, combine = { out = "concat" } }`): the inputs
    split and the dim each is split along (the others go whole to every GPU), and per output
    how the GPUs' parts join: "concat" along `dim` or "sum" (dim -1)."""

    split: tuple[tuple[str, int], ...]
    combine: tuple[tuple[str, str, int], ...]

    def to_dict(self) -> dict:
        return {"split": dict(self.split), "combine": {name: [kind, dim] for name, kind, dim in self.combine}}

    @classmethod
    def from_dict(cls, d: Mapping) -> ParallelPlan:
        return cls(tuple((k, int(v)) for k, v in d["split"].items()), tuple((k, v[0], int(v[1])) for k, v in d["combine"].items()))


@dataclass(frozen=True, kw_only=True)
class FunctionDescription:
    """What a checked call of a generated function needs: its name for messages, its arguments
    (tensors, then scalars) and results, the relations between sizes it checks (`checks`, and
    the relations its kernels' specs require), and the archs it was built for (newest first)."""

    name: str
    function: str
    inputs: tuple[TensorDescription, ...]
    scalars: tuple[ScalarDescription, ...] = ()
    outputs: tuple[TensorDescription, ...]
    checks: tuple[SizeCheck, ...] = ()
    requires: tuple[Requirement, ...] = ()
    archs: tuple[str, ...] = ()

    def _common(self) -> dict:
        return {
            "version": CONTRACT_VERSION, "name": self.name, "function": self.function, "inputs": [t.to_dict() for t in self.inputs],
            "scalars": [s.to_dict() for s in self.scalars], "outputs": [t.to_dict() for t in self.outputs],
            "checks": [c.to_dict() for c in self.checks], "requires": [r.to_dict() for r in self.requires], "archs": list(self.archs),
        }

    @staticmethod
    def _common_fields(d: Mapping) -> dict[str, Any]:
        return dict(
            name=d["name"], function=d["function"], inputs=tuple(map(TensorDescription.from_dict, d["inputs"])),
            scalars=tuple(map(ScalarDescription.from_dict, d["scalars"])), outputs=tuple(map(TensorDescription.from_dict, d["outputs"])),
            checks=tuple(map(SizeCheck.from_dict, d["checks"])), requires=tuple(map(Requirement.from_dict, d["requires"])), archs=tuple(d["archs"]),
        )


@dataclass(frozen=True, kw_only=True)
class KernelDescription(FunctionDescription):
    """A kernel's generated function (`name` is the kernel's). shared_memory: bytes as
    declared, one number or (arch, bytes) pairs; with shared_memory_size (an expression over
    sizes and block_x/y/z), the bound of the size each call needs. objects: the object kinds
    it carries ("cubin+ptx"...). launch: None before the build has made the function (a spec's
    description), or for a function the runtime must call through IREE."""

    source: str  # the .cu file's name (a prebuilt kernel's first object, a Triton kernel's .py)
    shared_memory: int | tuple[tuple[str, int], ...] = 0
    shared_memory_size: str | None = None
    block: tuple[int, int, int]
    grid: tuple[str, str, str]
    objects: str = ""
    launch: LaunchPlan | None = None
    # Written only when declared, and read where present: descriptions without it read as before.
    parallel: ParallelPlan | None = None

    def to_dict(self) -> dict:
        shared = dict(self.shared_memory) if isinstance(self.shared_memory, tuple) else self.shared_memory
        return {**self._common(), "source": self.source, "shared_memory": shared, "shared_memory_size": self.shared_memory_size, "block": list(self.block),
                "grid": list(self.grid), "objects": self.objects, "launch": None if self.launch is None else self.launch.to_dict(),
                **({"parallel": self.parallel.to_dict()} if self.parallel is not None else {})}

    def shared_memory_for_call(self, env: Mapping[str, int]) -> int:
        """The bytes of dynamic shared memory a call with these sizes and integer arguments
        needs: shared_memory_size evaluated, checked against its bound (ValueError naming the
        values). Only for a description with a shared_memory_size."""
        size_expression = self.shared_memory_size
        if size_expression is None or not isinstance(self.shared_memory, int):
            raise ValueError(f"{self.name}: its shared memory does not depend on sizes")
        e = _parsed(size_expression)
        values = {**dict(zip(("block_x", "block_y", "block_z"), self.block)), **env}
        given = ", ".join(f"{n} = {values[n]}" for n in dict.fromkeys(ex.symbols(e)))
        try:
            size = ex.evaluate(e, values)
        except ZeroDivisionError:
            raise ValueError(f"{self.name}(): shared memory {size_expression} divides by zero for {given}") from None
        if not 0 <= size <= self.shared_memory:
            raise ValueError(
                f"{self.name}(): shared memory {size_expression} = {size} bytes for {given}, "
                + (f"beyond its declared max of {self.shared_memory} bytes (shared_memory max in the spec)" if size > 0 else "which is negative")
            )
        return size

    @classmethod
    def from_dict(cls, d: Mapping) -> KernelDescription:
        shared = d["shared_memory"]
        return cls(**cls._common_fields(d), source=d["source"], shared_memory=tuple(shared.items()) if isinstance(shared, Mapping) else shared,
                   shared_memory_size=d["shared_memory_size"], block=tuple(d["block"]), grid=tuple(d["grid"]), objects=d["objects"],
                   launch=None if d["launch"] is None else LaunchPlan.from_dict(d["launch"]),
                   parallel=ParallelPlan.from_dict(d["parallel"]) if d.get("parallel") is not None else None)


@dataclass(frozen=True, kw_only=True)
class ProgramDescription(FunctionDescription):
    """A program's generated function (backend/program.py; `name` is the program's): `calls`
    kernel calls, through IREE."""

    calls: int

    def to_dict(self) -> dict:
        return {**self._common(), "calls": self.calls}

    @classmethod
    def from_dict(cls, d: Mapping) -> ProgramDescription:
        return cls(**cls._common_fields(d), calls=d["calls"])


Description = KernelDescription | ProgramDescription
_KEYS: dict[str, type[KernelDescription] | type[ProgramDescription]] = {REFLECTION_KEY: KernelDescription, PROGRAM_REFLECTION_KEY: ProgramDescription}


def encode(description: Description) -> str:
    """The description as its reflection entry's value: compact JSON, deterministic (to_dict
    writes its keys in one order). Not sorted: a per-arch shared memory table keeps its order
    (the spec's, newest arch first), as everything else in a description does."""
    return json.dumps(description.to_dict(), separators=(",", ":"))


def reflection_key(description: Description) -> str:
    return REFLECTION_KEY if isinstance(description, KernelDescription) else PROGRAM_REFLECTION_KEY


def read_description(reflection: Mapping[str, str], where: str) -> Description | None:
    """A function's description from its reflection entries, None for a function that has
    none (not generated by iree_dispatch). where: the module and function, for messages.
    Raises ContractError for a description of another contract version."""
    for key, kind in _KEYS.items():
        if key in reflection:
            return decode(kind, reflection[key], where)
    return None


def decode(kind: type[KernelDescription] | type[ProgramDescription], text: str, where: str) -> Description:
    """One reflection entry's text as a `kind` description (see read_description)."""
    rebuild = "rebuild the module with this iree_dispatch version"
    try:
        data = json.loads(text)
    except ValueError:
        raise ContractError(f"{where}: its iree_dispatch description is not valid JSON; {rebuild}") from None
    version = data.get("version") if isinstance(data, dict) else None
    if version != CONTRACT_VERSION:
        built = "an iree_dispatch older than description versions" if version is None else f"description version {version}"
        raise ContractError(f"{where}: built with {built}, but this iree_dispatch reads description version {CONTRACT_VERSION}; {rebuild}")
    try:
        return kind.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ContractError(f"{where}: its iree_dispatch description is malformed ({type(exc).__name__}: {exc}); {rebuild}") from None


def scalar_argument(kernel: str, scalar: ScalarDescription, value) -> int | float:
    """A Python number as the generated function's argument for `scalar`: range-checked against its C type, double/half/bf16 as their bits (what the
    generated function unpacks). Used at call time, and by programs for their constants."""
    where = f"{kernel}(): argument {scalar.name!r} ({scalar.ctype})"
    kind, bits = scalar.kind, 8 * scalar.nbytes
    if kind in ("float", "double", "half", "bf16"):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{where} must be a number, got {type(value).__name__}")
        # A finite value that rounds to an infinity in the C type is refused, as an out-of-range
        # integer is (infinities and NaN themselves pass as they are).
        if kind != "double" and math.isfinite(float(value)) and math.isinf(_rounded(kind, float(value))):
            raise ValueError(f"{where} = {value!r} is out of the range of {scalar.ctype}")
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


def struct_argument(kernel: str, scalar: ScalarDescription, value) -> tuple[list[int], dict[str, int]]:
    """A struct or vector argument as the generated function takes it: its bytes as signed
    32-bit words (padding zero), and its integer fields' values by dotted name (`s.m`: what
    grids and shapes may use). `value`: a dict of the fields (nested structs' fields by their
    path, `inner.a`, or as nested dicts), a numpy structured scalar or 0-d array with those
    fields, or for a vector a sequence of its lanes. Every field is range-checked as a scalar
    argument is (scalar_argument)."""
    where = f"{kernel}(): argument {scalar.name!r} ({scalar.ctype})"
    names = [f.name for f, _ in scalar.fields]
    given = _struct_fields(where, scalar, value)
    for key in [k for k in given if k not in names]:  # a vector field given as a sequence: `shift[1]` is `shift.y`
        if (lane := re.fullmatch(r"(.+)\[([0-3])\]", key)) and f"{lane[1]}.{'xyzw'[int(lane[2])]}" in names:
            given[f"{lane[1]}.{'xyzw'[int(lane[2])]}"] = given.pop(key)
    missing = [n for n in names if n not in given]
    unknown = [n for n in given if n not in names]
    if missing or unknown:
        problem = f"has no field {unknown[0]!r}" if unknown else f"is missing field {missing[0]!r}"
        raise ValueError(f"{where} {problem}; its fields are {', '.join(names)}")
    data = bytearray(4 * scalar.words)
    ints = {}
    for field, offset in scalar.fields:
        converted = scalar_argument(kernel, ScalarDescription(f"{scalar.name}.{field.name}", field.ctype, field.kind, field.nbytes), given[field.name])
        if field.kind == "float":
            raw = int(np.array(converted, np.float32).view(np.uint32))
        else:
            raw = int(converted) & ((1 << (8 * field.nbytes)) - 1)
            if field.kind in ("int", "uint", "bool"):
                ints[f"{scalar.name}.{field.name}"] = int(given[field.name])
        data[offset : offset + field.nbytes] = raw.to_bytes(field.nbytes, "little")
    return [int(w) for w in np.frombuffer(bytes(data), "<i4")], ints


def _struct_fields(where: str, scalar: ScalarDescription, value) -> dict:
    """The fields given for a struct argument, flattened to their paths (see struct_argument)."""
    if isinstance(value, np.ndarray) and value.dtype.names is not None and value.ndim == 0:
        value = value[()]
    if isinstance(value, np.void) and value.dtype.names is not None:
        return _flattened({name: value[name] for name in value.dtype.names})
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"{where} must map field names to values, got keys {list(value)!r}")
        return _flattened(value)
    lanes = [f.name for f, _ in scalar.fields]
    if isinstance(value, (list, tuple, np.ndarray)) and all(len(n) == 1 and n in "xyzw" for n in lanes):
        values = list(np.asarray(value).reshape(-1)) if isinstance(value, np.ndarray) else list(value)
        if len(values) != len(lanes):
            raise ValueError(f"{where} has {len(lanes)} lanes ({', '.join(lanes)}), got {len(values)} values")
        return dict(zip(lanes, values))
    if all(len(n) == 1 and n in "xyzw" for n in lanes):
        raise TypeError(f"{where} must be a sequence of its {len(lanes)} lanes or a dict of {', '.join(lanes)}, got {type(value).__name__}")
    raise TypeError(f"{where} must be a dict of its fields ({', '.join(lanes)}) or a numpy structured scalar, got {type(value).__name__}")


def _flattened(fields: Mapping, prefix: str = "") -> dict:
    """Nested dicts (or structured scalars) of fields as one dict keyed by path: {"in": {"a": 1}} → {"in.a": 1}."""
    flat = {}
    for key, value in fields.items():
        if isinstance(value, np.ndarray) and value.dtype.names is not None and value.ndim == 0:
            value = value[()]
        if isinstance(value, np.void) and value.dtype.names is not None:
            value = {name: value[name] for name in value.dtype.names}
        if isinstance(value, Mapping):
            flat.update(_flattened(value, f"{prefix}{key}."))
        elif isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim > 0):
            flat.update(_flattened({f"{key}[{i}]": v for i, v in enumerate(value)}, prefix))  # an array field
        else:
            flat[f"{prefix}{key}"] = value
    return flat

@functools.cache
def _parsed(expression: str) -> ex.Expr:
    """A description's expression, parsed once per process (calls evaluate it again and again)."""
    return ex.parse(expression, "shared_memory")


@functools.cache
def _parsed_relation(relation: str) -> ex.Relation:
    """A description's relation, parsed once per process."""
    return ex.parse_relation(relation, "requires")


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
