"""A spec's module built three ways for its GPU tests (tests/support/artifacts/gemm.py, attention.py, gemm_nt.py,
gemm_f32.py, flash_attention_f32.py): kernels/<name>.toml as it builds, with its outputs declared in place, and that
with only sm_80 PTX."""

from __future__ import annotations

import dataclasses
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def layout(name: str) -> dict[str, str]:
    """Module name → path under the artifact folder; each copy has its own folder (each writes
    <name>.objects/). <name>: as kernels/<name>.toml builds it; <name>_poisonable: the outputs
    declared in place, so tests can pass NaN-filled ones; <name>_sm80_ptx_poisonable: that with
    only sm_80 PTX, which a newer GPU JIT-compiles (so an H100 runs the sm_80 code too)."""
    return {name: f"{name}.vmfb", f"{name}_poisonable": f"poisonable/{name}.vmfb", f"{name}_sm80_ptx_poisonable": f"sm80_ptx/{name}.vmfb"}


def build_all(name: str, out: Path) -> dict[str, Path]:
    """kernels/<name>.toml's three copies under `out`, as layout(name) places them."""
    paths = {module: out / rel for module, rel in layout(name).items()}
    build_three_ways(ROOT / "kernels" / f"{name}.toml", *paths.values())
    return paths


def build_three_ways(spec_path: Path, as_built: Path, poisonable: Path, sm80_ptx_poisonable: Path) -> None:
    """spec_path's module as it builds (its MLIR beside it), a copy with the outputs declared in
    place (tests pass NaN-filled outputs) and that copy with only sm_80 PTX (a newer GPU
    JIT-compiles it)."""
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.core.archs import parse_archs
    from iree_dispatch.frontend.spec_file import load_spec

    spec = load_spec(spec_path)
    build(spec, as_built, emit_mlir=as_built.with_suffix(".mlir"))
    in_place = dataclasses.replace(spec, kernels=tuple(k.with_outputs_in_place() for k in spec.kernels))
    build(in_place, poisonable)
    build(dataclasses.replace(in_place, archs=tuple(parse_archs(["sm_80"])), objects="ptx"), sm80_ptx_poisonable)
