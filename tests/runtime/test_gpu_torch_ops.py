"""On a CUDA device with torch: the sample kernels as torch custom ops (runtime/torch_ops.py),
called eagerly, from `torch.compile(fullgraph=True)` code, and captured in a CUDA graph and
replayed, every result against numpy on fresh random data; and a timing of one launch each way
(CUDA events). Skipped without torch or CUDA."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch.runtime import torch_ops

from ..support.gpu_sample_tests import fresh

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ops(samples, torch):
    # Streams other tests handed our memory to are waited for before each launch on the shared
    # device (devices.py), a host wait a capture refuses: after a full synchronize none is in use.
    torch.cuda.synchronize()
    samples.gpu.before_call()
    samples.gpu.streams_in_use.clear()
    registered = torch_ops.register(samples, namespace="iree_dispatch_samples")
    yield registered
    registered.close()


def test_eager_calls_equal_numpy(ops, torch):
    rng = np.random.default_rng()
    for n in (1, 1000, 2**20 + 3):
        a, b = fresh(rng, n), fresh(rng, n)
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        np.testing.assert_array_equal(ops.simple_mul(ta, tb).cpu().numpy(), a * b)
        np.testing.assert_allclose(ops.axpby(ta, tb, 1.5, -0.5).cpu().numpy(), 1.5 * a - 0.5 * b, rtol=1e-6, atol=1e-6)
        inplace = tb.clone()
        assert ops.simple_mul_inplace(ta, inplace) is inplace  # the caller's tensor, written in place
        np.testing.assert_array_equal(inplace.cpu().numpy(), a * b)


def test_fullgraph_compile_equals_numpy(ops, torch):
    def model(x, y):
        z = ops.simple_mul(x, y) + 1.0
        return ops.axpby(z, y, 2.0, 0.5)

    compiled = torch.compile(model, fullgraph=True)
    rng = np.random.default_rng()
    for n in (1000, 4099):
        a, b = fresh(rng, n), fresh(rng, n)
        got = compiled(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()).cpu().numpy()
        np.testing.assert_allclose(got, 2.0 * (a * b + 1.0) + 0.5 * b, rtol=1e-5, atol=1e-5)


def test_fullgraph_compile_with_an_in_place_kernel(ops, torch):
    def model(x, y):
        ops.simple_mul_inplace(x, y)
        return y * 2.0

    compiled = torch.compile(model, fullgraph=True)
    rng = np.random.default_rng()
    a, b = fresh(rng, 4099), fresh(rng, 4099)
    tb = torch.from_numpy(b).cuda()
    got = compiled(torch.from_numpy(a).cuda(), tb)
    np.testing.assert_array_equal(tb.cpu().numpy(), a * b)
    np.testing.assert_array_equal(got.cpu().numpy(), a * b * 2.0)


def test_cuda_graph_capture_and_replay_equal_numpy(ops, torch):
    rng = np.random.default_rng()
    n = 4099
    x, y = torch.empty(n, device="cuda"), torch.empty(n, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (prepared calls) off the capture, as torch asks
        for _ in range(3):
            ops.axpby(ops.simple_mul(x, y), y, 1.5, -0.5)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops.axpby(ops.simple_mul(x, y), y, 1.5, -0.5)
    for _ in range(3):
        a, b = fresh(rng, n), fresh(rng, n)
        x.copy_(torch.from_numpy(a))
        y.copy_(torch.from_numpy(b))
        graph.replay()
        np.testing.assert_allclose(out.cpu().numpy(), 1.5 * (a * b) - 0.5 * b, rtol=1e-6, atol=1e-6)


def test_reduce_overhead_compile_replays_equal_numpy(ops, torch):
    def model(x, y):
        return ops.simple_mul(x, y)

    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    rng = np.random.default_rng()
    x, y = torch.empty(4099, device="cuda"), torch.empty(4099, device="cuda")
    for _ in range(4):  # the first runs warm up and record, later ones replay the graph
        a, b = fresh(rng, 4099), fresh(rng, 4099)
        x.copy_(torch.from_numpy(a))
        y.copy_(torch.from_numpy(b))
        np.testing.assert_array_equal(compiled(x, y).clone().cpu().numpy(), a * b)


def test_timing_per_launch_eager_compiled_and_graph_replay(ops, torch):
    """Per launch of simple_mul on 4099 floats (printed): a chain of launches called eagerly,
    the same chain in one compiled function (fullgraph), and replayed from a captured CUDA graph;
    and the fixed cost of entering a compiled function, ours against torch's own multiply."""
    rng = np.random.default_rng()
    n, chain, rounds = 4099, 20, 20
    a, b = fresh(rng, n), rng.uniform(0.99, 1.01, n).astype(np.float32)  # b near 1: the chain stays finite
    x, y = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    expected = a.copy()
    for _ in range(chain):
        expected = expected * b  # float32, rounded after each product as the kernel does

    def chained(p, q):
        for _ in range(chain):
            p = ops.simple_mul(p, q)
        return p

    compiled_chain = torch.compile(chained, fullgraph=True)
    compiled_one = torch.compile(lambda p, q: ops.simple_mul(p, q), fullgraph=True)
    compiled_torch = torch.compile(lambda p, q: p * q, fullgraph=True)

    def timed(run, launches: int) -> float:
        run()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000 / launches  # µs per launch

    def rounds_of(function):
        def run():
            for _ in range(rounds):
                function(x, y)
        return run

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chained(x, y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = chained(x, y)
    launches = rounds * chain
    times = {
        "eager chain": timed(rounds_of(chained), launches),
        "compiled chain": timed(rounds_of(compiled_chain), launches),
        "graph replay": timed(lambda: [graph.replay() for _ in range(rounds)], launches),
        "compiled function of one launch": timed(rounds_of(compiled_one), rounds),
        "compiled function of torch's multiply": timed(rounds_of(compiled_torch), rounds),
    }
    print("simple_mul per launch: " + ", ".join(f"{k} {v:.2f} µs" for k, v in times.items()))
    np.testing.assert_array_equal(out.cpu().numpy(), expected)
    np.testing.assert_array_equal(compiled_chain(x, y).cpu().numpy(), expected)
    assert all(v > 0 for v in times.values())
