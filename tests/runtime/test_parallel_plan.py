"""DataParallel's split of a call: as a kernel's spec declares it, or uniform along a dim; on
stand-in modules (no GPU), every element compared with numpy."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch.core.contract import KernelDescription, ParallelPlan, TensorDescription
from iree_dispatch.runtime.parallel import DataParallel


class _Kernel:
    """A stand-in kernel: out = x + bias per row, total = column sums of x; numpy in, numpy out."""

    def __init__(self, parallel):
        self.description = KernelDescription(
            name="bias_add", function="bias_add", source="k.cu", block=(256, 1, 1), grid=("rows", "1", "1"),
            inputs=(TensorDescription("x", "f32", ("rows", "cols")), TensorDescription("bias", "f32", ("cols",))),
            outputs=(TensorDescription("out", "f32", ("rows", "cols")), TensorDescription("total", "f32", ("cols",))), parallel=parallel)

    def __call__(self, x, bias):
        return x + bias, x.sum(axis=0)


def _data_parallel(gpus: int, parallel):
    dp = object.__new__(DataParallel)
    dp.modules = [{"bias_add": _Kernel(parallel)} for _ in range(gpus)]
    from concurrent.futures import ThreadPoolExecutor

    dp._threads = ThreadPoolExecutor(gpus)
    return dp


DECLARED = ParallelPlan((("x", 0),), (("out", "concat", 0), ("total", "sum", -1)))


@pytest.mark.parametrize("gpus", [1, 2, 3])
def test_the_declared_split_is_used(gpus):
    rng = np.random.default_rng()
    x, bias = rng.standard_normal((7, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    dp = _data_parallel(gpus, DECLARED)
    out, total = dp.call("bias_add", x, bias)  # bias whole to every GPU, x by rows
    np.testing.assert_array_equal(out, x + bias)
    np.testing.assert_allclose(total, x.sum(axis=0), rtol=1e-5)
    dp.close()


def test_dim_and_combine_are_refused_where_the_spec_declares():
    dp = _data_parallel(2, DECLARED)
    with pytest.raises(ValueError, match=r"its spec declares how it splits over GPUs \(parallel = \.\.\.\); call it without dim= and combine="):
        dp.call("bias_add", np.ones((4, 5), np.float32), np.ones(5, np.float32), dim=0)
    dp.close()


def test_without_a_declaration_every_array_splits_along_dim():
    rng = np.random.default_rng()
    x, bias = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)
    dp = _data_parallel(2, None)
    out, total = dp.call("bias_add", x, bias)  # bias split too: each GPU adds its rows
    np.testing.assert_array_equal(out, x + bias)
    np.testing.assert_allclose(total, np.concatenate([x[:3].sum(axis=0), x[3:].sum(axis=0)]), rtol=1e-5)
    with pytest.raises(ValueError, match="combine must be one of concat, sum"):
        dp.call("bias_add", x, bias, combine="max")
    dp.close()
