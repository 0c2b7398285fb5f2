"""Programs (iree_dispatch.backend.program), out= kernels (KernelSpec.with_outputs_in_place) and the
asynchronous call path of the runtime, without a GPU.

The asynchronous path is exercised on IREE's CPU device (`local-task`) with a small function
compiled for llvm-cpu and described like a kernel: the fences, the timeline and the checks are
the same code the CUDA path runs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from iree_dispatch import runtime
from iree_dispatch.backend.program import Program
from iree_dispatch.core.archs import parse_arch
from iree_dispatch.core.contract import REFLECTION_KEY, KernelDescription, ProgramDescription, ScalarDescription, TensorDescription, encode
from iree_dispatch.core.errors import SpecError
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec
from iree_dispatch.frontend.spec_file import load_spec

from ..support.environment import SAMPLES_SPEC, needs_build_tools

ABI_CU = Path(__file__).resolve().parents[1] / "kernels" / "abi.cu"


@pytest.fixture(scope="module")
def samples() -> ModuleSpec:
    return load_spec(SAMPLES_SPEC)


def kernel(spec: ModuleSpec, function: str) -> KernelSpec:
    return next(k for k in spec.kernels if k.function == function)


def chain(spec: ModuleSpec, k: int, name: str = "chain") -> Program:
    p = Program(name)
    x, y = p.input("x", "f32", ["n"]), p.input("y", "f32", ["n"])
    alpha = p.scalar("alpha", "float")
    t = x
    for _ in range(k):
        t = p.call(kernel(spec, "axpby"), t, y, alpha, 0.5)
    p.output(t)
    return p


def test_program_text_calls_each_kernel_in_order(samples):
    p = chain(samples, 3)
    text = p.mlir(samples)
    # The kernels' functions without per-call asserts: the program checks at entry.
    assert text.count("func.call @samples.axpby.unchecked(") == 3
    assert "func.func private @samples.axpby.unchecked(tensor<?xf32>, tensor<?xf32>, f32, f32) -> tensor<?xf32>" in text
    # Outputs feed the next call; the constant 0.5 is written as its f32 bits, once.
    assert "@samples.axpby.unchecked(%r.0, %y, %alpha, %c.0)" in text and "@samples.axpby.unchecked(%r.1, %y, %alpha, %c.0)" in text
    assert text.count("arith.constant 0x3F000000 : f32") == 1
    assert re.search(r"func.func @chain\(%x: tensor<\?xf32>, %y: tensor<\?xf32>, %alpha: f32\) -> tensor<\?xf32> attributes", text)


def test_scalar_constants_use_the_function_argument_types(tmp_path):
    """double travels as its bits in an i64, __half as its 16 bits in an i32, integers as
    themselves: the conversions of contract.scalar_argument."""
    from ..support.artifacts.abi import abi_module

    echo = next(k for k in abi_module().kernels if k.name == "echo_scalars")
    p = Program("echo")
    values = dict(b=True, i8=-5, u8=200, i16=-300, u16=60000, i32=-70000, u32=4000000000, i64=-(2**40), u64=2**63 + 1, sz=7,
                  f32=0.1, f64=0.1, f16=1.5, bf16=-2.0, tail=3)
    outs = p.call(echo, **{s.name: values[s.name] for s in echo.scalar_args})
    p.output(*outs)
    text = p.mlir(abi_module())
    assert f"arith.constant {int(np.array(0.1, np.float64).view(np.int64))} : i64" in text  # f64 bits
    assert f"arith.constant {int(np.array(1.5, np.float16).view(np.uint16))} : i32" in text  # f16 bits
    assert "arith.constant 0x3DCCCCCD : f32" in text  # float(0.1) rounded to f32
    assert f"arith.constant {4000000000 - 2**32} : i32" in text  # unsigned: the same 32 bits
    assert f"arith.constant {2**63 + 1 - 2**64} : i64" in text


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda p, k, x, i: p.call(k, x, i, 1.0, 0.5), TypeError, r"program bad: call 0 to axpby: argument 'y' must have element type f32, but input 'i' has i32"),
        (lambda p, k, x, i: p.call(k, x, p.input("m2", "f32", ["n", 4]), 1.0, 0.5), ValueError, r"argument 'y' must have rank 1"),
        (lambda p, k, x, i: p.call(k, x, p.input("z", "f32", ["m"]), 1.0, 0.5), ValueError, r"argument 'y' dim 0 is 'm', but n = 'n' \(from input 'x' dim 0\)"),
        (lambda p, k, x, i: p.call(k, x, x, 1.0), TypeError, r"axpby missing 1 argument\(s\): beta"),
        (lambda p, k, x, i: p.call(k, x, x, 1.0, 0.5, 2.0), TypeError, r"axpby takes 4 arguments"),
        (lambda p, k, x, i: p.call(k, x, x, 1.0, beta=0.5, gamma=1), TypeError, r"unexpected keyword argument 'gamma'"),
        (lambda p, k, x, i: p.call(k, x, x, "1", 0.5), TypeError, r"argument 'alpha' \(float\) must be a number, got str"),
        (lambda p, k, x, i: p.call(k, x, x, x, 0.5), TypeError, r"argument 'alpha' is a scalar \(float\), got input 'x'"),
        (lambda p, k, x, i: p.call(k, x, np.ones(4, np.float32), 1.0, 0.5), TypeError, r"argument 'y' must be a tensor of this program"),
        (lambda p, k, x, i: p.call(k, x, x, p.scalar("a", "double"), 0.5), TypeError, r"argument 'alpha' is a float, but scalar 'a' is a double"),
        (lambda p, k, x, i: p.call(k, x, Program("other").input("x", "f32", ["n"]), 1.0, 0.5), ValueError, r"of program other, not of this program"),
        (lambda p, k, x, i: p.input("x", "f32", ["n"]), ValueError, r"already an argument named 'x'"),
        (lambda p, k, x, i: p.input("w", "f32", ["n + 1"]), ValueError, r"dims must be names or non-negative integers"),
        (lambda p, k, x, i: p.input("w", "complex64", ["n"]), TypeError, r"unknown element type"),
        (lambda p, k, x, i: p.scalar("s", "float*"), TypeError, r"scalar 's' has type 'float\*'"),
    ],
)
def test_bad_calls_raise_naming_kernel_and_parameter(samples, call, error, message):
    p = Program("bad")
    x, i = p.input("x", "f32", ["n"]), p.input("i", np.int32, ["n"])
    with pytest.raises(error, match=message):
        call(p, kernel(samples, "axpby"), x, i)


def test_scalar_out_of_range_and_static_dims(tmp_path, cu):
    source = cu(
        'extern "C" __global__ void fill(int* __restrict__ out, short value, int n) { int i = threadIdx.x; if (i < n) out[i] = value; }\n'
        'extern "C" __global__ void four(const float* __restrict__ a, float* __restrict__ out) { out[threadIdx.x] = a[threadIdx.x]; }\n'
    )
    fill = KernelSpec.declare(source, "fill", block=32, grid="ceildiv(n, 32)", shape=["n"])
    four = KernelSpec.declare(source, "four", block=4, grid=1, shape=[4])
    p = Program("bad")
    with pytest.raises(ValueError, match=r"program bad: call 0 to fill\(\): argument 'value' \(short\) = 40000 is out of range \[-32768, 32767\]"):
        p.call(fill, 40000, 8)
    x = p.input("x", "f32", ["n"])
    with pytest.raises(ValueError, match=r"program bad: call 0 to four: argument 'a' dim 0 must be 4, but input 'x' has size 'n' there"):
        p.call(four, x)
    # Known sizes flow through: an output sized by a constant argument is static.
    out = p.call(fill, 7, 8)
    assert out.shape == (8,) and out.type == "tensor<8xi32>"


def test_build_needs_outputs_and_the_kernels_module(samples, cu):
    p = Program("empty")
    with pytest.raises(ValueError, match="no outputs"):
        p.mlir(samples)
    other = KernelSpec.declare(cu('extern "C" __global__ void k(float* out, int n) {}\n'), "k", block=1, grid=1, shape=["n"])
    p = Program("foreign")
    p.output(p.call(other, 3))
    with pytest.raises(ValueError, match=r"calls kernel k \(function 'k'\), which module samples does not have"):
        p.mlir(samples)
    with pytest.raises(ValueError, match="program name 'a-b' must be an identifier"):
        Program("a-b")


def compile_to(phase: str, mlir: Path, spec: ModuleSpec) -> str:
    from iree.compiler.tools.binaries import find_tool

    from iree_dispatch.backend.compile import compile_flags

    return subprocess.run(
        [find_tool("iree-compile"), *compile_flags(spec.archs[-1], Path(".")), f"--compile-to={phase}", mlir.name, "-o", "-"],
        capture_output=True, text=True, cwd=mlir.parent, check=True,
    ).stdout


def vm_calls(vm_text: str, op: str) -> int:
    return len(re.findall(rf"vm\.call(?:\.variadic)? @hal\.{re.escape(op)}\(", vm_text))


@needs_build_tools
def test_k_calls_build_into_k_dispatches(samples, tmp_path):
    """The linked program holds K calls, and IREE turns them into K dispatches of one function."""
    k = 5
    result = chain(samples, k).build(samples, tmp_path / "chain.vmfb", emit_mlir=tmp_path / "chain.mlir")
    assert result.vmfb.is_file() and (tmp_path / "chain.program.mlir").is_file()
    assert len(re.findall(r"= (?:func\.)?call @samples\.axpby\.unchecked\(", result.mlir.read_text())) == k
    assert compile_to("flow", result.mlir, samples).count("flow.dispatch {") == k
    instance = runtime.rt.VmInstance()
    described = runtime.loading.descriptions_of(runtime.rt.VmModule.mmap(instance, str(result.vmfb)), result.vmfb)["chain"]
    assert isinstance(described, ProgramDescription) and described.calls == k
    assert [t.name for t in described.inputs] == ["x", "y"] and described.scalars[0].name == "alpha"


@needs_build_tools
def test_k_call_program_checks_once_at_entry_and_records_one_command_buffer(samples, tmp_path):
    """As built (checks on), a 100-call chain checks its inputs once, before the first dispatch,
    and IREE records the 100 dispatches into one command buffer with one submission. (With an
    assert in every call, IREE 3.13 cut it into 100 command buffers: docs/benchmarks.md.)"""
    k = 100
    p = chain(samples, k)
    result = p.build(samples, tmp_path / "chain.vmfb", emit_mlir=tmp_path / "chain.mlir")
    body = result.mlir.read_text().split("func.func @chain(", 1)[1].split("\n  }", 1)[0]
    first_call = body.index("call @samples.axpby.unchecked(")
    asserts = [m.start() for m in re.finditer(r"cf\.assert ", body)]
    # y's size equals x's (both "n"); n fits axpby's `int n`: each once, whatever K.
    assert len(asserts) == 2 and all(a < first_call for a in asserts)
    assert "input 'y' dim 0 must equal n (the size of input 'x' dim 0)" in body
    assert p.entry_checks() == ["n <= 2147483647: program chain: call 0 to axpby: scalar n exceeds the range of int (2147483647)"]
    # The unchecked functions the program calls have no asserts of their own.
    unchecked = re.search(r"func\.func private @samples\.axpby\.unchecked\(.*?\n  \}", result.mlir.read_text(), re.S)
    assert unchecked and "cf.assert" not in unchecked.group(0)
    vm = compile_to("vm", result.mlir, samples)
    assert vm_calls(vm, "command_buffer.dispatch") == k
    assert vm_calls(vm, "command_buffer.create") == 1 and vm_calls(vm, "device.queue.execute") == 1


FLATTEN_CU = (
    'extern "C" __global__ void flatten(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {}\n'
    'extern "C" __global__ void mul(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out, int n) {}\n'
    'extern "C" __global__ void head(const float* __restrict__ a, float* __restrict__ out, int n, int keep) {}\n'
    'extern "C" __global__ void fill(int* __restrict__ out, short value, int n) {}\n'
)


@pytest.fixture
def relations(cu):
    """Kernels whose sizes relate through expressions: flatten [rows, cols] → [rows * cols],
    mul (all [n]), head [n] → [n - keep]."""
    source = cu(FLATTEN_CU)
    flatten = KernelSpec.declare(source, "flatten", block=64, grid="ceildiv(rows * cols, 64)", shapes={"in": ["rows", "cols"], "out": ["rows * cols"]})
    mul = KernelSpec.declare(source, "mul", block=64, grid="ceildiv(n, 64)", shape=["n"])
    head = KernelSpec.declare(source, "head", block=64, grid="ceildiv(n, 64)", shapes={"a": ["n"], "out": ["n - keep"]})
    fill = KernelSpec.declare(source, "fill", block=32, grid="ceildiv(n, 32)", shape=["n"])
    return flatten, mul, head, fill


def test_relations_between_sizes_are_checked_at_entry_and_before_launch(relations):
    """flatten(m) * y needs rows * cols == n: unknown until the program runs, so it is checked
    once at entry (IR) and by runtime.load's Python checks before anything is launched."""
    flatten, mul, head, _ = relations
    p = Program("rel")
    m, y = p.input("m", "f32", ["rows", "cols"]), p.input("y", "f32", ["n"])
    keep = p.scalar("keep", "int")
    flat = p.call(flatten, m)
    assert flat.shape == (None,) and str(flat.dims[0]) == "(rows * cols)"
    product = p.call(mul, flat, y)
    again = p.call(mul, product, flat)  # the same relation again: checked once
    p.output(p.call(head, again, keep))
    module = ModuleSpec("rel", relations, (parse_arch("sm_90"),))
    text = p.mlir(module)
    body = text.split("func.func @rel(", 1)[1]
    first_call = body.index("func.call @rel.flatten.unchecked(")
    messages = re.findall(r'cf\.assert %[\w.]+, "([^"]*)"', body)
    assert all(m.start() < first_call for m in re.finditer(r"cf\.assert ", body))
    assert "program rel: call 1 to mul: argument 'b' dim 0 (input 'y' dim 0) must equal n (from result 'out' of call 0 to flatten dim 0)" in messages
    assert "program rel: call 3 to head: output out dim 0 = (n - keep) is negative" in messages
    assert sum("must equal" in msg for msg in messages) == 1
    description = p.describe(["sm_90"])
    assert [(c.op, c.lhs, c.rhs) for c in description.checks if c.op == "eq"] == [("eq", "n", "(rows * cols)")]

    # runtime.KernelFunction checks the same relations in Python, before invoking anything.
    launched = []
    fn = runtime.KernelFunction(description, lambda *args: launched.append(args), None)
    with pytest.raises(ValueError, match=r"rel\(\): program rel: call 1 to mul: argument 'b' dim 0 .* must equal n .*; n = 7, but \(rows \* cols\) = 6"):
        fn(np.ones((2, 3), np.float32), np.ones(7, np.float32), 1)
    with pytest.raises(ValueError, match=r"output out dim 0 = \(n - keep\) is negative; \(\(rows \* cols\) - keep\) = -1"):
        fn(np.ones((2, 3), np.float32), np.ones(6, np.float32), 7)
    assert not launched
    fn(np.ones((2, 3), np.float32), np.ones(6, np.float32), 2)
    assert len(launched) == 1


