"""Scaled dot-product attention: IREE's `iree_linalg_ext.attention`, the one op torch's
`scaled_dot_product_attention` (transformers' default attention) arrives as, with what the
importer builds around it: q, k, v and the mask as [B, H, S, .] tensors with the heads collapsed
into the batch, a causal mask computed from iotas, a [B, 1, Sq, Sk] mask broadcast over the
heads, grouped-query attention's k and v repeated to the query heads.

At IREE's input level torch's SDPA is (q, k, v [B*H, S, D], the mask [B*H, Sq, Sk]):

    o = iree_linalg_ext.attention {indexing_maps = [q: (b, m, n, k1, k2) -> (b, m, k1),
          k: -> (b, k2, k1), v: -> (b, k2, n), scale: -> (), [mask: -> (b, m, k2)], o: -> (b, m, n)]}
          ins(q, k, v, scale [, mask]) { ^bb0(%score: f32): yield %score }

which computes softmax(q @ kᵀ * scale + mask) @ v with f32 scores and softmax, rounded once to
the result's type. The kernels' tensors are q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D] (query head
h reads key/value head h / (Hq / Hkv)), the mask [MB, MH, MQ, Sk] (each of MB, MH, MQ the full
size or 1), out [B, Hq, Sq, D]; the scale is their one float argument.

Self-attention in a transformer (GPT-2) slices q, k and v out of one qkv projection [B, S, 3E]
and transposes each to [B, H, S, D], and transposes the result back to [B, S, E] for the output
projection: the sdpa_qkv kinds are the same op on those layouts (qkv [B, S, 3, H, D] -> out
[B, S, H, D]), tried before the plain ones, so that neither the slices nor the transposes are
computed. BERT's q, k and v come from three projections, each [B, S, E] transposed to
[B, H, S, D]: the sdpa_bshd kinds read each as stored ([B, S, H, D]) and write [B, S, H, D],
tried after sdpa_qkv and before the plain ones.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from iree.compiler import ir

from ..ir_match import (
    NotEvaluated,
    Shape,
    as_generic,
    evaluate,
    float_constant,
    is_copy,
    location,
    one_use,
    permutation,
    producer,
    reassociation,
    shape_text,
    tensor_info,
    users,
)
from .attention import _heads_back, _heads_source, _slice_of  # the eager chain's qkv layouts: the importer's same reshapes and transposes
from .base import Candidate, Family, Form, Matcher, Operand, OpKind, Reason

ROOT = "iree_linalg_ext.attention"


def _sdpa_shapes(ins: list[tuple[str, ...]]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    (b, hq, sq, d), (b2, hkv, sk, d2), (b3, hkv2, sk2, d3) = ins[:3]
    same = [(b, b2), (b, b3), (hkv, hkv2), (sk, sk2), (d, d2), (d, d3)]
    if len(ins) == 4:
        same.append((sk, ins[3][3]))
    return (b, hq, sq, d), same


_RULES = {"input_ranks": (4, 4, 4), "output_rank": 4, "declared_shapes": _sdpa_shapes, "accumulate": "f32", "takes_scale": True}
# q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D], the scale -> softmax(q @ kᵀ * scale) @ v, out [B, Hq, Sq, D]
SDPA = OpKind("sdpa", **_RULES)
# the same where query i sees keys j <= i only (top-left, as SDPA's is_causal)
SDPA_CAUSAL = OpKind("sdpa_causal", **_RULES)
# the same with an additive mask [MB, MH, MQ, Sk] (each of MB, MH, MQ the full B, Hq, Sq or 1)
SDPA_MASK = OpKind("sdpa_mask", **{**_RULES, "input_ranks": (4, 4, 4, 4)})



def _sdpa_qkv_shapes(ins: list[tuple[str, ...]]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    (b, s, three, h, d) = ins[0]
    same = [(three, "3")]
    if len(ins) == 2:
        same.append((s, ins[1][3]))
    return (b, s, h, d), same


_QKV_RULES = {**_RULES, "input_ranks": (5,), "declared_shapes": _sdpa_qkv_shapes, "fused": True, "named_when_undeclared": False}
# qkv [B, S, 3, H, D] (a qkv projection's [B, S, 3E] result as stored), the scale -> out [B, S, H, D]:
# sdpa per batch b and head h with q = qkv[b, :, 0, h], k = qkv[b, :, 1, h], v = qkv[b, :, 2, h]
SDPA_QKV = OpKind("sdpa_qkv", **_QKV_RULES)
SDPA_QKV_CAUSAL = OpKind("sdpa_qkv_causal", **_QKV_RULES)
# the same with an additive mask [MB, MH, MQ, S]
SDPA_QKV_MASK = OpKind("sdpa_qkv_mask", **{**_QKV_RULES, "input_ranks": (5, 4)})
_ON_QKV = {SDPA: SDPA_QKV, SDPA_CAUSAL: SDPA_QKV_CAUSAL, SDPA_MASK: SDPA_QKV_MASK}

QKV_NOTE = "q, k and v are read from the qkv projection's [B, S, 3E] result and the result is written in [B, S, E] layout (the slices and transposes are not computed)"


def _sdpa_bshd_shapes(ins: list[tuple[str, ...]]) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    (b, sq, hq, d), (b2, sk, hkv, d2), (b3, sk2, hkv2, d3) = ins[:3]
    same = [(b, b2), (b, b3), (sk, sk2), (hkv, hkv2), (d, d2), (d, d3)]
    if len(ins) == 4:
        same.append((sk, ins[3][3]))
    return (b, sq, hq, d), same


_BSHD_RULES = {**_RULES, "declared_shapes": _sdpa_bshd_shapes, "fused": True, "named_when_undeclared": False}
# q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] (separate projections' [B, S, H*D] results as stored), the
# scale -> out [B, Sq, Hq, D]: sdpa per batch b and head h with q = q[b, :, h], k = k[b, :, h / (Hq / Hkv)], v likewise
SDPA_BSHD = OpKind("sdpa_bshd", **_BSHD_RULES)
SDPA_BSHD_CAUSAL = OpKind("sdpa_bshd_causal", **_BSHD_RULES)
# the same with an additive mask [MB, MH, MQ, Sk]
SDPA_BSHD_MASK = OpKind("sdpa_bshd_mask", **{**_BSHD_RULES, "input_ranks": (4, 4, 4, 4)})
_ON_BSHD = {SDPA: SDPA_BSHD, SDPA_CAUSAL: SDPA_BSHD_CAUSAL, SDPA_MASK: SDPA_BSHD_MASK}

BSHD_NOTE = "q, k and v are read from their projections' [B, S, E] results and the result is written in [B, S, E] layout (the transposes are not computed)"

# The maps of the op as the torch importer writes it, over (batch..., m, n, k1, k2): q (m, k1),
# k (k2, k1), v (k2, n), the scale (), the mask (m, k2), the result (m, n).
_ROLES = {"q": ("m", "k1"), "k": ("k2", "k1"), "v": ("k2", "n"), "mask": ("m", "k2"), "result": ("m", "n")}
_AS_STORED = {"q": "[B, H, Sq, D]", "k": "[B, H, Sk, D]", "v": "[B, H, Sk, D]", "mask": "[B, H, Sq, Sk]", "result": "[B, H, Sq, D]"}


@dataclass(frozen=True)
class _Heads:
    """One of the op's [B*H, S, X] operands as the kernel reads it: the value, seen as [B, H, S, X]."""

    value: ir.Value
    shape: Shape


