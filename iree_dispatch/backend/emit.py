"""Stage 4: KernelSpecs + PTX objects → IREE MLIR text (deterministic).

Written for iree-base-compiler 3.13 through ir.py, which spells every op and attribute (programs
use it too): this file decides what the module holds, ir.py how it is written, so a version bump
is an edit there.

Per source file, one `hal.executable` with one variant per object (variants.py: cubins, PTX,
fatbin), in preference order, each guarded by a compute-capability condition: the runtime
takes the first variant whose condition holds, so each GPU runs the best object it can. Per
kernel, one public `func.func` wrapper that takes tensors (and scalar arguments), checks
shape relations, packs scalars into 32-bit push constants and `flow.dispatch`es over all
variants.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ..core import expr as ex
from ..core.contract import REFLECTION_KEY, LaunchPlan, LaunchVariant, PushConstant, ScalarDescription, encode
from ..core.dtypes import ELEMENT_TYPES
from ..core.variants import Variant
from ..frontend.spec import KernelSpec, ModuleSpec, TensorParam
from . import ir
from .ir import FunctionBuilder, tensor_type

# Appended to a kernel's linkable wrapper name for its form without cf.assert (see emit_module).
UNCHECKED_SUFFIX = ".unchecked"


@dataclass(frozen=True)
class Executable:
    """One source file's kernels, its variants in preference order and the object of each."""

    source: Path
    symbol: str  # unique in the module, readable: `simple_mul.cu` → `simple_mul_cu`
    kernels: tuple[KernelSpec, ...]
    variants: tuple[Variant, ...]
    object_paths: dict[str, str]  # variant name → object path as written into the IR


@dataclass(frozen=True)
class CompiledObjects:
    """What the objects stage (pipeline.py) hands the emitter for one module: its executables,
    each kernel's entry name (abi.resolve_entry: mangled for C++ kernels), which the export
    must carry because IREE looks kernels up by export name, and every file the stage read."""

    module: ModuleSpec
    executables: tuple[Executable, ...]
    entries: dict[str, str]  # kernel name → entry name
    dependencies: tuple[Path, ...]

    @classmethod
    def of(cls, module: ModuleSpec, object_paths: dict[tuple[Path, str], str], entries: dict[str, str], dependencies) -> CompiledObjects:
        """object_paths[(source, variant name)]: the object path to write into the IR."""
        symbols = executable_symbols(module)
        executables = []
        for src in module.sources:
            variants = module.variants_for(src)
            kernels = tuple(k for k in module.kernels if k.source == src)
            executables.append(Executable(src, symbols[src], kernels, variants, {v.name: object_paths[(src, v.name)] for v in variants}))
        return cls(module, tuple(executables), dict(entries), tuple(dependencies))


def executable_symbols(module: ModuleSpec) -> dict[Path, str]:
    """A unique, readable symbol per source file: `simple_mul.cu` → `simple_mul_cu`."""
    symbols: dict[Path, str] = {}
    for source in module.sources:
        base = "".join(c if c.isascii() and c.isalnum() else "_" for c in source.name)  # MLIR symbols are ASCII
        if not base[0].isalpha():
            base = f"src_{base}"  # and start with a letter or _ (`1_naive.cuh` → `src_1_naive_cuh`)
        symbol, n = base, 1
        while symbol in symbols.values():
            n += 1
            symbol = f"{base}_{n}"
        symbols[source] = symbol
    return symbols