def test_relations_that_cannot_hold_are_refused_when_built(relations):
    flatten, mul, head, fill = relations
    p = Program("bad")
    flat = p.call(flatten, p.input("m", "f32", [2, 3]))
    assert flat.shape == (6,) and flat.type == "tensor<6xf32>"
    with pytest.raises(ValueError, match=r"program bad: call 1 to mul: argument 'b' dim 0 is 5, but n = 6 \(from result 'out' of call 0 to flatten dim 0\)"):
        p.call(mul, flat, p.input("y", "f32", [5]))
    with pytest.raises(ValueError, match=r"program bad: call 1 to head: output 'out' dim 0 = \(n - keep\) is -1 with this call's sizes; sizes can't be negative"):
        p.call(head, flat, 7)
    assert p._calls == 1 and not p._checks  # refused calls leave nothing behind
    with pytest.raises(ValueError, match=r"scalar 'n' has the name of a size \(input 'm2' dim 0\)"):
        p.input("m2", "f32", ["n"]) and p.scalar("n", "int")
    # A program scalar of a narrow type is checked at entry (iree-run-module passes any i32).
    p = Program("narrow")
    p.output(p.call(fill, p.scalar("value", "short"), 8))
    body = p.mlir(ModuleSpec("rel", relations, (parse_arch("sm_90"),))).split("func.func @narrow(", 1)[1]
    assert body.index('"program narrow: scalar value exceeds the range of short (32767)"') < body.index("func.call @rel.fill.unchecked(")


