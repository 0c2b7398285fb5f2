"""Reads to the host through the runtime's pinned staging buffers, on IREE's CPU device: every
dtype and shape comes back bit for bit, and buffers are reused per size."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime
from iree_dispatch.runtime import devices


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
    assert len(cpu._staging_buffers) == devices.STAGING_BUFFERS
    assert 4 * (devices.STAGING_BUFFERS + 4) in cpu._staging_buffers  # the most recent size is kept


def test_large_reads_take_irees_path(cpu, monkeypatch):
    monkeypatch.setattr(devices, "STAGING_LIMIT", 16)
    data = np.arange(100, dtype=np.float32)
    array = runtime.DeviceArray(cpu, runtime.rt.asdevicearray(cpu.hal, data)._buffer_view)
    assert cpu.download(array._buffer_view, np.dtype(np.float32)) is None
    np.testing.assert_array_equal(array.to_host(), data)
