"""The one place that spells IREE's input IR (iree-base-compiler 3.13, strict properties:
inherent attributes in `<{...}>`): types, string literals, modules and functions, the
executables (`hal.executable`, its variants, conditions and exports, the pipeline layouts and
targets), and function bodies: fresh SSA names, constants, run-time checks, the scalar-argument
checks every generated function makes, casts, allocations and dispatches. The kernels' module
(emit.py) and programs (program.py) are written with it and decide only what goes where, so an
IREE version bump is an edit here. (Grid and shape expressions are lowered to `arith` by
core/expr.py, which run-time checks share.)
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core import expr as ex
from ..core.dtypes import ScalarType


def mlir_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def tensor_type(dtype: str, dims: Sequence[int | None]) -> str:
    """`tensor<4x?xf32>`: an int is a static dim, None a dynamic one."""
    return f"tensor<{'x'.join(str(d) if isinstance(d, int) else '?' for d in dims)}x{dtype}>"


def result_types(types: Sequence[str]) -> str:
    """A function's result types: one bare, several in parentheses."""
    return types[0] if len(types) == 1 else f"({', '.join(types)})"


def indent(lines: Sequence[str], depth: int) -> list[str]:
    return [("  " * depth + line) if line else line for line in lines]


def value(name: str) -> str:
    """The SSA value named `name`: `%name`."""
    return f"%{name}"


def comment(text: str) -> str:
    return f"// {text}"


def constant(name: str, literal: str | int, type_: str) -> str:
    """`name = arith.constant literal : type`."""
    return f"{name} = arith.constant {literal} : {type_}"


def tensor_cast(name: str, tensor: str, from_type: str, to_type: str) -> str:
    return f"{name} = tensor.cast {tensor} : {from_type} to {to_type}"


def return_op(values: Sequence[str], types: Sequence[str]) -> str:
    return f"return {', '.join(values)} : {', '.join(types)}"


# ---- modules and functions ----


def attribute_alias(name: str, value: str) -> str:
    """`#name = value`, at the top of a module; used as `#name`."""
    return f"#{name} = {value}"


def module(name: str, body: Sequence[str]) -> list[str]:
    return [f"module @{name} {{", *indent(body, 1), "}"]


def argument(name: str, type_: str) -> str:
    """A function argument: `%name: type`."""
    return typed(value(name), type_)


def typed(ssa: str, type_: str) -> str:
    """An SSA value with its type, as arguments are declared: `%x: tensor<?xf32>`."""
    return f"{ssa}: {type_}"


def reflection(key: str, text: str) -> str:
    """The attribute dictionary that gives a function IREE reflection metadata `key` = `text`."""
    return f"{{iree.reflection = {{{key} = {mlir_string(text)}}}}}"


def function(symbol: str, arguments: Sequence[str], results: Sequence[str], body: Sequence[str], *, private: bool = False, attributes: str = "") -> list[str]:
    """A `func.func` with `body` (its lines, `return` included)."""
    attrs = f" attributes {attributes}" if attributes else ""
    head = f"func.func {'private ' if private else ''}@{symbol}({', '.join(arguments)}) -> {result_types(results)}{attrs} {{"
    return [head, *indent(body, 1), "}"]


def declaration(symbol: str, parameter_types: Sequence[str], results: Sequence[str]) -> str:
    """A private `func.func` declaration (no body), resolved when a program is linked."""
    return f"func.func private @{symbol}({', '.join(parameter_types)}) -> {result_types(results)}"


def call(results: str, symbol: str, operands: Sequence[str], operand_types: Sequence[str], result_types_: Sequence[str]) -> str:
    """`results = func.call @symbol(operands) : (types) -> results` (results: `%r` or `%r:2`)."""
    return f"{results} = func.call @{symbol}({', '.join(operands)}) : ({', '.join(operand_types)}) -> {result_types(result_types_)}"


def result_value(results: str, count: int, i: int) -> str:
    """The `i`th value of results `%r` (one) or `%r:N` (several, read as `%r#i`)."""
    return results if count == 1 else f"{results.partition(':')[0]}#{i}"


def results_name(name: str, count: int) -> str:
    """How `count` results named `name` are written on the left of `=`: `%r` or `%r:N`."""
    return name if count == 1 else f"{name}:{count}"


# ---- executables: hal.executable, variants, conditions, exports ----


def executable_target(arch: str) -> str:
    return f'#hal.executable.target<"cuda", "cuda-nvptx-fb", {{target_arch = "{arch}"}}>'


def pipeline_layout(constants: int, read_only: Sequence[bool]) -> str:
    """A layout of `constants` 32-bit push constants and one storage buffer per binding."""
    bindings = ", ".join(f"#hal.pipeline.binding<storage_buffer{', ReadOnly' if ro else ''}>" for ro in read_only)
    return f"#hal.pipeline.layout<constants = {constants}, bindings = [{bindings}]>"


