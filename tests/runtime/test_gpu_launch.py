"""On a CUDA device: kernels launched directly by the runtime compute exactly what the same
kernels compute through IREE's invoke (every scalar type, every element type, bit for bit),
calls on torch/CuPy arrays are queued on the caller's stream without waiting, and memory in
use on a caller's stream is never handed to other work before that stream is done with it."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.artifacts.abi import ELEMENT_TYPES
from ..support.gpu_abi_tests import CASES, random_array, random_case
from ..support.gpu_sample_tests import fresh

pytestmark = pytest.mark.gpu
SLEEP_CYCLES = 100_000_000  # torch.cuda._sleep: ~50 ms on an H100


@pytest.fixture(scope="module")
def both(artifacts):
    """The samples module loaded twice: kernels launched directly, and through IREE."""
    return runtime.load(artifacts["samples"], launch="direct"), runtime.load(artifacts["samples"], launch="iree")


def test_kernels_launch_directly_unless_told_otherwise(both):
    direct, through_iree = both
    for name in ("simple_mul", "simple_mul_inplace", "axpby"):
        assert direct[name].launched_directly and not through_iree[name].launched_directly


def test_direct_and_iree_launches_agree_on_every_scalar_and_element_type(artifacts):
    direct, through_iree = runtime.load(artifacts["abi"], launch="direct"), runtime.load(artifacts["abi"], launch="iree")
    assert direct.echo_scalars.launched_directly
    rng = np.random.default_rng()
    for case in CASES + [random_case(rng) for _ in range(20)]:
        for got, want in zip(direct.echo_scalars(*case), through_iree.echo_scalars(*case)):
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), case
    for dtype in ELEMENT_TYPES:
        for n in (1, 33, 4097):
            data = random_array(rng, dtype, n)
            got = getattr(direct, f"reverse_{dtype}")(direct.to_device(data))
            want = getattr(through_iree, f"reverse_{dtype}")(through_iree.to_device(data))
            # The same HAL element type as IREE's own results, so either passes to any IREE function.
            assert got._buffer_view.element_type == want._buffer_view.element_type, dtype
            assert got.to_host().tobytes() == want.to_host().tobytes() == data[::-1].tobytes()


def test_a_call_on_torch_tensors_is_queued_on_the_callers_stream(both, torch):
    """Behind a ~50 ms sleep on a side stream: the call returns a torch tensor while the stream
    is still busy, and the result is right when read on that stream and after it."""
    direct, _ = both
    n = 2**20 + 3
    rng = np.random.default_rng()
    a, b = fresh(rng, n), fresh(rng, n)
    src, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    side = torch.cuda.Stream()
    for read_on_side in (True, False):
        x = torch.full((n,), float("nan"), device="cuda")
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP_CYCLES)
            x.copy_(src)
            result = direct.simple_mul(x, tb)
            assert isinstance(result, torch.Tensor)
            assert not side.query(), "the call waited for the caller's stream"
            if read_on_side:
                got = result.clone().cpu().numpy()
        if not read_on_side:
            side.synchronize()
            got = result.cpu().numpy()
        np.testing.assert_array_equal(got, a * b)


def test_our_arrays_read_on_a_callers_stream_are_not_reused_before_it_is_done(both, torch):
    """One of our device arrays is read by a kernel queued on torch's stream behind a sleep and
    dropped at once; the next call may get its buffer from the pool and must not write it
    before that kernel has read it."""
    direct, through_iree = both
    n = 2**22
    rng = np.random.default_rng()
    a, b, c = fresh(rng, n), fresh(rng, n), fresh(rng, n)
    ta = torch.from_numpy(a).cuda()
    for module in (direct, through_iree):
        dc = module.to_device(c)
        ours = module.to_device(b)
        torch.cuda.synchronize()
        torch.cuda._sleep(SLEEP_CYCLES)
        pending = direct.simple_mul(ta, ours)  # reads `ours` behind the sleep on torch's stream
        del ours
        again = module.simple_mul(dc, module.to_device(c))  # may reuse the buffer `ours` had
        torch.cuda.synchronize()
        np.testing.assert_array_equal(pending.cpu().numpy(), a * b)
        np.testing.assert_array_equal(again.to_host(), c * c)


class _OtherFramework:
    """A CUDA array of a framework the runtime doesn't know (no current stream to ask): only
    DLPack's protocol, delegated to a torch tensor."""

    def __init__(self, tensor):
        self._tensor = tensor
        self.shape, self.dtype = tuple(tensor.shape), np.dtype(str(tensor.dtype).rsplit(".", 1)[-1])

    def __dlpack__(self, stream=None, **kwargs):
        return self._tensor.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._tensor.__dlpack_device__()


