"""The few CUDA driver calls the runtime needs that IREE's Python API doesn't offer: device
queries (compute capability, name, memory) and, for arrays shared with other frameworks, a
stream and an event to wait for their work on the host without synchronizing the device.

The driver library (libcuda) is present wherever IREE's `cuda` HAL driver works, so it is
called directly through ctypes; every function answers None (or raises DeviceError for the
stream operations) where it is missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Iterator, Sequence
from functools import cache
from types import ModuleType

from ..core.errors import DeviceError
from .compiled import compiled_launch

# CUdevice_attribute values (cuda.h)
_COMPUTE_CAPABILITY_MAJOR = 75
_COMPUTE_CAPABILITY_MINOR = 76
_STREAM_NON_BLOCKING = 1
_EVENT_DISABLE_TIMING = 2
_ERROR_INVALID_HANDLE = 400


@cache
def _library() -> ctypes.CDLL | None:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if cuda.cuInit(0) != 0:
        return None
    return cuda


def _device(ordinal: int) -> ctypes.c_int | None:
    cuda = _library()
    device = ctypes.c_int()
    if cuda is None or cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
        return None
    return device


@cache
def _primary_context(ordinal: int) -> int | None:
    """Device `ordinal`'s primary context, the one IREE's CUDA device and the frameworks use
    (retained for the process's life), or None where the driver or the device is missing."""
    cuda, device = _library(), _device(ordinal)
    context = ctypes.c_void_p()
    if device is None or cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) != 0:
        return None
    return context.value


@contextlib.contextmanager
def context_of(ordinal: int) -> Iterator[None]:
    """Device `ordinal`'s primary context current on the calling thread for the duration:
    pushed where another context is current, popped after. IREE's CUDA device loads executables
    and allocates memory in whatever context the calling thread has current, so with several
    GPUs in one process each device's work must run in its own. On a thread with no current
    context it is made current and stays so, as IREE, torch and CuPy leave theirs (IREE's own
    function calls on the thread then find it). Does nothing where the driver or the device is
    missing (IREE then fails as it would)."""
    cuda, context = _library(), _primary_context(ordinal)
    current = ctypes.c_void_p()
    if context is None or (cuda.cuCtxGetCurrent(ctypes.byref(current)) == 0 and current.value == context):
        yield
        return
    if not current.value:
        _check(cuda, cuda.cuCtxSetCurrent(ctypes.c_void_p(context)), f"cuCtxSetCurrent (cuda://{ordinal})")
        yield
        return
    _check(cuda, cuda.cuCtxPushCurrent_v2(ctypes.c_void_p(context)), f"cuCtxPushCurrent (cuda://{ordinal})")
    try:
        yield
    finally:
        cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


def device_count() -> int:
    cuda = _library()
    count = ctypes.c_int()
    if cuda is None or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def compute_capability(ordinal: int = 0) -> tuple[int, int] | None:
    """(major, minor) of CUDA device `ordinal`, or None if unavailable."""
    cuda, device = _library(), _device(ordinal)
    if device is None:
        return None
    major, minor = ctypes.c_int(), ctypes.c_int()
    if cuda.cuDeviceGetAttribute(ctypes.byref(major), _COMPUTE_CAPABILITY_MAJOR, device) or cuda.cuDeviceGetAttribute(
        ctypes.byref(minor), _COMPUTE_CAPABILITY_MINOR, device
    ):
        return None
    return major.value, minor.value


def device_name(ordinal: int = 0) -> str | None:
    cuda, device = _library(), _device(ordinal)
    name = ctypes.create_string_buffer(256)
    if device is None or cuda.cuDeviceGetName(name, 256, device) != 0:
        return None
    return name.value.decode()


def total_memory(ordinal: int = 0) -> int | None:
    """Bytes of memory on CUDA device `ordinal`, or None if unavailable."""
    cuda, device = _library(), _device(ordinal)
    size = ctypes.c_size_t()
    if device is None or cuda.cuDeviceTotalMem_v2(ctypes.byref(size), device) != 0:
        return None
    return size.value


