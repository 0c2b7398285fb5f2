"""q, k and v projections merged: the three Linears of one self-attention computed as one.

BERT (and every model that writes `self.query`, `self.key`, `self.value` as three nn.Linear of
the same hidden state) runs three GEMMs of N = E where one of N = 3E does the same work in one
launch, with fuller waves of tiles. GPT-2 writes its projection as one Linear already, and the
sdpa_qkv kinds read q, k and v in place from its [B, S, 3E] result.

`merge_qkv_projections` finds, at each attention op, q, k and v as heads of three [B, S, E]
values, each computed by the same chain of ops from one shared input and its own weight and bias
(the weight transposed and broadcast over the batch, the matmul, its rounding, the bias add, as
IREE imports an nn.Linear). It builds the chain once over the weights and biases concatenated
along N and lets q, k and v be the slices at 0, E and 2E of its [B, S, 3E] result: GPT-2's layout.
Each element of a matmul's result is the same sum over K in the same order whatever the other
columns are, so the merged model computes the same values.

Only weights and biases the module holds (constants, immutable globals such as IREE parameters)
are concatenated: IREE computes the concatenation once, when the module loads. Weights passed at
each call would be copied at each call, and are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from ..backend.ir import tensor_type
from .ir_match import as_generic, default_matmul_maps, matmul_maps, permutation, producer, tensor_info, users, walk
from .kinds.attention import _heads_source

# Ops whose results are the weights and biases the module holds: concatenated once, at load.
_HELD = ("arith.constant", "util.global.load")
_MATMULS = ("linalg.matmul", "linalg.batch_matmul")


@dataclass(frozen=True)
class MergedProjections:
    """One attention whose q, k and v now come from one projection."""

    qkv: ir.Value  # the merged projection's [B, S, 3E] result q, k and v are sliced from


NOT_ONE_CHAIN = "they are not the same ops on one input (three Linears as IREE imports them)"
PASSED_IN = "their weights or biases are arguments of the call (they would be concatenated at each call)"


class _NotMergeable(Exception):
    """The three chains differ somewhere, or hold something this merge does not rebuild."""

    def __init__(self, reason: str = NOT_ONE_CHAIN):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Merging:
    """What merge_qkv_projections did: the attentions it merged, and for each attention whose q,
    k and v are three distinct values it left, why."""

    merged: list[MergedProjections]
    left: list[str]


def merge_qkv_projections(module: ir.Module) -> Merging:
    """Merges the q, k and v projections of every attention op where they are three Linears of
    one input. An attention it leaves is left unchanged."""
    merged, left = [], []
    for op in [o for o in walk(module.operation) if o.name == "iree_linalg_ext.attention"]:
        found = _projections(op)
        if found is None:
            continue
        try:
            plan = _Plan(found)
        except _NotMergeable as exc:
            left.append(exc.reason)
            continue
        merged.append(MergedProjections(plan.build()))
    return Merging(merged, left)


def _projections(op: ir.Operation) -> tuple[ir.Value, ir.Value, ir.Value] | None:
    """The three [B, S, E] values the attention's q, k and v are heads of, when they are three
    distinct values of one type, each used only by its heads' reshape."""
    sources = [_heads_source(op.operands[i], [0, 2, 1, 3]) for i in range(3)]
    if None in sources:
        return None
    values = tuple(s[0] for s in sources)
    info = tensor_info(values[0])
    if info is None or len(info[0]) != 3 or None in info[0]:
        return None
    if any(v.type != values[0].type for v in values) or values[0] == values[1] or values[1] == values[2] or values[0] == values[2]:
        return None
    if any(len(users(v)) != 1 for v in values):
        return None
    slices = [producer(v) for v in values]
    if all(o is not None and o.name == "tensor.extract_slice" for o in slices) and len({o.operands[0] for o in slices}) == 1:
        return None  # already slices of one projection (GPT-2's)
    return values


