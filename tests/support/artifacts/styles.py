"""Modules of the real-world-style kernels (tests/kernels/styles.cu), shared by the CPU tests
(tests/frontend/test_styles.py) and the GPU tests (tests/frontend/test_gpu_styles.py), and built for the GPU by
    python -m tests.support.artifacts --only styles build/gpu-tests
"""

from __future__ import annotations

import subprocess
from pathlib import Path

STYLES_CU = Path(__file__).resolve().parents[3] / "tests" / "kernels" / "styles.cu"
ROOT = Path(__file__).resolve().parents[3]
# name → path under the artifact folder; the poisonable copies take every output as an argument.
LAYOUT = {
    "styles_f32": "f32/styles.vmfb",
    "styles_bf16": "bf16/styles.vmfb",
    "styles_f32_poisonable": "f32_poisonable/styles.vmfb",
    "styles_bf16_poisonable": "bf16_poisonable/styles.vmfb",
    "prebuilt_cxx": "prebuilt/prebuilt_cxx.vmfb",
}
FLAGS = {"f32": (), "bf16": ("-DENABLE_BF16",)}


def styles_module(precision: str):
    """Every kernel of styles.cu, declared as a user would: by the names the source gives them."""
    from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

    flags = FLAGS[precision]

    def declare(name: str, **kw):
        return KernelSpec.declare(STYLES_CU, name, nvcc_flags=flags, **kw)

    kernels = (
        declare("layernorm_forward_kernel", block=128, grid="ceildiv(N, 128)",
                shapes={"out": ["N", "C"], "mean": ["N"], "rstd": ["N"], "inp": ["N", "C"], "weight": ["C"], "bias": ["C"]}),
        declare("axpy", block=256, grid="min(ceildiv(n, 256), 1024)", shape=["n"], inplace=["y"]),
        declare("scale_offset", block=256, grid="ceildiv(n, 256)", shape=["n"]),
        declare("ops::square_plus", block=256, grid="ceildiv(n, 256)", shape=["n"]),
        declare("ops::detail::scale<__half>", block=256, grid="ceildiv(n, 256)", shape=["n"]),
        declare("ops::detail::scale<floatX>", block=256, grid="ceildiv(n, 256)", shape=["n"]),
        declare("min_max", block=256, grid="ceildiv(n, 256)", shape=["n"]),
    )
    return ModuleSpec("styles", kernels, nvcc_flags=flags)


def prebuilt_cxx_module(folder: Path):
    """C++ kernels compiled to a cubin (sm_90) and PTX (sm_80) elsewhere, declared by plain and
    namespace-qualified names: found by their mangled symbols."""
    from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec
    from iree_dispatch.toolchains import find_nvcc

    folder.mkdir(parents=True, exist_ok=True)
    objects = [folder / "styles.sm_90.cubin", folder / "styles.sm_80.ptx"]
    for obj, what in zip(objects, ("-cubin", "-ptx")):
        arch = obj.suffixes[0].lstrip(".")
        subprocess.run([str(find_nvcc()), what, f"-arch={arch}", str(STYLES_CU), "-o", str(obj)], check=True, capture_output=True)
    square_plus = KernelSpec.declare(objects, "ops::square_plus", signature="void square_plus(float* out, const float* in, float c, int n)",
                                     block=256, grid="ceildiv(n, 256)", shape=["n"])
    min_max = KernelSpec.declare(objects, "min_max", signature="void min_max(float* lo, float* hi, const float* a, const float* b, int n)",
                                 block=256, grid="ceildiv(n, 256)", shape=["n"])
    return ModuleSpec("prebuilt_cxx", (square_plus, min_max))


def build_all(out: Path) -> dict[str, Path]:
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec import ModuleSpec

    paths = {name: out / rel for name, rel in LAYOUT.items()}
    for precision in FLAGS:
        module = styles_module(precision)
        build(module, paths[f"styles_{precision}"])
        poisonable = ModuleSpec(module.name, tuple(k.with_outputs_in_place() for k in module.kernels), module.archs, module.nvcc_flags)
        build(poisonable, paths[f"styles_{precision}_poisonable"])
    build(prebuilt_cxx_module(out / "prebuilt" / "objects"), paths["prebuilt_cxx"])
    return paths
