"""The sample, ABI and C++ modules, programs, out= and asynchronous builds that
tests/*/test_gpu*.py load (the other groups have modules of their own here).

The GPU machine has no compiler: build everything with `python -m tests.support.artifacts build/gpu-tests`,
carry build/ along, and the GPU tests pick them up (IREE_DISPATCH_PREBUILT, default
build/gpu-tests). Where the compiler is installed the tests build them themselves.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHAIN_LENGTHS = (1, 10, 100)
AXPBY_CHAIN = 10  # calls in chain_axpby
REVERSE_CHAIN = 3  # calls in chain_reverse: odd, so the result is reversed once
STATIC_SIZE = 1024  # chain_mul_100_static takes exactly this many floats
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
    # programs (iree_dispatch.backend.program), out= kernels, asynchronous builds: tests/backend/test_gpu_program.py
    "samples_out": "out/samples_out.vmfb",
    "samples_async": "async/samples.vmfb",
    **{f"chain_mul_{k}": f"programs/chain_mul_{k}.vmfb" for k in CHAIN_LENGTHS},
    "chain_mul_100_static": "programs/chain_mul_100_static.vmfb",
    "chain_axpby": "programs/chain_axpby.vmfb",
    "chain_mul_10_async": "programs/chain_mul_10_async.vmfb",
    "chain_reverse": "reverse/chain_reverse.vmfb",
}


def with_outputs_in_place(kernel):
    """The same kernel with every fresh output declared in place: the generated function then
    takes the output buffer as an argument, so a test can pass it in filled with NaN. (Outputs
    that IREE allocates itself can't be poisoned from Python: they arrive as fresh memory.)"""
    return kernel.with_outputs_in_place()


def mul_chain(spec, k: int, name: str, static: int | None = None):
    """t = x; k times t = simple_mul(t, y); returns t (= x * y**k, rounded at every step).
    static: the inputs' size, if it is to be fixed (else any size n)."""
    from iree_dispatch.backend.program import Program

    mul = next(kernel for kernel in spec.kernels if kernel.function == "simple_mul")
    p = Program(name)
    x, y = p.input("x", "f32", [static or "n"]), p.input("y", "f32", [static or "n"])
    t = x
    for _ in range(k):
        t = p.call(mul, t, y)
    p.output(t)
    return p


def build_programs(spec, paths: dict[str, Path]) -> None:
    from iree_dispatch.backend.program import Program
    from iree_dispatch.frontend.spec import ModuleSpec

    from .abi import abi_module

    kernels = {k.function: k for k in spec.kernels}
    for k in CHAIN_LENGTHS:
        mul_chain(spec, k, f"chain_mul_{k}").build(spec, paths[f"chain_mul_{k}"])
    mul_chain(spec, 100, "chain_mul_100_static", static=STATIC_SIZE).build(spec, paths["chain_mul_100_static"])
    mul_chain(spec, 10, "chain_mul_10").build(spec, paths["chain_mul_10_async"], asynchronous=True)

    # axpby with a scalar argument and a constant, then an in-place kernel: three outputs.
    p = Program("chain_axpby")
    x, y = p.input("x", "f32", ["n"]), p.input("y", "f32", ["n"])
    alpha = p.scalar("alpha", "float")
    t = x
    for _ in range(AXPBY_CHAIN):
        t = p.call(kernels["axpby"], t, y, alpha, 0.5)
    product = p.call(kernels["simple_mul"], t, y)
    p.output(t, product, p.call(kernels["simple_mul_inplace"], y, product))
    p.build(spec, paths["chain_axpby"])

    # A kernel that is not elementwise: any aliasing of a call's input and output would show.
    abi = abi_module()
    reverse = next(k for k in abi.kernels if k.name == "reverse_f32")
    p = Program("chain_reverse")
    t = p.input("x", "f32", ["n"])
    for _ in range(REVERSE_CHAIN):
        t = p.call(reverse, t)
    p.output(t)
    p.build(ModuleSpec("abi", (reverse,), abi.archs), paths["chain_reverse"])


def build_all(out: Path) -> dict[str, Path]:
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec
    from iree_dispatch.frontend.spec_file import load_spec

    from .abi import abi_module, cxx_module

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
    build_shared_memory_beyond_every_gpu(cxx, paths["shared_too_big"])

    # Both forms of a kernel can't share a module (emit.py names the export after the PTX entry).
    out_kernels = tuple(k.with_outputs_in_place(function=f"{k.function}_out") for k in spec.kernels if k.function in ("simple_mul", "axpby"))
    build(ModuleSpec("samples_out", out_kernels, spec.archs), paths["samples_out"])
    build(spec, paths["samples_async"], asynchronous=True)
    build_programs(spec, paths)
    return paths


def build_shared_memory_beyond_every_gpu(cxx, path: Path) -> None:
    """row_sum asking for 300000 bytes of shared memory, more than any GPU offers. The spec
    check refuses that at build time; it is lifted here (while the spec is made and built) to see
    what a GPU says at run time (the case of PTX for sm_80, limit 163 KB, JIT-compiled for an
    sm_86 GPU, limit 99 KB)."""
    from unittest import mock

    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.core.archs import Arch
    from iree_dispatch.frontend.spec import ModuleSpec

    row_sum = next(k for k in cxx.kernels if k.name == "row_sum")
    with mock.patch.object(Arch, "max_shared_memory", property(lambda self: 1 << 30)):
        build(ModuleSpec("cxx", (dataclasses.replace(row_sum, shared_memory=300000),), cxx.archs), path)
