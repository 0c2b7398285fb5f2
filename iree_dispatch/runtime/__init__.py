"""The run-time half: load a `.vmfb` on a CUDA device and call its kernels from Python.

Imports only `iree.runtime` and numpy (plus this package's dependency-free core/), so a
deployment needs no compiler and no CUDA toolkit.

Each kernel built by iree_dispatch carries its description (core/contract.py) in the vmfb, so
every call is checked before anything is launched: argument count, dtype, rank, shape relations
and scalar ranges, as TypeError/ValueError naming the parameter. Other functions in the module
(e.g. hand-written ones) are called through IREE unchecked. A kernel whose description carries
a launch plan is launched by the runtime itself, exactly as IREE would launch it, at a fraction
of the cost of IREE's invoke (launch.py).

This file only names the public API; the modules behind it, by concern:
  loading.py       Module, load, read_descriptions, no_variant_message, runs_on
  invocation.py    KernelFunction: a call's arguments checked, then launched or invoked
  invokers.py      calls through IREE's VmContext.invoke (synchronous and coarse-fences)
  asynchronous.py  Timeline, AsyncArray: asynchronous calls and their results
  launch.py        direct launches from the launch plan; compiled.py + _launch.c: prepared calls
  devices.py       one IREE device per GPU; dlpack.py: framework arrays in and out;
  cuda_driver.py   the CUDA driver calls IREE's Python API lacks; parallel.py: several GPUs
  multi_device.py  a program over several GPUs: load(vmfb, devices=[...])
  exiting.py       releases what the runtime holds at interpreter exit (a quiet exit)
  torch_ops.py     kernels as torch custom ops, for torch.compile and CUDA graphs
"""

from __future__ import annotations

import iree.runtime as rt  # noqa: F401  (IREE's own API, as callers of this package reach it: runtime.rt)

from ..core.errors import DeviceError  # noqa: F401  (raised by load and calls)

# exiting: imported to register the release of IREE's objects at interpreter exit.
from . import cuda_driver, devices, dlpack, exiting  # noqa: F401  (modules callers use: runtime.devices.device ...)
from .asynchronous import AsyncArray
from .cuda_driver import compute_capability as cuda_compute_capability
from .cuda_driver import device_name as cuda_device_name
from .devices import DEFAULT_DRIVER_FLAGS, DEVICE_ENV, DRIVER_FLAGS_ENV, POOL_ENV, Device, cuda_device_available, device, driver_flags, open_device
from .dlpack import DeviceArray
from .invocation import KernelFunction
from .launch import LAUNCH_ENV
from .loading import Module, OnDevice, load, no_variant_message, read_descriptions, runs_on

__all__ = [
    "DEFAULT_DRIVER_FLAGS", "DEVICE_ENV", "DRIVER_FLAGS_ENV", "LAUNCH_ENV", "POOL_ENV", "AsyncArray", "Device", "DeviceArray", "KernelFunction", "Module", "OnDevice",
    "cuda_compute_capability", "cuda_device_available", "cuda_device_name", "device", "driver_flags", "load", "no_variant_message",
    "open_device", "read_descriptions", "runs_on",
]
