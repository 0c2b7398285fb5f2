"""Modules of kernels that take structs and CUDA vector types by value (tests/kernels/structs.cu),
shared by the CPU tests (tests/frontend/test_struct_params.py) and the GPU tests
(tests/frontend/test_gpu_struct_params.py), and built for the GPU by
    python -m tests.support.artifacts --only structs build/gpu-tests
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
STRUCTS_CU = ROOT / "tests" / "kernels" / "structs.cu"
# name → path under the artifact folder; the poisonable copy takes every output as an argument.
LAYOUT = {
    "structs": "structs/structs.vmfb",
    "structs_poisonable": "structs_poisonable/structs.vmfb",
}


def structs_module(caller_outputs: bool = False):
    """A plain struct whose fields size the grid and shapes (`s.m`, `s.n`), a __grid_constant__
    struct with padding and a double, nested structs with an array and a float2, and float2,
    half2 and int4 by value. caller_outputs: every output taken as an argument."""
    from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

    kernels = (
        KernelSpec.declare(STRUCTS_CU, "scale_shape", block=64, grid="ceildiv(s.m * s.n, 64)", shapes={"a": ["s.m", "s.n"], "c": ["s.m", "s.n"]}),
        KernelSpec.declare(STRUCTS_CU, "mixed", block=64, grid="ceildiv(n, 64)", shape=["n"]),
        KernelSpec.declare(STRUCTS_CU, "nested", block=64, grid="ceildiv(n, 64)", shape=["n"]),
        KernelSpec.declare(STRUCTS_CU, "axpy_vectors", block=64, grid="ceildiv(n, 64)", shape=["n"]),
    )
    return ModuleSpec("structs", tuple(k.with_outputs_in_place() for k in kernels) if caller_outputs else kernels)


def build_all(out: Path) -> dict[str, Path]:
    from iree_dispatch.backend.pipeline import build

    paths = {name: out / rel for name, rel in LAYOUT.items()}
    build(structs_module(), paths["structs"])
    build(structs_module(caller_outputs=True), paths["structs_poisonable"])
    return paths
