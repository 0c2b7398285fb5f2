"""Call-time checks of the run-time half, without a GPU: every bad call raises TypeError or
ValueError naming the parameter, and nothing is launched."""

import subprocess
import sys

import numpy as np
import pytest

from iree_dispatch.core.contract import FunctionDescription, Requirement, ScalarDescription, TensorDescription
from iree_dispatch.runtime import KernelFunction, no_variant_message, runs_on

DESCRIPTION = FunctionDescription(
    name="axpby",
    function="axpby",
    archs=("sm_90", "sm_80"),
    inputs=(TensorDescription("x", "f32", ("n",)), TensorDescription("y", "f32", ("n",))),
    scalars=(ScalarDescription("alpha", "float", "float", 4), ScalarDescription("count", "unsigned", "uint", 4)),
    outputs=(TensorDescription("out", "f32", ("n",)),),
)
MATRIX = FunctionDescription(
    name="t",
    function="t",
    inputs=(TensorDescription("a", "i32", ("m", 4)), TensorDescription("b", "i32", (4, "m"))),
    outputs=(),
)


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)
        return np.zeros(1, np.float32)


@pytest.fixture
def axpby():
    recorder = Recorder()
    return KernelFunction(DESCRIPTION, recorder, device=None), recorder


def f32(*shape):
    return np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        ((f32(4),), {}, TypeError, r"axpby\(\) missing 3 argument\(s\): y, alpha, count"),
        ((f32(4), f32(4), 1.0, 2, 3), {}, TypeError, r"takes 4 arguments \(x, y, alpha, count\) but 5 were given"),
        ((f32(4), f32(4), 1.0), {"z": 1}, TypeError, "unexpected keyword argument 'z'"),
        ((f32(4), f32(4), 1.0, 2), {"x": f32(4)}, TypeError, "multiple values for argument 'x'"),
        ((f32(4).astype(np.float64), f32(4), 1.0, 2), {}, TypeError, r"argument 'x' must have dtype float32 \(f32\), got float64"),
        (([1.0, 2.0], f32(2), 1.0, 2), {}, TypeError, r"argument 'x' must be an array \(numpy, IREE, or any DLPack array such as torch or CuPy\), got list"),
        ((f32(2, 2), f32(4), 1.0, 2), {}, ValueError, r"argument 'x' must have rank 1 \(shape \['n'\]\), got shape \[2, 2\]"),
        ((f32(4), f32(5), 1.0, 2), {}, ValueError, r"argument 'y' dim 0 is 5, but n = 4 \(from x dim 0\)"),
        ((f32(4), f32(4), "1", 2), {}, TypeError, r"argument 'alpha' \(float\) must be a number, got str"),
        ((f32(4), f32(4), 1.0, 2.5), {}, TypeError, r"argument 'count' \(unsigned\) must be an integer, got float"),
        ((f32(4), f32(4), 1.0, -1), {}, ValueError, r"argument 'count' \(unsigned\) = -1 is out of range \[0, 4294967295\]"),
        ((f32(4), f32(4), 1.0, 2**32), {}, ValueError, "out of range"),
        ((f32(4), f32(4), True, 2), {}, TypeError, "must be a number, got bool"),
    ],
)
def test_bad_calls_raise_before_any_launch(axpby, args, kwargs, error, message):
    function, recorder = axpby
    with pytest.raises(error, match=message):
        function(*args, **kwargs)
    assert recorder.calls == []


def test_a_closed_function_raises_and_launches_nothing(axpby):
    """A function of a closed module (Module.close) refuses calls by name."""
    function, recorder = axpby
    function(f32(4), f32(4), 1.0, 2)
    function.close()
    with pytest.raises(RuntimeError, match=r"axpby\(\): its module was closed"):
        function(f32(4), f32(4), 1.0, 2)
    assert len(recorder.calls) == 1 and function.call_prepared is None


def test_a_closed_function_without_a_description_says_so():
    """A program's function (no kernel description) of a closed module: calls and attributes
    raise naming the closed module, and its repr says closed."""
    from types import SimpleNamespace

    from iree_dispatch.runtime.loading import OnDevice

    function = OnDevice(SimpleNamespace(name="chain", reflection={}), SimpleNamespace())
    assert function.name == "chain"
    function.close()
    with pytest.raises(RuntimeError, match="this function: its module was closed"):
        function(1)
    with pytest.raises(AttributeError, match="reflection: its module was closed"):
        function.reflection  # noqa: B018
    assert repr(function) == "<iree_dispatch function, closed>"


