"""Modules for the kernel-library GPU tests (tests/library/test_gpu_library.py) and the kernel
benchmark (benchmarks/kernels.py), built on a CPU machine:
    python -m tests.support.artifacts --only library build/gpu-tests
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "kernels" / "library.toml"
# name → path under the artifact folder. The second copy declares every output in place, so
# that a test can pass outputs filled with NaN: memory IREE allocates can't be poisoned.
# Each copy has its own folder, because both write library.objects/ beside their vmfb.
LAYOUT = {"library": "library.vmfb", "library_poisonable": "poisonable/library.vmfb"}


def build_all(out: Path) -> dict[str, Path]:
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec import ModuleSpec
    from iree_dispatch.frontend.spec_file import load_spec

    spec = load_spec(SPEC)
    paths = {name: out / rel for name, rel in LAYOUT.items()}
    build(spec, paths["library"], emit_mlir=paths["library"].with_suffix(".mlir"))
    in_place = ModuleSpec(spec.name, tuple(k.with_outputs_in_place() for k in spec.kernels), spec.archs)
    build(in_place, paths["library_poisonable"])
    return paths
