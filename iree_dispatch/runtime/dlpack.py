"""Arrays of other frameworks (torch, CuPy, JAX, ...) in and out, without copies, via DLPack.

In: any object with `__dlpack__` and `__dlpack_device__`. A CUDA tensor must be on the module's
GPU, dense row-major and start at its allocation's data pointer; a CPU one goes the numpy way.
The capsule is read here first (dtype, shape, strides, device) so that a wrong tensor is refused
with the parameter's name before IREE sees it: IREE imports a capsule's pointer as device memory
without looking at its device.

Ordering: the call waits on the host for the work queued so far on the producer's stream, and
nothing else on the device. For torch and CuPy that is their current stream, asked directly; for
any other framework the capsule is requested for the device's bridge stream, so the producer
makes that stream wait for its work (DLPack's contract), and the call waits for the bridge.

Out: `DeviceArray` (an IREE device array with `__dlpack__`/`__dlpack_device__`), which
`torch.from_dlpack`, `cupy.from_dlpack` and `jax.dlpack.from_dlpack` take without a copy.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import iree.runtime as rt
import numpy as np
from iree.runtime.array_interop import map_dtype_to_element_type

from .compiled import compiled_launch
from .devices import KDL_CUDA, Device

KDL_CPU = 1
# The attribute under which one of our device arrays records what a prepared call reads of it
# (`remember`): the compiled launch is handed this name (launch.py, set_frameworks) and looks
# it up in the array's __dict__, never by a name of its own.
LAUNCH_ENTRY = "launch_entry"
# DLDataTypeCode → numpy kind (bf16 needs ml_dtypes: named by string, resolved by the caller)
_KINDS = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 6: "bool"}
_DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host (pinned)", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 10: "ROCm", 13: "CUDA managed"}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclass(frozen=True)
class Described:
    """What a DLPack capsule holds, read without taking it."""

    data: int  # the data pointer (before byte_offset)
    dtype: str  # numpy's name ("float32", "bfloat16", "bool", ...) or "code C, B bits"
    shape: tuple[int, ...]
    dense: bool  # row-major and contiguous (strides of size-1 dims don't matter)
    byte_offset: int


def describe(capsule: Any) -> Described:
    tensor = _DLTensor.from_address(_get_pointer(capsule, b"dltensor"))
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    dense = True
    if tensor.strides:
        expected = 1
        for i in reversed(range(tensor.ndim)):
            if shape[i] not in (0, 1) and tensor.strides[i] != expected:
                dense = False
            expected *= shape[i]
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    kind = _KINDS.get(code)
    if kind is None or lanes != 1:
        dtype = f"DLPack type code {code}, {bits} bits, {lanes} lanes"
    elif kind == "bool":
        dtype = "bool"
    else:
        dtype = f"{kind}{bits}"
    return Described(tensor.data or 0, dtype, shape, dense, tensor.byte_offset)


def export(value: Any, stream: int | None, where: str) -> tuple[Any, Described]:
    """A framework array's DLPack capsule (`stream`: DLPack's `__dlpack__(stream=...)`) and what
    it holds; ValueError (naming `where`) for an array a kernel can't take as it is."""
    try:
        capsule = value.__dlpack__(stream=stream)
    except (BufferError, RuntimeError, TypeError) as exc:
        raise ValueError(f"{where} can't be shared through DLPack: {exc}") from None
    described = describe(capsule)
    if not described.dense:
        raise ValueError(f"{where} is not contiguous (shape {list(described.shape)} with strides); pass a contiguous copy (torch/CuPy: .contiguous() / cupy.ascontiguousarray)")
    if described.byte_offset:
        raise ValueError(f"{where} starts {described.byte_offset} bytes into its DLPack buffer, which IREE can't import; pass a copy")
    return capsule, described


_BYTE_OFFSET = _DLTensor.byte_offset.offset


def capsule_data(capsule: Any) -> int:
    """The address of a DLPack capsule's first element (data + byte_offset), read alone (by the
    compiled launch module where there is one: a microsecond faster than through ctypes)."""
    compiled = compiled_launch()
    if compiled is not None:
        return compiled.capsule_address(capsule)
    tensor = _get_pointer(capsule, b"dltensor")
    return ctypes.c_uint64.from_address(tensor).value + ctypes.c_uint64.from_address(tensor + _BYTE_OFFSET).value


def torch_tensor_type() -> type | None:
    """torch.Tensor where torch is imported (never imports it)."""
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None)


def cupy_array_type() -> type | None:
    """cupy.ndarray where CuPy is imported (never imports it)."""
    cupy = sys.modules.get("cupy")
    return getattr(cupy, "ndarray", None)


