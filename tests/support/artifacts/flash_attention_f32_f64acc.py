"""Modules for the f64-summing f32 flash-attention GPU tests (tests/models/test_gpu_flash_attention_f32_f64acc.py),
built on a CPU machine:
    python -m tests.support.artifacts --only flash_attention_f32_f64acc build/gpu-tests
"""

from __future__ import annotations

from functools import partial

from . import three_ways

LAYOUT = three_ways.layout("flash_attention_f32_f64acc")
build_all = partial(three_ways.build_all, "flash_attention_f32_f64acc")
