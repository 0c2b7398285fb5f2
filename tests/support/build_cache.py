"""The one-kernel project the build-cache tests build (backend/test_cache*.py; its fixture,
`project`, is in backend/conftest.py): a kernel including a header, and the count of nvcc runs
its logging nvcc made."""

from __future__ import annotations

from pathlib import Path

from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

KERNEL = '#include "scale.h"\nextern "C" __global__ void k(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = SCALE * x[i]; }\n'


def spec_of(folder: Path) -> ModuleSpec:
    return ModuleSpec("m", (KernelSpec.declare(folder / "k.cu", "k", block=32, grid=1, shape=["n"]),))


def nvcc_runs(folder: Path) -> int:
    log = folder / "nvcc.log"
    return len(log.read_text().splitlines()) if log.exists() else 0
