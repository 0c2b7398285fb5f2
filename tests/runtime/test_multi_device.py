"""A program over several devices loaded with devices=[...], on two of IREE's CPU devices: the
count checked against the program's devices, arguments placed where the program says, results
read back."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime
from iree_dispatch.runtime import loading, multi_device

from ..support.cpu_programs import compile_for_cpu

# Like a linked program of the build: the devices recorded under DEVICES_REFLECTION_KEY.
PROGRAM = """
func.func public @scaled_sum(%x: tensor<4xf32>, %y: tensor<4xf32> {iree.abi.affinity = #hal.device.affinity<@dev_b>})
    -> tensor<4xf32> attributes {iree.reflection = {iree_dispatch.devices = "dev_a,dev_b"}} {
  %y_a = flow.tensor.transfer %y : tensor<4xf32> to #hal.device.affinity<@dev_a>
  %s = arith.addf %x, %y_a : tensor<4xf32>
  %s_b = flow.tensor.transfer %s : tensor<4xf32> to #hal.device.affinity<@dev_b>
  %t = arith.mulf %s_b, %s_b : tensor<4xf32>
  %r = flow.tensor.transfer %t : tensor<4xf32> to #hal.device.affinity<@dev_a>
  return %r : tensor<4xf32>
}
"""


@pytest.fixture(scope="module")
def vmfb(tmp_path_factory):
    devices = ("--iree-hal-target-device=dev_a=local[0]", "--iree-hal-target-device=dev_b=local[1]")
    return compile_for_cpu(tmp_path_factory.mktemp("multi"), PROGRAM, devices=devices)


@pytest.fixture
def cpus(monkeypatch):
    """Two CPU devices where the runtime would take GPUs: "cuda://0" and "cuda://1"."""
    made = {uri: runtime.Device(i, runtime.rt.get_device("local-task"), pooled=False, in_order=False, cuda=False) for i, uri in enumerate(["cuda://0", "cuda://1"])}
    monkeypatch.setattr(loading._devices, "device", lambda uri=None: made[uri or "cuda://0"])
    return made


def test_the_declaration_places_arguments_and_results():
    declaration = ("sync func @f(%input0: tensor<4xf32>, %input1: tensor<4xf32> {iree.abi.affinity = #hal.device.affinity<@b>}) "
                   "-> (%output0: tensor<4xf32> {iree.abi.affinity = #hal.device.promise<@b>}, %output1: tensor<4xf32>)")
    assert multi_device.placements(declaration, ["a", "b"]) == ({1: 1}, {0: 1})


def test_a_program_on_two_devices_runs_on_both(vmfb, cpus):
    module = runtime.load(vmfb, devices=["cuda://0", "cuda://1"])
    assert module.device_names == ("dev_a", "dev_b") and module.gpus == (cpus["cuda://0"], cpus["cuda://1"])
    assert module.scaled_sum.device_of_argument(1) is cpus["cuda://1"]
    rng = np.random.default_rng()
    x, y = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(module.scaled_sum(x, y).to_host(), (x + y) ** 2, rtol=1e-6)
    on_b = module.to_device(y, device=1)  # a device array is passed as it is
    np.testing.assert_allclose(module.scaled_sum(x, on_b).to_host(), (x + y) ** 2, rtol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({"devices": ["cuda://0"]}, r"the program runs on 2 devices \(@dev_a, @dev_b\), but 1 were given; load it with devices=\[...\]"),
    ({}, r"the program runs on 2 devices \(@dev_a, @dev_b\), but 1 were given"),
    ({"devices": ["cuda://0", "cuda://1", "cuda://0"]}, "but 3 were given"),
    ({"devices": "cuda://0"}, "a non-empty list"),
    ({"device": "cuda://0", "devices": ["cuda://0", "cuda://1"]}, "not both"),
])
def test_the_number_of_devices_must_match_the_program(vmfb, cpus, kwargs, message):
    with pytest.raises(ValueError, match=message):
        runtime.load(vmfb, **kwargs)


def test_one_gpu_twice_is_refused(vmfb, cpus, monkeypatch):
    monkeypatch.setattr(loading._devices, "device", lambda uri=None: cpus["cuda://0"])
    with pytest.raises(ValueError, match="name one GPU twice"):
        runtime.load(vmfb, devices=["cuda://0", "cuda"])


def test_a_module_on_one_device_refuses_several(tmp_path):
    with pytest.raises(ValueError, match="this module runs on one device, but 2 were given; load it with device=..."):
        multi_device.check_device_count(tmp_path / "m.vmfb", (), 2)
