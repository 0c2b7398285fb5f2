"""The run-time half: load a `.vmfb` on a CUDA device and call its kernels from Python.

Imports only `iree.runtime` and numpy (plus this package's dependency-free tables), so a
deployment needs no compiler and no CUDA toolkit.

Each kernel built by iree_dispatch carries its description (inputs, dtypes, shapes, scalars)
in the vmfb, so every call is checked before anything is launched: argument count, dtype,
rank, shape relations and scalar ranges, as TypeError/ValueError naming the parameter.
Other functions in the module (e.g. linked programs) are called through IREE unchecked.
A kernel whose description carries a launch plan is launched by the runtime itself, exactly as
IREE would launch it, at a fraction of the cost of IREE's invoke (launch.py).

Arrays: numpy arrays are copied to the device for the call and results come back as numpy
arrays; IREE device arrays (`to_device`) stay on the device, and then the results do too; a
call on torch or CuPy arrays returns theirs, queued on their current stream (dlpack.py).
Non-contiguous numpy inputs are copied into a contiguous array first.

Asynchronous calls: a module compiled with `--iree-execution-model=async-external` exports
functions that take a wait and a signal fence (IREE's coarse-fences ABI). `load(...,
asynchronous=True)` calls them without waiting: each call is queued behind the module's
previous calls and returns `AsyncArray`s, which wait for their call only when read. Loaded
without `asynchronous`, such a module's calls wait for their results, like synchronous ones.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import iree.runtime as rt
import numpy as np

from ..core import expr as ex
from ..core.archs import parse_arch
from ..core.contract import PROGRAM_REFLECTION_KEY, REFLECTION_KEY, RELATIONS, decode, scalar_argument
from ..core.dtypes import ELEMENT_TYPES
from ..core.errors import DeviceError
from . import devices, dlpack
from .cuda_driver import compute_capability as cuda_compute_capability
from .cuda_driver import device_name as cuda_device_name
from .devices import DEFAULT_DRIVER_FLAGS, DEVICE_ENV, DRIVER_FLAGS_ENV, POOL_ENV, Device, cuda_device_available, device, driver_flags, open_device
from .dlpack import DeviceArray
from .launch import LAUNCH_ENV, DirectLaunch, launch_mode, open_archive, plan_for

__all__ = [
    "DEFAULT_DRIVER_FLAGS", "DEVICE_ENV", "DRIVER_FLAGS_ENV", "LAUNCH_ENV", "POOL_ENV", "AsyncArray", "Device", "DeviceArray", "KernelFunction", "Module", "OnDevice",
    "cuda_compute_capability", "cuda_device_available", "cuda_device_name", "device", "driver_flags", "load", "no_variant_message",
    "open_device", "read_descriptions", "runs_on",
]

# iree.abi.model of functions compiled with --iree-execution-model=async-external
COARSE_FENCES = "coarse-fences"
# IREE's status text when an allocation fails for lack of device memory
_OUT_OF_MEMORY = ("RESOURCE_EXHAUSTED", "CUDA_ERROR_OUT_OF_MEMORY")


def no_variant_message(vmfb: Path, capability: tuple[int, int] | None, built: Sequence[str]) -> str:
    gpu = f"this GPU (compute capability {capability[0]}.{capability[1]}, sm_{capability[0]}{capability[1]})" if capability else "this GPU"
    archs = ", ".join(built) if built else "unknown archs"
    fix = f"rebuild with --arch sm_{capability[0]}{capability[1]} (or an older arch, whose PTX JITs forward)" if capability else "rebuild with an arch this GPU supports"
    return f"{vmfb}: no kernel variant can run on {gpu}; the module was built for {archs}. {fix}"


@dataclass(frozen=True)
class _Tensor:
    name: str
    dtype: np.dtype
    mlir_type: str
    shape: tuple[str | int, ...]


class KernelFunction:
    """A kernel's generated function: checks the arguments, then runs the kernel, launched
    directly where it can be (launch.py), else through IREE's invoke.

    device: where framework (DLPack) arrays are imported, None for checks without a device.
    direct: the kernel's direct launch, or None to call through `invoke` always.
    """

    def __init__(self, description: dict, invoke: Callable[..., Any], device: Device | None, direct: DirectLaunch | None = None):
        self.description = description
        self.name: str = description["kernel"]
        self._invoke = invoke
        self._device = device
        self._direct = direct
        calls = direct.prepared_calls if direct is not None else None
        self._prepared = calls.call if calls is not None else None  # results, or None: not prepared
        self._inputs = [_Tensor(t["name"], _numpy_dtype(t["dtype"]), t["dtype"], tuple(t["shape"])) for t in description["inputs"]]
        self._scalars = description["scalars"]
        self.parameters = [t.name for t in self._inputs] + [s["name"] for s in self._scalars]
        # A program's relations between sizes beyond equal names (program.py), which its
        # function checks at entry too: checked here first, so a bad call fails before launch.
        self._relations = [(ex.parse(c["lhs"], "lhs"), c["op"], ex.parse(c["rhs"], "rhs"), c["message"]) for c in description.get("checks", ())]
        # Result index → input index of each in-place output: the caller's array is the result.
        names = [t.name for t in self._inputs]
        self._in_place = {i: names.index(t["name"]) for i, t in enumerate(description.get("outputs", ())) if t.get("inplace")}

    def __repr__(self) -> str:
        return f"<iree_dispatch kernel {self.name}({', '.join(self.parameters)})>"

    @property
    def launched_directly(self) -> bool:
        """Whether calls launch the kernel directly (else through IREE's invoke)."""
        return self._direct is not None

    def check(self, *args, **kwargs) -> list:
        """Validated, converted arguments, in order; raises TypeError/ValueError otherwise."""
        tensors, scalars, _ = self._checked(args, kwargs)
        return tensors + scalars

    def _checked(self, args, kwargs) -> tuple[list, list, dict[str, int]]:
        """The checked arrays (numpy made contiguous; other frameworks' arrays as they are),
        the scalars as the generated function takes them, and the sizes and integer scalars
        by name (what grids, shapes and computed scalars are evaluated with)."""
        values = self._bind(args, kwargs)
        sizes: dict[str, tuple[int, str]] = {}
        tensors = [self._check_tensor(spec, value, sizes) for spec, value in zip(self._inputs, values)]
        raw_scalars = values[len(self._inputs) :]
        scalars = [scalar_argument(self.name, scalar, value) for scalar, value in zip(self._scalars, raw_scalars)]
        env = {name: size for name, (size, _) in sizes.items()}
        for scalar, value in zip(self._scalars, raw_scalars):
            if scalar["kind"] in ("int", "uint", "bool"):
                env.setdefault(scalar["name"], int(value))
        if self._relations:
            self._check_relations(env)
        return tensors, scalars, env

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
        if self._prepared is not None and not kwargs:
            # A call with the signature of one made before (our device arrays, torch tensors or
            # CuPy arrays) launches at once: its checks passed for these dtypes, shapes and sizes.
            results = self._prepared(args)
            if results is not None:
                return results
        if self._device is None:
            return self._checked_call(args, kwargs)
        with self._device.bound():  # IREE allocates and imports in the thread's current context
            return self._checked_call(args, kwargs)

    def _checked_call(self, args, kwargs):
        tensors, scalars, env = self._checked(args, kwargs)
        on_device = any(isinstance(v, (rt.DeviceArray, AsyncArray)) or _foreign(v) for v in tensors)
        if not isinstance(self._invoke, FencedInvoker):
            # Synchronous functions (and direct launches) can't wait on fences: wait here for pending inputs.
            tensors = [v.wait() if isinstance(v, AsyncArray) else v for v in tensors]
        results = self._direct.call(tensors, scalars, env, args if not kwargs else ()) if self._direct is not None else None
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
        return _numpy_dtype("bf16")
    try:
        return np.dtype(name)
    except TypeError:
        return name


def _numpy_dtype(mlir_type: str) -> np.dtype:
    name = ELEMENT_TYPES[mlir_type].numpy
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError("bf16 tensors need the ml_dtypes package for a numpy bfloat16 dtype (pip install ml_dtypes)") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def read_descriptions(vmfb: str | Path, instance: rt.VmInstance | None = None) -> tuple[str, dict[str, dict | None]]:
    """Module name and, per exported function, its kernel description (None if it has none).

    Reads the vmfb's reflection data only; needs no device.
    """
    instance = instance or rt.VmInstance()  # kept referenced while the module is read
    module = rt.VmModule.mmap(instance, str(vmfb))
    descriptions = {}
    for name in module.function_names:
        if name.startswith("__"):
            continue
        reflection = module.lookup_function(name).reflection
        descriptions[name] = decode(reflection[REFLECTION_KEY]) if REFLECTION_KEY in reflection else None
    return module.name, descriptions


class Timeline:
    """Orders a module's asynchronous calls, like a CUDA stream, with one semaphore: call i
    signals value i + 1.

    The timeline keeps every queued call's arguments and results referenced until the call has
    completed, so that the host releases nothing the GPU may still read or write. max_in_flight
    bounds how many calls are queued ahead of the GPU: the next call waits for the oldest first.
    """

    def __init__(self, device: rt.HalDevice, max_in_flight: int = 32):
        self.semaphore = device.create_semaphore(0)
        self.value = 0  # what the last queued call signals
        self.max_in_flight = max_in_flight
        self._pending: deque[tuple[int, tuple]] = deque()  # (signal value, references), oldest first

    def fence(self, value: int | None = None) -> rt.HalFence:
        return rt.HalFence.create_at(self.semaphore, self.value if value is None else value)

    def reached(self, value: int) -> bool:
        return self.semaphore.query() >= value

    def queued(self, signal: int, references: tuple) -> None:
        """Records a queued call; drops the references of completed calls, and waits for the
        oldest ones while more than max_in_flight are pending. Queries the semaphore only when
        the bound is reached."""
        self.value = signal
        self._pending.append((signal, references))
        if len(self._pending) <= self.max_in_flight:
            return
        completed = self.semaphore.query()
        oldest = signal - self.max_in_flight
        if completed < oldest:
            self.fence(oldest).wait()
            completed = oldest
        while self._pending and self._pending[0][0] <= completed:
            self._pending.popleft()

    def wait(self) -> None:
        """Until every call queued so far has completed (raises if one failed on the device)."""
        self.fence().wait()
        self._pending.clear()


class AsyncArray:
    """A result of an asynchronous call: a device array that is complete once its call's
    signal fence is reached. Reading it (`to_host`, `numpy.asarray`, `wait`, `__dlpack__`)
    waits for that; passing it to another call does not (the call is queued behind it).

    Shape and dtype are known at once. An in-place output is the caller's buffer: read it
    through this result, or after `wait()`, not through the argument's own DeviceArray.
    """

    __slots__ = ("_array", "_timeline", "_value", "_complete", "device")

    def __init__(self, array: DeviceArray, timeline: Timeline, value: int, device: Device):
        self._array = array
        self._timeline = timeline
        self._value = value
        self._complete = False  # known to be complete (waited for)
        self.device = device

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._array.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._array.dtype)

    @property
    def done(self) -> bool:
        """Whether the call has completed (never waits)."""
        return self._timeline.reached(self._value)

    def fence(self) -> rt.HalFence:
        """The fence the call signals when this result is complete."""
        return self._timeline.fence(self._value)

    def wait(self) -> DeviceArray:
        """Waits for the call that produces this array; returns the (complete) device array."""
        if not self._complete:
            self.fence().wait()
            self._complete = True
        return self._array

    def to_host(self) -> np.ndarray:
        return self.wait().to_host()

    def __array__(self, dtype=None, copy=None):
        host = self.to_host()
        return host if dtype is None else host.astype(dtype)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()

    def __dlpack__(self, **kwargs) -> Any:
        return self.wait().__dlpack__(**kwargs)

    def __repr__(self) -> str:
        return f"<AsyncArray {self.dtype}{list(self.shape)} {'done' if self.done else 'pending'}>"


