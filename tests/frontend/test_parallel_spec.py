"""A kernel's split over GPUs declared in its spec (`parallel`): parsed, checked against its
tensors, and recorded in its description."""

from __future__ import annotations

import pytest

from iree_dispatch.core.contract import REFLECTION_KEY, ParallelPlan, encode, read_description
from iree_dispatch.core.errors import SpecError
from iree_dispatch.frontend.spec_file import load_spec

SOURCE = 'extern "C" __global__ void bias_add(const float* x, const float* bias, float* out, float* total, int rows, int cols) {}\n'
SPEC = """[[kernel]]
name = "bias_add"
source = "k.cu"
block = [256]
grid = ["rows"]
shapes = {{ x = ["rows", "cols"], bias = ["cols"], out = ["rows", "cols"], total = ["cols"] }}
outputs = ["out", "total"]
{parallel}
"""


def _load(tmp_path, parallel: str):
    (tmp_path / "k.cu").write_text(SOURCE)
    (tmp_path / "k.toml").write_text(SPEC.format(parallel=parallel))
    return load_spec(tmp_path / "k.toml").kernels[0]


def test_the_declaration_is_parsed_and_recorded(tmp_path):
    kernel = _load(tmp_path, 'parallel = { split = { x = 0 }, combine = { out = "concat", total = "sum" } }')
    plan = ParallelPlan((("x", 0),), (("out", "concat", 0), ("total", "sum", -1)))
    assert kernel.parallel == plan and kernel.describe().parallel == plan
    travelled = read_description({REFLECTION_KEY: encode(kernel.describe())}, "m.vmfb: function bias_add")
    assert travelled.parallel == plan


def test_concat_joins_along_the_dim_of_the_split_size(tmp_path):
    kernel = _load(tmp_path, 'parallel = { split = { x = 1, bias = 0 }, combine = { out = "concat", total = "concat" } }')
    assert kernel.parallel.combine == (("out", "concat", 1), ("total", "concat", 0))


def test_without_a_declaration_the_description_is_as_before(tmp_path):
    kernel = _load(tmp_path, "")
    assert kernel.parallel is None and "parallel" not in kernel.describe().to_dict()


@pytest.mark.parametrize("parallel, message", [
    ('parallel = { split = { y = 0 }, combine = { out = "concat", total = "sum" } }', "split names 'y', which is no input tensor"),
    ('parallel = { split = { x = 2 }, combine = { out = "concat", total = "sum" } }', "split x = 2 is not a dim of x"),
    ('parallel = { split = { x = 0 }, combine = { out = "concat" } }', "combine must say how each output joins"),
    ('parallel = { split = { x = 0 }, combine = { out = "concat", total = "max" } }', "combine total = 'max'; expected one of concat, sum"),
    ('parallel = { split = { x = 0 }, combine = { out = "concat", total = "concat" } }', 'combine total = "concat", but no dim of total has the size x is split along'),
    ('parallel = { split = { x = 0 } }', "must be a table of split and combine"),
])
def test_declarations_that_dont_fit_the_kernel_are_refused(tmp_path, parallel, message):
    with pytest.raises(SpecError, match="kernel bias_add: parallel") as info:
        _load(tmp_path, parallel)
    assert message in str(info.value)
