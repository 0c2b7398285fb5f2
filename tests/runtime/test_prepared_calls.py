"""Prepared calls of the compiled launch module (iree_dispatch/runtime/_launch.c, `Calls`) on the
CPU: a call whose signature (framework, each array's dtype and shape, each integer scalar's type
and value) was prepared is launched from C with the recorded grid and words, the call's array
and output addresses and its float scalars packed again; anything else is left to the checked
path (`call` returns None and launches nothing). The driver is FakeDriver's ctypes stand-ins,
and the arrays are plain classes registered with `set_frameworks` in the roles of the runtime's
device arrays, torch tensors and CuPy arrays (matched by exact type). Every test asserts the
exact launches recorded (function, grid, block, shared memory, stream, parameter cells) and the
exact objects returned."""

from __future__ import annotations

import ctypes
import dataclasses
import struct
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from iree_dispatch.runtime.compiled import CallsSetup
from iree_dispatch.runtime.dlpack import LAUNCH_ENTRY

from ..support.compiled_stand_ins import FakeDriver, needs_compiler

FUNCTION_ADDRESS = 0x1234
BLOCK = (64, 1, 1)
SHARED = 256
OWN_STREAM = 0x5150
CONTEXT = 0xC0  # FakeDriver's current context by default
ORDINAL = 1
TORCH_STREAM = 0x7070
CUPY_STREAM = 0xCC00
SYNCHRONIZE_FAILED = "cuStreamSynchronize (a kernel failed on the device)"


def bits(value: float) -> int:
    """The float32 bits of `value` as a kernel's push constant word holds them."""
    return struct.unpack("<I", struct.pack("<f", value))[0]


class Device:
    """What the LAUNCH_ENTRY entries of one device's arrays name."""


DEVICE = Device()


class DeviceArray:
    """The runtime's device array as a direct call sees it: its LAUNCH_ENTRY entry = (device, dtype, shape, address)."""

    def __init__(self, address: int, dtype: str = "float32", shape: tuple = (4,), device: object = DEVICE):
        self.__dict__[LAUNCH_ENTRY] = (device, dtype, shape, address)


class TorchTensor:
    """A torch tensor as a signature reads it."""

    def __init__(self, address: int, dtype: str = "float32", shape: tuple = (4,), device: int = ORDINAL, contiguous: bool = True, requires_grad: bool = False,
                 is_cuda: bool = True):
        self.address, self.dtype, self.shape, self.device = address, dtype, shape, device
        self.contiguous, self.requires_grad, self.is_cuda = contiguous, requires_grad, is_cuda and device >= 0

    def get_device(self) -> int:
        return self.device

    def is_contiguous(self) -> bool:
        return self.contiguous

    def data_ptr(self) -> int:
        return self.address


class CupyArray:
    """A CuPy array as a signature reads it."""

    def __init__(self, address: int, dtype: str = "float32", shape: tuple = (4,), device: int = ORDINAL, contiguous: bool = True):
        self.dtype, self.shape = dtype, shape
        self.device = SimpleNamespace(id=device)
        self.flags = SimpleNamespace(c_contiguous=contiguous)
        self.data = SimpleNamespace(ptr=address)


class DriverError(RuntimeError):
    pass


class Harness:
    """A private module with FakeDriver's functions and the fake frameworks set, and what its
    calls' callbacks were given: the frameworks' stream requests (`streams`), `before_call`
    (`before`: the stream and the launches recorded by then), `launch_safely` (`safely`) and
    `fail` (`failures`, each raising DriverError)."""

    def __init__(self, module, driver: FakeDriver | None = None, torch_stream: int = TORCH_STREAM, cupy_stream: int = CUPY_STREAM):
        self.module = module
        self.driver = driver or FakeDriver()
        self.function = ctypes.c_void_p(FUNCTION_ADDRESS)
        self.torch_value, self.cupy_value = torch_stream, cupy_stream
        self.streams: list[tuple[str, int]] = []
        self.before: list[tuple] = []
        self.safely: list[tuple] = []
        self.failures: list[tuple] = []
        self.ahead: list = [None, None]  # the device's outputs made ahead, shared by its kernels' Calls
        module.set_driver(*self.driver.addresses())
        module.set_frameworks(DeviceArray, LAUNCH_ENTRY, TorchTensor, self.torch_stream, CupyArray, self.cupy_stream)

    def torch_stream(self, ordinal):
        self.streams.append(("torch", ordinal))
        return self.torch_value

    def cupy_stream(self, ordinal):
        self.streams.append(("cupy", ordinal))
        return self.cupy_value

    def before_call(self, stream):
        self.before.append((stream, len(self.driver.launches)))

    def launch_safely(self, *arguments):
        self.safely.append(arguments)

    def fail(self, rc, what):
        self.failures.append((rc, what))
        raise DriverError(rc, what)

    def calls(self, inputs: int, kinds: bytes = b"", slots: tuple = (), bindings: tuple = (0, 1, -1), results: tuple = (-1,), foreign: set | None = None):
        return self.module.Calls(self.setup(inputs, kinds, slots, bindings, results, foreign))

    def setup(self, inputs: int, kinds: bytes = b"", slots: tuple = (), bindings: tuple = (0, 1, -1), results: tuple = (-1,), foreign: set | None = None,
              **changes) -> CallsSetup:
        """A Calls' setup with this harness's callbacks, `changes` replacing any of its attributes."""
        setup = CallsSetup(function=self.function, block=BLOCK, shared_memory=SHARED, own_stream=OWN_STREAM, context=CONTEXT, ordinal=ORDINAL, device=DEVICE,
                           foreign=set() if foreign is None else foreign, ahead=self.ahead, before_call=self.before_call, launch_safely=self.launch_safely,
                           fail=self.fail, inputs=inputs, scalar_kinds=kinds, float_slots=slots, bindings=bindings, results=results)
        return dataclasses.replace(setup, **changes)


