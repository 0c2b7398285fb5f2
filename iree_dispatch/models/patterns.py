"""Finds the ops a kernel could replace in a model at IREE's input level (linalg on tensors).

Each candidate is an op or a small DAG of linalg ops with one meaning (a matmul, a softmax over
the last dim, a LayerNorm), found by its structure: named ops for matmuls, and for softmax and
LayerNorm the generics torch's decompositions produce, one arithmetic op per generic, connected
through broadcasts and unit-dim reshapes. A candidate has one or more *forms*: the same result
computed from other operands (a bf16 softmax's bf16 input, or the f32 value it was widened to; a
matmul with its bias add, or without), best first. What each form needs from a kernel (operand
types and shapes, accumulation type, epsilon) is recorded so the selection (select.py) can say
exactly why a kernel does not fit.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from iree.compiler import ir


@dataclass
class Operand:
    value: object  # ir.Value
    shape: tuple[int | None, ...]  # as the kernel sees it (after any collapse)
    dtype: str


@dataclass
class Form:
    kind: str  # an op kind of capability.OP_KINDS
    operands: list[Operand]
    result: object  # ir.Value whose uses the kernel's result replaces
    result_shape: tuple[int | None, ...]  # as the kernel writes it
    result_dtype: str
    compute: str  # the model's accumulation / arithmetic type
    anchor: object  # ir.Operation before which the replacement is inserted
    eps: float | None = None
    notes: list[str] = field(default_factory=list)
    # Where each dim of the model's result comes from: (operand index, dim of that operand's value)
    result_dims: tuple[tuple[int, int], ...] = ()
    # Operands the kernel may take in a wider float type (a bf16 bias as f32: exact, widened by the rewrite)
    widen: tuple[int, ...] = ()
    # For the numerics refusal: what the model computes in `compute`, when it is more than one step
    steps: str = ""
    # attention: the factor the model scales the scores by (in its type)
    scale: float | None = None
    # Roots of other candidates this form computes too (attention: the scores batch matmul, the softmax)
    covers: tuple = ()
    # (category, reason) when the model's ops around the form's core don't have the form's structure
    # (attention_qkv: q, k, v not sliced from one projection): every kernel of its kind is refused so
    refusal: tuple[str, str] | None = None


@dataclass
class Candidate:
    kind: str  # matmul, batch_matmul, softmax, layernorm (what the model computes)
    description: str  # shapes and dtypes, for the report
    location: str
    order: int
    forms: list[Form] = field(default_factory=list)
    refusal: tuple[str, str] | None = None  # (category, reason) that no kernel can overcome
    root: object = None  # the value the candidate was found at (its root op's first result)


# ----------------------------------------------------------------------------------------------
# IR helpers
# ----------------------------------------------------------------------------------------------


def walk(op):
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from walk(child.operation)


def producer(value):
    owner = value.owner
    return owner.operation if isinstance(owner, (ir.Operation, ir.OpView)) else None


def users(value) -> list:
    return [u.owner.operation if hasattr(u.owner, "operation") else u.owner for u in value.uses]


def tensor_info(value) -> tuple[tuple[int | None, ...], str] | None:
    try:
        t = ir.RankedTensorType(value.type)
    except ValueError:
        return None
    return tuple(None if t.is_dynamic_dim(i) else t.get_dim_size(i) for i in range(t.rank)), str(t.element_type)


def shape_text(shape) -> str:
    return "x".join("?" if d is None else str(d) for d in shape)


def location(op) -> str:
    text = str(op.location)
    m = re.search(r'"([^"]+)":(\d+)', text)
    return f"{m[1].rsplit('/', 1)[-1]}:{m[2]}" if m and m[1] != "-" else ""


def int_constant(value) -> int | None:
    """The integer a value holds, if it is a scalar arith.constant of an integer type, else None."""
    op = producer(value)
    if op is None or op.name != "arith.constant":
        return None
    try:
        return ir.IntegerAttr(op.attributes["value"]).value
    except ValueError:
        return None


def float_constant(value) -> float | None:
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


@dataclass
class Generic:
    """A linalg.generic read as: inputs with their indexing maps, iterators, and its body as an
    expression over ("in", i), ("out", i) and ("const", value)."""

    op: object
    inputs: list
    outputs: list
    maps: list[tuple[int, tuple[str, ...]]]  # (dims, results) per operand, inputs then outputs
    iterators: list[str]
    exprs: list  # one per result

    @property
    def parallel(self) -> bool:
        return all(i == "parallel" for i in self.iterators)

    def reduces_last(self) -> bool:
        """Reduces over the last loop dim only, the input read whole, the output (and init) keeping the other dims."""
        n = len(self.iterators)
        if self.iterators != ["parallel"] * (n - 1) + ["reduction"] or len(self.inputs) != 1:
            return False
        ident = tuple(f"d{i}" for i in range(n))
        kept = ident[:-1]
        return self.maps[0][1] == ident and all(m[1] in (kept, kept + ("0",)) for m in self.maps[1:])

    def map_of(self, index: int) -> tuple[str, ...]:
        return self.maps[index][1]


def as_generic(op) -> Generic | None:
    if op is None or op.name != "linalg.generic":
        return None
    segments = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    n_in = segments[0]
    operands = list(op.operands)
    maps = []
    for attr in ir.ArrayAttr(op.attributes["indexing_maps"]):
        m = ir.AffineMapAttr(attr).value
        maps.append((m.n_dims, tuple(str(r) for r in m.results)))
    iterators = [re.sub(r".*<(\w+)>.*", r"\1", str(a)) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
    block = op.regions[0].blocks[0]
    args = {_key(a): (("in", i) if i < n_in else ("out", i - n_in)) for i, a in enumerate(block.arguments)}
    defs = {}
    exprs = []
    for inner in block.operations:
        inner = inner.operation
        if inner.name == "linalg.yield":
            exprs = [_expr(v, args, defs) for v in inner.operands]
        else:
            for r in inner.results:
                defs[_key(r)] = inner
    return Generic(op, operands[:n_in], operands[n_in:], maps, iterators, exprs)


def _key(value):
    return value  # ir.Value hashes and compares by identity


def _expr(value, args, defs):
    key = _key(value)
    if key in args:
        return args[key]
    inner = defs.get(key)
    if inner is None:  # defined outside the body
        c = float_constant(value)
        if c is None and int_constant(value) is not None:
            return ("const", int_constant(value))
        return ("const", c) if c is not None else ("value", str(key))
    name = inner.name.split(".", 1)[1]
    if inner.name == "arith.constant":
        c = float_constant(value)
        return ("const", c) if c is not None else ("value", str(key))
    if inner.name in ("arith.truncf", "arith.extf"):
        operand = _expr(inner.operands[0], args, defs)
        target = str(inner.results[0].type)
        if operand[0] == "const":
            return ("const", round_to(operand[1], target))
        return (name, operand, target)
    return (name, *(_expr(v, args, defs) for v in inner.operands))


def source(value):
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
        if g is not None and _is_copy(g) and _trailing_broadcast(g.map_of(0)):
            value = g.inputs[0]
            continue
        return value


def _is_copy(g: Generic) -> bool:
    """A parallel generic that yields its one input, written through an identity output map."""
    n = len(g.iterators)
    return g.parallel and len(g.inputs) == 1 and g.exprs == [("in", 0)] and g.maps[-1][1] == tuple(f"d{i}" for i in range(n))


def _trailing_broadcast(results: tuple[str, ...]) -> bool:
    """(d0, ..., dk-1) or (d0, ..., dk-1, 0...): the input repeated along trailing dims only."""
    kept = [r for r in results if r != "0"]
    return kept == [f"d{i}" for i in range(len(kept))] and all(r == "0" for r in results[len(kept):])


def _identity_outputs(g: Generic) -> bool:
    n = len(g.iterators)
    return all(m[1] == tuple(f"d{i}" for i in range(n)) for m in g.maps[len(g.inputs):])


def same(a, b) -> bool:
    return source(a) == source(b)


def is_zero_fill(value) -> bool:
    return _fill_of(value, 0.0)


def _fill_of(value, constant: float) -> bool:
    op = producer(value)
    return op is not None and op.name == "linalg.fill" and float_constant(op.operands[0]) == constant


def single_op_generic(value, expr_head: str) -> Generic | None:
    """The elementwise generic computing `value` as `expr_head(...)` (identity output map)."""
    g = as_generic(producer(value))
    if g is None or len(g.exprs) != 1 or g.exprs[0][0] != expr_head or not g.parallel or not _identity_outputs(g):
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


# ----------------------------------------------------------------------------------------------
# Matchers
# ----------------------------------------------------------------------------------------------

_TRANSPOSED = {"linalg.matmul_transpose_a", "linalg.matmul_transpose_b", "linalg.batch_matmul_transpose_a", "linalg.batch_matmul_transpose_b"}
_DEFAULT_MAPS = {
    "linalg.matmul": ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"],
    "linalg.batch_matmul": ["(d0, d1, d2, d3) -> (d0, d1, d3)", "(d0, d1, d2, d3) -> (d0, d3, d2)", "(d0, d1, d2, d3) -> (d0, d1, d2)"],
}


def find_candidates(module) -> list[Candidate]:
    found: list[Candidate] = []
    claimed: set = set()
    ops = list(walk(module.operation))
    for i, op in enumerate(ops):
        name = op.name
        cand = None
        if name in ("linalg.matmul", "linalg.batch_matmul") or name in _TRANSPOSED:
            cand = _matmul(op, i)
        elif name == "linalg.softmax":
            cand = _named_softmax(op, i)
        elif name == "linalg.generic":
            cand = _softmax(op, i) or _norm(op, i)
        if cand is not None and _key(op.results[0]) not in claimed:
            claimed.add(_key(op.results[0]))
            cand.root = op.results[0]
            cand.order = len(found) + 1
            found.append(cand)
    return found


def _matmul(op, order: int) -> Candidate | None:
    a, b = op.operands[0], op.operands[1]
    c = op.operands[2]
    ia, ib, ic = tensor_info(a), tensor_info(b), tensor_info(op.results[0])
    if not (ia and ib and ic):
        return None
    batch = "batch" in op.name
    kind = "batch_matmul" if batch else "matmul"
    desc = f"{shape_text(ia[0])} @ {shape_text(ib[0])} {ia[1]} x {ib[1]} -> {shape_text(ic[0])} {ic[1]}"
    cand = Candidate(kind, desc, location(op), order)
    base = op.name.replace("_transpose_a", "").replace("_transpose_b", "")
    maps = [str(ir.AffineMapAttr(m).value) for m in ir.ArrayAttr(op.attributes["indexing_maps"])] if "indexing_maps" in op.attributes else _DEFAULT_MAPS[base]
    if op.name in _TRANSPOSED or maps != _DEFAULT_MAPS[base]:
        odd = [w for w, m, default in zip(("lhs", "rhs", "result"), maps, _DEFAULT_MAPS[base]) if m != default]
        if op.name.endswith("transpose_a"):
            odd = ["lhs"]
        elif op.name.endswith("transpose_b"):
            odd = ["rhs"]
        how = "; ".join(f"{w} read as {m.split(' -> ')[1]}" for w, m, default in zip(("lhs", "rhs", "result"), maps, _DEFAULT_MAPS[base]) if m != default)
        cand.refusal = ("layout", f"{' and '.join(odd)} transposed ({op.name}{': ' + how if how else ''}); kernels take row-major lhs [M, K] and rhs [K, N]")
        return cand
    if not is_zero_fill(c):
        cand.refusal = ("init", "accumulates into an existing tensor (its init is not a zero fill); kernels write a fresh result")
        return cand
    compute = ic[1]
    forms: list[Form] = []
    rhs_2d = None
    if batch:
        forms_rank = 3
        rhs_2d = _batch_broadcast(b)  # the same [K, N] matrix for every batch: one matmul over B*M rows
    else:
        forms_rank = 2
    bias_add = _bias_add(op.results[0], forms_rank)
    if rhs_2d is not None:
        bsz, m, k = ia[0]
        rows = None if bsz is None or m is None else bsz * m
        lhs = Operand(a, (rows, k), ia[1])
        rhs = Operand(rhs_2d, tensor_info(rhs_2d)[0], tensor_info(rhs_2d)[1])
        n = ic[0][2]
        note = "the batch's rhs is one [K, N] matrix broadcast: one matmul over B*M rows"
        forms += _bias_gelu_forms(op, lhs, rhs, (rows, n), forms_rank, ((0, 0), (0, 1), (1, 1)), [note])
        if bias_add is not None:
            g, bias = bias_add
            ibias = tensor_info(bias)
            forms.append(Form("matmul+bias", [lhs, rhs, Operand(bias, ibias[0], ibias[1])], g.op.results[0], (rows, n), tensor_info(g.op.results[0])[1], compute, g.op,
                              result_dims=((0, 0), (0, 1), (1, 1)), widen=(2,)))
        else:
            forms += _narrowed_bias_forms(op, lhs, rhs, (rows, n), forms_rank, ((0, 0), (0, 1), (1, 1)))
        note = "the batch's rhs is one [K, N] matrix broadcast: one matmul over B*M rows"
        forms += _nt_forms(op, lhs, rhs_2d, (rows, n), forms_rank, ((0, 0), (0, 1), (1, 0)), [note])
        forms.append(Form("matmul", [lhs, rhs], op.results[0], (rows, n), ic[1], compute, op, notes=[note], result_dims=((0, 0), (0, 1), (1, 1))))
    if batch:
        forms += _attention_forms(op)
        forms.append(Form("batch_matmul", [Operand(a, ia[0], ia[1]), Operand(b, ib[0], ib[1])], op.results[0], ic[0], ic[1], compute, op, result_dims=((0, 0), (0, 1), (1, 2))))
    else:
        lhs, rhs = Operand(a, ia[0], ia[1]), Operand(b, ib[0], ib[1])
        forms += _bias_gelu_forms(op, lhs, rhs, ic[0], forms_rank, ((0, 0), (1, 1)))
        if bias_add is not None:
            g, bias = bias_add
            ibias = tensor_info(bias)
            forms.append(Form("matmul+bias", [lhs, rhs, Operand(bias, ibias[0], ibias[1])], g.op.results[0], ic[0], tensor_info(g.op.results[0])[1], compute, g.op,
                              result_dims=((0, 0), (1, 1)), widen=(2,)))
        else:
            forms += _narrowed_bias_forms(op, lhs, rhs, ic[0], forms_rank, ((0, 0), (1, 1)))
        forms += _nt_forms(op, lhs, b, ic[0], forms_rank, ((0, 0), (1, 0)))
        forms.append(Form("matmul", [lhs, rhs], op.results[0], ic[0], ic[1], compute, op, result_dims=((0, 0), (1, 1))))
    cand.forms = forms
    return cand


def _transposed_matrix(value):
    """The [N, K] matrix whose transpose (linalg.transpose, permutation [1, 0]) is `value`, or None:
    torch's `linear(x, w)` imports as x @ transpose(w)."""
    op = producer(value)
    if op is None or op.name != "linalg.transpose" or "permutation" not in op.attributes:
        return None
    if list(ir.DenseI64ArrayAttr(op.attributes["permutation"])) != [1, 0]:
        return None
    info = tensor_info(op.operands[0])
    return op.operands[0] if info and len(info[0]) == 2 else None