def _push_arguments(name: str, device: Device, args: Sequence, arguments: rt.VmVariantList, keep: list) -> None:
    """Pushes a call's converted arguments; numpy arrays are copied to the device (after the
    call's Device.before_call)."""
    for value in args:
        if isinstance(value, AsyncArray):
            keep.append(value)
            value = value._array
        elif isinstance(value, np.ndarray):
            value = dlpack.upload(device, value)
        if isinstance(value, rt.DeviceArray):
            keep.append(value)
            arguments.push_ref(value._buffer_view)
        elif isinstance(value, (bool, int, np.integer)):
            arguments.push_int(int(value))
        elif isinstance(value, (float, np.floating)):
            arguments.push_float(float(value))
        else:
            raise TypeError(f"{name}(): can't pass a {type(value).__name__} to an IREE function (arrays, ints and floats only)")


def _wrap_results(device: Device, results: rt.VmVariantList, dtypes: Sequence[np.dtype | None]) -> list[DeviceArray]:
    return [
        DeviceArray(device, results.get_as_object(i, rt.HalBufferView), override_dtype=dtypes[i] if i < len(dtypes) else None)
        for i in range(len(results))
    ]


class DirectInvoker:
    """Calls a synchronous function through VmContext.invoke, without IREE's generic argument
    marshalling (which costs tens of µs per call in Python): arguments are already checked.

    A call that runs out of device memory trims the device's output pool and runs once more:
    a synchronous function allocates its outputs before it launches anything.
    """

    def __init__(self, context: rt.VmContext, function: rt.VmFunction, device: Device, result_dtypes: Sequence[np.dtype | None] = ()):
        self._context = context
        self._function = function
        self._device = device
        self._result_dtypes = tuple(result_dtypes)
        self.name = function.name

    def __call__(self, *args) -> DeviceArray | tuple:
        arguments = rt.VmVariantList(len(args))
        _push_arguments(self.name, self._device, args, arguments, keep=[])
        results = rt.VmVariantList(max(len(self._result_dtypes), 1))
        try:
            self._context.invoke(self._function, arguments, results)
        except RuntimeError as exc:
            if not (self._device.pooled and any(m in str(exc) for m in _OUT_OF_MEMORY)):
                raise
            self._device.trim()
            results = rt.VmVariantList(max(len(self._result_dtypes), 1))
            self._context.invoke(self._function, arguments, results)
        arrays = _wrap_results(self._device, results, self._result_dtypes)
        return arrays[0] if len(arrays) == 1 else tuple(arrays)


