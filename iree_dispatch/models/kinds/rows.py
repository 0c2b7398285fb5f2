"""What the row op kinds (softmax, the norms) share: a row op's forms and a row kernel's shapes."""

from __future__ import annotations

from iree.compiler import ir

from ..ir_match import Shape, extf_source, tensor_info, truncf_user
from .base import Form, Operand, OpKind


def row_shapes(ins: list[tuple[str, ...]]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    """x [rows, cols] (then [cols] vectors) → [rows, cols]."""
    rows, cols = ins[0]
    return (rows, cols), [(v[0], cols) for v in ins[1:]]


def rows_shape(shape: Shape) -> tuple[int | None, int | None]:
    """`shape` as [rows, cols]: every dim but the last merged into rows."""
    rows = 1
    for d in shape[:-1]:
        rows = None if rows is None or d is None else rows * d
    return rows, shape[-1]


def row_forms(kind: OpKind, x: ir.Value, result_value: ir.Value, anchor: ir.Operation, compute: str, eps: float | None = None) -> list[Form]:
    """Forms of a row op over `x` (its last dim the row): with narrow I/O (x widened by an extf
    generic, the result narrowed by a truncf generic) first, then in the compute type."""
    ix, ir_ = tensor_info(x), tensor_info(result_value)
    forms = []
    narrow_in = extf_source(x)
    narrow_out = truncf_user(result_value)
    rows_cols = rows_shape(ix[0])
    same_as_x = tuple((0, i) for i in range(len(ix[0])))
    if narrow_in is not None and narrow_out is not None:
        g = narrow_out
        forms.append(
            Form(kind, (Operand(narrow_in, rows_cols, tensor_info(narrow_in)[1]),), g.op.results[0], rows_cols, tensor_info(g.op.results[0])[1], compute, g.op, eps,
                 result_dims=same_as_x)
        )
    forms.append(Form(kind, (Operand(x, rows_cols, ix[1]),), result_value, rows_cols, ir_[1], compute, anchor, eps, result_dims=same_as_x))
    return forms
