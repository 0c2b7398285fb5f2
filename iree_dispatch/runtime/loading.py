"""Loading a `.vmfb` on a CUDA device: `Module` (and `load`) reads each function's description
(core/contract.py) and wraps the function in what calls it: a `KernelFunction` for one with a
description (launched directly where its launch plan allows), IREE's own function otherwise.
A GPU no variant of the module can run is reported here (`no_variant_message`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import iree.runtime as rt
import numpy as np

from ..core.archs import parse_arch
from ..core.contract import Description, KernelDescription, read_description
from ..core.errors import DeviceError
from . import devices as _devices
from . import dlpack
from .asynchronous import Timeline
from .cuda_driver import compute_capability as cuda_compute_capability
from .devices import Device
from .dlpack import DeviceArray
from .invocation import CLOSED, KernelFunction, numpy_dtype
from .invokers import DirectInvoker, FencedInvoker
from .launch import launch_mode, open_archive, plan_for
from .multi_device import OnDevices, check_device_count, program_devices

# iree.abi.model of functions compiled with --iree-execution-model=async-external
COARSE_FENCES = "coarse-fences"


def no_variant_message(vmfb: Path, capability: tuple[int, int] | None, built: Sequence[str]) -> str:
    gpu = f"this GPU (compute capability {capability[0]}.{capability[1]}, sm_{capability[0]}{capability[1]})" if capability else "this GPU"
    archs = ", ".join(built) if built else "unknown archs"
    fix = f"rebuild with --arch sm_{capability[0]}{capability[1]} (or an older arch, whose PTX JITs forward)" if capability else "rebuild with an arch this GPU supports"
    return f"{vmfb}: no kernel variant can run on {gpu}; the module was built for {archs}. {fix}"


def read_descriptions(vmfb: str | Path, instance: rt.VmInstance | None = None) -> tuple[str, dict[str, KernelDescription | None]]:
    """Module name and, per exported function, its kernel description (None if it has none:
    a program's function or a hand-written one).

    Reads the vmfb's reflection data only; needs no device. Raises ContractError for a module
    an iree_dispatch of another description version built.
    """
    instance = instance or rt.VmInstance()  # kept referenced while the module is read
    module = rt.VmModule.mmap(instance, str(vmfb))
    found = descriptions_of(module, vmfb)
    return module.name, {name: d if isinstance(d, KernelDescription) else None for name, d in found.items()}


def descriptions_of(vm_module: rt.VmModule, vmfb: str | Path) -> dict[str, Description | None]:
    """Per exported function, its kernel or program description (None if it has neither)."""
    found = {}
    for name in vm_module.function_names:
        if name.startswith("__"):
            continue
        found[name] = read_description(vm_module.lookup_function(name).reflection, f"{vmfb}: function {name}")
    return found


def _result_dtypes(description: Description | None) -> list[np.dtype | None]:
    if description is None:
        return []
    dtypes: list[np.dtype | None] = []
    for out in description.outputs:
        try:
            dtypes.append(numpy_dtype(out.dtype))
        except TypeError:  # bf16 without ml_dtypes: the device array keeps IREE's own dtype
            dtypes.append(None)
    return dtypes


class OnDevice:
    """A function of a module without a kernel description (a program's or a hand-written
    one), called through IREE as it is, with its GPU's context current on the calling thread
    (IREE allocates in the thread's current context). Other attributes are the function's."""

    def __init__(self, function: Callable[..., Any], device: Device):
        self._function = function
        self._device = device

    def __call__(self, *args, **kwargs):
        if self._function is None:
            raise RuntimeError(f"this function: {CLOSED}")
        with self._device.bound():
            return self._function(*args, **kwargs)

    def __getattr__(self, name: str):
        function = self.__dict__.get("_function")
        if function is None:
            raise AttributeError(f"{name}: {CLOSED}")
        return getattr(function, name)

    def close(self) -> None:
        """Drops the IREE function and the device (Module.close)."""
        self._function = self._device = None

    def __repr__(self) -> str:
        return repr(self._function) if self._function is not None else "<iree_dispatch function, closed>"


class _Config(rt.Config):
    """IREE's system configuration (a device and its HAL module) in a given instance: the one
    the vmfb was mapped into. rt.Config makes an instance of its own, into which the vmfb would
    have to be mapped a second time."""

    def __init__(self, instance: rt.VmInstance, device: rt.HalDevice):  # rt.Config.__init__ would make the other instance
        self.device = device
        self.vm_instance = instance
        self.default_vm_modules = (rt.create_hal_module(instance, device),)


class Module:
    """A vmfb loaded on one CUDA device. Kernels are attributes: `module.simple_mul(a, b)`.

    device: "cuda" (the first GPU), "cuda://N" or "cuda://GPU-<uuid>"; default $IREE_DISPATCH_DEVICE,
    else "cuda". Modules on one GPU share
    its IREE device (`module.gpu`), so their arrays and results pass between them freely.
    asynchronous: for modules compiled with `--iree-execution-model=async-external`: calls
    return AsyncArrays without waiting (see AsyncArray); `wait()` waits for all of them.
    max_in_flight: asynchronous calls queued ahead of the GPU at most (see Timeline).
    launch: "direct" (launch kernels directly where their description allows, launch.py) or
    "iree" (every call through IREE's invoke); default $IREE_DISPATCH_LAUNCH, else "direct".
    devices: instead of `device`, for a program over several GPUs (multi_device.py): one URI per
    device the program names, in its order (`["cuda://0", "cuda://1"]`). `gpus` holds them,
    `gpu` is the first, where arguments the program doesn't place go.
    """

    def __init__(self, vmfb: str | Path, device: str | None = None, *, asynchronous: bool = False, max_in_flight: int = 32, launch: str | None = None,
                 devices: Sequence[str] | None = None):
        self.path = Path(vmfb)
        if not self.path.is_file():
            raise FileNotFoundError(f"no such module: {self.path}")
        if devices is not None and (device is not None or isinstance(devices, str) or not devices):
            raise ValueError("Module: give device='cuda://N' for one GPU, or devices=['cuda://0', 'cuda://1'] (a non-empty list) for a program over several, not both")
        self.launch = launch_mode(launch)
        # The vmfb is mapped once, into the instance its context is made in: the devices it
        # names and its functions' descriptions are read from that one mapping.
        self._instance = rt.VmInstance()
        self.vm_module = rt.VmModule.mmap(self._instance, str(self.path))
        self.name = self.vm_module.name
        self.device_names = program_devices(self.vm_module)
        check_device_count(self.path, self.device_names, len(devices) if devices is not None else 1)
        self.gpus = tuple(_devices.device(uri) for uri in (devices if devices is not None else [device]))
        ordinals = [g.ordinal for g in self.gpus]
        if len(set(ordinals)) != len(ordinals):
            raise ValueError(f"{self.path}: devices {list(devices or ())} name one GPU twice (cuda ordinals {ordinals}); each device of the program needs its own GPU")
        self.gpu = self.gpus[0]
        self.device = self.gpu.hal
        self.asynchronous = asynchronous
        with self.gpu.bound():  # IREE loads the module's executables in the thread's current context: this GPU's
            if self.device_names:
                self._load_on_devices()
            else:
                self._load(max_in_flight)

    def _load_on_devices(self) -> None:
        """Loads a program over several GPUs: IREE's HAL module over all of them, in order."""
        if self.asynchronous:
            raise ValueError(f"{self.path}: asynchronous=True applies to modules on one device; a program over several GPUs waits for its results")
        try:
            hal_module = rt.create_hal_module(self._instance, devices=[g.hal for g in self.gpus])
            self.context = rt.VmContext(self._instance, modules=[hal_module, self.vm_module])
        except RuntimeError as exc:
            if "does not support any variant" in str(exc):
                capabilities = {cuda_compute_capability(g.ordinal) for g in self.gpus}
                raise DeviceError(no_variant_message(self.path, min(capabilities) if None not in capabilities else None, ())) from None
            raise
        self.timeline = Timeline(self.device, 1)
        self.functions = {
            name: OnDevices(self.context, self.vm_module.lookup_function(name), self.gpus, self.device_names)
            for name in self.vm_module.function_names if not name.startswith("__")
        }

    def _load(self, max_in_flight: int) -> None:
        """Loads the vmfb into an IREE context on the module's device and makes its functions."""
        self.config = _Config(self._instance, self.device)
        descriptions = descriptions_of(self.vm_module, self.path)
        self.context = rt.SystemContext(config=self.config)
        try:
            self.context.add_vm_module(self.vm_module)
        except RuntimeError as exc:
            if "does not support any variant" in str(exc):
                built = next((d.archs for d in descriptions.values() if d), ())
                raise DeviceError(no_variant_message(self.path, cuda_compute_capability(self.gpu.ordinal), built)) from None
            raise
        self.timeline = Timeline(self.device, max_in_flight)
        bound = self.context.modules[self.name]
        self.functions: dict[str, Callable] = {}
        archive = open_archive(self.path) if self.launch == "direct" and self.gpu.cuda else None
        for name, description in descriptions.items():
            vm_function = self.vm_module.lookup_function(name)
            if vm_function.reflection.get("iree.abi.model") == COARSE_FENCES:
                invoker = FencedInvoker(self.context.vm_context, vm_function, self.gpu, self.timeline, self.asynchronous, _result_dtypes(description))
            elif self.asynchronous:
                raise ValueError(
                    f"{self.path}: function {name} is synchronous (it waits for its results), so asynchronous=True can't apply; "
                    "compile the module with iree-compile --iree-execution-model=async-external, or load it without asynchronous=True"
                )
            elif description is not None:
                invoker = DirectInvoker(self.context.vm_context, vm_function, self.gpu, _result_dtypes(description))
            else:
                invoker = bound[name]
            if description is not None:
                launchable = isinstance(description, KernelDescription) and isinstance(invoker, DirectInvoker)
                direct = plan_for(description, self.gpu, _result_dtypes(description), archive) if launchable else None
                self.functions[name] = KernelFunction(description, invoker, self.gpu, direct)
            else:
                self.functions[name] = OnDevice(invoker, self.gpu)
        if archive is not None:
            archive.close()

    def __getattr__(self, name: str):
        if self.__dict__.get("closed"):
            raise AttributeError(f"module {self.__dict__.get('name', '?')} was closed (Module.close): load it again to call its functions")
        functions = self.__dict__.get("functions", {})
        if name in functions:
            return functions[name]
        raise AttributeError(f"module {self.__dict__.get('name', '?')} has no function {name!r} (functions: {', '.join(functions)})")

    def close(self) -> None:
        """Releases the module's IREE objects now: the calls queued on it are waited for, then
        its functions (those the program still holds too), context, mapped vmfb and devices are
        dropped; calls after raise. Arrays it returned stay valid (the process's device table
        holds their device)."""
        if self.__dict__.get("closed"):
            return
        timeline = self.__dict__.get("timeline")
        if timeline is not None:
            timeline.settle()
        for function in self.__dict__.get("functions", {}).values():
            function.close()
        name, path = self.__dict__.get("name", "?"), self.__dict__.get("path")
        self.__dict__.clear()
        self.name, self.path, self.closed = name, path, True

    def __getitem__(self, name: str):
        return getattr(self, name)

    def to_device(self, array: np.ndarray, device: int = 0) -> DeviceArray:
        """Copies `array` to this module's device (of a program over several: the one at index
        `device` of `gpus`); pass the result to keep data there."""
        gpu = self.gpus[device]
        gpu.before_call()  # the copy may land in a pooled buffer another stream still reads
        return dlpack.upload(gpu, array)

    def wait(self) -> None:
        """Waits until every call made so far through this module has completed."""
        self.timeline.wait()

    def trim(self) -> None:
        """Returns the free buffers of the device's output pool to CUDA."""
        for gpu in self.gpus:
            gpu.trim()


def load(vmfb: str | Path, device: str | None = None, *, asynchronous: bool = False, max_in_flight: int = 32, launch: str | None = None,
         devices: Sequence[str] | None = None) -> Module:
    """Loads `vmfb` on `device` ("cuda", "cuda://N", "cuda://GPU-<uuid>"; default
    $IREE_DISPATCH_DEVICE, else "cuda"), or a program over several GPUs on `devices` (one URI
    per device it names, in its order). asynchronous, max_in_flight, launch: see Module."""
    return Module(vmfb, device, asynchronous=asynchronous, max_in_flight=max_in_flight, launch=launch, devices=devices)


def runs_on(archs: Sequence[str], capability: tuple[int, int]) -> str | None:
    """The arch whose variant a GPU of `capability` runs (the first that can), or None."""
    for name in archs:
        if parse_arch(name).runs_on(*capability):
            return name
    return None