def test_with_outputs_in_place_takes_the_output_as_an_argument(samples, cu):
    mul = kernel(samples, "simple_mul")
    out = mul.with_outputs_in_place(function="simple_mul_out")
    assert out.function == "simple_mul_out" and [t.name for t in out.inputs] == ["lhs", "rhs", "out"]
    assert [(t.name, t.role) for t in out.outputs] == [("out", "inplace")]
    assert out.block == mul.block and out.grid == mul.grid
    # Scalar expressions and readonly pointers are kept; a size argument becomes the buffer's size.
    source = cu(
        'extern "C" __global__ void k(float* __restrict__ table, float* __restrict__ out, int rows, int cols, int total) {}\n'
        'extern "C" __global__ void iota(long long* __restrict__ out, unsigned long n) {}\n'
    )
    k = KernelSpec.declare(source, "k", block=1, grid="rows", shapes={"table": ["rows", "cols"], "out": ["rows"]},
                           scalars={"total": "rows * cols"}, readonly=["table"])
    moved = k.with_outputs_in_place()
    assert [(t.name, t.role) for t in moved.tensors] == [("table", "input"), ("out", "inplace")]
    assert str(next(s for s in moved.scalars if s.name == "total").value) == "(rows * cols)"
    iota = KernelSpec.declare(source, "iota", block=1, grid="n", shape=["n"])
    assert [s.name for s in iota.scalar_args] == ["n"] and not iota.with_outputs_in_place().scalar_args
    expr_out = KernelSpec.declare(source, "k", block=1, grid="rows", shapes={"table": ["rows", "cols"], "out": ["rows * cols"]})
    with pytest.raises(SpecError, match=r"kernel k: output 'out' dim 0 is \(rows \* cols\); a caller-provided output needs dims"):
        expr_out.with_outputs_in_place()


