"""LayerNorm and RMSNorm over a model's last dim, as torch's decompositions write them in generics
(RMSNorm also as Llama writes it: the square as x.pow(2), f32 statistics on a narrower x, the
normalized value rounded back to x's type before the weight multiply)."""

from __future__ import annotations

from dataclasses import replace

from iree.compiler import ir

from ..ir_match import (
    Generic,
    as_generic,
    elementwise_input,
    extf_source,
    identity_outputs,
    is_zero_fill,
    last_dim_broadcast,
    location,
    producer,
    row_broadcast,
    same,
    shape_text,
    single_op_generic,
    source,
    tensor_info,
    truncf_source,
    truncf_user,
    users,
)
from .base import Candidate, Family, Matcher, Operand, OpKind, Splat, operand
from .rows import row_forms, row_shapes

# x [rows, cols], weight [cols], bias [cols], eps → per row
LAYERNORM = OpKind("layernorm", (2, 1, 1), 2, row_shapes, epsilon=True, accumulate="f32")
# x [rows, cols], weight [cols], eps → x * rsqrt(mean(x^2) + eps) * weight per row
RMSNORM = OpKind("rmsnorm", (2, 1), 2, row_shapes, epsilon=True, accumulate="f32")
_KINDS = {"layernorm": LAYERNORM, "rmsnorm": RMSNORM}


def match(op: ir.Operation) -> Candidate | None:
    """LayerNorm, (x - mean) * rsqrt(var + eps) [* weight] [+ bias], or RMSNorm,
    x * rsqrt(mean(x^2) + eps) [* weight], along the last dim, rooted at its last op."""
    g = as_generic(op)
    if g is None or not g.parallel or len(g.inputs) != 2 or len(g.exprs) != 1 or not identity_outputs(g):
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
        if split is not None and (_normalized(split[0], rank) is not None or _rounded_rms(split[0], rank) is not None):
            value, weight = split
        if _feeds_affine(op.results[0], rank, "addf"):
            return None  # the bias add that follows is the root
    rounded = _rounded_rms(value, rank) if weight is not None else None
    if rounded is not None:  # Llama: the weight multiplies the normalized value rounded to x's type
        return _llama_rms_candidate(op, rounded, weight)
    norm = _normalized(value, rank)
    if norm is None:
        return None
    kind, x, eps, compute, divisor = norm
    if weight is None and bias is None and _feeds_affine(op.results[0], rank, "mulf", "addf"):
        return None  # the weight or bias that follows is the root
    narrowed = truncf_user(op.results[0])
    if kind == "rmsnorm" and weight is None and narrowed is not None and _feeds_affine(narrowed.op.results[0], rank, "mulf"):
        return None  # Llama's weight multiply after the rounding is the root
    if kind == "rmsnorm" and bias is not None:
        return None  # not an RMSNorm the kernels compute
    ix = tensor_info(x)
    cols = ix[0][-1]
    missing = [name for v, name in ((weight, "weight"), (bias, "bias")) if v is None and (name == "weight" or kind == "layernorm")]
    affine = f" (no {', no '.join(missing)})" if missing else ""
    description = f"{shape_text(ix[0])} {_io_text(x, compute)} over dim {rank - 1}, eps {eps:.6g}{affine}"
    vectors = [(weight, 1.0, "weight")] + ([(bias, 0.0, "bias")] if kind == "layernorm" else [])
    forms = []
    for form in row_forms(_KINDS[kind], x, op.results[0], op, compute, eps):
        dtype = form.operands[0].dtype
        extra: list[Operand] = []
        notes: list[str] = []
        for v, fill, name in vectors:
            if v is not None:
                extra.append(operand(v, tensor_info(v)))
            else:
                extra.append(Operand(Splat(fill), (cols,), dtype))
                notes.append(f"the model has no {name}: the kernel gets {'ones' if fill else 'zeros'}")
        forms.append(replace(form, operands=(*form.operands, *extra), notes=(*form.notes, *notes)))
    return Candidate(kind, description, location(op), op.results[0], tuple(forms), _divisor_refusal(kind, cols, divisor))


def _io_text(x: ir.Value, compute: str) -> str:
    """x's type as the description gives it: `bf16, computed in f32` where the model widens it (or computes in another type)."""
    narrow = extf_source(x)
    dtype = tensor_info(x)[1]
    if narrow is not None:
        return f"{tensor_info(narrow)[1]}, computed in {compute}"
    return dtype if dtype == compute else f"{dtype}, computed in {compute}"


