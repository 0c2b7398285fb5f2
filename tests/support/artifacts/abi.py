"""Declarations of the ABI test kernels (tests/kernels/abi.cu), shared by CPU and GPU tests."""

from __future__ import annotations

from pathlib import Path

from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

ABI_CU = Path(__file__).resolve().parents[3] / "tests" / "kernels" / "abi.cu"
CXX_CU = Path(__file__).resolve().parents[3] / "tests" / "kernels" / "cxx.cu"
ELEMENT_TYPES = ("f16", "bf16", "f32", "f64", "bool", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")


def abi_module() -> ModuleSpec:
    echo = KernelSpec.declare(ABI_CU, "echo_scalars", block=1, grid=1, shapes={"ints": [6], "uints": [5], "reals": [4]})
    reverse = [
        KernelSpec.declare(ABI_CU, f"reverse_{t}", block=128, grid="ceildiv(n, 128)", shape=["n"]) for t in ELEMENT_TYPES
    ]
    iota = KernelSpec.declare(ABI_CU, "iota_sized", block=256, grid="ceildiv(n, 256)", shape=["n"])
    return ModuleSpec("abi", (echo, *reverse, iota))


def cxx_module() -> ModuleSpec:
    scale = [KernelSpec.declare(CXX_CU, f"scale<{t}>", block=256, grid="ceildiv(n, 256)", shape=["n"]) for t in ("float", "double")]
    row_sum = KernelSpec.declare(
        CXX_CU, "row_sum", block=256, grid="rows", shapes={"in": ["rows", "cols"], "out": ["rows"]}, shared_memory="block_x * 4"
    )
    index3d = KernelSpec.declare(
        CXX_CU, "index3d", block=[8, 8, 4], grid=["ceildiv(nx, 8)", "ceildiv(ny, 8)", "ceildiv(nz, 4)"], shape=["nz", "ny", "nx"]
    )
    return ModuleSpec("cxx", (*scale, row_sum, index3d))
