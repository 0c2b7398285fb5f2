"""On a CUDA device: every scalar type arrives intact (64-bit extremes, NaN/inf), every pointer
element type round-trips, and a size_t derived from a shape. Outputs are poisoned first
(in-place builds of the same kernels, see gpu_artifacts.with_outputs_in_place)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from iree_dispatch import runtime

from ..support.gpu_abi_tests import (  # noqa: F401  (collected here too)
    test_3d_grid_and_blocks,
    test_block_reduction_in_dynamic_shared_memory,
    test_every_pointer_element_type_round_trips,
    test_every_scalar_type_arrives_intact,
    test_size_t_as_argument_and_from_a_shape,
    test_template_instantiations,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def abi(artifacts):
    return runtime.load(artifacts["abi"]), runtime.load(artifacts["abi_poisonable"])


@pytest.fixture(scope="module")
def cxx(artifacts):
    return runtime.load(artifacts["cxx"]), runtime.load(artifacts["cxx_poisonable"])


def test_shared_memory_beyond_the_gpu_limit_fails_with_the_limit(artifacts):
    """In a subprocess: a failed launch can leave the CUDA context unusable for later tests."""
    code = (
        "import numpy as np, iree_dispatch.runtime as r\n"
        f"m = r.load({str(artifacts['shared_too_big'])!r})\n"
        "m.row_sum(np.ones((4, 4), np.float32))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    print(result.stderr[-2000:])
    assert result.returncode != 0
    assert "300000" in result.stderr and "232448" in result.stderr