class _Plan:
    """The three chains read side by side from their results up: at each step the same op (name,
    attributes, body) in all three, or the same value, or each chain's own weight or bias held
    by the module. Every chain value runs along N in its last dim; `_along_n` says for each
    operand of a chain op which of its dims runs along N. Everything is checked here, before
    `build` changes the module."""

    def __init__(self, results: tuple[ir.Value, ir.Value, ir.Value]):
        self.results = results
        self.ops: list[tuple[ir.Operation, ...]] = []  # chain ops, operands before users
        if producer(results[0]) is None:
            raise _NotMergeable
        self.block = producer(results[0]).block
        self.position = {o.operation: i for i, o in enumerate(self.block.operations)}
        self._seen: set = set()
        self._chain(results)
        # The merged chain goes before the first use of any of the three results; what it reads
        # from outside must be there already (held weights defined later are moved up).
        self.first_use = min((u for v in results for u in users(v)), key=lambda o: self.position.get(o, -1))
        if self.first_use not in self.position:
            raise _NotMergeable
        self.moved = []
        for value in self._read_from_outside():
            op = producer(value)
            if op is None or op.block != self.block or self.position[op] < self.position[self.first_use]:
                continue
            if op.name not in _HELD or len(op.operands):
                raise _NotMergeable
            self.moved.append(op)

    def _chain(self, values: tuple[ir.Value, ...]) -> None:
        ops = tuple(producer(v) for v in values)
        if any(o is None for o in ops) or any(o.block != self.block for o in ops) or any(len(o.results) != 1 for o in ops):
            raise _NotMergeable
        key = tuple(id(o) for o in ops)
        if key in self._seen:
            return
        if not _same_op(ops):
            raise _NotMergeable
        if any(len(users(o.results[0])) != 1 for o in ops):
            raise _NotMergeable  # a value another op reads too would still be computed
        for index, n_dim in enumerate(_along_n(ops[0])):
            operands = tuple(o.operands[index] for o in ops)
            if n_dim == "init":
                if not _is_init(operands[0]) or any(v != operands[0] for v in operands):
                    raise _NotMergeable
            elif n_dim is None:  # read the same by every column: must be one value
                if any(v != operands[0] for v in operands):
                    raise _NotMergeable
            elif operands[0] == operands[1] or operands[1] == operands[2] or operands[0] == operands[2]:
                raise _NotMergeable
            elif all(_held(v) for v in operands):
                if any(v.type != operands[0].type for v in operands):
                    raise _NotMergeable
            elif any(_passed_in(v) for v in operands):
                raise _NotMergeable(PASSED_IN)
            elif n_dim == len(tensor_info(operands[0])[0]) - 1:
                self._chain(operands)
            else:
                raise _NotMergeable
        self._seen.add(key)
        self.ops.append(ops)

    def _read_from_outside(self) -> list[ir.Value]:
        """Every value the merged chain reads that it does not compute: the shared input, the
        weights and biases, the destinations' fill values, and what the ops' bodies capture."""
        computed = {o.results[0] for ops in self.ops for o in ops}
        out = []
        for ops in self.ops:
            for o in ops:
                for index, n_dim in enumerate(_along_n(o)):
                    v = o.operands[index]
                    if n_dim == "init":
                        fill = producer(v)
                        out += [fill.operands[0]] if fill.name == "linalg.fill" else []
                    elif v not in computed:
                        out.append(v)
                for region in o.regions:
                    for block in region.blocks:
                        inside = set(block.arguments)
                        for inner in block.operations:
                            out += [x for x in inner.operation.operands if x not in inside]
                            inside.update(inner.operation.results)
        return out

    def build(self) -> ir.Value:
        """The merged chain, inserted before the first use of any of the three results; the three
        results replaced by its slices; the three chains erased."""
        for op in self.moved:
            op.move_before(self.first_use)
        with ir.InsertionPoint(self.first_use), self.first_use.location:
            new: dict = {}  # value of the first chain -> its merged counterpart
            for ops in self.ops:
                operands = []
                for index, n_dim in enumerate(_along_n(ops[0])):
                    mine = tuple(o.operands[index] for o in ops)
                    if n_dim == "init":
                        if mine[0] not in new:
                            new[mine[0]] = _widened_init(mine[0])
                        operands.append(new[mine[0]])
                    elif n_dim is None:
                        operands.append(mine[0])
                    elif mine[0] in new:
                        operands.append(new[mine[0]])
                    else:
                        operands.append(_concat(list(mine), n_dim))
                new[ops[0].results[0]] = _rebuilt(ops[0], operands, _widened(ops[0].results[0].type))
            merged = new[self.results[0]]
            width = tensor_info(self.results[0])[0][-1]
            for i, v in enumerate(self.results):
                v.replace_all_uses_with(_last_dim_slice(merged, i * width, width))
        for ops in reversed(self.ops):
            for o in ops:
                o.erase()
        return merged


def _same_op(ops: tuple[ir.Operation, ...]) -> bool:
    """The same op: name, attributes, operand count, and for a generic the same body expression."""
    def key(o: ir.Operation):
        g = as_generic(o)
        return (o.name, len(o.operands), tuple(sorted((name, str(o.attributes[name])) for name in o.attributes)), g.exprs if g else None)

    return len({key(o) for o in ops}) == 1


