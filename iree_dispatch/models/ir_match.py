"""Reading IREE's input-level IR (linalg on tensors) for the op kinds' matchers (kinds/).

What every matcher needs: walking a module, a value's producer and users, a tensor's shape and
element type, constants, a linalg.generic read as indexing maps and one expression per result
(`Generic`), and the small structural predicates torch's decompositions call for (broadcasts,
unit-dim reshapes, zero fills, elementwise casts), and `evaluate`: the contents of a value
computed from constants alone (a mask built inside the model), with numpy.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from iree.compiler import ir

Shape = tuple[int | None, ...]  # None: a dynamic dim
# A generic's body as an expression: ("in", i), ("out", i), ("const", number), ("value", text) for
# a value defined outside it, (op name without dialect, *operand expressions), and for
# truncf/extf (name, operand expression, target type).
Expr = tuple

# Float widths in bits: the narrowest type a chain of ops rounds to is the one it computes in.
FLOAT_WIDTH = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}

# The indexing maps named matmuls read their operands with unless their `indexing_maps` say otherwise.
DEFAULT_MATMUL_MAPS = {
    "linalg.matmul": ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"],
    "linalg.batch_matmul": ["(d0, d1, d2, d3) -> (d0, d1, d3)", "(d0, d1, d2, d3) -> (d0, d3, d2)", "(d0, d1, d2, d3) -> (d0, d1, d2)"],
}


def walk(op: ir.Operation) -> Iterator[ir.Operation]:
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from walk(child.operation)


def producer(value: ir.Value) -> ir.Operation | None:
    owner = value.owner
    return owner.operation if isinstance(owner, (ir.Operation, ir.OpView)) else None


def users(value: ir.Value) -> list[ir.Operation]:
    return [u.owner.operation if hasattr(u.owner, "operation") else u.owner for u in value.uses]


def one_use(*values: ir.Value) -> bool:
    return all(len(users(v)) == 1 for v in values)


def tensor_info(value: ir.Value) -> tuple[Shape, str] | None:
    try:
        t = ir.RankedTensorType(value.type)
    except ValueError:
        return None
    return tuple(None if t.is_dynamic_dim(i) else t.get_dim_size(i) for i in range(t.rank)), str(t.element_type)


def shape_text(shape) -> str:
    return "x".join("?" if d is None else str(d) for d in shape)


def location(op: ir.Operation) -> str:
    text = str(op.location)
    m = re.search(r'"([^"]+)":(\d+)', text)
    return f"{m[1].rsplit('/', 1)[-1]}:{m[2]}" if m and m[1] != "-" else ""


def int_constant(value: ir.Value) -> int | None:
    """The integer a value holds, if it is a scalar arith.constant of an integer type, else None."""
    op = producer(value)
    if op is None or op.name != "arith.constant":
        return None
    try:
        return ir.IntegerAttr(op.attributes["value"]).value
    except ValueError:
        return None


def float_constant(value: ir.Value) -> float | None:
    """The float a value holds, if it is an arith.constant (scalar or splat), else None."""
    op = producer(value)
    if op is None or op.name != "arith.constant":
        return None
    attr = op.attributes["value"]
    try:
        return ir.FloatAttr(attr).value
    except ValueError:
        pass
    try:
        dense = ir.DenseFPElementsAttr(attr)
    except ValueError:
        return None
    return ir.FloatAttr(dense.get_splat_value()).value if dense.is_splat else None


def round_to(value: float, dtype: str) -> float:
    """`value` rounded (to nearest even) to the float type `dtype`."""
    if dtype == "f32":
        return struct.unpack("<f", struct.pack("<f", value))[0]
    if dtype == "f16":
        return struct.unpack("<e", struct.pack("<e", value))[0]
    if dtype == "bf16":
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
    return value


def reassociation(op: ir.Operation) -> list[list[int]]:
    """A tensor.expand_shape's or collapse_shape's groups of dims."""
    return [[ir.IntegerAttr(i).value for i in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]


def permutation(op: ir.Operation | None) -> list[int] | None:
    """A linalg.transpose's permutation, or None for any other op."""
    if op is None or op.name != "linalg.transpose" or "permutation" not in op.attributes:
        return None
    return list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))


def default_matmul_maps(op: ir.Operation) -> list[str]:
    """The maps a plain linalg.matmul or linalg.batch_matmul reads with, for `op` or its transposed variant."""
    return DEFAULT_MATMUL_MAPS[op.name.replace("_transpose_a", "").replace("_transpose_b", "")]


