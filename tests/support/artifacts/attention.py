"""Modules for the fused attention GPU tests (tests/test_gpu_attention.py), built on a CPU machine:
    python -m artifacts.attention build/gpu-tests/attention
"""

from __future__ import annotations

from functools import partial

from . import three_ways

LAYOUT = three_ways.layout("attention")
build_all = partial(three_ways.build_all, "attention")

if __name__ == "__main__":
    three_ways.main("attention")