def _nt_forms(op, lhs: Operand, rhs_value, shape, rank: int, result_dims, notes=()) -> list[Form]:
    """The matmul `op` as lhs [M, K] @ w[N, K]^T, when its rhs (the [K, N] matrix) is a transpose of
    a 2-D w (a Linear's weight, an LM head's embedding), read as it is stored: one form, matmul_nt.
    Its result is the truncf that narrows the matmul's result, when that is the result's only use
    (a bf16 Linear: f32 accumulation, one rounding, the model's own numerics); otherwise the
    matmul's own result (a kernel writing the narrow type is then refused for `dtype`)."""
    w = _transposed_matrix(rhs_value)
    if w is None:
        return []
    iw = tensor_info(w)
    rhs = Operand(w, iw[0], iw[1])
    acc = tensor_info(op.results[0])[1]
    notes = [*notes, "its rhs is a transposed [N, K] matrix, read as it is stored (the transpose is not computed)"]
    narrowed = _truncf_user(op.results[0])
    if narrowed is not None and len(narrowed.iterators) == rank and elementwise_input(narrowed, 0, rank) and _identity_outputs(narrowed):
        out = narrowed.op.results[0]
        out_dtype = tensor_info(out)[1]
        if _FLOAT_WIDTH.get(out_dtype, 0) < _FLOAT_WIDTH.get(acc, 0):
            notes.append(f"with the {out_dtype} rounding of its {acc} result: one rounding, as the model's truncf")
            return [Form("matmul_nt", [lhs, rhs], out, shape, out_dtype, acc, narrowed.op, notes=notes, result_dims=result_dims)]
    return [Form("matmul_nt", [lhs, rhs], op.results[0], shape, acc, acc, op, notes=notes, result_dims=result_dims)]


