"""Programs: several kernel calls composed into one generated function, so that K dispatches
cost one IREE call.

    p = Program("chain")
    x, y = p.input("x", "f32", ["n"]), p.input("y", "f32", ["n"])
    t = x
    for _ in range(10):
        t = p.call(axpby, t, y, 1.0, 0.5)      # a KernelSpec of the module; scalars as numbers
    p.output(t)
    p.build(module_spec, "build/chain.vmfb")   # → runtime.load("build/chain.vmfb").chain(x, y)

Every call is checked against the kernel's declaration when it is made (dtype, rank, static
and named dims, scalar types and ranges), so a wrong program fails in Python, naming the
kernel and the parameter, before anything is built. The program is written as MLIR that
declares the kernels' generated functions and calls them, and `pipeline.build(...,
program=...)` links it with the kernels: the same path as a hand-written program such as
mlir/mixed_invocation.mlir.

Checked once, at entry. Every size in a program is an expression of its inputs' dims and its
integer scalars (each call's output shape is derived from its operands), so the relations each
kernel's function would check with `cf.assert` on every call (equal sizes, non-negative output
dims, sizes that fit a scalar's C type) are known when the program is built. Those that hold
for any input are dropped, those that can't hold are refused in Python, and the rest are
checked once at the top of the generated function, before the first dispatch. The program
calls the kernels' unchecked functions (`@<module>.<function>.unchecked`, emit.py): IREE 3.13
ends its command buffer at every assert, so per-call asserts would cost one submission per
kernel call (24 µs per dispatch instead of 4.5 µs on an H100, docs/benchmarks.md).

The generated function carries a description of its inputs, scalars and those relations
(reflection key `iree_dispatch.program`), so `runtime.load` checks its calls in Python before
launch, like a kernel's; callers that bypass Python (iree-run-module) meet the same checks in
the IR.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core import expr as ex
from ..core.contract import PROGRAM_REFLECTION_KEY, RELATIONS, ProgramDescription, Requirement, ScalarDescription, SizeCheck, TensorDescription, encode, scalar_argument
from ..core.dtypes import ELEMENT_TYPES, SCALAR_HINT, SCALAR_TYPES, ScalarType
from ..frontend.spec import KernelSpec, ModuleSpec
from . import ir
from .emit import UNCHECKED_SUFFIX
from .ir import FunctionBuilder, tensor_type
from .pipeline import build

Dim = int | str | None  # static size, a named size (an input dim or integer scalar), or None for an expression of them


@dataclass(frozen=True, eq=False)
class Value:
    """A tensor of the program: an input, or a result of a call. `dims`: each dim as an
    expression of the program's input dims and integer scalars (a Num when static)."""

    program: Program
    ssa: str
    dtype: str  # MLIR element type
    dims: tuple[ex.Expr, ...]
    origin: str  # for messages: "input 'x'", "result 'out' of call 3 (axpby)"

    @property
    def shape(self) -> tuple[Dim, ...]:
        return tuple(d.value if isinstance(d, ex.Num) else d.name if isinstance(d, ex.Sym) else None for d in self.dims)

    @property
    def type(self) -> str:
        return tensor_type(self.dtype, self.shape)

    def __repr__(self) -> str:
        return f"<program {self.program.name} value {self.origin}: {self.type}>"


@dataclass(frozen=True, eq=False)
class Scalar:
    """A scalar argument of the program's function, passed on to kernel calls."""

    program: Program
    name: str
    stype: ScalarType

    def __repr__(self) -> str:
        return f"<program {self.program.name} scalar {self.name}: {self.stype.ctype}>"


@dataclass(frozen=True)
class _Check:
    """A relation between sizes the program's kernels need, checked at entry: `lhs op rhs`
    (op: an arith.cmpi predicate of contract.RELATIONS)."""

    op: str
    lhs: ex.Expr
    rhs: ex.Expr
    message: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.op, str(self.lhs), str(self.rhs))

    def describe(self) -> SizeCheck:
        return SizeCheck(self.op, _expr_text(self.lhs), _expr_text(self.rhs), self.message)


_PYTHON_OPS = {"eq": "==", "ne": "!=", "sge": ">=", "sle": "<="}