def framework_current_stream(framework: str, ordinal: int) -> int:
    """The CUstream handle of torch's or CuPy's current stream on GPU `ordinal` (1 for the
    legacy default stream, which the driver also knows as 0)."""
    if framework == "torch":
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # ~0.2 µs, against ~2 µs for the public call
        return (raw(ordinal) if raw is not None else torch.cuda.current_stream(ordinal).cuda_stream) or 1
    cupy = sys.modules["cupy"]
    try:
        return cupy.cuda.get_current_stream(ordinal).ptr or 1
    except TypeError:  # a CuPy that only answers for its current device
        with cupy.cuda.Device(ordinal):
            return cupy.cuda.get_current_stream().ptr or 1


# Element types as torch names its dtypes (unsigned 16-64 bit since torch 2.3)
_TORCH_DTYPES = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i1": "bool", "i8": "int8", "i16": "int16",
    "i32": "int32", "i64": "int64", "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
}


def framework_of(arrays: Any) -> str | None:
    """"torch" if any of `arrays` is a torch tensor, else "cupy" if any is a CuPy array, else None:
    the framework whose arrays a call on them returns."""
    found = {type(a).__module__.partition(".")[0] for a in arrays}
    return "torch" if "torch" in found else "cupy" if "cupy" in found else None


def framework_empty(framework: str, mlir_type: str, shape: tuple[int, ...], ordinal: int) -> Callable[[], Any] | None:
    """A function making new uninitialized arrays of `framework` ("torch" or "cupy") of `shape`
    and the element type on GPU `ordinal`, each allocated on the framework's current stream;
    None for an element type the framework lacks (CuPy has no bf16)."""
    if framework == "torch":
        torch = sys.modules["torch"]
        dtype = getattr(torch, _TORCH_DTYPES[mlir_type], None)
        if dtype is None:
            return None
        return _torch_empty(torch, shape, dtype, ordinal)
    if mlir_type == "bf16":
        return None
    return functools.partial(_cupy_empty, shape, _TORCH_DTYPES[mlir_type], ordinal)


def _torch_empty(torch: Any, shape: tuple[int, ...], dtype: Any, ordinal: int) -> Callable[[], Any]:
    """A function making contiguous torch tensors of `shape` and `dtype` on GPU `ordinal`, from
    torch's caching allocator on its current stream. Where `ordinal` is torch's current device,
    through the allocation entry torch.compile's generated code uses (it skips torch.empty's
    argument parsing and dispatch: about 1 µs of a call's ~10 on the host); elsewhere, or in a
    torch without that entry, through torch.empty."""
    device = _torch_device(ordinal)
    # The sizes as separate ints: torch.empty parses them ~2 µs faster than one tuple (H100 host).
    empty = functools.partial(torch.empty, *shape, dtype=dtype, device=device) if shape else functools.partial(torch.empty, (), dtype=dtype, device=device)
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    empty_strided = getattr(guards, "_empty_strided_cuda", None)
    current_device = getattr(torch._C, "_cuda_getDevice", None)
    if empty_strided is None or current_device is None:
        return empty
    reversed_strides, stride = [], 1
    for size in reversed(shape):  # torch's contiguous strides (a size of 0 counts as 1)
        reversed_strides.append(stride)
        stride *= max(size, 1)
    strides = tuple(reversed(reversed_strides))

    def make() -> Any:
        return empty_strided(shape, strides, dtype) if current_device() == ordinal else empty()

    return make


def _cupy_empty(shape: tuple[int, ...], dtype: str, ordinal: int) -> Any:
    cupy = sys.modules["cupy"]
    if cupy.cuda.runtime.getDevice() == ordinal:  # CuPy allocates on its current device
        return cupy.empty(shape, dtype=dtype)
    with cupy.cuda.Device(ordinal):
        return cupy.empty(shape, dtype=dtype)


def array_address(framework: str, array: Any) -> int:
    """The address of a torch tensor's or CuPy array's first element."""
    return array.data_ptr() if framework == "torch" else array.data.ptr


