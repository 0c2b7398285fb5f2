"""One IREE device per GPU per process, with its output pool and its bridge to other
frameworks' streams.

Every module loaded on a GPU shares that GPU's `Device`: arrays, fences and semaphores of one
module are valid in another on the same GPU, and the process holds one CUDA stream and one
pool per GPU instead of one per module.

The output pool. A kernel's fresh outputs are allocated by IREE for each call. Without a pool
every call pays an allocation and a free, and the kernel writes memory that has never been
touched, which runs measurably slower than writing memory used before. Each device is therefore
created with IREE's caching allocator in front of its device-local heap: a buffer released
(its result dropped) goes back to a free list and serves the next request of the same size.
The pool is bounded (`IREE_DISPATCH_OUTPUT_POOL`: retained bytes, default a quarter of the
GPU's memory; "off" disables it), `trim()` returns its free buffers to CUDA, and a call that
runs out of memory trims the pool and tries once more.

Reuse is ordered by IREE's single queue per device: a buffer freed after a call is reused only
by work queued after that call. Our memory can also be in use on other streams: a buffer handed
to another framework (DLPack) can be read there after the framework drops it, and a direct
launch (launch.py) may be queued on a caller's stream. Every such stream is recorded, and work
on IREE's queue or on any other stream first waits, on the host, for the work queued there so far.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from dataclasses import dataclass, field

import iree.runtime as rt
import numpy as np

from ..core.errors import DeviceError
from . import cuda_driver

# IREE CUDA driver flags set before iree_dispatch opens its first device (IREE reads them when
# it creates the driver, process-wide; DRIVER_FLAGS_ENV replaces them, "" sets none).
#
# --cuda_async_allocations=false: with IREE's default (true), a call's fresh output comes from
# CUDA's stream-ordered pool (cuMemAllocFromPoolAsync), which bypasses the device's allocator
# and so the output pool, and whose release callback frees with a synchronous cuMemFree that
# waits for the device (48-74 µs to drop one result, against 4-5 µs, measured on an H100).
DRIVER_FLAGS_ENV = "IREE_DISPATCH_CUDA_FLAGS"
DEFAULT_DRIVER_FLAGS = ("--cuda_async_allocations=false",)
POOL_ENV = "IREE_DISPATCH_OUTPUT_POOL"
DEVICE_ENV = "IREE_DISPATCH_DEVICE"  # the GPU used where none is named ("cuda://1", "cuda://GPU-<uuid>")
POOL_FREE_BUFFERS = 256  # free buffers the pool keeps at most (IREE scans its free list linearly)
KDL_CUDA = 2  # DLPack's device type for CUDA memory
# Copies to and from the host go through pinned staging buffers kept per size. IREE's
# DeviceArray.to_host pins (cuMemHostRegister) and unpins the destination numpy array on every
# read: 282 µs for 4 KB against 47 µs through a kept staging buffer (H100), and repeated reads
# can fail with CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED when numpy hands out the same address
# again. IREE's asdevicearray (HalAllocator.allocate_buffer_copy) asks for device-local memory
# that is also host-visible: CUDA managed memory (cuMemAllocManaged and a prefetch per copy,
# cuMemFree when it is dropped), which the output pool (device-local memory only) never holds.
# So a copy to the device is a pooled device-local buffer filled from a staging buffer.
# A staging buffer is taken by one copy (or one call's copies) at a time and given back once
# its copy has completed (Device.take_staging): a direct call queues its copies on its launch
# stream and waits once (host_copies.py), so its buffers are in flight until then.
STAGING_BUFFERS = 16  # free staging buffers a device keeps at most
STAGING_LIMIT = 64 * 2**20  # larger arrays take IREE's path (a second copy costs more there)
# Uploads: write-combined pinned memory, which the host writes in a stream and the device
# reads fast. Readbacks: cached pinned memory (HOST_CACHED): the host reads write-combined
# memory uncached, many times slower.
UPLOAD_STAGING = int(rt.MemoryType.HOST_LOCAL) | int(rt.MemoryType.DEVICE_VISIBLE)
READBACK_STAGING = UPLOAD_STAGING | int(rt.MemoryType.HOST_CACHED)
_STAGING_USAGE = int(rt.BufferUsage.TRANSFER) | int(rt.BufferUsage.MAPPING_SCOPED) | int(rt.BufferUsage.MAPPING_PERSISTENT)
# What the pool holds: fresh outputs and copies to the device.
_DEVICE_MEMORY = int(rt.MemoryType.DEVICE_LOCAL)
_DEVICE_USAGE = int(rt.BufferUsage.DEFAULT)
# IREE's status text when an allocation fails for lack of device memory
OUT_OF_MEMORY = ("RESOURCE_EXHAUSTED", "CUDA_ERROR_OUT_OF_MEMORY")

_driver_flags_set = False
_lock = threading.Lock()
_devices: dict[int, Device] = {}


def staged(nbytes: int) -> bool:
    """Whether a copy of `nbytes` goes through a staging buffer (else IREE's own transfer)."""
    return 0 < nbytes <= STAGING_LIMIT


@dataclass(frozen=True)
class StagingBuffer:
    """A pinned host buffer of `size` bytes of one memory type (UPLOAD_STAGING or
    READBACK_STAGING), mapped once: its IREE buffer (what IREE's queue copies take), the mapping
    (kept: the view points into it), a numpy byte view of it, and the view's host address (what
    the driver's asynchronous copies take)."""

    buffer: rt.HalBuffer
    mapping: object
    view: np.ndarray
    address: int
    size: int
    memory_type: int


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


_SIZE = re.compile(r"(?i)^\s*(\d+)\s*(b|kib|mib|gib|tib|kb|mb|gb|tb)?\s*$")
_UNITS = {"b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def pool_capacity(ordinal: int) -> int | None:
    """Bytes the output pool of CUDA device `ordinal` retains at most; None when it is off."""
    text = os.environ.get(POOL_ENV)
    if text is None or text.strip().lower() in ("", "default"):
        memory = cuda_driver.total_memory(ordinal)
        return memory // 4 if memory else 2**30
    if text.strip().lower() in ("off", "0", "none"):
        return None
    match = _SIZE.match(text)
    if not match:
        raise DeviceError(f"{POOL_ENV}={text!r}: expected a size such as 8GiB or 512MiB, or 'off'")
    return int(match.group(1)) * _UNITS[(match.group(2) or "b").lower()]


def ordinal_of(uri: str) -> int:
    """The CUDA ordinal a device URI names: "cuda" (0), "cuda://N", or "cuda://GPU-<uuid>"."""
    if uri != "cuda" and not uri.startswith("cuda://"):
        raise DeviceError(f"device {uri!r}: iree_dispatch kernels run on CUDA devices only (use 'cuda', 'cuda://N' or 'cuda://GPU-<uuid>')")
    rest = uri[len("cuda://") :] if uri.startswith("cuda://") else ""
    count = cuda_driver.device_count()
    if count == 0:
        raise DeviceError(f"no CUDA device available for {uri!r} (no CUDA driver, or it finds no GPU)")
    if rest == "":
        return 0
    if rest.isdigit():
        ordinal = int(rest)
        if ordinal >= count:
            raise DeviceError(f"device {uri!r}: this machine has {count} CUDA device(s), cuda://0 to cuda://{count - 1}")
        return ordinal
    if rest.upper().startswith("GPU-"):
        for ordinal in range(count):
            if (cuda_driver.device_uuid(ordinal) or "").lower() == rest.lower():
                return ordinal
        raise DeviceError(f"device {uri!r}: no CUDA device has this UUID (nvidia-smi -L lists them)")
    raise DeviceError(f"device {uri!r}: expected 'cuda', 'cuda://N' or 'cuda://GPU-<uuid>'")


@dataclass
class Device:
    """A GPU as this process uses it: its IREE device, pool and framework bridge."""

    ordinal: int
    hal: rt.HalDevice
    pooled: bool
    # Whether the device runs queued work in submission order. IREE 3.13's CUDA device queues
    # everything on one stream; other devices (IREE's CPU device in the tests) may not.
    in_order: bool = True
    cuda: bool = True  # a CUDA device (direct launches apply); tests run IREE's CPU device too
    _bridge: cuda_driver.StreamBridge | None = None
    _launcher: cuda_driver.Launcher | None = None
    # Streams other than IREE's queue on which our memory may still be in use (see above).
    _foreign_streams: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # The free staging buffers, (size, memory type) → buffers, the key given back last at the end.
    _staging_buffers: dict[tuple[int, int], list[StagingBuffer]] = field(default_factory=dict)
    _staging_lock: threading.Lock = field(default_factory=threading.Lock)
    _transfers: rt.HalSemaphore | None = None
    _transfer_value: int = 0
    # The outputs a synchronous direct call made for its kernel's next call while the kernel
    # ran: [the prepared call they are for, the arrays], or [None, None] (_launch.c).
    outputs_made_ahead: list = field(default_factory=lambda: [None, None])

    @property
    def uri(self) -> str:
        return f"cuda://{self.ordinal}"

    @property
    def bridge(self) -> cuda_driver.StreamBridge:
        """The stream through which this device waits for other frameworks (created on first use)."""
        if self._bridge is None:
            self._bridge = cuda_driver.StreamBridge(self.ordinal)
        return self._bridge

    @property
    def launcher(self) -> cuda_driver.Launcher:
        """Where direct launches load and queue their kernels (created on first use)."""
        if self._launcher is None:
            with self._lock:
                if self._launcher is None:
                    self._launcher = cuda_driver.Launcher(self.ordinal)
        return self._launcher

    def bound(self) -> contextlib.AbstractContextManager:
        """This GPU's context current on the calling thread for the duration (pushed where
        another GPU's is): IREE's CUDA device loads executables and allocates memory in the
        thread's current context. Every use of `hal` that may reach the driver runs inside."""
        return cuda_driver.context_of(self.ordinal) if self.cuda else contextlib.nullcontext()

    @property
    def launches_directly(self) -> bool:
        """Whether kernels are launched directly on this device (a module with launch plans was loaded)."""
        return self._launcher is not None

    @property
    def streams_in_use(self) -> set[int]:
        """The streams other than IREE's queue on which our memory may still be in use (see
        `handed_to`). The set itself, kept up to date: the compiled launch holds it and tests
        it before each prepared call (_launch.c)."""
        return self._foreign_streams

    def handed_to(self, stream: int | None) -> None:
        """Records that our memory is in use on `stream`: one of our arrays was handed to a
        consumer working there, or a kernel was queued there (DLPack's numbering is the
        driver's: 1 is the legacy default stream, 2 the per-thread one; -1: no stream)."""
        if stream != -1:
            self._foreign_streams.add(stream or 1)  # None and 0 name the legacy default stream too

    def before_call(self, on_stream: int | None = None) -> None:
        """Waits for the work queued so far on the recorded streams (see the module docstring),
        except `on_stream`, where the work about to be queued follows it anyway."""
        for stream in list(self._foreign_streams):
            if stream != on_stream and not self.bridge.wait_for(stream):
                self._foreign_streams.discard(stream)

    def trim(self) -> None:
        """Returns the pool's free buffers to CUDA, first releasing the outputs made ahead for
        a direct call's next call."""
        self.outputs_made_ahead[:] = [None, None]
        with self.bound():
            self.hal.allocator.trim()

    def release(self) -> None:
        """Drops what the device keeps for later calls: the outputs made ahead, the staging
        buffers and the transfer semaphore (at interpreter exit, exiting.py)."""
        self.outputs_made_ahead[:] = [None, None]
        self._staging_buffers.clear()
        self._transfers = None

    def allocate(self, size: int) -> rt.HalBuffer:
        """A device-local buffer of `size` bytes from the pool. On running out of memory the
        pool is trimmed and the allocation tried once more."""
        allocator = self.hal.allocator
        try:
            return allocator.allocate_buffer(_DEVICE_MEMORY, _DEVICE_USAGE, size)
        except RuntimeError as exc:
            if not self.pooled or not any(m in str(exc) for m in OUT_OF_MEMORY):
                raise
            self.trim()
            return allocator.allocate_buffer(_DEVICE_MEMORY, _DEVICE_USAGE, size)

    def upload(self, array: np.ndarray, element_type: int) -> rt.HalBufferView | None:
        """A pooled device buffer view holding a C-contiguous numpy array's contents, copied on
        IREE's queue and waited for; None where the staging path doesn't apply (an empty or a
        large array)."""
        if not staged(array.nbytes):
            return None
        with self.bound():
            target = self.allocate(array.nbytes)
            staging = self.take_staging(array.nbytes, UPLOAD_STAGING)
            staging.view[:] = array.reshape(-1).view(np.uint8)
            self._copy(staging.buffer, target)
            self.give_back_staging([staging])
        return rt.HalBufferView(target, array.shape, element_type)

    def download(self, buffer_view: rt.HalBufferView, dtype: np.dtype) -> np.ndarray | None:
        """A new numpy array holding a device buffer view's contents, copied on IREE's queue
        and waited for; None where the staging path doesn't apply (a buffer of another size
        than the array, or a large one)."""
        out = np.empty(tuple(buffer_view.shape), dtype)
        if out.nbytes == 0:
            return out
        source = buffer_view.get_buffer()
        if source.byte_length() != out.nbytes or not staged(out.nbytes):
            return None
        with self.bound():
            staging = self.take_staging(out.nbytes, READBACK_STAGING)
            self._copy(source, staging.buffer)
            out.reshape(-1).view(np.uint8)[:] = staging.view
            self.give_back_staging([staging])
        return out

    def take_staging(self, size: int, memory_type: int) -> StagingBuffer:
        """A pinned host buffer of exactly `size` bytes (IREE's queue copy moves a whole source
        buffer) of `memory_type` (UPLOAD_STAGING or READBACK_STAGING), the caller's alone until
        it gives it back (`give_back_staging`) once no copy queued through it is pending: a
        free one kept from earlier, else a new one. Buffers in flight are never handed out,
        so two arguments of one call, or calls of two threads, never share one."""
        key = (size, memory_type)
        with self._staging_lock:
            free = self._staging_buffers.get(key)
            if free:
                found = free.pop()
                if not free:
                    del self._staging_buffers[key]
                return found
        buffer = self.hal.allocator.allocate_buffer(memory_type=memory_type, allowed_usage=_STAGING_USAGE, allocation_size=size)
        mapping = buffer.map()
        view = mapping.asarray([size], np.dtype(np.uint8))
        return StagingBuffer(buffer, mapping, view, view.ctypes.data, size, memory_type)

    def give_back_staging(self, buffers: list[StagingBuffer]) -> None:
        """Keeps staging buffers whose copies have completed for reuse: at most STAGING_BUFFERS
        free ones, those of the size given back least recently dropped first."""
        with self._staging_lock:
            for staging in buffers:
                key = (staging.size, staging.memory_type)
                free = self._staging_buffers.pop(key, [])
                free.append(staging)
                self._staging_buffers[key] = free  # last in the order: the most recent
            count = sum(len(free) for free in self._staging_buffers.values())
            while count > STAGING_BUFFERS:
                oldest = next(iter(self._staging_buffers))
                free = self._staging_buffers[oldest]
                free.pop(0)
                if not free:
                    del self._staging_buffers[oldest]
                count -= 1

    def _copy(self, source: rt.HalBuffer, target: rt.HalBuffer) -> None:
        """Copies on the device's queue (after the work queued so far) and waits for it."""
        with self._lock:
            if self._transfers is None:
                self._transfers = self.hal.create_semaphore(0)
            value = self._transfer_value
            self._transfer_value += 1
            self.hal.queue_copy(source, target, rt.HalFence.create_at(self._transfers, value), rt.HalFence.create_at(self._transfers, value + 1))
            rt.HalFence.create_at(self._transfers, value + 1).wait()


def default_uri() -> str:
    """The device `load` takes when none is named: $IREE_DISPATCH_DEVICE, else "cuda"."""
    return os.environ.get(DEVICE_ENV) or "cuda"


def device(uri: str | None = None) -> Device:
    """The process's Device for `uri` (default: default_uri()), created on first use;
    DeviceError if there is none."""
    ordinal = ordinal_of(uri or default_uri())
    with _lock:
        found = _devices.get(ordinal)
        if found is None:
            _set_driver_flags()
            capacity = pool_capacity(ordinal)
            allocators = [f"caching:DEVICE_LOCAL=*;{capacity};{POOL_FREE_BUFFERS}"] if capacity else []
            try:
                with cuda_driver.context_of(ordinal):  # IREE makes the new device's context current: not beyond this
                    hal = rt.get_driver("cuda").create_device_by_uri(f"cuda://{ordinal}", allocators=allocators)
            except (RuntimeError, ValueError) as exc:
                raise DeviceError(f"no CUDA device available for {uri!r}: {exc}") from None
            found = _devices[ordinal] = Device(ordinal, hal, pooled=bool(capacity))
        return found


def release_devices() -> None:
    """Releases what every device keeps and forgets the devices (at interpreter exit,
    exiting.py): they go when the last module or array using them does."""
    with _lock:
        for found in _devices.values():
            found.release()
        _devices.clear()


def open_device(uri: str | None = None) -> rt.HalDevice:
    """The IREE device for a URI such as "cuda" or "cuda://0"; DeviceError if there is none."""
    return device(uri).hal


def cuda_device_available(uri: str | None = None) -> bool:
    try:
        device(uri)
        return True
    except DeviceError:
        return False
