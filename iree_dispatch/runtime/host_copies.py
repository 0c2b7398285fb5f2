"""A direct call's numpy arrays in and out, queued on the stream its kernel is launched on, with
one wait for the whole call.

Each numpy input is written into a pinned staging buffer of its own (write-combined) and copied
into a pooled device buffer by a `cuMemcpyHtoDAsync` queued on the kernel's stream; the kernel
follows on that stream; each result is copied into a readback staging buffer of its own
(cached pinned memory) by a `cuMemcpyDtoHAsync` queued behind the kernel; then the call waits
for the stream once and copies the staged bytes into the numpy results. Each copy made alone
through IREE's queue (`Device.upload`, `Device.download`) is a round trip of its own, a queue
copy and a semaphore wait: about 50 µs each on an H100, four waits for a call of two inputs and
one result.

A staging buffer is in flight from the moment its copy is queued until the call's wait: it is
the call's alone (`Device.take_staging`) and given back only after that wait. A call that fails
on the way waits for the stream before it gives its buffers back; where even that wait fails,
they are dropped, never reused.

Ordering is the device's as for any direct call (devices.py): the call waits on the host for the
streams our memory may be in use on before its copies land in pooled buffers. Only calls on the
device's own launch stream stage their copies: a call queued on a caller's stream (torch, CuPy)
returns without waiting, so its numpy arguments take the synchronous copies. So do arrays the
staging path doesn't take (empty, over `STAGING_LIMIT`, an element type without a HAL type).
"""

from __future__ import annotations

from types import TracebackType

import iree.runtime as rt
import numpy as np
from iree.runtime.array_interop import map_dtype_to_element_type

from ..core.errors import DeviceError
from .devices import READBACK_STAGING, UPLOAD_STAGING, Device, StagingBuffer, staged
from .dlpack import DeviceArray, device_pointer, remember


class HostCopies:
    """One direct call's staged copies, on the device's launch stream. Use as a context manager:
    leaving it waits for what was queued (where the call didn't) and gives the staging buffers
    back.

        with HostCopies(device) as copies:
            x = copies.upload(numpy_array) or dlpack.upload(device, numpy_array)
            copies.queue_uploads()
            ...                               # the kernel, queued on the launch stream without waiting
            results = copies.read(results)    # or copies.wait() for results that stay on the device
    """

    def __init__(self, device: Device):
        self._device = device
        self._launcher = device.launcher
        self._uploads: list[tuple[int, int, int]] = []  # (device address, host address, bytes) not queued yet
        self._taken: list[StagingBuffer] = []
        self._in_flight = False  # a copy was queued that no wait has covered yet

    def __enter__(self) -> HostCopies:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if self._in_flight:
            try:
                self._launcher.synchronize(None)
            except DeviceError:
                self._taken = []  # copies may still read or write them: never reused
                return
            self._in_flight = False
        self._give_back()

    @property
    def pending(self) -> bool:
        """Whether copies were staged, so the call must end with `read` or `wait`."""
        return bool(self._taken)

    def upload(self, array: np.ndarray) -> DeviceArray | None:
        """A pooled device buffer that will hold a numpy array's contents once
        `queue_uploads` has queued its copy; None where staging doesn't apply. The caller has
        waited for the streams our memory may be in use on (Device.before_call)."""
        element_type = map_dtype_to_element_type(array.dtype)
        if element_type is None or not staged(array.nbytes):
            return None
        array = np.ascontiguousarray(array)  # as checked calls pass them already (no copy then)
        device = self._device
        target = device.allocate(array.nbytes)
        staging = self._take(array.nbytes, UPLOAD_STAGING)
        staging.view[:] = array.reshape(-1).view(np.uint8)
        uploaded = DeviceArray(device, rt.HalBufferView(target, array.shape, element_type), override_dtype=array.dtype)
        remember(device, uploaded)
        self._uploads.append((device_pointer(device, uploaded), staging.address, array.nbytes))
        return uploaded

    def queue_uploads(self) -> None:
        """Queues the copies `upload` prepared on the launch stream, ahead of the kernel."""
        if self._uploads:
            self._in_flight = True
            self._launcher.copy_to_device(self._uploads, None)
            self._uploads = []

    def read(self, results: list) -> list:
        """Numpy copies of a call's results (our device arrays), the kernel queued already: the
        reads queued behind it, one wait for the stream, then the staged bytes copied out.
        Results the staging path doesn't take are read after the wait (DeviceArray.to_host)."""
        reads: list[tuple[int, int, int]] = []
        staged_results: list[tuple[np.ndarray, StagingBuffer] | None] = []
        for result in results:
            host = np.empty(tuple(result._buffer_view.shape), result.raw_dtype())
            buffer = result._buffer_view.get_buffer()
            if not staged(host.nbytes) or buffer.byte_length() != host.nbytes:
                staged_results.append(None)
                continue
            staging = self._take(host.nbytes, READBACK_STAGING)
            reads.append((staging.address, device_pointer(self._device, result), host.nbytes))
            staged_results.append((host, staging))
        if reads:
            self._in_flight = True
            self._launcher.copy_to_host(reads, None)
        self.wait()
        hosts = []
        for result, found in zip(results, staged_results):
            if found is None:
                hosts.append(result.to_host())
                continue
            host, staging = found
            host.reshape(-1).view(np.uint8)[:] = staging.view
            hosts.append(result.as_result_dtype(host))
        return hosts

    def wait(self) -> None:
        """Waits once for the launch stream: the uploads, the kernel and the reads queued there."""
        self._launcher.synchronize(None)
        self._in_flight = False

    def _take(self, size: int, memory_type: int) -> StagingBuffer:
        staging = self._device.take_staging(size, memory_type)
        self._taken.append(staging)
        return staging

    def _give_back(self) -> None:
        if self._taken:
            self._device.give_back_staging(self._taken)
            self._taken = []
