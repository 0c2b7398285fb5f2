"""Direct launches: a kernel's call launched by the runtime itself, as IREE would launch it.

A kernel's generated function does one thing: bind its tensors, pack its scalars into 32-bit
push constants, compute the grid, allocate its fresh outputs and dispatch one kernel. Through
IREE's `VmContext.invoke` that costs ~50 µs of host time per call, many times the kernel's own
launch. The build therefore writes a launch plan into the description (backend/emit.py): the
executable, its variants with their conditions, the entry, the binding order and each push
constant's scalar. The runtime reads the very object IREE loaded out of the vmfb (its
executable flatbuffers are stored entries of the vmfb's zip directory), takes the same variant
IREE's conditions take, and launches the entry with the plan's block size and the variant's
shared memory (a size over sizes: the call's own, within the variant's bound), once IREE's
export is found to agree with the plan. Outputs declared `zero` are memset on the kernel's
stream before it. Everything a call checks is checked first, as for IREE's path.

Streams. A call whose arrays include another framework's (torch, CuPy) is queued on that
framework's current stream, like one of its own ops, and returns without waiting: its results are
ordered on that stream. Any other call is queued on the device's launch stream and waits for it,
like IREE's synchronous calls. Memory the device's pool may hand out again is protected as for
arrays handed to other frameworks (devices.py): every stream that may still use it is waited for
before IREE's queue or another stream touches it.

Where a plan can't apply the call goes through IREE: a vmfb without the executable entry, an export whose layout disagrees with the plan, empty
grids or outputs, pending asynchronous inputs. `IREE_DISPATCH_LAUNCH=iree` (or `load(...,
launch="iree")`) sends every call through IREE.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import struct
import sys
import weakref
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import iree.runtime as rt
import numpy as np

from ..core import expr as ex
from ..core.contract import KernelDescription, LaunchVariant
from ..core.dtypes import ELEMENT_TYPES, SCALAR_TYPES, ScalarType
from ..core.variants import rule_holds
from . import cuda_driver, dlpack
from .compiled import CallsSetup
from .devices import KDL_CUDA, Device
from .host_copies import HostCopies

LAUNCH_ENV = "IREE_DISPATCH_LAUNCH"  # "direct" (the default) or "iree"
LAUNCH_MODES = ("direct", "iree")
# The HAL element type of each tensor element type, as IREE gives its functions' results.
HAL_ELEMENT_TYPES = {
    "f16": rt.HalElementType.FLOAT_16, "bf16": rt.HalElementType.BFLOAT_16, "f32": rt.HalElementType.FLOAT_32,
    "f64": rt.HalElementType.FLOAT_64, "i1": rt.HalElementType.BOOL_8, "i8": rt.HalElementType.INT_8,
    "i16": rt.HalElementType.INT_16, "i32": rt.HalElementType.INT_32, "i64": rt.HalElementType.INT_64,
    "ui8": rt.HalElementType.UINT_8, "ui16": rt.HalElementType.UINT_16, "ui32": rt.HalElementType.UINT_32,
    "ui64": rt.HalElementType.UINT_64,
}
_EXECUTABLE_HEADER = 64  # bytes before the flatbuffer in a vmfb's executable entry
# The most bytes of a call's fresh outputs made ahead for its next call (one set per device):
# at 256 MiB an output's writing alone takes ~85 µs on an H100, against ~3 µs to allocate.
MADE_AHEAD_BYTES = 256 * 2**20


def launch_mode(requested: str | None) -> str:
    """The launch mode for a module: `requested`, else $IREE_DISPATCH_LAUNCH, else "direct"."""
    mode = requested or os.environ.get(LAUNCH_ENV) or "direct"
    if mode not in LAUNCH_MODES:
        source = "launch=" if requested else f"{LAUNCH_ENV}="
        raise ValueError(f"{source}{mode!r}: expected one of {', '.join(LAUNCH_MODES)}")
    return mode


@dataclass(frozen=True)
class Export:
    """A kernel as IREE's CUDA executable declares it: the image and how IREE launches it."""

    image: bytes
    entry: str
    block: tuple[int, int, int]
    shared_memory: int
    constant_count: int
    binding_count: int


