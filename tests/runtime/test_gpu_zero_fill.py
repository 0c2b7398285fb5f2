"""On a CUDA device: outputs declared `zero` start at zero, through IREE and through the direct
launch (the checked path and the prepared calls), against numpy on fresh random data. The kernel
accumulates into them with atomicAdd, so any memory left as the allocator gave it shows. The
device's pool is primed with NaN-poisoned buffers of the outputs' sizes first, so a fill that
didn't happen would read the poison back."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.artifacts.zero_shmem import LAYOUT, build_all
from ..support.gpu_modules import module_paths

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    (path,) = module_paths(tmp_path_factory, "zero_shmem", LAYOUT, build_all).values()
    return {"direct": runtime.load(path), "iree": runtime.load(path, launch="iree")}


def _poison_the_pool(module, *sizes):
    """Device buffers of these element counts filled with NaN and released, for the pool to hand out again."""
    for size in sizes:
        module.to_device(np.full(size, np.nan, np.float32))  # dropped at once: its buffer goes back to the pool


@pytest.mark.parametrize("launch", ["direct", "iree"])
@pytest.mark.parametrize("n, nbins", [(1, 1), (1000, 7), (65537, 256), (300000, 4099)])
def test_atomic_sums_into_zeroed_outputs(modules, launch, n, nbins):
    module = modules[launch]
    rng = np.random.default_rng()
    for _ in range(3):  # the first call takes the checked path; later ones of its signature the prepared call
        keys = rng.integers(0, nbins, n).astype(np.int32)
        values = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        _poison_the_pool(module, nbins, 1)
        sums, total = module.bin_sums(keys, values, nbins)
        want = np.zeros(nbins, np.float64)
        np.add.at(want, keys, values.astype(np.float64))
        # float32 atomics in any order: a rounding per addition at most.
        tolerance = 1e-6 * n
        np.testing.assert_allclose(np.asarray(sums), want, rtol=0, atol=tolerance)
        np.testing.assert_allclose(np.asarray(total), [values.astype(np.float64).sum()], rtol=0, atol=tolerance)


def test_zeroed_outputs_on_device_arrays_through_prepared_calls(modules):
    # Device arrays in and out: the direct launch's prepared calls (C) fill the outputs too.
    module = modules["direct"]
    rng = np.random.default_rng()
    n, nbins = 4096, 33
    keys_host = rng.integers(0, nbins, n).astype(np.int32)
    keys = module.to_device(keys_host)
    for _ in range(4):
        values_host = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        _poison_the_pool(module, nbins, 1)
        sums, _ = module.bin_sums(keys, module.to_device(values_host), nbins)
        want = np.zeros(nbins, np.float64)
        np.add.at(want, keys_host, values_host.astype(np.float64))
        np.testing.assert_allclose(sums.to_host(), want, rtol=0, atol=1e-6 * n)