def device_uuid(ordinal: int) -> str | None:
    """The device's UUID as nvidia-smi spells it ("GPU-xxxxxxxx-xxxx-..."), or None."""
    cuda, device = _library(), _device(ordinal)
    raw = (ctypes.c_ubyte * 16)()
    if device is None or cuda.cuDeviceGetUuid_v2(raw, device) != 0:
        return None
    h = bytes(raw).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _check(cuda: ctypes.CDLL, rc: int, what: str) -> None:
    """Raises DeviceError naming `what` and the driver's error for a failed call (rc != 0)."""
    if rc != 0:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(rc, ctypes.byref(name))
        raise DeviceError(f"{what} failed: {name.value.decode() if name.value else rc}")


class _DeviceStream:
    """One device's primary context (the context IREE's CUDA device uses) and a non-blocking
    stream of our own in it."""

    def __init__(self, ordinal: int):
        if _device(ordinal) is None:
            raise DeviceError(f"cuda://{ordinal}: the CUDA driver library (libcuda.so.1) can't open this device")
        context = _primary_context(ordinal)
        if context is None:
            raise DeviceError(f"cuda://{ordinal}: cuDevicePrimaryCtxRetain failed")
        self._cuda = cuda = _library()
        self._context = ctypes.c_void_p(context)
        # Reentrant: a module's finalizer (Launcher.unload) may run in a collection that starts
        # while this thread holds it.
        self._lock = threading.RLock()
        with self._current():
            self._stream = ctypes.c_void_p()
            self._check(cuda.cuStreamCreate(ctypes.byref(self._stream), _STREAM_NON_BLOCKING), "cuStreamCreate")

    @contextlib.contextmanager
    def _current(self) -> Iterator[None]:
        """This device's primary context, current on the calling thread for the duration."""
        with self._lock:
            self._check(self._cuda.cuCtxPushCurrent_v2(self._context), "cuCtxPushCurrent")
            try:
                yield
            finally:
                self._cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    def _check(self, rc: int, what: str) -> None:
        _check(self._cuda, rc, what)


class StreamBridge(_DeviceStream):
    """A stream of our own on one device, used to wait on the host for other frameworks' work.

    DLPack's protocol orders an exchange through the consumer's stream: `x.__dlpack__(stream=s)`
    makes `s` wait (on the device, by an event) for the work the producer has queued on its
    current stream. Passing this bridge's stream and then synchronizing it waits for exactly
    that work, and nothing else on the device. `wait_for(stream)` does the same for a stream
    a consumer named when it took one of our arrays.
    """

    def __init__(self, ordinal: int):
        super().__init__(ordinal)
        with self._current():
            self._event = ctypes.c_void_p()
            self._check(self._cuda.cuEventCreate(ctypes.byref(self._event), _EVENT_DISABLE_TIMING), "cuEventCreate")

    @property
    def handle(self) -> int:
        """The stream's handle, as DLPack's `stream=` argument takes it."""
        return self._stream.value

    def synchronize(self) -> None:
        """Waits on the host until the work queued on the bridge stream has completed."""
        with self._current():
            self._check(self._cuda.cuStreamSynchronize(self._stream), "cuStreamSynchronize")

    def wait_for(self, stream: int) -> bool:
        """Waits on the host for the work queued so far on `stream`; False if the stream is gone."""
        with self._current():
            rc = self._cuda.cuEventRecord(self._event, ctypes.c_void_p(stream))
            if rc == _ERROR_INVALID_HANDLE:
                return False
            self._check(rc, "cuEventRecord")
            self._check(self._cuda.cuEventSynchronize(self._event), "cuEventSynchronize")
        return True


# CUfunction_attribute: the dynamic shared memory a launch may ask for (above 48 KiB it must be set)
_FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_DEFAULT_SHARED_MEMORY_LIMIT = 48 * 1024