def factory(make, first: int = 0xF000):
    """An output factory making a new array (of `make`) at the next address on each call, and the list of those it made."""
    made: list = []

    def output():
        made.append(make(first + 0x100 * len(made)))
        return made[-1]

    return output, made


def launch(stream: int, values: list, grid: tuple = (8, 1, 1)) -> tuple:
    """A launch as FakeDriver records it (the kernel's context current)."""
    return (FUNCTION_ADDRESS, grid, BLOCK, SHARED, stream, values, None, CONTEXT)


@needs_compiler
def test_our_arrays_launch_on_the_own_stream_and_wait(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=2, kinds=b"i")
    output, made = factory(DeviceArray)
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    assert calls.prepare((a, b, 7), (8, 1, 1), (7, 99), (output,)) is True
    assert made == []  # prepare makes no outputs
    h.driver.expected = 5
    first = calls.call((a, b, 7))
    assert first is made[0]
    assert h.driver.launches == [launch(OWN_STREAM, [0xA000, 0xB000, 0xF000, 7, 99])]
    assert h.driver.synchronized == [OWN_STREAM]
    # Another array of the same dtype and shape: the same entry, its own address, a new output
    # (the one made while the first call waited).
    second = calls.call((DeviceArray(0xA800), b, 7))
    assert second is made[1] and second is not first
    assert h.driver.launches[1] == launch(OWN_STREAM, [0xA800, 0xB000, 0xF100, 7, 99])
    assert h.driver.synchronized == [OWN_STREAM, OWN_STREAM]
    assert h.streams == [] and h.safely == [] and h.before == []


@needs_compiler
def test_our_arrays_of_another_signature_are_left_to_the_checked_path(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=2, kinds=b"i")
    output, made = factory(DeviceArray)
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    assert calls.prepare((a, b, 1), (8, 1, 1), (1,), (output,)) is True
    without_entry = DeviceArray(0xA000)
    del without_entry.__dict__[LAUNCH_ENTRY]
    misses = [
        (DeviceArray(0xA000, shape=(5,)), b, 1),  # another shape
        (DeviceArray(0xA000, shape=(2, 2)), b, 1),
        (a, DeviceArray(0xB000, dtype="float16"), 1),  # another dtype
        (a, b, 2),  # another int scalar
        (a, b, True),  # True is not 1
        (DeviceArray(0xA000, device=Device()), b, 1),  # another device's array
        (without_entry, b, 1),  # an array no direct call has seen
        (a, b),  # too few arguments
        (a, b, 1, 1),
        [a, b, 1],  # not a tuple
    ]
    for args in misses:
        assert calls.call(args) is None, args
    assert made == [] and h.driver.launches == [] and h.driver.synchronized == []
    # ... and True prepared apart from 1: two entries.
    h.driver.expected = 4
    assert calls.prepare((a, b, True), (2, 1, 1), (5,), (output,)) is True
    # (each call of ours also makes its entry's next outputs: made[1] for True, dropped when
    # the call of 1 makes its own)
    assert calls.call((a, b, True)) is made[0] and calls.call((a, b, 1)) is made[2]
    assert h.driver.launches == [launch(OWN_STREAM, [0xA000, 0xB000, 0xF000, 5], (2, 1, 1)), launch(OWN_STREAM, [0xA000, 0xB000, 0xF200, 1])]


