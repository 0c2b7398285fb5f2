"""On a machine with two or more CUDA devices: picking a GPU by ordinal and by UUID, results
on the GPU that computed them, arrays refused on the wrong GPU, and one kernel split over the
GPUs (DataParallel). Skipped with fewer than two GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from iree_dispatch import runtime
from iree_dispatch.runtime import cuda_driver
from iree_dispatch.runtime.parallel import DataParallel

from ..support.gpu_sample_tests import fresh

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(cuda_driver.device_count() < 2, reason="needs two CUDA devices")]


def test_each_gpu_runs_its_own_module(artifacts):
    rng = np.random.default_rng()
    modules = [runtime.load(artifacts["samples"], f"cuda://{i}") for i in range(cuda_driver.device_count())]
    for _ in range(3):  # interleaved calls on all GPUs
        for i, mod in enumerate(modules):
            assert mod.gpu.ordinal == i
            a, b = fresh(rng, 4097), fresh(rng, 4097)
            np.testing.assert_array_equal(mod.simple_mul(a, b), a * b)
            da, db = mod.to_device(a), mod.to_device(b)
            np.testing.assert_array_equal(mod.axpby(da, db, 2.0, -1.0).to_host(), (2.0 * a - db.to_host()).astype(np.float32))


def test_a_gpu_by_uuid_is_the_same_device(artifacts):
    uuid = cuda_driver.device_uuid(1)
    assert uuid and runtime.device(f"cuda://{uuid}") is runtime.device("cuda://1")
    with pytest.raises(runtime.DeviceError, match="no CUDA device has this UUID"):
        runtime.device("cuda://GPU-00000000-0000-0000-0000-000000000000")


def test_results_live_on_the_gpu_that_computed_them(artifacts):
    """On each GPU, whichever is torch's current device: a call on torch tensors returns a
    torch tensor there, and our own result goes to torch there without a copy."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    for i in range(2):
        mod = runtime.load(artifacts["samples"], f"cuda://{i}")
        a, b = fresh(rng, 1000), fresh(rng, 1000)
        x, y = torch.from_numpy(a).to(f"cuda:{i}"), torch.from_numpy(b).to(f"cuda:{i}")
        out = mod.simple_mul(x, y)
        assert isinstance(out, torch.Tensor) and out.device.index == i
        np.testing.assert_array_equal(out.cpu().numpy(), a * b)
        ours = torch.from_dlpack(mod.simple_mul(mod.to_device(a), mod.to_device(b)))
        assert ours.device.index == i
        np.testing.assert_array_equal(ours.cpu().numpy(), a * b)


def test_arrays_on_another_gpu_are_refused(artifacts):
    m0, m1 = runtime.load(artifacts["samples"], "cuda://0"), runtime.load(artifacts["samples"], "cuda://1")
    x0 = m0.to_device(np.ones(8, np.float32))
    with pytest.raises(ValueError, match=r"argument 'lhs' is on cuda://0, but this module runs on cuda://1"):
        m1.simple_mul(x0, m1.to_device(np.ones(8, np.float32)))
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"argument 'lhs' is on cuda:0, but this module runs on cuda:1"):
        m1.simple_mul(torch.ones(8, device="cuda:0"), torch.ones(8, device="cuda:1"))


@pytest.mark.parametrize("n", (1, 7, 1_000_003))
def test_data_parallel_call_equals_numpy(artifacts, n):
    dp = DataParallel(artifacts["samples"], [f"cuda://{i}" for i in range(cuda_driver.device_count())])
    rng = np.random.default_rng()
    a, b = fresh(rng, n), fresh(rng, n)
    if n < len(dp.modules):
        with pytest.raises(ValueError, match=f"can't split {n} rows over {len(dp.modules)} GPUs"):
            dp.call("simple_mul", a, b)
        return
    np.testing.assert_array_equal(dp.call("simple_mul", a, b), a * b)
    parts = dp.call_parts("axpby", dp.scatter(a), dp.scatter(b), 0.5, 2.0)
    assert [p._dispatch_device.ordinal for p in parts] == list(range(len(parts)))
    np.testing.assert_allclose(np.concatenate([p.to_host() for p in parts]), 0.5 * a + 2.0 * b, rtol=1e-6)


def test_two_torchrun_ranks_exchange_results_through_nccl(artifacts):
    """torch.distributed as the engine that scales out: 2 ranks, one GPU and one module each."""
    pytest.importorskip("torch.distributed")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    worker = ROOT / "tests" / "runtime" / "distributed" / "allgather_worker.py"
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker), str(artifacts["samples"])],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert run.stdout.count("0 of 1000003 elements differ") == 2, run.stdout
