"""Direct launches, the parts that need no GPU: the launch plan a build writes into each kernel's
description, the kernel images read back out of the vmfb (the very objects IREE loads), and the
push constants packed as the generated function packs them."""

from __future__ import annotations

import struct
import zipfile

import numpy as np
import pytest

from iree_dispatch.backend.pipeline import build
from iree_dispatch.core.contract import KernelDescription, LaunchPlan, PushConstant, ScalarDescription, TensorDescription, scalar_argument
from iree_dispatch.frontend.spec_file import load_spec
from iree_dispatch.runtime import launch, read_descriptions

from ..support.environment import SAMPLES_SPEC, needs_build_tools


@pytest.fixture(scope="module")
def samples_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("samples")
    return build(load_spec(SAMPLES_SPEC), out / "samples.vmfb")


@needs_build_tools
def test_every_kernel_carries_a_launch_plan(samples_build):
    _, descriptions = read_descriptions(samples_build.vmfb)
    plan = descriptions["axpby"].launch
    assert plan.executable == "axpby_cu" and plan.entry == "axpby" and plan.block == (256, 1, 1)
    assert [v.name for v in plan.variants] == ["sm_90_cubin", "sm_80_cubin", "sm_90"]
    assert plan.variants[0].rules == ((9, 0, "family"),) and plan.variants[2].rules == ((9, 0, "at_least"),)
    assert [v.shared_memory for v in plan.variants] == [0, 0, 0]
    assert plan.bindings == ("x", "y", "out")
    assert [(c.scalar.name, c.value) for c in plan.constants] == [("n", "n"), ("alpha", None), ("beta", None)]
    assert descriptions["simple_mul_inplace"].launch.bindings == ("lhs", "rhs")


@needs_build_tools
def test_images_read_from_the_vmfb_are_the_built_objects(samples_build):
    _, descriptions = read_descriptions(samples_build.vmfb)
    objects = samples_build.objects_dir
    with zipfile.ZipFile(samples_build.vmfb) as archive:
        for function, source in (("simple_mul", "simple_mul"), ("simple_mul_inplace", "simple_mul"), ("axpby", "axpby")):
            d = descriptions[function]
            plan = d.launch
            for variant, file in (("sm_90_cubin", f"{source}.sm_90.cubin"), ("sm_80_cubin", f"{source}.sm_80.cubin"), ("sm_90", f"{source}.sm_90.ptx")):
                export = launch.read_export(archive, plan.executable, variant, plan.entry)
                assert export is not None, (function, variant)
                assert export.image.rstrip(b"\0") == (objects / file).read_bytes().rstrip(b"\0")
                # What the plan says IREE's export declares: the direct launch uses the plan's.
                shared_memory = next(v.shared_memory for v in plan.variants if v.name == variant)
                assert export.block == plan.block == d.block and export.shared_memory == shared_memory == d.shared_memory
                assert export.binding_count == len(plan.bindings)
                assert export.constant_count == len(plan.constants)
            assert launch.read_export(archive, plan.executable, "sm_90_cubin", "no_such_entry") is None
            assert launch.read_export(archive, plan.executable, "sm_75", plan.entry) is None


def _f32_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


SCALARS = [
    ScalarDescription("flag", "bool", "bool", 1),
    ScalarDescription("i8", "int8_t", "int", 1),
    ScalarDescription("u16", "uint16_t", "uint", 2),
    ScalarDescription("i32", "int", "int", 4),
    ScalarDescription("u32", "unsigned", "uint", 4),
    ScalarDescription("i64", "int64_t", "int", 8),
    ScalarDescription("u64", "uint64_t", "uint", 8),
    ScalarDescription("f", "float", "float", 4),
    ScalarDescription("d", "double", "double", 8),
    ScalarDescription("h", "__half", "half", 2),
    ScalarDescription("bf", "__nv_bfloat16", "bf16", 2),
]