@needs_compiler
def test_float_scalars_are_packed_again_on_every_call(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=1, kinds=b"fi", slots=(1,), bindings=(0, -1))
    output, made = factory(DeviceArray)
    a = DeviceArray(0xA000)
    assert calls.prepare((a, 1.5, 3), (8, 1, 1), (3, 0, 5), (output,)) is True
    h.driver.expected = 5
    for value, expected in [(1.5, 1.5), (-2.0, -2.0), (2, 2.0), (0.1, 0.1), (3.4e38, 3.4e38)]:
        assert calls.call((a, value, 3)) is made[-2]  # made[-1]: the next call's, made while this one waited
        assert h.driver.launches[-1] == launch(OWN_STREAM, [0xA000, 0xF000 + 0x100 * (len(made) - 2), 3, bits(expected), 5])
    assert len(h.driver.launches) == 5
    refused = [
        1e39,  # finite, an infinity in float32
        -1e39,
        2**1024,  # no double
        np.float32(1.5),  # numpy scalars
        np.float64(1.5),
        True,  # a bool is no float scalar
        "1.5",
    ]
    for value in refused:
        assert calls.call((a, value, 3)) is None, value
    assert calls.call((a, 1.5, 3.0)) is None  # a float for an int scalar
    assert calls.call((a, 1.5, np.int64(3))) is None
    assert len(h.driver.launches) == 5 and len(made) == 6  # the last: the next call's outputs
    # An infinity given as one is packed as one.
    assert calls.call((a, float("inf"), 3)) is made[-2]
    assert h.driver.launches[-1][5][3] == bits(float("inf"))


@needs_compiler
def test_torch_tensors_launch_on_torch_s_stream_without_waiting(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=2)
    output, made = factory(TorchTensor)
    a, b = TorchTensor(0xA000), TorchTensor(0xB000)
    assert calls.prepare((a, b), (8, 1, 1), (11,), (output,)) is True
    h.driver.expected = 4
    result = calls.call((a, b))
    assert isinstance(result, TorchTensor) and result is made[0]
    assert h.driver.launches == [launch(TORCH_STREAM, [0xA000, 0xB000, 0xF000, 11])]
    assert h.driver.synchronized == [] and h.streams == [("torch", ORDINAL)]
    h.torch_value = 0  # the legacy default stream: launched on as 1
    assert calls.call((TorchTensor(0xA100), b)) is made[1]
    assert h.driver.launches[1] == launch(1, [0xA100, 0xB000, 0xF100, 11])
    misses = [
        TorchTensor(0xA000, device=0),  # another GPU
        TorchTensor(0xA000, device=-1),  # a CPU tensor
        TorchTensor(0xA000, is_cuda=False),  # another accelerator's tensor, which get_device() numbers too
        TorchTensor(0xA000, contiguous=False),
        TorchTensor(0xA000, requires_grad=True),
        TorchTensor(0xA000, dtype="bfloat16"),
        TorchTensor(0xA000, shape=(2, 2)),
    ]
    for tensor in misses:
        assert calls.call((tensor, b)) is None, vars(tensor)
        assert calls.prepare((tensor, b), (8, 1, 1), (11,), (output,)) is (tensor.shape != (4,) or tensor.dtype != "float32")
    assert len(h.driver.launches) == 2 and len(made) == 2 and h.driver.synchronized == []


@needs_compiler
def test_an_in_place_torch_result_is_the_callers_tensor(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=2, bindings=(0, 1), results=(0,))
    a, b = TorchTensor(0xA000), TorchTensor(0xB000)
    assert calls.prepare((a, b), (4, 2, 1), (), ()) is True
    h.driver.expected = 2
    assert calls.call((a, b)) is a
    other = TorchTensor(0xA400)
    assert calls.call((other, b)) is other
    assert h.driver.launches == [launch(TORCH_STREAM, [0xA000, 0xB000], (4, 2, 1)), launch(TORCH_STREAM, [0xA400, 0xB000], (4, 2, 1))]


@needs_compiler
def test_cupy_arrays_launch_on_cupy_s_stream(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=2)
    output, made = factory(CupyArray)
    a, b = CupyArray(0xA000), CupyArray(0xB000)
    assert calls.prepare((a, b), (8, 1, 1), (11,), (output,)) is True
    h.driver.expected = 4
    assert calls.call((a, b)) is made[0]
    assert calls.call((a, CupyArray(0xB200))) is made[1]
    assert h.driver.launches == [launch(CUPY_STREAM, [0xA000, 0xB000, 0xF000, 11]), launch(CUPY_STREAM, [0xA000, 0xB200, 0xF100, 11])]
    assert h.driver.synchronized == [] and h.streams == [("cupy", ORDINAL)] * 2
    for array in [CupyArray(0xA000, device=0), CupyArray(0xA000, contiguous=False), CupyArray(0xA000, shape=(8,))]:
        assert calls.call((array, b)) is None
    h.cupy_value = 0
    assert calls.call((a, b)) is made[2]
    assert h.driver.launches[2] == launch(1, [0xA000, 0xB000, 0xF200, 11])
    assert len(h.driver.launches) == 3 and len(made) == 3