def stream_getter(framework: str) -> Callable[[int], int]:
    """framework_current_stream for `framework`, as a function of the GPU ordinal (torch's
    raw getter itself where torch has one: it answers 0 for the legacy default stream)."""
    if framework == "torch":
        raw = getattr(sys.modules["torch"]._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw
    return functools.partial(framework_current_stream, framework)


def to_framework(framework: str, array: Any) -> Any:
    """One of our device arrays as `framework`'s array over the same memory (CuPy has no bf16:
    such an array stays ours)."""
    if framework == "torch":
        return sys.modules["torch"].from_dlpack(array)
    if str(array.dtype) == "bfloat16":
        return array
    return sys.modules["cupy"].from_dlpack(array)


_torch_devices: dict[int, Any] = {}


def _torch_device(ordinal: int) -> Any:
    found = _torch_devices.get(ordinal)
    if found is None:
        found = _torch_devices[ordinal] = sys.modules["torch"].device("cuda", ordinal)
    return found


def is_dlpack(value: Any) -> bool:
    """Whether `value` is another framework's array (numpy's and IREE's go their own ways)."""
    return hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__") and not isinstance(value, (np.ndarray, rt.DeviceArray))


def device_of(value: Any) -> tuple[int, int]:
    device_type, device_id = value.__dlpack_device__()
    return int(device_type), int(device_id)


def current_stream(value: Any) -> int | None:
    """The CUstream handle of the current stream of `value`'s framework on its device, for the
    frameworks known here (torch, CuPy), or None. Asking costs a few µs where DLPack's own
    ordering (an event and a stream wait per array) costs 20-30."""
    module = type(value).__module__.partition(".")[0]
    if sys.modules.get(module) is None or not hasattr(value, "__dlpack__"):
        return None
    if module == "torch" and value.is_cuda:
        return framework_current_stream("torch", value.get_device())
    if module == "cupy":
        return framework_current_stream("cupy", value.device.id)
    return None


def device_name(device_type: int, device_id: int) -> str:
    return f"{_DEVICE_NAMES.get(device_type, f'DLPack device type {device_type}')} device {device_id}"


class DeviceArray(rt.DeviceArray):
    """An IREE device array that other frameworks can take without a copy (`torch.from_dlpack`).

    The result of a call is complete when the call returns, so `__dlpack__` waits for nothing;
    it records the consumer's stream, and later calls on the device wait for the work queued
    there so far before reusing memory (see devices.py).
    """

    def __init__(self, device: Device, buffer_view: rt.HalBufferView, override_dtype: np.dtype | None = None):
        super().__init__(device.hal, buffer_view, implicit_host_transfer=True, override_dtype=override_dtype)
        self._dispatch_device = device

    def to_host(self) -> np.ndarray:
        """A numpy copy of the array (through a pinned staging buffer where that applies)."""
        self._dispatch_device.before_call()  # kernels queued on other streams may write it
        host = self._dispatch_device.download(self._buffer_view, self.raw_dtype())
        if host is None:
            with self._dispatch_device.bound():
                return super().to_host()
        return self.as_result_dtype(host)

    def raw_dtype(self) -> np.dtype:
        """The numpy dtype of the buffer's HAL element type: what a copy of its bytes holds."""
        return self._get_raw_dtype()

    def as_result_dtype(self, host: np.ndarray) -> np.ndarray:
        """A copy of the buffer's bytes (`host`, of `raw_dtype`) as the array's dtype, as IREE's
        to_host gives it."""
        raw = host.dtype
        return host if self._override_dtype is None or self._override_dtype == raw else host.astype(self._override_dtype)

    def __dlpack_device__(self) -> tuple[int, int]:
        return KDL_CUDA, self._dispatch_device.ordinal

    def __dlpack__(self, *, stream: int | None = None, max_version: tuple[int, int] | None = None, dl_device: Any = None, copy: bool | None = None) -> Any:
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"this array is on cuda:{self._dispatch_device.ordinal}; it can't be exported to {tuple(dl_device)} without a copy")
        if copy:
            raise BufferError("iree_dispatch arrays are exported without copies (copy=True is not supported)")
        self._dispatch_device.handed_to(stream)
        return self._dispatch_device.hal.create_dlpack_capsule(self._buffer_view, KDL_CUDA, self._dispatch_device.ordinal)


def upload(device: Device, array: np.ndarray) -> DeviceArray:
    """A copy of a numpy array on the device, in a pooled buffer filled through a staging
    buffer (Device.upload; IREE's synchronous transfer for an empty or a large array). The
    caller waits for the streams our memory may be in use on first (Device.before_call): the
    copy may land in a pooled buffer. Where kernels are launched directly on the device, the
    copy is known to prepared calls at once (`remember`)."""
    array = np.ascontiguousarray(array)
    element_type = map_dtype_to_element_type(array.dtype)
    view = device.upload(array, element_type) if element_type is not None else None
    if view is None:
        with device.bound():
            view = rt.asdevicearray(device.hal, array)._buffer_view
    uploaded = DeviceArray(device, view, override_dtype=array.dtype)
    if device.launches_directly:
        remember(device, uploaded)
    return uploaded


def remember(device: Device, array: rt.DeviceArray) -> None:
    """Records on one of our device arrays what a prepared call reads of it (_launch.c): its
    device, dtype, shape and address, none of which ever changes."""
    if type(array) is DeviceArray and LAUNCH_ENTRY not in array.__dict__:
        array.__dict__[LAUNCH_ENTRY] = (device, np.dtype(array.dtype), tuple(array.shape), device_pointer(device, array))


def device_pointer(device: Device, array: rt.DeviceArray) -> int:
    """The CUDA address of an IREE device array's data, read once through DLPack and kept on
    the array (its buffer never moves)."""
    pointer = array.__dict__.get("_device_pointer")
    if pointer is None:
        pointer = array._device_pointer = capsule_data(device.hal.create_dlpack_capsule(array._buffer_view, KDL_CUDA, device.ordinal))
    return pointer
