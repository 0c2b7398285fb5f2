"""Calls through IREE's `VmContext.invoke`, for functions the runtime doesn't launch directly:
`DirectInvoker` for synchronous functions, `FencedInvoker` for coarse-fences (asynchronous)
ones. Both push already-checked arguments themselves: IREE's generic argument marshalling
costs tens of µs per call in Python.
"""

from __future__ import annotations

from collections.abc import Sequence

import iree.runtime as rt
import numpy as np

from . import dlpack
from .asynchronous import AsyncArray, Timeline
from .devices import OUT_OF_MEMORY, Device
from .dlpack import DeviceArray


def push_arguments(name: str, device: Device, args: Sequence, arguments: rt.VmVariantList, keep: list) -> None:
    """Pushes a call's converted arguments; numpy arrays are copied to the device (after the
    call's Device.before_call)."""
    for value in args:
        if isinstance(value, AsyncArray):
            keep.append(value)
            value = value.device_array
        elif isinstance(value, np.ndarray):
            value = dlpack.upload(device, value)
        push_value(arguments, value, keep, f"{name}(): can't pass a {type(value).__name__} to an IREE function (arrays, ints and floats only)")


def push_value(arguments: rt.VmVariantList, value, keep: list, refusal: str) -> None:
    """Pushes one argument already on its device (a device array, kept alive in `keep` until
    the call returns) or a number; anything else is a TypeError saying `refusal`."""
    if isinstance(value, rt.DeviceArray):
        keep.append(value)
        arguments.push_ref(value._buffer_view)
    elif isinstance(value, (bool, int, np.integer)):
        arguments.push_int(int(value))
    elif isinstance(value, (float, np.floating)):
        arguments.push_float(float(value))
    else:
        raise TypeError(refusal)


def wrap_results(device: Device, results: rt.VmVariantList, dtypes: Sequence[np.dtype | None]) -> list[DeviceArray]:
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
        push_arguments(self.name, self._device, args, arguments, keep=[])
        results = rt.VmVariantList(max(len(self._result_dtypes), 1))
        try:
            self._context.invoke(self._function, arguments, results)
        except RuntimeError as exc:
            if not (self._device.pooled and any(m in str(exc) for m in OUT_OF_MEMORY)):
                raise
            self._device.trim()
            results = rt.VmVariantList(max(len(self._result_dtypes), 1))
            self._context.invoke(self._function, arguments, results)
        arrays = wrap_results(self._device, results, self._result_dtypes)
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
        push_arguments(self.name, self._device, args, arguments, keep)
        pending = [v for v in args if isinstance(v, AsyncArray) and not v.done]
        waits = [v.fence() for v in pending if v.device is not self._device or not self._device.in_order]
        if not self._device.in_order and timeline.value:
            waits.append(timeline.fence())
        signal = timeline.value + 1
        arguments.push_ref(rt.HalFence.join(waits) if waits else rt.HalFence(1))
        arguments.push_ref(timeline.fence(signal))
        results = rt.VmVariantList(max(len(self._result_dtypes), 1))
        self._context.invoke(self._function, arguments, results)
        arrays = wrap_results(self._device, results, self._result_dtypes)
        # Recorded only once the call is queued: a call that failed signals nothing, and a
        # later call must not wait for it.
        timeline.queued(signal, (arguments, results, *keep, *arrays))
        if self._asynchronous:
            arrays = [AsyncArray(a, timeline, signal, self._device) for a in arrays]
        else:
            timeline.wait()
        return arrays[0] if len(arrays) == 1 else tuple(arrays)
