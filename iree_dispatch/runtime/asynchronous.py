"""Asynchronous calls: a module compiled with `--iree-execution-model=async-external` exports
functions that take a wait and a signal fence (IREE's coarse-fences ABI). Loaded with
`asynchronous=True`, each call is queued behind the module's previous calls on its `Timeline`
and returns `AsyncArray`s, which wait for their call only when read (invokers.FencedInvoker
makes the calls).
"""

from __future__ import annotations

import weakref
from collections import deque
from typing import Any

import iree.runtime as rt
import numpy as np

from .devices import Device
from .dlpack import DeviceArray


class Timeline:
    """Orders a module's asynchronous calls, like a CUDA stream, with one semaphore: call i
    signals value i + 1.

    The timeline keeps every queued call's arguments and results referenced until the call has
    completed, so that the host releases nothing the GPU may still read or write. max_in_flight
    bounds how many calls are queued ahead of the GPU: the next call waits for the oldest first.
    """

    def __init__(self, device: rt.HalDevice, max_in_flight: int = 32):
        self.semaphore = device.create_semaphore(0)
        # IREE's semaphores (like its buffers) point into their device without holding it, so
        # the timeline holds the device, set after the semaphore: an object's attributes are
        # released in the order they were set, the semaphore first.
        self._device = device
        self.value = 0  # what the last queued call signals
        self.max_in_flight = max_in_flight
        self._pending: deque[tuple[int, tuple]] = deque()  # (signal value, references), oldest first
        _timelines.add(self)

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

    def settle(self) -> None:
        """Waits for every call queued so far and drops the references the timeline keeps,
        even where a call failed on the device (at interpreter exit, where nothing is left to
        report the failure to: see settle_timelines)."""
        try:
            self.fence().wait()
        except RuntimeError:
            pass
        self._pending.clear()


# Every timeline alive, settled at interpreter exit (exiting.py).
_timelines: weakref.WeakSet[Timeline] = weakref.WeakSet()


def settle_timelines() -> None:
    """Settles every timeline: its queued calls completed, the arrays, argument lists and
    fences it keeps for them dropped. Run at interpreter exit while each device is still held
    by the device table. A timeline's references form a cycle (a result passed to a later call
    is kept by the timeline and holds it), which only a collection frees, in no set order:
    after the device table let go of the device, one collection could free the device before
    the buffers and semaphores that point into it."""
    for timeline in list(_timelines):
        timeline.settle()


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

    @property
    def device_array(self) -> DeviceArray:
        """The device array without waiting: to queue another call behind this one's (reading
        it before `wait()` reads memory the call may still be writing)."""
        return self._array

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