@needs_compiler
def test_arrays_of_two_frameworks_or_of_unknown_types_have_no_signature(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=2)
    output, made = factory(DeviceArray)
    ours, torch, cupy = DeviceArray(0xA000), TorchTensor(0xA000), CupyArray(0xA000)

    class DeviceArraySubclass(DeviceArray):
        pass

    others = [np.zeros(4, np.float32), DeviceArraySubclass(0xA000), None, 0xA000, SimpleNamespace(**{LAUNCH_ENTRY: (DEVICE, "float32", (4,), 0xA000)})]
    pairs = [(ours, torch), (torch, ours), (torch, cupy), (cupy, torch), (ours, cupy), (cupy, ours)] + [(ours, other) for other in others]
    for args in pairs:
        assert calls.prepare(args, (1, 1, 1), (), (output,)) is False, args
        assert calls.call(args) is None, args
    assert made == [] and h.driver.launches == [] and h.streams == []
    # Each framework alone is known.
    for framework in (ours, torch, cupy):
        assert calls.prepare((framework, framework), (1, 1, 1), (), (output,)) is True


@needs_compiler
def test_a_call_where_another_context_is_current_pushes_its_own(private_module):
    """Another GPU's context current on the thread (several devices in one process): the call
    makes its outputs and launches with its device's context pushed, and pops it after."""
    h = Harness(private_module, FakeDriver(context=0xBAD))
    contexts: list = []

    def output():
        contexts.append(h.driver.context)  # where IREE's allocator would allocate
        return made_output()

    made_output, made = factory(DeviceArray)
    calls = h.calls(inputs=2, kinds=b"f", slots=(0,))
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    assert calls.prepare((a, b, 0.5), (8, 1, 1), (0, 9), (output,)) is True
    h.driver.expected = 4
    assert calls.call((a, b, 0.25)) is made[0]
    assert h.driver.launches == [launch(OWN_STREAM, [0xA000, 0xB000, 0xF000, bits(0.25)])]
    assert h.driver.synchronized == [OWN_STREAM] and h.safely == []
    assert contexts == [CONTEXT, CONTEXT]  # this call's output, and the next call's made ahead
    assert h.driver.pushed == [CONTEXT] and h.driver.context == 0xBAD and h.driver.stack == []
    torch_calls = h.calls(inputs=2)
    torch_output, torch_made = factory(TorchTensor)
    t, u = TorchTensor(0xA000), TorchTensor(0xB000)
    assert torch_calls.prepare((t, u), (8, 1, 1), (), (torch_output,)) is True
    h.driver.expected = 3
    assert torch_calls.call((t, u)) is torch_made[0]
    assert h.driver.launches[1] == launch(TORCH_STREAM, [0xA000, 0xB000, 0xF000])
    assert h.driver.pushed == [CONTEXT, CONTEXT] and h.driver.context == 0xBAD and h.driver.stack == []


@needs_compiler
def test_a_call_on_a_thread_without_a_context_makes_its_own_current_and_leaves_it(private_module):
    """A thread with no current context (a new thread): the device's context is pushed for the
    call and stays current after it, as the checked path leaves it; the next call pushes none."""
    h = Harness(private_module, FakeDriver(context=0))
    output, made = factory(DeviceArray)
    calls = h.calls(inputs=2)
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    assert calls.prepare((a, b), (8, 1, 1), (), (output,)) is True
    h.driver.expected = 3
    assert calls.call((a, b)) is made[0] and calls.call((a, b)) is made[1]
    assert h.driver.launches == [launch(OWN_STREAM, [0xA000, 0xB000, 0xF000]), launch(OWN_STREAM, [0xA000, 0xB000, 0xF100])]
    assert h.driver.pushed == [CONTEXT] and h.driver.context == CONTEXT and h.driver.stack == [0]


@needs_compiler
def test_a_context_that_can_not_be_pushed_leaves_the_call_to_the_checked_path(private_module):
    h = Harness(private_module, FakeDriver(context=0xBAD, push_rc=201))
    output, made = factory(DeviceArray)
    calls = h.calls(inputs=2)
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    assert calls.prepare((a, b), (8, 1, 1), (), (output,)) is True
    assert calls.call((a, b)) is None
    assert made == [] and h.driver.launches == [] and h.safely == [] and h.driver.context == 0xBAD


@needs_compiler
def test_a_failed_launch_is_launched_again_safely(private_module):
    h = Harness(private_module, FakeDriver(launch_rc=201))  # CUDA_ERROR_INVALID_CONTEXT
    calls = h.calls(inputs=2)
    output, made = factory(DeviceArray)
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    assert calls.prepare((a, b), (8, 1, 1), (3,), (output,)) is True
    h.driver.expected = 4
    assert calls.call((a, b)) is made[0]
    assert h.driver.launches == [launch(OWN_STREAM, [0xA000, 0xB000, 0xF000, 3])]
    assert h.driver.synchronized == []  # the safe launch waits itself
    assert h.safely == [(h.function, (8, 1, 1), BLOCK, SHARED, OWN_STREAM, [0xA000, 0xB000, 0xF000, 3], True)]


