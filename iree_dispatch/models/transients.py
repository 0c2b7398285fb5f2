"""Gives a model's calls one transient storage for the module's life (backend/transients.py says
why and how the build allocates it): each public function's results pass through
`hal.tensor.transients ... from` a load of the storage global, which this declares.

Only where the build can size it and IREE can place it: a model whose every tensor has a static
shape (`static_shapes`, asked of the model as imported: the rewrite's casts to the kernels'
function types are dynamic until they fold), on the one device the model compiler targets. IREE
3.13 fails to compile a model that computes a shape from its data (`tensor.extract` into a
size) with its results routed so; such a model keeps IREE's allocation at each call.
"""

from __future__ import annotations

from iree.compiler import ir

from ..backend.transients import STORAGE_GLOBAL
from .ir_match import tensor_info


def route_transients(module) -> bool:
    """Declares the storage global and routes every public function's tensor results through it
    (the operands of its `hal.tensor.barrier`s, which torch functions end with, or of its return);
    False, and the module unchanged, where a result's shape is dynamic, there is none, or the
    module has a symbol of the storage's name already."""
    if any("sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == STORAGE_GLOBAL for op in module.body.operations):
        return False
    sites = [site for op in module.body.operations if _is_public_function(op) for site in _result_sites(op)]
    if not sites or any(None in tensor_info(user.operands[index])[0] for user, index in sites):
        return False
    buffer = ir.Type.parse("!hal.buffer")
    with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown():
        ir.Operation.create("util.global", attributes={
            "sym_name": ir.StringAttr.get(STORAGE_GLOBAL), "sym_visibility": ir.StringAttr.get("private"), "type": ir.TypeAttr.get(buffer)})
    for user, index in sites:
        with ir.InsertionPoint(user), user.location:
            storage = ir.Operation.create("util.global.load", results=[buffer], attributes={"global": ir.FlatSymbolRefAttr.get(STORAGE_GLOBAL)}).result
            value = user.operands[index]
            user.operands[index] = ir.Operation.create("hal.tensor.transients", results=[value.type], operands=[value, storage]).result
    return True


def static_shapes(module) -> bool:
    """Whether every tensor the module's ops make has a static shape."""
    dynamic = []

    def visit(op):
        if any(info is not None and None in info[0] for info in map(tensor_info, op.results)):
            dynamic.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return not dynamic


def _is_public_function(op) -> bool:
    if op.operation.name not in ("util.func", "func.func") or len(op.regions[0].blocks) == 0:
        return False
    return "sym_visibility" not in op.attributes or ir.StringAttr(op.attributes["sym_visibility"]).value == "public"


def _result_sites(function) -> list:
    """(op, operand index) pairs: the tensor operands of the function's barriers, or of its returns if
    it has no barrier."""
    ops = [op for block in function.regions[0].blocks for op in block.operations]
    barriers = [op for op in ops if op.operation.name == "hal.tensor.barrier"]
    users = barriers or [op for op in ops if op.operation.name in ("util.return", "func.return")]
    return [(op, i) for op in users for i, value in enumerate(op.operands) if tensor_info(value) is not None]
