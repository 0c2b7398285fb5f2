"""A spec's module built three ways for its GPU tests (artifacts/gemm.py, artifacts/attention.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path


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
