"""Eager attention: the chain of ops transformers exports it as, found around its context batch
matmul (a fusion of batch_matmul candidates), and the same on the layouts of a qkv projection."""

from __future__ import annotations

from dataclasses import replace

from iree.compiler import ir

from ..ir_match import (
    FLOAT_WIDTH,
    as_generic,
    default_matmul_maps,
    elementwise_input,
    elementwise_truncf_user,
    extf_source,
    identity_outputs,
    is_zero_fill,
    matmul_maps,
    one_use,
    permutation,
    producer,
    reassociation,
    reshaped_from,
    round_to,
    shape_text,
    single_op_generic,
    tensor_info,
    truncf_source,
    users,
)
from .base import Family, Form, Fusion, Operand, OpKind, Reason, operand
from .softmax import softmax_parts


def _attention_shapes(ins: list[tuple[str, ...]]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    (z, s, d), (z2, d2, s2), (z3, s3, d3), (_, s4, s5) = ins
    return (z, s, d), [(z, z2), (z, z3), (d, d2), (d, d3), (s, s2), (s, s3), (s, s4), (s, s5)]


def _attention_qkv_shapes(ins: list[tuple[str, ...]]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    (b, s, three, h, d), (b2, s2, s3) = ins
    return (b, s, h, d), [(three, "3"), (b, b2), (s, s2), (s, s3)]


_RULES = {"accumulate": "f32", "fused": True, "named_when_undeclared": False}
# q [Z, S, D], kt [Z, D, S], v [Z, S, D], mask [B, S, S] → softmax(q @ kt / sqrt(D) + mask[z // (Z / B)]) @ v
ATTENTION = OpKind("attention", (3, 3, 3, 3), 3, _attention_shapes, **_RULES)
# qkv [B, S, 3, H, D] (the qkv projection's result as it is stored), mask [B, S, S] → out [B, S, H, D]:
# the same per batch b and head h, with q = qkv[b, :, 0, h], k = qkv[b, :, 1, h], v = qkv[b, :, 2, h]
ATTENTION_QKV = OpKind("attention_qkv", (5, 3), 4, _attention_qkv_shapes, **_RULES)

QKV_NOTE = "q, k and v are read from the projection's [B, S, 3E] result and the result is written in [B, S, E] layout (the transposes are not computed)"


def _plain_batch_matmul(op: ir.Operation | None) -> bool:
    if op is None or op.name != "linalg.batch_matmul" or not is_zero_fill(op.operands[2]):
        return False
    return matmul_maps(op) == default_matmul_maps(op)


def attention_forms(ctx: ir.Operation) -> list[Form]:
    """The context batch matmul `ctx` with the chain that makes its lhs, when that is eager
    attention as transformers exports it (GPT-2, at IREE's input level):

        s  = batch_matmul(q [Z, S, D], kt [Z, D, S]) (zero init)      [truncf]
        s4 = expand_shape s to [B, H, S, S]
        x  = s4 * c (or s4 / c)                                       the scale, a constant
        y  = x + mask [B, 1, S, S] (read as (d0, 0, d2, d3))
        p  = softmax(y) over the last dim (torch's decomposition)     [extf before, truncf after]
        o  = batch_matmul(collapse_shape p to [Z, S, S], v [Z, S, D])  [truncf]

    each value the only use of the one before (the probabilities must not be needed elsewhere):
    two forms, attention_qkv (the same on the projection's layouts) and attention, whose result is
    o's (or its truncf's), computed in the narrowest type the model rounds to on the way.
    attention's operands: q, kt, v and the mask as [B, S, S]."""
    ictx = tensor_info(ctx.results[0])
    if not _plain_batch_matmul(ctx) or ictx is None or len(ictx[0]) != 3:
        return []
    p3, v = ctx.operands[0], ctx.operands[1]
    p4 = reshaped_from(p3, "tensor.collapse_shape", 3)
    if p4 is None or not one_use(p3, p4):
        return []
    p_wide = truncf_source(p4)
    div = producer(p_wide)
    parts = softmax_parts(div) if div is not None else None
    if parts is None or parts[2] != 4 or not one_use(p_wide):
        return []
    x = parts[0]
    y = extf_source(x)
    if y is not None and not one_use(y):
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
    if mul is None or not mul.parallel or len(mul.inputs) != 1 or len(mul.exprs) != 1 or not elementwise_input(mul, 0, 4) or not identity_outputs(mul):
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
    s3 = reshaped_from(s4, "tensor.expand_shape", 4)
    if s3 is None or not one_use(scaled, s4, s3):
        return []
    s_wide = truncf_source(s3)
    scores = producer(s_wide)
    if not _plain_batch_matmul(scores) or not one_use(s_wide):
        return []
    q, kt = scores.operands[0], scores.operands[1]
    iq, ikt, iv, imask, i4 = tensor_info(q), tensor_info(kt), tensor_info(v), tensor_info(mask), tensor_info(s4)
    if not (iq and ikt and iv and imask and i4) or len(imask[0]) != 4 or imask[0][1] != 1 or imask[0][0] != i4[0][0]:
        return []
    # The types the model holds the chain in: scores, scaled, masked, softmax, probabilities, context.
    result_value, anchor = ctx.results[0], ctx
    narrowed_out = elementwise_truncf_user(result_value, 3)
    if narrowed_out is not None:
        result_value, anchor = narrowed_out.op.results[0], narrowed_out.op
    steps = [tensor_info(v_)[1] for v_ in (s_wide, s3, scaled, y, x, p_wide, p4, ctx.results[0], result_value)]
    compute = min(steps, key=lambda t: FLOAT_WIDTH.get(t, 0))
    narrow_steps = [what for what, v_ in (("the scores", s3), ("the scale", scaled), ("the mask add", y), ("the softmax", p4), ("the context", result_value))
                    if tensor_info(v_)[1] == compute]
    rounds = f"rounds to {compute} after {', '.join(narrow_steps[:-1])} and {narrow_steps[-1]}" if len(narrow_steps) > 1 else ""
    bsz, _, s_, s2_ = imask[0]
    operands = (operand(q, iq), operand(kt, ikt), operand(v, iv), Operand(mask, (bsz, s_, s2_), imask[1]))
    covers = (scores.results[0], div.results[0])
    att = Form(ATTENTION, operands, result_value, ictx[0], tensor_info(result_value)[1], compute, anchor, result_dims=((0, 0), (0, 1), (0, 2)),
               steps=rounds if compute != tensor_info(ctx.results[0])[1] else "", scale=scale, covers=covers)
    return [_attention_qkv_form(att), att]


# ---- attention on the projection's layouts: q, k, v sliced from one [B, S, 3E] tensor, the result in [B, S, E] ----

def _heads_source(value: ir.Value, wanted: list[int]):
    """(the [B, S, E] value, the transposed [B, H, ., .] value, its [B, S, H, D] heads) when `value`
    is collapse_shape [[0, 1], [2], [3]] of linalg.transpose (`wanted`) of expand_shape
    [[0], [1], [2, 3]] of a [B, S, E] value (torch's view as heads, then transpose), else None."""
    t = reshaped_from(value, "tensor.collapse_shape", 3)
    op = producer(t) if t is not None else None
    if permutation(op) != wanted or op.results[0] != t:
        return None
    heads = op.operands[0]
    e = producer(heads)
    if e is None or e.name != "tensor.expand_shape" or reassociation(e) != [[0], [1], [2, 3]]:
        return None
    return e.operands[0], t, heads


def _slice_of(value: ir.Value):
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


def _only_use(value: ir.Value, name: str):
    """(the op, None) when `value`'s only use is an op `name`; (None, True) when one of several
    uses is; (None, False) when none is."""
    us = users(value)
    mine = [u for u in us if u.name == name]
    if len(us) == 1 and mine:
        return mine[0], None
    return None, bool(mine)


def _heads_back(value: ir.Value) -> tuple[ir.Value | None, Reason | None]:
    """(the [B*S, E] or [B, S, E] value, None) when `value` [Z, S, D]'s only use is expand_shape to
    [B, H, S, D], its only use linalg.transpose [0, 2, 1, 3] to [B, S, H, D], its only use
    collapse_shape to [B*S, H*D] or [B, S, H*D]; else (None, (category, reason))."""
    not_back = ("layout", "the result is not transposed back to [B, S, E]")
    other = ("layout", "the result has other uses than its transpose back to [B, S, E]")
    e, more = _only_use(value, "tensor.expand_shape")
    if e is None:
        return None, other if more else not_back
    if reassociation(e) != [[0, 1], [2], [3]]:
        return None, not_back
    t, more = _only_use(e.results[0], "linalg.transpose")
    if t is None:
        return None, other if more else not_back
    if permutation(t) != [0, 2, 1, 3] or t.operands[0] != e.results[0]:
        return None, not_back
    c, more = _only_use(t.results[0], "tensor.collapse_shape")
    if c is None:
        return None, other if more else not_back
    if reassociation(c) not in ([[0, 1], [2, 3]], [[0], [1], [2, 3]]):
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
    form = replace(att, op_kind=ATTENTION_QKV, result_dims=())

    def refuse(category: str, reason: str) -> Form:
        return replace(form, refusal=(category, reason))

    q, kt, v, mask = att.operands
    found = [_heads_source(q.value, [0, 2, 1, 3]), _heads_source(kt.value, [0, 2, 3, 1]), _heads_source(v.value, [0, 2, 1, 3])]
    if None in found:
        return refuse("layout", "q, k and v are not heads of [B, S, E] tensors transposed to [B*H, S, D] (k: [B*H, D, S])")
    if not one_use(q.value, kt.value, v.value, *(f[1] for f in found), *(f[2] for f in found)):
        return refuse("layout", "the transposed q, k or v has other uses (the transposes would still be computed)")
    infos = [tensor_info(f[2]) for f in found]
    if any(None in i[0] for i in infos) or len({i[0] for i in infos}) != 1:
        return refuse("shape", "q, k and v need the same static [B, S, H, D] heads")
    slices = [_slice_of(f[0]) for f in found]
    if None in slices or len({s[0] for s in slices}) != 1:
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
    return replace(form, operands=(Operand(x, (bsz, s_, 3, h, d), ix[1]), mask), result=out, result_shape=(bsz, s_, h, d),
                   result_dtype=tensor_info(out)[1], notes=(QKV_NOTE,))


FAMILY = Family(kinds=(ATTENTION, ATTENTION_QKV), fusions=(Fusion("batch_matmul", attention_forms),))