def _maps(op: ir.Operation) -> list[tuple[str, ...]] | Reason:
    """The op's indexing maps as results named by role (batch dims as "b"), or the reason it has
    not the layout the kernels read."""
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
    n = maps[0].n_dims
    if n < 5:
        return ("layout", f"the op has {n} loop dims; it needs a batch and m, n, k1, k2")
    names = {f"d{i}": "b" for i in range(n - 4)} | {f"d{n - 4 + i}": r for i, r in enumerate(("m", "n", "k1", "k2"))}
    return [tuple(names.get(str(r), str(r)) for r in m.results) for m in maps]


def _heads(value: ir.Value) -> _Heads | None:
    """A [B*H, S, X] value as [B, H, S, X]: the value it collapses, or (static) itself as one batch."""
    op = producer(value)
    if op is not None and op.name == "tensor.collapse_shape" and reassociation(op) == [[0, 1], [2], [3]]:
        return _Heads(op.operands[0], tensor_info(op.operands[0])[0])
    shape = tensor_info(value)[0]
    if len(shape) == 4:
        return _Heads(value, shape)
    if len(shape) == 3 and None not in shape:
        return _Heads(value, (1, *shape))
    return None


def _repeated_heads(heads: _Heads) -> tuple[_Heads, int] | None:
    """(the [B, Hkv, S, D] value, Hq / Hkv) when `heads` [B, Hq, S, D] repeats each of its heads
    Hq / Hkv times in a row (torch's repeat_interleave over dim 1; transformers' repeat_kv, an
    expand to [B, Hkv, G, S, D] and a reshape): a broadcast generic (d0, d1, d3, d4) collapsed
    [[0], [1, 2], [3], [4]]. Query head h then reads head h / G, as the kernel does."""
    op = producer(heads.value)
    if op is None or op.name != "tensor.collapse_shape" or reassociation(op) != [[0], [1, 2], [3], [4]]:
        return None
    g = as_generic(producer(op.operands[0]))
    if g is None or not is_copy(g) or g.map_of(0) != ("d0", "d1", "d3", "d4"):
        return None
    repeat = tensor_info(op.operands[0])[0][2]
    source = g.inputs[0]
    return (_Heads(source, tensor_info(source)[0]), repeat) if repeat is not None else None