def _direct(computed: list[PushConstant]) -> launch.DirectLaunch:
    plan = LaunchPlan(executable="k_cu", entry="k", block=(128, 1, 1), variants=(), bindings=("x", "y"),
                      constants=tuple(PushConstant(s, None) for s in SCALARS) + tuple(computed))
    description = KernelDescription(
        name="k", function="k", source="k.cu", block=(128, 1, 1), grid=("ceildiv(n, 128)", "rows % 3", "1"),
        inputs=(TensorDescription("x", "f32", ("rows", "n")),),
        scalars=tuple(SCALARS),
        outputs=(TensorDescription("y", "f32", ("2 * n",)),),
        launch=plan,
    )
    return launch.DirectLaunch(description, b"", 0, device=None, output_dtypes=[np.dtype(np.float32)])


def test_push_constants_are_packed_as_the_generated_function_packs_them():
    computed = [
        PushConstant(ScalarDescription("n", "int", "int", 4), "n"),
        PushConstant(ScalarDescription("total", "size_t", "uint", 8), "rows * n"),
        PushConstant(ScalarDescription("scale", "float", "float", 4), "n"),
    ]
    direct = _direct(computed)
    raw = [True, -5, 65535, -(2**31), 2**32 - 1, -(2**40) - 3, 2**64 - 1, -1.5, 1e300, 65504.0, 3.140625]
    scalars = [scalar_argument("k", s, v) for s, v in zip(SCALARS, raw)]
    env = {"rows": 3, "n": 2**31 - 1}
    words = direct.constants_for(env, dict(zip([s.name for s in SCALARS], scalars)))
    d_bits = struct.unpack("<Q", struct.pack("<d", 1e300))[0]
    i64 = (-(2**40) - 3) & (2**64 - 1)
    total = 3 * (2**31 - 1)
    assert words == [
        1, 0xFFFFFFFB, 65535, 0x80000000, 0xFFFFFFFF, i64 & 0xFFFFFFFF, i64 >> 32, 0xFFFFFFFF, 0xFFFFFFFF, _f32_bits(-1.5),
        d_bits & 0xFFFFFFFF, d_bits >> 32, 0x7BFF, 0x4049,
        2**31 - 1, total & 0xFFFFFFFF, total >> 32, _f32_bits(float(2**31 - 1)),
    ]
    assert all(0 <= w < 2**32 for w in words)


def test_grid_shapes_and_computed_scalars_are_checked_like_the_generated_function():
    direct = _direct([PushConstant(ScalarDescription("n", "int16_t", "int", 2), "n")])
    assert direct.grid_for({"rows": 4, "n": 1000}) == (8, 1, 1)
    assert direct.shape_of(direct.outputs["y"], {"n": 5}) == (10,)
    scalars = {s.name: 0 for s in SCALARS}
    with pytest.raises(ValueError, match=r"k\(\): scalar n exceeds the range of int16_t"):
        direct.constants_for({"rows": 1, "n": 40000}, scalars)
    with pytest.raises(ValueError, match=r"k\(\): output y dim 0 = \(2 \* n\) is negative"):
        direct.shape_of(direct.outputs["y"], {"n": -1})
    zero = _direct([])
    zero.grid = (zero.grid[0], launch.ex.parse("n // rows", "grid"), zero.grid[2])
    with pytest.raises(ValueError, match=r"k\(\): grid\[1\] = \(n // rows\) divides by zero for these sizes"):
        zero.grid_for({"rows": 0, "n": 4})


def test_launch_mode_comes_from_the_argument_or_the_environment(monkeypatch):
    monkeypatch.delenv(launch.LAUNCH_ENV, raising=False)
    assert launch.launch_mode(None) == "direct"
    assert launch.launch_mode("iree") == "iree"
    monkeypatch.setenv(launch.LAUNCH_ENV, "iree")
    assert launch.launch_mode(None) == "iree"
    with pytest.raises(ValueError, match=r"launch='fast': expected one of direct, iree"):
        launch.launch_mode("fast")
    monkeypatch.setenv(launch.LAUNCH_ENV, "fast")
    with pytest.raises(ValueError, match=r"IREE_DISPATCH_LAUNCH='fast': expected one of direct, iree"):
        launch.launch_mode(None)