class _Flatbuffer:
    """Just enough of a flatbuffer reader for IREE's CUDA executable (ExecutableDef: exports,
    modules; ExportDef: module_ordinal, kernel_name, block_dims, block_shared_memory_size,
    constant_count, binding_flags; ModuleDef: ptx_image)."""

    def __init__(self, data: bytes):
        self.data = data

    def u32(self, at: int) -> int:
        return struct.unpack_from("<I", self.data, at)[0]

    def field(self, table: int, index: int) -> int | None:
        vtable = table - struct.unpack_from("<i", self.data, table)[0]
        size = struct.unpack_from("<H", self.data, vtable)[0]
        if 4 + 2 * index >= size:
            return None
        offset = struct.unpack_from("<H", self.data, vtable + 4 + 2 * index)[0]
        return table + offset if offset else None

    def scalar(self, table: int, index: int) -> int:
        at = self.field(table, index)
        return 0 if at is None else self.u32(at)

    def vector(self, table: int, index: int) -> tuple[int, int]:
        """(first element's position, length) of a vector field; (0, 0) when absent."""
        at = self.field(table, index)
        if at is None:
            return 0, 0
        start = at + self.u32(at)
        return start + 4, self.u32(start)

    def tables(self, table: int, index: int) -> list[int]:
        start, count = self.vector(table, index)
        return [start + 4 * i + self.u32(start + 4 * i) for i in range(count)]

    def bytes(self, table: int, index: int) -> bytes:
        start, count = self.vector(table, index)
        return self.data[start : start + count]


def read_export(vmfb: zipfile.ZipFile, executable: str, variant: str, entry: str) -> Export | None:
    """The export `entry` of `executable`'s `variant` as stored in the vmfb, or None."""
    try:
        raw = vmfb.read(f"{executable}_{variant}.fb")
    except KeyError:
        return None
    if raw[:4] != b"CDA1" or len(raw) < _EXECUTABLE_HEADER:
        return None
    size = struct.unpack_from("<Q", raw, 8)[0]
    fb = _Flatbuffer(raw[_EXECUTABLE_HEADER : _EXECUTABLE_HEADER + size])
    root = fb.u32(0)
    if fb.data[4:8] != b"CDA1":
        return None
    modules = fb.tables(root, 1)
    for export in fb.tables(root, 0):
        if fb.bytes(export, 1).decode() != entry:
            continue
        block_at = fb.field(export, 2)
        block = struct.unpack_from("<3I", fb.data, block_at) if block_at is not None else (1, 1, 1)
        module = fb.scalar(export, 0)
        if module >= len(modules):
            return None
        return Export(fb.bytes(modules[module], 0), entry, tuple(block), fb.scalar(export, 3), fb.scalar(export, 4), fb.vector(export, 5)[1])
    return None


@dataclass(frozen=True)
class _Constant:
    name: str
    stype: ScalarType | None  # its C type, and how it travels in 32-bit words; None: a struct by value
    value: ex.Expr | None  # None: the call's argument of that name
    words: int  # 32-bit push constants it takes


@dataclass(frozen=True)
class _Output:
    name: str
    mlir_type: str
    dtype: np.dtype | None
    element_type: int
    itemsize: int
    shape: tuple[ex.Expr, ...]
    zero: bool  # zero-filled on the launch's stream before the kernel


