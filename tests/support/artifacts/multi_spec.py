"""A program calling kernels of two modules (two specs, each with a `k.cu` of its own), for
tests/backend/test_multi_spec.py."""

from __future__ import annotations

from pathlib import Path

SCALE_CU = """
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ out, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = s * x[i];
}
"""
ADD_CU = """
extern "C" __global__ void add(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}
"""
SPEC = """[module]
name = "{module}"
archs = ["sm_80", "sm_90"]

[[kernel]]
name = "{kernel}"
source = "k.cu"
block = [128]
grid = ["ceildiv(n, 128)"]
shape = ["n"]
"""
PROGRAM = """
module @two_modules {
  func.func private @a.scale(tensor<?xf32>, f32) -> tensor<?xf32>
  func.func private @b.add(tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
  func.func @scale_add(%x: tensor<?xf32>, %y: tensor<?xf32>, %s: f32) -> tensor<?xf32> {
    %t = func.call @a.scale(%x, %s) : (tensor<?xf32>, f32) -> tensor<?xf32>
    %r = func.call @b.add(%t, %y) : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
    return %r : tensor<?xf32>
  }
}
"""


def write_sources(root: Path) -> tuple[Path, Path, Path]:
    """(a.toml, b.toml, program.mlir) under `root`; each spec's k.cu in its own folder."""
    specs = []
    for module, kernel, source in (("a", "scale", SCALE_CU), ("b", "add", ADD_CU)):
        (root / module).mkdir(parents=True, exist_ok=True)
        (root / module / "k.cu").write_text(source, encoding="utf-8")
        spec = root / module / f"{module}.toml"
        spec.write_text(SPEC.format(module=module, kernel=kernel), encoding="utf-8")
        specs.append(spec)
    program = root / "two_modules.mlir"
    program.write_text(PROGRAM, encoding="utf-8")
    return specs[0], specs[1], program


def build_all(out: Path) -> dict[str, Path]:
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec_file import load_spec

    a, b, program = write_sources(out / "src")
    vmfb = out / "two_modules.vmfb"
    build([load_spec(a), load_spec(b)], vmfb, program=program, emit_mlir=vmfb.with_suffix(".mlir"))
    return {"two_modules": vmfb}
