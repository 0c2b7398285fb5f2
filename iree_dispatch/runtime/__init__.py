"""The run-time half: load a `.vmfb` on a CUDA device and call its kernels from Python.

Imports only `iree.runtime` and numpy (plus this package's dependency-free tables), so a
deployment needs no compiler and no CUDA toolkit.

Each kernel built by iree_dispatch carries its description (inputs, dtypes, shapes, scalars)
in the vmfb, so every call is checked before anything is launched: argument count, dtype,
rank, shape relations and scalar ranges, as TypeError/ValueError naming the parameter.
Other functions in the module (e.g. linked programs) are called through IREE unchecked.

Arrays: numpy arrays are copied to the device for the call and results come back as numpy
arrays; IREE device arrays (`to_device`) stay on the device, and then the results do too.
Non-contiguous numpy inputs are copied into a contiguous array first.

Asynchronous calls: a module compiled with `--iree-execution-model=async-external` exports
functions that take a wait and a signal fence (IREE's coarse-fences ABI). `load(...,
asynchronous=True)` calls them without waiting: each call is queued behind the module's
previous calls and returns `AsyncArray`s, which wait for their call only when read. Loaded
without `asynchronous`, such a module's calls wait for their results, like synchronous ones.
"""

from __future__ import annotations

import ctypes
import os
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

# Where a Program's generated function (program.py) keeps its description: the same form as a
# kernel's, under its own key, so that `inspect` (which shows kernels) passes it by.
COARSE_FENCES = "coarse-fences"  # iree.abi.model of functions compiled async-external

def cuda_compute_capability(ordinal: int = 0) -> tuple[int, int] | None:
    """(major, minor) of CUDA device `ordinal` via the driver library, or None if unavailable.

    IREE's Python API doesn't expose device queries; the driver is present wherever the
    `cuda` HAL driver works, so ask it directly.
    """
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
        return None
    # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76
    if cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device) or cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device):
        return None
    return major.value, minor.value


def no_variant_message(vmfb: Path, capability: tuple[int, int] | None, built: Sequence[str]) -> str:
    gpu = f"this GPU (compute capability {capability[0]}.{capability[1]}, sm_{capability[0]}{capability[1]})" if capability else "this GPU"
    archs = ", ".join(built) if built else "unknown archs"
    fix = f"rebuild with --arch sm_{capability[0]}{capability[1]} (or an older arch, whose PTX JITs forward)" if capability else "rebuild with an arch this GPU supports"
    return f"{vmfb}: no kernel variant can run on {gpu}; the module was built for {archs}. {fix}"


def device_ordinal(device: str) -> int:
    """The CUDA ordinal in a URI like "cuda://1" (0 for plain "cuda")."""
    _, _, rest = device.partition("://")
    return int(rest) if rest.isdigit() else 0


def cuda_device_name(ordinal: int = 0) -> str | None:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    device, name = ctypes.c_int(), ctypes.create_string_buffer(256)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0 or cuda.cuDeviceGetName(name, 256, device) != 0:
        return None
    return name.value.decode()


# IREE CUDA driver flags set before iree_dispatch opens its first device (IREE reads them when
# it creates the driver, process-wide; DRIVER_FLAGS_ENV replaces them, "" sets none).
#
# --cuda_async_allocations=false: with IREE's default (true), a function's fresh output comes
# from a stream-ordered pool (cuMemAllocFromPoolAsync), and when Python drops the result the
# buffer is freed by IREE's release callback with a synchronous cuMemFree
# (iree/hal/drivers/cuda/memory_pools.c), which synchronizes with the device: a synchronous
# call with a fresh output took 152 µs with the pool and 55 µs without it in one process pair on
# an H100, 233 and 81 µs in another, of which dropping the result alone 48-74 µs vs 4-5 µs
# (docs/benchmarks.md, "Where the +100 µs went"). 100-dispatch programs and asynchronous calls
# cost about the same either way (IREE's queue.alloca waits on the host for its wait fence in
# both modes).
DRIVER_FLAGS_ENV = "IREE_DISPATCH_CUDA_FLAGS"
DEFAULT_DRIVER_FLAGS = ("--cuda_async_allocations=false",)
_driver_flags_set = False


