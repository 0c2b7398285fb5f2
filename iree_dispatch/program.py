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
declares the kernels' generated functions (`func.func private @<module>.<function>`) and calls
them, and `pipeline.build(..., program=...)` links it with the kernels: the same path as a
hand-written program such as mlir/mixed_invocation.mlir.

The generated function carries a description of its inputs and scalars (reflection key
`iree_dispatch.program`), so `runtime.load` checks its calls like a kernel's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from . import expr as ex
from .dtypes import ELEMENT_TYPES, SCALAR_HINT, SCALAR_TYPES, ScalarType
from .reflection import encode
from .runtime import PROGRAM_REFLECTION_KEY, _check_scalar
from .spec import KernelSpec, ModuleSpec

Dim = int | str | None  # static size, a named size (program input dims), or unknown


@dataclass(frozen=True, eq=False)
class Value:
    """A tensor of the program: an input, or a result of a call."""

    program: "Program"
    ssa: str
    dtype: str  # MLIR element type
    shape: tuple[Dim, ...]
    origin: str  # for messages: "input 'x'", "result 'out' of call 3 (axpby)"

    @property
    def type(self) -> str:
        return _tensor_type(self.dtype, self.shape)

    def __repr__(self) -> str:
        return f"<program {self.program.name} value {self.origin}: {self.type}>"


@dataclass(frozen=True, eq=False)
class Scalar:
    """A scalar argument of the program's function, passed on to kernel calls."""

    program: "Program"
    name: str
    stype: ScalarType

    def __repr__(self) -> str:
        return f"<program {self.program.name} scalar {self.name}: {self.stype.ctype}>"