@needs_compiler
def test_a_failed_synchronize_raises_the_driver_s_error(private_module):
    h = Harness(private_module, FakeDriver(synchronize_rc=719))  # CUDA_ERROR_LAUNCH_FAILED
    calls = h.calls(inputs=2)
    output, made = factory(DeviceArray)
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    assert calls.prepare((a, b), (8, 1, 1), (), (output,)) is True
    h.driver.expected = 3
    with pytest.raises(DriverError) as raised:
        calls.call((a, b))
    assert raised.value.args == (719, SYNCHRONIZE_FAILED)
    assert h.failures == [(719, SYNCHRONIZE_FAILED)]
    assert h.driver.launches == [launch(OWN_STREAM, [0xA000, 0xB000, 0xF000])] and h.driver.synchronized == [OWN_STREAM]
    # A `fail` that returns instead of raising: still an error.
    lenient = private_module.Calls(h.setup(2, fail=lambda rc, what: None))
    assert lenient.prepare((a, b), (8, 1, 1), (), (output,)) is True
    with pytest.raises(RuntimeError, match="cuStreamSynchronize failed"):
        lenient.call((a, b))


@needs_compiler
def test_foreign_streams_are_waited_for_before_the_launch(private_module):
    h = Harness(private_module)
    foreign: set = {0x99}
    calls = h.calls(inputs=1, bindings=(0,), results=(0,), foreign=foreign)
    ours, torch = DeviceArray(0xA000), TorchTensor(0xA000)
    assert calls.prepare((ours,), (1, 1, 1), (), ()) is True
    assert calls.prepare((torch,), (1, 1, 1), (), ()) is True
    h.driver.expected = 1
    assert calls.call((ours,)) is ours
    assert calls.call((torch,)) is torch
    assert h.before == [(None, 0), (TORCH_STREAM, 1)]  # before each launch: None for ours, the stream for torch's
    foreign.clear()
    assert calls.call((ours,)) is ours and calls.call((torch,)) is torch
    assert len(h.before) == 2 and len(h.driver.launches) == 4
    quiet = h.calls(inputs=1, bindings=(0,), results=(0,))
    assert quiet.prepare((ours,), (1, 1, 1), (), ()) is True
    assert quiet.call((ours,)) is ours and len(h.before) == 2
    # A before_call that raises: nothing launched.
    foreign.add(0x99)

    def refuse(stream):
        raise DriverError("waiting failed")

    strict = private_module.Calls(h.setup(1, bindings=(0,), results=(0,), foreign=foreign, before_call=refuse))
    assert strict.prepare((ours,), (1, 1, 1), (), ()) is True
    with pytest.raises(DriverError, match="waiting failed"):
        strict.call((ours,))
    assert len(h.driver.launches) == 5


@needs_compiler
def test_several_results_are_a_tuple_in_their_order(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=2, bindings=(0, -2, 1, -1), results=(-2, 0, -1))
    first, first_made = factory(DeviceArray, 0xF000)
    second, second_made = factory(DeviceArray, 0xE000)
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    assert calls.prepare((a, b), (8, 1, 1), (4,), (first, second)) is True
    h.driver.expected = 5
    results = calls.call((a, b))
    assert type(results) is tuple and len(results) == 3
    assert results[0] is second_made[0] and results[1] is a and results[2] is first_made[0]
    assert h.driver.launches == [launch(OWN_STREAM, [0xA000, 0xE000, 0xB000, 0xF000, 4])]
    none = h.calls(inputs=2, bindings=(0, 1), results=())
    assert none.prepare((a, b), (8, 1, 1), (), ()) is True
    h.driver.expected = 2
    assert none.call((a, b)) == ()


@needs_compiler
def test_an_output_factory_that_raises_launches_nothing(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=2, bindings=(0, 1, -1, -2), results=(-1, -2))
    first, made = factory(DeviceArray)

    def out_of_memory():
        raise DriverError("no memory for the output")

    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    assert calls.prepare((a, b), (8, 1, 1), (), (first, out_of_memory)) is True
    with pytest.raises(DriverError, match="no memory for the output"):
        calls.call((a, b))
    held = sys.getrefcount(made[0])  # outside an assert: pytest's rewritten asserts keep their operands
    assert len(made) == 1 and held == 2  # the first output was let go: only `made` (and getrefcount's argument) holds it
    # A factory that makes no array a direct call knows: no object, another device's array.
    for made_instead in (object(), DeviceArray(0xF000, device=Device())):
        unknown_output = h.calls(inputs=2)
        assert unknown_output.prepare((a, b), (8, 1, 1), (), (lambda: made_instead,)) is True
        with pytest.raises(TypeError, match="an output factory made no device array a direct call knows"):
            unknown_output.call((a, b))
    assert h.driver.launches == [] and h.driver.synchronized == [] and h.safely == []


