"""Elementwise chains no op kind covers, recognized so that the report accounts for them: RoPE
(Llama's rotary embedding, x * cos + rotate_half(x) * sin) and residual adds (a residual add that
a kernel takes with its Linear, as matmul+bias+residual, is not listed: compiler.py). No kernel replaces
them on their own: IREE fuses elementwise ops into its own dispatches, so a kernel would save little."""

from __future__ import annotations

from iree.compiler import ir

from ..ir_match import Expr, as_generic, elementwise_input, identity_outputs, inline_over, location, producer, same, shape_text, tensor_info
from .base import Family, Recognizer, Unkinded

ROPE_REASON = "no op kind; IREE fuses the elementwise chain itself"
RESIDUAL_REASON = "no op kind; IREE fuses it with the elementwise ops around it"


def _full_add(op: ir.Operation):
    """(a, b, rank) when `op` adds two tensors of its result's shape elementwise, else None."""
    g = as_generic(op)
    if g is None or not g.parallel or len(g.inputs) != 2 or len(g.exprs) != 1 or not identity_outputs(g):
        return None
    if g.exprs[0][0] != "addf" or sorted(g.exprs[0][1:]) != [("in", 0), ("in", 1)]:
        return None
    rank = len(g.iterators)
    if rank < 2 or not all(elementwise_input(g, i, rank) for i in (0, 1)):
        return None
    return g.inputs[0], g.inputs[1], rank


def recognize_rope(op: ir.Operation) -> Unkinded | None:
    """x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x[..., d/2:], x[..., :d/2]) along the
    last dim (transformers' apply_rotary_pos_emb), the products in either order."""
    found = _full_add(op)
    if found is None:
        return None
    a, b, rank = found
    for plain, rotated in ((a, b), (b, a)):
        x = _rotate_half_source(rotated, rank)
        if x is not None and any(same(v, x) for v in _product_inputs(plain)):
            shape, dtype = tensor_info(op.results[0])
            return Unkinded("rope", f"{shape_text(shape)} {dtype}: x * cos + rotate_half(x) * sin", location(op), ROPE_REASON, op.results[0])
    return None


def _product_inputs(value: ir.Value) -> tuple[ir.Value, ...]:
    g = as_generic(producer(value))
    if g is None or len(g.exprs) != 1 or g.exprs[0][0] != "mulf" or len(g.inputs) != 2:
        return ()
    return g.inputs


def _rotate_half_source(value: ir.Value, rank: int) -> ir.Value | None:
    """The x of a product rotate_half(x) * sin, or None."""
    for v in _product_inputs(value):
        concat = producer(v)
        if concat is None or concat.name != "tensor.concat" or len(concat.operands) != 2:
            continue
        if int(ir.IntegerAttr(concat.attributes["dim"]).value) != rank - 1:
            continue
        negated = as_generic(producer(concat.operands[0]))
        if negated is None or negated.exprs != (("negf", ("in", 0)),) or len(negated.inputs) != 1:
            continue
        upper, lower = producer(negated.inputs[0]), producer(concat.operands[1])
        if not (_is_slice(upper) and _is_slice(lower)) or upper.operands[0] != lower.operands[0]:
            continue
        return upper.operands[0]
    return None


def _is_slice(op: ir.Operation | None) -> bool:
    return op is not None and op.name == "tensor.extract_slice"


def recognize_residual_add(op: ir.Operation) -> Unkinded | None:
    """a + b of two same-shape tensors, neither an elementwise function of the other (a GELU's
    x + 0.044715 x^3 is one chain, not a residual add): a transformer's residual connection."""
    found = _full_add(op)
    if found is None:
        return None
    a, b, _ = found
    if _mentions_x(inline_over(a, b, 12)) or _mentions_x(inline_over(b, a, 12)):
        return None
    shape, dtype = tensor_info(op.results[0])
    return Unkinded("residual add", f"{shape_text(shape)} {dtype}", location(op), RESIDUAL_REASON, op.results[0])


def _mentions_x(e: Expr) -> bool:
    return e == ("x",) or any(isinstance(a, tuple) and _mentions_x(a) for a in e[1:])


FAMILY = Family(kinds=(), recognizers=(Recognizer(frozenset({"linalg.generic"}), recognize_rope),
                                       Recognizer(frozenset({"linalg.generic"}), recognize_residual_add)))
