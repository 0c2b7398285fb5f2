"""The module of tests/kernels/zero_shmem.cu: a kernel that accumulates with atomicAdd into
zero-filled outputs (`zero`), and one whose dynamic shared memory is sized by a dim with a
declared bound over 48 KB (`shared_memory = { size, max }`). Loaded by the GPU tests
tests/runtime/test_gpu_zero_fill.py and tests/frontend/test_gpu_shared_memory_expr.py; built for the GPU by
    python -m tests.support.artifacts --only zero_shmem build/gpu-tests
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
ZERO_SHMEM_CU = ROOT / "tests" / "kernels" / "zero_shmem.cu"
LAYOUT = {"zero_shmem": "zero_shmem.vmfb"}
# row_stats stages 2 * d floats: its bound allows d up to MAX_D (96 KB, above the 48 KB a launch
# gets without opting in).
MAX_D = 12288
ROW_STATS_MAX = 2 * 4 * MAX_D


def zero_shmem_module():
    from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

    kernels = (
        KernelSpec.declare(ZERO_SHMEM_CU, "bin_sums", block=256, grid="ceildiv(n, 256)",
                           shapes={"keys": ["n"], "values": ["n"], "sums": ["nbins"], "total": [1]}, zero=["sums", "total"]),
        KernelSpec.declare(ZERO_SHMEM_CU, "row_stats", block=128, grid="rows", shapes={"x": ["rows", "d"], "sums": ["rows"], "squares": ["rows"]},
                           shared_memory={"size": "2 * d * 4", "max": ROW_STATS_MAX}),
    )
    return ModuleSpec("zero_shmem", kernels)


def build_all(out: Path, progress=None) -> dict[str, Path]:
    from iree_dispatch.backend.pipeline import build

    paths = {name: out / rel for name, rel in LAYOUT.items()}
    build(zero_shmem_module(), paths["zero_shmem"], progress=progress)
    return paths
