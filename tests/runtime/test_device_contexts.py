"""Which CUDA context is current while the runtime uses a GPU's IREE device, on the CPU with a
stand-in driver library: IREE's CUDA device loads executables and allocates memory in the
calling thread's current context, so with several GPUs in one process each device's work must
run in its own (cuda_driver.context_of, Device.bound, OnDevice)."""

from __future__ import annotations

import contextlib

import pytest

from iree_dispatch.runtime import OnDevice, cuda_driver, devices

CONTEXTS = {0: 0xC000, 1: 0xC100}  # each GPU's primary context


class FakeLibrary:
    """The context calls of libcuda: the thread's current context, the ones pushed under it,
    and every call made."""

    def __init__(self, current: int | None, push_rc: int = 0):
        self.current, self.stack, self.calls, self.push_rc = current, [], [], push_rc

    def cuCtxGetCurrent(self, out):
        self.calls.append("get")
        out._obj.value = self.current
        return 0

    def cuCtxSetCurrent(self, context):
        self.calls.append(("set", context.value))
        self.current = context.value
        return 0

    def cuCtxPushCurrent_v2(self, context):
        self.calls.append(("push", context.value))
        if self.push_rc:
            return self.push_rc
        self.stack.append(self.current)
        self.current = context.value
        return 0

    def cuCtxPopCurrent_v2(self, out):
        self.calls.append("pop")
        self.current = self.stack.pop()
        return 0

    def cuGetErrorName(self, rc, out):
        out._obj.value = b"CUDA_ERROR_INVALID_CONTEXT"
        return 0


@pytest.fixture
def library(monkeypatch):
    def install(current: int | None, push_rc: int = 0) -> FakeLibrary:
        fake = FakeLibrary(current, push_rc)
        monkeypatch.setattr(cuda_driver, "_library", lambda: fake)
        monkeypatch.setattr(cuda_driver, "_primary_context", lambda ordinal: CONTEXTS.get(ordinal))
        return fake

    return install


def test_the_gpus_own_context_current_already_is_left_alone(library):
    fake = library(CONTEXTS[1])
    with cuda_driver.context_of(1):
        assert fake.current == CONTEXTS[1]
    assert fake.calls == ["get"] and fake.current == CONTEXTS[1]


def test_another_gpus_context_is_pushed_over_and_comes_back(library):
    fake = library(CONTEXTS[0])
    with cuda_driver.context_of(1):
        assert fake.current == CONTEXTS[1]
    assert fake.current == CONTEXTS[0] and fake.stack == []
    with pytest.raises(KeyError), cuda_driver.context_of(1):  # also when the work raises
        raise KeyError("failed inside")
    assert fake.current == CONTEXTS[0] and fake.stack == []


def test_a_thread_without_a_context_keeps_the_gpus(library):
    fake = library(None)
    with cuda_driver.context_of(0):
        assert fake.current == CONTEXTS[0]
    assert fake.current == CONTEXTS[0] and fake.calls == ["get", ("set", CONTEXTS[0])]


def test_a_context_that_can_not_be_pushed_raises_a_device_error(library):
    library(CONTEXTS[0], push_rc=201)
    with pytest.raises(devices.DeviceError, match=r"cuCtxPushCurrent \(cuda://1\) failed: CUDA_ERROR_INVALID_CONTEXT"), cuda_driver.context_of(1):
        pass


def test_without_a_driver_or_device_nothing_is_changed(library, monkeypatch):
    fake = library(CONTEXTS[0])
    with cuda_driver.context_of(7):  # no such GPU
        pass
    assert fake.calls == []
    monkeypatch.setattr(cuda_driver, "_library", lambda: None)
    monkeypatch.setattr(cuda_driver, "_primary_context", lambda ordinal: None)
    with cuda_driver.context_of(0):
        pass


def test_a_cuda_devices_work_is_bound_to_its_context_and_a_cpu_devices_is_not(library):
    fake = library(CONTEXTS[0])
    gpu1 = devices.Device(1, hal=None, pooled=False)
    with gpu1.bound():
        assert fake.current == CONTEXTS[1]
    assert fake.current == CONTEXTS[0]
    cpu = devices.Device(1, hal=None, pooled=False, cuda=False)
    assert isinstance(cpu.bound(), contextlib.nullcontext)


def test_functions_without_a_description_are_called_with_their_gpus_context_current(library):
    fake = library(CONTEXTS[0])
    seen = []

    def iree_function(*args, **kwargs):
        seen.append((fake.current, args, kwargs))
        return "results"

    iree_function.reflection = {"iree.abi.model": "sync"}
    on_gpu1 = OnDevice(iree_function, devices.Device(1, hal=None, pooled=False))
    assert on_gpu1(1, 2, key=3) == "results"
    assert seen == [(CONTEXTS[1], (1, 2), {"key": 3})] and fake.current == CONTEXTS[0]
    assert on_gpu1.reflection == {"iree.abi.model": "sync"}  # the function's own attributes

