"""Modules for the f64-accumulating f32 GEMM GPU tests (tests/library/test_gpu_gemm_f32_f64acc.py), built on a CPU
machine:
    python -m tests.support.artifacts --only gemm_f32_f64acc build/gpu-tests
"""

from __future__ import annotations

from functools import partial

from . import three_ways

LAYOUT = three_ways.layout("gemm_f32_f64acc")
build_all = partial(three_ways.build_all, "gemm_f32_f64acc")