@needs_compiler
def test_an_output_of_another_framework_is_refused_for_our_arrays(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=2)
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    assert calls.prepare((a, b), (8, 1, 1), (), (lambda: TorchTensor(0xF000),)) is True
    h.driver.expected = 3
    with pytest.raises(TypeError, match="an output factory made no device array a direct call knows"):
        calls.call((a, b))
    assert h.driver.launches == []


@needs_compiler
def test_the_table_keeps_64_signatures_and_then_starts_again(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=1, kinds=b"i", bindings=(0,), results=(0,))
    a = DeviceArray(0xA000)
    h.driver.expected = 2
    for value in range(64):
        assert calls.prepare((a, value), (1, 1, 1), (value,), ()) is True
    for value in range(64):
        assert calls.call((a, value)) is a
    assert [launched[5] for launched in h.driver.launches] == [[0xA000, value] for value in range(64)]
    assert calls.prepare((a, 64), (1, 1, 1), (64,), ()) is True
    assert calls.call((a, 0)) is None and calls.call((a, 63)) is None
    assert calls.call((a, 64)) is a
    assert len(h.driver.launches) == 65 and h.driver.launches[-1][5] == [0xA000, 64]


@needs_compiler
def test_prepare_refuses_what_it_can_not_launch(private_module):
    h = Harness(private_module)
    output, made = factory(DeviceArray)
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    calls = h.calls(inputs=2, kinds=b"f", slots=(1,))
    with pytest.raises(TypeError, match="grid must be a tuple of 3 ints"):
        calls.prepare((a, b, 1.0), [1, 1, 1], (0, 0), (output,))
    with pytest.raises(TypeError, match="grid must be a tuple of 3 ints"):
        calls.prepare((a, b, 1.0), (1, 1), (0, 0), (output,))
    with pytest.raises(OverflowError, match="does not fit 32 bits"):
        calls.prepare((a, b, 1.0), (2**32, 1, 1), (0, 0), (output,))
    with pytest.raises(OverflowError, match="a word does not fit 32 bits"):
        calls.prepare((a, b, 1.0), (1, 1, 1), (0, 2**32), (output,))
    with pytest.raises(OverflowError):
        calls.prepare((a, b, 1.0), (1, 1, 1), (-1, 0), (output,))
    with pytest.raises(TypeError, match="words must be a tuple"):
        calls.prepare((a, b, 1.0), (1, 1, 1), [0, 0], (output,))
    with pytest.raises(ValueError, match="a float slot is beyond the words"):
        calls.prepare((a, b, 1.0), (1, 1, 1), (0,), (output,))
    with pytest.raises(TypeError, match="outputs must be a tuple of factories"):
        calls.prepare((a, b, 1.0), (1, 1, 1), (0, 0), [output])
    with pytest.raises(TypeError, match="outputs must be a tuple of factories"):
        calls.prepare((a, b, 1.0), (1, 1, 1), (0, 0), (DeviceArray(0xF000),))
    with pytest.raises(ValueError, match="a binding names no input or output"):
        calls.prepare((a, b, 1.0), (1, 1, 1), (0, 0), ())
    two_outputs = h.calls(inputs=2, bindings=(0, 1, -1, -2), results=(-1,))
    with pytest.raises(ValueError, match="a binding names no input or output"):
        two_outputs.prepare((a, b), (1, 1, 1), (), (output,))
    third_input = h.calls(inputs=2, bindings=(0, 1, 2), results=(0,))
    with pytest.raises(ValueError, match="a binding names no input or output"):
        third_input.prepare((a, b), (1, 1, 1), (), ())
    second_result = h.calls(inputs=2, bindings=(0, 1), results=(-2,))
    with pytest.raises(ValueError, match="a result names no input or output"):
        second_result.prepare((a, b), (1, 1, 1), (), (output,))
    third_result = h.calls(inputs=2, bindings=(0, 1), results=(2,))
    with pytest.raises(ValueError, match="a result names no input or output"):
        third_result.prepare((a, b), (1, 1, 1), (), ())
    assert calls.prepare((a, np.zeros(4), 1.0), (1, 1, 1), (0, 0), (output,)) is False
    assert calls.prepare((a, b, 1e39), (1, 1, 1), (0, 0), (output,)) is False
    # Nothing was recorded by a refused prepare.
    for refused in (calls, two_outputs, third_input, second_result, third_result):
        assert refused.call((a, b, 1.0) if refused is calls else (a, b)) is None
    assert made == [] and h.driver.launches == []


@needs_compiler
def test_slots_and_sources_outside_the_parameters_are_refused(private_module):
    """A float slot or a binding beyond what a launch's parameter cells hold is refused when
    the calls are made, never written at launch."""
    h = Harness(private_module)
    with pytest.raises(ValueError, match="float slot -1 is no word"):
        h.calls(inputs=2, kinds=b"f", slots=(-1,))
    with pytest.raises(ValueError, match="float slot 256 is no word"):
        h.calls(inputs=2, kinds=b"f", slots=(256,))
    with pytest.raises(ValueError, match="bindings: 4294967296 names no input or output"):
        h.calls(inputs=2, bindings=(0, 1, 2**32))
    with pytest.raises(ValueError, match="results: -257 names no input or output"):
        h.calls(inputs=2, results=(-257,))