class DirectLaunch:
    """One kernel's direct call: plan, loaded function, and the per-call work.

    Built by `plan_for`, which returns None where the plan can't be followed exactly.
    image: the variant's object as IREE loads it; block and shared_memory: the plan's (with a
    shared memory size over sizes, its bound: each call launches with its own size).
    """

    def __init__(self, description: KernelDescription, image: bytes, shared_memory: int, device: Device, output_dtypes: Sequence[np.dtype | None]):
        plan = description.launch
        self.name = description.name
        self._description = description
        self._device = device
        self._image = image
        self._entry = plan.entry
        self._block = plan.block
        self._shared_memory = shared_memory
        self.grid = tuple(ex.parse(g, "grid") for g in description.grid)
        self.bindings = plan.bindings
        self.constants = tuple(
            _Constant(c.scalar.name, SCALAR_TYPES.get(c.scalar.ctype) if c.scalar.kind != "struct" else None,
                      None if c.value is None else ex.parse(c.value, "scalar"), c.scalar.words)
            for c in plan.constants
        )
        # The call's converted scalars by name: a struct's are its words, `s.w0`, `s.w1`, ...
        self._scalar_names = [name for s in description.scalars for name in (_struct_words(s.name, s.words) if s.kind == "struct" else [s.name])]
        self._structs = any(s.kind == "struct" for s in description.scalars)
        self._input_names = [t.name for t in description.inputs]
        fresh = [(i, t) for i, t in enumerate(description.outputs) if not t.inplace]
        self.outputs = {
            t.name: _Output(t.name, t.dtype, output_dtypes[i] if i < len(output_dtypes) else None, int(HAL_ELEMENT_TYPES[t.dtype]),
                            ELEMENT_TYPES[t.dtype].nbytes, tuple(ex.parse(str(d), "shape") for d in t.shape), t.zero)
            for i, t in fresh
        }
        self.results = [t.name for t in description.outputs]
        # Where each binding's and each result's array comes from: input i (i) or fresh output
        # j (-1 - j), as the prepared calls (_launch.c) number them.
        source = {name: i for i, name in enumerate(self._input_names)} | {name: -1 - j for j, name in enumerate(self.outputs)}
        self._binding_sources = tuple(source[name] for name in self.bindings)
        self._result_sources = tuple(source[name] for name in self.results)
        self._scalar_kinds = b"".join(b"f" if s.kind == "float" else b"i" for s in description.scalars)
        self._arity = len(self._input_names) + len(self._scalar_names)
        # The constant word of each float scalar argument, in argument order: the words a
        # prepared call packs again for each call (floats take one word each).
        words, slot_of = 0, {}
        for c in self.constants:
            slot_of[c.name] = words
            words += c.words
        self._float_slots = tuple(slot_of[s.name] for s in description.scalars if s.kind == "float")
        # The calls prepared so far (compiled.py's Calls), where the compiled launch module
        # exists: a call with the signature of one made before launches without Python.
        self.prepared_calls: Any = None
        # The same for calls writing into given outputs (call_into), where the kernel `writes_into`.
        self.into_calls: Any = None

    def load(self) -> None:
        """Loads the kernel on the device (when the module is loaded, as IREE loads its own);
        it is unloaded when this launch is dropped (not at interpreter exit: the process's end
        frees it)."""
        launcher = self._device.launcher
        module, self._function = launcher.load(self._image, self._entry, self._shared_memory)
        weakref.finalize(self, launcher.unload, module).atexit = False
        if launcher.compiled is not None and not self._structs:  # a struct argument is packed in Python, call by call
            self.prepared_calls = self._calls(len(self._input_names), self._binding_sources, self._result_sources)
            if self.writes_into:
                # Calls writing into given outputs take them as arrays after the inputs and return them.
                first_output = len(self._input_names)
                into = tuple(i if i >= 0 else first_output - 1 - i for i in self._binding_sources)
                self.into_calls = self._calls(first_output + len(self.outputs), into, tuple(range(first_output, first_output + len(self.outputs))))
            _with_prepared_calls.add(self)

    def _calls(self, arrays: int, bindings: tuple[int, ...], results: tuple[int, ...]) -> Any:
        """A prepared-call table (`_launch.c`'s Calls) for calls of `arrays` arrays, then the scalars."""
        device, launcher = self._device, self._device.launcher
        return launcher.compiled.Calls(CallsSetup(
            function=self._function, block=self._block, shared_memory=self._shared_memory, own_stream=launcher.stream, context=launcher.context,
            ordinal=device.ordinal, device=device, foreign=device.streams_in_use, ahead=device.outputs_made_ahead, before_call=device.before_call,
            launch_safely=launcher.launch, fail=launcher.check, inputs=arrays, scalar_kinds=self._scalar_kinds,
            float_slots=self._float_slots, bindings=bindings, results=results,
        ))

    def constants_for(self, env: dict[str, int], scalars: dict[str, int | float]) -> list[int]:
        """The push constants, as IREE's generated function packs them. scalars: the call's
        scalar arguments as the generated function takes them (contract.scalar_argument)."""
        words: list[int] = []
        for c in self.constants:
            st = c.stype
            if st is None:  # a struct's words, as contract.struct_argument packed them
                words += [scalars[name] & 0xFFFFFFFF for name in _struct_words(c.name, c.words)]
                continue
            if c.value is None:
                value = scalars[c.name]
                if st.kind == "float":
                    words.append(int(np.array(value, np.float32).view(np.uint32)))
                else:
                    words += _words(value, st.slots)
                continue
            number = self._evaluate(c.value, env, f"scalar {c.name} = {c.value}")
            if st.kind == "float":
                words.append(int(np.array(float(number), np.float32).view(np.uint32)))
                continue
            lo, hi = st.int_range()
            label = f"scalar {c.name}" if c.value == ex.Sym(c.name) else f"scalar {c.name} = {c.value}"
            if number < lo:
                raise ValueError(f"{self.name}(): {label} is below the range of {st.ctype}")
            if number > hi:
                raise ValueError(f"{self.name}(): {label} exceeds the range of {st.ctype}")
            words += _words(number, st.slots)
        return words

    def grid_for(self, env: dict[str, int]) -> tuple[int, int, int]:
        return tuple(self._evaluate(g, env, f"grid[{i}] = {g}") for i, g in enumerate(self.grid))

    def shape_of(self, output: _Output, env: dict[str, int]) -> tuple[int, ...]:
        shape = []
        for i, d in enumerate(output.shape):
            size = self._evaluate(d, env, f"output {output.name} dim {i} = {d}")
            if size < 0:
                raise ValueError(f"{self.name}(): output {output.name} dim {i} = {d} is negative")
            shape.append(size)
        return tuple(shape)

    def _evaluate(self, e: ex.Expr, env: dict[str, int], label: str) -> int:
        try:
            return ex.evaluate(e, env)
        except ZeroDivisionError:
            raise ValueError(f"{self.name}(): {label} divides by zero for these sizes") from None

    def call(self, inputs: Sequence, scalars: Sequence[int | float], env: dict[str, int], args: Sequence = (), shared_memory: int | None = None,
             host_results: bool = False) -> list | None:
        """Runs the kernel on checked inputs (numpy, IREE or other frameworks' arrays, in the
        description's order) and the call's converted scalars; the results in the description's
        order: fresh outputs as our DeviceArrays, in-place ones as the caller's own array. None
        where IREE must run the call instead (an empty grid or output). Fresh outputs are
        torch tensors or CuPy arrays for a call on theirs (`_fresh_output`). args: the call's
        positional arguments as given, to prepare later calls with the same signature.
        shared_memory: for a kernel whose shared memory depends on sizes, the call's bytes as
        its checks evaluated them (KernelFunction); evaluated here where not given.
        host_results: the results as numpy arrays (a call on numpy arrays only).

        On the launch stream, numpy inputs are copied in and numpy results read out on the
        kernel's stream, and the call waits once (host_copies.py)."""
        device = self._device
        prepared = self._prepared_for(env, scalars, shared_memory)
        if prepared is None:
            return None
        # The current stream of each other framework's array where its framework is known
        # (torch, CuPy), else None: a call on such arrays runs on the first one's stream, and on
        # the launch stream if none is known (their export then orders their producers' work there).
        streams = {i: dlpack.current_stream(v) for i, v in enumerate(inputs) if not isinstance(v, (np.ndarray, rt.DeviceArray))}
        stream = next((s for s in streams.values() if s is not None), None)
        if streams and stream is None:
            stream = device.launcher.stream
        host_arrays = any(isinstance(v, np.ndarray) for v in inputs)
        if host_arrays:
            device.before_call()  # their copies may land in pooled buffers other streams still read
        # A call on the launch stream waits for it: its copies in and out are queued there too.
        with HostCopies(device) if stream is None and (host_arrays or host_results) else contextlib.nullcontext() as copies:
            pointers: list[int] = []
            arrays: list = []
            for i, (name, value) in enumerate(zip(self._input_names, inputs)):
                if isinstance(value, np.ndarray):
                    value = (copies.upload(value) if copies is not None else None) or dlpack.upload(device, value)
                if isinstance(value, rt.DeviceArray):
                    pointers.append(dlpack.device_pointer(device, value))
                    dlpack.remember(device, value)
                else:
                    # Known frameworks' work is ordered by the stream choice: no ordering asked (-1).
                    _, described = dlpack.export(value, stream if streams[i] is None else -1, f"{self.name}(): argument {name!r}")
                    pointers.append(described.data)
                arrays.append(value)
            for other in set(streams.values()) - {None, stream}:
                device.bridge.wait_for(other)
            framework = dlpack.framework_of(inputs)
            if copies is not None:
                copies.queue_uploads()
            results = self._run(prepared, pointers, arrays, stream, framework, wait=copies is None or not (copies.pending or host_results))
            if host_results and copies is not None:
                results = copies.read(results)
            elif copies is not None and copies.pending:
                copies.wait()
        # A signature holds no numpy array: a call with one is never prepared.
        if self.prepared_calls is not None and not host_arrays and len(args) == self._arity:
            self._prepare(tuple(args), prepared, framework)
        return results

    def _prepared_for(self, env: dict[str, int], scalars: Sequence[int | float], shared_memory: int | None) -> _Prepared | None:
        """The launch of a call with these sizes and converted scalars; None for an empty grid
        or output (IREE runs such a call: call())."""
        grid = self.grid_for(env)
        shapes = [self.shape_of(out, env) for out in self.outputs.values()]
        if min(grid) <= 0 or any(0 in shape for shape in shapes):
            return None
        constants = self.constants_for(env, dict(zip(self._scalar_names, scalars)))
        # A size over sizes is launched exactly (the call's checks held it to the bound loaded).
        if self._description.shared_memory_size is None:
            shared_memory = self._shared_memory
        elif shared_memory is None:
            shared_memory = self._description.shared_memory_for_call(env)
        return _Prepared(grid, tuple(constants), tuple((out, shape, out.itemsize * math.prod(shape)) for out, shape in zip(self.outputs.values(), shapes)),
                         shared_memory)

    @property
    def writes_into(self) -> bool:
        """Whether `call_into` takes this kernel's calls: it has fresh outputs, none of them
        zero-filled (the caller's arrays are written as they are)."""
        return bool(self.outputs) and not any(out.zero for out in self.outputs.values())

    def call_into(self, inputs: Sequence, outputs: Sequence, scalars: Sequence[int | float], env: dict[str, int], args: Sequence = (),
                  shared_memory: int | None = None) -> None:
        """Runs the kernel on checked inputs, writing its fresh outputs into the caller's arrays
        (`outputs`, one per fresh output in the description's order; torch tensors or CuPy
        arrays on this device, checked here against the dtypes and shapes the description
        gives them), queued on their framework's current stream without waiting, as `call` queues
        a call on those arrays. Only where `writes_into`. args: the call's positional arguments
        as given (inputs, outputs, scalars), to prepare later calls with the same signature
        (`into_calls`). An empty grid or output launches nothing."""
        framework = dlpack.framework_of(outputs)
        if framework is None or any(dlpack.framework_of([a]) != framework for a in (*inputs, *outputs)):
            kinds = ", ".join(type(a).__name__ for a in (*inputs, *outputs))
            raise TypeError(f"{self.name}(): a call writing into given outputs takes torch tensors or CuPy arrays, all of one framework; got {kinds}")
        prepared = self._prepared_for(env, scalars, shared_memory)
        shapes = [self.shape_of(out, env) for out in self.outputs.values()]
        pointers = [dlpack.export(a, -1, f"{self.name}(): argument {name!r}")[1].data for name, a in zip(self._input_names, inputs)]
        for out, shape, given in zip(self.outputs.values(), shapes, outputs):
            where = f"{self.name}(): output {out.name!r}"
            kind, ordinal = dlpack.device_of(given)
            if (kind, ordinal) != (KDL_CUDA, self._device.ordinal):
                raise ValueError(f"{where} is on {dlpack.device_name(kind, ordinal)}, but this kernel runs on cuda:{self._device.ordinal}")
            _, described = dlpack.export(given, -1, where)
            wanted = ELEMENT_TYPES[out.mlir_type].numpy
            if described.dtype != wanted or described.shape != shape:
                raise ValueError(f"{where} must be {wanted} of shape {list(shape)}, got {described.dtype} of shape {list(described.shape)}")
            pointers.append(described.data)
        if prepared is None:
            return
        stream = dlpack.current_stream(outputs[0])
        first_output = len(self._input_names)
        bound = [pointers[i] if i >= 0 else pointers[first_output - 1 - i] for i in self._binding_sources]
        if self._device.streams_in_use:
            self._device.before_call(on_stream=stream)
        self.launch(bound, prepared.constants, prepared.grid, stream, shared_memory=prepared.shared_memory)
        if self.into_calls is not None and len(args) == self._arity + len(outputs):
            self.into_calls.prepare(tuple(args), prepared.grid, prepared.constants, (), False, prepared.shared_memory)

    def _prepare(self, args: tuple, prepared: _Prepared, framework: str | None) -> None:
        """Records a checked call's launch for later calls with the same signature (see
        _launch.c): its grid, push constants and a factory per fresh output. A call whose
        framework lacks an output's element type is not recorded (its outputs are ours, which
        the stream they are used on must be waited for: the checked path does that).

        A synchronous call (on our arrays) whose outputs take at most MADE_AHEAD_BYTES makes
        the next call's outputs while its kernel runs: the next call then launches without
        allocating first. Larger outputs are not held ahead: their kernels take long enough
        for an allocation to cost a negligible share, and the memory stays free."""
        device = self._device
        factories = []
        for out, shape, size in prepared.outputs:
            make = _output_factory(device, out, shape, size, framework)
            if make is None:
                return
            factories.append(make)
        _register_frameworks(self._device.launcher.compiled)
        make_ahead = framework is None and sum(size for _, _, size in prepared.outputs) <= MADE_AHEAD_BYTES
        zeroed = tuple(size if out.zero else 0 for out, _, size in prepared.outputs)
        self.prepared_calls.prepare(args, prepared.grid, prepared.constants, tuple(factories), make_ahead, prepared.shared_memory, zeroed)

    def _run(self, prepared: _Prepared, pointers: Sequence[int], arrays: Sequence, stream: int | None, framework: str | None, wait: bool = True) -> list:
        """Allocates the fresh outputs (as `framework`'s arrays: "torch", "cupy", or None for
        ours), launches, and waits unless the call is on a caller's stream or `wait` is False
        (the call's copies to the host are queued behind the kernel first: host_copies.py)."""
        device = self._device
        if device.streams_in_use:
            device.before_call(on_stream=stream)
        outputs = [_fresh_output(device, out, shape, size, framework) for out, shape, size in prepared.outputs]
        bound = [pointers[i] if i >= 0 else outputs[-1 - i][1] for i in self._binding_sources]
        own_stream = stream is None or stream == device.launcher.stream
        for (out, _, size), (_, address) in zip(prepared.outputs, outputs):
            if out.zero:
                device.launcher.zero(address, size, stream)  # on the kernel's stream, so before it
        self.launch(bound, prepared.constants, prepared.grid, stream, wait=own_stream and wait, shared_memory=prepared.shared_memory)
        if not own_stream:
            # Our memory in use on the caller's stream: outputs of ours (a dtype the framework
            # lacks) are waited for; inputs' buffers are not reused before the stream is done.
            if any(type(o) is dlpack.DeviceArray for o, _ in outputs):
                device.bridge.wait_for(stream)
            elif any(type(a) is dlpack.DeviceArray for a in arrays):
                device.handed_to(stream)
        return [arrays[i] if i >= 0 else outputs[-1 - i][0] for i in self._result_sources]

    def launch(self, pointers: Sequence[int], constants: Sequence[int], grid: tuple[int, int, int], stream: int | None, wait: bool = False,
               shared_memory: int | None = None) -> None:
        """Queues the kernel on `stream` (None: the launch stream); wait: until it has run.
        shared_memory: the call's bytes (default: the plan's)."""
        shared = self._shared_memory if shared_memory is None else shared_memory
        self._device.launcher.launch(self._function, grid, self._block, shared, stream, [*pointers, *constants], wait)


