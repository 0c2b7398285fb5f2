"""A direct call on numpy arrays, on IREE's CPU device with a stand-in launcher whose stream
runs nothing until it is waited for (as a GPU's stream may): each numpy input's copy in, the
kernel and each result's copy out are queued on the launch stream, the call waits once, and
every staging buffer is the call's alone until that wait. A staging buffer shared by two
arguments, or handed to another copy before the wait, gives wrong results here (the queued
copies read the host memory only when the stream runs), as it would on a GPU."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np
import pytest

from iree_dispatch import runtime
from iree_dispatch.core.contract import KernelDescription, LaunchPlan, PushConstant, ScalarDescription, TensorDescription
from iree_dispatch.core.errors import DeviceError
from iree_dispatch.runtime import devices, dlpack, launch
from iree_dispatch.runtime.host_copies import HostCopies
from iree_dispatch.runtime.invocation import KernelFunction

STREAM = 0x5150


def host_view(address: int, count: int, dtype=np.float32) -> np.ndarray:
    """The `count` elements at a CPU device buffer's address (the device's memory is the host's)."""
    nbytes = count * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=dtype)


class QueuedLauncher:
    """Stands in for cuda_driver.Launcher: copies and kernels are queued on its stream and run
    only by `synchronize` (or a launch that waits), a copy reading its source then. `events`
    records what was queued and waited for, in order."""

    def __init__(self, kernel: Callable[[list[int]], None]):
        self.kernel = kernel  # runs a launch from its parameter values (addresses, then words)
        self.queue: list[Callable[[], None]] = []
        self.events: list[tuple] = []
        self.fail_launch = False
        self.fail_synchronize = False

    @property
    def stream(self) -> int:
        return STREAM

    def copy_to_device(self, copies, stream):
        for target, source, nbytes in copies:
            self.events.append(("to device", nbytes, stream))
            self.queue.append(lambda t=target, s=source, n=nbytes: ctypes.memmove(t, s, n))

    def copy_to_host(self, copies, stream):
        for target, source, nbytes in copies:
            self.events.append(("to host", nbytes, stream))
            self.queue.append(lambda t=target, s=source, n=nbytes: ctypes.memmove(t, s, n))

    def zero(self, address, nbytes, stream):
        self.queue.append(lambda: ctypes.memset(address, 0, nbytes))

    def launch(self, function, grid, block, shared_memory, stream, values, wait=False):
        if self.fail_launch:
            raise DeviceError("cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED")
        self.events.append(("launch", stream, wait))
        self.queue.append(lambda v=list(values): self.kernel(v))
        if wait:
            self.synchronize(stream)

    def synchronize(self, stream):
        self.events.append(("synchronize", stream))
        if self.fail_synchronize:
            raise DeviceError("cuStreamSynchronize (a kernel failed on the device) failed: CUDA_ERROR_ILLEGAL_ADDRESS")
        while self.queue:
            self.queue.pop(0)()


def mul_kernel(values: list[int]) -> None:
    """out = lhs * rhs over n floats (bindings lhs, rhs, out; push constant n)."""
    lhs, rhs, out, n = values
    host_view(out, n)[:] = host_view(lhs, n) * host_view(rhs, n)


def scale_rows_kernel(values: list[int]) -> None:
    """y = x * w (x: rows × cols, w: cols), m = the max of each row of x; in place: c *= 2."""
    x, w, c, y, m, rows, cols = values
    xs = host_view(x, rows * cols).reshape(rows, cols)
    host_view(y, rows * cols)[:] = (xs * host_view(w, cols)).reshape(-1)
    host_view(m, rows)[:] = xs.max(axis=1)
    host_view(c, rows)[:] *= np.float32(2)


