"""Modules for the f32 GEMM GPU tests (tests/test_gpu_gemm_f32.py), built on a CPU machine:
    python -m artifacts.gemm_f32 build/gpu-tests/gemm_f32
"""

from __future__ import annotations

import sys
from pathlib import Path

from .three_ways import build_three_ways

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "kernels" / "gemm_f32.toml"
# name → path under the artifact folder; each copy has its own folder (each writes gemm_f32.objects/).
# - gemm_f32: as kernels/gemm_f32.toml builds it (sm_90 and sm_80 cubins);
# - gemm_f32_poisonable: the output declared in place, so tests can pass a NaN-filled one;
# - gemm_f32_sm80_ptx_poisonable: only sm_80 PTX, output in place: a newer GPU JIT-compiles it.
LAYOUT = {
    "gemm_f32": "gemm_f32.vmfb",
    "gemm_f32_poisonable": "poisonable/gemm_f32.vmfb",
    "gemm_f32_sm80_ptx_poisonable": "sm80_ptx/gemm_f32.vmfb",
}


def build_all(out: Path) -> dict[str, Path]:
    paths = {name: out / rel for name, rel in LAYOUT.items()}
    build_three_ways(SPEC, paths["gemm_f32"], paths["gemm_f32_poisonable"], paths["gemm_f32_sm80_ptx_poisonable"])
    return paths


if __name__ == "__main__":
    for name, path in build_all(Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build" / "gpu-tests" / "gemm_f32")).items():
        print(f"{name}: {path}")