def emit_module(objects: CompiledObjects, header: str = "", *, for_linking: bool = False, object_data: dict[str, bytes] | None = None) -> str:
    """The complete MLIR module of `objects.module`.

    for_linking: name the wrappers `@<module>.<kernel>` and make them private, the form a
    program's `func.func private @<module>.<kernel>` declarations are resolved against; also
    emit `@<module>.<kernel>.unchecked` (UNCHECKED_SUFFIX), the same wrapper without its
    `cf.assert`s, for programs that check every call's relations once at entry (program.py):
    IREE 3.13 ends its command buffer at each assert, so per-call asserts between dispatches
    cost one submission per call. Unused wrappers are dropped by iree-compile.
    object_data: object path → bytes, to embed the objects in the IR (hermetic: compiles with
    plain iree-compile and no object files).
    """
    module, entries = objects.module, objects.entries
    lines = [ir.comment(line) for line in header.splitlines()]
    target_archs = dict.fromkeys(v.target_arch.name for exe in objects.executables for v in exe.variants)
    lines += [ir.attribute_alias(_target(a), ir.executable_target(a)) for a in target_archs]
    lines += [ir.attribute_alias(_layout_name(k), ir.pipeline_layout(_constant_count(k), [not t.writable for t in k.tensors])) for k in module.kernels]
    body = []
    for exe in objects.executables:
        body += _executable(exe, entries, object_data or {})
    executable_of = {k.name: exe for exe in objects.executables for k in exe.kernels}
    for k in module.kernels:
        exe = executable_of[k.name]
        if for_linking:
            body += _wrapper(k, exe, module, entries[k.name], f"{module.name}.{k.function}", private=True)
            body += _wrapper(k, exe, module, entries[k.name], f"{module.name}.{k.function}{UNCHECKED_SUFFIX}", private=True, checked=False)
        else:
            body += _wrapper(k, exe, module, entries[k.name], k.function)
    return "\n".join(lines + ir.module(module.name, body)) + "\n"


def _target(arch: str) -> str:
    return f"target_{arch}"


def _layout_name(k: KernelSpec) -> str:
    return f"layout_{k.function}"


def _constant_count(k: KernelSpec) -> int:
    """32-bit push constants per dispatch. IREE sizes its constant buffer from this number
    without checking it against the dispatch (more constants than declared overrun it)."""
    return sum(s.stype.slots for s in k.scalars)


def _executable(exe: Executable, entries: dict[str, str], object_data: dict[str, bytes]) -> list[str]:
    variants = []
    for v in exe.variants:
        path = exe.object_paths[v.name]
        body = ir.variant_condition(v.rules)
        for ordinal, k in enumerate(exe.kernels):
            body += _export(k, entries[k.name], ordinal, k.shared_memory_for(v))
        variants.append(ir.executable_variant(v.name, f"#{_target(v.target_arch.name)}", ir.executable_object(path, object_data.get(path)), body))
    return ir.executable(exe.symbol, variants)


def _export(k: KernelSpec, entry: str, ordinal: int, shared_memory: int) -> list[str]:
    # shared_memory: this variant's size (per-arch specs give each variant its own).
    body: list[str] = []
    counter = iter(range(1 << 30))
    values = {w: ir.workload(w) for w in k.workloads}
    grid = [ex.lower_to_arith(g, values, lambda: ir.value(f"t.{next(counter)}"), body) for g in k.grid]
    return ir.executable_export(entry, ordinal, f"#{_layout_name(k)}", k.workloads, body, grid, k.block, shared_memory)


def _tensor_type(t: TensorParam) -> str:
    return tensor_type(t.dtype, [d.value if isinstance(d, ex.Num) else None for d in t.shape])


