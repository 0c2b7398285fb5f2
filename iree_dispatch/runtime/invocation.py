"""A kernel's (or program's) generated function as Python calls it: `KernelFunction` checks
every call's arguments against the function's description (argument count, dtype, rank, dims,
shape relations, the relations the spec requires, scalar ranges, as TypeError/ValueError naming the parameter), then launches
the kernel directly (launch.py) or calls through IREE (invokers.py). numpy arrays are copied to
the device for the call and results come back as numpy arrays; IREE device arrays stay on the
device, and then the results do too; a call on torch or CuPy arrays returns theirs, queued on
their current stream (dlpack.py). Non-contiguous numpy inputs are copied into a contiguous array
first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import iree.runtime as rt
import numpy as np

from ..core import expr as ex
from ..core.contract import RELATIONS, FunctionDescription, KernelDescription, scalar_argument, struct_argument
from ..core.dtypes import ELEMENT_TYPES
from ..core.errors import DeviceError
from . import dlpack
from .asynchronous import AsyncArray
from .devices import Device
from .dlpack import DeviceArray
from .invokers import FencedInvoker
from .launch import DirectLaunch

# What a call of a closed module's function says (Module.close).
CLOSED = "its module was closed (Module.close): load it again to call it"


@dataclass(frozen=True)
class _Tensor:
    name: str
    dtype: np.dtype
    mlir_type: str
    shape: tuple[str | int, ...]


@dataclass(frozen=True)
class _Checked:
    """A call's arguments once checked: the arrays (numpy made contiguous; other frameworks'
    arrays as they are), the scalars as the generated function takes them, the sizes and
    integer scalars by name (what grids, shapes and computed scalars are evaluated with), and
    the dynamic shared memory the call launches with where its size depends on sizes (None:
    the plan's fixed size)."""

    tensors: list
    scalars: list
    env: dict[str, int]
    shared_memory: int | None


class KernelFunction:
    """A kernel's generated function: checks the arguments, then runs the kernel, launched
    directly where it can be (launch.py), else through IREE's invoke.

    device: where framework (DLPack) arrays are imported, None for checks without a device.
    direct: the kernel's direct launch, or None to call through `invoke` always.
    """

    def __init__(self, description: FunctionDescription, invoke: Callable[..., Any], device: Device | None, direct: DirectLaunch | None = None):
        self.description = description
        self.name: str = description.name
        self._invoke = invoke
        self._device = device
        self._closed = False
        self._direct = direct
        calls = direct.prepared_calls if direct is not None else None
        # call_prepared(args): the results of a call whose signature (arrays' framework, dtypes,
        # shapes; integer scalars) was checked before, launched at once; None where the call
        # must take the checked path. None where this function has no prepared calls.
        self.call_prepared: Callable[[tuple], Any] | None = calls.call if calls is not None else None
        # The same for calls writing into given outputs (`call_into`): None where not prepared.
        into = direct.into_calls if direct is not None else None
        self.into_prepared: Callable[[tuple], Any] | None = into.call if into is not None else None
        self._inputs = [_Tensor(t.name, numpy_dtype(t.dtype), t.dtype, t.shape) for t in description.inputs]
        self._scalars = description.scalars
        self.parameters = [t.name for t in self._inputs] + [s.name for s in self._scalars]
        # A program's relations between sizes beyond equal names (program.py), which its
        # function checks at entry too: checked here first, so a bad call fails before launch.
        self._relations = [(ex.parse(c.lhs, "lhs"), c.op, ex.parse(c.rhs, "rhs"), c.message) for c in description.checks]
        # A kernel whose shared memory depends on sizes: each call's size is held to its bound.
        self._sized_shared_memory = isinstance(description, KernelDescription) and description.shared_memory_size is not None
        # Result index → input index of each in-place output: the caller's array is the result.
        names = [t.name for t in self._inputs]
        self._in_place = {i: names.index(t.name) for i, t in enumerate(description.outputs) if t.inplace}

    def __repr__(self) -> str:
        return f"<iree_dispatch kernel {self.name}({', '.join(self.parameters)})>"

    def close(self) -> None:
        """Drops the IREE objects, the direct launch and the device this function holds
        (Module.close): later calls raise."""
        self.call_prepared = self.into_prepared = None
        self._invoke = self._direct = self._device = None
        self._closed = True

    @property
    def launched_directly(self) -> bool:
        """Whether calls launch the kernel directly (else through IREE's invoke)."""
        return self._direct is not None

    @property
    def writes_into(self) -> bool:
        """Whether `call_into` writes the kernel's outputs in place: a kernel launched directly
        whose fresh outputs are not zero-filled (others' calls go through `call_into` too, at
        the cost of a copy per output)."""
        return self._direct is not None and self._direct.writes_into

    def call_into(self, *args) -> None:
        """A call writing the kernel's fresh outputs into arrays the caller made: `args` are the
        inputs, then one torch tensor or CuPy array per fresh output (the description's order,
        dtype and shape; contiguous, on this function's GPU; not overlapping the inputs or each
        other, which is not checked), then the scalars. Queued on their
        framework's current stream, as a call on those arrays is. What the torch op's `into`
        overload runs (torch_ops.py): torch.compile then allocates the outputs itself."""
        if self.into_prepared is not None and self.into_prepared(args) is not None:
            return
        if self._closed:
            raise RuntimeError(f"{self.name}(): {CLOSED}")
        inputs, fresh = len(self._inputs), len(self.description.outputs) - len(self._in_place)
        if len(args) != len(self.parameters) + fresh:
            raise TypeError(f"{self.name}(): a call writing into given outputs takes {len(self.parameters) + fresh} arguments "
                            f"(the inputs, {fresh} output(s), the scalars), got {len(args)}")
        outputs = args[inputs : inputs + fresh]
        call = [*args[:inputs], *args[inputs + fresh :]]
        if not self.writes_into:
            results = self(*call)
            results = list(results) if isinstance(results, tuple) else [results]
            for output, result in zip(outputs, (r for i, r in enumerate(results) if i not in self._in_place)):
                output[...] = result
            return
        with self._device.bound():
            checked = self._checked(call, {})
            self._direct.call_into(checked.tensors, outputs, checked.scalars, checked.env, args, checked.shared_memory)

    def check(self, *args, **kwargs) -> list:
        """Validated, converted arguments, in order; raises TypeError/ValueError otherwise."""
        checked = self._checked(args, kwargs)
        return checked.tensors + checked.scalars

    def _checked(self, args, kwargs) -> _Checked:
        """The call's arguments checked (see _Checked)."""
        values = self._bind(args, kwargs)
        sizes: dict[str, tuple[int, str]] = {}
        tensors = [self._check_tensor(spec, value, sizes) for spec, value in zip(self._inputs, values)]
        raw_scalars = values[len(self._inputs) :]
        env = {name: size for name, (size, _) in sizes.items()}
        scalars: list = []
        for scalar, value in zip(self._scalars, raw_scalars):
            if scalar.kind == "struct":
                # Its bytes' words, as the generated function takes them; its integer fields size things as `s.m`.
                words, fields = struct_argument(self.name, scalar, value)
                scalars += words
                for name, field in fields.items():
                    if name in sizes and sizes[name][0] != field:
                        raise ValueError(f"{self.name}(): argument {scalar.name!r}: {name} = {field}, but the size {name} is {sizes[name][0]} (from {sizes[name][1]})")
                    env[name] = field
                continue
            scalars.append(scalar_argument(self.name, scalar, value))
            if scalar.kind in ("int", "uint", "bool"):
                env.setdefault(scalar.name, int(value))
        if self._relations:
            self._check_relations(env)
        # What the kernel's spec requires of the sizes (a kernel gives wrong results where a relation fails).
        for requirement in self.description.requires:
            if (refusal := requirement.refusal(self.name, env)) is not None:
                raise ValueError(refusal)
        # Evaluated once per call: checked against its bound here, launched with as it is.
        shared_memory = self.description.shared_memory_for_call(env) if self._sized_shared_memory else None
        return _Checked(tensors, scalars, env, shared_memory)

    def _imported(self, tensors: list) -> tuple[list, set[int | None] | None]:
        """`tensors` with other frameworks' arrays imported into IREE, and the streams to wait
        for before launching when there were some, else None: a CUDA stream handle per producer
        stream known, None for arrays whose export was ordered on the device's bridge stream."""
        if not any(_foreign(v) for v in tensors):
            return tensors, None
        # Framework arrays are imported only once every argument has passed its checks.
        producers: set[int | None] = set()
        imported = list(tensors)
        for i, (spec, value) in enumerate(zip(self._inputs, tensors)):
            if _foreign(value):
                imported[i], stream = self._import(spec, value)
                producers.add(stream)
        return imported, producers

    def _wait_for(self, producers: set[int | None]) -> None:
        """Waits on the host for the work queued so far on the producers' streams."""
        for stream in producers:
            if stream is None:
                self._device.bridge.synchronize()
            else:
                self._device.bridge.wait_for(stream)

    def _check_relations(self, env: dict[str, int]) -> None:
        for lhs, op, rhs, message in self._relations:
            try:
                a, b = ex.evaluate(lhs, env), ex.evaluate(rhs, env)
            except ZeroDivisionError as exc:
                raise ValueError(f"{self.name}(): {message}: {exc}") from None
            if not RELATIONS[op](a, b):
                raise ValueError(f"{self.name}(): {message}; " + (f"{lhs} = {a}, but {rhs} = {b}" if op == "eq" else f"{lhs} = {a}"))

    def __call__(self, *args, **kwargs):
        if self.call_prepared is not None and not kwargs:
            # A call with the signature of one made before (our device arrays, torch tensors or
            # CuPy arrays) launches at once: its checks passed for these dtypes, shapes and sizes.
            results = self.call_prepared(args)
            if results is not None:
                return results
        if self._device is None:
            return self._checked_call(args, kwargs)
        with self._device.bound():  # IREE allocates and imports in the thread's current context
            return self._checked_call(args, kwargs)

    def _checked_call(self, args, kwargs):
        if self._closed:
            raise RuntimeError(f"{self.name}(): {CLOSED}")
        checked = self._checked(args, kwargs)
        tensors, scalars = checked.tensors, checked.scalars
        on_device = any(isinstance(v, (rt.DeviceArray, AsyncArray)) or _foreign(v) for v in tensors)
        if not isinstance(self._invoke, FencedInvoker):
            # Synchronous functions (and direct launches) can't wait on fences: wait here for pending inputs.
            tensors = [v.wait() if isinstance(v, AsyncArray) else v for v in tensors]
        # A call on numpy arrays only returns numpy arrays: launched directly, its results are read in the call.
        results = self._direct.call(tensors, scalars, checked.env, args if not kwargs else (), checked.shared_memory, host_results=not on_device) \
            if self._direct is not None else None
        if results is None:
            results = self._call_through_iree(tensors, scalars)
            framework = dlpack.framework_of(tensors)
            if framework is not None:  # a call on torch/CuPy arrays returns theirs, as a direct launch does
                results = [dlpack.to_framework(framework, r) if isinstance(r, DeviceArray) else r for r in results]
        for result, argument in self._in_place.items():
            if _foreign(tensors[argument]) and result < len(results):
                results[result] = tensors[argument]  # the caller's own array, written in place
        if not on_device:
            results = [r.to_host() if isinstance(r, rt.DeviceArray) else r for r in results]
        return results[0] if len(results) == 1 else tuple(results)

    def _call_through_iree(self, tensors: list, scalars: list) -> list:
        imported, producers = self._imported(tensors)
        if self._device is not None:
            if producers:
                self._wait_for(producers)
            self._device.before_call()
        results = self._invoke(*imported, *scalars)
        return list(results) if isinstance(results, tuple) else [results]

    def _bind(self, args, kwargs) -> list:
        if len(args) > len(self.parameters):
            raise TypeError(f"{self.name}() takes {len(self.parameters)} arguments ({', '.join(self.parameters)}) but {len(args)} were given")
        values = list(args) + [None] * (len(self.parameters) - len(args))
        given = [True] * len(args) + [False] * (len(self.parameters) - len(args))
        for key, value in kwargs.items():
            if key not in self.parameters:
                raise TypeError(f"{self.name}() got an unexpected keyword argument {key!r} (parameters: {', '.join(self.parameters)})")
            i = self.parameters.index(key)
            if given[i]:
                raise TypeError(f"{self.name}() got multiple values for argument {key!r}")
            values[i], given[i] = value, True
        missing = [p for p, g in zip(self.parameters, given) if not g]
        if missing:
            raise TypeError(f"{self.name}() missing {len(missing)} argument(s): {', '.join(missing)} (parameters: {', '.join(self.parameters)})")
        return values

    def _check_tensor(self, spec: _Tensor, value, sizes: dict[str, tuple[int, str]]):
        where = f"{self.name}(): argument {spec.name!r}"
        if isinstance(value, (rt.DeviceArray, AsyncArray)):
            owner = value.device if isinstance(value, AsyncArray) else getattr(value, "_dispatch_device", None)
            if owner is not None and self._device is not None and owner is not self._device:
                raise ValueError(f"{where} is on {owner.uri}, but this module runs on {self._device.uri}; copy it there first (module.to_device(numpy.asarray(x)))")
            dtype, shape = np.dtype(value.dtype), tuple(value.shape)
        elif isinstance(value, np.ndarray):
            dtype, shape = value.dtype, value.shape
        elif _foreign(value):
            kind, ordinal = dlpack.device_of(value)
            if kind == dlpack.KDL_CPU:
                return self._check_tensor(spec, np.from_dlpack(value), sizes)
            if kind != dlpack.KDL_CUDA:
                raise TypeError(f"{where} is on a {dlpack.device_name(kind, ordinal)}; iree_dispatch takes CUDA and host arrays")
            if self._device is not None and ordinal != self._device.ordinal:
                here = self._device.ordinal
                raise ValueError(f"{where} is on cuda:{ordinal}, but this module runs on cuda:{here}; move it there first (e.g. x.to('cuda:{here}'))")
            dtype, shape = _framework_dtype(value), tuple(int(d) for d in value.shape)
        else:
            raise TypeError(f"{where} must be an array (numpy, IREE, or any DLPack array such as torch or CuPy), got {type(value).__name__}")
        if dtype != spec.dtype:
            raise TypeError(f"{where} must have dtype {spec.dtype} ({spec.mlir_type}), got {dtype}; convert it first (numpy: .astype(np.{spec.dtype}))")
        if len(shape) != len(spec.shape):
            raise ValueError(f"{where} must have rank {len(spec.shape)} (shape {list(spec.shape)}), got shape {list(shape)}")
        for i, (want, got) in enumerate(zip(spec.shape, shape)):
            if isinstance(want, int):
                if got != want:
                    raise ValueError(f"{where} dim {i} must be {want}, got {got}")
            elif want in sizes and sizes[want][0] != got:
                value_, origin = sizes[want]
                raise ValueError(f"{where} dim {i} is {got}, but {want} = {value_} (from {origin})")
            else:
                sizes.setdefault(want, (got, f"{spec.name} dim {i}"))
        if isinstance(value, np.ndarray) and not value.flags.c_contiguous:
            value = np.ascontiguousarray(value)
        return value

    def _import(self, spec: _Tensor, value) -> tuple[DeviceArray, int | None]:
        """A framework's CUDA array as an IREE device array over the same memory, and the
        stream its producer works on (None: the export was ordered on the bridge stream)."""
        where = f"{self.name}(): argument {spec.name!r}"
        if self._device is None:
            raise DeviceError(f"{where}: a CUDA array needs a loaded module (this function has no device)")
        # A framework whose current stream is known exports without ordering (stream=-1) and
        # the call waits for that stream once; any other orders its export on the bridge.
        stream = dlpack.current_stream(value)
        capsule, _ = dlpack.export(value, -1 if stream is not None else self._device.bridge.handle, where)
        return DeviceArray(self._device, self._device.hal.from_dlpack_capsule(capsule), override_dtype=spec.dtype), stream


def _foreign(value) -> bool:
    """Whether `value` is another framework's array (taken through DLPack)."""
    return not isinstance(value, (np.ndarray, rt.DeviceArray, AsyncArray)) and dlpack.is_dlpack(value)


def _framework_dtype(value) -> np.dtype | str:
    """A framework array's dtype as numpy spells it (ml_dtypes' bfloat16 for bf16)."""
    name = str(value.dtype).rsplit(".", 1)[-1]  # torch.float32 → float32; cupy/jax use numpy dtypes
    if name == "bfloat16":
        return numpy_dtype("bf16")
    try:
        return np.dtype(name)
    except TypeError:
        return name


def numpy_dtype(mlir_type: str) -> np.dtype:
    name = ELEMENT_TYPES[mlir_type].numpy
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError("bf16 tensors need the ml_dtypes package for a numpy bfloat16 dtype (pip install ml_dtypes)") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)
