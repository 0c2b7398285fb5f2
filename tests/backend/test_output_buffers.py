"""Several fresh outputs of one dtype and shape each get their own buffer, on every path that
creates outputs; and the flow-level check (tests/support/flow_check.py) that guards every build in the
test session does see outputs that share one."""

from __future__ import annotations

import re
from pathlib import Path

from iree_dispatch.backend.compile import compile_flags
from iree_dispatch.backend.pipeline import build
from iree_dispatch.backend.program import Program
from iree_dispatch.core.archs import parse_archs
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

from ..support.environment import needs_build_tools
from ..support.flow_check import flow_ir, shared_results

pytestmark = needs_build_tools

STATS = """
extern "C" __global__ void stats(float* mean, float* rstd, const float* x, float* scratch, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { mean[i] = x[i] + 1.0f; rstd[i] = x[i] * 2.0f; scratch[i] = 1.0f; }
}
"""


def _stats(cu, **kw) -> KernelSpec:
    """mean and rstd fresh (one dtype, one shape); scratch fresh too unless declared in place."""
    return KernelSpec.declare(cu(STATS), "stats", block=64, grid="ceildiv(n, 64)", shape=["n"], **kw)


def _flow(mlir: Path) -> str:
    return flow_ir(mlir, compile_flags(parse_archs(["sm_90"])[0], Path(".")))


def _results_of_dispatches(flow: str) -> list[list[str]]:
    return [re.findall(r"(%[\w.]+)\{", line.rsplit("->", 1)[1]) for line in flow.splitlines() if "flow.dispatch" in line and "=" in line]


def test_two_fresh_outputs_of_one_shape_are_distinct_values(cu, tmp_path):
    spec = ModuleSpec("m", (_stats(cu),), parse_archs(["sm_90"]))
    build(spec, tmp_path / "m.vmfb", emit_mlir=tmp_path / "m.mlir", cache=False)
    flow = _flow(tmp_path / "m.mlir")
    [results] = _results_of_dispatches(flow)
    assert len(results) == 3 and len(set(results)) == 3, flow


def test_fresh_and_in_place_outputs_mixed(cu, tmp_path):
    spec = ModuleSpec("m", (_stats(cu, inplace=["scratch"]),), parse_archs(["sm_90"]))
    build(spec, tmp_path / "m.vmfb", emit_mlir=tmp_path / "m.mlir", cache=False)
    [results] = _results_of_dispatches(_flow(tmp_path / "m.mlir"))
    assert len(results) == 3 and len(set(results)) == 3


def test_program_calling_the_kernel_twice(cu, tmp_path):
    kernel = _stats(cu)
    spec = ModuleSpec("m", (kernel,), parse_archs(["sm_90"]))
    p = Program("twice")
    x = p.input("x", "f32", ["n"])
    mean, rstd, scratch = p.call(kernel, x)
    mean2, rstd2, _ = p.call(kernel, mean)
    p.output(mean, rstd, scratch, mean2, rstd2)
    p.build(spec, tmp_path / "twice.vmfb", emit_mlir=tmp_path / "twice.mlir")
    dispatches = _results_of_dispatches(_flow(tmp_path / "twice.mlir"))
    values = [v for results in dispatches for v in results]
    assert len(dispatches) == 2 and len(values) == 6 and len(set(values)) == 6


def test_the_check_sees_outputs_that_share_a_buffer(cu, tmp_path):
    """The form IREE merges: two identical tensor.empty placeholders as tied outputs."""
    spec = ModuleSpec("m", (_stats(cu),), parse_archs(["sm_90"]))
    build(spec, tmp_path / "m.vmfb", emit_mlir=tmp_path / "m.mlir", cache=False)
    text = (tmp_path / "m.mlir").read_text()
    merged = re.sub(r"flow\.tensor\.alloca : (tensor<\?xf32>)\{(%[\w.]+)\}", r"tensor.empty(\2) : \1", text)
    assert merged != text
    (tmp_path / "merged.mlir").write_text(merged)
    assert shared_results(_flow(tmp_path / "merged.mlir"))
    assert not shared_results(_flow(tmp_path / "m.mlir"))