def _description(name: str, inputs, outputs, sizes: tuple[str, ...], grid: str) -> KernelDescription:
    scalars = tuple(ScalarDescription(s, "int", "int", 4) for s in sizes)
    bindings = tuple(t.name for t in inputs) + tuple(t.name for t in outputs if not t.inplace)
    plan = LaunchPlan(executable=f"{name}_cu", entry=name, block=(64, 1, 1), variants=(), bindings=bindings,
                      constants=tuple(PushConstant(s, s.name) for s in scalars))
    return KernelDescription(name=name, function=name, source=f"{name}.cu", block=(64, 1, 1), grid=(grid, "1", "1"), inputs=inputs, outputs=outputs,
                             launch=plan)


MUL = _description("mul", (TensorDescription("lhs", "f32", ("n",)), TensorDescription("rhs", "f32", ("n",))),
                   (TensorDescription("out", "f32", ("n",)),), ("n",), "ceildiv(n, 64)")
SCALE_ROWS = _description(
    "scale_rows",
    (TensorDescription("x", "f32", ("rows", "cols")), TensorDescription("w", "f32", ("cols",)), TensorDescription("c", "f32", ("rows",))),
    (TensorDescription("y", "f32", ("rows", "cols")), TensorDescription("m", "f32", ("rows",)), TensorDescription("c", "f32", ("rows",), inplace=True)),
    ("rows", "cols"), "rows",
)


@pytest.fixture
def cpu(monkeypatch):
    """A CPU device whose launcher queues work until waited for; its own copies through IREE's
    queue (Device.upload/download) fail the test."""
    device = runtime.Device(0, runtime.rt.get_device("local-task"), pooled=False, in_order=False, cuda=False)
    monkeypatch.setattr(device, "_copy", lambda source, target: pytest.fail("a copy went through IREE's queue"))
    return device


def kernel_function(device: runtime.Device, description: KernelDescription, kernel: Callable[[list[int]], None]) -> tuple[KernelFunction, QueuedLauncher]:
    launcher = QueuedLauncher(kernel)
    device._launcher = launcher
    direct = launch.DirectLaunch(description, b"", 0, device, [np.dtype(np.float32)] * len(description.outputs))
    direct._function = description.name  # what the stand-in launcher is handed
    return KernelFunction(description, invoke=None, device=device, direct=direct), launcher


