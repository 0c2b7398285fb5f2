"""On a CUDA device: programs of K kernel calls against numpy, out= kernels, and asynchronous
calls. Skipped where no CUDA device exists; modules from tests/support/artifacts/samples.py."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.artifacts.samples import AXPBY_CHAIN, CHAIN_LENGTHS, REVERSE_CHAIN, STATIC_SIZE
from ..support.gpu_sample_tests import fresh

pytestmark = pytest.mark.gpu


def near_one(rng, n):
    """Factors in [0.9, 1.1]: a chain of 100 products stays finite and normal."""
    return rng.uniform(0.9, 1.1, n).astype(np.float32)


def mul_chain_reference(x, y, k):
    t = x.copy()
    for _ in range(k):
        t = t * y  # float32 products, rounded at every step as the kernel does
    return t


@pytest.mark.parametrize("k", CHAIN_LENGTHS)
@pytest.mark.parametrize("n", (1, 1000, 2**20 + 3))
def test_k_chain_equals_numpy(artifacts, k, n):
    program = runtime.load(artifacts[f"chain_mul_{k}"])
    rng = np.random.default_rng()
    x, y = fresh(rng, n), near_one(rng, n)
    want = mul_chain_reference(x, y, k)
    np.testing.assert_array_equal(program[f"chain_mul_{k}"](x, y), want)
    on_device = program[f"chain_mul_{k}"](program.to_device(x), program.to_device(y))
    np.testing.assert_array_equal(on_device.to_host(), want)


def test_static_program_replays_its_command_buffer_with_new_buffers(artifacts):
    """With static sizes IREE records the command buffer once and replays it: each call must
    still read and write the buffers it is given."""
    program = runtime.load(artifacts["chain_mul_100_static"])
    rng = np.random.default_rng()
    for _ in range(3):
        x, y = fresh(rng, STATIC_SIZE), near_one(rng, STATIC_SIZE)
        np.testing.assert_array_equal(program.chain_mul_100_static(program.to_device(x), program.to_device(y)).to_host(), mul_chain_reference(x, y, 100))
    with pytest.raises(ValueError, match=rf"argument 'x' dim 0 must be {STATIC_SIZE}, got 1000"):
        program.chain_mul_100_static(np.ones(1000, np.float32), np.ones(1000, np.float32))


def test_program_calls_are_checked_before_launch(artifacts):
    program = runtime.load(artifacts["chain_mul_10"])
    with pytest.raises(ValueError, match=r"chain_mul_10\(\): argument 'y' dim 0 is 3, but n = 4"):
        program.chain_mul_10(np.ones(4, np.float32), np.ones(3, np.float32))
    with pytest.raises(TypeError, match=r"argument 'x' must have dtype float32"):
        program.chain_mul_10(np.ones(4, np.float64), np.ones(4, np.float32))


def test_program_checks_its_inputs_in_the_ir_too(artifacts):
    """A caller that bypasses the Python checks (VmContext.invoke, as iree-run-module does)
    meets the program's entry checks, which fail the call before the first dispatch; the
    same module then still computes correctly."""
    program = runtime.load(artifacts["chain_mul_10"])
    function = program.vm_module.lookup_function("chain_mul_10")
    args = runtime.rt.VmVariantList(2)
    for array in (program.to_device(np.ones(4, np.float32)), program.to_device(np.ones(3, np.float32))):
        args.push_ref(array._buffer_view)
    with pytest.raises(RuntimeError, match=r"program chain_mul_10: input 'y' dim 0 must equal n \(the size of input 'x' dim 0\)"):
        program.context.vm_context.invoke(function, args, runtime.rt.VmVariantList(1))
    rng = np.random.default_rng()
    x, y = fresh(rng, 4099), near_one(rng, 4099)
    np.testing.assert_array_equal(program.chain_mul_10(x, y), mul_chain_reference(x, y, 10))


def test_axpby_chain_with_scalar_argument_and_in_place_kernel(artifacts):
    program = runtime.load(artifacts["chain_axpby"])
    rng = np.random.default_rng()
    n = 100003
    x, y = fresh(rng, n), near_one(rng, n)
    alpha = float(rng.uniform(0.2, 0.5))
    t = x
    for _ in range(AXPBY_CHAIN):
        t = np.float32(alpha) * t + np.float32(0.5) * y
    got_t, got_product, got_inplace = program.chain_axpby(x, y, alpha)
    # A multiply-add may be fused: a few ulps per step of the largest term.
    np.testing.assert_allclose(got_t, t, rtol=1e-5, atol=1e-6)
    # The in-place kernel wrote into a copy: `product` is returned too, unchanged.
    np.testing.assert_array_equal(got_product, got_t * y)
    np.testing.assert_array_equal(got_inplace, (got_t * y) * y)


def test_chain_of_a_non_elementwise_kernel(artifacts):
    """reverse_f32 reads out[i] from in[n-1-i]: had IREE aliased a call's input and output,
    the result would be half mirrored."""
    program = runtime.load(artifacts["chain_reverse"])
    x = np.arange(4099, dtype=np.float32)
    want = x[::-1] if REVERSE_CHAIN % 2 else x
    np.testing.assert_array_equal(program.chain_reverse(x), want)


def test_out_kernel_writes_into_the_callers_device_buffer(artifacts):
    module = runtime.load(artifacts["samples_out"])
    rng = np.random.default_rng()
    n = 4099
    a, b = fresh(rng, n), fresh(rng, n)
    out = module.to_device(np.full(n, np.nan, np.float32))
    result = module.simple_mul_out(module.to_device(a), module.to_device(b), out)
    np.testing.assert_array_equal(result.to_host(), a * b)
    # Semantics: the kernel wrote into the caller's buffer itself, no copy.
    np.testing.assert_array_equal(out.to_host(), a * b)
    # A numpy out= argument is copied to the device and never written behind the caller's back.
    host_out = np.full(n, np.nan, np.float32)
    np.testing.assert_array_equal(module.simple_mul_out(a, b, host_out), a * b)
    assert np.isnan(host_out).all()
    np.testing.assert_allclose(module.axpby_out(a, b, host_out, 2.0, -1.0), 2 * a - b, rtol=1e-6, atol=1e-6)


@pytest.fixture(scope="module")
def samples_async(artifacts):
    return runtime.load(artifacts["samples_async"], asynchronous=True)


def test_async_results_equal_numpy(samples_async):
    rng = np.random.default_rng()
    for n in (1, 1000, 2**20 + 3):
        a, b = fresh(rng, n), fresh(rng, n)
        r = samples_async.simple_mul(a, b)
        assert isinstance(r, runtime.AsyncArray) and r.shape == (n,)
        np.testing.assert_array_equal(r.to_host(), a * b)
        np.testing.assert_allclose(np.asarray(samples_async.axpby(a, b, 1.5, -0.5)), 1.5 * a - 0.5 * b, rtol=1e-6, atol=1e-6)


def test_async_read_waits_for_completion(samples_async):
    """200 queued in-place calls on 16 Mi floats (tens of ms of GPU work): the call returns
    before they ran, and the read sees the value after all of them."""
    n, k = 16 * 2**20, 200
    rng = np.random.default_rng()
    lhs = np.full(n, 1.0078125, np.float32)  # 1 + 2**-7: stays finite over 200 products
    data = rng.uniform(1, 2, n).astype(np.float32)
    d_lhs, d_data = samples_async.to_device(lhs), samples_async.to_device(data)
    r = None
    for _ in range(k):
        r = samples_async.simple_mul_inplace(d_lhs, d_data)
    assert not r.done  # still queued: nothing waited so far
    got = r.to_host()
    assert r.done
    want = data[:4096]
    for _ in range(k):
        want = want * lhs[:4096]
    np.testing.assert_array_equal(got[:4096], want)


def test_async_chain_and_other_modules(samples_async, artifacts):
    rng = np.random.default_rng()
    n = 100003
    x, y = fresh(rng, n), near_one(rng, n)
    dy = samples_async.to_device(y)
    t = samples_async.to_device(x)
    for _ in range(50):
        t = samples_async.simple_mul(t, dy)
    np.testing.assert_array_equal(t.to_host(), mul_chain_reference(x, y, 50))
    # A pending result passed to a synchronous module is waited for first.
    pending = samples_async.simple_mul(samples_async.to_device(x), dy)
    sync = runtime.load(artifacts["samples"])
    np.testing.assert_array_equal(sync.simple_mul(pending, samples_async.to_device(y)).to_host(), x * y * y)
    # An asynchronous program: ten dispatches per call, calls chained.
    program = runtime.load(artifacts["chain_mul_10_async"], asynchronous=True)
    r = program.chain_mul_10(x, y)
    r2 = program.chain_mul_10(r, program.to_device(y))
    np.testing.assert_array_equal(r2.to_host(), mul_chain_reference(x, y, 20))
    samples_async.wait()
    program.wait()