def string_literal(text: str) -> str:
    """`text` as an MLIR string literal: a quote, a backslash and control characters (a file name
    may have any of them) escaped as MLIR reads them, `\\XX` in hex."""
    return '"' + "".join(f"\\{ord(c):02X}" if c in '"\\' or ord(c) < 0x20 else c for c in text) + '"'


def executable_object(path: str, data: bytes | None = None) -> str:
    """An object file the variant carries, by path, or with its bytes embedded."""
    path = string_literal(path)
    if data is None:
        return f'#hal.executable.object<{{path = {path}}}>'
    # Embedded bytes keep the path too: an object with data alone prints back as `{, data = ...}`,
    # which does not parse again.
    return f'#hal.executable.object<{{path = {path}, data = dense<"0x{data.hex().upper()}"> : vector<{len(data)}xi8>}}>'


def executable(symbol: str, variants: Sequence[list[str]]) -> list[str]:
    return [f"hal.executable private @{symbol} {{", *(line for v in variants for line in indent(v, 1)), "}"]


def executable_variant(name: str, target: str, obj: str, body: Sequence[str]) -> list[str]:
    """A variant for target alias `target` (`#target_sm_90`) that carries the object `obj`."""
    return [f"hal.executable.variant public @{name} target({target}) objects([{obj}]) {{", *indent(body, 1), "}"]


def variant_condition(rules: Sequence[tuple[int, int, str]]) -> list[str]:
    """`hal.executable.condition`: true when the device's compute capability matches any of
    `rules`, (major, minor, "exact" | "same_major" | "at_least") as variants.py writes them."""
    query = '%{name}.ok, %{name} = hal.device.query<%device : !hal.device> key("cuda.device" :: "compute_capability_{name}") : i1, i32'
    body = [query.format(name="major"), query.format(name="minor"), "%queried = arith.andi %major.ok, %minor.ok : i1"]
    terms = []
    for i, (major, minor, how) in enumerate(rules):
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
    return ["hal.executable.condition(%device: !hal.device) -> i1 {", *indent(body, 1), "}"]


def workload(name: str) -> str:
    """The export's workload argument for grid symbol `name` ("%w." keeps it apart from %device
    whatever the user calls it)."""
    return f"%w.{name}"


def executable_export(entry: str, ordinal: int, layout: str, workloads: Sequence[str], grid_body: Sequence[str], grid: Sequence[str],
                      block: Sequence[int], shared_memory: int) -> list[str]:
    """`hal.executable.export` of kernel `entry` with pipeline layout alias `layout`: its count
    region computes the grid (`grid_body`, then `grid`'s three values) from `workloads`."""
    args = "".join(f", {workload(w)}: index" for w in workloads)
    x, y, z = block
    shared = f", workgroup_local_memory = {shared_memory} : index" if shared_memory else ""
    return [
        f"hal.executable.export public @{entry} ordinal({ordinal}) layout({layout}) count(%device: !hal.device{args}) -> (index, index, index) {{",
        *indent([*grid_body, f"hal.return {', '.join(grid)} : index, index, index"], 1),
        f"}} <{{workgroup_size = [{x} : index, {y} : index, {z} : index]{shared}}}>",
    ]