def test_good_call_converts_arguments(axpby):
    function, recorder = axpby
    x = f32(8)[::2]  # non-contiguous: copied into a contiguous array
    y = f32(4)
    function(x, y=y, alpha=np.float32(0.5), count=np.uint32(3_000_000_000))
    (cx, cy, alpha, count), = recorder.calls
    assert cx.flags.c_contiguous and np.array_equal(cx, x) and cy is y
    assert type(alpha) is float and alpha == 0.5
    assert count == 3_000_000_000 - 2**32  # the same 32 bits, as the i32 the function takes


def test_static_dims_and_symbols_across_inputs():
    function = KernelFunction(MATRIX, Recorder(), device=None)
    a = np.ones((3, 4), np.int32)
    with pytest.raises(ValueError, match=r"argument 'b' dim 0 must be 4, got 3"):
        function(a, np.ones((3, 3), np.int32))
    with pytest.raises(ValueError, match=r"argument 'b' dim 1 is 2, but m = 3 \(from a dim 0\)"):
        function(a, np.ones((4, 2), np.int32))
    function(a, np.ones((4, 3), np.int32))


def test_no_variant_message_names_gpu_and_archs():
    message = no_variant_message("k.vmfb", (9, 0), ["sm_100"])
    assert "compute capability 9.0, sm_90" in message and "built for sm_100" in message and "--arch sm_90" in message
    assert runs_on(["sm_100", "sm_90", "sm_80"], (9, 0)) == "sm_90"
    assert runs_on(["sm_100", "sm_90", "sm_80"], (8, 9)) == "sm_80"
    assert runs_on(["sm_90a"], (10, 0)) is None


# What the run-time half may load of this package (besides the package itself): the runtime
# and the shared core. Anything else is the build half.
RUNTIME_MAY_LOAD = ("iree_dispatch.runtime", "iree_dispatch.core")


def test_runtime_import_does_not_load_the_build_half():
    code = (
        "import sys, iree_dispatch.runtime; "
        "ours = [m for m in sys.modules if m.startswith('iree_dispatch.')]; "
        f"bad = [m for m in ours if not any(m == a or m.startswith(a + '.') for a in {RUNTIME_MAY_LOAD!r})]; "
        "bad += [m for m in sys.modules if m.startswith('iree.compiler')]; "
        "print(bad); sys.exit(bool(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


GQA = FunctionDescription(
    name="attend",
    function="attend",
    inputs=(TensorDescription("q", "f32", ("B", "Hq")), TensorDescription("k", "f32", ("B", "Hkv")), TensorDescription("mask", "f32", ("MB",))),
    outputs=(TensorDescription("out", "f32", ("B", "Hq")),),
    requires=(Requirement("Hq % Hkv == 0", "requires Hq % Hkv == 0"), Requirement("MB == 1 or MB == B", "requires MB == 1 or MB == B")),
)


class _DirectLaunch:
    """Stands in for a kernel's DirectLaunch: records each launch."""

    prepared_calls = into_calls = None

    def __init__(self):
        self.launched = []

    def call(self, tensors, scalars, env, args=(), shared_memory=None, host_results=False):
        self.launched.append(env)
        return [np.zeros((env["B"], env["Hq"]), np.float32)]


@pytest.mark.parametrize("path", ["iree", "direct"])
def test_relations_the_spec_requires_are_checked_before_launch(path):
    """Both ways of calling a kernel (through IREE, launched directly) refuse a call that breaks
    a relation of its spec's `requires`, naming it and the sizes; calls that keep them run."""
    recorder, direct = Recorder(), _DirectLaunch()
    function = KernelFunction(GQA, recorder, device=None, direct=direct if path == "direct" else None)
    launched = direct.launched if path == "direct" else recorder.calls
    rng = np.random.default_rng()
    b, hkv = (int(n) for n in rng.integers(2, 6, 2))
    hq = hkv * int(rng.integers(1, 4))
    with pytest.raises(ValueError, match=rf"attend\(\): requires Hq % Hkv == 0, but Hq = {hq + 1}, Hkv = {hkv}"):
        function(f32(b, hq + 1), f32(b, hkv), f32(1))
    with pytest.raises(ValueError, match=rf"attend\(\): requires MB == 1 or MB == B, but MB = {b + 1}, B = {b}"):
        function(f32(b, hq), f32(b, hkv), f32(b + 1))
    with pytest.raises(ValueError, match=r"attend\(\): requires Hq % Hkv == 0, which divides by zero for Hq = 4, Hkv = 0"):
        function(f32(b, 4), f32(b, 0), f32(1))
    assert launched == []
    for mb in (1, b):
        function(f32(b, hq), f32(b, hkv), f32(mb))
    assert len(launched) == 2
