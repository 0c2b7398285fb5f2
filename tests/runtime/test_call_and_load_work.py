"""What a load and a call do once that they used to do twice: a module's vmfb is mapped once
(its devices, its descriptions and its context from one mapping), and a kernel whose shared
memory depends on sizes evaluates that size once per checked call (checked against its bound,
then launched with). On IREE's CPU device; the launch is a stand-in that records what it got."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime
from iree_dispatch.core.contract import KernelDescription
from iree_dispatch.frontend.spec import KernelSpec
from iree_dispatch.runtime import loading
from iree_dispatch.runtime.invocation import KernelFunction

from ..support.cpu_programs import compile_for_cpu

PROGRAM = """
func.func public @scaled(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %s = arith.mulf %x, %y : tensor<4xf32>
  return %s : tensor<4xf32>
}
"""
MUL = 'extern "C" __global__ void mul(const float* a, const float* b, float* out, int n) {}\n'


@pytest.fixture(scope="module")
def vmfb(tmp_path_factory):
    return compile_for_cpu(tmp_path_factory.mktemp("once"), PROGRAM)


def test_a_module_maps_its_vmfb_once(vmfb, monkeypatch):
    cpu = runtime.Device(0, runtime.rt.get_device("local-task"), pooled=False, in_order=False, cuda=False)
    monkeypatch.setattr(loading._devices, "device", lambda uri=None: cpu)
    mapped = []
    mmap = runtime.rt.VmModule.mmap

    def counted(instance, path, *rest):
        mapped.append(path)
        return mmap(instance, path, *rest)

    monkeypatch.setattr(runtime.rt.VmModule, "mmap", staticmethod(counted))
    module = runtime.load(vmfb)
    assert mapped == [str(vmfb)]
    rng = np.random.default_rng()
    x, y = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(np.asarray(module.scaled(x, y)), x * y, rtol=1e-6)  # the context runs what the mapping holds


class _Launch:
    """Stands in for a kernel's DirectLaunch: records the shared memory each call is given."""

    prepared_calls = into_calls = None

    def __init__(self):
        self.given: list[int | None] = []

    def call(self, tensors, scalars, env, args=(), shared_memory=None, host_results=False):
        self.given.append(shared_memory)
        return [np.zeros(env["n"], np.float32)]


def test_a_sized_shared_memory_is_evaluated_once_per_call(cu, monkeypatch):
    kernel = KernelSpec.declare(cu(MUL), "mul", block=[64], grid="ceildiv(n, 64)", shape=["n"], shared_memory={"size": "n * 4", "max": 4096})
    description = kernel.describe()
    evaluations = []
    evaluate = KernelDescription.shared_memory_for_call

    def counted(self, env):
        evaluations.append(dict(env))
        return evaluate(self, env)

    monkeypatch.setattr(KernelDescription, "shared_memory_for_call", counted)
    direct = _Launch()
    mul = KernelFunction(description, invoke=None, device=None, direct=direct)
    rng = np.random.default_rng()
    n = int(rng.integers(1, 1024))
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    mul(a, b)
    assert len(evaluations) == 1 and direct.given == [4 * n]  # checked against the bound, then launched with
    with pytest.raises(ValueError, match=r"mul\(\): shared memory .* = 4100 bytes for n = 1025, beyond its declared max of 4096 bytes"):
        mul(np.zeros(1025, np.float32), np.zeros(1025, np.float32))
    assert direct.given == [4 * n]  # nothing launched beyond the bound