def _along_n(op: ir.Operation) -> list[int | str | None]:
    """For each operand of a chain op whose result runs along N in its last dim: the operand's
    dim that runs along N, None where the operand does not vary along N, "init" for a
    destination the op overwrites. Raises _NotMergeable for an op the merge does not rebuild."""
    rank = len(tensor_info(op.results[0])[0])
    if op.name == "linalg.transpose":
        perm = permutation(op)
        if perm is None or len(op.operands) != 2:
            raise _NotMergeable
        return [perm[rank - 1], "init"]
    if op.name in _MATMULS:
        if matmul_maps(op) != default_matmul_maps(op) or len(op.operands) != 3:
            raise _NotMergeable  # only the default maps: a's rows by b's columns
        return [None, rank - 1, "init"]
    g = as_generic(op)
    if g is None or not g.parallel or len(g.outputs) != 1:
        raise _NotMergeable
    n_loop = f"d{len(g.iterators) - 1}"
    if g.map_of(len(g.inputs)) != tuple(f"d{i}" for i in range(len(g.iterators))):
        raise _NotMergeable  # the result indexed by the loops in order: its last dim is N
    dims: list[int | str | None] = []
    for i in range(len(g.inputs)):
        m = g.map_of(i)
        if any(r != "0" and r not in {f"d{k}" for k in range(len(g.iterators))} for r in m):
            raise _NotMergeable
        dims.append(m.index(n_loop) if n_loop in m else None)
    return [*dims, "init"]


def _passed_in(value: ir.Value) -> bool:
    """A tensor the call receives: a function argument, as IREE imports it."""
    op = producer(value)
    return op is None or op.name == "hal.tensor.import"


def _is_init(value: ir.Value) -> bool:
    """A destination this merge can make again at the wider type: tensor.empty, or linalg.fill of one."""
    op = producer(value)
    if op is None:
        return False
    if op.name == "tensor.empty":
        return len(op.operands) == 0
    return op.name == "linalg.fill" and _is_init(op.operands[1])


def _held(value: ir.Value) -> bool:
    """A tensor the module holds (a constant, an immutable global): concatenated once, at load."""
    op = producer(value)
    if op is None or op.name not in _HELD:
        return False
    return op.name == "arith.constant" or "is_immutable" in op.attributes


def _widened(t: ir.Type) -> ir.Type:
    """The tensor type `t` three times as wide in its last dim."""
    rt = ir.RankedTensorType(t)
    return ir.RankedTensorType.get([*rt.shape[:-1], 3 * rt.shape[-1]], rt.element_type)


def _widened_init(value: ir.Value) -> ir.Value:
    """The destination `value` (tensor.empty, or linalg.fill of one) made again three times as wide in its last dim."""
    op = producer(value)
    if op.name == "tensor.empty":
        return ir.Operation.create("tensor.empty", results=[_widened(value.type)]).results[0]
    return _rebuilt(op, [op.operands[0], _widened_init(op.operands[1])], _widened(value.type))


def _rebuilt(op: ir.Operation, operands: list[ir.Value], result: ir.Type) -> ir.Value:
    """`op` made again on `operands` with result type `result`: its attributes and its body
    (linalg ops' regions) copied."""
    attributes = {name: op.attributes[name] for name in op.attributes}
    new = ir.Operation.create(op.name, results=[result], operands=operands, attributes=attributes, regions=len(op.regions))
    for old_region, new_region in zip(op.regions, new.regions):
        for old_block in old_region.blocks:
            block = new_region.blocks.append(*[a.type for a in old_block.arguments])
            mapping = dict(zip(old_block.arguments, block.arguments))
            for inner in old_block.operations:
                copy = inner.operation.clone(ip=ir.InsertionPoint(block))
                for k, operand in enumerate(copy.operands):
                    if operand in mapping:
                        copy.operands[k] = mapping[operand]
                mapping.update(zip(inner.operation.results, copy.results))
    return new.results[0]


def _concat(values: list[ir.Value], dim: int) -> ir.Value:
    shape, dtype = tensor_info(values[0])
    wide = [*shape]
    wide[dim] = shape[dim] * len(values)
    t = ir.Type.parse(tensor_type(dtype, wide))
    return ir.Operation.create("tensor.concat", results=[t], operands=values, attributes={"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim)}).results[0]


def _last_dim_slice(value: ir.Value, offset: int, size: int) -> ir.Value:
    shape, dtype = tensor_info(value)
    rank = len(shape)
    attrs = {
        "static_offsets": ir.DenseI64ArrayAttr.get([0] * (rank - 1) + [offset]),
        "static_sizes": ir.DenseI64ArrayAttr.get([*shape[:-1], size]),
        "static_strides": ir.DenseI64ArrayAttr.get([1] * rank),
        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 0, 0, 0]),
    }
    t = ir.Type.parse(tensor_type(dtype, [*shape[:-1], size]))
    return ir.Operation.create("tensor.extract_slice", results=[t], operands=[value], attributes=attrs).results[0]
