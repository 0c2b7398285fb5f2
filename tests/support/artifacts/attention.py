"""Modules for the fused attention GPU tests (tests/library/test_gpu_attention.py), built on a CPU machine:
    python -m tests.support.artifacts --only attention build/gpu-tests
"""

from __future__ import annotations

from functools import partial

from . import three_ways

LAYOUT = three_ways.layout("attention")
build_all = partial(three_ways.build_all, "attention")
