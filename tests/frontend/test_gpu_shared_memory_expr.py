"""On a CUDA device: a kernel whose dynamic shared memory is sized by a dim
(`shared_memory = { size = "2 * d * 4", max = ... }`, the bound above 48 KB), at sizes below
and at the bound, through IREE (the export's bound) and the direct launch (the call's exact
size), against numpy on fresh random data; a call beyond the bound is refused before launch."""

from __future__ import annotations

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.artifacts.zero_shmem import LAYOUT, MAX_D, ROW_STATS_MAX, build_all
from ..support.gpu_modules import module_paths

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    (path,) = module_paths(tmp_path_factory, "zero_shmem", LAYOUT, build_all).values()
    return {"direct": runtime.load(path), "iree": runtime.load(path, launch="iree")}


@pytest.mark.parametrize("launch", ["direct", "iree"])
@pytest.mark.parametrize("rows, d", [(1, 1), (3, 100), (17, 6000), (5, MAX_D - 1), (9, MAX_D)])
def test_row_stats_with_shared_memory_sized_by_d(modules, launch, rows, d):
    rng = np.random.default_rng()
    for _ in range(2):  # the direct launch's second call of a signature is a prepared call
        x = rng.uniform(-1.0, 1.0, (rows, d)).astype(np.float32)
        sums, squares = modules[launch].row_stats(x)
        wide = x.astype(np.float64)
        # A sequential float32 sum of d terms: an error of d roundings at most.
        np.testing.assert_allclose(np.asarray(sums), wide.sum(axis=1), rtol=0, atol=2e-7 * d * d + 1e-6)
        np.testing.assert_allclose(np.asarray(squares), (wide * wide).sum(axis=1), rtol=0, atol=2e-7 * d * d + 1e-6)


@pytest.mark.parametrize("launch", ["direct", "iree"])
def test_a_call_beyond_the_bound_is_refused(modules, launch):
    x = np.ones((2, MAX_D + 1), np.float32)
    with pytest.raises(ValueError, match=rf"row_stats\(\): shared memory .* = {2 * 4 * (MAX_D + 1)} bytes for d = {MAX_D + 1}, "
                                         rf"beyond its declared max of {ROW_STATS_MAX} bytes"):
        modules[launch].row_stats(x)
