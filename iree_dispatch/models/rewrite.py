"""Replaces the chosen candidates with calls to the kernels' generated functions.

Each replacement is: the operands reshaped to the kernel's ranks (tensor.collapse_shape) and cast
to its function's types (tensor.cast to dynamic dims), `func.call @<module>.<function>`, the
result cast back to static dims, narrowed (arith.truncf) where the selection allowed a wider
accumulation, and expanded to the model's shape; an operand the kernel takes in a wider type (a
bf16 bias as f32) is widened first (arith.extf, exact), and a matmul size the kernel wants a
multiple of k is padded with zeros (tensor.pad of the operands, tensor.extract_slice of the result); the model's value is then replaced everywhere.
The ops that computed it are left dead for IREE to drop. The declarations
`func.func private @<module>.<function>` are resolved by the program linker (backend/compile.py).
"""

from __future__ import annotations

from iree.compiler import ir

from ..backend.ir import tensor_type
from ..core import expr as ex
from ..frontend.spec import KernelSpec
from .ir_match import tensor_info
from .kinds import Splat
from .select import Decision


def kernel_function_type(kernel: KernelSpec) -> tuple[list[str], list[str]]:
    def tt(t):
        return tensor_type(t.dtype, [d.value if isinstance(d, ex.Num) else None for d in t.shape])

    return [tt(t) for t in kernel.inputs] + [s.stype.func_arg for s in kernel.scalar_args], [tt(t) for t in kernel.outputs]


def declare(module, decisions: list[Decision]) -> list[str]:
    """Adds a private declaration per kernel used; returns their symbols, in first-use order."""
    symbols: dict[str, KernelSpec] = {}
    for d in decisions:
        if d.replaced:
            symbols.setdefault(d.capability.label, d.capability.kernel)
    with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown():
        for symbol, kernel in symbols.items():
            ins, outs = kernel_function_type(kernel)
            ftype = ir.Type.parse(f"({', '.join(ins)}) -> ({', '.join(outs)})")
            ir.Operation.create(
                "func.func",
                attributes={"sym_name": ir.StringAttr.get(symbol), "function_type": ir.TypeAttr.get(ftype), "sym_visibility": ir.StringAttr.get("private")},
                regions=1,
            )
    return list(symbols)


def apply(decision: Decision, replaced: dict) -> None:
    """Rewrites one decision; `replaced` maps each model value already replaced to its
    replacement (a later candidate's operand may be an earlier one's result)."""
    form, cap = decision.form, decision.capability
    kernel = cap.kernel
    ins, outs = kernel_function_type(kernel)
    with ir.InsertionPoint(form.anchor), form.anchor.location:
        args, args_before_cast = [], []
        for operand, type_text in zip(form.operands, ins):
            value = operand.value
            if isinstance(value, Splat):  # a weight or bias the model does not have
                t = ir.Type.parse(tensor_type(operand.dtype, list(operand.shape)))
                element = ir.Type.parse(operand.dtype)
                attr = ir.DenseElementsAttr.get_splat(t, ir.FloatAttr.get(element, value.value))
                value = ir.Operation.create("arith.constant", results=[t], attributes={"value": attr}).results[0]
            while value in replaced:
                value = replaced[value]
            args_before_cast.append(value)
            expands = len(operand.shape) > len(tensor_info(value)[0])  # a [cols] vector as one row: [1, cols]
            v = _reshape(value, operand.shape, [_dim(value, 0) if d is None else None for d in operand.shape] if expands else None)
            index = len(args)
            if decision.pad:
                v = _pad(v, [_padded(d, size, decision.pad) for d, size in zip(kernel.inputs[index].shape, operand.shape)])
            if index in decision.widen:
                info = tensor_info(v)
                t = ir.Type.parse(tensor_type(decision.widen[index], list(info[0])))
                v = ir.Operation.create("arith.extf", results=[t], operands=[v]).results[0]
            args.append(_cast(v, ir.Type.parse(type_text)))
        for s in kernel.scalar_args:  # capability.py allows only a norm's epsilon or an attention's scale here
            args.append(_scalar_argument(form, ir.Type.parse(s.stype.func_arg)))
        call = ir.Operation.create(
            "func.call", results=[ir.Type.parse(outs[0])], operands=args, attributes={"callee": ir.FlatSymbolRefAttr.get(cap.label)}
        )
        out_dtype = kernel.outputs[0].dtype
        padded = [_padded(d, size, decision.pad) for d, size in zip(kernel.outputs[0].shape, form.result_shape)]
        result = _cast(call.results[0], ir.Type.parse(tensor_type(out_dtype, padded)))
        if padded != list(form.result_shape):
            result = _slice(result, list(form.result_shape))
        if decision.narrow_to:
            t = ir.Type.parse(tensor_type(decision.narrow_to, list(form.result_shape)))
            result = ir.Operation.create("arith.truncf", results=[t], operands=[result]).results[0]
        model_shape = tensor_info(form.result)[0]
        sources = [args_before_cast[i] for i, _ in form.result_dims]
        expands = len(model_shape) > len(form.result_shape)
        dims = [None if d is not None else _dim(sources[k], form.result_dims[k][1]) for k, d in enumerate(model_shape)] if expands else None
        result = _reshape(result, model_shape, dims)
    form.result.replace_all_uses_with(result)
    replaced[form.result] = result


