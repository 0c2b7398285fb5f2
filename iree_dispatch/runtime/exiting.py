"""A quiet exit: every IREE object the runtime holds is released at interpreter exit, before
IREE's Python module is torn down.

IREE's Python API is built with nanobind, which reports at the very end of the process every
instance of its types still alive ("nanobind: leaked ... instances", with their types and
functions: over a hundred lines on stderr). Module globals are cleared at teardown and what
they hold goes with them, but some references live where teardown never looks: the compiled
launch's statics (`set_frameworks`: array types whose methods reach module dicts that are never
cleared) and caches that reach back to what holds them (a device's outputs made ahead name the
prepared call whose output factories name the device). So `release`, registered with atexit
when the runtime is imported, drops them in a safe order. First the garbage the program left in
cycles (a module and its arrays dropped inside a function) is collected while the process's
table of devices still holds every device: within a cycle the collector frees objects in no
particular order, and an IREE buffer or module freed after its device crashes the process
(measured: a segmentation fault in the collection, on every exit of such a process). Then the
prepared calls (they make outputs on a device) and the compiled launch's statics, then each
device's outputs made ahead, staging buffers and semaphore, and the table of devices. Atexit runs handlers in
reverse order of registration, so the program's own handlers registered after the import still
find a working runtime; modules and arrays the program still holds stay usable, and go with
the program's globals.
"""

from __future__ import annotations

import atexit
import gc

from . import devices, launch


def release() -> None:
    """Drops every IREE object the runtime holds for later calls (see the module docstring)."""
    gc.collect()  # the program's cyclic garbage, while every device is still held
    launch.release_prepared_calls()
    devices.release_devices()
    gc.collect()  # cycles among what was dropped go now, while IREE's module is whole


atexit.register(release)