@dataclass(frozen=True)
class _MaskContents:
    """What a mask computed inside the model holds, where its values are known (ir_match.evaluate).
    `causal`: 0 where key j <= query i and elsewhere -inf or at most half the mask type's lowest
    value (export_mlir's masks, transformers' eager ones: added to a finite score, either makes
    its exponential 0), for every batch and head; `zero`: 0 everywhere (every query sees every
    key). `unknown`: why the values are not known, when the mask is computed from constants by an
    op not evaluated (empty for a mask that depends on the model's inputs)."""

    causal: bool = False
    zero: bool = False
    unknown: str = ""


# Each float type's lowest finite value: transformers' eager masks hide a key with it (torch.finfo(dtype).min), export_mlir's with half of it.
_LOWEST = {"f16": -65504.0, "bf16": -3.3895313892515355e38, "f32": -3.4028234663852886e38}


def _mask_contents(mask: ir.Value) -> _MaskContents:
    """transformers builds its masks inside the model from iotas (bool masks, which export_mlir
    makes additive), however they are computed (packed-sequence checks, gathers, cumulative sums):
    their values are evaluated, so that one that is exactly causal, or exactly zero, takes the
    kernel that does not read it."""
    try:
        values = evaluate(mask)
    except NotEvaluated as e:
        return _MaskContents(unknown="" if e.argument else str(e))
    sq, sk = values.shape[-2:]
    seen = np.tril(np.ones((sq, sk), dtype=bool))
    lowest = _LOWEST.get(tensor_info(mask)[1], -np.inf)
    causal = sq == sk and bool(np.all(np.where(seen, values == 0, values <= lowest / 2)))
    return _MaskContents(causal=causal, zero=bool(np.all(values == 0)))


def _broadcast_mask(heads: _Heads) -> _Heads:
    """The mask before the generic that broadcasts it over dims of size 1 (torch's [B, 1, Sq, Sk]
    padding or causal mask expanded over the heads), when it is one; else `heads`."""
    g = as_generic(producer(heads.value))
    if g is None or not is_copy(g) or len(g.map_of(0)) != 4:
        return heads
    src = tensor_info(g.inputs[0])[0]
    if all(r == f"d{k}" or (r == "0" and size == 1) for k, (r, size) in enumerate(zip(g.map_of(0), src))):
        return _Heads(g.inputs[0], src)
    return heads


@dataclass(frozen=True)
class _QkvLayout:
    """Where the sdpa_qkv forms read and write: the [B, S, 3E] tensor q, k and v are sliced from,
    seen as [B, S, 3, H, D], and the [B*S, E] or [B, S, E] value the result is transposed back to."""

    qkv: Operand
    out: ir.Value
    heads: Shape  # [B, S, H, D]


