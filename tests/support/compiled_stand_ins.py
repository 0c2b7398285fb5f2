"""Stand-ins for testing the compiled launch module (iree_dispatch/runtime/_launch.c) on the CPU:
ctypes callbacks in place of cuLaunchKernel, cuStreamSynchronize, the context calls
(cuCtxGetCurrent, cuCtxPushCurrent, cuCtxPopCurrent) and cuMemsetD8Async that record their arguments, the mark that skips a test where the module can't be built (no C
compiler or no Python.h). The fixture that loads a private copy of the module, so that its
module-global state (driver functions, registered frameworks) is not the process's, is
runtime/conftest.py's `private_module`."""

from __future__ import annotations

import ctypes
import shutil
import sysconfig
from pathlib import Path

import pytest

LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
SYNCHRONIZE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
GET_CURRENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
PUSH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
MEMSET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_ulonglong, ctypes.c_ubyte, ctypes.c_size_t, ctypes.c_void_p)
can_build = shutil.which("cc") or shutil.which("gcc")
has_headers = (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file()
needs_compiler = pytest.mark.skipif(not (can_build and has_headers), reason="no C compiler or no Python.h")


class FakeDriver:
    """cuLaunchKernel, cuStreamSynchronize and the context calls' stand-ins with the results
    they return; `context` is the context the thread has current, `stack` the ones pushed over
    earlier ones, `pushed` every context pushed (`push_rc`: the push's result). `expected` is
    the number of kernel parameters a launch reads; `launches` records (function, grid, block,
    shared memory, stream, parameter values, extra, the context current) per launch,
    `synchronized` each stream waited on and `events` the memsets and launches in order
    (("memset", address, value, bytes, stream), ("launch", stream))."""

    def __init__(self, launch_rc: int = 0, synchronize_rc: int = 0, context: int = 0xC0, push_rc: int = 0):
        self.launches: list[tuple] = []
        self.synchronized: list[int] = []
        self.context = context
        self.stack: list[int] = []
        self.pushed: list[int] = []
        self.events: list[tuple] = []

        def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            count = self.expected
            values = [ctypes.cast(params[i], ctypes.POINTER(ctypes.c_uint64))[0] for i in range(count)]
            self.launches.append((function, (gx, gy, gz), (bx, by, bz), shared, stream, values, extra, self.context))
            self.events.append(("launch", stream))
            return launch_rc

        def memset(address, value, count, stream):
            self.events.append(("memset", address, value, count, stream))
            return 0

        def synchronize(stream):
            self.synchronized.append(stream)
            return synchronize_rc

        def get_current(out):
            out[0] = self.context
            return 0

        def push(context):
            self.pushed.append(context)
            if push_rc:
                return push_rc
            self.stack.append(self.context)
            self.context = context
            return 0

        def pop(out):
            out[0] = self.context
            self.context = self.stack.pop()
            return 0

        self.expected = 0
        self.launch, self.synchronize, self.get_current = LAUNCH(launch), SYNCHRONIZE(synchronize), GET_CURRENT(get_current)
        self.push, self.pop, self.memset = PUSH(push), GET_CURRENT(pop), MEMSET(memset)

    def addresses(self) -> tuple[int, ...]:
        return tuple(ctypes.cast(f, ctypes.c_void_p).value for f in (self.launch, self.synchronize, self.get_current, self.push, self.pop, self.memset))