def fresh(rng, *shape) -> np.ndarray:
    return (rng.uniform(0.25, 4.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


def in_flight_free(device: runtime.Device) -> int:
    return sum(len(free) for free in device._staging_buffers.values())


def test_a_numpy_call_queues_its_copies_on_the_launch_stream_and_waits_once(cpu):
    mul, launcher = kernel_function(cpu, MUL, mul_kernel)
    rng = np.random.default_rng()
    n = int(rng.integers(1, 5000))
    a, b = fresh(rng, n), fresh(rng, n)  # two inputs of one size: a staging buffer each
    out = mul(a, b)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, a * b)
    assert launcher.events == [("to device", 4 * n, None), ("to device", 4 * n, None), ("launch", None, False), ("to host", 4 * n, None),
                               ("synchronize", None)]
    assert in_flight_free(cpu) == 3  # given back after the wait


def test_back_to_back_calls_with_other_data_reuse_staging_only_after_the_wait(cpu):
    mul, launcher = kernel_function(cpu, MUL, mul_kernel)
    rng = np.random.default_rng()
    for n in (7, 4099, 7, 1, 4099):
        a, b = fresh(rng, n), fresh(rng, n)
        want = a * b
        got = mul(a, b)
        a[:], b[:] = np.nan, np.nan  # the caller reuses its arrays at once
        np.testing.assert_array_equal(got, want)
    assert launcher.events.count(("synchronize", None)) == 5 and not launcher.queue


def test_inputs_of_different_sizes_outputs_and_in_place(cpu):
    scale_rows, launcher = kernel_function(cpu, SCALE_ROWS, scale_rows_kernel)
    rng = np.random.default_rng()
    for _ in range(3):
        rows, cols = (int(v) for v in rng.integers(1, 300, 2))
        x, w, c = fresh(rng, rows, cols), fresh(rng, cols), fresh(rng, rows)
        c_before = c.copy()
        y, m, c_out = scale_rows(x, w, c)
        np.testing.assert_array_equal(y, x * w)
        np.testing.assert_array_equal(m, x.max(axis=1))
        np.testing.assert_array_equal(c_out, c_before * np.float32(2))
        np.testing.assert_array_equal(c, c_before)  # a numpy argument is never written
    syncs = [e for e in launcher.events if e[0] == "synchronize"]
    assert len(syncs) == 3 and [e for e in launcher.events if e[0] == "launch"] == [("launch", None, False)] * 3


def test_a_call_with_device_arrays_returns_them_after_one_wait(cpu):
    mul, launcher = kernel_function(cpu, MUL, mul_kernel)
    rng = np.random.default_rng()
    a, b = fresh(rng, 1000), fresh(rng, 1000)
    db = dlpack.DeviceArray(cpu, runtime.rt.asdevicearray(cpu.hal, b)._buffer_view)
    launcher.events.clear()
    out = mul(a, db)  # numpy in, a device array in: a device array out
    assert isinstance(out, dlpack.DeviceArray)
    assert launcher.events == [("to device", 4000, None), ("launch", None, False), ("synchronize", None)]
    cpu._copy = devices.Device._copy.__get__(cpu)  # reading it back through IREE's queue, as to_host does
    np.testing.assert_array_equal(out.to_host(), a * b)


def test_arrays_beyond_the_staging_limit_take_the_synchronous_copies(cpu, monkeypatch):
    mul, launcher = kernel_function(cpu, MUL, mul_kernel)
    monkeypatch.setattr(devices, "STAGING_LIMIT", 64)
    rng = np.random.default_rng()
    a, b = fresh(rng, 100), fresh(rng, 100)
    np.testing.assert_array_equal(mul(a, b), a * b)
    assert launcher.events == [("launch", None, False), ("synchronize", None)]  # no staged copy; one wait, then IREE's reads


def test_staging_buffers_in_flight_are_never_handed_out(cpu):
    taken = [cpu.take_staging(64, devices.UPLOAD_STAGING) for _ in range(3)]
    assert len({s.address for s in taken}) == 3
    cpu.give_back_staging(taken[:1])
    again = cpu.take_staging(64, devices.UPLOAD_STAGING)
    assert again is taken[0]  # a buffer given back is reused; those still out are not
    assert cpu.take_staging(64, devices.UPLOAD_STAGING) not in taken
    assert cpu.take_staging(64, devices.READBACK_STAGING).memory_type == devices.READBACK_STAGING


def test_a_failed_launch_waits_for_the_queued_copies_before_their_buffers_go_back(cpu):
    mul, launcher = kernel_function(cpu, MUL, mul_kernel)
    launcher.fail_launch = True
    with pytest.raises(DeviceError, match="cuLaunchKernel failed"):
        mul(np.ones(16, np.float32), np.ones(16, np.float32))
    assert launcher.events[-1] == ("synchronize", None) and not launcher.queue
    assert in_flight_free(cpu) == 2


def test_buffers_of_a_stream_that_cant_be_waited_for_are_dropped(cpu):
    mul, launcher = kernel_function(cpu, MUL, mul_kernel)
    launcher.fail_synchronize = True
    with pytest.raises(DeviceError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        mul(np.ones(16, np.float32), np.ones(16, np.float32))
    assert in_flight_free(cpu) == 0  # copies may still use them: never reused


def test_host_copies_without_staged_copies_wait_for_nothing(cpu):
    cpu._launcher = QueuedLauncher(mul_kernel)
    with HostCopies(cpu) as copies:
        assert copies.upload(np.zeros(0, np.float32)) is None and not copies.pending
        copies.queue_uploads()
    assert cpu._launcher.events == []