class FencedInvoker:
    """Calls a coarse-fences function through VmContext.invoke (IREE's FunctionInvoker in 3.13
    refuses fence arguments): arguments, then the wait fence, then the signal fence.

    On a CUDA device the wait fence holds only pending inputs from other GPUs: work on one GPU
    is already in order: IREE 3.13's CUDA device queues all of it on one stream, and every module loaded on a
    GPU shares that GPU's device (devices.py). Waiting on a pending value of a semaphore of the
    same device is also what failed: IREE's queue then makes its stream wait on the CUDA event
    of that value, and in about a third of processes that wait failed with
    CUDA_ERROR_CONTEXT_IS_DESTROYED (docs/runtime.md).

    asynchronous: return AsyncArrays at once; otherwise wait and return device arrays.
    """

    def __init__(self, context: rt.VmContext, function: rt.VmFunction, device: Device, timeline: Timeline,
                 asynchronous: bool, result_dtypes: Sequence[np.dtype | None] = ()):
        self._context = context
        self._function = function
        self._device = device
        self._timeline = timeline
        self._asynchronous = asynchronous
        self._result_dtypes = tuple(result_dtypes)
        self.name = function.name

    def __call__(self, *args) -> DeviceArray | AsyncArray | tuple:
        timeline = self._timeline
        arguments = rt.VmVariantList(len(args) + 2)
        keep: list = []  # referenced by the timeline until the call has completed
        _push_arguments(self.name, self._device, args, arguments, keep)
        pending = [v for v in args if isinstance(v, AsyncArray) and not v.done]
        waits = [v.fence() for v in pending if v.device is not self._device or not self._device.in_order]
        if not self._device.in_order and timeline.value:
            waits.append(timeline.fence())
        signal = timeline.value + 1
        arguments.push_ref(rt.HalFence.join(waits) if waits else rt.HalFence(1))
        arguments.push_ref(timeline.fence(signal))
        results = rt.VmVariantList(max(len(self._result_dtypes), 1))
        self._context.invoke(self._function, arguments, results)
        arrays = _wrap_results(self._device, results, self._result_dtypes)
        # Recorded only once the call is queued: a call that failed signals nothing, and a
        # later call must not wait for it.
        timeline.queued(signal, (arguments, results, *keep, *arrays))
        if self._asynchronous:
            arrays = [AsyncArray(a, timeline, signal, self._device) for a in arrays]
        else:
            timeline.wait()
        return arrays[0] if len(arrays) == 1 else tuple(arrays)


