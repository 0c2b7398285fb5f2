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
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import iree.runtime as rt
import numpy as np

from .archs import parse_arch
from .dtypes import ELEMENT_TYPES
from .errors import DeviceError
from .reflection import REFLECTION_KEY, decode

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


def open_device(device: str = "cuda") -> rt.HalDevice:
    """The IREE device for a URI such as "cuda" or "cuda://0"; DeviceError if there is none."""
    if not device.startswith("cuda"):
        raise DeviceError(f"device {device!r}: iree_dispatch kernels run on CUDA devices only (use 'cuda' or 'cuda://N')")
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
            converted.append(_check_scalar(self.name, scalar, value))
        return converted

    def __call__(self, *args, **kwargs):
        converted = self.check(*args, **kwargs)
        on_device = any(isinstance(v, rt.DeviceArray) for v in converted)
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
        if isinstance(value, rt.DeviceArray):
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


def _check_scalar(kernel: str, scalar: dict, value):
    """A Python value for the generated function's argument, as emit.py packs it."""
    where = f"{kernel}(): argument {scalar['name']!r} ({scalar['ctype']})"
    kind, bits = scalar["kind"], 8 * scalar["bytes"]
    if kind in ("float", "double", "half", "bf16"):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{where} must be a number, got {type(value).__name__}")
        # double, half and bf16 travel as their bits (see dtypes.SCALAR_TYPES).
        if kind == "double":
            return int(np.array(float(value), np.float64).view(np.int64))
        if kind == "half":
            return int(np.array(float(value), np.float16).view(np.uint16))
        if kind == "bf16":
            return _bfloat16_bits(float(value))
        return float(value)
    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)) and value not in (0, 1):
            raise TypeError(f"{where} must be a bool (or 0/1), got {value!r}")
        return int(bool(value))
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{where} must be an integer, got {type(value).__name__}")
    value = int(value)
    lo, hi = (0, 2**bits - 1) if kind == "uint" else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if not lo <= value <= hi:
        raise ValueError(f"{where} = {value} is out of range [{lo}, {hi}]")
    # The argument is an i32 (i64 for 64-bit types): unsigned values travel as the same bits.
    width = 64 if bits == 64 else 32
    return value - 2**width if value >= 2 ** (width - 1) else value


def _bfloat16_bits(value: float) -> int:
    """bf16 bits of `value`, rounded to nearest even (as __float2bfloat16 does)."""
    bits = int(np.array(value, np.float32).view(np.uint32))
    if (bits & 0x7FFFFFFF) > 0x7F800000:  # NaN: keep it a (quiet) NaN
        return (bits >> 16) | 0x0040
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


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


class Module:
    """A vmfb loaded on one CUDA device. Kernels are attributes: `module.simple_mul(a, b)`."""

    def __init__(self, vmfb: str | Path, device: str = "cuda"):
        self.path = Path(vmfb)
        if not self.path.is_file():
            raise FileNotFoundError(f"no such module: {self.path}")
        self.device = open_device(device)
        self.config = rt.Config(device=self.device)
        self.vm_module = rt.VmModule.mmap(self.config.vm_instance, str(self.path))
        self.name, descriptions = read_descriptions(self.path, self.config.vm_instance)
        self.context = rt.SystemContext(config=self.config)
        try:
            self.context.add_vm_module(self.vm_module)
        except RuntimeError as exc:
            if "does not support any variant" in str(exc):
                built = next((d["archs"] for d in descriptions.values() if d), [])
                raise DeviceError(no_variant_message(self.path, cuda_compute_capability(device_ordinal(device)), built)) from None
            raise
        bound = self.context.modules[self.name]
        self.functions: dict[str, Callable] = {}
        for name, description in descriptions.items():
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


def load(vmfb: str | Path, device: str = "cuda") -> Module:
    """Loads `vmfb` on `device` ("cuda", "cuda://0", ...)."""
    return Module(vmfb, device)


def runs_on(archs: Sequence[str], capability: tuple[int, int]) -> str | None:
    """The arch whose variant a GPU of `capability` runs (the first that can), or None."""
    for name in archs:
        if parse_arch(name).runs_on(*capability):
            return name
    return None
