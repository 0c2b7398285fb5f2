"""Stage 2: compile `.cu` sources to PTX, one file per (source, arch); PTX to cubins and fatbins.

Two toolchains behind one interface (`base.Toolchain`):
- nvcc (`nvcc.NvccToolchain`): the CUDA toolkit's, or the one the `nvidia-cuda-nvcc` wheel
  installs into site-packages (`pip install iree-dispatch[nvcc]`), found automatically;
- NVRTC (`nvrtc.NvrtcToolchain`): the `nvidia-cuda-nvrtc` wheel through `cuda-bindings`
  (`pip install iree-dispatch[nvrtc]`), in-process, no toolkit at all.
`select_toolchain()` picks nvcc if one is found and its host compiler can run, else NVRTC,
unless told which (a $NVCC that is no nvcc is an error, not a reason to pick NVRTC).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..core.archs import Arch
from ..core.errors import ToolchainError
from .base import PtxObject, Toolchain, find_nvcc, host_compiler_problem, object_filename, set_default_progress, warn_once
from .nvcc import NvccToolchain
from .nvrtc import NvrtcToolchain

__all__ = ["TOOLCHAINS", "NvccToolchain", "NvrtcToolchain", "PtxObject", "Toolchain", "assemble_cubin", "find_nvcc", "host_compiler_problem", "object_filename",
           "select_toolchain", "set_default_progress"]

TOOLCHAINS = ("nvcc", "nvrtc")


def select_toolchain(choice: str | Toolchain | None = None) -> Toolchain:
    """`choice`: a Toolchain, "nvcc", "nvrtc", or None/"auto": nvcc if one is found and it can
    run its host compiler (gcc/g++: base.host_compiler_problem, checked once per process), else
    NVRTC, saying once why nvcc was passed over."""
    if isinstance(choice, Toolchain):
        return choice
    if choice == "nvcc":
        return NvccToolchain(find_nvcc())
    if choice == "nvrtc":
        return NvrtcToolchain()
    if choice not in (None, "auto"):
        raise ToolchainError(f"unknown toolchain {choice!r}: use one of auto, {', '.join(TOOLCHAINS)}")
    try:
        nvcc = find_nvcc()
        problem = host_compiler_problem()
    except ToolchainError as nvcc_missing:
        if os.environ.get("NVCC"):
            raise  # an nvcc named by $NVCC is used or the build stops: never another compiler instead
        nvcc, problem = None, str(nvcc_missing)
    if nvcc is not None and problem is None:
        return NvccToolchain(nvcc)
    try:
        nvrtc = NvrtcToolchain()
    except ToolchainError as nvrtc_missing:
        if nvcc is not None:
            raise ToolchainError(
                f"no CUDA compiler that can run here: nvcc ({nvcc}) has {problem}; and NVRTC: {nvrtc_missing}. "
                "Install g++ (or set NVCC_CCBIN to a C++ compiler) for nvcc, or pip install 'iree-dispatch[nvrtc]' (NVRTC, no host compiler needed)"
            ) from None
        raise ToolchainError(
            f"no CUDA compiler found.\n  nvcc: {problem}\n  NVRTC: {nvrtc_missing}\n"
            "Install one with pip: pip install 'iree-dispatch[nvcc]' (nvcc, needs a host C++ compiler) "
            "or pip install 'iree-dispatch[nvrtc]' (NVRTC, in-process); or install the CUDA toolkit"
        ) from None
    if nvcc is not None:
        warn_once(f"nvcc ({nvcc}) can't run here, {problem}; using NVRTC instead (install g++ or set NVCC_CCBIN to use nvcc; --toolchain nvrtc silences this)")
    return nvrtc


def assemble_cubin(ptx: Path, arch: Arch, out: Path, toolchain: str | Toolchain | None = None, progress: Callable[[str], None] | None = None) -> Path:
    """PTX → cubin for exactly `arch` with `toolchain` (default: the one select_toolchain picks);
    the assembler's line goes to `progress` (default: base.set_default_progress's)."""
    tc = select_toolchain(toolchain)
    if progress is not None:
        tc.progress = progress
    return tc.assemble_cubin(ptx, arch, out)

