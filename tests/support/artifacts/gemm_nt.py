"""Modules for the NT GEMM GPU tests (tests/library/test_gpu_gemm_nt.py), built on a CPU machine:
    python -m tests.support.artifacts --only gemm_nt build/gpu-tests
"""

from __future__ import annotations

from functools import partial

from . import three_ways

LAYOUT = three_ways.layout("gemm_nt")
build_all = partial(three_ways.build_all, "gemm_nt")
