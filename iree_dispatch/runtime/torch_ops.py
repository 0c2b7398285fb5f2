"""A module's kernels as torch custom ops, so that `torch.compile(fullgraph=True)` traces code
that calls them and CUDA graphs (`torch.cuda.graph`, `mode="reduce-overhead"`) capture and
replay their launches.

    ops = torch_ops.register(module, namespace="mylib")
    out = ops.simple_mul(a, b)           # torch.ops.mylib.simple_mul, from eager or compiled code

Each kernel with a description becomes `namespace::name`, its schema made from the description:
input tensors as `Tensor`, in-place outputs as mutated arguments (`Tensor(a!)`), integer scalars
as `int`, booleans as `bool`, floating-point scalars as `float`, and one `Tensor` result per
fresh output. The op's fake implementation makes each fresh output from the description's shape
expressions over the inputs' sizes (symbolic sizes included) on the inputs' device; the real one
calls the kernel as the runtime always does for torch tensors: checked, then launched on torch's
current stream without waiting (launch.py), which is what a graph capture records. The object
`register` returns calls the op and gives back the kernel's results in their order, in-place
outputs as the caller's own tensors.

A kernel with fresh outputs has two more overloads. `name.into(inputs..., outputs..., scalars...)
-> ()` writes them into tensors the caller made (KernelFunction.call_into). `name.composite` takes
the op's arguments and returns its results, made of `torch.empty` and `into`; it is
CompositeImplicitAutograd, so torch.compile's tracing takes it apart. Traced by torch.compile,
`ops.<kernel>` calls it where the kernel writes into given outputs (launched directly, no
zero-filled output): Inductor then allocates the outputs among its own buffers and, unlike after
an op that returns tensors, checks nothing after the call.

Kernels with struct arguments (packed in Python, call by call) are not registered: `ops.skipped`
says why, and their attribute raises naming it. torch is imported when `register` runs, never
by the rest of the runtime. The registrations are dropped with the returned object, and at
interpreter exit (the op implementations hold the module: see exiting.py).
"""

from __future__ import annotations

import atexit
import re
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ..core import expr as ex
from ..core.contract import KernelDescription, ScalarDescription
from .dlpack import _TORCH_DTYPES, to_framework
from .invocation import KernelFunction