def _descriptions(vm_module: rt.VmModule) -> dict[str, dict | None]:
    """Per exported function, its kernel or program description (None if it has neither)."""
    found = {}
    for name in vm_module.function_names:
        if name.startswith("__"):
            continue
        reflection = vm_module.lookup_function(name).reflection
        text = reflection.get(REFLECTION_KEY) or reflection.get(PROGRAM_REFLECTION_KEY)
        found[name] = decode(text) if text else None
    return found


def _result_dtypes(description: dict | None) -> list[np.dtype | None]:
    if not description:
        return []
    dtypes: list[np.dtype | None] = []
    for out in description["outputs"]:
        try:
            dtypes.append(_numpy_dtype(out["dtype"]))
        except TypeError:  # bf16 without ml_dtypes: the device array keeps IREE's own dtype
            dtypes.append(None)
    return dtypes


class OnDevice:
    """A function of a module without a kernel description (a program's or a hand-written
    one), called through IREE as it is, with its GPU's context current on the calling thread
    (IREE allocates in the thread's current context). Other attributes are the function's."""

    def __init__(self, function: Callable[..., Any], device: Device):
        self._function = function
        self._device = device

    def __call__(self, *args, **kwargs):
        with self._device.bound():
            return self._function(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._function, name)

    def __repr__(self) -> str:
        return repr(self._function)