def matmul_maps(op: ir.Operation) -> list[str]:
    """The indexing maps a named matmul `op` reads its operands with (its defaults unless it names its own)."""
    if "indexing_maps" in op.attributes:
        return [str(ir.AffineMapAttr(m).value) for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    return default_matmul_maps(op)


@dataclass(frozen=True)
class Generic:
    """A linalg.generic read as: inputs with their indexing maps, iterators, and its body as an
    expression over ("in", i), ("out", i) and ("const", value)."""

    op: ir.Operation
    inputs: tuple[ir.Value, ...]
    outputs: tuple[ir.Value, ...]
    maps: tuple[tuple[int, tuple[str, ...]], ...]  # (dims, results) per operand, inputs then outputs
    iterators: tuple[str, ...]
    exprs: tuple[Expr, ...]  # one per result

    @property
    def parallel(self) -> bool:
        return all(i == "parallel" for i in self.iterators)

    def reduces_last(self) -> bool:
        """Reduces over the last loop dim only, the input read whole, the output (and init) keeping the other dims."""
        n = len(self.iterators)
        if self.iterators != ("parallel",) * (n - 1) + ("reduction",) or len(self.inputs) != 1:
            return False
        ident = tuple(f"d{i}" for i in range(n))
        kept = ident[:-1]
        return self.maps[0][1] == ident and all(m[1] in (kept, kept + ("0",)) for m in self.maps[1:])

    def map_of(self, index: int) -> tuple[str, ...]:
        return self.maps[index][1]


def as_generic(op: ir.Operation | None) -> Generic | None:
    if op is None or op.name != "linalg.generic":
        return None
    segments = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    n_in = segments[0]
    operands = tuple(op.operands)
    maps = []
    for attr in ir.ArrayAttr(op.attributes["indexing_maps"]):
        m = ir.AffineMapAttr(attr).value
        maps.append((m.n_dims, tuple(str(r) for r in m.results)))
    iterators = tuple(re.sub(r".*<(\w+)>.*", r"\1", str(a)) for a in ir.ArrayAttr(op.attributes["iterator_types"]))
    block = op.regions[0].blocks[0]
    # ir.Value hashes and compares by identity: the block's arguments and results key these.
    args = {a: (("in", i) if i < n_in else ("out", i - n_in)) for i, a in enumerate(block.arguments)}
    defs = {}
    exprs: tuple[Expr, ...] = ()
    for inner in block.operations:
        inner = inner.operation
        if inner.name == "linalg.yield":
            exprs = tuple(_expr(v, args, defs) for v in inner.operands)
        else:
            for r in inner.results:
                defs[r] = inner
    return Generic(op, operands[:n_in], operands[n_in:], tuple(maps), iterators, exprs)


def _expr(value, args, defs) -> Expr:
    if value in args:
        return args[value]
    inner = defs.get(value)
    if inner is None:  # defined outside the body
        c = float_constant(value)
        if c is None and int_constant(value) is not None:
            return ("const", int_constant(value))
        return ("const", c) if c is not None else ("value", str(value))
    name = inner.name.split(".", 1)[1]
    if inner.name == "arith.constant":
        c = float_constant(value)
        return ("const", c) if c is not None else ("value", str(value))
    if inner.name in ("arith.truncf", "arith.extf"):
        operand = _expr(inner.operands[0], args, defs)
        target = str(inner.results[0].type)
        if operand[0] == "const":
            return ("const", round_to(operand[1], target))
        return (name, operand, target)
    return (name, *(_expr(v, args, defs) for v in inner.operands))


def source(value: ir.Value) -> ir.Value:
    """The value `value` copies: through unit-dim reshapes and broadcast generics (yield %in)."""
    while True:
        op = producer(value)
        if op is None:
            return value
        if op.name in ("tensor.expand_shape", "tensor.collapse_shape"):
            a, b = tensor_info(op.operands[0]), tensor_info(op.results[0])
            if a and b and [d for d in a[0] if d != 1] == [d for d in b[0] if d != 1]:
                value = op.operands[0]
                continue
            return value
        g = as_generic(op)
        if g is not None and is_copy(g) and _trailing_broadcast(g.map_of(0)):
            value = g.inputs[0]
            continue
        return value


def is_copy(g: Generic) -> bool:
    """A parallel generic that yields its one input, written through an identity output map."""
    n = len(g.iterators)
    return g.parallel and len(g.inputs) == 1 and g.exprs == (("in", 0),) and g.maps[-1][1] == tuple(f"d{i}" for i in range(n))


def _trailing_broadcast(results: tuple[str, ...]) -> bool:
    """(d0, ..., dk-1) or (d0, ..., dk-1, 0...): the input repeated along trailing dims only."""
    kept = [r for r in results if r != "0"]
    return kept == [f"d{i}" for i in range(len(kept))] and all(r == "0" for r in results[len(kept):])


def identity_outputs(g: Generic) -> bool:
    n = len(g.iterators)
    return all(m[1] == tuple(f"d{i}" for i in range(n)) for m in g.maps[len(g.inputs):])


def same(a: ir.Value, b: ir.Value) -> bool:
    return source(a) == source(b)


def is_fill(value: ir.Value, constant: float) -> bool:
    """`value` is a linalg.fill of `constant`."""
    op = producer(value)
    return op is not None and op.name == "linalg.fill" and float_constant(op.operands[0]) == constant


def is_zero_fill(value: ir.Value) -> bool:
    return is_fill(value, 0.0)


def single_op_generic(value: ir.Value, expr_head: str) -> Generic | None:
    """The elementwise generic computing `value` as `expr_head(...)` (identity output map)."""
    g = as_generic(producer(value))
    if g is None or len(g.exprs) != 1 or g.exprs[0][0] != expr_head or not g.parallel or not identity_outputs(g):
        return None
    return g


def elementwise_input(g: Generic, index: int, rank: int) -> bool:
    return g.map_of(index) == tuple(f"d{i}" for i in range(rank))


def last_dim_broadcast(g: Generic, index: int, rank: int) -> bool:
    """The input is read as [cols] (weight, bias) along the last loop dim."""
    return g.map_of(index) == (f"d{rank - 1}",)


def row_broadcast(g: Generic, index: int, rank: int) -> bool:
    """The input is read once per row: all dims but the last (or it as 0)."""
    kept = tuple(f"d{i}" for i in range(rank - 1))
    return g.map_of(index) in (kept, kept + ("0",))


def extf_source(value: ir.Value) -> ir.Value | None:
    """The narrower value `value` widens by an elementwise extf generic, or None."""
    g = single_op_generic(value, "extf")
    if g is not None and g.parallel and len(g.inputs) == 1 and g.exprs[0][1] == ("in", 0) and elementwise_input(g, 0, len(g.iterators)):
        return g.inputs[0]
    return None


def truncf_user(value: ir.Value) -> Generic | None:
    """The generic that narrows `value` (truncf of its one input), when it is `value`'s only use."""
    us = users(value)
    if len(us) != 1:
        return None
    g = as_generic(us[0])
    if g is not None and g.parallel and len(g.inputs) == 1 and g.exprs and g.exprs[0][0] == "truncf" and g.exprs[0][1] == ("in", 0):
        return g
    return None


def elementwise_truncf_user(value: ir.Value, rank: int) -> Generic | None:
    """truncf_user, read elementwise over `rank` dims and written whole (the model's rounding of `value`)."""
    g = truncf_user(value)
    if g is not None and len(g.iterators) == rank and elementwise_input(g, 0, rank) and identity_outputs(g):
        return g
    return None


def truncf_source(value: ir.Value) -> ir.Value:
    """The wider value `value` is an elementwise truncf of, or `value` itself."""
    g = as_generic(producer(value))
    if g is not None and g.parallel and len(g.inputs) == 1 and g.exprs and g.exprs[0] == ("truncf", ("in", 0), tensor_info(value)[1]) \
            and elementwise_input(g, 0, len(g.iterators)) and identity_outputs(g):
        return g.inputs[0]
    return value


def inline_over(value: ir.Value, x: ir.Value, depth: int) -> Expr:
    """`value` as one expression over `x` ("x") and constants, through elementwise generics (all
    maps the identity); anything else is ("value", ...)."""
    if value == x:
        return ("x",)
    g = as_generic(producer(value))
    rank = len(g.iterators) if g is not None else 0
    if depth == 0 or g is None or not g.parallel or len(g.exprs) != 1 or not identity_outputs(g) or not all(elementwise_input(g, i, rank) for i in range(len(g.inputs))):
        return ("value",)
    inputs = [inline_over(v, x, depth - 1) for v in g.inputs]

    def sub(e):
        if e[0] == "in":
            return inputs[e[1]]
        if e[0] in ("const", "value", "out"):
            return e
        return (e[0], *(sub(a) if isinstance(a, tuple) else a for a in e[1:]))

    return sub(g.exprs[0])


def reshaped_from(value: ir.Value, op_name: str, rank: int) -> ir.Value | None:
    """The [B, H, ...] value a [B*H, ...] `value` collapses (op_name tensor.collapse_shape), or the
    [B*H, ...] value a [B, H, ...] `value` expands (tensor.expand_shape): only the two leading
    dims merged or split; `rank` is the value's own rank. None otherwise."""
    op = producer(value)
    if op is None or op.name != op_name:
        return None
    if op_name == "tensor.collapse_shape":
        want = [[0, 1]] + [[i] for i in range(2, rank + 1)]
    else:
        want = [[0, 1]] + [[i] for i in range(2, rank)]
    return op.operands[0] if reassociation(op) == want else None


class NotEvaluated(Exception):
    """Why `evaluate` cannot give a value's contents: it depends on a function argument
    (`argument`), or on an op it does not evaluate."""

    def __init__(self, reason: str, argument: bool = False):
        super().__init__(reason)
        self.argument = argument


# Tensors larger than this are not evaluated (a [8, 1, 2048, 2048] mask has 2^25 elements).
MAX_EVALUATED_ELEMENTS = 1 << 25


def evaluate(value: ir.Value) -> np.ndarray:
    """The contents of `value` when it is computed from constants alone, with numpy: what a mask
    built inside the model (from iotas, fills, reshapes, slices, concatenations, gathers and
    cumulative sums: transformers' mask builders) holds. Raises NotEvaluated, with the reason,
    when it depends on a function argument or on an op not evaluated here."""
    return _Evaluation().of(value)


_NUMPY = {"i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "index": np.int64,
          "f16": np.float16, "bf16": np.float32, "f32": np.float32, "f64": np.float64}
_INT_PREDICATES = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater, 5: np.greater_equal,
                   6: np.less, 7: np.less_equal, 8: np.greater, 9: np.greater_equal}  # unsigned compared as signed: sizes and indices
