"""Stage 4: KernelSpecs + PTX objects → IREE MLIR text (deterministic).

Written for iree-base-compiler 3.13 (strict properties: inherent attributes in `<{...}>`): the
executables' syntax is in this file's templates, function bodies are written with ir.py (which
programs use too), so a version bump is an edit in these two files.

Per source file, one `hal.executable` with one variant per object (variants.py: cubins, PTX,
fatbin), in preference order, each guarded by a compute-capability condition: the runtime
takes the first variant whose condition holds, so each GPU runs the best object it can. Per
kernel, one public `func.func` wrapper that takes tensors (and scalar arguments), checks
shape relations, packs scalars into 32-bit push constants and `flow.dispatch`es over all
variants.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core import expr as ex
from ..core.contract import REFLECTION_KEY, encode
from ..core.variants import Variant
from ..frontend.spec import KernelSpec, ModuleSpec, TensorParam
from .ir import FunctionBuilder, mlir_string, result_types, tensor_type

_TARGET = '#hal.executable.target<"cuda", "cuda-nvptx-fb", {{target_arch = "{arch}"}}>'
_BINDING = "#hal.pipeline.binding<storage_buffer{access}>"
_LAYOUT = "#hal.pipeline.layout<constants = {constants}, bindings = [{bindings}]>"
_VARIANT_OPEN = "hal.executable.variant public @{name} target(#target_{arch}) objects([{object}]) {{"
_OBJECT = '#hal.executable.object<{{path = "{path}"}}>'
# Embedded bytes keep the path too: an object with data alone prints back as `{, data = ...}`,
# which does not parse again.
_OBJECT_EMBEDDED = '#hal.executable.object<{{path = "{path}", data = dense<"0x{hex}"> : vector<{size}xi8>}}>'
_QUERY = '%{name}.ok, %{name} = hal.device.query<%device : !hal.device> key("cuda.device" :: "compute_capability_{name}") : i1, i32'
_EXPORT_OPEN = "hal.executable.export public @{entry} ordinal({ordinal}) layout(#layout_{layout}) count(%device: !hal.device{workloads}) -> (index, index, index) {{"
_EXPORT_CLOSE = "}} <{{workgroup_size = [{x} : index, {y} : index, {z} : index]{shared}}}>"
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
        base = "".join(c if c.isalnum() else "_" for c in source.name)
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
    lines = [f"// {line}" for line in header.splitlines()]
    target_archs = dict.fromkeys(v.target_arch.name for exe in objects.executables for v in exe.variants)
    lines += [f"#target_{a} = " + _TARGET.format(arch=a) for a in target_archs]
    lines += [f"#layout_{k.function} = " + _layout(k) for k in module.kernels]
    lines.append(f"module @{module.name} {{")
    for exe in objects.executables:
        lines += _indent(_executable(exe, entries, object_data or {}), 1)
    executable_of = {k.name: exe for exe in objects.executables for k in exe.kernels}
    for k in module.kernels:
        exe = executable_of[k.name]
        function = f"private @{module.name}.{k.function}" if for_linking else f"@{k.function}"
        lines += _indent(_wrapper(k, exe, module, entries[k.name], function), 1)
        if for_linking:
            unchecked = f"private @{module.name}.{k.function}{UNCHECKED_SUFFIX}"
            lines += _indent(_wrapper(k, exe, module, entries[k.name], unchecked, checked=False), 1)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _indent(lines: list[str], depth: int) -> list[str]:
    return [("  " * depth + line) if line else line for line in lines]


def _layout(k: KernelSpec) -> str:
    bindings = ", ".join(_BINDING.format(access="" if t.writable else ", ReadOnly") for t in k.tensors)
    return _LAYOUT.format(constants=_constant_count(k), bindings=bindings)


def _constant_count(k: KernelSpec) -> int:
    """32-bit push constants per dispatch. IREE sizes its constant buffer from this number
    without checking it against the dispatch (more constants than declared overrun it)."""
    return sum(s.stype.slots for s in k.scalars)


def _condition(variant: Variant) -> list[str]:
    """True when the GPU can run the variant's object: any of its rules holds (variants.py)."""
    body = [_QUERY.format(name="major"), _QUERY.format(name="minor"), "%queried = arith.andi %major.ok, %minor.ok : i1"]
    terms = []
    for i, (major, minor, how) in enumerate(variant.rules):
        body += [f"%major{i} = arith.constant {major} : i32", f"%minor{i} = arith.constant {minor} : i32"]
        same = f"%same{i}"
        body.append(f"{same} = arith.cmpi eq, %major, %major{i} : i32")
        minor_pred = "eq" if how == "exact" else "sge"
        body.append(f"%minor_ok{i} = arith.cmpi {minor_pred}, %minor, %minor{i} : i32")
        body.append(f"%rule{i} = arith.andi {same}, %minor_ok{i} : i1")
        if how == "at_least":
            body.append(f"%newer{i} = arith.cmpi sgt, %major, %major{i} : i32")
            body.append(f"%rule{i}.any = arith.ori %newer{i}, %rule{i} : i1")
            terms.append(f"%rule{i}.any")
        else:
            terms.append(f"%rule{i}")
    runs = terms[0]
    for i, term in enumerate(terms[1:]):
        body.append(f"%any{i} = arith.ori {runs}, {term} : i1")
        runs = f"%any{i}"
    body += [f"%ok = arith.andi %queried, {runs} : i1", "hal.return %ok : i1"]
    return ["hal.executable.condition(%device: !hal.device) -> i1 {", *_indent(body, 1), "}"]


