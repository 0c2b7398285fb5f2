"""Modules for the fused attention GPU tests (tests/test_gpu_attention.py), built on a CPU machine:
    python -m artifacts.attention build/gpu-tests/attention
"""

from __future__ import annotations

import sys
from pathlib import Path

from .three_ways import build_three_ways

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "kernels" / "attention.toml"
# name → path under the artifact folder; each copy has its own folder (each writes attention.objects/).
# - attention: as kernels/attention.toml builds it (sm_90 and sm_80 cubins);
# - attention_poisonable: the output declared in place, so tests can pass a NaN-filled one;
# - attention_sm80_ptx_poisonable: only sm_80 PTX, output in place: a newer GPU JIT-compiles it.
LAYOUT = {
    "attention": "attention.vmfb",
    "attention_poisonable": "poisonable/attention.vmfb",
    "attention_sm80_ptx_poisonable": "sm80_ptx/attention.vmfb",
}


def build_all(out: Path) -> dict[str, Path]:
    paths = {name: out / rel for name, rel in LAYOUT.items()}
    build_three_ways(SPEC, paths["attention"], paths["attention_poisonable"], paths["attention_sm80_ptx_poisonable"])
    return paths


if __name__ == "__main__":
    for name, path in build_all(Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build" / "gpu-tests" / "attention")).items():
        print(f"{name}: {path}")
