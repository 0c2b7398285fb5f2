"""Modules for the 192-column persistent GEMM GPU tests (tests/library/test_gpu_gemm.py), built on a CPU machine:
    python -m tests.support.artifacts --only gemm_n192 build/gpu-tests
"""

from __future__ import annotations

from functools import partial

from . import three_ways

LAYOUT = three_ways.layout("gemm_n192")
build_all = partial(three_ways.build_all, "gemm_n192")
