"""Where the repository's inputs are and which build tools this machine has. CPU tests need
nvcc and iree-base-compiler (both on every build machine)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES_SPEC = ROOT / "kernels" / "samples.toml"
MIXED_PROGRAM = ROOT / "mlir" / "mixed_invocation.mlir"


def have_compiler() -> bool:
    return importlib.util.find_spec("iree.compiler") is not None


def have_nvcc() -> bool:
    from iree_dispatch.core.errors import ToolchainError
    from iree_dispatch.toolchains import find_nvcc

    try:
        find_nvcc()
        return True
    except ToolchainError:
        return False


needs_build_tools = pytest.mark.skipif(
    not (have_compiler() and (os.environ.get("NVCC") or shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists())),
    reason="needs nvcc and iree-base-compiler",
)