class FunctionBuilder:
    """Lines of one function body: fresh SSA names, each constant once, and checks that fail
    the call (before any launch) with a message starting with `label` (if any). checked=False
    leaves the checks out (the caller has checked the same relations itself)."""

    def __init__(self, label: str, *, checked: bool = True, prefix: str = "%t"):
        self.label = label
        self.checked = checked
        self.prefix = prefix
        self.lines: list[str] = []
        self._counter = 0
        self._constants: dict[tuple[int, str], str] = {}

    def fresh(self) -> str:
        name = f"{self.prefix}.{self._counter}"
        self._counter += 1
        return name

    def op(self, text: str) -> str:
        """Appends `%new = <text>` and returns %new."""
        name = self.fresh()
        self.lines.append(f"{name} = {text}")
        return name

    def constant(self, value: int, type_: str = "index") -> str:
        if (value, type_) not in self._constants:
            name = f"{self.prefix}.c{'m' if value < 0 else ''}{abs(value)}{'' if type_ == 'index' else '_' + type_}"
            self.lines.append(constant(name, value, type_))
            self._constants[(value, type_)] = name
        return self._constants[(value, type_)]

    def check(self, predicate: str, lhs: str, rhs: str, message: str, type_: str = "index") -> None:
        """Fails the call unless `lhs <predicate> rhs` (an arith.cmpi predicate)."""
        if not self.checked:
            return
        self.assert_true(self.op(f"arith.cmpi {predicate}, {lhs}, {rhs} : {type_}"), message)

    def check_relation(self, relation: ex.Relation, values: dict[str, str], message: str) -> None:
        """Fails the call unless `relation` holds (`values`: each of its names' index value)."""
        if not self.checked:
            return
        self.assert_true(ex.lower_relation(relation, values, self.fresh, self.lines), message)

    def assert_true(self, ok: str, message: str) -> None:
        """Fails the call unless the i1 `ok` is true."""
        self.lines.append(f"cf.assert {ok}, {mlir_string(f'{self.label}: {message}' if self.label else message)}")

    def check_scalar_argument(self, value: str, name: str, stype: ScalarType) -> None:
        """The checks of a scalar argument that arrives wider than its C type: narrow integers
        within their range, half/bf16 as 16 bits (a caller such as iree-run-module may pass
        anything)."""
        if stype.integer and stype.nbytes < 4:
            lo, hi = stype.int_range()
            self.check("sge", value, self.constant(lo, "i32"), f"{name} is below the range of {stype.ctype} ({lo})", "i32")
            self.check("sle", value, self.constant(hi, "i32"), f"{name} exceeds the range of {stype.ctype} ({hi})", "i32")
        if stype.kind in ("half", "bf16"):
            self.check("ule", value, self.constant(0xFFFF, "i32"), f"{name} must be the 16 bits of a {stype.ctype}", "i32")

    def to_index(self, value: str, stype: ScalarType) -> str:
        """An integer scalar argument as an index (for sizes)."""
        cast = "index_cast" if stype.kind == "int" else "index_castui"
        return self.op(f"arith.{cast} {value} : {stype.func_arg} to index")

    def split64(self, value: str) -> list[str]:
        """An i64 as two i32 push constants, low word first (ptx_adapt.py reassembles them)."""
        low = self.cast("trunci", value, "i64", "i32")
        shifted = self.op(f"arith.shrui {value}, {self.constant(32, 'i64')} : i64")
        return [low, self.cast("trunci", shifted, "i64", "i32")]

    def cast(self, op: str, value: str, from_type: str, to_type: str) -> str:
        """`arith.<op>` (bitcast, index_cast, sitofp, trunci, ...) of `value` to `to_type`."""
        return self.op(f"arith.{op} {value} : {from_type} to {to_type}")

    def tensor_dim(self, tensor: str, i: int, type_: str, name: str | None = None) -> str:
        """Dim `i` of `tensor` (of type `type_`), as `name` (default: a fresh name)."""
        text = f"tensor.dim {tensor}, {self.constant(i)} : {type_}"
        if name is None:
            return self.op(text)
        self.lines.append(f"{name} = {text}")
        return name

    def alloca(self, name: str, type_: str, dims: Sequence[str]) -> str:
        """A fresh tensor of `type_` with dynamic `dims`: `flow.tensor.alloca`, not `tensor.empty`,
        which is pure, so IREE would merge two fresh outputs of one type and shape into ONE buffer
        (CSE) and two outputs of a kernel would alias. An alloca is an allocation: each its own."""
        self.lines.append(f"{name} = flow.tensor.alloca : {type_}{dynamic_dims(dims)}")
        return name

    def zeros(self, name: str, type_: str, dims: Sequence[str], nbytes: str, distinct: int) -> str:
        """A fresh tensor of `type_` (dynamic `dims`) whose `nbytes` bytes are zero: a splat of
        zero bytes bitcast to `type_` (so every element type, ui8 and bf16 too, is zero bits).
        Splats are pure, and IREE would merge two equal ones into ONE buffer that two outputs
        then share; `distinct` (0, 1, ... per function) gives each a byte tensor of its own
        rank (`tensor<?xi8>`, `tensor<1x?xi8>`, ...), so no two are equal."""
        bytes_type = f"tensor<{'1x' * distinct}?xi8>"
        zero = self.constant(0, "i8")
        self.lines.append(f"{name}.bytes = flow.tensor.splat {zero} : {bytes_type}{{{nbytes}}}")
        self.lines.append(f"{name} = flow.tensor.bitcast {name}.bytes : {bytes_type}{{{nbytes}}} -> {type_}{dynamic_dims(dims)}")
        return name

    def dispatch(self, results: str, targets: Sequence[str], workloads: Sequence[str], operands: Sequence[str], operand_types: Sequence[str],
                 tied_results: Sequence[str]) -> None:
        """`flow.dispatch` of the export `targets` (`@exe::@variant::@entry`, one per variant)
        over `workloads`; each result is tied to the operand (with its dims) it names."""
        rhs = tied_results[0] if len(tied_results) == 1 else f"({', '.join(tied_results)})"
        self.lines.append(f"{results} = flow.dispatch {{{', '.join(targets)}}}[{', '.join(workloads)}]({', '.join(operands)}) : ({', '.join(operand_types)}) -> {rhs}")

    def return_(self, values: Sequence[str], types: Sequence[str]) -> None:
        self.lines.append(return_op(values, types))


def dynamic_dims(dims: Sequence[str]) -> str:
    """The `{%d0, %d1}` that follows a type with dynamic dims (nothing when there are none)."""
    return "{" + ", ".join(dims) + "}" if dims else ""


def export_target(executable_symbol: str, variant: str, entry: str) -> str:
    return f"@{executable_symbol}::@{variant}::@{entry}"