@dataclass(frozen=True)
class _Call:
    """One func.call line; rendered when the module name is known."""

    lhs: str
    kernel: KernelSpec
    operands: tuple[str, ...]

    def render(self, module: str) -> str:
        k = self.kernel
        return f"{self.lhs} = func.call @{module}.{k.function}({', '.join(self.operands)}) : ({', '.join(_param_types(k))}) -> {_results(_result_types(k))}"


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
        dims: list[Dim] = []
        for i, d in enumerate(shape):
            parsed = ex.parse(d, f"program {self.name}: input {name!r} dim {i}") if isinstance(d, (str, int)) else None
            if isinstance(parsed, ex.Num) and parsed.value >= 0:
                dims.append(parsed.value)
            elif isinstance(parsed, ex.Sym):
                dims.append(parsed.name)
            else:
                raise ValueError(f"program {self.name}: input {name!r} dim {i} is {d!r}; dims must be names or non-negative integers")
        value = Value(self, f"%{name}", element, tuple(dims), f"input {name!r}")
        self._inputs.append(value)
        return value

    def scalar(self, name: str, ctype: str) -> Scalar:
        """A scalar argument of the C type `ctype` ("float", "int", "double", ...), passed to
        kernel parameters of the same type; called from Python like the kernel's scalars."""
        self._check_new_name(name)
        stype = SCALAR_TYPES.get(ctype) if isinstance(ctype, str) else None
        if stype is None:
            raise TypeError(f"program {self.name}: scalar {name!r} has type {ctype!r}; {SCALAR_HINT}")
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
        known = self._kernels.get(kernel.function)
        if known is not None and known != kernel:
            raise ValueError(f"{where}: another kernel with function name {kernel.function!r} ({known.name}) is already called in this program")
        values = _bind(kernel, args, kwargs, where)
        sizes: dict[str, tuple[Dim, str]] = {}  # kernel symbol → program dim, and where it came from
        operands: list[str] = []
        lines, constants = len(self._lines), dict(self._constants)
        try:
            for t, value in zip(kernel.inputs, values):
                operands.append(self._tensor_operand(where, t, value, sizes))
            for s, value in zip(kernel.scalar_args, values[len(kernel.inputs) :]):
                operands.append(self._scalar_operand(where, s, value, sizes))
        except (TypeError, ValueError):
            # A refused call leaves the program as it was (no stray casts or constants).
            del self._lines[lines:]
            self._constants = constants
            raise

        index = self._calls
        ssa = f"%r.{index}"
        kernel_types = _result_types(kernel)
        self._lines.append(_Call(ssa if len(kernel_types) == 1 else f"{ssa}:{len(kernel_types)}", kernel, tuple(operands)))
        results = []
        for i, (t, kernel_type) in enumerate(zip(kernel.outputs, kernel_types)):
            value = Value(self, ssa if len(kernel_types) == 1 else f"{ssa}#{i}", t.dtype, tuple(_output_dim(d, sizes) for d in t.shape),
                          f"result {t.name!r} of call {index} to {kernel.name}")
            if value.type != kernel_type:
                # The program knows more of the shape (static sizes) than the kernel's type says.
                cast = f"%r.{index}.{i}"
                self._lines.append(f"{cast} = tensor.cast {value.ssa} : {kernel_type} to {value.type}")
                value = Value(self, cast, value.dtype, value.shape, value.origin)
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

    def describe(self, archs: Sequence[str] = ()) -> dict:
        """The function's description, in the form runtime.KernelFunction checks calls with."""
        return {
            "kernel": self.name,
            "function": self.name,
            "program": True,
            "archs": list(archs),
            "calls": self._calls,
            "inputs": [{"name": v.ssa[1:], "dtype": v.dtype, "shape": list(v.shape)} for v in self._inputs],
            "scalars": [{"name": s.name, "ctype": s.stype.ctype, "kind": s.stype.kind, "bytes": s.stype.nbytes} for s in self._scalars],
            "outputs": [{"name": f"result{i}", "dtype": v.dtype, "shape": ["?" if d is None else d for d in v.shape], "inplace": False}
                        for i, v in enumerate(self._outputs)],
        }

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
        args = [f"{v.ssa}: {v.type}" for v in self._inputs] + [f"%{s.name}: {s.stype.func_arg}" for s in self._scalars]
        result_types = [v.type for v in self._outputs]
        ret = result_types[0] if len(result_types) == 1 else f"({', '.join(result_types)})"
        description = encode(self.describe([a.name for a in module.archs]))
        lines = [
            f"// Generated by iree_dispatch.program: program {self.name}, {self._calls} kernel call(s), on module {module.name}.",
            f"module @{self.name} {{",
        ]
        for function, kernel in self._kernels.items():
            lines.append(f"  func.func private @{module.name}.{function}({', '.join(_param_types(kernel))}) -> {_results(_result_types(kernel))}")
        lines.append(f"  func.func @{self.name}({', '.join(args)}) -> {ret} attributes {{iree.reflection = {{{PROGRAM_REFLECTION_KEY} = {_mlir_string(description)}}}}} {{")
        lines += [f"    {line.render(module.name) if isinstance(line, _Call) else line}" for line in self._lines]
        lines.append(f"    return {', '.join(v.ssa for v in self._outputs)} : {', '.join(result_types)}")
        lines += ["  }", "}"]
        return "\n".join(lines) + "\n"

    def build(self, module: ModuleSpec, output: str | Path, *, emit_mlir: str | Path | None = None, program_mlir: str | Path | None = None,
              progress: Callable[[str], None] | None = None, **options: bool):
        """Writes the program's MLIR (`program_mlir`, default `<output stem>.program.mlir` beside
        the output) and builds it with `module`'s kernels into the .vmfb `output`; returns
        pipeline.build's BuildResult. emit_mlir: also write the linked IR there. options:
        pipeline.build's `asynchronous` and `strip_assertions` (a K-kernel program runs as one
        command buffer only without the generated checks; see compile.compile_flags)."""
        from .pipeline import build

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
        if any(v.ssa == f"%{name}" for v in self._inputs) or any(s.name == name for s in self._scalars):
            raise ValueError(f"program {self.name}: there is already an argument named {name!r}")

    def _tensor_operand(self, where: str, t, value, sizes: dict[str, tuple[Dim, str]]) -> str:
        what = f"{where}: argument {t.name!r}"
        if not isinstance(value, Value):
            raise TypeError(f"{what} must be a tensor of this program (from input() or an earlier call()), got {type(value).__name__}")
        if value.program is not self:
            raise ValueError(f"{what} is {value.origin} of program {value.program.name}, not of this program ({self.name})")
        if value.dtype != t.dtype:
            raise TypeError(f"{what} must have element type {t.dtype}, but {value.origin} has {value.dtype}")
        if len(value.shape) != len(t.shape):
            raise ValueError(f"{what} must have rank {len(t.shape)} (shape [{', '.join(map(str, t.shape))}]), but {value.origin} has shape {_shape_text(value.shape)}")
        for i, (want, got) in enumerate(zip(t.shape, value.shape)):
            if isinstance(want, ex.Num):
                if got != want.value:
                    raise ValueError(f"{what} dim {i} must be {want.value}, but {value.origin} has {'size ' + repr(got) if got is not None else 'an unknown size'} there; declare it static")
                continue
            here = f"{value.origin} dim {i}"
            if want.name in sizes:
                known, origin = sizes[want.name]
                # Only sizes that are certainly different are refused here; the generated
                # function checks the rest when it runs.
                if known is not None and got is not None and type(known) is type(got) and known != got:
                    raise ValueError(f"{what} dim {i} is {got!r}, but {want.name} = {known!r} (from {origin}); the kernel needs them equal")
            else:
                sizes[want.name] = (got, here)
        param_type = _tensor_type(t.dtype, _kernel_dims(t.shape))
        if param_type == value.type:
            return value.ssa
        cast = f"%cast.{self._calls}.{t.name}"
        self._lines.append(f"{cast} = tensor.cast {value.ssa} : {value.type} to {param_type}")
        return cast

    def _scalar_operand(self, where: str, s, value, sizes: dict[str, tuple[Dim, str]]) -> str:
        if isinstance(value, Scalar):
            if value.program is not self:
                raise ValueError(f"{where}: argument {s.name!r} is scalar {value.name!r} of program {value.program.name}, not of this program")
            if (value.stype.kind, value.stype.nbytes) != (s.stype.kind, s.stype.nbytes):
                raise TypeError(f"{where}: argument {s.name!r} is a {s.stype.ctype}, but scalar {value.name!r} is a {value.stype.ctype}; declare it as p.scalar({value.name!r}, {s.stype.ctype!r})")
            return f"%{value.name}"
        if isinstance(value, Value):
            raise TypeError(f"{where}: argument {s.name!r} is a scalar ({s.stype.ctype}), got {value.origin}")
        # The run-time conversions (runtime._check_scalar): one place decides how numbers travel.
        converted = _check_scalar(where, _scalar_description(s), value)
        if s.stype.integer and s.name not in sizes:
            sizes[s.name] = (int(value), f"argument {s.name!r}")
        return self._constant(converted, s.stype.func_arg)

    def _constant(self, value: int | float, type_: str) -> str:
        key = (type_, value)
        if key not in self._constants:
            name = f"%c.{len(self._constants)}"
            # f32 constants are written as their bits: exactly the float the runtime would pass.
            literal = f"0x{int(np.array(value, np.float32).view(np.uint32)):08X}" if type_ == "f32" else str(value)
            self._lines.append(f"{name} = arith.constant {literal} : {type_}")
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