def driver_flags() -> tuple[str, ...]:
    """The IREE runtime flags open_device sets: DEFAULT_DRIVER_FLAGS, or DRIVER_FLAGS_ENV's."""
    text = os.environ.get(DRIVER_FLAGS_ENV)
    return DEFAULT_DRIVER_FLAGS if text is None else tuple(text.split())


def _set_driver_flags() -> None:
    global _driver_flags_set
    if not _driver_flags_set:
        flags = driver_flags()
        if flags:
            rt.flags.parse_flags(*flags)
        _driver_flags_set = True


def open_device(device: str = "cuda") -> rt.HalDevice:
    """The IREE device for a URI such as "cuda" or "cuda://0"; DeviceError if there is none.
    The first call sets driver_flags() (no effect if iree.runtime created a CUDA device before)."""
    if not device.startswith("cuda"):
        raise DeviceError(f"device {device!r}: iree_dispatch kernels run on CUDA devices only (use 'cuda' or 'cuda://N')")
    _set_driver_flags()
    try:
        return rt.get_device(device)
    except (RuntimeError, ValueError) as exc:
        raise DeviceError(f"no CUDA device available for {device!r}: {exc}") from None


def cuda_device_available(device: str = "cuda") -> bool:
    try:
        open_device(device)
        return True
    except DeviceError:
        return False


@dataclass(frozen=True)
class _Tensor:
    name: str
    dtype: np.dtype
    mlir_type: str
    shape: tuple[str | int, ...]