class Module:
    """A vmfb loaded on one CUDA device. Kernels are attributes: `module.simple_mul(a, b)`.

    device: "cuda" (the first GPU), "cuda://N" or "cuda://GPU-<uuid>"; default $IREE_DISPATCH_DEVICE,
    else "cuda". Modules on one GPU share
    its IREE device (`module.gpu`), so their arrays and results pass between them freely.
    asynchronous: for modules compiled with `--iree-execution-model=async-external`: calls
    return AsyncArrays without waiting (see AsyncArray); `wait()` waits for all of them.
    max_in_flight: asynchronous calls queued ahead of the GPU at most (see Timeline).
    launch: "direct" (launch kernels directly where their description allows, launch.py) or
    "iree" (every call through IREE's invoke); default $IREE_DISPATCH_LAUNCH, else "direct".
    """

    def __init__(self, vmfb: str | Path, device: str | None = None, *, asynchronous: bool = False, max_in_flight: int = 32, launch: str | None = None):
        self.path = Path(vmfb)
        if not self.path.is_file():
            raise FileNotFoundError(f"no such module: {self.path}")
        self.launch = launch_mode(launch)
        self.gpu = devices.device(device)
        self.device = self.gpu.hal
        self.asynchronous = asynchronous
        with self.gpu.bound():  # IREE loads the module's executables in the thread's current context: this GPU's
            self._load(max_in_flight)

    def _load(self, max_in_flight: int) -> None:
        """Loads the vmfb into an IREE context on the module's device and makes its functions."""
        self.config = rt.Config(device=self.device)
        self.vm_module = rt.VmModule.mmap(self.config.vm_instance, str(self.path))
        self.name = self.vm_module.name
        descriptions = _descriptions(self.vm_module)
        self.context = rt.SystemContext(config=self.config)
        try:
            self.context.add_vm_module(self.vm_module)
        except RuntimeError as exc:
            if "does not support any variant" in str(exc):
                built = next((d["archs"] for d in descriptions.values() if d), [])
                raise DeviceError(no_variant_message(self.path, cuda_compute_capability(self.gpu.ordinal), built)) from None
            raise
        self.timeline = Timeline(self.device, max_in_flight)
        bound = self.context.modules[self.name]
        self.functions: dict[str, Callable] = {}
        archive = open_archive(self.path) if self.launch == "direct" and self.gpu.cuda else None
        for name, description in descriptions.items():
            vm_function = self.vm_module.lookup_function(name)
            if vm_function.reflection.get("iree.abi.model") == COARSE_FENCES:
                invoker = FencedInvoker(self.context.vm_context, vm_function, self.gpu, self.timeline, self.asynchronous, _result_dtypes(description))
            elif self.asynchronous:
                raise ValueError(
                    f"{self.path}: function {name} is synchronous (it waits for its results), so asynchronous=True can't apply; "
                    "compile the module with iree-compile --iree-execution-model=async-external, or load it without asynchronous=True"
                )
            elif description:
                invoker = DirectInvoker(self.context.vm_context, vm_function, self.gpu, _result_dtypes(description))
            else:
                invoker = bound[name]
            if description:
                direct = plan_for(description, self.gpu, _result_dtypes(description), archive) if isinstance(invoker, DirectInvoker) else None
                self.functions[name] = KernelFunction(description, invoker, self.gpu, direct)
            else:
                self.functions[name] = OnDevice(invoker, self.gpu)
        if archive is not None:
            archive.close()

    def __getattr__(self, name: str):
        functions = self.__dict__.get("functions", {})
        if name in functions:
            return functions[name]
        raise AttributeError(f"module {self.__dict__.get('name', '?')} has no function {name!r} (functions: {', '.join(functions)})")

    def __getitem__(self, name: str):
        return getattr(self, name)

    def to_device(self, array: np.ndarray) -> DeviceArray:
        """Copies `array` to this module's device; pass the result to keep data there."""
        self.gpu.before_call()  # the copy may land in a pooled buffer another stream still reads
        return dlpack.upload(self.gpu, array)

    def wait(self) -> None:
        """Waits until every call made so far through this module has completed."""
        self.timeline.wait()

    def trim(self) -> None:
        """Returns the free buffers of the device's output pool to CUDA."""
        self.gpu.trim()


def load(vmfb: str | Path, device: str | None = None, *, asynchronous: bool = False, max_in_flight: int = 32, launch: str | None = None) -> Module:
    """Loads `vmfb` on `device` ("cuda", "cuda://N", "cuda://GPU-<uuid>"; default
    $IREE_DISPATCH_DEVICE, else "cuda"). asynchronous, max_in_flight, launch: see Module."""
    return Module(vmfb, device, asynchronous=asynchronous, max_in_flight=max_in_flight, launch=launch)


def runs_on(archs: Sequence[str], capability: tuple[int, int]) -> str | None:
    """The arch whose variant a GPU of `capability` runs (the first that can), or None."""
    for name in archs:
        if parse_arch(name).runs_on(*capability):
            return name
    return None
