"""Matmuls: linalg.matmul and linalg.batch_matmul, with what follows them (a bias add, GELU's tanh
or erf form, a residual add, the model's rounding of the result) and what precedes their rhs (a
transpose of a stored [N, K] matrix, a [K, N] matrix broadcast over the batch)."""

from __future__ import annotations

from dataclasses import replace

from iree.compiler import ir

from ..ir_match import (
    FLOAT_WIDTH,
    Expr,
    Generic,
    Shape,
    as_generic,
    default_matmul_maps,
    elementwise_input,
    elementwise_truncf_user,
    extf_source,
    identity_outputs,
    inline_over,
    is_copy,
    is_zero_fill,
    last_dim_broadcast,
    location,
    matmul_maps,
    permutation,
    producer,
    round_to,
    shape_text,
    single_op_generic,
    tensor_info,
    users,
)
from .base import Candidate, Family, Form, Matcher, Operand, OpKind, operand


def _matmul_shapes(ins: list[tuple[str, ...]]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    (m, k), (k2, n) = ins[0], ins[1]
    return (m, n), [(k, k2)] + ([(ins[2][0], n)] if len(ins) > 2 else [])


def _matmul_residual_shapes(ins: list[tuple[str, ...]]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    (m, k), (k2, n), (bias_n,), (rm, rn) = ins
    return (m, n), [(k, k2), (bias_n, n), (rm, m), (rn, n)]


def _matmul_nt_shapes(ins: list[tuple[str, ...]]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    (m, k), (n, k2) = ins[0], ins[1]
    same = [(k, k2)]
    if len(ins) > 2:  # a bias [N]
        same.append((ins[2][0], n))
    if len(ins) > 3:  # a residual [M, N]
        same += [(ins[3][0], m), (ins[3][1], n)]
    return (m, n), same


def _batch_matmul_shapes(ins: list[tuple[str, ...]]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    (b, m, k), (b2, k2, n) = ins
    return (b, m, n), [(b, b2), (k, k2)]


_MATMUL_RULES = {"pads": True, "accumulates": True}
# lhs [M, K], rhs [K, N] → [M, N]
_ERF_LEFT = "its bias add and erf GELU are left to IREE (no kernel declares matmul+bias+gelu_erf for it)"
MATMUL = OpKind("matmul", (2, 2), 2, _matmul_shapes, narrows=True, **_MATMUL_RULES,
                left_when_undeclared=(("matmul+bias", "its bias add is left to IREE (no kernel declares matmul+bias for it)"), ("matmul+bias+gelu_erf", _ERF_LEFT)))
# lhs [M, K], rhs [K, N], bias [N] → lhs @ rhs + bias
MATMUL_BIAS = OpKind("matmul+bias", (2, 2, 1), 2, _matmul_shapes, narrows=True, fused=True, **_MATMUL_RULES,
                     left_when_undeclared=(("matmul+bias+gelu_erf", "its erf GELU is left to IREE (no kernel declares matmul+bias+gelu_erf for it)"),
                                           ("matmul+bias+residual", "its residual add is left to IREE (no kernel declares matmul+bias+residual for it)")))
# lhs [M, K], rhs [K, N], bias [N], residual [M, N] → (lhs @ rhs + bias) + residual: a bf16 Linear
# followed by a transformer's residual connection. Found around every such Linear, so not named
# when no kernel declares it (plain matmul+bias is then taken, with a note).
MATMUL_BIAS_RESIDUAL = OpKind("matmul+bias+residual", (2, 2, 1, 2), 2, _matmul_residual_shapes, narrows=True, fused=True,
                              named_when_undeclared=False, **_MATMUL_RULES)
# lhs [M, K], rhs [K, N], bias [N] → gelu_tanh(lhs @ rhs + bias)
MATMUL_BIAS_GELU = OpKind("matmul+bias+gelu", (2, 2, 1), 2, _matmul_shapes, narrows=True, fused=True, **_MATMUL_RULES)
# lhs [M, K], rhs [K, N], bias [N] → gelu_erf(lhs @ rhs + bias), GELU's exact form 0.5 x (1 + erf(x / sqrt(2)))
MATMUL_BIAS_GELU_ERF = OpKind("matmul+bias+gelu_erf", (2, 2, 1), 2, _matmul_shapes, narrows=True, fused=True, **_MATMUL_RULES)
# lhs [M, K], rhs [N, K] (a Linear's weight as stored) → lhs @ rhs^T [M, N]
MATMUL_NT = OpKind("matmul_nt", (2, 2), 2, _matmul_nt_shapes, narrows=True, fused=True, explains_kept_result=True, **_MATMUL_RULES,
                   left_when_undeclared=(("matmul+bias+gelu_erf", _ERF_LEFT),
                                         ("matmul_nt+extf", "its widening back to f32 is left to IREE (no kernel declares matmul_nt+extf for it)")))
# lhs [M, K], rhs [N, K] → the f32 sum rounded to the operands' type and widened back (an LM head's
# bf16 logits converted to f32: `.float()`), as one
MATMUL_NT_EXTF = OpKind("matmul_nt+extf", (2, 2), 2, _matmul_nt_shapes, fused=True, **_MATMUL_RULES)
# The bias forms above with the rhs a transposed [N, K] matrix read as stored (torch's
# linear(x, w, b), a Linear's weight): lhs [M, K], rhs [N, K], bias [N] (, residual [M, N]) →
# what the plain-layout kind computes with rhs^T. Each is tried before its plain-layout twin; found
# at every such Linear, so not named when no kernel declares it (the twin is then taken).
_NT_RULES = {"narrows": True, "fused": True, "named_when_undeclared": False, **_MATMUL_RULES}
MATMUL_NT_BIAS = OpKind("matmul_nt+bias", (2, 2, 1), 2, _matmul_nt_shapes, **_NT_RULES,
                        left_when_undeclared=(("matmul_nt+bias+gelu_erf", "its erf GELU is left to IREE (no kernel declares matmul_nt+bias+gelu_erf for it)"),
                                              ("matmul_nt+bias+residual", "its residual add is left to IREE (no kernel declares matmul_nt+bias+residual for it)")))
MATMUL_NT_BIAS_RESIDUAL = OpKind("matmul_nt+bias+residual", (2, 2, 1, 2), 2, _matmul_nt_shapes, **_NT_RULES)
MATMUL_NT_BIAS_GELU = OpKind("matmul_nt+bias+gelu", (2, 2, 1), 2, _matmul_nt_shapes, **_NT_RULES)
MATMUL_NT_BIAS_GELU_ERF = OpKind("matmul_nt+bias+gelu_erf", (2, 2, 1), 2, _matmul_nt_shapes, **_NT_RULES)
_AS_STORED = {MATMUL_BIAS: MATMUL_NT_BIAS, MATMUL_BIAS_RESIDUAL: MATMUL_NT_BIAS_RESIDUAL, MATMUL_BIAS_GELU: MATMUL_NT_BIAS_GELU,
              MATMUL_BIAS_GELU_ERF: MATMUL_NT_BIAS_GELU_ERF}
# lhs [B, M, K], rhs [B, K, N] → [B, M, N]
BATCH_MATMUL = OpKind("batch_matmul", (3, 3), 3, _batch_matmul_shapes, **_MATMUL_RULES)

_ROOTS = frozenset({"linalg.matmul", "linalg.batch_matmul", "linalg.matmul_transpose_a", "linalg.matmul_transpose_b",
                    "linalg.batch_matmul_transpose_a", "linalg.batch_matmul_transpose_b"})
_BROADCAST_NOTE = "the batch's rhs is one [K, N] matrix broadcast: one matmul over B*M rows"
_AS_STORED_NOTE = "its rhs is a transposed [N, K] matrix, read as it is stored (the transpose is not computed)"


def match(op: ir.Operation) -> Candidate | None:
    a, b = op.operands[0], op.operands[1]
    ia, ib, ic = tensor_info(a), tensor_info(b), tensor_info(op.results[0])
    if not (ia and ib and ic):
        return None
    batch = "batch" in op.name
    kind = "batch_matmul" if batch else "matmul"
    desc = f"{shape_text(ia[0])} @ {shape_text(ib[0])} {ia[1]} x {ib[1]} -> {shape_text(ic[0])} {ic[1]}"
    refusal = _refusal(op)
    if refusal is not None:
        return Candidate(kind, desc, location(op), op.results[0], refusal=refusal)
    compute = ic[1]
    forms: list[Form] = []
    rank = 3 if batch else 2
    rhs_2d = _batch_broadcast(b) if batch else None  # the same [K, N] matrix for every batch: one matmul over B*M rows
    bias_add = _bias_add(op.results[0], rank)
    if rhs_2d is not None:
        bsz, m, k = ia[0]
        rows = None if bsz is None or m is None else bsz * m
        lhs = Operand(a, (rows, k), ia[1])
        rhs = operand(rhs_2d, tensor_info(rhs_2d))
        shape, dims = (rows, ic[0][2]), ((0, 0), (0, 1), (1, 1))
        forms += _as_stored(_bias_gelu_forms(op, lhs, rhs, shape, rank, dims, (_BROADCAST_NOTE,)), rhs_2d)
        forms += _as_stored(_bias_forms(op, bias_add, lhs, rhs, shape, rank, dims, compute), rhs_2d)
        forms += _nt_forms(op, lhs, rhs_2d, shape, rank, ((0, 0), (0, 1), (1, 0)), (_BROADCAST_NOTE,))
        forms.append(Form(MATMUL, (lhs, rhs), op.results[0], shape, ic[1], compute, op, notes=(_BROADCAST_NOTE,), result_dims=dims))
    if batch:
        forms.append(Form(BATCH_MATMUL, (operand(a, ia), operand(b, ib)), op.results[0], ic[0], ic[1], compute, op, result_dims=((0, 0), (0, 1), (1, 2))))
    else:
        lhs, rhs = operand(a, ia), operand(b, ib)
        dims = ((0, 0), (1, 1))
        forms += _as_stored(_bias_gelu_forms(op, lhs, rhs, ic[0], rank, dims), b)
        forms += _as_stored(_bias_forms(op, bias_add, lhs, rhs, ic[0], rank, dims, compute), b)
        forms += _nt_forms(op, lhs, b, ic[0], rank, ((0, 0), (1, 0)))
        forms.append(Form(MATMUL, (lhs, rhs), op.results[0], ic[0], ic[1], compute, op, result_dims=dims))
    return Candidate(kind, desc, location(op), op.results[0], tuple(forms))


def _refusal(op: ir.Operation) -> tuple[str, str] | None:
    """Why no kernel can take the matmul `op`: an operand read transposed, or an init that is not a zero fill."""
    maps, defaults = matmul_maps(op), default_matmul_maps(op)
    if op.name.endswith(("transpose_a", "transpose_b")) or maps != defaults:
        odd = [w for w, m, default in zip(("lhs", "rhs", "result"), maps, defaults) if m != default]
        if op.name.endswith("transpose_a"):
            odd = ["lhs"]
        elif op.name.endswith("transpose_b"):
            odd = ["rhs"]
        how = "; ".join(f"{w} read as {m.split(' -> ')[1]}" for w, m, default in zip(("lhs", "rhs", "result"), maps, defaults) if m != default)
        return ("layout", f"{' and '.join(odd)} transposed ({op.name}{': ' + how if how else ''}); kernels take row-major lhs [M, K] and rhs [K, N]")
    if not is_zero_fill(op.operands[2]):
        return ("init", "accumulates into an existing tensor (its init is not a zero fill); kernels write a fresh result")
    return None


def _bias_forms(op: ir.Operation, bias_add, lhs: Operand, rhs: Operand, shape: Shape, rank: int, result_dims, compute: str) -> list[Form]:
    """The matmul `op` with the bias add that is its result's only use (in its own type), or else
    the one after the model's rounding of the result (_narrowed_bias_forms); each preceded by its
    matmul+bias+residual form where the bias add's result goes on to a residual add (_residual_forms)."""
    if bias_add is None:
        return _residual_forms(_narrowed_bias_forms(op, lhs, rhs, shape, rank, result_dims), rank)
    g, bias = bias_add
    return _residual_forms([Form(MATMUL_BIAS, (lhs, rhs, operand(bias, tensor_info(bias))), g.op.results[0], shape, tensor_info(g.op.results[0])[1],
                                 compute, g.op, result_dims=result_dims, widen=(2,))], rank)


def _residual_forms(bias_forms: list[Form], rank: int) -> list[Form]:
    """`bias_forms` (none or one matmul+bias form), preceded by a matmul+bias+residual form when the
    bias add's result has as its only use, directly or through one reshape of its leading dims (the
    importer's [B*S, N] <-> [B, S, N]), an add with another tensor of the same shape and type,
    elementwise (a transformer's residual connection). The add's result is the form's; the
    model's dims come from the residual, which has its shape."""
    if not bias_forms:
        return []
    (form,) = bias_forms
    value = _through_leading_reshape(form.result)
    found = _residual_add(value, form.result_dtype) if value is not None else None
    if found is None:
        return bias_forms
    add, residual = found
    info = tensor_info(residual)
    steps = f"{form.steps}, then adds the residual in {form.compute}" if form.steps else ""
    fused = Form(MATMUL_BIAS_RESIDUAL, (*form.operands, Operand(residual, form.result_shape, info[1])), add.op.results[0], form.result_shape,
                 form.result_dtype, form.compute, add.op, notes=form.notes, result_dims=tuple((3, d) for d in range(len(info[0]))),
                 widen=form.widen, steps=steps)
    return [fused, *bias_forms]


def _through_leading_reshape(value: ir.Value) -> ir.Value | None:
    """`value`, or the result of the tensor.expand_shape / collapse_shape that is its only use when
    that only splits or merges its leading dims (the last dim, N, kept whole), or None when its
    only use is another reshape."""
    us = users(value)
    if len(us) != 1 or us[0].name not in ("tensor.expand_shape", "tensor.collapse_shape"):
        return value
    groups = [[int(ir.IntegerAttr(i).value) for i in ir.ArrayAttr(g)] for g in ir.ArrayAttr(us[0].attributes["reassociation"])]
    ranks = (len(tensor_info(value)[0]), len(tensor_info(us[0].results[0])[0]))
    return us[0].results[0] if groups[-1] == [max(ranks) - 1] else None


def _residual_add(value: ir.Value, dtype: str) -> tuple[Generic, ir.Value] | None:
    """(generic, residual) when `value`'s only use adds it elementwise to another tensor of its
    shape and type `dtype` (no broadcast), written whole."""
    us = users(value)
    if len(us) != 1:
        return None
    g = as_generic(us[0])
    if g is None or not g.parallel or len(g.inputs) != 2 or len(g.exprs) != 1 or g.exprs[0][0] != "addf" or not identity_outputs(g):
        return None
    rank = len(g.iterators)
    if sorted(g.exprs[0][1:]) != [("in", 0), ("in", 1)] or g.inputs.count(value) != 1 or not all(elementwise_input(g, i, rank) for i in (0, 1)):
        return None
    residual = g.inputs[1 - g.inputs.index(value)]
    if tensor_info(residual) != tensor_info(value) or tensor_info(g.op.results[0]) != (tensor_info(value)[0], dtype):
        return None
    return g, residual


def _transposed_matrix(value: ir.Value) -> ir.Value | None:
    """The [N, K] matrix whose transpose (linalg.transpose, permutation [1, 0]) is `value`, or None:
    torch's `linear(x, w)` imports as x @ transpose(w)."""
    op = producer(value)
    if permutation(op) != [1, 0]:
        return None
    info = tensor_info(op.operands[0])
    return op.operands[0] if info and len(info[0]) == 2 else None


def _as_stored(forms: list[Form], rhs_value: ir.Value) -> list[Form]:
    """`forms` (bias forms of a matmul whose rhs is `rhs_value`), each preceded by its twin that
    reads the rhs as stored when that is a transpose of a 2-D [N, K] matrix (torch's
    linear(x, w, b)): the same computation, the twin's kernel taking w [N, K] instead of its
    transpose, the result's N from w's dim 0."""
    w = _transposed_matrix(rhs_value)
    if w is None:
        return forms
    rhs = operand(w, tensor_info(w))
    out: list[Form] = []
    for form in forms:
        twin = _AS_STORED.get(form.op_kind)
        if twin is not None:
            dims = tuple((1, 0) if d == (1, 1) else d for d in form.result_dims)
            out.append(replace(form, op_kind=twin, operands=(form.operands[0], rhs, *form.operands[2:]), notes=(*form.notes, _AS_STORED_NOTE),
                               result_dims=dims))
        out.append(form)
    return out


def _nt_forms(op: ir.Operation, lhs: Operand, rhs_value: ir.Value, shape: Shape, rank: int, result_dims, notes: tuple[str, ...] = ()) -> list[Form]:
    """The matmul `op` as lhs [M, K] @ w[N, K]^T, when its rhs (the [K, N] matrix) is a transpose of
    a 2-D w (a Linear's weight, an LM head's embedding), read as it is stored: one form, matmul_nt.
    Its result is the truncf that narrows the matmul's result, when that is the result's only use
    (a bf16 Linear: f32 accumulation, one rounding, the model's own numerics); otherwise the
    matmul's own result (a kernel writing the narrow type is then refused for `dtype`)."""
    w = _transposed_matrix(rhs_value)
    if w is None:
        return []
    rhs = operand(w, tensor_info(w))
    acc = tensor_info(op.results[0])[1]
    notes = (*notes, _AS_STORED_NOTE)
    narrowed = elementwise_truncf_user(op.results[0], rank)
    if narrowed is not None:
        out = narrowed.op.results[0]
        out_dtype = tensor_info(out)[1]
        if FLOAT_WIDTH.get(out_dtype, 0) < FLOAT_WIDTH.get(acc, 0):
            notes = (*notes, f"with the {out_dtype} rounding of its {acc} result: one rounding, as the model's truncf")
            forms = [Form(MATMUL_NT, (lhs, rhs), out, shape, out_dtype, acc, narrowed.op, notes=notes, result_dims=result_dims)]
            widened = _widened(out, rank)
            if widened is not None and out_dtype == lhs.dtype == rhs.dtype:
                wide = widened.op.results[0]
                wide_dtype = tensor_info(wide)[1]
                extf_note = f"with the {wide_dtype} widening of its {out_dtype} result (the model's extf; the kernel writes the rounded values in {wide_dtype})"
                forms.insert(0, Form(MATMUL_NT_EXTF, (lhs, rhs), wide, shape, wide_dtype, acc, widened.op, notes=(*notes, extf_note), result_dims=result_dims))
            return forms
    return [Form(MATMUL_NT, (lhs, rhs), op.results[0], shape, acc, acc, op, notes=notes, result_dims=result_dims)]


def _widened(value: ir.Value, rank: int) -> Generic | None:
    """The generic that widens `value` back (an elementwise extf over `rank` dims, written whole),
    when that is `value`'s only use: torch's `.float()` of a bf16 result."""
    us = users(value)
    if len(us) != 1 or len(us[0].results) != 1:
        return None
    g = single_op_generic(us[0].results[0], "extf")
    if g is None or len(g.iterators) != rank or extf_source(g.op.results[0]) != value:
        return None
    return g


def _batch_broadcast(value: ir.Value) -> ir.Value | None:
    """The [K, N] matrix a [B, K, N] value repeats along its batch dim, or None."""
    g = as_generic(producer(value))
    if g is None or not is_copy(g) or g.map_of(0) != ("d1", "d2"):
        return None
    info = tensor_info(g.inputs[0])
    return g.inputs[0] if info and len(info[0]) == 2 else None


def _bias_add(value: ir.Value, rank: int) -> tuple[Generic, ir.Value] | None:
    """(generic, bias) when `value`'s only use adds a [N] vector of its own type along its last dim."""
    us = users(value)
    if len(us) != 1:
        return None
    g = as_generic(us[0])
    if g is None or not g.parallel or len(g.inputs) != 2 or len(g.exprs) != 1 or g.exprs[0][0] != "addf" or len(g.iterators) != rank or not identity_outputs(g):
        return None
    if sorted(g.exprs[0][1:]) != [("in", 0), ("in", 1)]:
        return None
    if g.inputs.count(value) != 1:
        return None
    mine = g.inputs.index(value)
    other = 1 - mine
    info = tensor_info(g.inputs[other])
    if elementwise_input(g, mine, rank) and last_dim_broadcast(g, other, rank) and info and info[1] == tensor_info(value)[1]:
        return g, g.inputs[other]
    return None


def _bias_gelu_forms(op: ir.Operation, lhs: Operand, rhs: Operand, shape: Shape, rank: int, result_dims, notes: tuple[str, ...] = ()) -> list[Form]:
    """The matmul `op` with what follows it, when that is [a truncf to a narrower type], + bias [N]
    and a GELU, each step the only use of the one before: one form, whose result is the GELU's.
    GELU's tanh approximation (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as transformers'
    gelu_new / NewGELU and torch's gelu(approximate="tanh") decomposition write it) makes a
    matmul+bias+gelu form; its exact form (0.5 x (1 + erf(x / sqrt(2))), torch's default GELU,
    BERT's) a matmul+bias+gelu_erf form. Its compute type is the narrowest the model rounds to on the way."""
    value = op.results[0]
    acc = tensor_info(value)[1]
    types = [acc]
    narrowed = elementwise_truncf_user(value, rank)
    if narrowed is not None:
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
    found = [(kind, root) for kind, is_gelu in _GELUS if (root := _gelu_root(x, is_gelu)) is not None]
    if not found:
        return []
    kind, root = found[0]
    gelu_dtype = tensor_info(root.op.results[0])[1]
    types.append(gelu_dtype)
    model_shape = tensor_info(root.op.results[0])[0]
    if len(model_shape) != len(shape) and None in model_shape:
        return []
    compute = min(types, key=lambda t: FLOAT_WIDTH.get(t, 0))
    steps = ""
    if compute != acc:
        after = "after the matmul, " if narrowed is not None else ""
        steps = f"rounds to {compute} {after}after the bias add and after each GELU step"
    dims = result_dims if len(model_shape) == len(shape) else tuple(result_dims[:1]) * (len(model_shape) - 1) + tuple(result_dims[-1:])
    return [Form(kind, (lhs, rhs, operand(bias, tensor_info(bias))), root.op.results[0], shape, gelu_dtype, compute, root.op,
                 notes=notes, result_dims=dims, widen=(2,), steps=steps)]


def _narrowed_bias_forms(op: ir.Operation, lhs: Operand, rhs: Operand, shape: Shape, rank: int, result_dims) -> list[Form]:
    """The matmul `op` with what follows it, when that is a truncf to a narrower type and + bias [N]
    in that type (a bf16 Linear: the matmul accumulates in f32, the model rounds to bf16, then adds
    its bf16 bias and rounds again), each step the only use of the one before: one form,
    matmul+bias, whose result is the bias add's, computed in the narrower type."""
    acc = tensor_info(op.results[0])[1]
    narrowed = elementwise_truncf_user(op.results[0], rank)
    if narrowed is None:
        return []
    value = narrowed.op.results[0]
    compute = tensor_info(value)[1]
    if FLOAT_WIDTH.get(compute, 0) >= FLOAT_WIDTH.get(acc, 0):
        return []
    found = _bias_add(value, rank)
    if found is None:
        return []
    add, bias = found
    return [Form(MATMUL_BIAS, (lhs, rhs, operand(bias, tensor_info(bias))), add.op.results[0], shape, compute, compute, add.op,
                 result_dims=result_dims, widen=(2,), steps=f"rounds to {compute} after the matmul and after the bias add")]


# ---- GELU's tanh and erf forms, recognized as one expression over the bias add's result ----

def _gelu_root(x: ir.Value, is_gelu) -> Generic | None:
    """The generic whose result is a GELU of `x` (is_gelu(expression, dtype)), among the generics
    at most 8 uses away, or None."""
    frontier, seen = [x], set()
    for _ in range(8):
        nxt = []
        for v in frontier:
            for u in users(v):
                if u.name != "linalg.generic" or u in seen or len(u.results) != 1:
                    continue
                seen.add(u)
                g = as_generic(u)
                if g is not None:
                    if is_gelu(inline_over(u.results[0], x, 12), tensor_info(u.results[0])[1]):
                        return g
                    nxt.append(u.results[0])
        frontier = nxt
    return None


def _factors(e: Expr) -> list:
    """The factors of a product (nested mulf), in any order."""
    return [f for a in e[1:] for f in _factors(a)] if e[0] == "mulf" else [e]


def _terms(e: Expr) -> list:
    return [t for a in e[1:] for t in _terms(a)] if e[0] == "addf" else [e]


def _split_const(items: list, dtype: str, want: float):
    """The items other than one constant close to `want`, or None."""
    for i, item in enumerate(items):
        if item[0] == "const" and isinstance(item[1], float) and _close(item[1], want, dtype):
            return items[:i] + items[i + 1:]
    return None


def _close(got: float, want: float, dtype: str) -> bool:
    return got == round_to(want, dtype) or abs(got - want) <= 1e-6 * abs(want)


def _is_gelu(e: Expr, dtype: str) -> bool:
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


def _is_gelu_erf(e: Expr, dtype: str) -> bool:
    """e = x * 0.5 * (1 + erf(x / sqrt(2))), products and sums in any order and grouping, the
    division by sqrt(2) as the model writes it (a division by sqrt(2.0) or by its value, or a
    product with 1/sqrt(2)): torch's gelu (approximate="none"), BERT's default activation."""
    rest = _split_const(_factors(e), dtype, 0.5)
    if rest is None or len(rest) != 2 or ("x",) not in rest:
        return False
    rest = _split_const(_terms(rest[1 - rest.index(("x",))]), dtype, 1.0)
    if rest is None or len(rest) != 1 or rest[0][0] != "erf":
        return False
    arg = rest[0][1]
    if arg[0] == "divf" and arg[1] == ("x",):
        d = arg[2]
        return d == ("sqrt", ("const", 2.0)) or (d[0] == "const" and isinstance(d[1], float) and _close(d[1], 2.0**0.5, dtype))
    return _split_const(_factors(arg), dtype, 0.5**0.5) == [("x",)]


_GELUS = ((MATMUL_BIAS_GELU, _is_gelu), (MATMUL_BIAS_GELU_ERF, _is_gelu_erf))

FAMILY = Family(kinds=(MATMUL, MATMUL_BIAS, MATMUL_BIAS_RESIDUAL, MATMUL_BIAS_GELU, MATMUL_BIAS_GELU_ERF, MATMUL_NT_BIAS, MATMUL_NT_BIAS_RESIDUAL,
                       MATMUL_NT_BIAS_GELU, MATMUL_NT_BIAS_GELU_ERF, MATMUL_NT_EXTF, MATMUL_NT, BATCH_MATMUL),
                matchers=(Matcher(_ROOTS, match),))
