"""One program over several GPUs: a vmfb whose program names several devices
(`--iree-hal-target-device=gpu0=cuda[0] --iree-hal-target-device=gpu1=cuda[1]`), loaded with
one IREE device per name, in the program's order (`Module(vmfb, devices=[...])`).

The build records the devices' names under DEVICES_REFLECTION_KEY in every public function of such
a program, so the number of devices is checked before any is created. A function's arguments
go where its declaration places them (`iree.abi.affinity` on an argument: that device; none:
the first), and its results are read from the device the declaration places them on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import iree.runtime as rt
import numpy as np

from ..core.contract import DEVICES_REFLECTION_KEY
from . import dlpack
from .devices import Device
from .dlpack import DeviceArray
from .invocation import CLOSED
from .invokers import push_value

_PLACED = re.compile(r"#hal\.device\.(?:affinity|promise)<@([A-Za-z_][A-Za-z0-9_]*)")
_VALUE = re.compile(r"%(input|output)(\d+):")


def program_devices(vm_module: rt.VmModule) -> tuple[str, ...]:
    """The device names the module's program was built for, in order; () for a module on one device."""
    for name in vm_module.function_names:
        if not name.startswith("__"):
            names = vm_module.lookup_function(name).reflection.get(DEVICES_REFLECTION_KEY)
            if names:
                return tuple(names.split(","))
    return ()


def check_device_count(vmfb: str | Path, names: Sequence[str], given: int) -> None:
    """ValueError unless a module whose program names `names` is loaded with as many devices."""
    if not names and given > 1:
        raise ValueError(f"{vmfb}: this module runs on one device, but {given} were given; load it with device=... (DataParallel runs it on several GPUs)")
    if names and given != len(names):
        listed = ", ".join(f"@{n}" for n in names)
        raise ValueError(f"{vmfb}: the program runs on {len(names)} devices ({listed}), but {given} were given; load it with devices=[...], one URI per device in this order")


def placements(declaration: str, names: Sequence[str]) -> tuple[dict[int, int], dict[int, int]]:
    """Per input and per output index, the index in `names` of the device IREE's declaration of
    a function (`iree.abi.declaration`) places it on; indices not listed are on the first."""
    found: tuple[dict[int, int], dict[int, int]] = ({}, {})
    marks = list(_VALUE.finditer(declaration))
    for i, mark in enumerate(marks):
        text = declaration[mark.end() : marks[i + 1].start() if i + 1 < len(marks) else len(declaration)]
        placed = _PLACED.search(text)
        if placed and placed[1] in names:
            found[0 if mark[1] == "input" else 1][int(mark[2])] = names.index(placed[1])
    return found


class OnDevices:
    """A function of a program over several GPUs, called through IREE: numpy arguments are
    copied to the device the function places them on, device arrays pass as they are, and each
    result is a DeviceArray of the device the function returns it on (`to_host()` reads it)."""

    def __init__(self, context: rt.VmContext, function: rt.VmFunction, gpus: Sequence[Device], names: Sequence[str]):
        self._context = context
        self._function = function
        self._gpus = tuple(gpus)
        self._inputs, self._outputs = placements(function.reflection.get("iree.abi.declaration", ""), names)
        self.name = function.name

    def device_of_argument(self, index: int) -> Device:
        """The GPU the function expects its argument `index` on."""
        return self._gpus[self._inputs.get(index, 0)]

    def __call__(self, *args) -> DeviceArray | tuple:
        if self._function is None:
            raise RuntimeError(f"{self.name}(): {CLOSED}")
        arguments = rt.VmVariantList(len(args))
        keep = []  # the arguments' device copies, alive until the call returns
        for i, value in enumerate(args):
            if isinstance(value, np.ndarray):
                gpu = self.device_of_argument(i)
                gpu.before_call()  # the copy may land in a pooled buffer another stream still reads
                value = dlpack.upload(gpu, value)
            push_value(arguments, value, keep, f"{self.name}(): can't pass a {type(value).__name__} to a program's function (numpy arrays, device arrays, ints and floats)")
        results = rt.VmVariantList(8)
        with self._gpus[0].bound():  # as for a function on one GPU: IREE works in the thread's current context
            self._context.invoke(self._function, arguments, results)
        arrays = [DeviceArray(self._gpus[self._outputs.get(i, 0)], results.get_as_object(i, rt.HalBufferView)) for i in range(len(results))]
        return arrays[0] if len(arrays) == 1 else tuple(arrays)

    def __repr__(self) -> str:
        return f"<function {self.name} of a program over {len(self._gpus)} GPUs>"

    def close(self) -> None:
        """Drops the IREE context, function and devices (Module.close)."""
        self._context = self._function = None
        self._gpus = ()
