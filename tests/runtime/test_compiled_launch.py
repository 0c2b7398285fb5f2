"""The compiled launch path (iree_dispatch/runtime/_launch.c) on the CPU: it builds where a C
compiler and Python's headers are, and it calls the driver functions it is given with the
kernel's parameters packed as cuLaunchKernel reads them. Stand-ins for cuLaunchKernel and
cuStreamSynchronize (ctypes callbacks) record their arguments; a private copy of the module is
loaded so that its driver functions are not the process's."""

from __future__ import annotations

import subprocess
import sys
import types
import warnings

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
    compiled.launch_path.cache_clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the path asked for: no warning
            assert compiled.compiled_launch() is None
        assert compiled.compiled_launch_status() == f"ctypes fallback ({compiled.COMPILED_LAUNCH_ENV}=off)"
        monkeypatch.delenv(compiled.COMPILED_LAUNCH_ENV)
        monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
        module, why = compiled.compile_at_first_use()
        assert module is None and "no-such-compiler" in why
    finally:
        compiled.launch_path.cache_clear()


def test_without_the_installed_extension_a_fallback_warns_once_naming_why_and_the_cost(monkeypatch, tmp_path):
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(compiled.COMPILED_LAUNCH_ENV, raising=False)
    monkeypatch.setattr(compiled, "_installed", lambda: (None, "not built at install"))
    monkeypatch.setattr(compiled, "compile_at_first_use", lambda: (None, "no C compiler: cc, gcc or $CC"))
    compiled.launch_path.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=r"not built at install; no C compiler.*through ctypes, a few microseconds slower per call"):
            assert compiled.compiled_launch() is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per process
            assert compiled.compiled_launch_status() == "ctypes fallback (no C compiler: cc, gcc or $CC)"
        built = tmp_path / "_launch.so"
        monkeypatch.setattr(compiled, "compile_at_first_use", lambda: (sys, str(built)))
        compiled.launch_path.cache_clear()
        with pytest.warns(RuntimeWarning, match=r"not built at install\); it was compiled at first use into .*_launch.so, which took about a second"):
            assert compiled.compiled_launch() is sys
        assert compiled.compiled_launch_status() == f"compiled at first use ({built})"
    finally:
        compiled.launch_path.cache_clear()


@needs_compiler
def test_an_installed_extension_is_used_only_when_built_from_this_source(monkeypatch, tmp_path):
    """The installed module (here: one compiled into the cache, standing in) is used when its
    SOURCE_DIGEST is this _launch.c's; one built from another source is not run."""
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path))
    module, where = compiled.compile_at_first_use()
    assert module is not None, where
    assert module.SOURCE_DIGEST == compiled.source_digest(compiled.SOURCE.read_bytes())
    monkeypatch.setitem(sys.modules, compiled._MODULE_NAME, module)
    assert compiled._installed() == (module, where)
    stale = types.ModuleType(compiled._MODULE_NAME)
    stale.__file__, stale.SOURCE_DIGEST = str(tmp_path / "_launch.old.so"), "0" * 16
    monkeypatch.setitem(sys.modules, compiled._MODULE_NAME, stale)
    assert compiled._installed() == (None, f"the installed _launch.old.so was built from another {compiled.SOURCE.name}")


@needs_compiler
def test_a_damaged_cached_module_is_built_again(monkeypatch, tmp_path):
    """A cached file that doesn't load (here: truncated) is removed and built again, not kept."""
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(compiled.COMPILED_LAUNCH_ENV, raising=False)
    # Built by another process: this one must not have the file mapped when it is damaged.
    subprocess.run([sys.executable, "-c", "from iree_dispatch.runtime.compiled import compile_at_first_use; assert compile_at_first_use()[0]"], check=True)
    (built,) = (tmp_path / "launch").iterdir()
    built.write_bytes(built.read_bytes()[:100])
    module, where = compiled.compile_at_first_use()
    assert module is not None, where
    assert where == str(built)
    assert built.stat().st_size > 100 and hasattr(module, "launch")


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