class KernelFunction:
    """A kernel's generated function: checks the arguments, then runs it through IREE."""

    def __init__(self, description: dict, invoke: Callable[..., Any], device: rt.HalDevice | None):
        self.description = description
        self.name: str = description["kernel"]
        self._invoke = invoke
        self._device = device
        self._inputs = [_Tensor(t["name"], _numpy_dtype(t["dtype"]), t["dtype"], tuple(t["shape"])) for t in description["inputs"]]
        self._scalars = description["scalars"]
        self.parameters = [t.name for t in self._inputs] + [s["name"] for s in self._scalars]
        # A program's relations between sizes beyond equal names (program.py), which its
        # function checks at entry too: checked here first, so a bad call fails before launch.
        self._relations = [(ex.parse(c["lhs"], "lhs"), c["op"], ex.parse(c["rhs"], "rhs"), c["message"]) for c in description.get("checks", ())]

    def __repr__(self) -> str:
        return f"<iree_dispatch kernel {self.name}({', '.join(self.parameters)})>"

    def check(self, *args, **kwargs) -> list:
        """Validated, converted arguments, in order; raises TypeError/ValueError otherwise."""
        values = self._bind(args, kwargs)
        sizes: dict[str, tuple[int, str]] = {}
        converted: list = []
        for spec, value in zip(self._inputs, values):
            converted.append(self._check_tensor(spec, value, sizes))
        for scalar, value in zip(self._scalars, values[len(self._inputs) :]):
            converted.append(scalar_argument(self.name, scalar, value))
        if self._relations:
            self._check_relations(sizes, values)
        return converted

    def _check_relations(self, sizes: dict[str, tuple[int, str]], values: list) -> None:
        env = {name: size for name, (size, _) in sizes.items()}
        for scalar, value in zip(self._scalars, values[len(self._inputs) :]):
            if scalar["kind"] in ("int", "uint", "bool"):
                env.setdefault(scalar["name"], int(value))
        for lhs, op, rhs, message in self._relations:
            try:
                a, b = ex.evaluate(lhs, env), ex.evaluate(rhs, env)
            except ZeroDivisionError as exc:
                raise ValueError(f"{self.name}(): {message}: {exc}") from None
            if not RELATIONS[op](a, b):
                raise ValueError(f"{self.name}(): {message}; " + (f"{lhs} = {a}, but {rhs} = {b}" if op == "eq" else f"{lhs} = {a}"))

    def __call__(self, *args, **kwargs):
        converted = self.check(*args, **kwargs)
        on_device = any(isinstance(v, (rt.DeviceArray, AsyncArray)) for v in converted)
        if not isinstance(self._invoke, FencedInvoker):
            # IREE's synchronous functions can't wait on fences: wait here for pending inputs.
            converted = [v.wait() if isinstance(v, AsyncArray) else v for v in converted]
        results = self._invoke(*converted)
        results = results if isinstance(results, tuple) else (results,)
        if not on_device:
            results = tuple(r.to_host() if isinstance(r, rt.DeviceArray) else r for r in results)
        return results[0] if len(results) == 1 else results

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
            dtype, shape = np.dtype(value.dtype), tuple(value.shape)
        elif isinstance(value, np.ndarray):
            dtype, shape = value.dtype, value.shape
        else:
            raise TypeError(f"{where} must be a numpy array or an IREE device array, got {type(value).__name__}")
        if dtype != spec.dtype:
            raise TypeError(f"{where} must have dtype {spec.dtype} ({spec.mlir_type}), got {dtype}; convert it with .astype(np.{spec.dtype})")
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
    """One semaphore that orders a module's asynchronous calls, like a CUDA stream: call i
    waits for value i and signals i + 1.

    The timeline keeps every queued call's arguments and results referenced until the call has
    completed, so that the host releases nothing the GPU may still read or write. max_in_flight
    bounds how many calls are queued ahead of the GPU: the next call waits for the oldest first.
    (Asynchronous calls fail intermittently inside IREE 3.13's CUDA HAL, with and without
    these measures: a call queued behind a pending one fails with CUDA_ERROR_CONTEXT_IS_DESTROYED
    from the cuStreamWaitEvent by which IREE's work queue waits for the previous call's
    semaphore event (cuda_device.c:239), while the CUDA context is alive; docs/benchmarks.md.)
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
    signal fence is reached. Reading it (`to_host`, `numpy.asarray`, `wait`) waits for that;
    passing it to another call of the module does not (the call is queued behind it).

    Shape and dtype are known at once. An in-place output is the caller's buffer: read it
    through this result, or after `wait()`, not through the argument's own DeviceArray.
    """

    __slots__ = ("_array", "_timeline", "_value", "_complete")

    def __init__(self, array: rt.DeviceArray, timeline: Timeline, value: int):
        self._array = array
        self._timeline = timeline
        self._value = value
        self._complete = False  # known to be complete (waited for)

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

    def wait(self) -> rt.DeviceArray:
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

    def __repr__(self) -> str:
        return f"<AsyncArray {self.dtype}{list(self.shape)} {'done' if self.done else 'pending'}>"


class FencedInvoker:
    """Calls a coarse-fences function through VmContext.invoke (IREE's FunctionInvoker in 3.13
    refuses fence arguments): arguments, then the wait fence (the timeline's last value, joined
    with the fences of pending inputs from other modules), then the signal fence.

    asynchronous: return AsyncArrays at once; otherwise wait and return device arrays.
    """

    def __init__(self, context: rt.VmContext, function: rt.VmFunction, device: rt.HalDevice, timeline: Timeline,
                 asynchronous: bool, result_dtypes: Sequence[np.dtype | None] = ()):
        self._context = context
        self._function = function
        self._device = device
        self._timeline = timeline
        self._asynchronous = asynchronous
        self._result_dtypes = tuple(result_dtypes)
        self.name = function.name

    def __call__(self, *args) -> rt.DeviceArray | AsyncArray | tuple:
        timeline = self._timeline
        arguments = rt.VmVariantList(len(args) + 2)
        keep = []  # referenced by the timeline until the call has completed
        other_fences = []
        for value in args:
            if isinstance(value, AsyncArray):
                if value._timeline is not timeline and not value.done:
                    other_fences.append(value.fence())
                keep.append(value)
                value = value._array
            elif isinstance(value, np.ndarray):
                value = rt.asdevicearray(self._device, np.ascontiguousarray(value))
            if isinstance(value, rt.DeviceArray):
                keep.append(value)
                arguments.push_ref(value._buffer_view)
            elif isinstance(value, (bool, int, np.integer)):
                arguments.push_int(int(value))
            elif isinstance(value, (float, np.floating)):
                arguments.push_float(float(value))
            else:
                raise TypeError(f"{self.name}(): can't pass a {type(value).__name__} to an IREE function (arrays, ints and floats only)")
        signal = timeline.value + 1
        wait = timeline.fence()
        if other_fences:
            wait = rt.HalFence.join([wait, *other_fences])
        arguments.push_ref(wait)
        arguments.push_ref(timeline.fence(signal))
        results = rt.VmVariantList(max(len(self._result_dtypes), 1))
        self._context.invoke(self._function, arguments, results)
        arrays = [
            rt.DeviceArray(self._device, results.get_as_object(i, rt.HalBufferView), implicit_host_transfer=True,
                           override_dtype=self._result_dtypes[i] if i < len(self._result_dtypes) else None)
            for i in range(len(results))
        ]
        # Recorded only once the call is queued: a call that failed signals nothing, and a
        # later call must not wait for it.
        timeline.queued(signal, (arguments, results, *keep, *arrays))
        if self._asynchronous:
            arrays = [AsyncArray(a, timeline, signal) for a in arrays]
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


