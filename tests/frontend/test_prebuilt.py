"""Prebuilt objects (.ptx, .cubin, .fatbin) as kernel sources: what is read from each file
(arch, parameter sizes), the variants they make, the ABI checks and errors, and builds from
the Python API and a TOML spec through the CLI."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from iree_dispatch.backend.pipeline import build
from iree_dispatch.cli import main
from iree_dispatch.core.errors import AbiError, SpecError
from iree_dispatch.frontend.prebuilt import cubin_kernels, read_object
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

from ..support.artifacts.prebuilt import AXPBY, SIMPLE_MUL
from ..support.environment import ROOT, needs_build_tools

pytestmark = needs_build_tools
SIMPLE_MUL_CU = ROOT / "kernels" / "simple_mul.cu"


def nvcc(tmp_path: Path, name: str, *flags: str, source: Path = SIMPLE_MUL_CU) -> Path:
    from iree_dispatch.toolchains import find_nvcc

    out = tmp_path / name
    subprocess.run([str(find_nvcc()), "-O3", *flags, str(source), "-o", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def objs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("objects")
    return {
        "ptx80": nvcc(d, "sm.sm_80.ptx", "-ptx", "-arch=sm_80"),
        "cubin90": nvcc(d, "sm.sm_90.cubin", "-cubin", "-arch=sm_90"),
        "cubin90a": nvcc(d, "sm.sm_90a.cubin", "-cubin", "-arch=sm_90a"),
        "cubin80": nvcc(d, "sm.sm_80.cubin", "-cubin", "-arch=sm_80"),
        "cubin86": nvcc(d, "sm.sm_86.cubin", "-cubin", "-arch=sm_86"),
        "cubin100": nvcc(d, "sm.sm_100.cubin", "-cubin", "-arch=sm_100"),
        "fatbin": nvcc(d, "sm.fatbin", "-fatbin", "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=[sm_90,compute_90]"),
    }


@pytest.mark.parametrize("key, arch", [("cubin90", "sm_90"), ("cubin90a", "sm_90a"), ("cubin80", "sm_80"), ("cubin86", "sm_86"), ("cubin100", "sm_100"), ("ptx80", "sm_80")])
def test_arch_is_read_from_the_file(objs, key, arch):
    obj = read_object(objs[key])
    assert [i.arch.name for i in obj.images] == [arch]


def test_cubin_parameter_sizes_come_from_nv_info(objs):
    kernels = cubin_kernels(objs["cubin90"].read_bytes(), objs["cubin90"])
    assert {n: k.params for n, k in kernels.items()} == {"simple_mul": (8, 8, 8, 4), "simple_mul_inplace": (8, 8, 4)}
    assert kernels["simple_mul"].max_threads is None and kernels["simple_mul"].required_threads is None


def test_cubin_launch_bounds_are_checked(tmp_path):
    axpby = nvcc(tmp_path, "axpby.sm_90.cubin", "-cubin", "-arch=sm_90", source=ROOT / "kernels" / "axpby.cu")
    assert cubin_kernels(axpby.read_bytes(), axpby)["axpby"].max_threads == (256, 1, 1)  # __launch_bounds__(256)
    k = KernelSpec.declare(axpby, "axpby", signature=AXPBY, block=512, grid=1, shape=["n"])
    with pytest.raises(AbiError, match=r"block \[512, 1, 1\] has 512 threads, but axpby.sm_90.cubin \(sm_90 cubin\) allows at most \[256, 1, 1\]"):
        build(ModuleSpec("pre", (k,)), tmp_path / "pre.vmfb", cache=False)


def test_fatbin_images_and_variant(objs):
    obj = read_object(objs["fatbin"])
    assert sorted((i.kind, i.arch.name) for i in obj.images) == [("cubin", "sm_80"), ("cubin", "sm_90"), ("ptx", "sm_90")]
    assert obj.kernel_params()[0][1]["simple_mul"].params == (8, 8, 8, 4)
    v = obj.variant
    assert (v.name, v.target_arch.name) == ("fatbin", "sm_90")
    assert v.runs_on(8, 6) and v.runs_on(9, 0) and v.runs_on(10, 0) and not v.runs_on(7, 5)


def declare(source, signature=SIMPLE_MUL, name="simple_mul", **kw):
    return KernelSpec.declare(source, name, signature=signature, block=64, grid="ceildiv(n, 64)", shape=["n"], **kw)


def test_objects_are_ordered_cubins_first_and_conditioned(objs):
    k = declare([objs["ptx80"], objs["cubin80"], objs["cubin90a"]])
    assert [o.variant.name for o in k.objects] == ["sm_90a_cubin", "sm_80_cubin", "sm_80"]

    def chosen(cc):
        return next((o.variant.name for o in k.objects if o.variant.runs_on(*cc)), None)

    assert [chosen(cc) for cc in ((9, 0), (8, 6), (10, 0), (7, 5))] == ["sm_90a_cubin", "sm_80_cubin", "sm_80", None]


def test_build_emits_one_variant_per_object(objs, tmp_path):
    k = declare([objs["cubin90"], objs["ptx80"]])
    result = build(ModuleSpec("pre", (k,)), tmp_path / "pre.vmfb", emit_mlir=tmp_path / "pre.mlir", cache=False)
    text = result.mlir.read_text()
    variants = re.findall(r"hal\.executable\.variant public @(\w+) target\(#target_(\w+)\) objects\(\[#hal\.executable\.object<\{path = \"([^\"]+)\"", text)
    assert [(v, t) for v, t, _ in variants] == [("sm_90_cubin", "sm_90"), ("sm_80", "sm_80")]
    for _, _, path in variants:
        assert (tmp_path / path).is_file()
    assert (tmp_path / variants[0][2]).read_bytes() == objs["cubin90"].read_bytes()
    assert "@pre_" not in text and result.vmfb.stat().st_size > 0
    assert objs["cubin90"].absolute() in result.dependencies and objs["ptx80"].absolute() in result.dependencies


def test_prebuilt_ptx_with_a_64_bit_scalar_is_adapted(tmp_path):
    ptx = nvcc(tmp_path, "abi.sm_80.ptx", "-ptx", "-arch=sm_80", source=ROOT / "tests" / "kernels" / "abi.cu")
    k = KernelSpec.declare(ptx, "iota_sized", signature="void iota_sized(long long* out, size_t n)", block=128, grid="ceildiv(n, 128)", shape=["n"])
    build(ModuleSpec("pre", (k,)), tmp_path / "pre.vmfb", emit_mlir=tmp_path / "pre.mlir", cache=False)
    adapted = next((tmp_path / "pre.objects").glob("*.ptx")).read_text()
    assert "iota_sized_param_1__lo" in adapted and "iota_sized_param_1__hi" in adapted


def test_machine_code_refuses_scalars_that_are_not_32_bit(objs):
    with pytest.raises(SpecError, match=r"scalar 'n' is a 8-byte long long.*machine code \(sm\.sm_90\.cubin\) can't be: give PTX"):
        declare(objs["cubin90"], "void simple_mul(const float* lhs, const float* rhs, float* out, long long n)")


@pytest.mark.parametrize("key", ["cubin90", "fatbin", "ptx80"])
def test_signature_is_checked_against_the_object(objs, key, tmp_path):
    wrong = declare(objs[key], "void simple_mul(const float* lhs, float* out, int n)")
    with pytest.raises(AbiError, match=r"simple_mul"):
        build(ModuleSpec("pre", (wrong,)), tmp_path / "pre.vmfb", cache=False)
    assert not (tmp_path / "pre.vmfb").exists()


def test_a_kernel_the_object_lacks_is_named(objs, tmp_path):
    k = declare(objs["cubin90"], "void other(const float* x, float* y, int n)", name="other")
    with pytest.raises(AbiError, match=r"has no kernel named 'other' \(kernels: simple_mul, simple_mul_inplace\)"):
        build(ModuleSpec("pre", (k,)), tmp_path / "pre.vmfb", cache=False)


def test_spec_errors(objs, tmp_path):
    with pytest.raises(SpecError, match=r"needs signature = \"void simple_mul\(\.\.\.\)\""):
        KernelSpec.declare(objs["cubin90"], "simple_mul", block=64, grid=1, shape=["n"])
    with pytest.raises(SpecError, match=r"disagrees with the source's parameters \(lhs\*, rhs\*, out\*, n\)"):
        KernelSpec.declare(SIMPLE_MUL_CU, "simple_mul", signature="void simple_mul(const float* lhs, float* out, int n)", block=64, grid=1, shape=["n"])
    with pytest.raises(SpecError, match="both are cubin for sm_90"):
        declare([objs["cubin90"], objs["cubin90"]])
    with pytest.raises(Exception, match="declares 'mul'; the names must match"):
        declare(objs["cubin90"], "void mul(const float* lhs, const float* rhs, float* out, int n)")
    junk = tmp_path / "junk.cubin"
    junk.write_bytes(b"not an elf")
    with pytest.raises(SpecError, match="not a 64-bit ELF file"):
        declare(junk)
    bad = tmp_path / "junk.fatbin"
    bad.write_bytes(b"\0" * 64)
    with pytest.raises(SpecError, match="not a fatbin"):
        declare(bad)


def test_outputs_in_place_keeps_objects_and_signature(objs):
    k = declare([objs["cubin90"], objs["ptx80"]]).with_outputs_in_place()
    assert [o.path for o in k.objects] == [objs["cubin90"], objs["ptx80"]]
    assert [t.role for t in k.tensors] == ["input", "input", "inplace"]


def test_toml_spec_with_prebuilt_objects_builds_with_the_cli(objs, tmp_path, capsys):
    spec = tmp_path / "pre.toml"
    spec.write_text(
        f"""
[module]
name = "pre"

[[kernel]]
name = "simple_mul"
source = ["{objs['cubin90']}", "{objs['ptx80']}"]
signature = "{SIMPLE_MUL}"
block = [64]
grid = ["ceildiv(n, 64)"]
shape = ["n"]

[[kernel]]
name = "simple_mul_inplace"
source = ["{objs['cubin90']}", "{objs['ptx80']}"]
signature = "void simple_mul_inplace(const float* lhs, float* rhs, int n)"
inplace = ["rhs"]
block = [64]
grid = ["ceildiv(n, 64)"]
shape = ["n"]
"""
    )
    out = tmp_path / "pre.vmfb"
    assert main(["build", str(spec), "-o", str(out)]) == 0
    assert main(["inspect", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "kernel simple_mul(lhs: f32[n], rhs: f32[n]) -> (out: f32[n])" in printed
    assert "kernel simple_mul_inplace(lhs: f32[n], rhs: f32[n]) -> (rhs: f32[n] (in place))" in printed