_FLOAT_PREDICATES = {1: np.equal, 2: np.greater, 3: np.greater_equal, 4: np.less, 5: np.less_equal, 6: np.not_equal}  # the ordered ones
_BINARY = {"arith.addi": np.add, "arith.subi": np.subtract, "arith.muli": np.multiply, "arith.addf": np.add, "arith.subf": np.subtract,
           "arith.mulf": np.multiply, "arith.divf": np.divide, "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or,
           "arith.xori": np.bitwise_xor, "arith.maximumf": np.maximum, "arith.minimumf": np.minimum}
_CASTS = {"arith.index_cast", "arith.extsi", "arith.extui", "arith.trunci", "arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.extf", "arith.truncf"}


def _element_type(t: ir.Type) -> str:
    try:
        return str(ir.ShapedType(t).element_type)
    except ValueError:
        return str(t)


def _as_type(array, t: ir.Type) -> np.ndarray:
    """`array` converted to the MLIR type `t` (its element type), rounded as that type rounds."""
    name = _element_type(t)
    if name not in _NUMPY:
        raise NotEvaluated(f"the type {name} is not evaluated")
    out = np.asarray(array).astype(_NUMPY[name])
    if name == "bf16":  # float32 rounded to nearest even bf16, kept in float32
        bits = out.view(np.uint32).astype(np.uint64)
        out = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    return out