def _scalar_argument(form, t):
    """The form's epsilon or scale as the kernel's float argument of type `t`: a constant, or
    the model's own scalar value converted to `t` (arith.extf / arith.truncf)."""
    value = form.scalar
    if value is None:
        number = form.scale if form.op_kind.takes_scale else form.eps
        return ir.Operation.create("arith.constant", results=[t], attributes={"value": ir.FloatAttr.get(t, number)}).results[0]
    if value.type == t:
        return value
    widen = ir.FloatType(value.type).width < ir.FloatType(t).width
    return ir.Operation.create("arith.extf" if widen else "arith.truncf", results=[t], operands=[value]).results[0]


def _padded(dim, size, pad: dict) -> int | None:
    """The size of a kernel tensor's dim `dim` (the model's `size`) after padding."""
    name = getattr(dim, "name", None)
    return pad[name][1] if name in pad else size


def _pad(value, shape):
    """`value` (static) padded with zeros at the end of each dim up to `shape`."""
    have, dtype = tensor_info(value)
    if list(have) == list(shape):
        return value
    element = ir.Type.parse(dtype)
    zero = ir.Operation.create("arith.constant", results=[element], attributes={"value": ir.FloatAttr.get(element, 0.0)}).results[0]
    attrs = {
        "static_low": ir.DenseI64ArrayAttr.get([0] * len(shape)),
        "static_high": ir.DenseI64ArrayAttr.get([n - h for n, h in zip(shape, have)]),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0]),
    }
    op = ir.Operation.create("tensor.pad", results=[ir.Type.parse(tensor_type(dtype, list(shape)))], operands=[value], attributes=attrs, regions=1)
    block = op.regions[0].blocks.append(*([ir.IndexType.get()] * len(shape)))
    with ir.InsertionPoint(block):
        ir.Operation.create("tensor.yield", operands=[zero])
    return op.results[0]


def _slice(value, shape):
    """The leading `shape` part of `value` (static): what padding added, sliced off."""
    dtype = tensor_info(value)[1]
    attrs = {
        "static_offsets": ir.DenseI64ArrayAttr.get([0] * len(shape)),
        "static_sizes": ir.DenseI64ArrayAttr.get(list(shape)),
        "static_strides": ir.DenseI64ArrayAttr.get([1] * len(shape)),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0]),
    }
    return ir.Operation.create("tensor.extract_slice", results=[ir.Type.parse(tensor_type(dtype, list(shape)))], operands=[value], attributes=attrs).results[0]


def _cast(value, target):
    if value.type == target:
        return value
    return ir.Operation.create("tensor.cast", results=[target], operands=[value]).results[0]


def _dim(value, index: int):
    """`tensor.dim` of `value` (an index value), for a dynamic size."""
    c = ir.Operation.create("arith.constant", results=[ir.IndexType.get()], attributes={"value": ir.IntegerAttr.get(ir.IndexType.get(), index)})
    return ir.Operation.create("tensor.dim", results=[ir.IndexType.get()], operands=[value, c.results[0]]).results[0]


def _groups(small, big) -> list[list[int]]:
    """The dims of `big` that make each dim of `small`: the leading ones merged into the first
    (a batch seen as rows), or, where the sizes are static and say otherwise, each dim of `small`
    the product of consecutive dims of `big` ([B, S, 3E] as [B, S, 3, H, D], [B, S, H, D] as [B*S, H*D])."""
    lead = len(big) - len(small) + 1
    groups = [list(range(lead))] + [[i] for i in range(lead, len(big))]
    if None in small or None in big or all(_product(big[i] for i in g) == n for g, n in zip(groups, small)):
        return groups
    groups, i = [], 0
    for n in small:
        group = [i]
        i += 1
        while i < len(big) and _product(big[j] for j in group) < n:
            group.append(i)
            i += 1
        groups.append(group)
    groups[-1] += list(range(i, len(big)))  # trailing unit dims
    if any(g[-1] >= len(big) or _product(big[j] for j in g) != n for g, n in zip(groups, small)):
        raise AssertionError(f"{tuple(big)} and {tuple(small)} are no reshape of each other")
    return groups


def _product(sizes) -> int:
    n = 1
    for d in sizes:
        n *= d
    return n


_DYNAMIC = -9223372036854775808  # ShapedType::kDynamic in static_output_shape


def _reshape(value, shape, dims=None):
    """`value` collapsed or expanded to `shape` (None: dynamic), merging or splitting its leading
    dims. Expanding to dynamic dims takes their sizes from `dims` (index values, per target dim)."""
    shape = tuple(shape)
    have, dtype = tensor_info(value)
    if have == shape and None not in shape:
        return value
    if len(have) == len(shape):
        return _cast(value, ir.Type.parse(tensor_type(dtype, list(shape))))
    target = ir.Type.parse(tensor_type(dtype, list(shape)))
    small, big = (shape, have) if len(shape) < len(have) else (have, shape)
    groups = _groups(small, big)
    reassociation = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i) for i in g]) for g in groups])
    if len(shape) < len(have):
        return ir.Operation.create("tensor.collapse_shape", results=[target], operands=[value], attributes={"reassociation": reassociation}).results[0]
    dynamic = [dims[i] for i, d in enumerate(shape) if d is None] if dims else []
    if len(dynamic) != sum(d is None for d in shape) or any(v is None for v in dynamic):
        raise AssertionError(f"expanding to {shape} needs a size for each dynamic dim")
    attrs = {"reassociation": reassociation, "static_output_shape": ir.DenseI64ArrayAttr.get([_DYNAMIC if d is None else d for d in shape])}
    return ir.Operation.create("tensor.expand_shape", results=[target], operands=[value, *dynamic], attributes=attrs).results[0]
