"""On a CUDA device: cubin and fatbin objects load and run through IREE, and each GPU runs the
object the variant conditions promise (the probe kernel reports __CUDA_ARCH__)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from iree_dispatch import runtime

from ..support.artifacts.objects import PROBES, build_all, layout
from ..support.gpu_modules import module_paths

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> dict[str, Path]:
    return module_paths(tmp_path_factory, "objects", layout(), build_all)


def expected_arch(policy: str, archs: list[str], capability: tuple[int, int]) -> int:
    """__CUDA_ARCH__ the GPU should run: the variant plan's choice (a fatbin: the driver's,
    i.e. the newest cubin of the GPU's family, else the PTX)."""
    from iree_dispatch.core.archs import parse_archs
    from iree_dispatch.core.variants import plan_variants, rule_holds

    parsed = tuple(parse_archs(archs))
    variant = next(v for v in plan_variants(parsed, policy) if v.runs_on(*capability))
    if variant.kind != "fatbin":
        arch = variant.target_arch
    else:
        arch = next((a for a in parsed if rule_holds((a.major, a.minor, "family"), *capability)), parsed[0])
    return arch.major * 100 + arch.minor * 10


@pytest.mark.parametrize("name", sorted(PROBES))
def test_the_promised_object_runs(objects, name):
    capability = runtime.cuda_compute_capability()
    policy, archs = PROBES[name]
    got = runtime.load(objects[name]).cuda_arch()
    assert int(got[0]) == expected_arch(policy, archs, capability), (name, int(got[0]))


@pytest.mark.parametrize("name", ["samples_cubin", "samples_fatbin"])
@pytest.mark.parametrize("n", (1, 7, 1000, 2**20 + 3))
def test_samples_from_binary_objects(objects, name, n):
    module = runtime.load(objects[name])
    rng = np.random.default_rng()
    a, b = rng.uniform(-2, 2, n).astype(np.float32), rng.uniform(-2, 2, n).astype(np.float32)
    np.testing.assert_array_equal(module.simple_mul(a, b), a * b)
    np.testing.assert_array_equal(module.simple_mul_inplace(a, b), a * b)
    got = module.axpby(a, b, 1.5, -0.25)
    assert np.allclose(got, 1.5 * a.astype(np.float64) - 0.25 * b, rtol=1e-6, atol=1e-6)
