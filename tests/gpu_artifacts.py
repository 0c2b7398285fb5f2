"""The modules the GPU tests load, built on a CPU machine.

The GPU machine has no compiler: build there with
    python -m tests.gpu_artifacts build/gpu-tests
carry build/ along, and the GPU tests pick them up (IREE_DISPATCH_PREBUILT, default
build/gpu-tests). Where the compiler is installed the tests build them themselves.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# name → path under the artifact folder; variants of module `samples` get their own folders
# so their PTX objects (samples.objects/) don't overwrite each other.
LAYOUT = {
    "samples": "samples.vmfb",
    "mixed_invocation": "mixed_invocation.vmfb",
    "samples_sm100_first": "sm100_first/samples.vmfb",
    "samples_only_sm100": "only_sm100/samples.vmfb",
    "broken": "broken.vmfb",
    "poisonable": "poisonable/samples.vmfb",
    "broken_poisonable": "poisonable/broken.vmfb",
    "abi": "abi.vmfb",
    "abi_poisonable": "poisonable/abi.vmfb",
    "cxx": "cxx.vmfb",
    "cxx_poisonable": "poisonable/cxx.vmfb",
    "shared_too_big": "shared_too_big/cxx.vmfb",
}


def with_outputs_in_place(kernel):
    """The same kernel with every fresh output declared in place: the generated function then
    takes the output buffer as an argument, so a test can pass it in filled with NaN. (Outputs
    that IREE allocates itself can't be poisoned from Python: they arrive as fresh memory.)"""
    from iree_dispatch.spec import KernelSpec

    return KernelSpec.declare(
        kernel.source,
        kernel.name,
        block=list(kernel.block),
        grid=[str(g) for g in kernel.grid],
        shapes={t.name: [str(d) for d in t.shape] for t in kernel.tensors},
        inplace=[t.name for t in kernel.tensors if t.writable],
        shared_memory=kernel.shared_memory,
        function=kernel.function,
    )


def build_all(out: Path) -> dict[str, Path]:
    from iree_dispatch.pipeline import build
    from iree_dispatch.spec import KernelSpec, ModuleSpec, load_spec

    from .abi_modules import abi_module, cxx_module

    spec = load_spec(ROOT / "kernels" / "samples.toml")
    paths = {name: out / rel for name, rel in LAYOUT.items()}
    build(spec, paths["samples"])
    build(spec, paths["mixed_invocation"], program=ROOT / "mlir" / "mixed_invocation.mlir")
    build(spec.with_archs(["sm_100", "sm_90", "sm_80"]), paths["samples_sm100_first"])
    build(spec.with_archs(["sm_100"]), paths["samples_only_sm100"])
    broken = KernelSpec.declare(ROOT / "tests" / "kernels" / "broken.cu", "mul_even_only", block=64, grid="ceildiv(n, 128)", shape=["n"])
    build(ModuleSpec("broken", (broken,)), paths["broken"])
    build(ModuleSpec("samples", tuple(map(with_outputs_in_place, spec.kernels)), spec.archs), paths["poisonable"])
    build(ModuleSpec("broken", (with_outputs_in_place(broken),)), paths["broken_poisonable"])
    abi = abi_module()
    build(abi, paths["abi"])
    build(ModuleSpec("abi", tuple(map(with_outputs_in_place, abi.kernels))), paths["abi_poisonable"])
    cxx = cxx_module()
    build(cxx, paths["cxx"])
    build(ModuleSpec("cxx", tuple(map(with_outputs_in_place, cxx.kernels))), paths["cxx_poisonable"])
    build(shared_memory_beyond_every_gpu(cxx), paths["shared_too_big"])
    return paths


def shared_memory_beyond_every_gpu(cxx):
    """row_sum asking for 300000 bytes of shared memory, more than any GPU offers. The spec
    check refuses that at build time; it is lifted here to see what a GPU says at run time
    (the case of PTX for sm_80, limit 163 KB, JIT-compiled for an sm_86 GPU, limit 99 KB)."""
    from unittest import mock

    from iree_dispatch.archs import Arch
    from iree_dispatch.spec import ModuleSpec

    row_sum = next(k for k in cxx.kernels if k.name == "row_sum")
    with mock.patch.object(Arch, "max_shared_memory", property(lambda self: 1 << 30)):
        return ModuleSpec("cxx", (dataclasses.replace(row_sum, shared_memory=300000),), cxx.archs)


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build" / "gpu-tests")
    for name, path in build_all(target).items():
        print(f"{name}: {path}")