@dataclass(frozen=True)
class _Call:
    """One func.call line; rendered when the module name is known."""

    lhs: str
    kernel: KernelSpec
    operands: tuple[str, ...]

    def render(self, module: str) -> str:
        k = self.kernel
        return ir.call(self.lhs, f"{module}.{k.function}{UNCHECKED_SUFFIX}", self.operands, _param_types(k), _result_types(k))


class Program:
    """A function of kernel calls. `name` is both the function's and the vmfb module's name."""

    def __init__(self, name: str):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"program name {name!r} must be an identifier (letters, digits, _)")
        self.name = name
        self._inputs: list[Value] = []
        self._scalars: list[Scalar] = []
        self._lines: list[str | _Call] = []  # the function body, in order
        self._kernels: dict[str, KernelSpec] = {}  # function name → kernel, for declarations
        self._constants: dict[tuple[str, int | float], str] = {}
        self._checks: dict[tuple[str, str, str], _Check] = {}  # by key: each relation once, in order
        # What the calls' kernels require of sizes the program knows only at run time, in the
        # program's terms, with the message that names the call: each relation once, in order.
        self._requires: dict[str, tuple[ex.Relation, str]] = {}
        self._dim_names: dict[str, str] = {}  # input dim name → where it was first used
        self._outputs: tuple[Value, ...] = ()
        self._calls = 0

    # -- building the program ------------------------------------------------------------

    def input(self, name: str, dtype: str | np.dtype | type, shape: Sequence[str | int]) -> Value:
        """A tensor argument. dtype: an MLIR element type ("f32") or a numpy dtype;
        shape: dims as integers (static) or names (dynamic; equal names are equal sizes)."""
        self._check_new_name(name)
        element = _element_type(dtype, f"program {self.name}: input {name!r}")
        if isinstance(shape, (str, int)) or not shape:
            raise ValueError(f"program {self.name}: input {name!r} needs a non-empty list of dims, got {shape!r}")
        dims: list[ex.Expr] = []
        for i, d in enumerate(shape):
            parsed = ex.parse(d, f"program {self.name}: input {name!r} dim {i}") if isinstance(d, (str, int)) else None
            if not (isinstance(parsed, ex.Num) and parsed.value >= 0 or isinstance(parsed, ex.Sym)):
                raise ValueError(f"program {self.name}: input {name!r} dim {i} is {d!r}; dims must be names or non-negative integers")
            if isinstance(parsed, ex.Sym) and any(s.name == parsed.name for s in self._scalars):
                raise ValueError(f"program {self.name}: input {name!r} dim {i} is named {parsed.name!r} like a scalar of the program; sizes and scalars need distinct names")
            dims.append(parsed)
        for i, d in enumerate(dims):
            if isinstance(d, ex.Sym):
                self._dim_names.setdefault(d.name, f"input {name!r} dim {i}")
        value = Value(self, ir.value(name), element, tuple(dims), f"input {name!r}")
        self._inputs.append(value)
        return value

    def scalar(self, name: str, ctype: str) -> Scalar:
        """A scalar argument of the C type `ctype` ("float", "int", "double", ...), passed to
        kernel parameters of the same type; called from Python like the kernel's scalars."""
        self._check_new_name(name)
        stype = SCALAR_TYPES.get(ctype) if isinstance(ctype, str) else None
        if stype is None:
            raise TypeError(f"program {self.name}: scalar {name!r} has type {ctype!r}; {SCALAR_HINT}")
        if name in self._dim_names:
            raise ValueError(f"program {self.name}: scalar {name!r} has the name of a size ({self._dim_names[name]}); sizes and scalars need distinct names")
        scalar = Scalar(self, name, stype)
        self._scalars.append(scalar)
        return scalar

    def call(self, kernel: KernelSpec, *args, **kwargs) -> Value | tuple[Value, ...]:
        """Calls `kernel` with tensors (Values of this program) and scalars (Python numbers,
        which become constants, or Scalars); returns its outputs, one Value or a tuple, in the
        order of the kernel's writable parameters."""
        if not isinstance(kernel, KernelSpec):
            raise TypeError(f"program {self.name}: call() takes a KernelSpec first, got {type(kernel).__name__}")
        where = f"program {self.name}: call {self._calls} to {kernel.name}"
        if struct := next((s for s in kernel.scalar_args if s.stype.kind == "struct"), None):
            raise TypeError(f"{where}: the kernel takes {struct.stype.ctype} {struct.name!r} by value, which programs don't pass yet; call its function from Python")
        known = self._kernels.get(kernel.function)
        if known is not None and known != kernel:
            raise ValueError(f"{where}: another kernel with function name {kernel.function!r} ({known.name}) is already called in this program")
        values = _bind(kernel, args, kwargs, where)
        sizes: dict[str, tuple[ex.Expr, str]] = {}  # kernel symbol → its size in the program, and where it came from
        operands: list[str] = []
        checks: list[_Check] = []  # what this call needs checked at entry
        requires: list[tuple[ex.Relation, str]] = []  # and of what its kernel requires
        lines, constants = len(self._lines), dict(self._constants)
        try:
            for t, value in zip(kernel.inputs, values):
                operands.append(self._tensor_operand(where, t, value, sizes, checks))
            for s, value in zip(kernel.scalar_args, values[len(kernel.inputs) :]):
                operands.append(self._scalar_operand(where, s, value, sizes))
            out_dims = [tuple(self._size(where, f"output {t.name!r} dim {i} = {d}", d, sizes, dim=True) for i, d in enumerate(t.shape))
                        for t in kernel.outputs]
            self._kernel_relations(where, kernel, sizes, out_dims, checks)
            self._kernel_requires(where, kernel, sizes, requires)
        except (TypeError, ValueError):
            # A refused call leaves the program as it was (no stray casts or constants).
            del self._lines[lines:]
            self._constants = constants
            raise
        for check in checks:
            self._checks.setdefault(check.key, check)
        for relation, message in requires:
            self._requires.setdefault(relation.text, (relation, message))

        index = self._calls
        kernel_types = _result_types(kernel)
        lhs = ir.results_name(ir.value(f"r.{index}"), len(kernel_types))
        self._lines.append(_Call(lhs, kernel, tuple(operands)))
        results = []
        for i, (t, kernel_type, dims) in enumerate(zip(kernel.outputs, kernel_types, out_dims)):
            value = Value(self, ir.result_value(lhs, len(kernel_types), i), t.dtype, dims, f"result {t.name!r} of call {index} to {kernel.name}")
            if value.type != kernel_type:
                # The program knows more of the shape (static sizes) than the kernel's type says.
                cast = ir.value(f"r.{index}.{i}")
                self._lines.append(ir.tensor_cast(cast, value.ssa, kernel_type, value.type))
                value = Value(self, cast, value.dtype, value.dims, value.origin)
            results.append(value)
        self._kernels[kernel.function] = kernel
        self._calls += 1
        return results[0] if len(results) == 1 else tuple(results)

    def output(self, *values: Value) -> None:
        """The function's results, in order (tensors of this program)."""
        if not values:
            raise ValueError(f"program {self.name}: output() needs at least one value")
        for i, v in enumerate(values):
            if not isinstance(v, Value) or v.program is not self:
                raise TypeError(f"program {self.name}: output {i} must be a value of this program (from input() or call()), got {v!r}")
        self._outputs = values

    # -- results -------------------------------------------------------------------------

    def describe(self, archs: Sequence[str] = ()) -> ProgramDescription:
        """The function's description, which runtime's KernelFunction checks calls with."""
        return ProgramDescription(
            name=self.name,
            function=self.name,
            archs=tuple(archs),
            calls=self._calls,
            inputs=tuple(TensorDescription(v.ssa[1:], v.dtype, tuple(v.shape)) for v in self._inputs),
            scalars=tuple(ScalarDescription.of(s.name, s.stype) for s in self._scalars),
            outputs=tuple(TensorDescription(f"result{i}", v.dtype, tuple("?" if d is None else d for d in v.shape)) for i, v in enumerate(self._outputs)),
            # Relations between sizes beyond equal names (runtime's KernelFunction checks them too).
            checks=tuple(c.describe() for c in self._checks.values()),
            requires=tuple(Requirement(relation.text, message) for relation, message in self._requires.values()),
        )

    def entry_checks(self) -> list[str]:
        """What the generated function checks at entry, as `lhs op rhs: message` (for tests and
        `inspect`-like output); program scalars' C-type ranges come on top."""
        return [f"{_expr_text(c.lhs)} {_PYTHON_OPS[c.op]} {_expr_text(c.rhs)}: {c.message}" for c in self._checks.values()] + [
            f"{relation.text}: {message}" for relation, message in self._requires.values()
        ]

    def mlir(self, module: ModuleSpec) -> str:
        """The program as MLIR, declaring the kernels of `module` it calls."""
        if not self._outputs:
            raise ValueError(f"program {self.name}: no outputs; call output(...) with the values to return")
        for function, kernel in self._kernels.items():
            declared = next((k for k in module.kernels if k.function == function), None)
            if declared != kernel:
                raise ValueError(
                    f"program {self.name}: calls kernel {kernel.name} (function {function!r}), which module {module.name} "
                    f"{'declares differently' if declared else 'does not have'}; build with the ModuleSpec the kernel came from"
                )
        args = [ir.typed(v.ssa, v.type) for v in self._inputs] + [ir.argument(s.name, s.stype.func_arg) for s in self._scalars]
        output_types = [v.type for v in self._outputs]
        description = encode(self.describe([a.name for a in module.archs]))
        declarations = [ir.declaration(f"{module.name}.{function}{UNCHECKED_SUFFIX}", _param_types(kernel), _result_types(kernel)) for function, kernel in self._kernels.items()]
        body = [*self._entry_check_lines(), *(line.render(module.name) if isinstance(line, _Call) else line for line in self._lines)]
        body.append(ir.return_op([v.ssa for v in self._outputs], output_types))
        function = ir.function(self.name, args, output_types, body, attributes=ir.reflection(PROGRAM_REFLECTION_KEY, description))
        lines = [
            ir.comment(f"Generated by iree_dispatch.program: program {self.name}, {self._calls} kernel call(s), on module {module.name}."),
            *ir.module(self.name, [*declarations, *function]),
        ]
        return "\n".join(lines) + "\n"

    def build(self, module: ModuleSpec, output: str | Path, *, emit_mlir: str | Path | None = None, program_mlir: str | Path | None = None,
              progress: Callable[[str], None] | None = None, **options):
        """Writes the program's MLIR (`program_mlir`, default `<output stem>.program.mlir` beside
        the output) and builds it with `module`'s kernels into the .vmfb `output`; returns
        pipeline.build's BuildResult. emit_mlir: also write the linked IR there. options:
        pipeline.build's `asynchronous`, `strip_assertions` (drops the entry checks too;
        not needed for one command buffer per call, see the module docstring) and
        `iree_compile_flags`."""
        output = Path(output)
        text = self.mlir(module)
        path = Path(program_mlir) if program_mlir else output.with_name(f"{output.stem}.program.mlir")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return build(module, output, emit_mlir=emit_mlir, program=path, progress=progress, **options)

    # -- internals -----------------------------------------------------------------------

    def _check_new_name(self, name: str) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"program {self.name}: argument name {name!r} must be an identifier (letters, digits, _)")
        if any(v.ssa == ir.value(name) for v in self._inputs) or any(s.name == name for s in self._scalars):
            raise ValueError(f"program {self.name}: there is already an argument named {name!r}")

    def _tensor_operand(self, where: str, t, value, sizes: dict[str, tuple[ex.Expr, str]], checks: list[_Check]) -> str:
        what = f"{where}: argument {t.name!r}"
        if not isinstance(value, Value):
            raise TypeError(f"{what} must be a tensor of this program (from input() or an earlier call()), got {type(value).__name__}")
        if value.program is not self:
            raise ValueError(f"{what} is {value.origin} of program {value.program.name}, not of this program ({self.name})")
        if value.dtype != t.dtype:
            raise TypeError(f"{what} must have element type {t.dtype}, but {value.origin} has {value.dtype}")
        if len(value.dims) != len(t.shape):
            raise ValueError(f"{what} must have rank {len(t.shape)} (shape [{', '.join(map(str, t.shape))}]), but {value.origin} has shape {_shape_text(value.dims)}")
        for i, (want, got) in enumerate(zip(t.shape, value.dims)):
            if isinstance(want, ex.Num):
                if got != want:
                    raise ValueError(f"{what} dim {i} must be {want.value}, but {value.origin} has size {_dim_text(got)} there; declare it static")
                continue
            here = f"{value.origin} dim {i}"
            if want.name not in sizes:
                sizes[want.name] = (got, here)
                continue
            known, origin = sizes[want.name]
            if got == known:
                continue
            # Sizes that are certainly different are refused here: two constants, or two input
            # dims given different names. The rest is checked when the program runs.
            if all(isinstance(d, ex.Num) for d in (got, known)) or all(isinstance(d, ex.Sym) and d.name in self._dim_names for d in (got, known)):
                raise ValueError(f"{what} dim {i} is {_dim_text(got)}, but {want.name} = {_dim_text(known)} (from {origin}); the kernel needs them equal")
            checks.append(_Check("eq", got, known, f"{what} dim {i} ({here}) must equal {want.name} (from {origin})"))
        param_type = tensor_type(t.dtype, _kernel_dims(t.shape))
        if param_type == value.type:
            return value.ssa
        cast = ir.value(f"cast.{self._calls}.{t.name}")
        self._lines.append(ir.tensor_cast(cast, value.ssa, value.type, param_type))
        return cast

    def _scalar_operand(self, where: str, s, value, sizes: dict[str, tuple[ex.Expr, str]]) -> str:
        if isinstance(value, Scalar):
            if value.program is not self:
                raise ValueError(f"{where}: argument {s.name!r} is scalar {value.name!r} of program {value.program.name}, not of this program")
            if (value.stype.kind, value.stype.nbytes) != (s.stype.kind, s.stype.nbytes):
                raise TypeError(
                    f"{where}: argument {s.name!r} is a {s.stype.ctype}, but scalar {value.name!r} is a {value.stype.ctype}; "
                    f"declare it as p.scalar({value.name!r}, {s.stype.ctype!r})"
                )
            # As in the kernel's function (emit.py), an integer argument names a size unless a
            # tensor dim named it first.
            if s.stype.integer:
                sizes.setdefault(s.name, (ex.Sym(value.name), f"scalar {value.name!r}"))
            return ir.value(value.name)
        if isinstance(value, Value):
            raise TypeError(f"{where}: argument {s.name!r} is a scalar ({s.stype.ctype}), got {value.origin}")
        # The run-time conversions: one place decides how numbers travel.
        converted = scalar_argument(where, ScalarDescription.of(s.name, s.stype), value)
        if s.stype.integer:
            sizes.setdefault(s.name, (ex.Num(int(value)), f"argument {s.name!r}"))
        return self._constant(converted, s.stype.func_arg)

    def _size(self, where: str, what: str, e: ex.Expr, sizes: dict[str, tuple[ex.Expr, str]], dim: bool = False) -> ex.Expr:
        """A kernel's size expression in the program's terms (its symbols replaced by their
        program sizes); a Num when every size it uses is static. dim: it is a tensor dim, which
        can't be negative."""
        try:
            program_size = _substitute(e, {name: size for name, (size, _) in sizes.items()})
        except KeyError as exc:
            raise ValueError(f"{where}: {what} uses {exc.args[0]!r}, which no argument of the kernel gives") from None
        except ZeroDivisionError:
            raise ValueError(f"{where}: {what} divides by zero with this call's sizes") from None
        if dim and isinstance(program_size, ex.Num) and program_size.value < 0:
            raise ValueError(f"{where}: {what} is {program_size.value} with this call's sizes; sizes can't be negative")
        return program_size

    def _kernel_relations(self, where: str, kernel: KernelSpec, sizes: dict[str, tuple[ex.Expr, str]], out_dims: list[tuple[ex.Expr, ...]],
                          checks: list[_Check]) -> None:
        """The checks of the kernel's function (emit._wrapper) other than equal dims, in the
        program's terms: done now where every size is static, else added to `checks`."""

        def need(op: str, lhs: ex.Expr, bound: int, message: str) -> None:
            if isinstance(lhs, ex.Num):
                if not RELATIONS[op](lhs.value, bound):
                    raise ValueError(f"{where}: {message} ({lhs.value})")
            else:
                checks.append(_Check(op, lhs, ex.Num(bound), f"{where}: {message}"))

        # As the kernel's function (emit._wrapper): a divisor that depends on sizes must not be 0.
        for label, divisor in kernel.size_divisors():
            need("ne", self._size(where, label, divisor, sizes), 0, f"{label} divides by {divisor}, which is 0 for these sizes")

        for t, dims in zip(kernel.outputs, out_dims):
            for i, (d, program_size) in enumerate(zip(t.shape, dims)):
                # A named dim is an input's dim or an integer argument; emit.py checks expressions only.
                if t.role == "output" and not isinstance(d, (ex.Num, ex.Sym)):
                    need("sge", program_size, 0, f"output {t.name} dim {i} = {d} is negative")
        arg_names = {a.name for a in kernel.scalar_args}
        for s in kernel.scalars:
            if s.value is None or s.stype.kind == "float":  # a float takes any size (emit._pack_expression)
                continue
            label = f"scalar {s.name}" if s.value == ex.Sym(s.name) else f"scalar {s.name} = {s.value}"
            value = self._size(where, label, s.value, sizes)
            lo, hi = s.stype.int_range()
            # As emit._pack_expression: a plain dim is never negative; index is 64-bit.
            if not (isinstance(s.value, ex.Sym) and s.value.name not in arg_names):
                need("sge", value, lo, f"{label} is below the range of {s.stype.ctype} ({lo})")
            if hi < 2**63:
                need("sle", value, hi, f"{label} exceeds the range of {s.stype.ctype} ({hi})")

    def _kernel_requires(self, where: str, kernel: KernelSpec, sizes: dict[str, tuple[ex.Expr, str]], requires: list[tuple[ex.Relation, str]]) -> None:
        """What the kernel's spec requires of its sizes (its function checks it, emit._wrapper),
        in the program's terms: decided now where every size it names is static, else added to
        `requires` for the program's entry."""
        for relation in kernel.requires:
            label = f"requires {relation.text}"
            comparisons = tuple(ex.Comparison(c.op, self._size(where, label, c.lhs, sizes), self._size(where, label, c.rhs, sizes)) for c in relation.any_of)
            if any(not isinstance(side, ex.Num) for c in comparisons for side in (c.lhs, c.rhs)):
                text = " or ".join(f"{_expr_text(c.lhs)} {c.op} {_expr_text(c.rhs)}" for c in comparisons)
                requires.append((ex.Relation(comparisons, text), f"{where}: {label}"))
            elif not ex.holds(ex.Relation(comparisons, relation.text), {}):
                given = ", ".join(f"{name} = {_expr_text(sizes[name][0])}" for name in ex.relation_symbols(relation))
                raise ValueError(f"{where}: {label}, but {given}")

    def _entry_check_lines(self) -> list[str]:
        """MLIR lines that check, before the first dispatch, the program scalars' C-type ranges
        (as a kernel's function checks its own) and every relation the calls need."""
        b = FunctionBuilder("", prefix="%chk")  # every message names the program itself
        for s in self._scalars:
            b.check_scalar_argument(ir.value(s.name), f"program {self.name}: scalar {s.name}", s.stype)
        values: dict[str, str] = {}  # size name → index SSA value
        first: dict[str, str] = {}  # size name → the input dim that gives it
        for v in self._inputs:
            for i, d in enumerate(v.dims):
                if not isinstance(d, ex.Sym):
                    continue
                dim = b.tensor_dim(v.ssa, i, v.type)
                if d.name in values:
                    # Equal names are equal sizes: what each kernel's function checked per call.
                    b.check("eq", dim, values[d.name], f"program {self.name}: {v.origin} dim {i} must equal {d.name} (the size of {first[d.name]})")
                else:
                    values[d.name], first[d.name] = dim, f"{v.origin} dim {i}"
        for s in self._scalars:
            if s.stype.integer:
                values[s.name] = b.to_index(ir.value(s.name), s.stype)
        for c in self._checks.values():
            lhs = ex.lower_to_arith(c.lhs, values, b.fresh, b.lines)
            rhs = ex.lower_to_arith(c.rhs, values, b.fresh, b.lines)
            b.check(c.op, lhs, rhs, c.message)
        for relation, message in self._requires.values():
            b.check_relation(relation, values, message)
        return b.lines

    def _constant(self, value: int | float, type_: str) -> str:
        key = (type_, value)
        if key not in self._constants:
            name = ir.value(f"c.{len(self._constants)}")
            # f32 constants are written as their bits: exactly the float the runtime would pass.
            literal = f"0x{int(np.array(value, np.float32).view(np.uint32)):08X}" if type_ == "f32" else str(value)
            self._lines.append(ir.constant(name, literal, type_))
            self._constants[key] = name
        return self._constants[key]


