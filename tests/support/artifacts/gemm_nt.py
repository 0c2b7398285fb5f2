"""Modules for the NT GEMM GPU tests (tests/test_gpu_gemm_nt.py), built on a CPU machine:
    python -m artifacts.gemm_nt build/gpu-tests/gemm_nt
"""

from __future__ import annotations

from functools import partial

from . import three_ways

LAYOUT = three_ways.layout("gemm_nt")
build_all = partial(three_ways.build_all, "gemm_nt")

if __name__ == "__main__":
    three_ways.main("gemm_nt")