def _wrapper(k: KernelSpec, exe: Executable, module: ModuleSpec, entry: str, function: str, private: bool = False, checked: bool = True) -> list[str]:
    b = FunctionBuilder(k.name, checked=checked)
    symbols: dict[str, str] = {}
    dim_values: dict[tuple[str, int], str] = {}

    # Bind each shape symbol at its first input dim; every later use must agree.
    for t in k.inputs:
        for i, d in enumerate(t.shape):
            if isinstance(d, ex.Num):
                continue
            value = b.tensor_dim(ir.value(t.name), i, _tensor_type(t), name=ir.value(f"{t.name}.d{i}"))
            dim_values[(t.name, i)] = value
            if d.name in symbols:
                b.check("eq", value, symbols[d.name], f"{t.name} dim {i} must equal {d.name} (the size of {_first_binding(k, d.name)})")
            else:
                symbols[d.name] = value
    for s in k.scalar_args:
        if s.stype.integer:
            symbols.setdefault(s.name, b.to_index(ir.value(s.name), s.stype))
        for f in s.stype.fields:
            # A struct's integer field of one word may size things by its dotted name (`s.m`).
            if f.stype.integer and f.stype.nbytes == 4 and f.offset % 4 == 0:
                key, value = f"{s.name}.{f.name}", b.to_index(ir.value(_word(s.name, f.offset // 4)), f.stype)
                if key in symbols:  # also an input's dim: the two must agree
                    b.check("eq", value, symbols[key], f"{key} must equal the size of {_first_binding(k, key)}")
                else:
                    symbols[key] = value

    def lower(e: ex.Expr) -> str:
        return ex.lower_to_arith(e, symbols, b.fresh, b.lines)

    # A shared memory size over sizes may use the block's dims too (a size of that name wins).
    for axis, threads in zip("xyz", k.block):
        symbols.setdefault(f"block_{axis}", b.constant(threads))

    # A divisor that depends on sizes is checked before anything divides by it (arith's
    # divisions by zero are undefined).
    for label, divisor in k.size_divisors():
        b.check("ne", lower(divisor), b.constant(0), f"{label} divides by {divisor}, which is 0 for these sizes")

    # What the spec requires of the sizes beyond equal names (the kernel gives wrong results
    # where a relation fails: checked like a dim that disagrees).
    for relation in k.requires:
        b.check_relation(relation, symbols, f"requires {relation.text}")

    # The export declares the bound of the shared memory a call needs: a call beyond it would
    # give the kernel less than it uses.
    if k.shared_memory_size is not None:
        needed = lower(k.shared_memory_size)
        b.check("sle", needed, b.constant(k.shared_memory), f"shared memory {k.shared_memory_size} exceeds its declared max of {k.shared_memory} bytes")
        b.check("sge", needed, b.constant(0), f"shared memory {k.shared_memory_size} is negative")

    arg_names = {a.name for a in k.scalar_args}
    constants = []
    for s in k.scalars:
        constants += _pack_argument(b, s) if s.value is None else _pack_expression(b, s, lower(s.value), arg_names)

    # Fresh outputs are allocated here and passed as operands, so the binding order is the
    # kernel's parameter order whatever mix of inputs and outputs it has.
    operands, operand_types, results = [], [], []
    for t in k.tensors:
        dyn = []
        for i, d in enumerate(t.shape):
            if isinstance(d, ex.Num):
                continue
            if t.role == "output":
                v = lower(d)
                if not isinstance(d, ex.Sym):
                    b.check("sge", v, b.constant(0), f"output {t.name} dim {i} = {d} is negative")
                dyn.append(v)
            else:
                dyn.append(dim_values[(t.name, i)])
        # A fresh output is an allocation of its own (ir.FunctionBuilder.alloca: never merged with
        # another), or zero-filled (`zero`), which IREE does with a fill on its queue before the dispatch.
        if t.role != "output":
            name = ir.value(t.name)
        elif t.name in k.zero:
            name = b.zeros(ir.value(f"{t.name}.init"), _tensor_type(t), dyn, _byte_count(b, t, dyn), k.zero.index(t.name))
        else:
            name = b.alloca(ir.value(f"{t.name}.init"), _tensor_type(t), dyn)
        operands.append(name)
        operand_types.append(f"{_tensor_type(t)}{ir.dynamic_dims(dyn)}")
        if t.writable:
            results.append(f"{name}{ir.dynamic_dims(dyn)}")
    if len(constants) != _constant_count(k):
        raise AssertionError(f"{k.name}: {len(constants)} push constants packed, layout declares {_constant_count(k)}")
    operands += constants
    operand_types += ["i32"] * len(constants)

    # Names with a "." can't collide with the C parameter names used for the arguments.
    lhs = ir.results_name(ir.value("dispatch.result" if len(results) == 1 else "dispatch.results"), len(results))
    targets = [ir.export_target(exe.symbol, v.name, entry) for v in exe.variants]
    b.dispatch(lhs, targets, [symbols[w] for w in k.workloads], operands, operand_types, results)
    out_types = [_tensor_type(t) for t in k.outputs]
    b.return_([ir.result_value(lhs, len(results), i) for i in range(len(results))], out_types)

    args = [ir.argument(t.name, _tensor_type(t)) for t in k.inputs] + [a for s in k.scalar_args for a in _scalar_arguments(s)]
    # A prebuilt kernel runs on its objects' archs, not the module's.
    archs = list(dict.fromkeys(a.name for v in exe.variants for a in v.archs)) if k.objects else [a.name for a in module.archs]
    objects = "+".join(o.kind for o in k.objects) if k.objects else module.objects
    description = dataclasses.replace(k.describe(), archs=tuple(archs), objects=objects, launch=_launch_plan(k, exe, entry))
    # Only public wrappers are called from outside and need their description at run time.
    attributes = "" if private else ir.reflection(REFLECTION_KEY, encode(description))
    return ir.function(function, args, out_types, b.lines, private=private, attributes=attributes)


def _launch_plan(k: KernelSpec, exe: Executable, entry: str) -> LaunchPlan:
    """What the runtime needs to launch the kernel itself, exactly as this function's dispatch
    does (runtime/launch.py): the executable and its variants in IREE's order of preference with
    their conditions and shared memory, the entry, the block, the tensors in binding order, and
    every push constant's scalar (argument or size expression) in order."""
    return LaunchPlan(
        executable=exe.symbol,
        entry=entry,
        block=tuple(k.block),
        variants=tuple(LaunchVariant(v.name, tuple(v.rules), k.shared_memory_for(v)) for v in exe.variants),
        bindings=tuple(t.name for t in k.tensors),
        constants=tuple(PushConstant(ScalarDescription.of(s.name, s.stype), None if s.value is None else str(s.value)) for s in k.scalars),
    )


def _word(name: str, index: int) -> str:
    """The generated function's argument for word `index` of struct argument `name` ("." keeps
    it apart from the C parameter names)."""
    return f"{name}.w{index}"


def _scalar_arguments(s) -> list[str]:
    """A scalar's arguments of the generated function: one, or a struct's words (its bytes as
    the caller packs them: core/contract.struct_argument)."""
    if s.stype.kind == "struct":
        return [ir.argument(_word(s.name, i), "i32") for i in range(s.stype.slots)]
    return [ir.argument(s.name, s.stype.func_arg)]


def _pack_argument(b: FunctionBuilder, s) -> list[str]:
    """A scalar argument of the generated function → its 32-bit push constants."""
    st, value = s.stype, ir.value(s.name)
    if st.kind == "struct":
        return [ir.value(_word(s.name, i)) for i in range(st.slots)]
    b.check_scalar_argument(value, s.name, st)
    if st.kind == "float":
        return [b.cast("bitcast", value, "f32", "i32")]
    return b.split64(value) if st.nbytes == 8 else [value]


def _pack_expression(b: FunctionBuilder, s, value: str, arg_names: set[str]) -> list[str]:
    """A scalar computed from sizes (an index) → its 32-bit push constants, range-checked."""
    st = s.stype
    label = f"scalar {s.name}" if s.value == ex.Sym(s.name) else f"scalar {s.name} = {s.value}"
    wide = b.cast("index_cast", value, "index", "i64")
    if st.kind == "float":
        return [b.cast("bitcast", b.cast("sitofp", wide, "i64", "f32"), "f32", "i32")]
    lo, hi = st.int_range()
    # Dims are never negative, so a plain dim needs no lower bound check.
    if not (isinstance(s.value, ex.Sym) and s.value.name not in arg_names):
        b.check("sge", value, b.constant(lo), f"{label} is below the range of {st.ctype}")
    if hi < 2**63:  # index is 64-bit: nothing exceeds a 64-bit unsigned range
        b.check("sle", value, b.constant(hi), f"{label} exceeds the range of {st.ctype}")
    return b.split64(wide) if st.nbytes == 8 else [b.cast("trunci", wide, "i64", "i32")]


def _byte_count(b: FunctionBuilder, t: TensorParam, dynamic_dims: list[str]) -> str:
    """The bytes of output `t` (an index): its static dims and element size times its dynamic dims."""
    static = ELEMENT_TYPES[t.dtype].nbytes
    for d in t.shape:
        static *= d.value if isinstance(d, ex.Num) else 1
    count = dynamic_dims[0] if static == 1 and dynamic_dims else b.constant(static)
    for d in dynamic_dims[1:] if static == 1 else dynamic_dims:
        count = b.op(f"arith.muli {count}, {d} : index")
    return count


def _first_binding(k: KernelSpec, symbol: str) -> str:
    for t in k.inputs:
        for i, d in enumerate(t.shape):
            if isinstance(d, ex.Sym) and d.name == symbol:
                return f"{t.name} dim {i}"
    return symbol