@dataclass(frozen=True)
class _Prepared:
    """A call's launch as worked out for one signature of its arguments."""

    grid: tuple[int, int, int]
    constants: tuple[int, ...]
    outputs: tuple[tuple[_Output, tuple[int, ...], int], ...]  # each fresh output, its shape and bytes
    shared_memory: int  # the launch's bytes of dynamic shared memory


def _struct_words(name: str, words: int) -> list[str]:
    return [f"{name}.w{i}" for i in range(words)]


def _words(value: int, slots: int) -> list[int]:
    """An integer as its 32-bit words, low word first (two's complement)."""
    return [value & 0xFFFFFFFF, (value >> 32) & 0xFFFFFFFF] if slots == 2 else [value & 0xFFFFFFFF]


def _output_factory(device: Device, output: _Output, shape: tuple[int, ...], size: int, framework: str | None) -> Callable[[], Any] | None:
    """A function making a call's fresh output: a torch tensor or CuPy array allocated by that
    framework on its current stream for a call on that framework's arrays (None for an element
    type the framework lacks), else one of our device arrays from the device's pool."""
    if framework is not None:
        return dlpack.framework_empty(framework, output.mlir_type, shape, device.ordinal)
    return functools.partial(_device_output, device, output, shape, size)


def _fresh_output(device: Device, output: _Output, shape: tuple[int, ...], size: int, framework: str | None) -> tuple[Any, int]:
    """A fresh output (`_output_factory`'s; ours for an element type the framework lacks) and its address."""
    make = _output_factory(device, output, shape, size, framework)
    if make is None:
        return _fresh_output(device, output, shape, size, None)
    array = make()
    return array, (array._device_pointer if framework is None else dlpack.array_address(framework, array))