def _batch_broadcast(value):
    """The [K, N] matrix a [B, K, N] value repeats along its batch dim, or None."""
    g = as_generic(producer(value))
    if g is None or not _is_copy(g) or g.map_of(0) != ("d1", "d2"):
        return None
    info = tensor_info(g.inputs[0])
    return g.inputs[0] if info and len(info[0]) == 2 else None


def _bias_add(value, rank: int):
    """(generic, bias) when `value`'s only use adds a [N] vector of its own type along its last dim."""
    us = users(value)
    if len(us) != 1:
        return None
    g = as_generic(us[0])
    if g is None or not g.parallel or len(g.inputs) != 2 or len(g.exprs) != 1 or g.exprs[0][0] != "addf" or len(g.iterators) != rank or not _identity_outputs(g):
        return None
    if sorted(g.exprs[0][1:]) != [("in", 0), ("in", 1)]:
        return None
    keys = [_key(v) for v in g.inputs]
    if keys.count(_key(value)) != 1:
        return None
    mine = keys.index(_key(value))
    other = 1 - mine
    info = tensor_info(g.inputs[other])
    if elementwise_input(g, mine, rank) and last_dim_broadcast(g, other, rank) and info and info[1] == tensor_info(value)[1]:
        return g, g.inputs[other]
    return None


_FLOAT_WIDTH = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}


def _bias_gelu_forms(op, lhs: Operand, rhs: Operand, shape, rank: int, result_dims, notes=()) -> list[Form]:
    """The matmul `op` with what follows it, when that is [a truncf to a narrower type], + bias [N]
    and GELU's tanh approximation (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as
    transformers' gelu_new / NewGELU and torch's gelu(approximate="tanh") decomposition write it),
    each step the only use of the one before: one form, matmul+bias+gelu, whose result is the
    GELU's. Its compute type is the narrowest the model rounds to on the way."""
    value = op.results[0]
    acc = tensor_info(value)[1]
    types = [acc]
    narrowed = _truncf_user(value)
    if narrowed is not None and len(narrowed.iterators) == rank and elementwise_input(narrowed, 0, rank) and _identity_outputs(narrowed):
        value = narrowed.op.results[0]
        types.append(tensor_info(value)[1])
    found = _bias_add(value, rank)
    if found is None:
        return []
    add, bias = found
    x = add.op.results[0]
    us = users(x)
    if len(us) == 1 and us[0].name == "tensor.expand_shape":  # [B*M, N] seen as [B, M, N]
        ix, ie = tensor_info(x), tensor_info(us[0].results[0])
        if ix is None or ie is None or None in ix[0] or None in ie[0] or ie[0][-1] != ix[0][-1]:
            return []
        x = us[0].results[0]
    root = _gelu_root(x)
    if root is None:
        return []
    gelu_dtype = tensor_info(root.op.results[0])[1]
    types.append(gelu_dtype)
    model_shape = tensor_info(root.op.results[0])[0]
    if len(model_shape) != len(shape) and None in model_shape:
        return []
    compute = min(types, key=lambda t: _FLOAT_WIDTH.get(t, 0))
    steps = ""
    if compute != acc:
        after = "after the matmul, " if narrowed is not None else ""
        steps = f"rounds to {compute} {after}after the bias add and after each GELU step"
    ibias = tensor_info(bias)
    dims = result_dims if len(model_shape) == len(shape) else tuple(result_dims[:1]) * (len(model_shape) - 1) + tuple(result_dims[-1:])
    return [Form("matmul+bias+gelu", [lhs, rhs, Operand(bias, ibias[0], ibias[1])], root.op.results[0], shape, gelu_dtype, compute, root.op,
                 notes=list(notes), result_dims=dims, widen=(2,), steps=steps)]


