"""Modules for the prebuilt-object and Triton GPU tests (tests/frontend/test_gpu_prebuilt.py), built on a
CPU machine:
    python -m tests.support.artifacts --only prebuilt build/gpu-tests

The objects are made here with nvcc from kernels in the repository, then declared as prebuilt
kernels (no .cu source, a C signature), one module per object kind: PTX for sm_80 (JIT-compiled
forward on newer GPUs), cubins for sm_90 and sm_80, and fatbins. The Triton modules are built
when triton is importable. Each module has a copy whose outputs are declared in place, so a
test can pass outputs filled with NaN (memory IREE allocates can't be poisoned).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SIMPLE_MUL = "void simple_mul(const float* lhs, const float* rhs, float* out, int n)"
AXPBY = "void axpby(const float* x, const float* y, float* out, int n, float alpha, float beta)"
IOTA_SIZED = "void iota_sized(long long* out, size_t n)"  # a 64-bit scalar: PTX only (adapted)
KINDS = ("ptx", "cubin", "fatbin")
TRITON = ("triton",)


def layout() -> dict[str, str]:
    """name → path under the artifact folder; the Triton modules are built only where triton is
    installed (running them needs no triton)."""
    names = [*KINDS, *TRITON]
    return {**{n: f"{n}/m.vmfb" for n in names}, **{f"{n}_poisonable": f"{n}/poisonable/m.vmfb" for n in names}}


def have_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


def nvcc_objects(out: Path) -> dict[str, list[Path]]:
    """kind → object files, from kernels/simple_mul.cu, kernels/axpby.cu and tests/kernels/abi.cu."""
    from iree_dispatch.toolchains import find_nvcc

    out.mkdir(parents=True, exist_ok=True)
    nvcc = str(find_nvcc())
    made: dict[str, list[Path]] = {kind: [] for kind in KINDS}
    for cu in (ROOT / "kernels" / "simple_mul.cu", ROOT / "kernels" / "axpby.cu", ROOT / "tests" / "kernels" / "abi.cu"):
        jobs = {
            "ptx": [(["-ptx", "-arch=sm_80"], out / f"{cu.stem}.sm_80.ptx")],
            "cubin": [(["-cubin", f"-arch={a}"], out / f"{cu.stem}.{a}.cubin") for a in ("sm_90", "sm_80")],
            "fatbin": [(["-fatbin", "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=[sm_90,compute_90]"], out / f"{cu.stem}.fatbin")],
        }
        for kind, commands in jobs.items():
            for flags, path in commands:
                subprocess.run([nvcc, "-O3", "-std=c++17", *flags, str(cu), "-o", str(path)], check=True, capture_output=True)
                made[kind].append(path)
    return made


def prebuilt_kernels(objects: list[Path]):
    from iree_dispatch.frontend.spec import KernelSpec

    def of(stem: str) -> list[Path]:
        return [p for p in objects if p.name.startswith(f"{stem}.")]

    # Machine code shows nothing of how a pointer is used: fresh outputs are declared as such
    # (undeclared, a non-const pointer of a cubin is in place, the safe role).
    kernels = [
        KernelSpec.declare(of("simple_mul"), "simple_mul", signature=SIMPLE_MUL, block=64, grid="ceildiv(n, 64)", shape=["n"], outputs=["out"]),
        KernelSpec.declare(of("axpby"), "axpby", signature=AXPBY, block=256, grid="max(min(ceildiv(n, 1024), 4096), 1)", shape=["n"], outputs=["out"]),
    ]
    if objects[0].suffix == ".ptx":
        kernels.append(KernelSpec.declare(of("abi"), "iota_sized", signature=IOTA_SIZED, block=128, grid="ceildiv(n, 128)", shape=["n"]))
    return kernels


def triton_kernels(out: Path):
    sys.path.insert(0, str(ROOT))
    from iree_dispatch.frontend.triton import triton_kernel
    from kernels import triton_kernels as tk

    axpy = triton_kernel(tk.axpy, tk.AXPY_SIGNATURE, grid="ceildiv(n, BLOCK)", constexprs={"BLOCK": 1024}, shape=["n"], out_dir=out)
    softmax = triton_kernel(
        tk.softmax_rows, tk.SOFTMAX_SIGNATURE, grid="rows", constexprs={"BLOCK": 1024}, num_warps=8, shape=["rows", "cols"], out_dir=out
    )
    return [axpy, softmax]


def build_all(out: Path) -> dict[str, Path]:
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec import ModuleSpec

    objects = nvcc_objects(out / "objects")
    modules = {kind: prebuilt_kernels(objects[kind]) for kind in KINDS}
    if have_triton():
        modules["triton"] = triton_kernels(out / "triton-objects")
    paths = {name: out / rel for name, rel in layout().items() if name.removesuffix("_poisonable") in modules}
    for name, kernels in modules.items():
        build(ModuleSpec("m", tuple(kernels)), paths[name])
        build(ModuleSpec("m", tuple(k.with_outputs_in_place() for k in kernels)), paths[f"{name}_poisonable"])
    return paths