def _executable(exe: Executable, entries: dict[str, str], object_data: dict[str, bytes]) -> list[str]:
    lines = [f"hal.executable private @{exe.symbol} {{"]
    for v in exe.variants:
        path = exe.object_paths[v.name]
        data = object_data.get(path)
        obj = _OBJECT.format(path=path) if data is None else _OBJECT_EMBEDDED.format(path=path, hex=data.hex().upper(), size=len(data))
        variant = [_VARIANT_OPEN.format(name=v.name, arch=v.target_arch.name, object=obj), *_indent(_condition(v), 1)]
        for ordinal, k in enumerate(exe.kernels):
            variant += _indent(_export(k, entries[k.name], ordinal, k.shared_memory_for(v)), 1)
        variant.append("}")
        lines += _indent(variant, 1)
    lines.append("}")
    return lines


def _export(k: KernelSpec, entry: str, ordinal: int, shared_memory: int) -> list[str]:
    # shared_memory: this variant's size (per-arch specs give each variant its own).
    # "%w." keeps workload names apart from %device whatever the user calls them.
    workloads = "".join(f", %w.{w}: index" for w in k.workloads)
    body: list[str] = []
    counter = iter(range(1 << 30))
    values = {w: f"%w.{w}" for w in k.workloads}
    grid = [ex.lower_to_arith(g, values, lambda: f"%t.{next(counter)}", body) for g in k.grid]
    body.append(f"hal.return {', '.join(grid)} : index, index, index")
    x, y, z = k.block
    shared = f", workgroup_local_memory = {shared_memory} : index" if shared_memory else ""
    return [
        _EXPORT_OPEN.format(entry=entry, ordinal=ordinal, layout=k.function, workloads=workloads),
        *_indent(body, 1),
        _EXPORT_CLOSE.format(x=x, y=y, z=z, shared=shared),
    ]


def _tensor_type(t: TensorParam) -> str:
    return tensor_type(t.dtype, [d.value if isinstance(d, ex.Num) else None for d in t.shape])