def counts(objects: dict) -> dict:
    return {name: sys.getrefcount(value) for name, value in objects.items()}


@needs_compiler
def test_calls_keep_no_references(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=2, kinds=b"if", slots=(1,), bindings=(0, 1, -1), results=(-1, 0))
    out = DeviceArray(0xF000)
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    n, alpha = int("123456789"), float("1.25")
    assert calls.prepare((a, b, int("123456789"), float("0.5")), (8, 1, 1), (7, 0), (lambda: out,)) is True
    h.driver.expected = 5
    miss = DeviceArray(0xA000, shape=(9,))
    watched = {"a": a, "b": b, "out": out, "n": n, "alpha": alpha, "entry": a.__dict__[LAUNCH_ENTRY], "dtype": a.__dict__[LAUNCH_ENTRY][1],
               "shape": a.__dict__[LAUNCH_ENTRY][2], "miss": miss}
    assert calls.call((a, b, n, alpha)) == (out, a)  # warm-up
    before = counts(watched)
    for _ in range(1000):
        calls.call((a, b, n, alpha))
        assert calls.call((miss, b, n, alpha)) is None
        assert calls.call((a, b, n, 1e39)) is None
    assert counts(watched) == before
    assert len(h.driver.launches) == 1001 and h.driver.launches[-1][5] == [0xA000, 0xB000, 0xF000, 7, bits(1.25)]


@needs_compiler
def test_torch_calls_launched_safely_keep_no_references(private_module):
    stream = int("987654321")
    h = Harness(private_module, FakeDriver(launch_rc=201), torch_stream=stream)  # every launch fails: launched again safely
    h.launch_safely = lambda *arguments: None
    h.driver.expected = 3
    calls = h.calls(inputs=2, kinds=b"f", slots=(0,))
    out = TorchTensor(0xF000)
    a, b = TorchTensor(0xA000), TorchTensor(0xB000)
    alpha = float("2.5")
    assert calls.prepare((a, b, 1.0), (8, 1, 1), (0,), (lambda: out,)) is True
    watched = {"a": a, "b": b, "out": out, "alpha": alpha, "stream": stream, "function": h.function, "dtype": a.dtype, "shape": a.shape}
    assert calls.call((a, b, alpha)) is out  # warm-up
    before = counts(watched)
    for _ in range(1000):
        calls.call((a, b, alpha))
    assert counts(watched) == before
    assert len(h.driver.launches) == 1001


@needs_compiler
def test_a_synchronous_call_makes_the_next_calls_outputs_while_its_kernel_runs(private_module):
    """Between its launch and its wait, a call on our arrays makes the outputs of its entry's
    next call; that call launches into them without allocating first and makes the next set.
    One set is kept per device: a call of another entry or of another kernel replaces it,
    emptying the device's list releases it (as trim does), a set that can't be made is left to
    the next call, and entries prepared without make_ahead and calls that don't wait make none."""
    h = Harness(private_module)
    events: list = []
    driver = h.driver

    def output():
        made.append(DeviceArray(0xF000 + 0x100 * len(made)))
        events.append(("made", len(made) - 1, len(driver.launches), len(driver.synchronized)))
        return made[-1]

    made: list = []
    calls = h.calls(inputs=2, kinds=b"i")
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    assert calls.prepare((a, b, 1), (8, 1, 1), (1,), (output,)) is True
    assert calls.prepare((a, b, 2), (8, 1, 1), (2,), (output,)) is True
    driver.expected = 4
    assert calls.call((a, b, 1)) is made[0]
    # made[0] before the launch; made[1] after it, before the wait
    assert events == [("made", 0, 0, 0), ("made", 1, 1, 0)] and driver.synchronized == [OWN_STREAM]
    assert calls.call((a, b, 1)) is made[1]
    assert driver.launches[1] == launch(OWN_STREAM, [0xA000, 0xB000, 0xF100, 1])
    assert events[2:] == [("made", 2, 2, 1)]
    spare = made[2]
    held = sys.getrefcount(spare)
    assert calls.call((a, b, 2)) is made[3]  # another entry: its own outputs, and the set replaced
    assert sys.getrefcount(spare) == held - 1
    assert h.ahead[1] == (made[4],)
    spare = made[4]
    held = sys.getrefcount(spare)
    h.ahead[:] = [None, None]
    assert sys.getrefcount(spare) == held - 1
    assert calls.call((a, b, 2)) is made[5]  # made again, as ever
    another_kernel = h.calls(inputs=2, kinds=b"i")
    assert another_kernel.prepare((a, b, 1), (8, 1, 1), (1,), (output,)) is True
    spare = made[6]
    held = sys.getrefcount(spare)
    assert another_kernel.call((a, b, 1)) is made[7]  # the device's set replaced by this kernel's
    assert sys.getrefcount(spare) == held - 1 and h.ahead[1] == (made[8],)
    assert calls.call((a, b, 2)) is made[9] and h.ahead[1] == (made[10],)
    large = h.calls(inputs=2, kinds=b"i")
    assert large.prepare((a, b, 1), (8, 1, 1), (1,), (output,), False) is True
    assert large.call((a, b, 1)) is made[11] and len(made) == 12  # nothing made ahead
    assert h.ahead[1] == (made[10],)  # and the device's set left as it was

    failing = {"next": False}

    def sometimes_failing():
        if failing["next"]:
            failing["next"] = False
            raise MemoryError("no memory for the next call's outputs")
        return output()

    other = h.calls(inputs=2, kinds=b"i")
    assert other.prepare((a, b, 1), (8, 1, 1), (1,), (sometimes_failing,)) is True
    count = len(made)
    failing["next"] = True
    with pytest.raises(MemoryError):  # the call's own outputs: the error is the call's
        other.call((a, b, 1))
    assert len(made) == count
    result = other.call((a, b, 1))
    assert result is made[count] and len(made) == count + 2
    failing["next"] = True
    assert other.call((a, b, 1)) is made[count + 1]  # its next set could not be made: no error
    assert other.call((a, b, 1)) is made[count + 2] and len(made) == count + 4

    torch_made: list = []
    on_torch = h.calls(inputs=2)
    t = TorchTensor(0xA000)
    assert on_torch.prepare((t, TorchTensor(0xB000)), (8, 1, 1), (), (lambda: torch_made.append(TorchTensor(0xF000)) or torch_made[-1],)) is True
    on_torch.call((t, TorchTensor(0xB000)))
    assert len(torch_made) == 1  # nothing made ahead for a call that doesn't wait