class Launcher(_DeviceStream):
    """Loads kernel images into one device's primary context and launches them, on its own
    stream or on a stream the caller names.

    `launch` is the hot path of a direct call: one call of the compiled launch (compiled.py),
    or a handful of ctypes calls where there is none.
    """

    def __init__(self, ordinal: int):
        super().__init__(ordinal)
        cuda = self._cuda
        self._push, self._pop = cuda.cuCtxPushCurrent_v2, cuda.cuCtxPopCurrent_v2
        self._launch, self._synchronize = cuda.cuLaunchKernel, cuda.cuStreamSynchronize
        self._popped = ctypes.c_void_p()
        self._threads = threading.local()  # .current: the primary context was current on this thread at its last launch
        self._cells: dict[int, tuple[ctypes.Array, ctypes.Array]] = {}  # the ctypes path's parameter cells, by count
        self._compiled = compiled_launch()
        if self._compiled is not None:
            functions = (cuda.cuLaunchKernel, cuda.cuStreamSynchronize, cuda.cuCtxGetCurrent, cuda.cuCtxPushCurrent_v2, cuda.cuCtxPopCurrent_v2,
                         cuda.cuMemsetD8Async)
            self._compiled.set_driver(*(ctypes.cast(f, ctypes.c_void_p).value for f in functions))

    @property
    def stream(self) -> int:
        """The handle of the launcher's own stream (non-blocking)."""
        return self._stream.value

    @property
    def context(self) -> int:
        """The handle of the device's primary context."""
        return self._context.value

    @property
    def compiled(self) -> ModuleType | None:
        """The compiled launch module (compiled.py), or None where launches go through ctypes."""
        return self._compiled

    def check(self, rc: int, what: str) -> None:
        """Raises DeviceError naming `what` and the driver's error for a failed call (rc != 0)."""
        self._check(rc, what)

    def load(self, image: bytes, entry: str, shared_memory: int) -> tuple[ctypes.c_void_p, ctypes.c_void_p]:
        """The CUmodule of a cubin, fatbin or PTX image (PTX is compiled by the driver) and its
        CUfunction `entry`, allowed `shared_memory` bytes of dynamic shared memory. The caller
        unloads the module (`unload`) when it no longer launches the function."""
        if not image.startswith(b"\x7fELF") and not image.endswith(b"\0"):
            image += b"\0"  # PTX is read as a C string
        module, function = ctypes.c_void_p(), ctypes.c_void_p()
        with self._current():
            self._check(self._cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(image)), f"cuModuleLoadData (kernel {entry})")
            self._check(self._cuda.cuModuleGetFunction(ctypes.byref(function), module, entry.encode()), f"cuModuleGetFunction ({entry})")
            # Loaded now, not at its first launch (CUDA's lazy loading): loading can wait for
            # the device, and a call must never wait for work queued before it.
            load = getattr(self._cuda, "cuFuncLoad", None)
            if load is not None:
                self._check(load(function), f"cuFuncLoad ({entry})")
            if shared_memory > _DEFAULT_SHARED_MEMORY_LIMIT:
                rc = self._cuda.cuFuncSetAttribute(function, _FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_memory)
                self._check(rc, f"cuFuncSetAttribute ({entry}, {shared_memory} bytes of shared memory)")
        return module, function

    def zero(self, address: int, nbytes: int, stream: int | None) -> None:
        """Queues a fill of `nbytes` zero bytes at device `address` on `stream` (None: the
        launcher's own), ahead of a kernel queued there next: a zero-filled output's memset."""
        handle = self._stream.value if stream is None else stream
        with self._current():
            rc = self._cuda.cuMemsetD8Async(ctypes.c_uint64(address), ctypes.c_ubyte(0), ctypes.c_size_t(nbytes), ctypes.c_void_p(handle))
        self._check(rc, f"cuMemsetD8Async ({nbytes} bytes at {address:#x})")

    def copy_to_device(self, copies: Sequence[tuple[int, int, int]], stream: int | None) -> None:
        """Queues copies from pinned host memory to the device on `stream` (None: the
        launcher's own), in order: (device address, host address, bytes) each. The host memory
        must stay as it is until the stream has passed them."""
        handle = ctypes.c_void_p(self._stream.value if stream is None else stream)
        with self._current():
            for target, source, nbytes in copies:
                rc = self._cuda.cuMemcpyHtoDAsync_v2(ctypes.c_uint64(target), ctypes.c_void_p(source), ctypes.c_size_t(nbytes), handle)
                self._check(rc, f"cuMemcpyHtoDAsync ({nbytes} bytes to {target:#x})")

    def copy_to_host(self, copies: Sequence[tuple[int, int, int]], stream: int | None) -> None:
        """Queues copies from the device to pinned host memory on `stream` (None: the
        launcher's own), in order: (host address, device address, bytes) each. The host memory
        holds them once the stream has passed them (`synchronize`)."""
        handle = ctypes.c_void_p(self._stream.value if stream is None else stream)
        with self._current():
            for target, source, nbytes in copies:
                rc = self._cuda.cuMemcpyDtoHAsync_v2(ctypes.c_void_p(target), ctypes.c_uint64(source), ctypes.c_size_t(nbytes), handle)
                self._check(rc, f"cuMemcpyDtoHAsync ({nbytes} bytes from {source:#x})")

    def synchronize(self, stream: int | None) -> None:
        """Waits on the host until the work queued on `stream` (None: the launcher's own) has
        completed. The context is pushed without the launcher's lock: a wait must not hold up
        other threads' launches (a thread's context stack is its own)."""
        handle = ctypes.c_void_p(self._stream.value if stream is None else stream)
        self._check(self._push(self._context), "cuCtxPushCurrent")
        try:
            rc = self._synchronize(handle)
        finally:
            self._pop(ctypes.byref(ctypes.c_void_p()))
        self._check(rc, "cuStreamSynchronize (a kernel failed on the device)")

    def unload(self, module: ctypes.c_void_p) -> None:
        """Unloads a module `load` returned (errors are ignored: it runs from finalizers)."""
        with self._current():
            self._cuda.cuModuleUnload(module)

    def launch(self, function: ctypes.c_void_p, grid: tuple[int, int, int], block: tuple[int, int, int], shared_memory: int, stream: int | None,
               values: Sequence[int], wait: bool = False) -> None:
        """Queues `function` on `stream` (None: the launcher's own) with `values`, one int per
        kernel parameter (addresses and 32-bit words). wait: also waits until the stream's work
        has completed.

        The primary context is usually current on the calling thread already (IREE, torch and
        CuPy make it current and leave it so): a thread where it was found current launches
        without pushing it, through the compiled launch where there is one (compiled.py). A
        launch that fails there (the thread's context changed: the function and stream don't
        belong to it) is made again the safe way, the context pushed for the launch and popped
        after."""
        handle = self._stream.value if stream is None else stream
        threads = self._threads
        if getattr(threads, "current", False):
            if self._compiled is not None:
                failed = self._compiled.launch(function.value, grid, block, shared_memory, handle, values, wait)
                if failed is None:
                    return
                if not failed[0]:  # launched, then the stream's work failed: nothing to retry
                    self._check(failed[1], "cuStreamSynchronize (a kernel failed on the device)")
            else:
                target = ctypes.c_void_p(handle)
                rc = self._launch_through_ctypes(function, grid, block, shared_memory, target, values)
                if not rc:
                    if wait:
                        self._check(self._synchronize(target), "cuStreamSynchronize (a kernel failed on the device)")
                    return
            threads.current = False
        target = ctypes.c_void_p(handle)
        waited = 0
        with self._lock:
            self._push(self._context)
            try:
                rc = self._launch_through_ctypes(function, grid, block, shared_memory, target, values)
                if wait and not rc:
                    waited = self._synchronize(target)
            finally:
                self._pop(ctypes.byref(self._popped))
        if rc:
            self._check(rc, f"cuLaunchKernel (grid {list(grid)}, block {list(block)}, {shared_memory} bytes of shared memory)")
        if waited:
            self._check(waited, "cuStreamSynchronize (a kernel failed on the device)")
        current = ctypes.c_void_p()
        threads.current = not self._cuda.cuCtxGetCurrent(ctypes.byref(current)) and current.value == self._context.value

    def _launch_through_ctypes(self, function: ctypes.c_void_p, grid: tuple[int, int, int], block: tuple[int, int, int], shared_memory: int,
                               target: ctypes.c_void_p, values: Sequence[int]) -> int:
        """cuLaunchKernel through ctypes, its kernelParams a pointer to an 8-byte cell per value;
        the cells are reused between launches under the lock (cuLaunchKernel copies them)."""
        with self._lock:
            found = self._cells.get(len(values))
            if found is None:
                cells = (ctypes.c_uint64 * len(values))()
                base = ctypes.addressof(cells)
                found = self._cells[len(values)] = (cells, (ctypes.c_void_p * len(values))(*(base + 8 * i for i in range(len(values)))))
            found[0][:] = values
            return self._launch(function, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_memory, target, found[1], None)