def _wrapper(k: KernelSpec, exe: Executable, module: ModuleSpec, entry: str, function: str, checked: bool = True) -> list[str]:
    b = FunctionBuilder(k.name, checked=checked)
    symbols: dict[str, str] = {}
    dim_values: dict[tuple[str, int], str] = {}

    # Bind each shape symbol at its first input dim; every later use must agree.
    for t in k.inputs:
        for i, d in enumerate(t.shape):
            if isinstance(d, ex.Num):
                continue
            value = f"%{t.name}.d{i}"
            b.lines.append(f"{value} = tensor.dim %{t.name}, {b.constant(i)} : {_tensor_type(t)}")
            dim_values[(t.name, i)] = value
            if d.name in symbols:
                b.check("eq", value, symbols[d.name], f"{t.name} dim {i} must equal {d.name} (the size of {_first_binding(k, d.name)})")
            else:
                symbols[d.name] = value
    for s in k.scalar_args:
        if s.stype.integer:
            symbols.setdefault(s.name, b.to_index(f"%{s.name}", s.stype))

    def lower(e: ex.Expr) -> str:
        return ex.lower_to_arith(e, symbols, b.fresh, b.lines)

    # A divisor that depends on sizes is checked before anything divides by it (arith's
    # divisions by zero are undefined).
    for label, divisor in k.size_divisors():
        b.check("ne", lower(divisor), b.constant(0), f"{label} divides by {divisor}, which is 0 for these sizes")

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
        dims = "{" + ", ".join(dyn) + "}" if dyn else ""
        name = f"%{t.name}"
        if t.role == "output":
            # flow.tensor.alloca, not tensor.empty: tensor.empty is pure, so IREE would merge
            # two fresh outputs of one type and shape into ONE buffer (CSE) and the kernel's
            # two outputs would alias. An alloca is an allocation: each output gets its own.
            name = f"%{t.name}.init"
            b.lines.append(f"{name} = flow.tensor.alloca : {_tensor_type(t)}{dims}")
        operands.append(name)
        operand_types.append(f"{_tensor_type(t)}{dims}")
        if t.writable:
            results.append(f"{name}{dims}")
    if len(constants) != _constant_count(k):
        raise AssertionError(f"{k.name}: {len(constants)} push constants packed, layout declares {_constant_count(k)}")
    operands += constants
    operand_types += ["i32"] * len(constants)

    workloads = ", ".join(symbols[w] for w in k.workloads)
    targets = ", ".join(f"@{exe.symbol}::@{v.name}::@{entry}" for v in exe.variants)
    # Names with a "." can't collide with the C parameter names used for the arguments.
    lhs = "%dispatch.result" if len(results) == 1 else f"%dispatch.results:{len(results)}"
    rhs_results = results[0] if len(results) == 1 else f"({', '.join(results)})"
    b.lines.append(
        f"{lhs} = flow.dispatch {{{targets}}}[{workloads}]({', '.join(operands)}) : ({', '.join(operand_types)}) -> {rhs_results}"
    )
    returned = [lhs] if len(results) == 1 else [f"%dispatch.results#{i}" for i in range(len(results))]
    out_types = [_tensor_type(t) for t in k.outputs]
    b.lines.append(f"return {', '.join(returned)} : {', '.join(out_types)}")

    args = [f"%{t.name}: {_tensor_type(t)}" for t in k.inputs] + [f"%{s.name}: {s.stype.func_arg}" for s in k.scalar_args]
    ret = result_types(out_types)
    # A prebuilt kernel runs on its objects' archs, not the module's.
    archs = list(dict.fromkeys(a.name for v in exe.variants for a in v.archs)) if k.objects else [a.name for a in module.archs]
    description = dict(k.describe(), archs=archs, objects="+".join(o.kind for o in k.objects) if k.objects else module.objects)
    reflection = mlir_string(encode(description))
    # Only public wrappers are called from outside and need their description at run time.
    attributes = "" if function.startswith("private") else f" attributes {{iree.reflection = {{{REFLECTION_KEY} = {reflection}}}}}"
    head = f"func.func {function}({', '.join(args)}) -> {ret}{attributes} {{"
    return [head, *_indent(b.lines, 1), "}"]


def _pack_argument(b: FunctionBuilder, s) -> list[str]:
    """A scalar argument of the generated function → its 32-bit push constants."""
    st, value = s.stype, f"%{s.name}"
    b.check_scalar_argument(value, s.name, st)
    if st.kind == "float":
        return [b.op(f"arith.bitcast {value} : f32 to i32")]
    return b.split64(value) if st.nbytes == 8 else [value]


def _pack_expression(b: FunctionBuilder, s, value: str, arg_names: set[str]) -> list[str]:
    """A scalar computed from sizes (an index) → its 32-bit push constants, range-checked."""
    st = s.stype
    label = f"scalar {s.name}" if s.value == ex.Sym(s.name) else f"scalar {s.name} = {s.value}"
    wide = b.op(f"arith.index_cast {value} : index to i64")
    if st.kind == "float":
        as_float = b.op(f"arith.sitofp {wide} : i64 to f32")
        return [b.op(f"arith.bitcast {as_float} : f32 to i32")]
    lo, hi = st.int_range()
    # Dims are never negative, so a plain dim needs no lower bound check.
    if not (isinstance(s.value, ex.Sym) and s.value.name not in arg_names):
        b.check("sge", value, b.constant(lo), f"{label} is below the range of {st.ctype}")
    if hi < 2**63:  # index is 64-bit: nothing exceeds a 64-bit unsigned range
        b.check("sle", value, b.constant(hi), f"{label} exceeds the range of {st.ctype}")
    return b.split64(wide) if st.nbytes == 8 else [b.op(f"arith.trunci {wide} : i64 to i32")]


def _first_binding(k: KernelSpec, symbol: str) -> str:
    for t in k.inputs:
        for i, d in enumerate(t.shape):
            if isinstance(d, ex.Sym) and d.name == symbol:
                return f"{t.name} dim {i}"
    return symbol