def _bind(kernel: KernelSpec, args: tuple, kwargs: dict, where: str) -> list:
    params = [t.name for t in kernel.inputs] + [s.name for s in kernel.scalar_args]
    if len(args) > len(params):
        raise TypeError(f"{where}: {kernel.name} takes {len(params)} arguments ({', '.join(params)}) but {len(args)} were given")
    values = dict(zip(params, args))
    for key, value in kwargs.items():
        if key not in params:
            raise TypeError(f"{where}: {kernel.name} got an unexpected keyword argument {key!r} (parameters: {', '.join(params)})")
        if key in values:
            raise TypeError(f"{where}: {kernel.name} got multiple values for argument {key!r}")
        values[key] = value
    missing = [p for p in params if p not in values]
    if missing:
        raise TypeError(f"{where}: {kernel.name} missing {len(missing)} argument(s): {', '.join(missing)} (parameters: {', '.join(params)})")
    return [values[p] for p in params]


def _substitute(e: ex.Expr, env: dict[str, ex.Expr]) -> ex.Expr:
    """`e` with each name replaced by env's expression; folded to a Num when nothing is left
    unknown. KeyError for a name env lacks."""
    if isinstance(e, ex.Num):
        return e
    if isinstance(e, ex.Sym):
        result = env[e.name]
    elif isinstance(e, ex.BinOp):
        result = ex.BinOp(e.op, _substitute(e.lhs, env), _substitute(e.rhs, env))
    else:
        result = ex.Call(e.func, tuple(_substitute(a, env) for a in e.args))
    return result if ex.symbols(result) else ex.Num(ex.evaluate(result, {}))


