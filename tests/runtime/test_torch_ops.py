"""Kernels as torch custom ops (runtime/torch_ops.py) on the CPU: each op's schema from its
description, kernels a schema can't take left out with the reason, output shapes from the
description's expressions; and, where torch is installed, registration, fake implementations
under symbolic sizes and `torch.compile(fullgraph=True)` tracing (the CUDA implementations run
in test_gpu_torch_ops.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from iree_dispatch.core.contract import KernelDescription, ScalarDescription, TensorDescription
from iree_dispatch.runtime import torch_ops
from iree_dispatch.runtime.invocation import KernelFunction

from ..support.environment import ROOT


def kernel(name: str, inputs: tuple, outputs: tuple, scalars: tuple = ()) -> KernelDescription:
    return KernelDescription(name=name, function=name, source="k.cu", block=(64, 1, 1), grid=("ceildiv(n, 64)", "1", "1"), inputs=inputs, scalars=scalars,
                             outputs=outputs)


def scalar(name: str, ctype: str, kind: str, nbytes: int = 4) -> ScalarDescription:
    return ScalarDescription(name, ctype, kind, nbytes)


MUL = kernel("mul", (TensorDescription("lhs", "f32", ("n",)), TensorDescription("rhs", "f32", ("n",))), (TensorDescription("out", "f32", ("n",)),))
IN_PLACE = kernel("scale", (TensorDescription("x", "f32", ("rows", "cols")), TensorDescription("y", "f16", ("rows", "cols"))),
                  (TensorDescription("y", "f16", ("rows", "cols"), inplace=True), TensorDescription("sums", "f64", ("rows",)),
                   TensorDescription("tiles", "i32", ("ceildiv(cols, 4) * k", "rows + 1"))),
                  (scalar("alpha", "float", "float"), scalar("k", "int", "int"), scalar("flag", "bool", "bool", 1)))
NOTHING_BACK = kernel("fill", (TensorDescription("x", "i64", (8,)),), (TensorDescription("x", "i64", (8,), inplace=True),))
STRUCT = kernel("with_struct", (TensorDescription("x", "f32", ("n",)),), (TensorDescription("y", "f32", ("n",)),), (scalar("p", "Params", "struct", 8),))


def test_schemas_follow_the_descriptions():
    assert torch_ops.schema(MUL) == "mul(Tensor lhs, Tensor rhs) -> Tensor"
    assert torch_ops.schema(IN_PLACE) == "scale(Tensor x, Tensor(a!) y, float alpha, int k, bool flag) -> (Tensor, Tensor)"
    assert torch_ops.schema(NOTHING_BACK) == "fill(Tensor(a!) x) -> ()"


def test_into_schemas_take_each_fresh_output_as_a_mutated_tensor():
    assert torch_ops.into_schema(MUL) == "mul.into(Tensor lhs, Tensor rhs, Tensor(a!) out) -> ()"
    assert torch_ops.into_schema(IN_PLACE) == "scale.into(Tensor x, Tensor(a!) y, Tensor(b!) sums, Tensor(c!) tiles, float alpha, int k, bool flag) -> ()"


def test_kernels_a_schema_cant_take_are_named_with_the_reason():
    assert torch_ops.unsupported(MUL) is None and torch_ops.unsupported(IN_PLACE) is None
    assert torch_ops.unsupported(STRUCT) == "scalar p is a Params (struct), which a torch op schema can't take"


def test_output_shapes_are_the_descriptions_expressions_over_the_inputs_sizes():
    x, y = SimpleNamespace(shape=(3, 10)), SimpleNamespace(shape=(3, 10))
    assert torch_ops.output_shapes(IN_PLACE, (x, y), (0.5, 2, True)) == [(3,), (6, 4)]
    assert torch_ops.output_shapes(MUL, (SimpleNamespace(shape=(17,)),) * 2, ()) == [(17,)]


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture
def ops(torch, request):
    module = SimpleNamespace(functions={d.name: KernelFunction(d, None, None) for d in (MUL, IN_PLACE, NOTHING_BACK, STRUCT)})
    registered = torch_ops.register(module, namespace=f"cpu_{request.node.name[-40:].replace('[', '_').replace(']', '_')}")
    yield registered
    registered.close()


def test_registered_ops_have_the_schemas_and_skip_struct_kernels(ops, torch):
    assert ops.names == ("mul", "scale", "fill")
    assert str(ops.op("scale").default._schema) == f"{ops.namespace}::" + torch_ops.schema(IN_PLACE)
    with pytest.raises(AttributeError, match="kernel with_struct is not a torch op: scalar p is a Params"):
        ops.with_struct  # noqa: B018
    with pytest.raises(AttributeError, match="no torch op 'nope'"):
        ops.nope  # noqa: B018


def test_kernels_with_fresh_outputs_have_an_into_overload(ops, torch):
    assert str(ops.op("scale").into._schema) == f"{ops.namespace}::" + torch_ops.into_schema(IN_PLACE)
    assert str(ops.op("mul").into._schema) == f"{ops.namespace}::" + torch_ops.into_schema(MUL)
    assert str(ops.op("mul").composite._schema) == f"{ops.namespace}::" + torch_ops.schema(MUL, overload="composite")
    assert ops.op("fill").overloads() == ["default"]  # nothing to write into


def test_a_namespace_takes_one_modules_kernels(ops, torch):
    again = SimpleNamespace(functions={"mul": KernelFunction(MUL, None, None)})
    with pytest.raises(ValueError, match=f"torch op {ops.namespace}::mul is registered already"):
        torch_ops.register(again, namespace=ops.namespace)
    with pytest.raises(ValueError, match="namespace 'my-lib'"):
        torch_ops.register(again, namespace="my-lib")


def test_fake_implementations_under_symbolic_sizes(ops, torch):
    from torch.fx.experimental.proxy_tensor import make_fx

    def model(x, y):
        y2, sums, tiles = ops.scale(x, y, 0.5, 3, True)
        return y2, sums, tiles, ops.mul(sums.float(), sums.float())

    graph = make_fx(model, tracing_mode="symbolic")(torch.zeros(5, 9), torch.zeros(5, 9, dtype=torch.float16))
    outputs = [node for node in graph.graph.nodes if node.op == "output"][0].args[0]
    shapes = [tuple(str(d) for d in node.meta["val"].shape) for node in outputs]
    dtypes = [node.meta["val"].dtype for node in outputs]
    rows, cols = shapes[0]
    assert shapes[1] == (rows,) and shapes[3] == (rows,)
    assert shapes[2][1] == f"{rows} + 1" and "3" in shapes[2][0] and cols in shapes[2][0]
    assert dtypes == [torch.float16, torch.float64, torch.int32, torch.float32]


def test_fullgraph_compile_traces_the_ops(ops, torch):
    graphs = []

    def backend(graph, example_inputs):
        graphs.append(graph)
        return lambda *args: (torch.zeros(int(args[0].shape[0])),)

    def model(x, y):
        z = ops.mul(x, y)
        ops.fill(torch.zeros(8, dtype=torch.int64))
        return ops.mul(z, y)

    torch.compile(model, fullgraph=True, backend=backend)(torch.randn(6), torch.randn(6))
    (graph,) = graphs
    called = [str(node.target) for node in graph.graph.nodes if node.op == "call_function"]
    assert called.count(f"{ops.namespace}.mul.default") == 2 and f"{ops.namespace}.fill.default" in called


class _WritesInto:
    """Stands in for a kernel's DirectLaunch whose calls write into given outputs."""

    prepared_calls = into_calls = None
    writes_into = True


