"""SwiGLU, silu(gate) * up elementwise over same-shape tensors: Llama's MLP activation (gate and up
the results of two projections, or two slices of one fused projection), as torch's decomposition
writes it in generics (sigmoid 1 / (1 + exp(-g)), times g, times up)."""

from __future__ import annotations

from iree.compiler import ir

from ..ir_match import (
    FLOAT_WIDTH,
    Expr,
    as_generic,
    elementwise_input,
    identity_outputs,
    inline_over,
    location,
    producer,
    shape_text,
    tensor_info,
)
from .base import Candidate, Family, Form, Matcher, Operand, OpKind
from .rows import rows_shape


def _swiglu_shapes(ins: list[tuple[str, ...]]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    """gate [rows, n], up [rows, n] → [rows, n]."""
    (rows, n), (rows2, n2) = ins
    return (rows, n), [(rows, rows2), (n, n2)]


# gate [rows, n], up [rows, n] → silu(gate) * up
SWIGLU = OpKind("swiglu", (2, 2), 2, _swiglu_shapes, accumulate="f32")

# How many elementwise generics back from the product the gate may lie (sigmoid, SiLU, casts).
_DEPTH = 4


def match(op: ir.Operation) -> Candidate | None:
    """The product silu(gate) * up (either order), rooted at its mulf generic."""
    g = as_generic(op)
    if g is None or not g.parallel or len(g.inputs) != 2 or len(g.exprs) != 1 or not identity_outputs(g):
        return None
    if sorted(g.exprs[0][1:]) != [("in", 0), ("in", 1)] or g.exprs[0][0] != "mulf":
        return None
    rank = len(g.iterators)
    if not (elementwise_input(g, 0, rank) and elementwise_input(g, 1, rank)):
        return None
    result = tensor_info(op.results[0])
    for i in (0, 1):
        activated, up = g.inputs[i], g.inputs[1 - i]
        gate = _silu_input(activated)
        if gate is None or tensor_info(gate) != result or tensor_info(up) != result:
            continue
        return _candidate(op, gate, up, activated)
    return None


def _silu_input(value: ir.Value) -> ir.Value | None:
    """The g that `value` is silu(g) of, through at most _DEPTH elementwise generics, or None."""
    frontier, tried = [value], set()
    for _ in range(_DEPTH):
        inputs = []
        for v in frontier:
            g = as_generic(producer(v))
            if g is not None and g.parallel:
                inputs += [x for x in g.inputs if x not in tried]
        for x in inputs:
            tried.add(x)
            if _is_silu(inline_over(value, x, _DEPTH + 2)):
                return x
        frontier = inputs
    return None


def _is_silu(e: Expr) -> bool:
    """e = x * sigmoid(x) (either order) or x / (1 + exp(-x))."""
    if e[0] == "mulf" and len(e) == 3 and ("x",) in e[1:]:
        return _is_sigmoid(e[2] if e[1] == ("x",) else e[1])
    return e[0] == "divf" and e[1] == ("x",) and _is_one_plus_exp_neg(e[2])


def _is_sigmoid(e: Expr) -> bool:
    """e = 1 / (1 + exp(-x)), the sum in either order."""
    return e[0] == "divf" and e[1] == ("const", 1.0) and _is_one_plus_exp_neg(e[2])


def _is_one_plus_exp_neg(e: Expr) -> bool:
    if e[0] != "addf" or ("const", 1.0) not in e[1:]:
        return False
    exp = e[2] if e[1] == ("const", 1.0) else e[1]
    if exp[0] != "exp":
        return False
    neg = exp[1]
    return neg == ("negf", ("x",)) or (neg[0] == "mulf" and sorted(neg[1:]) == sorted([("x",), ("const", -1.0)]))


def _candidate(op: ir.Operation, gate: ir.Value, up: ir.Value, activated: ir.Value) -> Candidate:
    shape, dtype = tensor_info(op.results[0])
    types = [tensor_info(v)[1] for v in (gate, activated, op.results[0])]
    compute = min(types, key=lambda t: FLOAT_WIDTH.get(t, 0))
    steps = f"rounds to {compute} after each step of the sigmoid, after the SiLU and after the product" if FLOAT_WIDTH.get(compute, 0) < 32 else ""
    rows_n = rows_shape(shape)
    form = Form(SWIGLU, (Operand(gate, rows_n, dtype), Operand(up, rows_n, dtype)), op.results[0], rows_n, dtype, compute, op, steps=steps,
                result_dims=tuple((0, i) for i in range(len(shape))))
    where = "two slices of one tensor" if _slice_source(gate) is not None and _slice_source(gate) == _slice_source(up) else "two tensors"
    description = f"silu(gate) * up {shape_text(shape)} {dtype}, gate and up {where}"
    return Candidate("swiglu", description, location(op), op.results[0], (form,))


def _slice_source(value: ir.Value) -> ir.Value | None:
    op = producer(value)
    return op.operands[0] if op is not None and op.name == "tensor.extract_slice" else None


FAMILY = Family(kinds=(SWIGLU,), matchers=(Matcher(frozenset({"linalg.generic"}), match),))