class Module:
    """A vmfb loaded on one CUDA device. Kernels are attributes: `module.simple_mul(a, b)`.

    asynchronous: for modules compiled with `--iree-execution-model=async-external`: calls
    return AsyncArrays without waiting (see AsyncArray); `wait()` waits for all of them.
    max_in_flight: asynchronous calls queued ahead of the GPU at most (see Timeline).
    """

    def __init__(self, vmfb: str | Path, device: str = "cuda", *, asynchronous: bool = False, max_in_flight: int = 32):
        self.path = Path(vmfb)
        if not self.path.is_file():
            raise FileNotFoundError(f"no such module: {self.path}")
        self.device = open_device(device)
        self.asynchronous = asynchronous
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
                raise DeviceError(no_variant_message(self.path, cuda_compute_capability(device_ordinal(device)), built)) from None
            raise
        self.timeline = Timeline(self.device, max_in_flight)
        bound = self.context.modules[self.name]
        self.functions: dict[str, Callable] = {}
        for name, description in descriptions.items():
            vm_function = self.vm_module.lookup_function(name)
            if vm_function.reflection.get("iree.abi.model") == COARSE_FENCES:
                invoker = FencedInvoker(self.context.vm_context, vm_function, self.device, self.timeline, asynchronous, _result_dtypes(description))
            elif asynchronous:
                raise ValueError(
                    f"{self.path}: function {name} is synchronous (it waits for its results), so asynchronous=True can't apply; "
                    "compile the module with iree-compile --iree-execution-model=async-external, or load it without asynchronous=True"
                )
            else:
                invoker = bound[name]
            self.functions[name] = KernelFunction(description, invoker, self.device) if description else invoker

    def __getattr__(self, name: str):
        functions = self.__dict__.get("functions", {})
        if name in functions:
            return functions[name]
        raise AttributeError(f"module {self.__dict__.get('name', '?')} has no function {name!r} (functions: {', '.join(functions)})")

    def __getitem__(self, name: str):
        return getattr(self, name)

    def to_device(self, array: np.ndarray) -> rt.DeviceArray:
        """Copies `array` to this module's device; pass the result to keep data there."""
        return rt.asdevicearray(self.device, np.ascontiguousarray(array))

    def wait(self) -> None:
        """Waits until every call made so far through this module has completed."""
        self.timeline.wait()


def load(vmfb: str | Path, device: str = "cuda", *, asynchronous: bool = False, max_in_flight: int = 32) -> Module:
    """Loads `vmfb` on `device` ("cuda", "cuda://0", ...). asynchronous, max_in_flight: see Module."""
    return Module(vmfb, device, asynchronous=asynchronous, max_in_flight=max_in_flight)


def runs_on(archs: Sequence[str], capability: tuple[int, int]) -> str | None:
    """The arch whose variant a GPU of `capability` runs (the first that can), or None."""
    for name in archs:
        if parse_arch(name).runs_on(*capability):
            return name
    return None
