"""Modules for the 96-row f32 GEMM GPU tests (tests/library/test_gpu_gemm_f32.py), built on a CPU machine:
    python -m tests.support.artifacts --only gemm_f32_m96 build/gpu-tests
"""

from __future__ import annotations

from functools import partial

from . import three_ways

LAYOUT = three_ways.layout("gemm_f32_m96")
build_all = partial(three_ways.build_all, "gemm_f32_m96")
