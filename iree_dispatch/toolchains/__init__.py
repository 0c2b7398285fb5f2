"""Stage 2: compile `.cu` sources to PTX, one file per (source, arch); PTX to cubins and fatbins.

Two toolchains behind one interface (`base.Toolchain`):
- nvcc (`nvcc.NvccToolchain`): the CUDA toolkit's, or the one the `nvidia-cuda-nvcc` wheel
  installs into site-packages (`pip install iree-dispatch[nvcc]`), found automatically;
- NVRTC (`nvrtc.NvrtcToolchain`): the `nvidia-cuda-nvrtc` wheel through `cuda-bindings`
  (`pip install iree-dispatch[nvrtc]`), in-process, no toolkit at all.
`select_toolchain()` picks nvcc if one is found, else NVRTC, unless told which.
"""

from __future__ import annotations

from pathlib import Path

from ..core.archs import Arch
from ..core.errors import ToolchainError
from .base import PtxObject, Toolchain, find_nvcc, object_filename
from .nvcc import NvccToolchain
from .nvrtc import NvrtcToolchain

__all__ = ["TOOLCHAINS", "NvccToolchain", "NvrtcToolchain", "PtxObject", "Toolchain", "assemble_cubin", "find_nvcc", "object_filename", "select_toolchain"]

TOOLCHAINS = ("nvcc", "nvrtc")


def select_toolchain(choice: str | Toolchain | None = None) -> Toolchain:
    """`choice`: a Toolchain, "nvcc", "nvrtc", or None/"auto" for nvcc if one is found, else NVRTC."""
    if isinstance(choice, Toolchain):
        return choice
    if choice == "nvcc":
        return NvccToolchain(find_nvcc())
    if choice == "nvrtc":
        return NvrtcToolchain()
    if choice not in (None, "auto"):
        raise ToolchainError(f"unknown toolchain {choice!r}: use one of auto, {', '.join(TOOLCHAINS)}")
    try:
        return NvccToolchain(find_nvcc())
    except ToolchainError as nvcc_missing:
        try:
            return NvrtcToolchain()
        except ToolchainError as nvrtc_missing:
            raise ToolchainError(
                f"no CUDA compiler found.\n  nvcc: {nvcc_missing}\n  NVRTC: {nvrtc_missing}\n"
                "Install one with pip: pip install 'iree-dispatch[nvcc]' (nvcc, needs a host C++ compiler) "
                "or pip install 'iree-dispatch[nvrtc]' (NVRTC, in-process); or install the CUDA toolkit"
            ) from None


def assemble_cubin(ptx: Path, arch: Arch, out: Path, toolchain: str | Toolchain | None = None) -> Path:
    """PTX → cubin for exactly `arch` with `toolchain` (default: the one select_toolchain picks)."""
    return select_toolchain(toolchain).assemble_cubin(ptx, arch, out)

