"""Modules for the flash-attention kernels' own GPU tests (tests/models/test_gpu_flash_qkv.py), built on a CPU machine:
    python -m tests.support.artifacts --only flash_attention build/gpu-tests
"""

from __future__ import annotations

from functools import partial

from . import three_ways

LAYOUT = three_ways.layout("flash_attention")
build_all = partial(three_ways.build_all, "flash_attention")
