"""A process that used the runtime exits without a word on stderr (runtime/exiting.py), on the
CPU: IREE's CPU device stands in for a GPU's and FakeDriver's callbacks for the CUDA driver, and
the compiled launch's prepared calls make outputs ahead on that device, as a synchronous direct
call does. nanobind prints "leaked ... instances" at the process's end for every IREE object
still alive then: the device held by a cycle through a prepared call's output factories, or
anything the compiled launch's statics reach."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

from iree_dispatch import runtime
from iree_dispatch.runtime import asynchronous, devices, exiting, launch, loading

from ..support.compiled_stand_ins import needs_compiler
from ..support.cpu_programs import compile_for_cpu
from ..support.environment import ROOT

# The device table, the outputs made ahead and the frameworks registered: what a direct call
# of ours leaves behind. The script checks its results against numpy before it ends.
SCRIPT = """
import numpy as np
from iree_dispatch import runtime
from iree_dispatch.runtime import compiled, devices, dlpack, launch
from iree_dispatch.runtime.compiled import CallsSetup
from tests.support.compiled_stand_ins import FakeDriver

module, where = compiled.compile_at_first_use()
assert module is not None, where
driver = FakeDriver()
module.set_driver(*driver.addresses())
device = devices.Device(0, runtime.rt.get_device("local-task"), pooled=False, in_order=False, cuda=False)
devices._devices[0] = device  # the process's table of devices, as devices.device() fills it
launch._register_frameworks(module)
rng = np.random.default_rng()
addresses = iter(range(0xA000, 0x100000, 0x100))


def ours(values):
    array = dlpack.upload(device, values)
    array.__dict__[dlpack.LAUNCH_ENTRY] = (device, np.dtype(values.dtype), values.shape, next(addresses))
    return array


def output():
    return ours(np.zeros(4, np.float32))


calls = module.Calls(CallsSetup(function=__import__("ctypes").c_void_p(0x1234), block=(64, 1, 1), shared_memory=0, own_stream=0x5150, context=0xC0,
                                ordinal=0, device=device, foreign=device.streams_in_use, ahead=device.outputs_made_ahead, before_call=device.before_call,
                                launch_safely=print, fail=print, inputs=2, scalar_kinds=b"", float_slots=(), bindings=(0, 1, -1), results=(-1,)))
host = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
a, b = ours(host[0]), ours(host[1])
assert calls.prepare((a, b), (1, 1, 1), (4,), (output,), True)
driver.expected = 4
results = [calls.call((a, b)) for _ in range(3)]
assert len(driver.launches) == 3 and device.outputs_made_ahead[0] is not None  # the next call's outputs made ahead
np.testing.assert_array_equal(a.to_host(), host[0])
np.testing.assert_array_equal(results[-1].to_host(), np.zeros(4, np.float32))
print("ran")
"""


# The launch path's fallback warns once (compiled.py) where the extension was not built at
# install; that warning is not what these tests look for.
QUIET_FALLBACK = "ignore:iree_dispatch:RuntimeWarning"


def run(script: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-W", QUIET_FALLBACK, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@needs_compiler
def test_a_process_with_prepared_calls_and_outputs_made_ahead_exits_quietly():
    ran = run(SCRIPT)
    assert ran.returncode == 0 and ran.stdout == "ran\n", ran.stderr
    assert ran.stderr == ""


def test_the_release_at_exit_empties_every_table_in_order(monkeypatch):
    """Prepared calls forgotten and the compiled launch's statics dropped, then each device's
    outputs made ahead, staging buffers and semaphore, and the device table."""
    done: list = []

    class Prepared:
        def forget(self):
            done.append("forget")

    class Compiled:
        def release_frameworks(self):
            done.append("release_frameworks")

    class Direct:
        prepared_calls = Prepared()
        into_calls = None

    direct = Direct()
    device = devices.Device(0, runtime.rt.get_device("local-task"), pooled=False, in_order=False, cuda=False)
    device.outputs_made_ahead[:] = ["entry", ("outputs",)]
    device._staging_buffers[16] = ("buffer", "mapping", "view")
    device._transfers = device.hal.create_semaphore(0)
    monkeypatch.setattr(devices, "_devices", {0: device})
    monkeypatch.setattr(launch, "_with_prepared_calls", weakref.WeakSet([direct]))
    monkeypatch.setattr(launch, "_registered_in", Compiled())
    monkeypatch.setattr(launch, "_registered_frameworks", (None, None))
    exiting.release()
    assert done == ["forget", "release_frameworks"]
    assert device.outputs_made_ahead == [None, None] and device._staging_buffers == {} and device._transfers is None
    assert devices._devices == {} and len(launch._with_prepared_calls) == 0
    assert launch._registered_in is None and launch._registered_frameworks == ()


# A function of the coarse-fences ABI (an asynchronous module's), for IREE's CPU device.
ASYNC_PROGRAM = """
func.func public @mul(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %s = arith.mulf %x, %y : tensor<4xf32>
  return %s : tensor<4xf32>
}
"""


@pytest.fixture(scope="module")
def async_vmfb(tmp_path_factory):
    return compile_for_cpu(tmp_path_factory.mktemp("async"), ASYNC_PROGRAM, "--iree-execution-model=async-external")


def test_chained_asynchronous_results_go_before_the_device_table_lets_go(async_vmfb, monkeypatch):
    """A result passed to a later call is kept by the module's timeline and holds it: a cycle,
    which a collection frees in no set order. IREE's buffers and semaphores point into their
    device without holding it, so the release at exit settles the timelines (their calls waited
    for, their references dropped) and collects while the device table still holds the device."""
    device = devices.Device(0, runtime.rt.get_device("local-task"), pooled=False, in_order=False, cuda=False)
    monkeypatch.setattr(devices, "_devices", {0: device})
    monkeypatch.setattr(loading._devices, "device", lambda uri=None: device)
    monkeypatch.setattr(asynchronous, "_timelines", weakref.WeakSet())
    monkeypatch.setattr(launch, "_with_prepared_calls", weakref.WeakSet())
    monkeypatch.setattr(launch, "_registered_in", None)
    results: list[weakref.ref] = []

    def chained_calls():
        module = runtime.load(async_vmfb, asynchronous=True)
        rng = np.random.default_rng()
        a, b = rng.uniform(0.5, 1.5, 4).astype(np.float32), rng.uniform(0.999, 1.001, 4).astype(np.float32)
        held = module.to_device(b)
        r, want = module.mul(module.to_device(a), held), a * b
        for _ in range(8):
            r, want = module.mul(r, held), want * b
            results.append(weakref.ref(r.device_array))
        np.testing.assert_array_equal(r.to_host(), want)

    gc.disable()  # the cycle stays until the release collects it, as at a process's end
    try:
        chained_calls()
        assert all(ref() is not None for ref in results)  # kept by the timeline's cycle
        alive_at_release = []
        release_devices = devices.release_devices

        def recorded():
            alive_at_release.append(sum(ref() is not None for ref in results))
            release_devices()

        monkeypatch.setattr(devices, "release_devices", recorded)
        exiting.release()
    finally:
        gc.enable()
    assert alive_at_release == [0] and devices._devices == {}