def _expr_text(e: ex.Expr) -> str:
    """`e` as ex.parse reads it back (a negative number as a subtraction: parse has no unary minus)."""
    if isinstance(e, ex.Num):
        return str(e.value) if e.value >= 0 else f"(0 - {-e.value})"
    if isinstance(e, ex.Sym):
        return e.name
    if isinstance(e, ex.BinOp):
        return f"({_expr_text(e.lhs)} {e.op} {_expr_text(e.rhs)})"
    return f"{e.func}({', '.join(map(_expr_text, e.args))})"


def _dim_text(d: ex.Expr) -> str:
    return str(d.value) if isinstance(d, ex.Num) else repr(str(d))


def _param_types(k: KernelSpec) -> list[str]:
    """The argument types of a kernel's generated function (emit.py's wrapper)."""
    return [tensor_type(t.dtype, _kernel_dims(t.shape)) for t in k.inputs] + [s.stype.func_arg for s in k.scalar_args]


def _result_types(k: KernelSpec) -> list[str]:
    return [tensor_type(t.dtype, _kernel_dims(t.shape)) for t in k.outputs]


def _kernel_dims(shape: tuple[ex.Expr, ...]) -> tuple[Dim, ...]:
    return tuple(d.value if isinstance(d, ex.Num) else None for d in shape)


def _shape_text(dims: Sequence[ex.Expr]) -> str:
    return "[" + ", ".join(map(str, dims)) + "]"


def _element_type(dtype, where: str) -> str:
    if isinstance(dtype, str) and dtype in ELEMENT_TYPES:
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    for mlir, et in ELEMENT_TYPES.items():
        if et.numpy == name:
            return mlir
    raise TypeError(f"{where}: unknown element type {dtype!r}; use one of {', '.join(ELEMENT_TYPES)} or the matching numpy dtype")