def _divisor_refusal(kind: str, cols: int | None, divisor: float):
    """Why no kernel can take a norm whose mean (or mean square) divides by `divisor`, or None."""
    what = "mean" if kind == "layernorm" else "mean square"
    if cols is None:
        return ("shape", f"the row length is dynamic, and the {what} divides by the constant {divisor:g}")
    if divisor != cols:
        return ("numerics", f"the {what} divides by {divisor:g}, not the row length {cols}")
    return None


def _rounded_rms(value: ir.Value, rank: int):
    """(normalized f32 value, its _normalized reading) when `value` is an RMSNorm's normalized
    value rounded to a narrower type (an elementwise truncf, its only use), else None."""
    wide = truncf_source(value)
    if wide == value or len(users(wide)) != 1:
        return None
    norm = _normalized(wide, rank)
    return (wide, norm) if norm is not None and norm[0] == "rmsnorm" else None


def _llama_rms_candidate(op: ir.Operation, rounded, weight: ir.Value) -> Candidate:
    """RMSNorm as Llama writes it (LlamaRMSNorm): h = x.to(f32); h * rsqrt(mean(h^2) + eps), rounded
    to x's type, then weight * that in the weight's type, rooted at the weight multiply. Forms, best
    first: x, weight → the weight multiply's result (a kernel computing in f32 and rounding once:
    the model computes in the narrow type from its rounding on, so this is wider); then the
    normalization alone, x → its rounding (the kernel gets ones for the weight: one rounding, as
    the model's), the weight multiply left to IREE; then that in f32 (the f32 x, before the rounding)."""
    wide, (_, x, eps, compute, divisor) = rounded
    ix = tensor_info(x)
    narrowed = op.operands[0] if op.operands[0] != weight else op.operands[1]
    out = tensor_info(op.results[0])
    rounding = tensor_info(narrowed)[1]
    description = f"{shape_text(ix[0])} {_io_text(x, compute)} over dim {len(ix[0]) - 1}, eps {eps:.6g}, rounded to {rounding} before the weight multiply"
    forms = []
    weight_operand = operand(weight, tensor_info(weight))
    plain = row_forms(RMSNORM, x, wide, producer(wide), compute, eps)
    if extf_source(x) is not None and plain[0].result == narrowed:  # x narrow in, the weight multiply's result out
        first = plain[0]
        steps = f"rounds to {rounding} after the normalization and multiplies by the weight in {out[1]}"
        forms.append(replace(first, operands=(*first.operands, weight_operand), result=op.results[0], result_dtype=out[1], anchor=op,
                             compute=out[1], steps=steps, eps_type=compute))
    left = f"the model multiplies by its weight after rounding to {rounding}: that multiply is left to IREE, the kernel gets ones"
    cols = ix[0][-1]
    for form in plain:
        ones = Operand(Splat(1.0), (cols,), form.operands[0].dtype)
        forms.append(replace(form, operands=(*form.operands, ones), notes=(*form.notes, left)))
    return Candidate("rmsnorm", description, location(op), op.results[0], tuple(forms), _divisor_refusal("rmsnorm", cols, divisor))


def _feeds_affine(value: ir.Value, rank: int, *heads: str) -> bool:
    """`value`'s only use multiplies (mulf) or adds (addf) a [cols] vector to it."""
    us = users(value)
    if len(us) != 1:
        return False
    g = as_generic(us[0])
    if g is None or len(g.exprs) != 1 or g.exprs[0][0] not in heads or len(g.inputs) != 2 or len(g.iterators) != rank:
        return False
    split = _split_vector(g, rank)
    return split is not None and split[0] == value


def _normalized(value: ir.Value, rank: int):
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
    square = as_generic(producer(sq))
    if square is None or not square.parallel or not identity_outputs(square) or square.exprs not in _SQUARES:
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


# x * x (of one input or two), x.pow(2) (math.fpowi by an integer 2, math.powf by 2.0)
_SQUARES = ((("mulf", ("in", 0), ("in", 1)),), (("mulf", ("in", 0), ("in", 0)),), (("fpowi", ("in", 0), ("const", 2)),), (("powf", ("in", 0), ("const", 2.0)),))


def _row_mean(value: ir.Value):
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


def _centered(value: ir.Value, x: ir.Value, mean: ir.Value) -> bool:
    sub = single_op_generic(value, "subf")
    if sub is None or sub.exprs[0] != ("subf", ("in", 0), ("in", 1)) or not same(sub.inputs[0], x) or not same(sub.inputs[1], mean):
        return False
    rank = len(sub.iterators)
    return elementwise_input(sub, 0, rank) and (elementwise_input(sub, 1, rank) or row_broadcast(sub, 1, rank))


FAMILY = Family(kinds=(LAYERNORM, RMSNORM), matchers=(Matcher(frozenset({"linalg.generic"}), match),))
