"""A quiet exit: every IREE object the runtime holds is released at interpreter exit, before
IREE's Python module is torn down.

IREE's Python API is built with nanobind, which reports at the very end of the process every
instance of its types still alive ("nanobind: leaked ... instances", with their types and
functions: over a hundred lines on stderr). Module globals are cleared at teardown and what
they hold goes with them, but some references live where teardown never looks: the compiled
launch's statics (`set_frameworks`: array types whose methods reach module dicts that are never
cleared) and caches that reach back to what holds them (a device's outputs made ahead name the
prepared call whose output factories name the device). So `release`, registered with atexit
when the runtime is imported, drops them in a safe order: the prepared calls (they make
outputs on a device) and the compiled launch's statics; the asynchronous timelines, whose
queued calls are waited for and whose kept references are dropped; a collection of what that
left unreachable; then each device's outputs made ahead, staging buffers and semaphore, and
the process's table of devices.

The order matters because IREE's buffers and semaphores point into their device (its
allocator and pools) without holding it: one freed after its device touches freed memory, and
the process dies by a signal (measured: every process that left a module and its chained
asynchronous results to the collector died so at exit). Everything that may hold such objects in
a reference cycle (a timeline and the results it keeps, a module and its arrays dropped inside a
function) is therefore freed while the device table still holds every device. Atexit runs handlers in
reverse order of registration, so the program's own handlers registered after the import still
find a working runtime; modules and arrays the program still holds stay usable, and go with
the program's globals.
"""

from __future__ import annotations

import atexit
import gc

from . import asynchronous, devices, launch


def release() -> None:
    """Drops every IREE object the runtime holds for later calls (see the module docstring)."""
    launch.release_prepared_calls()
    asynchronous.settle_timelines()
    gc.collect()  # the program's cyclic garbage goes while the device table still holds its devices
    devices.release_devices()
    gc.collect()  # cycles among what was dropped go now, while IREE's module is whole


atexit.register(release)