def _narrowed_bias_forms(op, lhs: Operand, rhs: Operand, shape, rank: int, result_dims) -> list[Form]:
    """The matmul `op` with what follows it, when that is a truncf to a narrower type and + bias [N]
    in that type (a bf16 Linear: the matmul accumulates in f32, the model rounds to bf16, then adds
    its bf16 bias and rounds again), each step the only use of the one before: one form,
    matmul+bias, whose result is the bias add's, computed in the narrower type."""
    acc = tensor_info(op.results[0])[1]
    narrowed = _truncf_user(op.results[0])
    if narrowed is None or len(narrowed.iterators) != rank or not elementwise_input(narrowed, 0, rank) or not _identity_outputs(narrowed):
        return []
    value = narrowed.op.results[0]
    compute = tensor_info(value)[1]
    if _FLOAT_WIDTH.get(compute, 0) >= _FLOAT_WIDTH.get(acc, 0):
        return []
    found = _bias_add(value, rank)
    if found is None:
        return []
    add, bias = found
    ibias = tensor_info(bias)
    return [Form("matmul+bias", [lhs, rhs, Operand(bias, ibias[0], ibias[1])], add.op.results[0], shape, compute, compute, add.op,
                 result_dims=result_dims, widen=(2,), steps=f"rounds to {compute} after the matmul and after the bias add")]


def _gelu_root(x):
    """The generic whose result is GELU-tanh of `x`, among the generics at most 8 uses away, or None."""
    frontier, seen = [x], set()
    for _ in range(8):
        nxt = []
        for v in frontier:
            for u in users(v):
                if u.name != "linalg.generic" or _key(u) in seen or len(u.results) != 1:
                    continue
                seen.add(_key(u))
                g = as_generic(u)
                if g is not None:
                    if _is_gelu(_inline(u.results[0], x, 12), tensor_info(u.results[0])[1]):
                        return g
                    nxt.append(u.results[0])
        frontier = nxt
    return None


def _inline(value, x, depth: int):
    """`value` as one expression over `x` ("x") and constants, through elementwise generics (all
    maps the identity); anything else is ("value", ...)."""
    if value == x:
        return ("x",)
    g = as_generic(producer(value))
    rank = len(g.iterators) if g is not None else 0
    if depth == 0 or g is None or not g.parallel or len(g.exprs) != 1 or not _identity_outputs(g) or not all(elementwise_input(g, i, rank) for i in range(len(g.inputs))):
        return ("value",)
    inputs = [_inline(v, x, depth - 1) for v in g.inputs]

    def sub(e):
        if e[0] == "in":
            return inputs[e[1]]
        if e[0] in ("const", "value", "out"):
            return e
        return (e[0], *(sub(a) if isinstance(a, tuple) else a for a in e[1:]))

    return sub(g.exprs[0])


def _factors(e) -> list:
    """The factors of a product (nested mulf), in any order."""
    return [f for a in e[1:] for f in _factors(a)] if e[0] == "mulf" else [e]


def _terms(e) -> list:
    return [t for a in e[1:] for t in _terms(a)] if e[0] == "addf" else [e]


def _split_const(items: list, dtype: str, want: float):
    """The items other than one constant close to `want`, or None."""
    for i, item in enumerate(items):
        if item[0] == "const" and isinstance(item[1], float) and _close(item[1], want, dtype):
            return items[:i] + items[i + 1:]
    return None


def _close(got: float, want: float, dtype: str) -> bool:
    return got == round_to(want, dtype) or abs(got - want) <= 1e-6 * abs(want)


def _is_gelu(e, dtype: str) -> bool:
    """e = x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), products and sums in any
    order and grouping (transformers' gelu_new as a chain of generics, torch's gelu(approximate="tanh")
    as one)."""
    rest = _split_const(_factors(e), dtype, 0.5)
    if rest is None or len(rest) != 2 or ("x",) not in rest:
        return False
    terms = _terms(rest[1 - rest.index(("x",))])
    rest = _split_const(terms, dtype, 1.0)
    if rest is None or len(rest) != 1 or rest[0][0] != "tanh":
        return False
    inner = _split_const(_factors(rest[0][1]), dtype, 0.7978845608028654)
    if inner is None or len(inner) != 1:
        return False
    terms = _terms(inner[0])
    if len(terms) != 2 or ("x",) not in terms:
        return False
    cube = _split_const(_factors(terms[1 - terms.index(("x",))]), dtype, 0.044715)
    if cube is None:
        return False
    if len(cube) == 1 and cube[0][0] in ("fpowi", "powf") and cube[0][1] == ("x",) and cube[0][2][0] == "const" and cube[0][2][1] == 3:
        return True
    return sorted(cube) == [("x",)] * 3 or (len(cube) == 2 and ("x",) in cube and _factors(cube[1 - cube.index(("x",))]) == [("x",), ("x",)])


def _rows_shape(shape) -> tuple[int | None, int | None]:
    rows = 1
    for d in shape[:-1]:
        rows = None if rows is None or d is None else rows * d
    return rows, shape[-1]


