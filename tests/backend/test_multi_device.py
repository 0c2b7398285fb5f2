"""Programs over several GPUs: the CUDA devices the user's flags name, each kernel call placed on
one of them, the samples built with their devices recorded."""

from __future__ import annotations

import pytest

from iree_dispatch.backend import compile as iree_compile
from iree_dispatch.backend.pipeline import BuildOptions, build
from iree_dispatch.core.archs import parse_arch
from iree_dispatch.core.errors import CompileError, SpecError
from iree_dispatch.frontend.spec_file import load_spec

from ..support.artifacts import multi_device
from ..support.environment import needs_build_tools

TWO = ("--iree-hal-target-device=gpu0=cuda[0]", "--iree-hal-target-device=gpu1=cuda[1]")


@pytest.mark.parametrize("flags, expected", [
    ((), ()),
    (("--iree-hal-target-device=cuda",), (("__device_0", 0),)),
    (("--iree-hal-target-device=cuda[1]",), (("__device_0", 1),)),
    (TWO, (("gpu0", 0), ("gpu1", 1))),
    (("--iree-hal-target-device=b=cuda[1]", "--iree-hal-target-device=a=cuda[0]"), (("b", 1), ("a", 0))),
])
def test_cuda_devices_are_accepted_in_order(flags, expected):
    BuildOptions(iree_compile_flags=flags)
    assert tuple((d.name, d.ordinal) for d in iree_compile.target_devices(flags)) == expected


@pytest.mark.parametrize("flag", ["--iree-hal-target-device=vulkan", "--iree-hal-target-device=a=local[0]", "--iree-hal-target-device=a=cuda,vulkan",
                                  "--iree-hal-target-device=cuda://0", "--iree-hal-target-device"])
def test_other_devices_are_refused(flag):
    with pytest.raises(SpecError, match="can't be given: the executables hold CUDA objects only"):
        BuildOptions(iree_compile_flags=(flag,))


@pytest.mark.parametrize("flags, message", [
    (("--iree-hal-target-device=gpu0=cuda[0]", "--iree-hal-target-device=cuda[1]"), "names each with its ordinal"),
    (("--iree-hal-target-device=gpu0=cuda", "--iree-hal-target-device=gpu1=cuda"), "names each with its ordinal"),
    (("--iree-hal-target-device=gpu=cuda[0]", "--iree-hal-target-device=gpu=cuda[1]"), "device name gpu given twice"),
    (("--iree-hal-target-device=a=cuda[0]", "--iree-hal-target-device=b=cuda[0]"), "device ordinal 0 given twice"),
])
def test_several_devices_need_names_and_ordinals(flags, message):
    with pytest.raises(SpecError, match=message):
        BuildOptions(iree_compile_flags=flags)


def test_named_devices_replace_the_default_one():
    flags = iree_compile.compile_flags(parse_arch("sm_80"), None, extra_flags=TWO)
    assert "--iree-hal-target-device=cuda" not in flags and flags[-2:] == list(TWO)
    assert iree_compile.compile_flags(parse_arch("sm_80"), None)[0] == "--iree-hal-target-device=cuda"


def test_several_devices_need_a_program(tmp_path):
    with pytest.raises(SpecError, match="2 target devices .gpu0, gpu1. but no program"):
        build(load_spec(multi_device.SPECS[0]), tmp_path / "m.vmfb", iree_compile_flags=TWO)


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    return multi_device.build_all(tmp_path_factory.mktemp("multi_device"))


@needs_build_tools
@pytest.mark.parametrize("name", sorted(multi_device.PROGRAMS))
def test_samples_build_for_two_devices(samples, name):
    from iree_dispatch.runtime.multi_device import program_devices, rt

    module = rt.VmModule.mmap(rt.VmInstance(), str(samples[name]))
    assert program_devices(module) == multi_device.DEVICE_NAMES
    linked = samples[name].with_suffix(".mlir").read_text()
    for device in multi_device.DEVICE_NAMES:  # each device runs its own copy of the kernels' functions
        assert f"@gemm_f32.gemm_f32.on_{device}(" in linked
        assert f"stream.affinity = #hal.device.affinity<@{device}>" in linked


def _program(tmp_path, call_attributes: str):
    program = tmp_path / "p.mlir"
    program.write_text(f"""
module @p {{
  func.func private @library.bias_gelu_f32(tensor<?x?xf32>, tensor<?xf32>) -> tensor<?x?xf32>
  func.func @f(%x: tensor<?x?xf32>, %b: tensor<?xf32>) -> tensor<?x?xf32> {{
    %y = func.call @library.bias_gelu_f32(%x, %b) {call_attributes} : (tensor<?x?xf32>, tensor<?xf32>) -> tensor<?x?xf32>
    return %y : tensor<?x?xf32>
  }}
}}
""")
    return program


@needs_build_tools
@pytest.mark.parametrize("attributes, message", [
    ("", "the call of @library.bias_gelu_f32 names no device; in a program on devices gpu0, gpu1 each kernel call says where it runs"),
    ("{stream.affinity = #hal.device.affinity<@gpu7>}", "is placed on #hal.device.affinity<@gpu7>, which is none of the program's devices .gpu0, gpu1."),
])
def test_a_kernel_call_must_name_a_device_of_the_program(tmp_path, attributes, message):
    with pytest.raises(CompileError, match=message):
        build(load_spec(multi_device.SPECS[1]), tmp_path / "p.vmfb", program=_program(tmp_path, attributes), iree_compile_flags=TWO)
    assert not (tmp_path / "p.vmfb").exists()