def _qkv_layout(op: ir.Operation) -> _QkvLayout | Reason | None:
    """The layouts around the op as the torch importer writes GPT-2's self-attention:

        x   = the qkv projection's result, [B, S, 3E] (E = H*D)
        q   = collapse(transpose [0, 2, 1, 3] (expand x[:, :, 0:E] to [B, S, H, D]))    [B*H, S, D]
        k   = the same of x[:, :, E:2E], v of x[:, :, 2E:3E]
        out = collapse(transpose [0, 2, 1, 3] (expand the op's result to [B, H, S, D]))  [B*S, E] or [B, S, E]

    each reshape and transpose the only use of the value before it; else the reason it is not there.
    None where q, k and v are not even heads transposed out of [B, S, E] tensors (SDPA called on
    tensors the model holds as [B, H, S, D]): there is no qkv layout to speak of."""
    found = [_heads_source(op.operands[i], [0, 2, 1, 3]) for i in range(3)]
    if None in found:
        return None
    if not one_use(*op.operands[:3], *(f[1] for f in found), *(f[2] for f in found)):
        return ("layout", "the transposed q, k or v has other uses (the transposes would still be computed)")
    infos = [tensor_info(f[2]) for f in found]
    if any(None in i[0] for i in infos) or len({i[0] for i in infos}) != 1:
        return ("shape", "q, k and v need the same static [B, S, H, D] heads")
    slices = [_slice_of(f[0]) for f in found]
    if None in slices or len({s[0] for s in slices}) != 1:
        return ("layout", "q, k and v are not slices of one [B, S, 3E] tensor")
    x = slices[0][0]
    ix = tensor_info(x)
    bsz, s_, h, d = infos[0][0]
    e = h * d
    if [s[1] for s in slices] != [0, e, 2 * e] or ix[0] != (bsz, s_, 3 * e):
        return ("layout", "q, k and v are not the slices at 0, E and 2E of the last dim of one [B, S, 3E] tensor")
    out, why = _heads_back(op.results[0])
    if out is None:
        return why
    return _QkvLayout(Operand(x, (bsz, s_, 3, h, d), ix[1]), out, (bsz, s_, h, d))


@dataclass(frozen=True)
class _BshdLayout:
    """Where the sdpa_bshd forms read and write: the [B, S, E] tensors q, k and v are transposed
    from, seen as [B, Sq, Hq, D] and [B, Sk, Hkv, D], and the [B*S, E] or [B, S, E] value the
    result is transposed back to."""

    q: Operand
    k: Operand
    v: Operand
    out: ir.Value
    heads: Shape  # [B, Sq, Hq, D]


def _transposed_from(heads: ir.Value) -> tuple[ir.Value, ir.Value] | None:
    """(the [B, S, E] value, its expand_shape to [B, S, H, D]) when the [B, H, S, D] value `heads` is
    linalg.transpose [0, 2, 1, 3] of expand_shape [[0], [1], [2, 3]] of it (torch's view as heads,
    then transpose), else None."""
    t = producer(heads)
    if permutation(t) != [0, 2, 1, 3] or t.results[0] != heads:
        return None
    e = producer(t.operands[0])
    if e is None or e.name != "tensor.expand_shape" or reassociation(e) != [[0], [1], [2, 3]]:
        return None
    return e.operands[0], t.operands[0]


def _used_by_one_op(value: ir.Value) -> bool:
    """Every use of `value` is by one op (q, k and v heads of the same tensor are one value read
    two or three times by the attention)."""
    us = users(value)
    return bool(us) and all(u == us[0] for u in us)


