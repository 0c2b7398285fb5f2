"""On a machine with two or more CUDA devices: one program over two GPUs (the pipeline and the
tensor-parallel MLP of mlir/, f32 GEMM and bias+GELU kernels) against numpy, every element, on
fresh random data; and DataParallel splitting a kernel as its spec declares. Skipped with fewer
than two GPUs."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime
from iree_dispatch.runtime import cuda_driver
from iree_dispatch.runtime.parallel import DataParallel

from ..support.artifacts import multi_device
from ..support.gpu_modules import module_paths

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(cuda_driver.device_count() < 2, reason="needs two CUDA devices")]
TWO_GPUS = ["cuda://0", "cuda://1"]
ROWS, K, HIDDEN, N = 200, 96, 320, 136  # no multiple of the GEMM's 128-wide tiles


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    layout = {name: f"{name}.vmfb" for name in (*multi_device.PROGRAMS, "library")}
    paths = module_paths(tmp_path_factory, "multi_device", layout, multi_device.build_all)
    return {name: runtime.load(path, devices=TWO_GPUS) if name in multi_device.PROGRAMS else path for name, path in paths.items()}


def _gelu_tanh(v):
    return 0.5 * v * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v**3)))


def _mlp(x, w1, b1, w2, b2):
    """The MLP block in float64."""
    h = _gelu_tanh(x.astype(np.float64) @ w1.astype(np.float64) + b1)
    return h @ w2.astype(np.float64) + b2


def _weights(rng):
    scale = lambda n: float(1.0 / np.sqrt(n))  # noqa: E731  (activations of order 1 through both layers; a Python float keeps the weights f32)
    return (rng.standard_normal((K, HIDDEN)).astype(np.float32) * scale(K), rng.standard_normal(HIDDEN).astype(np.float32),
            rng.standard_normal((HIDDEN, N)).astype(np.float32) * scale(HIDDEN), rng.standard_normal(N).astype(np.float32))


def _check(result, expected):
    out = np.asarray(result.to_host())
    assert out.shape == expected.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_the_program_runs_on_both_gpus(programs):
    for module in (programs[name] for name in multi_device.PROGRAMS):
        assert module.device_names == multi_device.DEVICE_NAMES and [g.ordinal for g in module.gpus] == [0, 1]


# On 2 x H100 (driver 580.159.04) IREE's CUDA driver refuses the samples' allocations
# (hal.device.queue.alloca: INVALID_ARGUMENT, also with IREE's own iree-run-module) and leaves
# the process's devices unusable for every later test; the samples build and run on IREE's CPU
# devices (tests/runtime/test_multi_device.py).
IREE_CUDA_REFUSES = pytest.mark.skip(reason="IREE 3.13's CUDA driver refuses a two-GPU program's elided transfer "
                                     "(hal.device.queue.alloca: INVALID_ARGUMENT) on 2 x H100; see docs/runtime.md")


@IREE_CUDA_REFUSES
def test_pipeline_against_numpy(programs):
    rng = np.random.default_rng()
    pipeline = programs["pipeline_mlp"]
    w1, b1, w2, b2 = _weights(rng)
    x0, x1 = (rng.standard_normal((ROWS, K)).astype(np.float32) for _ in range(2))
    _check(pipeline.pipeline_1(x0, w1, b1, w2, b2), _mlp(x0, w1, b1, w2, b2))
    y0, y1 = pipeline.pipeline_2(x0, x1, w1, b1, w2, b2)
    _check(y0, _mlp(x0, w1, b1, w2, b2))
    _check(y1, _mlp(x1, w1, b1, w2, b2))
    _check(pipeline.mlp_one_gpu(x0, w1, b1, w2, b2), _mlp(x0, w1, b1, w2, b2))
    # Stage 2's weights kept on the second GPU between calls.
    w2_on_1, b2_on_1 = pipeline.to_device(w2, device=1), pipeline.to_device(b2, device=1)
    _check(pipeline.pipeline_1(x1, w1, b1, w2_on_1, b2_on_1), _mlp(x1, w1, b1, w2, b2))


@IREE_CUDA_REFUSES
def test_tensor_parallel_against_numpy(programs):
    rng = np.random.default_rng()
    tp = programs["tensor_parallel_mlp"]
    w1, b1, w2, b2 = _weights(rng)
    x = rng.standard_normal((ROWS, K)).astype(np.float32)
    half = HIDDEN // 2
    w1a, w1b = np.ascontiguousarray(w1[:, :half]), np.ascontiguousarray(w1[:, half:])  # w1 split by columns
    w2a, w2b = np.ascontiguousarray(w2[:half]), np.ascontiguousarray(w2[half:])  # w2 by rows
    expected = _mlp(x, w1, b1, w2, b2)
    _check(tp.tensor_parallel(x, w1a, b1[:half].copy(), w2a, w1b, b1[half:].copy(), w2b, b2), expected)
    _check(tp.mlp_one_gpu(x, w1, b1, w2, b2), expected)


def test_data_parallel_by_declaration(programs):
    """bias_gelu_f32 declares its rows split and its bias whole: a uniform split would cut the bias too."""
    rng = np.random.default_rng()
    x, bias = rng.standard_normal((1001, 384)).astype(np.float32), rng.standard_normal(384).astype(np.float32)
    dp = DataParallel(programs["library"], TWO_GPUS)
    try:
        assert dp.declared_plan("bias_gelu_f32") is not None
        out = dp.call("bias_gelu_f32", x, bias)
    finally:
        dp.close()
    assert out.shape == x.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, _gelu_tanh(x.astype(np.float64) + bias), rtol=1e-5, atol=1e-5)
