"""The module of kernels in the non-const-input style (tests/kernels/nonconst.cu), declared as a
user would: shapes, block and grid, and no word on which pointer is an input. Shared by the CPU
tests (tests/backend/test_pointer_roles.py) and the GPU tests (tests/backend/test_gpu_pointer_roles.py); built
for the GPU by
    python -m tests.support.artifacts --only nonconst build/gpu-tests
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
NONCONST_CU = ROOT / "tests" / "kernels" / "nonconst.cu"
# name → path under the artifact folder; the poisonable copy takes every output as an argument.
LAYOUT = {"nonconst": "nonconst.vmfb", "nonconst_poisonable": "poisonable/nonconst.vmfb"}
# What the build reads from the PTX for each kernel's pointers (pick's sources can't be traced).
EXPECTED_ROLES = {
    "transpose_naive": {"odata": "output", "idata": "input"},
    "transpose_tiled": {"odata": "output", "idata": "input"},
    "saxpy": {"x": "input", "y": "inplace"},
    "histogram256": {"bins": "inplace", "data": "input"},
    "block_sums": {"g_idata": "input", "g_odata": "output"},
    "matrix_mul": {"C": "output", "A": "input", "B": "input"},
    "gather": {"out": "output", "table": "input", "idx": "input"},
    "pick": {"out": "output", "a": "inplace", "b": "inplace"},
}


def declare(name: str, **kw):
    from iree_dispatch.frontend.spec import KernelSpec

    return KernelSpec.declare(NONCONST_CU, name, **kw)


def nonconst_module():
    from iree_dispatch.frontend.spec import ModuleSpec

    transpose = dict(block=[32, 8], grid=["ceildiv(width, 32)", "ceildiv(height, 32)"],
                     shapes={"odata": ["width", "height"], "idata": ["height", "width"]})
    kernels = (
        declare("transpose_naive", **transpose),
        declare("transpose_tiled", **transpose),
        declare("saxpy", block=256, grid="ceildiv(n, 256)", shape=["n"]),
        declare("histogram256", block=256, grid="min(ceildiv(n, 256), 64)", shapes={"bins": [256], "data": ["n"]}),
        declare("block_sums", block=256, grid="ceildiv(n, 256)", shapes={"g_idata": ["n"], "g_odata": ["ceildiv(n, 256)"]}),
        declare("matrix_mul", block=[16, 16], grid=["ceildiv(wB, 16)", "ceildiv(hA, 16)"],
                shapes={"C": ["hA", "wB"], "A": ["hA", "wA"], "B": ["wA", "wB"]}),
        declare("gather", block=256, grid="ceildiv(n, 256)", shapes={"out": ["n"], "table": ["m"], "idx": ["n"]}),
        declare("pick", block=256, grid="ceildiv(n, 256)", shape=["n"]),
    )
    return ModuleSpec("nonconst", kernels)


def build_all(out: Path, progress=None) -> dict[str, Path]:
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec import ModuleSpec

    paths = {name: out / rel for name, rel in LAYOUT.items()}
    module = nonconst_module()
    build(module, paths["nonconst"], progress=progress)
    # A caller-provided output needs named dims: block_sums' partial sums get a name of their own.
    sums = declare("block_sums", block=256, grid="ceildiv(n, 256)", shapes={"g_idata": ["n"], "g_odata": ["blocks"]})
    kernels = tuple((sums if k.name == "block_sums" else k).with_outputs_in_place() for k in module.kernels)
    poisonable = ModuleSpec(module.name, kernels, module.archs)
    build(poisonable, paths["nonconst_poisonable"], progress=progress)
    return paths