class _Evaluation:
    def __init__(self):
        self.known: dict[ir.Value, np.ndarray] = {}

    def of(self, value: ir.Value) -> np.ndarray:
        if value not in self.known:
            self.known[value] = self._compute(value)
        return self.known[value]

    def _compute(self, value: ir.Value) -> np.ndarray:
        op = producer(value)
        if op is None or op.name == "hal.tensor.import":  # an argument, as such or as IREE's ABI imports it
            raise NotEvaluated("it depends on the function's arguments", argument=True)
        info = tensor_info(value)
        if info is not None and (None in info[0] or int(np.prod(info[0])) > MAX_EVALUATED_ELEMENTS):
            raise NotEvaluated(f"{shape_text(info[0])} is dynamic or larger than {MAX_EVALUATED_ELEMENTS} elements")
        name = op.name
        if name == "arith.constant":
            attr = op.attributes["value"]
            for kind in (ir.IntegerAttr, ir.FloatAttr):
                try:
                    return _as_type(kind(attr).value, value.type)
                except ValueError:
                    pass
            try:
                dense = ir.DenseElementsAttr(attr)
                contents = ir.FloatAttr(dense.get_splat_value()).value if dense.is_splat and "f" in info[1] else np.array(dense)
                return _as_type(np.broadcast_to(contents, info[0]), value.type)
            except (ValueError, TypeError) as e:
                raise NotEvaluated(f"the constant {str(attr)[:40]} is not read") from e
        if name == "tensor.empty":
            return np.zeros(info[0], _NUMPY.get(info[1], np.float64))  # only ever written: a generic's init
        if name == "linalg.fill":
            return np.full(info[0], self.of(op.operands[0]), _NUMPY[info[1]])
        if name in ("tensor.expand_shape", "tensor.collapse_shape"):
            return self.of(op.operands[0]).reshape(info[0])
        if name == "tensor.extract_slice" and len(op.operands) == 1:
            offsets, sizes, strides = (list(ir.DenseI64ArrayAttr(op.attributes[k])) for k in ("static_offsets", "static_sizes", "static_strides"))
            part = self.of(op.operands[0])[tuple(slice(o, o + n * s, s) for o, n, s in zip(offsets, sizes, strides))]
            return part.reshape(info[0])
        if name == "tensor.concat":
            return np.concatenate([self.of(v) for v in op.operands], axis=ir.IntegerAttr(op.attributes["dim"]).value)
        if name == "linalg.transpose":
            return np.transpose(self.of(op.operands[0]), list(ir.DenseI64ArrayAttr(op.attributes["permutation"])))
        if name == "linalg.generic":
            return self._generic(op)[ir.OpResult(value).result_number]
        if name == "iree_linalg_ext.scan":
            return self._scan(op)[ir.OpResult(value).result_number]
        raise NotEvaluated(f"{name} is not evaluated")

    def _generic(self, op: ir.Operation) -> list[np.ndarray]:
        g = as_generic(op)
        if not g.parallel:
            raise NotEvaluated("a linalg.generic with a reduction is not evaluated")
        shape = tensor_info(g.outputs[0])[0]
        grid = np.ogrid[tuple(slice(0, n) for n in shape)]
        block = op.regions[0].blocks[0]
        env: dict[ir.Value, np.ndarray] = {}
        for arg, operand, (_, results) in zip(block.arguments, (*g.inputs, *g.outputs), g.maps):
            index = []
            for r in results:
                if r.startswith("d") and r[1:].isdigit():
                    index.append(grid[int(r[1:])])
                elif r.isdigit():
                    index.append(int(r))
                else:
                    raise NotEvaluated(f"an indexing map with {r} is not evaluated")
            env[arg] = np.broadcast_to(self.of(operand)[tuple(index)] if index else self.of(operand), shape)
        for inner in block.operations:
            inner = inner.operation
            if inner.name == "linalg.yield":
                return [np.broadcast_to(env[v] if v in env else self.of(v), shape) for v in inner.operands]
            env[inner.results[0]] = self._body_op(inner, env, grid)
        raise NotEvaluated("a linalg.generic without a yield")

    def _body_op(self, inner: ir.Operation, env: dict, grid) -> np.ndarray:
        name = inner.name
        args = [env[v] if v in env else self.of(v) for v in inner.operands]
        if name == "linalg.index":
            return grid[ir.IntegerAttr(inner.attributes["dim"]).value]
        if name == "arith.constant":
            return self.of(inner.results[0])
        if name in _BINARY:
            return _as_type(_BINARY[name](args[0], args[1]), inner.results[0].type)
        if name in _CASTS:
            return _as_type(args[0], inner.results[0].type)
        if name == "arith.negf":
            return -args[0]
        if name == "arith.select":
            return np.where(args[0], args[1], args[2])
        if name in ("arith.cmpi", "arith.cmpf"):
            predicates = _INT_PREDICATES if name == "arith.cmpi" else _FLOAT_PREDICATES
            predicate = ir.IntegerAttr(inner.attributes["predicate"]).value
            if predicate not in predicates:
                raise NotEvaluated(f"{name} predicate {predicate} is not evaluated")
            return predicates[predicate](args[0], args[1])
        if name == "tensor.extract":
            source, indices = args[0], args[1:]
            if any(np.any((i < 0) | (i >= n)) for i, n in zip(indices, source.shape)):
                raise NotEvaluated("a tensor.extract out of bounds")
            return source[tuple(indices)]
        raise NotEvaluated(f"{name} in a linalg.generic is not evaluated")

    def _scan(self, op: ir.Operation) -> list[np.ndarray]:
        """An inclusive sum scan from zero (torch's cumsum): the sums and the last ones."""
        body = [o.operation.name for o in op.regions[0].blocks[0].operations]
        dim = ir.IntegerAttr(op.attributes["dimension"]).value
        source, init, accumulator = (self.of(v) for v in op.operands)
        if body[0] not in ("arith.addi", "arith.addf") or not ir.BoolAttr(op.attributes["inclusive"]).value or np.any(accumulator != 0):
            raise NotEvaluated("an iree_linalg_ext.scan other than an inclusive sum from zero is not evaluated")
        sums = np.cumsum(source, axis=dim).astype(init.dtype)
        return [sums, np.take(sums, -1, axis=dim)]
