"""Modules built by each pip-installable toolchain, for tests/toolchains/test_gpu_toolchains.py, built on a
CPU machine:
    python -m tests.support.artifacts --only toolchains build/gpu-tests
One folder per toolchain: NVRTC (`pip install iree-dispatch[nvrtc]`) and the nvcc of the
nvidia-cuda-nvcc wheel (`[nvcc]`), even where a system nvcc exists. A toolchain that is not
installed is left out, with the reason printed; its GPU tests then skip.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TOOLCHAINS = ("nvrtc", "nvcc_wheel")
# name → path under a toolchain's folder. Every module also comes with its outputs declared in
# place (`_poisonable`), so the tests can pass NaN-filled outputs; "ptx" carries only PTX, which
# the driver JIT-compiles: the toolchain's PTX itself runs, not a cubin made from it.
MODULES = {
    "samples": "samples.vmfb",
    "poisonable": "poisonable/samples.vmfb",
    "ptx": "ptx/samples.vmfb",
    "ptx_poisonable": "ptx_poisonable/samples.vmfb",
    "abi": "abi.vmfb",
    "abi_poisonable": "abi_poisonable/abi.vmfb",
    "cxx": "cxx.vmfb",
    "cxx_poisonable": "cxx_poisonable/cxx.vmfb",
    "library": "library/library.vmfb",  # kernels/library.toml: lambdas, INFINITY, f16/bf16
    "library_poisonable": "library_poisonable/library.vmfb",
}


def layout(toolchain: str) -> dict[str, str]:
    return {name: f"{toolchain}/{rel}" for name, rel in MODULES.items()}


def make_toolchain(name: str):
    """The Toolchain called `name`; ToolchainError (saying what to install) if it isn't installed."""
    from iree_dispatch.core.errors import ToolchainError
    from iree_dispatch.toolchains import NvccToolchain, select_toolchain
    from iree_dispatch.toolchains.base import wheel_nvcc

    if name == "nvrtc":
        return select_toolchain("nvrtc")
    nvcc = wheel_nvcc()
    if nvcc is None:
        raise ToolchainError("no nvidia-cuda-nvcc wheel in this Python: pip install 'iree-dispatch[nvcc]'")
    return NvccToolchain(nvcc)


def build_toolchain(name: str, out: Path) -> dict[str, Path]:
    """Every module of MODULES built with toolchain `name` under out/<name>/."""
    from iree_dispatch.backend.pipeline import build
    from iree_dispatch.frontend.spec import ModuleSpec
    from iree_dispatch.frontend.spec_file import load_spec

    from .abi import abi_module, cxx_module

    toolchain = make_toolchain(name)
    paths = {key: out / rel for key, rel in layout(name).items()}
    samples = load_spec(ROOT / "kernels" / "samples.toml")
    modules: dict[str, ModuleSpec] = {
        "samples": samples, "ptx": samples.with_objects("ptx"), "abi": abi_module(), "cxx": cxx_module(),
        "library": load_spec(ROOT / "kernels" / "library.toml"),
    }
    for key, spec in modules.items():
        build(spec, paths[key], toolchain=toolchain)
        poisonable = dataclasses.replace(spec, kernels=tuple(k.with_outputs_in_place() for k in spec.kernels))
        build(poisonable, paths["poisonable" if key == "samples" else f"{key}_poisonable"], toolchain=toolchain)
    return paths


def build_all(out: Path, say: Callable[[str], None] = print) -> dict[str, Path]:
    """Each installed toolchain's modules, keyed "<toolchain>/<module>"."""
    from iree_dispatch.core.errors import ToolchainError

    built: dict[str, Path] = {}
    for name in TOOLCHAINS:
        try:
            make_toolchain(name)
        except ToolchainError as exc:
            say(f"{name}: not built ({str(exc).splitlines()[0]})")
            continue
        paths = build_toolchain(name, out)  # a failure here is a real one: raised
        built.update({f"{name}/{key}": path for key, path in paths.items()})
    return built