def _io_forms(kind: str, x, result_value, anchor, compute: str, extra: list[Operand], eps=None) -> list[Form]:
    """Forms of a row op over `x` (its last dim the row): with narrow I/O (x widened by an extf
    generic, the result narrowed by a truncf generic) first, then in the compute type."""
    ix, ir_ = tensor_info(x), tensor_info(result_value)
    forms = []
    narrow_in = _extf_source(x)
    narrow_out = _truncf_user(result_value)
    rows_cols = _rows_shape(ix[0])
    same_as_x = tuple((0, i) for i in range(len(ix[0])))
    if narrow_in is not None and narrow_out is not None:
        g = narrow_out
        forms.append(
            Form(kind, [Operand(narrow_in, rows_cols, tensor_info(narrow_in)[1]), *extra], g.op.results[0], rows_cols, tensor_info(g.op.results[0])[1], compute, g.op, eps,
                 result_dims=same_as_x)
        )
    forms.append(Form(kind, [Operand(x, rows_cols, ix[1]), *extra], result_value, rows_cols, ir_[1], compute, anchor, eps, result_dims=same_as_x))
    return forms


def _extf_source(value):
    g = single_op_generic(value, "extf")
    if g is not None and g.parallel and len(g.inputs) == 1 and g.exprs[0][1] == ("in", 0) and elementwise_input(g, 0, len(g.iterators)):
        return g.inputs[0]
    return None


def _truncf_user(value):
    us = users(value)
    if len(us) != 1:
        return None
    g = as_generic(us[0])
    if g is not None and g.parallel and len(g.inputs) == 1 and g.exprs and g.exprs[0][0] == "truncf" and g.exprs[0][1] == ("in", 0):
        return g
    return None


def _named_softmax(op, order: int) -> Candidate | None:
    x = op.operands[0]
    ix = tensor_info(x)
    if ix is None:
        return None
    dim = ir.IntegerAttr(op.attributes["dimension"]).value
    cand = Candidate("softmax", f"{shape_text(ix[0])} {ix[1]} over dim {dim}", location(op), order)
    if dim != len(ix[0]) - 1:
        cand.refusal = ("layout", f"softmax over dim {dim}, not the last ({len(ix[0]) - 1}); kernels normalize contiguous rows")
        return cand
    cand.forms = _io_forms("softmax", x, op.results[0], op, ix[1], [])
    return cand


def _softmax(op, order: int) -> Candidate | None:
    """exp(x - max(x)) / sum(exp(x - max(x))) along the last dim, as torch decomposes it."""
    parts = _softmax_parts(op)
    if parts is None:
        return None
    x, e, rank = parts
    ix = tensor_info(x)
    narrow = _extf_source(x)
    io = f"{tensor_info(narrow)[1]}, computed in {ix[1]}" if narrow is not None else ix[1]
    cand = Candidate("softmax", f"{shape_text(ix[0])} {io} over dim {rank - 1}", location(op), order)
    cand.forms = _io_forms("softmax", x, op.results[0], op, tensor_info(e)[1], [])
    return cand


def _softmax_parts(op):
    """(x, exp(x - max), rank) when `op` is the division of torch's softmax decomposition of x over the last dim, else None."""
    div = as_generic(op)
    if div is None or not div.parallel or len(div.inputs) != 2 or len(div.exprs) != 1 or div.exprs[0] != ("divf", ("in", 0), ("in", 1)) or not _identity_outputs(div):
        return None
    rank = len(div.iterators)
    if not (elementwise_input(div, 0, rank) and row_broadcast(div, 1, rank)):
        return None
    e, s = div.inputs
    total = as_generic(producer(source(s)))
    if total is None or not total.reduces_last() or total.exprs[0] != ("addf", ("in", 0), ("out", 0)) or not same(total.inputs[0], e) or not is_zero_fill(total.outputs[0]):
        return None
    exp = single_op_generic(e, "exp")
    if exp is None or exp.exprs[0] != ("exp", ("in", 0)) or not elementwise_input(exp, 0, rank):
        return None
    sub = single_op_generic(exp.inputs[0], "subf")
    if sub is None or sub.exprs[0] != ("subf", ("in", 0), ("in", 1)) or not (elementwise_input(sub, 0, rank) and row_broadcast(sub, 1, rank)):
        return None
    x, m = sub.inputs
    mx_op = producer(source(m))
    mx = as_generic(mx_op)
    if mx is None or not mx.reduces_last() or mx.exprs[0] not in (("maximumf", ("in", 0), ("out", 0)), ("maxnumf", ("in", 0), ("out", 0))) or not same(mx.inputs[0], x):
        return None
    if mx_op.results[0] != source(m) or not _fill_of(mx.outputs[0], float("-inf")):  # max from -inf, its first result
        return None
    return x, e, rank


def _norm(op, order: int) -> Candidate | None:
    """LayerNorm, (x - mean) * rsqrt(var + eps) [* weight] [+ bias], or RMSNorm,
    x * rsqrt(mean(x^2) + eps) [* weight], along the last dim, rooted at its last op."""
    g = as_generic(op)
    if g is None or not g.parallel or len(g.inputs) != 2 or len(g.exprs) != 1 or not _identity_outputs(g):
        return None
    if g.exprs[0][0] not in ("addf", "mulf") or sorted(g.exprs[0][1:]) != [("in", 0), ("in", 1)]:
        return None
    rank = len(g.iterators)
    weight = bias = None
    value = op.results[0]
    if g.exprs[0][0] == "addf":  # + bias, after * weight or right after the normalization
        split = _split_vector(g, rank)
        if split is None:
            return None
        value, bias = split
        w = single_op_generic(value, "mulf")
        if w is not None and _split_vector(w, rank) is not None and _normalized(_split_vector(w, rank)[0], rank) is not None:
            value, weight = _split_vector(w, rank)
    else:
        split = _split_vector(g, rank)
        if split is not None and _normalized(split[0], rank) is not None:
            value, weight = split
        if _feeds_affine(op.results[0], rank, "addf"):
            return None  # the bias add that follows is the root
    norm = _normalized(value, rank)
    if norm is None:
        return None
    kind, x, eps, compute, divisor = norm
    if weight is None and bias is None and _feeds_affine(op.results[0], rank, "mulf", "addf"):
        return None  # the weight or bias that follows is the root
    if kind == "rmsnorm" and bias is not None:
        return None  # not an RMSNorm the kernels compute
    ix = tensor_info(x)
    cols = ix[0][-1]
    narrow = _extf_source(x)
    io = f"{tensor_info(narrow)[1]}, computed in {compute}" if narrow is not None else ix[1] if ix[1] == compute else f"{ix[1]}, computed in {compute}"
    missing = [name for v, name in ((weight, "weight"), (bias, "bias")) if v is None and (name == "weight" or kind == "layernorm")]
    affine = f" (no {', no '.join(missing)})" if missing else ""
    cand = Candidate(kind, f"{shape_text(ix[0])} {io} over dim {rank - 1}, eps {eps:.6g}{affine}", location(op), order)
    vectors = [(weight, 1.0, "weight")] + ([(bias, 0.0, "bias")] if kind == "layernorm" else [])
    cand.forms = []
    for form in _io_forms(kind, x, op.results[0], op, compute, [], eps):
        dtype = form.operands[0].dtype
        extra, notes = [], []
        for v, fill, name in vectors:
            if v is not None:
                iv = tensor_info(v)
                extra.append(Operand(v, iv[0], iv[1]))
            else:
                extra.append(Operand(("splat", fill), (cols,), dtype))
                notes.append(f"the model has no {name}: the kernel gets {'ones' if fill else 'zeros'}")
        form.operands += extra
        form.notes += notes
        cand.forms.append(form)
    what = "mean" if kind == "layernorm" else "mean square"
    if cols is None:
        cand.refusal = ("shape", f"the row length is dynamic, and the {what} divides by the constant {divisor:g}")
    elif divisor != cols:
        cand.refusal = ("numerics", f"the {what} divides by {divisor:g}, not the row length {cols}")
    return cand


