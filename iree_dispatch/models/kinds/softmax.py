"""softmax over a model's last dim: linalg.softmax, or torch's decomposition of it into generics."""

from __future__ import annotations

from iree.compiler import ir

from ..ir_match import (
    as_generic,
    elementwise_input,
    extf_source,
    identity_outputs,
    is_fill,
    is_zero_fill,
    location,
    producer,
    row_broadcast,
    same,
    shape_text,
    single_op_generic,
    source,
    tensor_info,
)
from .base import Candidate, Family, Matcher, OpKind
from .rows import row_forms, row_shapes

SOFTMAX = OpKind("softmax", (2,), 2, row_shapes, accumulate="f32")  # x [rows, cols] → softmax over cols (a model's last dim)


def match_named(op: ir.Operation) -> Candidate | None:
    """linalg.softmax: over the last dim, or refused (kernels normalize contiguous rows)."""
    x = op.operands[0]
    ix = tensor_info(x)
    if ix is None:
        return None
    dim = ir.IntegerAttr(op.attributes["dimension"]).value
    description = f"{shape_text(ix[0])} {ix[1]} over dim {dim}"
    if dim != len(ix[0]) - 1:
        refusal = ("layout", f"softmax over dim {dim}, not the last ({len(ix[0]) - 1}); kernels normalize contiguous rows")
        return Candidate("softmax", description, location(op), op.results[0], refusal=refusal)
    return Candidate("softmax", description, location(op), op.results[0], tuple(row_forms(SOFTMAX, x, op.results[0], op, ix[1])))


def match_decomposed(op: ir.Operation) -> Candidate | None:
    """exp(x - max(x)) / sum(exp(x - max(x))) along the last dim, as torch decomposes it."""
    parts = softmax_parts(op)
    if parts is None:
        return None
    x, e, rank = parts
    ix = tensor_info(x)
    narrow = extf_source(x)
    io = f"{tensor_info(narrow)[1]}, computed in {ix[1]}" if narrow is not None else ix[1]
    forms = row_forms(SOFTMAX, x, op.results[0], op, tensor_info(e)[1])
    return Candidate("softmax", f"{shape_text(ix[0])} {io} over dim {rank - 1}", location(op), op.results[0], tuple(forms))


def softmax_parts(op: ir.Operation) -> tuple[ir.Value, ir.Value, int] | None:
    """(x, exp(x - max), rank) when `op` is the division of torch's softmax decomposition of x over the last dim, else None."""
    div = as_generic(op)
    if div is None or not div.parallel or len(div.inputs) != 2 or len(div.exprs) != 1 or div.exprs[0] != ("divf", ("in", 0), ("in", 1)) or not identity_outputs(div):
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
    if mx_op.results[0] != source(m) or not is_fill(mx.outputs[0], float("-inf")):  # max from -inf, its first result
        return None
    return x, e, rank


FAMILY = Family(
    kinds=(SOFTMAX,),
    matchers=(Matcher(frozenset({"linalg.softmax"}), match_named), Matcher(frozenset({"linalg.generic"}), match_decomposed)),
)