def _device_output(device: Device, output: _Output, shape: tuple[int, ...], size: int) -> dlpack.DeviceArray:
    """One of our device arrays from the device's pool (Device.allocate)."""
    array = dlpack.DeviceArray(device, rt.HalBufferView(device.allocate(size), shape, output.element_type), output.dtype)
    dlpack.remember(device, array)
    return array


_registered_frameworks: tuple = ()
_registered_in: Any = None  # the compiled module told of them
# The direct launches with prepared calls, whose tables are emptied at interpreter exit.
_with_prepared_calls: weakref.WeakSet[DirectLaunch] = weakref.WeakSet()


def _register_frameworks(compiled: Any) -> None:
    """Tells the compiled module the array types a signature may hold and how to ask their
    frameworks' current streams, once per set of frameworks imported."""
    global _registered_frameworks, _registered_in
    torch, cupy = sys.modules.get("torch"), sys.modules.get("cupy")
    if _registered_frameworks == (torch, cupy):
        return
    _registered_in = compiled
    compiled.set_frameworks(
        dlpack.DeviceArray, dlpack.LAUNCH_ENTRY,
        dlpack.torch_tensor_type(), dlpack.stream_getter("torch") if torch is not None else None,
        dlpack.cupy_array_type(), dlpack.stream_getter("cupy") if cupy is not None else None,
    )
    _registered_frameworks = (torch, cupy)