def test_driver_flags_default_and_override(monkeypatch):
    monkeypatch.delenv(runtime.DRIVER_FLAGS_ENV, raising=False)
    assert runtime.driver_flags() == runtime.DEFAULT_DRIVER_FLAGS == ("--cuda_async_allocations=false",)
    monkeypatch.setenv(runtime.DRIVER_FLAGS_ENV, "--cuda_async_allocations=true --cuda_use_streams=false")
    assert runtime.driver_flags() == ("--cuda_async_allocations=true", "--cuda_use_streams=false")
    monkeypatch.setenv(runtime.DRIVER_FLAGS_ENV, "")
    assert runtime.driver_flags() == ()
    # Every flag is one IREE's runtime knows (an unknown flag fails to parse).
    runtime.rt.flags.parse_flags(*runtime.DEFAULT_DRIVER_FLAGS)
    with pytest.raises(ValueError, match="not recognized"):
        runtime.rt.flags.parse_flags("--cuda_no_such_flag=1")


# --------------------------------------------------------------------------------------------
# the asynchronous (coarse-fences) call path, on the CPU

SHIFT = """
func.func @shift(%x: tensor<?xf32>, %a: f32) -> tensor<?xf32> attributes {iree.reflection = {REFLECTION}} {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?xf32>
  %e = tensor.empty(%n) : tensor<?xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%x : tensor<?xf32>) outs(%e : tensor<?xf32>) {
  ^bb0(%in: f32, %out: f32):
    %v = arith.addf %in, %a : f32
    linalg.yield %v : f32
  } -> tensor<?xf32>
  return %r : tensor<?xf32>
}
"""
# A kernel description without a launch plan: the runtime checks the calls and invokes through IREE.
SHIFT_DESCRIPTION = KernelDescription(
    name="shift", function="shift", source="shift.mlir", block=(1, 1, 1), grid=("1", "1", "1"),
    inputs=(TensorDescription("x", "f32", ("n",)),),
    scalars=(ScalarDescription("a", "float", "float", 4),),
    outputs=(TensorDescription("out", "f32", ("n",)),),
)