def _scalar_description(s) -> dict:
    """A ScalarParam as KernelSpec.describe() lists it (the form runtime._check_scalar takes)."""
    return {"name": s.name, "ctype": s.stype.ctype, "kind": s.stype.kind, "bytes": s.stype.nbytes}


def _output_dim(d: ex.Expr, sizes: dict[str, tuple[Dim, str]]) -> Dim:
    """A kernel output dim in the program's terms: known when it is a bound name or when every
    name it uses has a static size; otherwise unknown (dynamic)."""
    if isinstance(d, ex.Num):
        return d.value
    if isinstance(d, ex.Sym):
        return sizes.get(d.name, (None, ""))[0]
    env = {name: sizes.get(name, (None, ""))[0] for name in ex.symbols(d)}
    if all(isinstance(v, int) for v in env.values()):
        return ex.evaluate(d, env)  # type: ignore[arg-type]
    return None


def _param_types(k: KernelSpec) -> list[str]:
    """The argument types of a kernel's generated function (emit.py's wrapper)."""
    return [_tensor_type(t.dtype, _kernel_dims(t.shape)) for t in k.inputs] + [s.stype.func_arg for s in k.scalar_args]


def _result_types(k: KernelSpec) -> list[str]:
    return [_tensor_type(t.dtype, _kernel_dims(t.shape)) for t in k.outputs]


def _kernel_dims(shape: tuple[ex.Expr, ...]) -> tuple[Dim, ...]:
    return tuple(d.value if isinstance(d, ex.Num) else None for d in shape)


def _tensor_type(dtype: str, shape: Sequence[Dim]) -> str:
    """The MLIR tensor type; the kernels' functions (emit.py) type a dim static exactly when
    it is an integer in the declaration, and link_program checks the declarations against them."""
    return f"tensor<{'x'.join(str(d) if isinstance(d, int) else '?' for d in shape)}x{dtype}>"


def _results(types: list[str]) -> str:
    return types[0] if len(types) == 1 else f"({', '.join(types)})"


def _shape_text(shape: Sequence[Dim]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _mlir_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


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