def _feeds_affine(value, rank: int, *heads: str) -> bool:
    """`value`'s only use multiplies (mulf) or adds (addf) a [cols] vector to it."""
    us = users(value)
    if len(us) != 1:
        return False
    g = as_generic(us[0])
    if g is None or len(g.exprs) != 1 or g.exprs[0][0] not in heads or len(g.inputs) != 2 or len(g.iterators) != rank:
        return False
    split = _split_vector(g, rank)
    return split is not None and split[0] == value


def _normalized(value, rank: int):
    """(kind, x, eps, compute type, divisor) when `value` is x normalized per row, else None:
    layernorm: (x - mean) * rsqrt(var + eps); rmsnorm: x * rsqrt(mean(x^2) + eps)."""
    mul_r = single_op_generic(value, "mulf")
    if mul_r is None or len(mul_r.inputs) != 2 or sorted(mul_r.exprs[0][1:]) != [("in", 0), ("in", 1)]:
        return None
    found = None
    for i in (0, 1):
        per_row = elementwise_input(mul_r, i, rank) or row_broadcast(mul_r, i, rank)
        if single_op_generic(source(mul_r.inputs[i]), "rsqrt") is not None and per_row and elementwise_input(mul_r, 1 - i, rank):
            found = source(mul_r.inputs[i]), mul_r.inputs[1 - i]
    if found is None:
        return None
    rstd, centered = found
    rsqrt = single_op_generic(rstd, "rsqrt")
    if rsqrt.exprs[0] != ("rsqrt", ("in", 0)) or not elementwise_input(rsqrt, 0, len(rsqrt.iterators)):
        return None
    var_eps = single_op_generic(rsqrt.inputs[0], "addf")
    if var_eps is None or len(var_eps.inputs) != 1 or not elementwise_input(var_eps, 0, len(var_eps.iterators)):
        return None
    body = var_eps.exprs[0]
    consts = [a for a in body[1:] if a[0] == "const"]
    if len(consts) != 1 or [a for a in body[1:] if a != consts[0]] != [("in", 0)]:
        return None
    eps = consts[0][1]
    var = source(var_eps.inputs[0])
    sq, divisor = _row_mean(var)
    if sq is None:
        return None
    square = single_op_generic(sq, "mulf")
    if square is None or square.exprs[0] not in (("mulf", ("in", 0), ("in", 1)), ("mulf", ("in", 0), ("in", 0))):
        return None
    if not all(elementwise_input(square, i, rank) for i in range(len(square.inputs))):
        return None
    compute = tensor_info(var)[1]
    sub = single_op_generic(centered, "subf")
    if sub is not None:  # LayerNorm: the centered x, squared
        if sub.exprs[0] != ("subf", ("in", 0), ("in", 1)) or not elementwise_input(sub, 0, rank) or not (elementwise_input(sub, 1, rank) or row_broadcast(sub, 1, rank)):
            return None
        x, mean = sub.inputs
        mean_x, mean_divisor = _row_mean(source(mean))
        if mean_x is None or not same(mean_x, x) or mean_divisor != divisor or not all(_centered(v, x, mean) for v in square.inputs):
            return None
        return "layernorm", x, eps, compute, divisor
    x = centered  # RMSNorm: x itself, squared
    if not all(same(v, x) for v in square.inputs):
        return None
    return "rmsnorm", x, eps, compute, divisor


def _row_mean(value):
    """(t, n) when `value` is sum(t over the last dim) / n (a constant n), else (None, None)."""
    div = single_op_generic(value, "divf")
    if div is None or len(div.inputs) != 1 or div.exprs[0][1] != ("in", 0) or div.exprs[0][2][0] != "const" or not elementwise_input(div, 0, len(div.iterators)):
        return None, None
    total = as_generic(producer(source(div.inputs[0])))
    if total is None or not total.reduces_last() or total.exprs[0] != ("addf", ("in", 0), ("out", 0)) or not is_zero_fill(total.outputs[0]):
        return None, None
    return total.inputs[0], div.exprs[0][2][1]


def _split_vector(g: Generic, rank: int):
    """(the elementwise input, the [cols] vector input) of a two-input generic, or None."""
    for i in (0, 1):
        if elementwise_input(g, i, rank) and last_dim_broadcast(g, 1 - i, rank):
            return g.inputs[i], g.inputs[1 - i]
    return None


def _centered(value, x, mean) -> bool:
    sub = single_op_generic(value, "subf")
    if sub is None or sub.exprs[0] != ("subf", ("in", 0), ("in", 1)) or not same(sub.inputs[0], x) or not same(sub.inputs[1], mean):
        return False
    rank = len(sub.iterators)
    return elementwise_input(sub, 0, rank) and (elementwise_input(sub, 1, rank) or row_broadcast(sub, 1, rank))


# ----------------------------------------------------------------------------------------------
# Attention: the chain of eager attention, as one form of its context batch matmul
# ----------------------------------------------------------------------------------------------


