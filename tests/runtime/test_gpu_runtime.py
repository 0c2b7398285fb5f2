"""On a CUDA device: torch and CuPy arrays in and out without copies, ordering with the
caller's stream, the output pool, and asynchronous calls under stress. Skipped where no CUDA
device exists; torch/CuPy tests also where those are not installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.gpu_sample_tests import fresh

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def test_torch_tensors_in_and_out_without_copies(samples, torch):
    rng = np.random.default_rng()
    for n in (1, 1000, 2**20 + 3):
        a, b = fresh(rng, n), fresh(rng, n)
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        result = samples.simple_mul(ta, tb)  # torch in, torch out
        assert isinstance(result, torch.Tensor) and result.device == ta.device and result.dtype == torch.float32
        np.testing.assert_array_equal(result.cpu().numpy(), a * b)
        # our device arrays are taken by torch without a copy: the same memory
        ours = samples.simple_mul(samples.to_device(a), samples.to_device(b))
        assert isinstance(ours, runtime.DeviceArray)
        out = torch.from_dlpack(ours)
        assert out.device == ta.device and out.dtype == torch.float32
        np.testing.assert_array_equal(out.cpu().numpy(), a * b)
        assert torch.from_dlpack(ours).data_ptr() == out.data_ptr()


def test_torch_tensor_as_in_place_output_is_written(poisonable, torch):
    rng = np.random.default_rng()
    n = 4099
    a, b = fresh(rng, n), fresh(rng, n)
    out = torch.full((n,), float("nan"), device="cuda")
    before = out.data_ptr()
    poisonable.simple_mul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), out)
    assert out.data_ptr() == before
    np.testing.assert_array_equal(out.cpu().numpy(), a * b)
    y = torch.full((n,), -7.0, device="cuda")
    poisonable.axpby(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), y, 2.0, -0.5)
    np.testing.assert_allclose(y.cpu().numpy(), 2.0 * a - 0.5 * b, rtol=1e-6)


def test_cupy_arrays_in_place_and_out(poisonable, samples, cupy):
    rng = np.random.default_rng()
    n = 10007
    a, b = fresh(rng, n), fresh(rng, n)
    ca, cb = cupy.asarray(a), cupy.asarray(b)
    out = cupy.full(n, cupy.nan, dtype=cupy.float32)
    poisonable.simple_mul(ca, cb, out)
    np.testing.assert_array_equal(cupy.asnumpy(out), a * b)
    fresh_out = cupy.from_dlpack(samples.simple_mul(ca, cb))
    np.testing.assert_array_equal(cupy.asnumpy(fresh_out), a * b)


def test_a_call_is_ordered_after_work_queued_on_the_callers_stream(samples, torch):
    """The input is written by a torch kernel queued behind a ~50 ms sleep on a side stream;
    the call, made at once, must read the written values."""
    n = 2**20
    rng = np.random.default_rng()
    a, b = fresh(rng, n), fresh(rng, n)
    src = torch.from_numpy(a).cuda()
    tb = torch.from_numpy(b).cuda()
    torch.cuda.synchronize()
    for stream, by_keyword in ((torch.cuda.Stream(), False), (torch.cuda.current_stream(), False), (torch.cuda.Stream(), True)):
        x = torch.full((n,), float("nan"), device="cuda")
        torch.cuda.synchronize()
        with torch.cuda.stream(stream):
            torch.cuda._sleep(100_000_000)  # cycles, ~50 ms
            x.copy_(src)
            result = samples.simple_mul(lhs=x, rhs=tb) if by_keyword else samples.simple_mul(x, tb)
        torch.cuda.synchronize()  # the result is ordered on `stream`, as a torch op's would be
        np.testing.assert_array_equal(result.cpu().numpy(), a * b)


def test_later_calls_wait_for_consumers_of_pooled_outputs(samples, torch):
    """A result handed to torch and dropped there while torch still reads it on its stream
    must not be overwritten by the next call, which may reuse its buffer."""
    n = 2**22
    rng = np.random.default_rng()
    a, b, c = fresh(rng, n), fresh(rng, n), fresh(rng, n)
    da, db, dc = (samples.to_device(v) for v in (a, b, c))
    y = torch.from_dlpack(samples.simple_mul(da, db))
    torch.cuda._sleep(100_000_000)
    copy = y.clone()  # queued behind the sleep
    del y
    samples.simple_mul(dc, db)  # same size: may reuse y's buffer
    np.testing.assert_array_equal(copy.cpu().numpy(), a * b)


def test_framework_arrays_are_refused_clearly(samples, torch):
    t = torch.ones(8, device="cuda")
    with pytest.raises(TypeError, match=r"argument 'lhs' must have dtype float32 \(f32\), got float64"):
        samples.simple_mul(t.double(), t)
    with pytest.raises(ValueError, match=r"argument 'lhs' is not contiguous"):
        samples.simple_mul(torch.ones(16, device="cuda")[::2], t)
    with pytest.raises(ValueError, match=r"argument 'rhs' dim 0 is 4, but n = 8"):
        samples.simple_mul(t, torch.ones(4, device="cuda"))
    # a CPU tensor goes the numpy way
    np.testing.assert_array_equal(samples.simple_mul(torch.ones(8) * 3, torch.ones(8) * 2), np.full(8, 6, np.float32))


def test_pool_reuses_buffers_of_dropped_results(samples, torch):
    if not samples.gpu.pooled:
        pytest.skip("the output pool is off (IREE_DISPATCH_OUTPUT_POOL=off)")
    n = 3 * 2**20 + 5
    x = samples.to_device(np.ones(n, np.float32))
    first = samples.simple_mul(x, x)
    pointer = torch.from_dlpack(first).data_ptr()
    del first
    again = samples.simple_mul(x, x)
    assert torch.from_dlpack(again).data_ptr() == pointer


POOL_PRESSURE = """
import numpy as np, torch
from iree_dispatch import runtime
mod = runtime.load({vmfb!r})
free, total = torch.cuda.mem_get_info()
# Fill the pool with free buffers of sizes the last call can't reuse, then leave too little
# memory for that call unless the pool gives its free buffers back.
for fraction in (0.06, 0.07, 0.08):  # buffers released to the pool
    mod.device.allocator.allocate_buffer(int(runtime.rt.MemoryType.DEVICE_LOCAL), int(runtime.rt.BufferUsage.DEFAULT), int(total * fraction))
torch.cuda.empty_cache()
free, _ = torch.cuda.mem_get_info()
n = int(total * 0.05) // 4
blocker = torch.empty(free - 10 * n, dtype=torch.uint8, device="cuda")  # room for the 2 inputs (8n bytes), not the output
a = mod.to_device(np.full(n, 3.0, np.float32))
b = mod.to_device(np.full(n, 2.0, np.float32))
out = torch.from_dlpack(mod.simple_mul(a, b))
assert bool((out == 6.0).all()), "wrong result"
print("ok")
"""


def test_a_call_short_of_memory_trims_the_pool_and_runs(artifacts):
    env = {**os.environ, runtime.POOL_ENV: "60GiB", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    pytest.importorskip("torch")
    run = subprocess.run([sys.executable, "-c", POOL_PRESSURE.format(vmfb=str(artifacts["samples"]))], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]


def test_async_calls_survive_stress(artifacts):
    """16 processes × 1,000 chained asynchronous calls, every element checked (the benchmark
    runs 100 processes)."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "async_stress.py"), "--vmfb", str(artifacts["samples_async"]), "--processes", "16", "--calls", "1000"],
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
