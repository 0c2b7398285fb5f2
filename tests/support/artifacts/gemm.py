"""Modules for the GEMM GPU tests (tests/library/test_gpu_gemm.py) and benchmark (benchmarks/gemm.py),
built on a CPU machine:
    python -m tests.support.artifacts --only gemm build/gpu-tests
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from . import three_ways

ROOT = three_ways.ROOT
# as built (sm_90a wgmma cubin, sm_80 mma.sync cubin, PTX), outputs in place, and sm_80 PTX only:
# a Hopper GPU JIT-compiles that one, so the mma.sync body, which an H100 never picks from `gemm`,
# is tested there too (three_ways.layout).
LAYOUT = three_ways.layout("gemm")
# The GEMM's device-side tensor-map builder as a kernel of its own (tests/kernels/tensor_maps.cu),
# an sm_90a cubin launched by CuPy: its maps are compared with the driver's.
TENSOR_MAPS = "tensor_maps.sm_90a.cubin"


def build_all(out: Path) -> dict[str, Path]:
    paths = three_ways.build_all("gemm", out)
    build_tensor_maps_cubin(out / TENSOR_MAPS)
    return paths


def build_tensor_maps_cubin(path: Path) -> Path:
    from iree_dispatch.toolchains import find_nvcc

    subprocess.run([str(find_nvcc()), "-cubin", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", f"-I{ROOT / 'kernels'}",
                    str(ROOT / "tests" / "kernels" / "tensor_maps.cu"), "-o", str(path)], check=True)
    return path