@pytest.fixture(scope="module")
def cpu_modules(tmp_path_factory):
    pytest.importorskip("iree.compiler")
    from iree.compiler.tools.binaries import find_tool

    folder = tmp_path_factory.mktemp("async-cpu")
    reflection = f"{REFLECTION_KEY} = " + '"' + encode(SHIFT_DESCRIPTION).replace('"', '\\"') + '"'
    (folder / "shift.mlir").write_text(SHIFT.replace("REFLECTION", reflection))
    paths = {}
    for model in ("async-external", "async-internal"):
        paths[model] = folder / f"shift_{model}.vmfb"
        subprocess.run([find_tool("iree-compile"), "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                        "--iree-llvmcpu-target-cpu=generic", f"--iree-execution-model={model}", "shift.mlir", "-o", paths[model].name],
                       cwd=folder, check=True, capture_output=True)
    return paths


@pytest.fixture
def on_cpu(monkeypatch):
    """runtime.load on IREE's CPU device instead of CUDA."""
    cpu = runtime.Device(0, runtime.rt.get_device("local-task"), pooled=False, in_order=False, cuda=False)
    monkeypatch.setattr(runtime.devices, "device", lambda uri="cuda": cpu)


def test_async_calls_return_pending_results_that_wait_when_read(cpu_modules, on_cpu):
    module = runtime.load(cpu_modules["async-external"], asynchronous=True)
    x = np.arange(1000, dtype=np.float32)
    r = module.shift(x, 1.0)
    assert isinstance(r, runtime.AsyncArray) and r.shape == (1000,) and r.dtype == np.float32
    chained = r
    for _ in range(20):  # each call is queued behind the previous one: no wait in between
        chained = module.shift(chained, 0.5)
    np.testing.assert_array_equal(np.asarray(chained), x + 11)
    assert chained.done and r.done
    np.testing.assert_array_equal(r.to_host(), x + 1)
    module.wait()
    assert module.timeline.value == 21
    # The same checks as a synchronous call, before anything is queued.
    with pytest.raises(TypeError, match=r"shift\(\): argument 'x' must have dtype float32"):
        module.shift(x.astype(np.float64), 1.0)
    assert module.timeline.value == 21


def test_calls_in_flight_are_bounded(cpu_modules, on_cpu):
    module = runtime.load(cpu_modules["async-external"], asynchronous=True, max_in_flight=2)
    r = module.shift(np.zeros(100, np.float32), 1.0)
    for _ in range(9):
        r = module.shift(r, 1.0)
        assert module.timeline.value - module.timeline.semaphore.query() <= 2 and len(module.timeline._pending) <= 2
    np.testing.assert_array_equal(r.to_host(), np.full(100, 10, np.float32))


def test_async_module_loaded_synchronously_waits(cpu_modules, on_cpu):
    module = runtime.load(cpu_modules["async-external"])
    got = module.shift(np.ones(5, np.float32), 2.0)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, np.full(5, 3, np.float32))
    # An AsyncArray from another module is waited for (its fence joins the wait fence).
    other = runtime.load(cpu_modules["async-external"], asynchronous=True)
    pending = other.shift(np.ones(5, np.float32), 1.0)
    np.testing.assert_array_equal(module.shift(pending, 1.0).to_host(), np.full(5, 3, np.float32))


