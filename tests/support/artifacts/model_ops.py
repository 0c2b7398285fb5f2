"""Modules for the model-op kernels' GPU tests (tests/models/test_gpu_model_ops.py): kernels/model_ops.toml
(swiglu_f32, swiglu_bf16, gemm_bias_gelu_erf_bf16) built three ways, on a CPU machine:
    python -m tests.support.artifacts --only model_ops build/gpu-tests
"""

from __future__ import annotations

from functools import partial

from . import three_ways

LAYOUT = three_ways.layout("model_ops")
build_all = partial(three_ways.build_all, "model_ops")