def _bshd_layout(op: ir.Operation, heads: tuple[_Heads, _Heads, _Heads]) -> _BshdLayout | Reason | None:
    """The layouts around the op as the torch importer writes BERT's self-attention:

        xq, xk, xv = the q, k and v projections' results, [B, S, Hq*D] and [B, S, Hkv*D] (the same
                     tensor or three)
        q   = collapse(transpose [0, 2, 1, 3] (expand xq to [B, S, Hq, D]))     [B*Hq, S, D]
        k, v: the same of xk, xv (with grouped-query attention, repeated to Hq heads after the transpose)
        out = collapse(transpose [0, 2, 1, 3] (expand the op's result to [B, H, S, D]))  [B*S, E] or [B, S, E]

    `heads`: q, k and v as the kernel reads them, [B, H, S, D] (k and v un-repeated); each reshape
    and transpose used by nothing but the next step; else the reason it is not there. None where q,
    k and v are not even heads transposed out of [B, S, E] tensors (SDPA called on tensors the
    model holds as [B, H, S, D], Llama's q and k rotated after the transpose): there is no
    [B, S, H, D] layout to speak of."""
    found = [_transposed_from(h.value) for h in heads]
    if None in found:
        return None
    if not all(_used_by_one_op(v) for v in (*op.operands[:3], *(h.value for h in heads), *(f[1] for f in found))):
        return ("layout", "the transposed q, k or v has other uses (the transposes would still be computed)")
    infos = [tensor_info(f[1])[0] for f in found]
    if any(None in i for i in infos) or any(None in tensor_info(f[0])[0] for f in found):
        return ("shape", "q, k and v need static [B, S, E] tensors and [B, S, H, D] heads")
    out, why = _heads_back(op.results[0])
    if out is None:
        return why
    operands = [Operand(x, shape, tensor_info(x)[1]) for (x, _), shape in zip(found, infos)]
    return _BshdLayout(*operands, out, infos[0])


def _with_layout_forms(forms: list[Form], qkv: _QkvLayout | Reason | None, bshd: _BshdLayout | Reason | None) -> tuple[Form, ...]:
    """Each form preceded by its sdpa_qkv form on `qkv`, then its sdpa_bshd form on `bshd`. Where a
    layout is only partly there, one form of its kind carrying the reason (before the others), so
    that the report says why the plain forms are taken."""
    refused = [replace(forms[0], op_kind=kinds[forms[0].op_kind], refusal=layout)
               for layout, kinds in ((qkv, _ON_QKV), (bshd, _ON_BSHD)) if isinstance(layout, tuple)]
    out = []
    for f in forms:
        if isinstance(qkv, _QkvLayout):
            out.append(replace(f, op_kind=_ON_QKV[f.op_kind], operands=(qkv.qkv, *f.operands[3:]), result=qkv.out, result_shape=qkv.heads,
                               result_dtype=tensor_info(qkv.out)[1], notes=(QKV_NOTE, *f.notes)))
        if isinstance(bshd, _BshdLayout):
            out.append(replace(f, op_kind=_ON_BSHD[f.op_kind], operands=(bshd.q, bshd.k, bshd.v, *f.operands[3:]), result=bshd.out,
                               result_shape=bshd.heads, result_dtype=tensor_info(bshd.out)[1], notes=(BSHD_NOTE, *f.notes)))
        out.append(f)
    return (*refused, *out)