def _reshaped_from(value, op_name: str, rank: int):
    """The [B, H, ...] value a [B*H, ...] `value` collapses (op_name tensor.collapse_shape), or the
    [B*H, ...] value a [B, H, ...] `value` expands (tensor.expand_shape): only the two leading
    dims merged or split; `rank` is the value's own rank. None otherwise."""
    op = producer(value)
    if op is None or op.name != op_name:
        return None
    groups = [[ir.IntegerAttr(i).value for i in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]
    if op_name == "tensor.collapse_shape":
        want = [[0, 1]] + [[i] for i in range(2, rank + 1)]
    else:
        want = [[0, 1]] + [[i] for i in range(2, rank)]
    return op.operands[0] if groups == want else None


def _narrowed_from(value):
    """(the wider value, its generic) when `value` is an elementwise truncf of it, else (value, None)."""
    g = as_generic(producer(value))
    if g is not None and g.parallel and len(g.inputs) == 1 and g.exprs and g.exprs[0] == ("truncf", ("in", 0), tensor_info(value)[1]) \
            and elementwise_input(g, 0, len(g.iterators)) and _identity_outputs(g):
        return g.inputs[0], g
    return value, None


def _plain_batch_matmul(op) -> bool:
    if op is None or op.name != "linalg.batch_matmul" or not is_zero_fill(op.operands[2]):
        return False
    maps = [str(ir.AffineMapAttr(m).value) for m in ir.ArrayAttr(op.attributes["indexing_maps"])] if "indexing_maps" in op.attributes else _DEFAULT_MAPS[op.name]
    return maps == _DEFAULT_MAPS[op.name]


def _one_use(*values) -> bool:
    return all(len(users(v)) == 1 for v in values)


def _attention_forms(ctx) -> list[Form]:
    """The context batch matmul `ctx` with the chain that makes its lhs, when that is eager
    attention as transformers exports it (GPT-2, at IREE's input level):

        s  = batch_matmul(q [Z, S, D], kt [Z, D, S]) (zero init)      [truncf]
        s4 = expand_shape s to [B, H, S, S]
        x  = s4 * c (or s4 / c)                                       the scale, a constant
        y  = x + mask [B, 1, S, S] (read as (d0, 0, d2, d3))
        p  = softmax(y) over the last dim (torch's decomposition)     [extf before, truncf after]
        o  = batch_matmul(collapse_shape p to [Z, S, S], v [Z, S, D])  [truncf]

    each value the only use of the one before (the probabilities must not be needed elsewhere):
    one form, attention, whose result is o's (or its truncf's), computed in the narrowest type
    the model rounds to on the way. Its operands: q, kt, v and the mask as [B, S, S]."""
    ictx = tensor_info(ctx.results[0])
    if not _plain_batch_matmul(ctx) or ictx is None or len(ictx[0]) != 3:
        return []
    p3, v = ctx.operands[0], ctx.operands[1]
    p4 = _reshaped_from(p3, "tensor.collapse_shape", 3)
    if p4 is None or not _one_use(p3, p4):
        return []
    p_wide, p_narrow = _narrowed_from(p4)
    div = producer(p_wide)
    parts = _softmax_parts(div) if div is not None else None
    if parts is None or parts[2] != 4 or not _one_use(p_wide):
        return []
    x = parts[0]
    y = _extf_source(x)
    if y is not None and not _one_use(y):
        return []
    y = x if y is None else y
    add = single_op_generic(y, "addf")
    if add is None or len(add.inputs) != 2 or sorted(add.exprs[0][1:]) != [("in", 0), ("in", 1)]:
        return []
    found = [(add.inputs[i], add.inputs[1 - i]) for i in (0, 1) if elementwise_input(add, i, 4) and add.map_of(1 - i) == ("d0", "0", "d2", "d3")]
    if len(found) != 1:
        return []
    scaled, mask = found[0]
    mul = as_generic(producer(scaled))
    if mul is None or not mul.parallel or len(mul.inputs) != 1 or len(mul.exprs) != 1 or not elementwise_input(mul, 0, 4) or not _identity_outputs(mul):
        return []
    e = mul.exprs[0]
    consts = [a[1] for a in e[1:] if a[0] == "const" and isinstance(a[1], float)]
    if e[0] == "mulf" and len(consts) == 1 and ("in", 0) in e[1:]:
        scale = consts[0]
    elif e[0] == "divf" and e[1] == ("in", 0) and e[2][0] == "const" and e[2][1]:
        scale = round_to(1.0 / e[2][1], tensor_info(scaled)[1])
    else:
        return []
    s4 = mul.inputs[0]
    s3 = _reshaped_from(s4, "tensor.expand_shape", 4)
    if s3 is None or not _one_use(scaled, s4, s3):
        return []
    s_wide, s_narrow = _narrowed_from(s3)
    scores = producer(s_wide)
    if not _plain_batch_matmul(scores) or not _one_use(s_wide):
        return []
    q, kt = scores.operands[0], scores.operands[1]
    iq, ikt, iv, imask, i4 = tensor_info(q), tensor_info(kt), tensor_info(v), tensor_info(mask), tensor_info(s4)
    if not (iq and ikt and iv and imask and i4) or len(imask[0]) != 4 or imask[0][1] != 1 or imask[0][0] != i4[0][0]:
        return []
    # The types the model holds the chain in: scores, scaled, masked, softmax, probabilities, context.
    result_value, anchor = ctx.results[0], ctx
    narrowed_out = _truncf_user(result_value)
    if narrowed_out is not None and len(narrowed_out.iterators) == 3 and elementwise_input(narrowed_out, 0, 3) and _identity_outputs(narrowed_out):
        result_value, anchor = narrowed_out.op.results[0], narrowed_out.op
    steps = [tensor_info(v_)[1] for v_ in (s_wide, s3, scaled, y, x, p_wide, p4, ctx.results[0], result_value)]
    compute = min(steps, key=lambda t: _FLOAT_WIDTH.get(t, 0))
    narrow_steps = [what for what, v_ in (("the scores", s3), ("the scale", scaled), ("the mask add", y), ("the softmax", p4), ("the context", result_value))
                    if tensor_info(v_)[1] == compute]
    rounds = f"rounds to {compute} after {', '.join(narrow_steps[:-1])} and {narrow_steps[-1]}" if len(narrow_steps) > 1 else ""
    bsz, _, s_, s2_ = imask[0]
    operands = [Operand(q, iq[0], iq[1]), Operand(kt, ikt[0], ikt[1]), Operand(v, iv[0], iv[1]), Operand(mask, (bsz, s_, s2_), imask[1])]
    covers = (scores.results[0], div.results[0])
    att = Form("attention", operands, result_value, ictx[0], tensor_info(result_value)[1], compute, anchor, result_dims=((0, 0), (0, 1), (0, 2)),
               steps=rounds if compute != tensor_info(ctx.results[0])[1] else "", scale=scale, covers=covers)
    return [_attention_qkv_form(att), att]



# ----------------------------------------------------------------------------------------------
# Attention on the projection's layouts: q, k, v sliced from one [B, S, 3E] tensor, the result in [B, S, E]
# ----------------------------------------------------------------------------------------------

QKV_NOTE = "q, k and v are read from the projection's [B, S, 3E] result and the result is written in [B, S, E] layout (the transposes are not computed)"


def _reassociation(op) -> list[list[int]]:
    return [[ir.IntegerAttr(i).value for i in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]


def _permutation(op) -> list[int] | None:
    if op is None or op.name != "linalg.transpose" or "permutation" not in op.attributes:
        return None
    return list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))