def test_compiled_code_calls_the_composite_overload_which_writes_into_outputs_it_allocates(torch):
    """Traced by torch.compile, a kernel launched directly is called through its `composite`
    overload, which torch's tracing takes apart into allocations (shapes from the description's
    expressions, symbolic sizes included) and the `into` overload; a kernel called through
    IREE is called as the functional op."""
    from torch.fx.experimental.proxy_tensor import make_fx

    module = SimpleNamespace(functions={"mul": KernelFunction(MUL, None, None, direct=_WritesInto()), "scale": KernelFunction(IN_PLACE, None, None)})
    ops = torch_ops.register(module, namespace="cpu_compiled_into")
    graphs = []

    def backend(graph, example_inputs):
        graphs.append(graph)
        return lambda *args: (torch.zeros(5), torch.zeros(2, 6, dtype=torch.int32))  # the CPU has no implementation to run

    def model(x, y):
        _, sums, tiles = ops.scale(x, y, 0.5, 3, True)
        return ops.mul(sums.float(), sums.float()), tiles

    try:
        for dynamic in (False, True):
            graphs.clear()
            torch.compile(model, fullgraph=True, backend=backend, dynamic=dynamic)(torch.zeros(5, 9), torch.zeros(5, 9, dtype=torch.float16))
            (graph,) = graphs
            called = [str(node.target) for node in graph.graph.nodes if node.op == "call_function"]
            assert f"{ops.namespace}.mul.composite" in called and f"{ops.namespace}.scale.default" in called, called
        for mode in ("fake", "symbolic"):
            taken_apart = make_fx(lambda x: ops.op("scale").composite(x, x.half(), 0.5, 3, True), tracing_mode=mode)(torch.zeros(5, 9))
            called = [str(node.target) for node in taken_apart.graph.nodes if node.op == "call_function"]
            assert called.count("aten.empty.memory_format") == 2 and f"{ops.namespace}.scale.into" in called, called
    finally:
        ops.close()


def test_a_process_with_registered_ops_exits_quietly(torch):
    """torch's dispatcher keeps what an op's implementation holds past the interpreter's end:
    the kernels are dropped at exit, so nanobind finds no IREE object (the device) alive."""
    script = """
from types import SimpleNamespace
import torch
from iree_dispatch import runtime
from iree_dispatch.runtime import torch_ops
from iree_dispatch.runtime.invocation import KernelFunction
from tests.runtime.test_torch_ops import MUL
device = runtime.Device(0, runtime.rt.get_device("local-task"), pooled=False, in_order=False, cuda=False)
ops = torch_ops.register(SimpleNamespace(functions={"mul": KernelFunction(MUL, None, device)}), namespace="quiet_exit_cpu")
print(ops.names)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ran = subprocess.run([sys.executable, "-W", "ignore:iree_dispatch:RuntimeWarning", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0 and ran.stdout == "('mul',)\n", ran.stderr
    assert ran.stderr == ""
