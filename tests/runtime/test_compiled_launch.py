"""The compiled launch path (iree_dispatch/runtime/_launch.c) on the CPU: it builds where a C
compiler and Python's headers are, and it calls the driver functions it is given with the
kernel's parameters packed as cuLaunchKernel reads them. Stand-ins for cuLaunchKernel and
cuStreamSynchronize (ctypes callbacks) record their arguments; a private copy of the module is
loaded so that its driver functions are not the process's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from iree_dispatch.runtime import compiled

from ..support.compiled_stand_ins import FakeDriver, needs_compiler


@needs_compiler
def test_packs_every_parameter_in_its_own_cell(private_module):
    driver = FakeDriver()
    private_module.set_driver(*driver.addresses())
    values = [0x7F12_3456_7000, 0x7F12_3456_8000, 1024, 0xFFFF_FFFF, 0]
    driver.expected = len(values)
    assert private_module.launch(0x1234, (16, 2, 1), (64, 1, 1), 4096, 0x5678, values, False) is None
    (function, grid, block, shared, stream, got, extra, _), = driver.launches
    assert (function, grid, block, shared, stream, got, extra) == (0x1234, (16, 2, 1), (64, 1, 1), 4096, 0x5678, values, None)
    assert driver.synchronized == []


@needs_compiler
def test_waits_on_the_stream_and_reports_failures(private_module):
    driver = FakeDriver()
    private_module.set_driver(*driver.addresses())
    driver.expected = 1
    assert private_module.launch(1, (1, 1, 1), (1, 1, 1), 0, 0x99, (7,), True) is None
    assert driver.synchronized == [0x99]
    failing_sync = FakeDriver(synchronize_rc=719)  # CUDA_ERROR_LAUNCH_FAILED
    private_module.set_driver(*failing_sync.addresses())
    failing_sync.expected = 1
    assert private_module.launch(1, (1, 1, 1), (1, 1, 1), 0, 0x99, [7], True) == (0, 719)
    failing_launch = FakeDriver(launch_rc=201)  # CUDA_ERROR_INVALID_CONTEXT: not synchronized then
    private_module.set_driver(*failing_launch.addresses())
    failing_launch.expected = 1
    assert private_module.launch(1, (1, 1, 1), (1, 1, 1), 0, 0x99, [7], True) == (201, 0)
    assert failing_launch.synchronized == []


@needs_compiler
def test_refuses_bad_arguments_without_launching(private_module):
    driver = FakeDriver()
    private_module.set_driver(*driver.addresses())
    with pytest.raises(OverflowError):
        private_module.launch(1, (1, 1, 1), (1, 1, 1), 0, 0, [-1], False)  # a negative value is no address or word
    with pytest.raises(TypeError, match="grid must be a tuple of 3 ints"):
        private_module.launch(1, [1, 1, 1], (1, 1, 1), 0, 0, [], False)
    with pytest.raises(OverflowError, match="does not fit 32 bits"):
        private_module.launch(1, (2**32, 1, 1), (1, 1, 1), 0, 0, [], False)
    with pytest.raises(ValueError, match="at most 256"):
        private_module.launch(1, (1, 1, 1), (1, 1, 1), 0, 0, [0] * 257, False)
    with pytest.raises(TypeError, match="values must be a list or tuple"):
        private_module.launch(1, (1, 1, 1), (1, 1, 1), 0, 0, iter([1]), False)
    assert driver.launches == []


def test_off_switch_and_missing_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(compiled.COMPILED_LAUNCH_ENV, "off")
    compiled._load.cache_clear()
    try:
        assert compiled.compiled_launch() is None
        assert compiled.compiled_launch_status() == f"ctypes ({compiled.COMPILED_LAUNCH_ENV}=off)"
        monkeypatch.delenv(compiled.COMPILED_LAUNCH_ENV)
        monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
        compiled._load.cache_clear()
        assert compiled.compiled_launch() is None
        assert compiled.compiled_launch_status().startswith("ctypes (")
    finally:
        compiled._load.cache_clear()


@needs_compiler
def test_a_damaged_cached_module_is_built_again(monkeypatch, tmp_path):
    """A cached file that doesn't load (here: truncated) is removed and built again, not kept."""
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(compiled.COMPILED_LAUNCH_ENV, raising=False)
    # Built by another process: this one must not have the file mapped when it is damaged.
    subprocess.run([sys.executable, "-c", "from iree_dispatch.runtime.compiled import compiled_launch; assert compiled_launch()"], check=True)
    (built,) = (tmp_path / "launch").iterdir()
    built.write_bytes(built.read_bytes()[:100])
    compiled._load.cache_clear()
    try:
        module = compiled.compiled_launch()
        assert module is not None, compiled.compiled_launch_status()
        assert compiled.compiled_launch_status() == f"compiled ({built})"
        assert built.stat().st_size > 100 and hasattr(module, "launch")
    finally:
        compiled._load.cache_clear()


@needs_compiler
def test_reads_a_dlpack_capsules_address(private_module):
    import numpy as np

    from iree_dispatch.runtime import dlpack

    array = np.arange(64, dtype=np.float32)[16:]
    capsule = array.__dlpack__()
    described = dlpack.describe(capsule)
    assert private_module.capsule_address(capsule) == array.ctypes.data == described.data + described.byte_offset
    with pytest.raises(ValueError):
        private_module.capsule_address(object())