def test_an_unknown_frameworks_producer_is_ordered_through_dlpack(both, torch):
    direct, _ = both
    n = 2**20
    rng = np.random.default_rng()
    a, b = fresh(rng, n), fresh(rng, n)
    x = torch.full((n,), float("nan"), device="cuda")
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    x.copy_(torch.from_numpy(a).cuda())
    result = direct.simple_mul(_OtherFramework(x), direct.to_device(b))
    np.testing.assert_array_equal(result.to_host(), a * b)


def test_in_place_outputs_of_framework_arrays_are_the_callers_arrays(artifacts, torch):
    rng = np.random.default_rng()
    n = 4099
    a, b = fresh(rng, n), fresh(rng, n)
    for launch in ("direct", "iree"):
        poisonable = runtime.load(artifacts["poisonable"], launch=launch)
        out = torch.full((n,), float("nan"), device="cuda")
        result = poisonable.simple_mul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), out)
        assert result is out
        np.testing.assert_array_equal(out.cpu().numpy(), a * b)


def test_repeated_calls_reuse_their_preparation_and_stay_right(artifacts, torch, cupy):
    """Calls with the signature of an earlier one skip the checks and the size arithmetic:
    fresh data, changed scalars, changed shapes and bad arguments after such calls."""
    direct = runtime.load(artifacts["samples"], launch="direct")
    poisonable = runtime.load(artifacts["poisonable"], launch="direct")
    rng = np.random.default_rng()
    for n in (1000, 1000, 1000, 77, 1000):
        a, b = fresh(rng, n), fresh(rng, n)
        da, db = direct.to_device(a), direct.to_device(b)
        for _ in range(3):
            np.testing.assert_array_equal(direct.simple_mul(da, db).to_host(), a * b)
        for alpha, beta in ((2.0, -0.5), (-3, 0.25), (0.5, 0)):
            want = np.float32(alpha) * a.astype(np.float64) + np.float32(beta) * b
            # two float32 products and a sum (possibly fused): a few ulps of the largest term
            bound = 4 * np.finfo(np.float32).eps * (abs(alpha) * np.abs(a) + abs(beta) * np.abs(b))
            assert np.all(np.abs(direct.axpby(da, db, alpha, beta).to_host() - want) <= bound)
        out = poisonable.to_device(np.full(n, np.nan, np.float32))
        assert poisonable.simple_mul(da, db, out) is out
        np.testing.assert_array_equal(out.to_host(), a * b)
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        for _ in range(3):
            np.testing.assert_array_equal(torch.from_dlpack(direct.simple_mul(ta, tb)).cpu().numpy(), a * b)
            tout = torch.full((n,), float("nan"), device="cuda")
            assert poisonable.simple_mul(ta, tb, tout) is tout
            np.testing.assert_array_equal(tout.cpu().numpy(), a * b)
        ca, cb = cupy.asarray(a), cupy.asarray(b)
        for _ in range(3):
            result = direct.simple_mul(ca, cb)
            assert isinstance(result, cupy.ndarray)
            np.testing.assert_array_equal(cupy.asnumpy(result), a * b)
    # our arrays, torch tensors and CuPy arrays at two sizes, each prepared once
    assert len(direct.simple_mul._direct.prepared_calls) == 6
    with pytest.raises(TypeError, match=r"argument 'lhs' must have dtype float32"):
        direct.simple_mul(direct.to_device(np.ones(1000)), db)
    with pytest.raises(ValueError, match=r"argument 'rhs' dim 0 is 999, but n = 1000"):
        direct.simple_mul(da, direct.to_device(np.ones(999, np.float32)))
    with pytest.raises(TypeError, match=r"argument 'lhs' must have dtype float32 \(f32\), got float64"):
        direct.simple_mul(ta.double(), tb)
    with pytest.raises(ValueError, match=r"argument 'lhs' is not contiguous"):
        direct.simple_mul(torch.ones(2000, device="cuda")[::2], tb)
    with pytest.raises(ValueError, match=r"alpha.*out of the range of float"):
        direct.axpby(da, db, 1e300, 1.0)


