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
    from torch._inductor.utils import run_and_get_code

    def model(x, y):
        z = ops.simple_mul(x, y) + 1.0
        return ops.axpby(z, y, 2.0, 0.5)

    compiled = torch.compile(model, fullgraph=True)
    rng = np.random.default_rng()
    for n in (1000, 4099):
        a, b = fresh(rng, n), fresh(rng, n)
        got, (code, *_) = run_and_get_code(compiled, torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda())
        np.testing.assert_allclose(got.cpu().numpy(), 2.0 * (a * b + 1.0) + 0.5 * b, rtol=1e-5, atol=1e-5)
    # The kernels write into outputs Inductor allocates: no check of a returned tensor follows.
    assert f"{ops.namespace}.simple_mul.into" in code and f"{ops.namespace}.axpby.into" in code, code
    assert "assert_tensor_metadata(" not in code and "assert_alignment(" not in code, code


def test_the_into_overload_writes_given_outputs_and_checks_them(ops, torch):
    into = ops.op("simple_mul").into
    rng = np.random.default_rng()
    for n in (1000, 1000, 4099):  # the first call of a signature is checked, the next prepared
        a, b = fresh(rng, n), fresh(rng, n)
        out = torch.full((n,), float("nan"), device="cuda")
        assert into(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), out) is None
        np.testing.assert_array_equal(out.cpu().numpy(), a * b)
    x = torch.ones(64, device="cuda")
    with pytest.raises(ValueError, match=r"simple_mul\(\): output 'out' must be float32 of shape \[64\], got float32 of shape \[65\]"):
        into(x, x, torch.empty(65, device="cuda"))
    with pytest.raises(ValueError, match="must be float32 of shape .64., got float16"):
        into(x, x, torch.empty(64, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="output 'out' is not contiguous"):
        into(x, x, torch.empty(128, device="cuda")[::2])
    with pytest.raises(ValueError, match="output 'out' is on CPU device 0, but this kernel runs on cuda:0"):
        into(x, x, torch.empty(64))


@pytest.fixture(scope="module")
def zero_shmem_ops(torch, tmp_path_factory):
    from iree_dispatch import runtime

    from ..support.artifacts.zero_shmem import LAYOUT, build_all
    from ..support.gpu_modules import module_paths

    (path,) = module_paths(tmp_path_factory, "zero_shmem", LAYOUT, build_all).values()
    registered = torch_ops.register(runtime.load(path), namespace="iree_dispatch_zero_shmem")
    yield registered
    registered.close()


def test_compiled_kernels_with_two_outputs_and_with_zero_filled_ones(zero_shmem_ops, torch):
    """row_stats (two outputs, shared memory sized by a dim) writes into Inductor's buffers;
    bin_sums, whose outputs must start at zero, is called as the functional op (the kernel's own
    zero fill), and its `into` overload copies its results into the outputs given."""
    ops = zero_shmem_ops
    rng = np.random.default_rng()

    def model(x, keys, values):
        sums, squares = ops.row_stats(x)
        bins, total = ops.bin_sums(keys, values, 7)
        return sums + 1.0, squares, bins, total

    compiled = torch.compile(model, fullgraph=True)
    for rows, d, n in ((5, 300, 1000), (33, 4099, 70000)):
        x = rng.uniform(-1, 1, (rows, d)).astype(np.float32)
        keys, values = rng.integers(0, 7, n).astype(np.int32), rng.uniform(-1, 1, n).astype(np.float32)
        sums, squares, bins, total = compiled(*(torch.from_numpy(v).cuda() for v in (x, keys, values)))
        want = np.zeros(7, np.float64)
        np.add.at(want, keys, values.astype(np.float64))
        np.testing.assert_allclose(sums.cpu().numpy(), x.astype(np.float64).sum(1) + 1.0, rtol=0, atol=1e-5 * d)
        np.testing.assert_allclose(squares.cpu().numpy(), (x.astype(np.float64) ** 2).sum(1), rtol=0, atol=1e-5 * d)
        np.testing.assert_allclose(bins.cpu().numpy(), want, rtol=0, atol=1e-6 * n)
        np.testing.assert_allclose(total.cpu().numpy(), [values.astype(np.float64).sum()], rtol=0, atol=1e-6 * n)
        bins_given, total_given = torch.full((7,), float("nan"), device="cuda"), torch.full((1,), float("nan"), device="cuda")
        ops.op("bin_sums").into(torch.from_numpy(keys).cuda(), torch.from_numpy(values).cuda(), bins_given, total_given, 7)
        np.testing.assert_allclose(bins_given.cpu().numpy(), want, rtol=0, atol=1e-6 * n)
        np.testing.assert_allclose(total_given.cpu().numpy(), [values.astype(np.float64).sum()], rtol=0, atol=1e-6 * n)


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
    """Per launch of simple_mul on 4099 floats (printed): chains of launches called eagerly, the
    same chains in one compiled function (fullgraph) each, through `ops` (the kernel writes into
    Inductor's buffers) and through the functional op itself (Inductor checks each returned
    tensor: its size, stride and alignment), and replayed from a captured CUDA graph. A chain of
    n launches takes fixed + n x per-launch; two lengths (10 and 40) separate the two: per launch
    is the slope, fixed the cost of entering the function (a compiled function's entry, ours
    against torch's multiply, printed too). Medians of rounds that alternate between the ways."""
    import statistics

    rng = np.random.default_rng()
    n, short, long, rounds = 4099, 10, 40, 15
    a, b = fresh(rng, n), rng.uniform(0.99, 1.01, n).astype(np.float32)  # b near 1: the chain stays finite
    x, y = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    functional = ops.op("simple_mul")

    def chain_of(length: int):
        def chained(p, q):
            for _ in range(length):
                p = ops.simple_mul(p, q)
            return p
        return chained

    def functional_chain_of(length: int):
        def chained(p, q):
            for _ in range(length):
                p = functional(p, q)
            return p
        return chained

    ways = {}
    for length in (short, long):
        ways[("eager", length)] = chain_of(length)
        ways[("compiled", length)] = torch.compile(chain_of(length), fullgraph=True)
        ways[("compiled, functional op", length)] = torch.compile(functional_chain_of(length), fullgraph=True)
    ways[("compiled torch multiply", 1)] = torch.compile(lambda p, q: p * q, fullgraph=True)
    ways[("compiled simple_mul", 1)] = torch.compile(chain_of(1), fullgraph=True)

    expected = {length: a.copy() for length in (short, long)}
    for length, value in expected.items():
        for _ in range(length):
            value *= b  # float32, rounded after each product as the kernel does
    for (way, length), function in ways.items():
        if length in expected:
            np.testing.assert_array_equal(function(x, y).cpu().numpy(), expected[length], err_msg=way)

    def timed(function, calls: int = 20) -> float:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            function(x, y)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000 / calls  # µs per call of the function

    samples: dict = {key: [] for key in ways}
    for _ in range(rounds):
        for key, function in ways.items():
            samples[key].append(timed(function))
    call = {key: statistics.median(values) for key, values in samples.items()}
    line = []
    for way in ("eager", "compiled", "compiled, functional op"):
        per_launch = (call[(way, long)] - call[(way, short)]) / (long - short)
        line.append(f"{way}: {per_launch:.2f} µs per launch + {call[(way, short)] - short * per_launch:.1f} fixed")
    graph_stream = torch.cuda.Stream()
    graph_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(graph_stream):
        ways[("eager", long)](x, y)
    torch.cuda.current_stream().wait_stream(graph_stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ways[("eager", long)](x, y)  # written by each replay
    replay = statistics.median(timed(lambda p, q: graph.replay()) for _ in range(rounds)) / long
    np.testing.assert_array_equal(out.cpu().numpy(), expected[long])
    line.append(f"graph replay {replay:.2f} µs per launch")
    line.append(f"entering a compiled function of one launch: ours {call[('compiled simple_mul', 1)]:.1f} µs, torch's multiply {call[('compiled torch multiply', 1)]:.1f} µs")
    print("simple_mul: " + "; ".join(line))
    assert all(value > 0 for value in call.values())
