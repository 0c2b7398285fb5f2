"""Modules for the GEMM GPU tests (tests/test_gpu_gemm.py) and benchmark (benchmarks/gemm.py),
built on a CPU machine:
    python -m tests.gemm_artifacts build/gpu-tests/gemm
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "kernels" / "gemm.toml"
# name → path under the artifact folder; each copy has its own folder (each writes gemm.objects/).
# - gemm: as kernels/gemm.toml builds it (sm_90a wgmma cubin, sm_80 mma.sync cubin, PTX);
# - gemm_poisonable: outputs declared in place, so tests can pass NaN-filled outputs;
# - gemm_sm80_ptx_poisonable: only sm_80 PTX, outputs in place. A Hopper GPU JIT-compiles it,
#   so the mma.sync body, which an H100 never picks from `gemm`, is tested there too.
LAYOUT = {
    "gemm": "gemm.vmfb",
    "gemm_poisonable": "poisonable/gemm.vmfb",
    "gemm_sm80_ptx_poisonable": "sm80_ptx/gemm.vmfb",
}


def build_all(out: Path) -> dict[str, Path]:
    from iree_dispatch.archs import parse_archs
    from iree_dispatch.pipeline import build
    from iree_dispatch.spec import load_spec

    spec = load_spec(SPEC)
    paths = {name: out / rel for name, rel in LAYOUT.items()}
    build(spec, paths["gemm"], emit_mlir=paths["gemm"].with_suffix(".mlir"))
    in_place = dataclasses.replace(spec, kernels=tuple(k.with_outputs_in_place() for k in spec.kernels))
    build(in_place, paths["gemm_poisonable"])
    build(dataclasses.replace(in_place, archs=tuple(parse_archs(["sm_80"])), objects="ptx"), paths["gemm_sm80_ptx_poisonable"])
    return paths


if __name__ == "__main__":
    for name, path in build_all(Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build" / "gpu-tests" / "gemm")).items():
        print(f"{name}: {path}")