def test_prepared_in_place_calls_on_a_callers_stream_follow_its_work(artifacts, torch):
    """An in-place call on torch tensors behind a ~50 ms sleep on a side stream, the first one
    checked and prepared, the later ones prepared: each is queued behind the stream's work."""
    poisonable = runtime.load(artifacts["poisonable"], launch="direct")
    rng = np.random.default_rng()
    n = 2**20 + 5
    side = torch.cuda.Stream()
    for _ in range(3):
        a, b = fresh(rng, n), fresh(rng, n)
        source, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        x, out = torch.full((n,), float("nan"), device="cuda"), torch.full((n,), float("nan"), device="cuda")
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP_CYCLES)
            x.copy_(source)
            assert poisonable.simple_mul(x, tb, out) is out
            assert not side.query(), "the call waited for the caller's stream"
        side.synchronize()
        np.testing.assert_array_equal(out.cpu().numpy(), a * b)
    assert len(poisonable.simple_mul._direct.prepared_calls) == 1


def test_prepared_calls_on_a_new_thread_and_by_the_thousand_leave_nothing_behind(both, torch):
    """A prepared call on a thread where the device's context was never made current is
    launched the safe way; thousands of prepared calls free every output they made and hold
    no reference to their arguments."""
    direct, _ = both
    rng = np.random.default_rng()
    n = 4096
    a, b = fresh(rng, n), fresh(rng, n)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    np.testing.assert_array_equal(direct.simple_mul(ta, tb).cpu().numpy(), a * b)  # checked, prepared
    got = []
    thread = threading.Thread(target=lambda: got.append(direct.simple_mul(ta, tb).cpu().numpy()))
    thread.start()
    thread.join()
    np.testing.assert_array_equal(got[0], a * b)
    da, db = direct.to_device(a), direct.to_device(b)
    np.testing.assert_array_equal(direct.simple_mul(da, db).to_host(), a * b)
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated()
    references = [sys.getrefcount(x) for x in (ta, tb, da, db)]
    for _ in range(5000):
        direct.simple_mul(ta, tb)
        direct.simple_mul(da, db)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == allocated
    assert [sys.getrefcount(x) for x in (ta, tb, da, db)] == references
    np.testing.assert_array_equal(direct.simple_mul(ta, tb).cpu().numpy(), a * b)


def test_outputs_made_ahead_are_right_and_released_by_trim(artifacts, torch):
    """A synchronous call makes its kernel's next outputs while the kernel runs. The next call
    writes them fully: they are pool buffers that held other results before (a new rhs each
    call), so an element left unwritten would show. trim() gives their memory back."""
    module = runtime.load(artifacts["samples"], launch="direct")
    rng = np.random.default_rng()
    n = 2**26  # 256 MB per array
    a_host = fresh(rng, n)
    a = module.to_device(a_host)
    for _ in range(4):  # the first call is checked; the later ones launch into outputs made ahead
        b_host = fresh(rng, n)
        np.testing.assert_array_equal(module.simple_mul(a, module.to_device(b_host)).to_host(), a_host * b_host)
    module.gpu.hal.allocator.trim()  # the pool's free buffers go back; the set made ahead stays
    holding = torch.cuda.mem_get_info()[0]
    module.trim()
    assert torch.cuda.mem_get_info()[0] >= holding + 200 * 2**20
    b_host = fresh(rng, n)
    np.testing.assert_array_equal(module.simple_mul(a, module.to_device(b_host)).to_host(), a_host * b_host)


def test_modules_loaded_and_dropped_again_and_again_keep_working(artifacts):
    """Each load loads its kernels on the device and each dropped module unloads them."""
    import gc

    rng = np.random.default_rng()
    a, b = fresh(rng, 1000), fresh(rng, 1000)
    for _ in range(50):
        module = runtime.load(artifacts["samples"], launch="direct")
        np.testing.assert_array_equal(module.simple_mul(a, b), a * b)
        del module
        gc.collect()