_SCHEMA_SCALARS = {"int": "int", "uint": "int", "bool": "bool", "float": "float", "double": "float", "half": "float", "bf16": "float"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
INTO = "into"  # the overload writing a kernel's fresh outputs into tensors given
COMPOSITE = "composite"  # the overload made of allocations and INTO, which compiled code calls


class TorchOps:
    """The custom ops of one module's kernels: `ops.<kernel>(...)` calls `torch.ops.<namespace>.<kernel>`
    and returns the kernel's results in their order. `ops.namespace`, `ops.names` (the kernels
    registered), `ops.skipped` (kernel → why not), `ops.op(name)` (the OpOverloadPacket)."""

    def __init__(self, namespace: str, library: Any, calls: dict[str, Callable[..., Any]], skipped: dict[str, str], kernels: list[_Kernel | _KernelInto]):
        self.namespace = namespace
        self.names = tuple(calls)
        self.skipped = dict(skipped)
        self._calls = calls
        # Dropping the object (even as cyclic garbage) drops the registrations: torch's dispatcher
        # holds the kernels, which hold the module and its device.
        self._registrations = weakref.finalize(self, _drop_registrations, kernels, library, namespace, self.names)
        self._registrations.atexit = False  # at exit `_close_all` runs first (see there)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        calls = self.__dict__.get("_calls", {})
        if name in calls:
            return calls[name]
        skipped = self.__dict__.get("skipped", {})
        if name in skipped:
            raise AttributeError(f"kernel {name} is not a torch op: {skipped[name]}")
        raise AttributeError(f"no torch op {name!r} in namespace {self.__dict__.get('namespace', '?')} (ops: {', '.join(calls)})")

    def op(self, name: str) -> Any:
        import torch

        getattr(self, name)  # the same error for a name that is no op
        return getattr(getattr(torch.ops, self.namespace), name)

    def close(self) -> None:
        """Drops the registrations (see `_drop_registrations`); the ops can't be called after."""
        self._calls = {}
        self._registrations()

    def __repr__(self) -> str:
        return f"<torch ops {self.namespace}: {', '.join(self.names)}>"


def _drop_registrations(kernels: list[_Kernel | _KernelInto], library: Any, namespace: str, names: tuple[str, ...]) -> None:
    """Drops the kernels first, then the registrations that call them: whatever torch still
    holds of them (its dispatcher, its caches) then holds no module, device or IREE object.

    torch's `Library._destroy` drops its cached `torch.ops.<namespace>.<name>` once per op it
    defined. With several overloads of one name (`into`, `composite`), torch 2.11 looked the name
    up again after unregistering it, reading freed memory (a UnicodeDecodeError, measured): it
    is given each name once, its packet cached while the ops are still registered."""
    import torch

    for kernel in kernels:
        kernel.function = None
    packets = getattr(torch.ops, namespace)
    for name in names:
        getattr(packets, name)
    library._op_defs = {f"{namespace}::{name}" for name in names}
    library._destroy()


_open: weakref.WeakSet[TorchOps] = weakref.WeakSet()


def _close_all() -> None:
    """At interpreter exit, before the runtime releases its IREE objects (registered later than
    exiting.py's handler, so run before it). torch may have torn its registrations down first:
    the kernels are dropped all the same (`close` drops them before the registrations)."""
    for ops in list(_open):
        try:
            ops.close()
        except Exception:  # noqa: BLE001, S110 - torch's teardown ran first; nothing is left to undo
            pass


atexit.register(_close_all)


def register(module: Any, namespace: str = "iree_dispatch") -> TorchOps:
    """Registers every kernel of `module` (a loaded runtime Module) as the torch custom op
    `namespace::<kernel>`; keep the returned object (dropping it drops the ops). A namespace
    holds one module's kernels: registering a kernel name twice in one raises."""
    import torch

    if not _NAME.match(namespace):
        raise ValueError(f"namespace {namespace!r}: expected a Python identifier such as 'mylib'")
    library = torch.library.Library(namespace, "FRAGMENT")
    calls: dict[str, Callable[..., Any]] = {}
    skipped: dict[str, str] = {}
    kernels: list[_Kernel | _KernelInto] = []
    defined: list[str] = []
    try:
        for name, function in module.functions.items():
            if not isinstance(function, KernelFunction) or not isinstance(function.description, KernelDescription):
                continue
            why = unsupported(function.description)
            if why is not None:
                skipped[name] = why
                continue
            qualified = f"{namespace}::{name}"
            try:
                library.define(schema(function.description))
            except RuntimeError as exc:
                if "multiple times" not in str(exc) and "already" not in str(exc):
                    raise
                raise ValueError(f"torch op {qualified} is registered already (another module's kernel?): register this module under another namespace") from None
            defined.append(name)
            kernels.append(_Kernel(function))
            library.impl(name, kernels[-1], "CUDA")
            torch.library.register_fake(qualified, _fake(function.description), lib=library)
            packet = getattr(getattr(torch.ops, namespace), name)
            compiled = packet.default
            if any(not t.inplace for t in function.description.outputs):
                library.define(into_schema(function.description))
                kernels.append(_KernelInto(function))
                library.impl(f"{name}.{INTO}", kernels[-1], "CUDA")
                torch.library.register_fake(f"{qualified}.{INTO}", _writes_into_given_outputs, lib=library)
                library.define(schema(function.description, overload=COMPOSITE))
                library.impl(f"{name}.{COMPOSITE}", _composite(function.description, getattr(packet, INTO)), "CompositeImplicitAutograd")
                # Compiled code calls it where writing into given outputs saves a copy (see _caller).
                compiled = getattr(packet, COMPOSITE) if function.writes_into else compiled
            calls[name] = _caller(function.description, packet, compiled)
    except BaseException:
        _drop_registrations(kernels, library, namespace, tuple(defined))
        raise
    ops = TorchOps(namespace, library, calls, skipped, kernels)
    _open.add(ops)
    return ops


def unsupported(description: KernelDescription) -> str | None:
    """Why a kernel can't be a torch op, or None."""
    for scalar in description.scalars:
        if scalar.kind not in _SCHEMA_SCALARS:
            return f"scalar {scalar.name} is a {scalar.ctype} ({scalar.kind}), which a torch op schema can't take"
    for tensor in (*description.inputs, *description.outputs):
        if tensor.dtype not in _TORCH_DTYPES:
            return f"tensor {tensor.name} is {tensor.dtype}, which torch has no dtype for"
    return None


def schema(description: KernelDescription, overload: str = "") -> str:
    """The op's schema: `name(Tensor x, Tensor(a!) y, float alpha) -> (Tensor, Tensor)`; with
    an overload name, `name.overload(...)`."""
    fresh = [t for t in description.outputs if not t.inplace]
    returns = "Tensor" if len(fresh) == 1 else "(" + ", ".join("Tensor" for _ in fresh) + ")"
    name = f"{description.name}.{overload}" if overload else description.name
    return f"{name}({', '.join(_arguments(description, into=False))}) -> {returns}"


def into_schema(description: KernelDescription) -> str:
    """The schema of the op's `into` overload, which writes each fresh output into a tensor
    given after the inputs: `name.into(Tensor x, Tensor(a!) y, Tensor(b!) sums, float alpha) -> ()`."""
    return f"{description.name}.{INTO}({', '.join(_arguments(description, into=True))}) -> ()"


def _arguments(description: KernelDescription, into: bool) -> list[str]:
    """The schema's arguments: the inputs (those written in place mutated), then (into) one
    mutated tensor per fresh output, then the scalars."""
    in_place = {o.name for o in description.outputs if o.inplace}
    mutated = [t.name for t in description.inputs if t.name in in_place]
    fresh = [t.name for t in description.outputs if not t.inplace] if into else []
    # Each mutated tensor its own alias set: a, b, c, ...
    alias = {name: "abcdefghijklmnopqrstuvwxyz"[i % 26] + ("" if i < 26 else str(i // 26)) for i, name in enumerate(mutated + fresh)}
    arguments = [f"Tensor({alias[t.name]}!) {t.name}" if t.name in alias else f"Tensor {t.name}" for t in description.inputs]
    arguments += [f"Tensor({alias[name]}!) {name}" for name in fresh]
    return arguments + [f"{_schema_scalar(s)} {s.name}" for s in description.scalars]


def _schema_scalar(scalar: ScalarDescription) -> str:
    return _SCHEMA_SCALARS[scalar.kind]


def output_shapes(description: KernelDescription, inputs: Sequence[Any], scalars: Sequence[Any]) -> list[tuple]:
    """Each fresh output's shape from the description's expressions over the inputs' sizes and
    the integer scalars (sizes may be torch's symbolic ints)."""
    return _shape_rules(description)(inputs, scalars)


def _shape_rules(description: KernelDescription) -> Callable[[Sequence[Any], Sequence[Any]], list[tuple]]:
    """output_shapes for one description, its expressions parsed once (the fake implementation
    and the composite overload run it at every trace)."""
    shapes = [tuple(ex.parse(str(d), "shape") for d in t.shape) for t in description.outputs if not t.inplace]
    dims = [(i, d, name) for i, t in enumerate(description.inputs) for d, name in enumerate(t.shape) if isinstance(name, str)]
    integers = [(i, s.name) for i, s in enumerate(description.scalars) if s.kind in ("int", "uint", "bool")]

    def rules(inputs: Sequence[Any], scalars: Sequence[Any]) -> list[tuple]:
        env: dict[str, Any] = {}
        for i, d, name in dims:
            env.setdefault(name, inputs[i].shape[d])
        for i, name in integers:
            value = scalars[i]
            env.setdefault(name, int(value) if isinstance(value, bool) else value)
        return [tuple(ex.evaluate(e, env) for e in shape) for shape in shapes]

    return rules


def _fresh_outputs(description: KernelDescription) -> Callable[[Sequence[Any], Sequence[Any]], list]:
    """A function making a call's fresh outputs (uninitialized, of the shapes and dtypes the
    description gives) on the inputs' device: the fake implementation's results, and the
    outputs the composite overload hands the `into` overload."""
    import torch

    rules = _shape_rules(description)
    dtypes = [getattr(torch, _TORCH_DTYPES[t.dtype]) for t in description.outputs if not t.inplace]

    def fresh(inputs: Sequence[Any], scalars: Sequence[Any]) -> list:
        device = inputs[0].device if inputs else torch.device("cuda")
        return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in zip(rules(inputs, scalars), dtypes)]

    return fresh


def _fake(description: KernelDescription) -> Callable[..., Any]:
    """The op's fake implementation: fresh outputs of the right shapes and dtypes, on the inputs' device."""
    count = len(description.inputs)
    fresh = _fresh_outputs(description)

    def fake(*args):
        return _returned(fresh(args[:count], args[count:]))

    return fake


class _Kernel:
    """An op's CUDA implementation: the kernel called on the tensors (launched on torch's
    current stream), its fresh outputs returned (in-place ones are written in the arguments).
    `function` is None once the ops are closed."""

    def __init__(self, function: KernelFunction):
        self.function: KernelFunction | None = function
        description = function.description
        self._count = len(description.inputs)
        self._fresh = [i for i, t in enumerate(description.outputs) if not t.inplace]
        mutated = {t.name for t in description.outputs if t.inplace}
        self._mutated = [t.name in mutated for t in description.inputs]

    def __call__(self, *args):
        function = self.function
        if function is None:
            raise RuntimeError("this torch op's kernels were closed (torch_ops.TorchOps.close)")
        # Tensors as given where the call's signature was prepared before (contiguous, no grad):
        # its fresh outputs are then torch's own tensors.
        results = function.call_prepared(args) if function.call_prepared is not None else None
        if results is not None:
            results = results if isinstance(results, tuple) else (results,)
            return _returned([results[i] for i in self._fresh])
        # Detached: the runtime takes tensors through DLPack, which refuses ones that require
        # grad; inputs read only may be made contiguous, in-place ones must be so already.
        inputs = [a.detach() if mutated else a.detach().contiguous() for a, mutated in zip(args[: self._count], self._mutated)]
        results = function(*inputs, *args[self._count :])
        results = list(results) if isinstance(results, tuple) else [results]
        return _returned([results[i] if _is_torch(results[i]) else to_framework("torch", results[i]) for i in self._fresh])


class _KernelInto:
    """The `into` overload's CUDA implementation: the kernel writing its fresh outputs into the
    tensors given (KernelFunction.call_into). `function` is None once the ops are closed."""

    def __init__(self, function: KernelFunction):
        self.function: KernelFunction | None = function

    def __call__(self, *args) -> None:
        function = self.function
        if function is None:
            raise RuntimeError("this torch op's kernels were closed (torch_ops.TorchOps.close)")
        if function.into_prepared is not None and function.into_prepared(args) is not None:
            return
        # Detached: the runtime takes tensors through DLPack, which refuses ones that require grad.
        function.call_into(*(a.detach() if _is_torch(a) else a for a in args))


def _composite(description: KernelDescription, into: Any) -> Callable[..., Any]:
    """The `composite` overload: the op's call made of allocations and the `into` overload.
    Compiled code calls it, and torch.compile's tracing takes it apart (it is
    CompositeImplicitAutograd), so Inductor allocates the outputs among its own buffers."""
    count = len(description.inputs)
    fresh = _fresh_outputs(description)

    def composite(*args):
        inputs, scalars = args[:count], args[count:]
        outputs = fresh(inputs, scalars)
        into(*inputs, *outputs, *scalars)
        return _returned(outputs)

    return composite


def _writes_into_given_outputs(*args) -> None:
    """The `into` overload's fake implementation: it returns nothing."""


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch")


def _returned(outputs: list) -> Any:
    """What an op returns: its one fresh output, a tuple of several, None for none."""
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _caller(description: KernelDescription, op: Any, compiled: Any) -> Callable[..., Any]:
    """`ops.<kernel>`: the op called, the kernel's results in their order (in-place outputs as
    the caller's tensors); one result alone, several as a tuple.

    Traced by torch.compile, the call is `compiled` (an OpOverload): the `composite` overload
    where the kernel writes into given outputs, so Inductor allocates them among its own
    buffers (and reuses them) and checks nothing after the call, where it checks each tensor
    a custom op returns (its size, stride, dtype and alignment: ~1 µs per launch)."""
    import torch

    count = len(description.inputs)
    names = [t.name for t in description.inputs]
    sources = [names.index(t.name) if t.inplace else None for t in description.outputs]
    compiling = torch.compiler.is_compiling

    def call(*args):
        returned = compiled(*args) if compiling() else op(*args)
        fresh = iter(returned if isinstance(returned, tuple) else (returned,) if returned is not None else ())
        results = [args[source] if source is not None and source < count else next(fresh) for source in sources]
        return results[0] if len(results) == 1 else tuple(results)

    call.__name__ = call.__qualname__ = description.name
    call.__doc__ = f"torch.ops custom op {description.name}: {schema(description)}"
    return call