def _heads_source(value, permutation: list[int]):
    """(the [B, S, E] value, the transposed [B, H, ., .] value, its [B, S, H, D] heads) when `value`
    is collapse_shape [[0, 1], [2], [3]] of linalg.transpose (`permutation`) of expand_shape
    [[0], [1], [2, 3]] of a [B, S, E] value (torch's view as heads, then transpose), else None."""
    t = _reshaped_from(value, "tensor.collapse_shape", 3)
    op = producer(t) if t is not None else None
    if _permutation(op) != permutation or op.results[0] != t:
        return None
    heads = op.operands[0]
    e = producer(heads)
    if e is None or e.name != "tensor.expand_shape" or _reassociation(e) != [[0], [1], [2, 3]]:
        return None
    return e.operands[0], t, heads


def _slice_of(value):
    """(the sliced tensor, last-dim offset) when `value` is a static, unit-stride tensor.extract_slice of
    a rank-3 tensor that keeps its first two dims whole and takes a part of the last, else None."""
    op = producer(value)
    if op is None or op.name != "tensor.extract_slice" or len(op.operands) != 1:
        return None
    src, mine = tensor_info(op.operands[0]), tensor_info(value)
    if not src or not mine or len(src[0]) != 3 or len(mine[0]) != 3 or None in src[0] or None in mine[0]:
        return None
    offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
    sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
    strides = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
    if strides != [1, 1, 1] or offsets[:2] != [0, 0] or sizes != list(mine[0]) or sizes[:2] != list(src[0][:2]):
        return None
    return op.operands[0], offsets[2]


def _only_use(value, name: str):
    """(the op, None) when `value`'s only use is an op `name`; (None, True) when one of several
    uses is; (None, False) when none is."""
    us = users(value)
    mine = [u for u in us if u.name == name]
    if len(us) == 1 and mine:
        return mine[0], None
    return None, bool(mine)


def _heads_back(value):
    """(the [B*S, E] or [B, S, E] value, None) when `value` [Z, S, D]'s only use is expand_shape to
    [B, H, S, D], its only use linalg.transpose [0, 2, 1, 3] to [B, S, H, D], its only use
    collapse_shape to [B*S, H*D] or [B, S, H*D]; else (None, (category, reason))."""
    not_back = ("layout", "the result is not transposed back to [B, S, E]")
    other = ("layout", "the result has other uses than its transpose back to [B, S, E]")
    e, more = _only_use(value, "tensor.expand_shape")
    if e is None:
        return None, other if more else not_back
    if _reassociation(e) != [[0, 1], [2], [3]]:
        return None, not_back
    t, more = _only_use(e.results[0], "linalg.transpose")
    if t is None:
        return None, other if more else not_back
    if _permutation(t) != [0, 2, 1, 3] or t.operands[0] != e.results[0]:
        return None, not_back
    c, more = _only_use(t.results[0], "tensor.collapse_shape")
    if c is None:
        return None, other if more else not_back
    if _reassociation(c) not in ([[0, 1], [2, 3]], [[0], [1], [2, 3]]):
        return None, not_back
    return c.results[0], None


def _attention_qkv_form(att: Form) -> Form:
    """The attention form `att` on the layouts the model holds q, k, v and the result in, as
    transformers' GPT-2 exports it:

        x   = the qkv projection's result, [B, S, 3E] (E = H*D)
        q   = collapse(transpose [0, 2, 1, 3] (expand x[:, :, 0:E] to [B, S, H, D]))    [B*H, S, D]
        kt  = collapse(transpose [0, 2, 3, 1] (expand x[:, :, E:2E] to [B, S, H, D]))   [B*H, D, S]
        v   = collapse(transpose [0, 2, 1, 3] (expand x[:, :, 2E:3E] to [B, S, H, D]))  [B*H, S, D]
        out = collapse(transpose [0, 2, 1, 3] (expand the chain's result to [B, H, S, D]))  [B*S, E] or [B, S, E]

    each reshape and transpose the only use of the value before it: one form, attention_qkv, whose
    operands are x seen as [B, S, 3, H, D] (a free expand) and the mask, whose result is `out` seen
    as [B, S, H, D]. When the structure is not there, the form carries the reason (`refusal`), so
    the report can say why the chain is taken as plain attention."""
    form = Form("attention_qkv", list(att.operands), att.result, att.result_shape, att.result_dtype, att.compute, att.anchor,
                steps=att.steps, scale=att.scale, covers=att.covers)

    def refuse(category: str, reason: str) -> Form:
        form.refusal = (category, reason)
        return form

    q, kt, v, mask = att.operands
    found = [_heads_source(q.value, [0, 2, 1, 3]), _heads_source(kt.value, [0, 2, 3, 1]), _heads_source(v.value, [0, 2, 1, 3])]
    if None in found:
        return refuse("layout", "q, k and v are not heads of [B, S, E] tensors transposed to [B*H, S, D] (k: [B*H, D, S])")
    if not _one_use(q.value, kt.value, v.value, *(f[1] for f in found), *(f[2] for f in found)):
        return refuse("layout", "the transposed q, k or v has other uses (the transposes would still be computed)")
    infos = [tensor_info(f[2]) for f in found]
    if any(None in i[0] for i in infos) or len({i[0] for i in infos}) != 1:
        return refuse("shape", "q, k and v need the same static [B, S, H, D] heads")
    slices = [_slice_of(f[0]) for f in found]
    if None in slices or len({_key(s[0]) for s in slices}) != 1:
        return refuse("layout", "q, k and v are not slices of one [B, S, 3E] tensor")
    x = slices[0][0]
    ix = tensor_info(x)
    bsz, s_, h, d = infos[0][0]
    e = h * d
    if [s[1] for s in slices] != [0, e, 2 * e] or ix[0] != (bsz, s_, 3 * e):
        return refuse("layout", "q, k and v are not the slices at 0, E and 2E of the last dim of one [B, S, 3E] tensor")
    if bsz * h != q.shape[0]:  # (the mask's B and S are checked against the kernel's symbols by the selection)
        return refuse("shape", f"the heads' B*H = {bsz}*{h} is not the chain's batch {shape_text(q.shape[:1])}")
    out, why = _heads_back(att.result)
    if out is None:
        return refuse(*why)
    form.operands = [Operand(x, (bsz, s_, 3, h, d), ix[1]), mask]
    form.result, form.result_shape = out, (bsz, s_, h, d)
    form.result_dtype = tensor_info(out)[1]
    form.notes = [QKV_NOTE]
    return form