def release_prepared_calls() -> None:
    """Empties every prepared-call table and drops what the compiled module was told of the
    frameworks (at interpreter exit, exiting.py): both hold references no teardown clears."""
    global _registered_frameworks, _registered_in
    for direct in list(_with_prepared_calls):
        for calls in (direct.prepared_calls, direct.into_calls):
            if calls is not None:
                calls.forget()
    _with_prepared_calls.clear()
    if _registered_in is not None:
        _registered_in.release_frameworks()
    _registered_frameworks, _registered_in = (), None


def plan_for(description: KernelDescription, device: Device, output_dtypes: Sequence[np.dtype | None], archive: zipfile.ZipFile | None) -> DirectLaunch | None:
    """The direct launch of a kernel's function on `device`, or None where the call must go
    through IREE (no plan, no runnable variant, or an export that disagrees with the plan)."""
    plan = description.launch
    if plan is None or archive is None or not device.cuda:
        return None
    capability = cuda_driver.compute_capability(device.ordinal)
    if capability is None:
        return None
    variant = next((v for v in plan.variants if any(rule_holds(rule, *capability) for rule in v.rules)), None)
    if variant is None:
        return None
    if any(c.scalar.kind != "struct" and c.scalar.ctype not in SCALAR_TYPES for c in plan.constants):
        return None  # a scalar type this runtime doesn't know (a newer build's)
    export = read_export(archive, plan.executable, variant.name, plan.entry)
    if not _agrees(export, plan.block, variant, sum(c.scalar.words for c in plan.constants), len(plan.bindings)):
        return None
    direct = DirectLaunch(description, export.image, variant.shared_memory, device, output_dtypes)
    direct.load()
    return direct


def _agrees(export: Export | None, block: tuple[int, int, int], variant: LaunchVariant, constant_count: int, binding_count: int) -> bool:
    """Whether IREE's export is the one the plan describes: the same layout, block and shared memory."""
    return export is not None and (export.constant_count, export.binding_count, export.block, export.shared_memory) == (
        constant_count, binding_count, tuple(block), variant.shared_memory)


def open_archive(vmfb: Path) -> zipfile.ZipFile | None:
    """The vmfb's zip directory (IREE writes one listing its executables), or None."""
    try:
        return zipfile.ZipFile(vmfb)
    except (zipfile.BadZipFile, OSError):
        return None
