"""On a CUDA device: calls on numpy arrays, launched directly, copy their inputs in and their
results out on the kernel's stream and wait once (runtime/host_copies.py). Every element is
checked against numpy on fresh data, call after call: a staging buffer reused before its copy
ran, or shared by two arguments, shows as another argument's or another call's data."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from iree_dispatch import runtime
from iree_dispatch.runtime import devices

from ..support.artifacts.abi import ELEMENT_TYPES
from ..support.artifacts.library import LAYOUT as LIBRARY_LAYOUT
from ..support.artifacts.library import build_all as build_library
from ..support.gpu_abi_tests import random_array
from ..support.gpu_library_tests import REFERENCES, arguments, check
from ..support.gpu_modules import module_paths
from ..support.gpu_sample_tests import fresh, nan

pytestmark = pytest.mark.gpu
SIZES = (1, 7, 1000, 4097, 2**20 + 3)


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> dict[str, runtime.Module]:
    return {name: runtime.load(path) for name, path in module_paths(tmp_path_factory, "library", LIBRARY_LAYOUT, build_library).items()}


@pytest.fixture
def counted(samples, monkeypatch):
    """The samples module with its device's waits counted: the launch stream's (`waits`), and
    copies through IREE's queue, each a wait of its own, fail the test."""
    gpu = samples.gpu
    waits: list[int | None] = []
    synchronize = gpu.launcher.synchronize
    monkeypatch.setattr(gpu.launcher, "synchronize", lambda stream: waits.append(stream) or synchronize(stream))
    monkeypatch.setattr(gpu, "_copy", lambda source, target: pytest.fail("a copy went through IREE's queue"))
    return samples, waits


def test_a_numpy_call_waits_once(counted):
    samples, waits = counted
    assert samples.simple_mul.launched_directly
    rng = np.random.default_rng()
    for n in SIZES:
        a, b = fresh(rng, n), fresh(rng, n)
        waits.clear()
        np.testing.assert_array_equal(samples.simple_mul(a, b), a * b)
        assert waits == [None]  # the launch stream, once: copies in, kernel, copy out


def test_back_to_back_calls_with_other_data(samples):
    """Calls of every size in turn, the caller overwriting its arrays at once: each call's
    staging buffers hold its own data until its copies have run."""
    rng = np.random.default_rng()
    for _ in range(20):
        for n in SIZES:
            a, b = fresh(rng, n), fresh(rng, n)
            x, y = fresh(rng, n), fresh(rng, n)
            alpha, beta = float(rng.uniform(-3, 3)), float(rng.uniform(-3, 3))
            product = samples.simple_mul(a, b)
            mixed = samples.axpby(x, y, alpha, beta)
            want_product = a * b
            # Two float32 products and a sum (possibly fused): a few ulps of the largest term.
            want_mixed = np.float64(np.float32(alpha)) * x + np.float64(np.float32(beta)) * y
            bound = 4 * np.finfo(np.float32).eps * (abs(alpha) * np.abs(x) + abs(beta) * np.abs(y))
            for array in (a, b, x, y):
                array[:] = np.nan
            np.testing.assert_array_equal(product, want_product)
            assert (np.abs(mixed - want_mixed) <= bound).all()


def test_several_arguments_of_different_sizes_in_one_call(library):
    """layernorm_f32: x (rows × cols), weight and bias (cols), each staged on its own; and the
    same kernel with its output taken as a NaN-filled numpy argument (copied in, written on the
    device, read back; the caller's array untouched)."""
    rng = np.random.default_rng()
    for rows, cols in ((1, 1), (7, 33), (33, 1000), (3, 4097), (130, 1024), (2, 20000)):
        inputs, scalars = arguments("layernorm_f32", rows, cols, rng)
        want = REFERENCES.layernorm_f32(*inputs, *scalars)
        check("layernorm_f32", library["library"].layernorm_f32(*inputs, *scalars), want, inputs)
        poisoned = np.full((rows, cols), np.nan, np.float32)
        got = library["library_poisonable"].layernorm_f32(*inputs, poisoned, *scalars)
        check("layernorm_f32", got, want, inputs)
        assert np.isnan(poisoned).all()


def test_poisoned_outputs_and_in_place_results(samples, poisonable):
    rng = np.random.default_rng()
    for n in SIZES:
        a, b = fresh(rng, n), fresh(rng, n)
        out = nan(n)
        np.testing.assert_array_equal(poisonable.simple_mul(a, b, out), a * b)
        assert np.isnan(out).all()
        b_before = b.copy()
        np.testing.assert_array_equal(samples.simple_mul_inplace(a, b), a * b_before)
        np.testing.assert_array_equal(b, b_before)


@pytest.mark.parametrize("dtype", ELEMENT_TYPES)
def test_every_element_type_round_trips_bit_exact(artifacts, dtype):
    abi = runtime.load(artifacts["abi"])
    rng = np.random.default_rng()
    for n in (1, 33, 4097):
        data = random_array(rng, dtype, n)
        got = getattr(abi, f"reverse_{dtype}")(data)
        assert got.dtype == data.dtype and got.tobytes() == data[::-1].tobytes()


def test_mixed_calls_keep_device_results(samples):
    rng = np.random.default_rng()
    for n in SIZES:
        a, b = fresh(rng, n), fresh(rng, n)
        db = samples.to_device(b)
        result = samples.simple_mul(a, db)  # numpy and a device array in: a device array out
        assert isinstance(result, runtime.DeviceArray)
        again = samples.simple_mul(result, b)  # a device array and numpy in
        np.testing.assert_array_equal(result.to_host(), a * b)
        np.testing.assert_array_equal(again.to_host(), (a * b) * b)


def test_arrays_over_the_staging_limit_take_the_synchronous_copies(samples, monkeypatch):
    monkeypatch.setattr(devices, "STAGING_LIMIT", 4096)
    rng = np.random.default_rng()
    for n in (1024, 1025, 4097):  # at the limit: staged; beyond it: IREE's copies
        a, b = fresh(rng, n), fresh(rng, n)
        np.testing.assert_array_equal(samples.simple_mul(a, b), a * b)


def test_calls_from_several_threads(samples):
    """Calls of several threads at once, each with its own data: staging buffers in flight are
    one call's alone."""
    failures: list[str] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for i in range(50):
            n = int(rng.choice(SIZES[:4]))
            a, b = fresh(rng, n), fresh(rng, n)
            got = samples.simple_mul(a, b)
            if not np.array_equal(got, a * b):
                failures.append(f"thread {seed}, call {i}, n = {n}: {int((got != a * b).sum())} elements differ")

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures[:5]
