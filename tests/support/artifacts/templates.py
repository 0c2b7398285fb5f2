"""Modules of template kernels that iree_dispatch instantiates (tests/kernels/templates/) and of
kernels over CUDA vector types (tests/kernels/vectors.cu), shared by the CPU tests
(tests/frontend/test_templates.py, tests/frontend/test_vector_types.py) and the GPU tests
(tests/frontend/test_gpu_templates.py), and built for the GPU by
    python -m tests.support.artifacts --only templates build/gpu-tests
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
KERNELS = ROOT / "tests" / "kernels"
REDUCE_CU = KERNELS / "templates" / "reduce.cu"
EXPLICIT_CU = KERNELS / "templates" / "explicit.cu"
VECTORS_CU = KERNELS / "vectors.cu"
# name → path under the artifact folder; the poisonable copies take every output as an argument.
LAYOUT = {
    "templates_nvcc": "nvcc/templates.vmfb",
    "templates_nvrtc": "nvrtc/templates.vmfb",
    "templates_poisonable": "poisonable/templates.vmfb",
    "vectors": "vectors/vectors.vmfb",
    "vectors_poisonable": "vectors_poisonable/vectors.vmfb",
}


def templates_module(caller_outputs: bool = False):
    """Template kernels named by their instantiations, none of them written in the sources but
    shift<float, 3> (explicit.cu instantiates it itself). caller_outputs: every output taken as
    an argument (the reductions' partial sums then size the grid: `blocks`)."""
    from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

    def reduce(name: str, block: int):
        # Each block sums 2 * block elements (per grid stride) into its partial sum.
        blocks = "blocks" if caller_outputs else f"ceildiv(n, {2 * block})"
        return KernelSpec.declare(REDUCE_CU, name, block=block, grid=blocks, shared_memory="block_x * 4", shapes={"g_idata": ["n"], "g_odata": [blocks]},
                                  readonly=["g_idata"], **({"inplace": ["g_odata"]} if caller_outputs else {"outputs": ["g_odata"]}))

    def elementwise(source: Path, name: str, block: int = 256):
        kernel = KernelSpec.declare(source, name, block=block, grid=f"ceildiv(n, {block})", shape=["n"])
        return kernel.with_outputs_in_place() if caller_outputs else kernel

    kernels = (
        reduce("reduce<float, 256, false>", 256),
        reduce("reduce<float, 128, true>", 128),  # n a power of two, at least 256
        elementwise(REDUCE_CU, "add_n<float>"),  # N = 4, the default
        elementwise(REDUCE_CU, "add_n<int, 7>"),
        elementwise(REDUCE_CU, "scale_tiles"),  # every parameter defaulted: BLOCK = 256
        elementwise(REDUCE_CU, "scale_tiles<128>", block=128),
        elementwise(EXPLICIT_CU, "shift<float, 3>"),
        elementwise(EXPLICIT_CU, "shift<int, 5>"),
    )
    return ModuleSpec("templates", kernels)


def vectors_module(caller_outputs: bool = False):
    """Kernels over float4, half2, uchar4, int2 and __half2 pointers: shapes count vectors.
    caller_outputs: every output taken as an argument."""
    from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

    kernels = tuple(
        KernelSpec.declare(VECTORS_CU, name, block=128, grid="ceildiv(n, 128)", shape=["n"])
        for name in ("scale_f4", "add_h2", "invert_rgba", "swap_lanes<int2>", "swap_lanes<__half2>")
    )
    return ModuleSpec("vectors", tuple(k.with_outputs_in_place() for k in kernels) if caller_outputs else kernels)


def build_all(out: Path) -> dict[str, Path]:
    from iree_dispatch.backend.pipeline import build

    paths = {name: out / rel for name, rel in LAYOUT.items()}
    build(templates_module(), paths["templates_nvcc"], toolchain="nvcc")
    build(templates_module(), paths["templates_nvrtc"], toolchain="nvrtc")
    build(templates_module(caller_outputs=True), paths["templates_poisonable"])
    build(vectors_module(), paths["vectors"])
    build(vectors_module(caller_outputs=True), paths["vectors_poisonable"])
    return paths

