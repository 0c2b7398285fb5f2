"""Copies to the device and reads to the host through the runtime's pinned staging buffers, on
IREE's CPU device: every dtype and shape goes and comes back bit for bit, copies to the device
are pooled device-local buffers (never IREE's asdevicearray, whose host-visible device memory
is CUDA managed memory outside the pool), reads go through cached host memory, and staging
buffers are reused per size."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime
from iree_dispatch.runtime import devices, dlpack


@pytest.fixture(scope="module")
def cpu():
    return runtime.Device(0, runtime.rt.get_device("local-task"), pooled=False, in_order=False, cuda=False)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "uint16", "int64", "bool"])
@pytest.mark.parametrize("shape", [(0,), (1,), (7, 3), (4099,)])
def test_reads_are_bit_exact(cpu, dtype, shape):
    rng = np.random.default_rng()
    data = rng.integers(0, 2, shape).astype(dtype) if dtype == "bool" else rng.standard_normal(shape).astype(dtype)
    array = runtime.DeviceArray(cpu, runtime.rt.asdevicearray(cpu.hal, data)._buffer_view, override_dtype=np.dtype(dtype))
    host = array.to_host()
    assert host.dtype == data.dtype and host.shape == data.shape
    assert host.tobytes() == data.tobytes()
    host[...] = 0  # a copy: the device array is untouched
    assert array.to_host().tobytes() == data.tobytes()


def test_staging_buffers_are_kept_per_size_and_bounded(cpu):
    for n in range(1, devices.STAGING_BUFFERS + 5):
        data = np.arange(n, dtype=np.int32)
        view = runtime.rt.asdevicearray(cpu.hal, data)._buffer_view
        assert cpu.download(view, np.dtype(np.int32)).tolist() == data.tolist()
    assert sum(len(free) for free in cpu._staging_buffers.values()) == devices.STAGING_BUFFERS
    assert 4 * (devices.STAGING_BUFFERS + 4) in {size for size, _ in cpu._staging_buffers}  # the most recent size is kept


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "uint16", "int64", "bool"])
@pytest.mark.parametrize("shape", [(0,), (1,), (7, 3), (4099,)])
def test_copies_to_the_device_are_pooled_and_bit_exact(cpu, dtype, shape, monkeypatch):
    rng = np.random.default_rng()
    data = rng.integers(0, 2, shape).astype(dtype) if dtype == "bool" else rng.standard_normal(shape).astype(dtype)
    allocated = []
    allocate = cpu.allocate
    monkeypatch.setattr(cpu, "allocate", lambda size: allocated.append(size) or allocate(size))
    if data.nbytes:  # an empty array takes IREE's transfer, which has nothing to copy
        monkeypatch.setattr(runtime.rt, "asdevicearray", None)
    array = dlpack.upload(cpu, np.asfortranarray(data))  # made contiguous first
    assert allocated == ([data.nbytes] if data.nbytes else [])
    assert array.dtype == data.dtype and tuple(array.shape) == data.shape
    assert array.to_host().tobytes() == data.tobytes()


def test_reads_and_copies_stage_through_host_memory_of_their_kind(cpu):
    data = np.arange(12, dtype=np.float32)
    assert dlpack.upload(cpu, data).to_host().tolist() == data.tolist()
    cached = int(runtime.rt.MemoryType.HOST_CACHED)
    kinds = {staging.buffer.memory_type() & cached for (size, _), free in cpu._staging_buffers.items() for staging in free if size == data.nbytes}
    assert kinds == {0, cached}  # uploads write-combined, reads cached


def test_large_reads_take_irees_path(cpu, monkeypatch):
    monkeypatch.setattr(devices, "STAGING_LIMIT", 16)
    data = np.arange(100, dtype=np.float32)
    array = runtime.DeviceArray(cpu, runtime.rt.asdevicearray(cpu.hal, data)._buffer_view)
    assert cpu.download(array._buffer_view, np.dtype(np.float32)) is None
    np.testing.assert_array_equal(array.to_host(), data)
