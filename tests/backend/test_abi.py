"""Kernel ABI on the CPU: scalar packing, PTX entry adaptation (validated by ptxas), checks."""

import shutil
import subprocess

import numpy as np
import pytest

from iree_dispatch.backend.abi import check_adapted, ptx_entries
from iree_dispatch.backend.pipeline import build
from iree_dispatch.backend.ptx_adapt import adapt_entry
from iree_dispatch.core.contract import ScalarDescription, bfloat16_bits, scalar_argument
from iree_dispatch.core.errors import AbiError
from iree_dispatch.frontend.spec import KernelSpec

from ..support.artifacts.abi import abi_module
from ..support.environment import needs_build_tools


def scalar(kind, nbytes, ctype="t"):
    return ScalarDescription("v", ctype, kind, nbytes)


@pytest.mark.parametrize(
    "kind, nbytes, value, packed",
    [
        ("int", 8, -(2**63), -(2**63)),
        ("int", 8, 2**40 + 5, 2**40 + 5),
        ("uint", 8, 2**64 - 1, -1),
        ("uint", 8, 2**63, -(2**63)),
        ("uint", 4, 2**32 - 1, -1),
        ("int", 1, -128, -128),
        ("uint", 2, 65535, 65535),
        ("bool", 1, True, 1),
        ("double", 8, -0.0, -(2**63)),
        ("double", 8, 1.0, 0x3FF0000000000000),
        ("half", 2, 1.5, 0x3E00),
        ("half", 2, float("inf"), 0x7C00),
        ("bf16", 2, 3.140625, 0x4049),
        ("bf16", 2, float("-inf"), 0xFF80),
    ],
)
def test_scalar_values_are_packed_as_the_generated_function_expects(kind, nbytes, value, packed):
    assert scalar_argument("k", scalar(kind, nbytes), value) == packed


@pytest.mark.parametrize(
    "kind, nbytes, value, error",
    [("int", 8, 2**63, "out of range"), ("uint", 8, -1, "out of range"), ("int", 1, 128, "out of range"),
     ("bool", 1, 2, "must be a bool"), ("int", 2, 1.0, "must be an integer"), ("double", 8, "x", "must be a number")],
)
def test_scalar_values_out_of_range(kind, nbytes, value, error):
    with pytest.raises((TypeError, ValueError), match=error):
        scalar_argument("k", scalar(kind, nbytes), value)


def test_bfloat16_rounding_matches_round_to_nearest_even():
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.standard_normal(2000).astype(np.float32) * 1e3, [np.float32(1 + 2**-8), np.float32(1 + 3 * 2**-8)]])
    for v in values:
        bits = int(np.array(v, np.float32).view(np.uint32))
        lower, upper = bits & 0xFFFF0000, (bits & 0xFFFF0000) + 0x10000
        rest = bits & 0xFFFF
        want = upper if rest > 0x8000 or (rest == 0x8000 and (lower >> 16) & 1) else lower
        assert bfloat16_bits(float(v)) == want >> 16
    assert bfloat16_bits(float("nan")) & 0x7FC0 == 0x7FC0


ENTRY = """
.visible .entry k(
\t.param .u64 k_param_0,
\t.param .u64 k_param_1
)
{
\t.reg .b64 %rd<3>;
\tld.param.u64 %rd1, [k_param_0];
\tmov.u64 %rd2, k_param_1;
\tret;
}
"""


def test_a_64_bit_parameter_used_other_than_by_loads_is_refused(cu):
    src = cu('extern "C" __global__ void k(long long* out, long long v) {}')
    spec = KernelSpec.declare(src, "k", block=1, grid=1, shapes={"out": [1]})
    with pytest.raises(AbiError, match="uses 64-bit parameter 'v' in a way iree_dispatch can't split"):
        adapt_entry(ENTRY, spec, "k", "k.cu:1: kernel k")


@needs_build_tools
def test_adapted_ptx_is_valid_and_matches_what_iree_passes(tmp_path):
    spec = abi_module()
    result = build(spec, tmp_path / "abi.vmfb")
    echo = next(k for k in spec.kernels if k.name == "echo_scalars")
    for arch in ("sm_80", "sm_90"):
        ptx = (result.objects_dir / f"abi.{arch}.ptx").read_text()
        sizes = [p.nbytes for p in ptx_entries(ptx)["echo_scalars"].params]
        # 3 pointers; bool,i8,u8,i16,u16 widened; i32,u32; i64,u64,size_t split; float;
        # double split; half, bf16 widened; long long split.
        assert sizes == [8] * 3 + [4] * 5 + [4] * 2 + [4] * 6 + [4] + [4] * 2 + [4] * 2 + [4] * 2
        check_adapted(echo, "echo_scalars", ptx, arch)
        if shutil.which("ptxas"):
            subprocess.run(["ptxas", f"-arch={arch}", str(result.objects_dir / f"abi.{arch}.ptx"), "-o", str(tmp_path / f"{arch}.cubin")], check=True)


@needs_build_tools
def test_f64_tensors_are_not_demoted(tmp_path):
    from iree_dispatch.runtime import read_descriptions

    result = build(abi_module(), tmp_path / "abi.vmfb", emit_mlir=tmp_path / "abi.mlir")
    _, descriptions = read_descriptions(result.vmfb)
    assert descriptions["reverse_f64"].inputs[0].dtype == "f64"
    import iree.runtime as rt

    instance = rt.VmInstance()
    module = rt.VmModule.mmap(instance, str(result.vmfb))
    declaration = module.lookup_function("reverse_f64").reflection["iree.abi.declaration"]
    assert "tensor<?xf64>" in declaration and "f32" not in declaration


@needs_build_tools
def test_layout_declares_every_push_constant_slot(tmp_path):
    """IREE trusts `constants = N` in the layout; 64-bit scalars must count twice."""
    import re

    result = build(abi_module(), tmp_path / "abi.vmfb", emit_mlir=tmp_path / "abi.mlir")
    ir = result.mlir.read_text()
    layout = re.search(r"#layout_echo_scalars = #hal.pipeline.layout<constants = (\d+)", ir)
    dispatch = re.search(r"flow.dispatch \{@abi_cu::@sm_90_cubin::@echo_scalars.*?\) : \(([^)]*)\)", ir)
    assert int(layout[1]) == 20 == dispatch[1].count("i32")