def test_asynchronous_needs_an_async_build(cpu_modules, on_cpu):
    with pytest.raises(ValueError, match=r"function shift is synchronous .* --iree-execution-model=async-external"):
        runtime.load(cpu_modules["async-internal"], asynchronous=True)
    # Synchronous modules accept AsyncArrays too: they wait for them first.
    sync = runtime.load(cpu_modules["async-internal"])
    pending = runtime.load(cpu_modules["async-external"], asynchronous=True).shift(np.zeros(3, np.float32), 1.0)
    np.testing.assert_array_equal(sync.shift(pending, 1.0), np.full(3, 2, np.float32))


def test_relations_a_kernel_requires_are_checked_by_programs(cu):
    """A kernel's `requires` in a program: decided when the call is made where its sizes are
    static, else checked once at the program's entry (IR) and by the Python checks before launch."""
    source = cu('extern "C" __global__ void group(const float* q, const float* k, float* out) {}\n')
    group = KernelSpec.declare(source, "group", block=64, grid="Hq", shapes={"q": ["Hq"], "k": ["Hkv"], "out": ["Hq"]}, requires=["Hq % Hkv == 0"])
    module = ModuleSpec("g", (group,), (parse_arch("sm_90"),))
    p = Program("bad")
    q = p.input("q", "f32", [6])
    with pytest.raises(ValueError, match=r"program bad: call 0 to group: requires Hq % Hkv == 0, but Hq = 6, Hkv = 4"):
        p.call(group, q, p.input("k", "f32", [4]))
    assert p._calls == 0 and not p._requires  # a refused call leaves nothing behind
    p.call(group, q, p.input("k3", "f32", [3]))  # static and holds: nothing left to check
    assert not p._requires

    p = Program("dyn")
    p.output(p.call(group, p.input("q", "f32", ["h"]), p.input("k", "f32", ["g"])))
    assert p.entry_checks()[-1] == "(h % g) == 0: program dyn: call 0 to group: requires Hq % Hkv == 0"
    body = p.mlir(module).split("func.func @dyn(", 1)[1]
    assert body.index('"program dyn: call 0 to group: requires Hq % Hkv == 0"') < body.index("func.call @g.group.unchecked(")
    assert '"program dyn: call 0 to group: requires Hq % Hkv == 0 divides by Hkv, which is 0 for these sizes"' in body
    launched = []
    fn = runtime.KernelFunction(p.describe(["sm_90"]), lambda *args: launched.append(args), None)
    with pytest.raises(ValueError, match=r"dyn\(\): program dyn: call 0 to group: requires Hq % Hkv == 0, but h = 6, g = 4"):
        fn(np.ones(6, np.float32), np.ones(4, np.float32))
    assert not launched
    fn(np.ones(6, np.float32), np.ones(3, np.float32))
    assert len(launched) == 1