@needs_compiler
def test_zeroed_outputs_are_filled_on_the_kernels_stream_before_it(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=1, kinds=b"i", bindings=(0, -1, -2), results=(-1, -2))
    zeroed, zeroed_made = factory(DeviceArray, 0xF000)
    plain, plain_made = factory(DeviceArray, 0xE000)
    a = DeviceArray(0xA000)
    # One zero-filled output of 16 bytes, one left uninitialised.
    assert calls.prepare((a, 4), (1, 1, 1), (4,), (zeroed, plain), True, None, (16, 0)) is True
    h.driver.expected = 4
    first = calls.call((a, 4))
    assert first == (zeroed_made[0], plain_made[0])
    assert h.driver.events == [("memset", 0xF000, 0, 16, OWN_STREAM), ("launch", OWN_STREAM)]
    # On torch's stream for torch tensors: the fill goes there too, ahead of the kernel.
    torch_out, torch_made = factory(TorchTensor, 0xD000)
    torch_plain, _ = factory(TorchTensor, 0xC000)
    t = TorchTensor(0xA000)
    assert calls.prepare((t, 4), (1, 1, 1), (4,), (torch_out, torch_plain), False, None, (16, 0)) is True
    calls.call((t, 4))
    assert h.driver.events[2:] == [("memset", torch_made[0].address, 0, 16, TORCH_STREAM), ("launch", TORCH_STREAM)]


@needs_compiler
def test_a_prepared_shared_memory_size_is_the_launchs(private_module):
    # A kernel whose shared memory depends on sizes: each signature launches with its own size;
    # one prepared without a size launches with the Calls' (the declared bound).
    h = Harness(private_module)
    calls = h.calls(inputs=2, kinds=b"i")
    output, made = factory(DeviceArray)
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    assert calls.prepare((a, b, 3), (1, 1, 1), (3,), (output,), True, 96) is True
    assert calls.prepare((a, b, 5), (1, 1, 1), (5,), (output,), True) is True
    h.driver.expected = 4
    calls.call((a, b, 3))
    calls.call((a, b, 5))
    assert [launched[3] for launched in h.driver.launches] == [96, SHARED]
    assert not any(event[0] == "memset" for event in h.driver.events)


@needs_compiler
def test_prepare_refuses_zeroed_sizes_that_do_not_match_the_outputs(private_module):
    h = Harness(private_module)
    calls = h.calls(inputs=2, kinds=b"i")
    output, _ = factory(DeviceArray)
    a, b = DeviceArray(0xA000), DeviceArray(0xB000)
    with pytest.raises(TypeError, match="zeroed must be a tuple of byte counts, one per output"):
        calls.prepare((a, b, 3), (1, 1, 1), (3,), (output,), True, None, (16, 16))
    with pytest.raises(OverflowError, match="shared_memory does not fit 32 bits"):
        calls.prepare((a, b, 3), (1, 1, 1), (3,), (output,), True, 2**32)