def match_sdpa(op: ir.Operation) -> Candidate | None:
    loc = location(op)
    maps = _maps(op)
    ins = list(op.operands)
    has_mask = not isinstance(maps, tuple) and len(maps) == 6
    roles = ["q", "k", "v", "scale", *(["mask"] if has_mask else []), "result"]
    infos = {r: tensor_info(v) for r, v in zip(roles, ins) if r != "scale"}
    q_info, result = infos["q"], op.results[0]
    description = (f"q {shape_text(q_info[0])}, k {shape_text(infos['k'][0])}, v {shape_text(infos['v'][0])} {q_info[1]}"
                   + (f", mask {shape_text(infos['mask'][0])}" if has_mask else "") + f" -> {shape_text(tensor_info(result)[0])} {tensor_info(result)[1]}")

    def refused(reason: Reason) -> Candidate:
        return Candidate("sdpa", description, loc, result, refusal=reason)

    if isinstance(maps, tuple):
        return refused(maps)
    for role, got in zip([r for r in roles if r != "scale"], [m for r, m in zip(roles, maps) if r != "scale"]):
        batch = tuple(r for r in got if r == "b")
        if got != (*batch, *_ROLES[role]) or len(batch) != len(maps[0]) - 2:
            return refused(("layout", f"the op reads {role} as ({', '.join(got)}), over (batch, m, n, k1, k2); the kernels take {_AS_STORED[role]} "
                                      f"as stored, ({', '.join(('b',) + _ROLES[role])})"))
    block = op.regions[0].blocks[0]
    body = [o.operation for o in block.operations]
    if len(body) != 1 or list(body[0].operands) != [block.arguments[0]]:
        return refused(("numerics", "the op's region changes the scores (the kernels add the mask to the scaled scores, nothing else)"))
    if len(maps[0]) == 3 and infos["q"] and len(infos["q"][0]) == 3:
        q, k, v = (_heads(ins[i]) for i in range(3))
    elif len(maps[0]) == 4:
        q, k, v = (_Heads(ins[i], infos[r][0]) for i, r in enumerate("qkv"))
    else:
        return refused(("layout", "q, k and v are not [B, H, S, D] or [B*H, S, D] tensors"))
    if None in (q, k, v):
        return refused(("shape", "q, k and v [B*H, S, D] with a dynamic size are not collapsed from [B, H, S, D] tensors"))
    if q.shape[:2] != k.shape[:2] or q.shape[:2] != v.shape[:2]:
        return refused(("shape", f"q, k and v have different [B, H] ({shape_text(q.shape[:2])}, {shape_text(k.shape[:2])}, {shape_text(v.shape[:2])})"))
    notes = []
    repeated = [_repeated_heads(k), _repeated_heads(v)]
    if None not in repeated and repeated[0][1] == repeated[1][1] and repeated[0][0].shape[1] == repeated[1][0].shape[1]:
        (k, g), (v, _) = repeated
        notes.append(f"k and v repeat {shape_text(k.shape[1:2])} heads {g} times each (grouped-query attention): the kernel reads them as stored "
                     "(the repeat is not computed)")
    scale_value = ins[3]
    scale = float_constant(scale_value)
    common = {"result": result, "result_shape": q.shape, "result_dtype": tensor_info(result)[1], "compute": "f32", "anchor": op,
              "scale": scale, "scalar": scale_value if scale is None else None}
    qkv = tuple(Operand(h.value, h.shape, q_info[1]) for h in (q, k, v))
    layouts = (_qkv_layout(op), _bshd_layout(op, (q, k, v)))
    if not has_mask:
        return Candidate("sdpa", description, loc, result, forms=_with_layout_forms([Form(SDPA, qkv, notes=tuple(notes), **common)], *layouts))
    mask = _heads(ins[4])
    if mask is None:
        return refused(("shape", "the mask [B*H, Sq, Sk] with a dynamic size is not collapsed from a [B, H, Sq, Sk] tensor"))
    full, mask = mask, _broadcast_mask(mask)
    contents = _mask_contents(mask.value)
    forms = []
    if contents.causal:
        note = "the mask is the causal triangle (0 where key j <= query i, -inf or at most half the lowest value elsewhere): the kernel's causal masking, the mask not read"
        forms.append(Form(SDPA_CAUSAL, qkv, notes=(*notes, note), **common))
    if contents.zero:
        forms.append(Form(SDPA, qkv, notes=(*notes, "the mask is 0 everywhere (every query sees every key): the kernel without a mask, the mask not read"), **common))
    mask_notes = notes + ([f"the mask is read as {shape_text(mask.shape)}, broadcast over its dims of size 1"] if mask is not full else [])
    if contents.unknown:
        mask_notes.append(f"the mask is computed in the model, but not checked for the causal triangle: {contents.unknown}")
    wanted = (*q.shape[:3], k.shape[2])
    bad = [f"{name} = {shape_text([m])}" for name, m, full in zip(("MB", "MH", "MQ"), mask.shape, wanted) if m not in (1, full)]
    mask_form = Form(SDPA_MASK, (*qkv, Operand(mask.value, mask.shape, infos["mask"][1])), notes=tuple(mask_notes), **common)
    if bad:
        mask_form = Form(SDPA_MASK, mask_form.operands, refusal=("shape", f"the mask is {shape_text(mask.shape)}: {', '.join(bad)} is neither 1 nor the "
                                                                           f"model's size ({shape_text(wanted)})"), **common)
    forms.append(mask_form)
    return Candidate("sdpa", description, loc, result, forms=_with_layout_forms(forms, *layouts))


FAMILY = Family(kinds=(SDPA, SDPA_CAUSAL, SDPA_MASK, SDPA_QKV, SDPA_QKV_CAUSAL, SDPA_QKV_MASK, SDPA_BSHD, SDPA_BSHD_CAUSAL, SDPA_BSHD_MASK),
                matchers=(Matcher(frozenset({ROOT}), match_sdpa),))
